"""A compromised island on the wire: every value it sends is typed, finite, bounded and attributed before it is used
(``comm/peer.py``, ``comm/control.py``). In process: the decoders directly, and the decoupled synchroniser reading
island 1's raw bytes from the in-process wire with the transport's policy (a refused island is dropped). The torchrun
check that every rank names the peer is the last test."""
from __future__ import annotations

import math
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from lone_synchroniser import contribution, from_island_1, synchroniser

from islands_kit.comm import control, peer
from islands_kit.comm.codecs import Payload, encode_bytes, get_codec
from islands_kit.comm.messages import CONTRIBUTION, CONTRIBUTION_SCHEMA
from islands_kit.comm.peer import ControlError, PayloadError, PayloadSpec
from islands_kit.comm.torch_dist.frames import WORLD_SCHEMA as _WORLD_SCHEMA
from islands_kit.config.codec_registry import CODEC_SPECS

DEEP = b"[" * 3000 + b"]" * 3000  # ~6 KB: past Python's recursion limit in the json parser


def _envelope(body: bytes, kind: bytes = b"ledger", v: bytes = b"1") -> bytes:
    return b'{"v":' + v + b',"kind":"' + kind + b'","body":' + body + b"}"


def _refused(raw: bytes, schema: Any, field: str, match: str, kind: str = "ledger") -> None:
    """The parser's own checks, past the kind's length limit (which would refuse most of these first)."""
    with pytest.raises(ControlError, match=match) as e:
        control.decode(raw, kind, schema, peer=3, max_bytes=control.MAX_BYTES)
    assert e.value.peer == 3 and e.value.field == field
    assert "from rank 3" in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("raw, field, match", [
    (_envelope(b"1e999"), "json", "number 1e999 is not finite"),  # parsed to inf by plain json.loads
    (_envelope(b"-1e999"), "json", "number -1e999 is not finite"),
    (_envelope(b"1" + b"0" * 400), "json", "outside the int64 range"),  # 10**400: refused from its digits
    (_envelope(b"9223372036854775808"), "json", "outside the int64 range"),  # 2**63
    (_envelope(b"1", v=b"true"), "v", "version True"),  # True == 1 in Python
    (_envelope(b"1", v=b"1.0"), "v", "version 1.0"),
    (b'{"v":1,"v":1,"kind":"ledger","body":1}', "json", "duplicate key 'v'"),
    (_envelope(b'{"a":1,"a":2}'), "json", "duplicate key 'a'"),
    (_envelope(DEEP), "nesting", "nested 3001 levels deep, over the limit of 16; refused before parsing"),
    (_envelope(b'{"a":' * 1200 + b"1" + b"}" * 1200), "nesting", "over the limit of 16"),
])
def test_hostile_json_is_refused_naming_the_peer(raw, field, match):
    _refused(raw, int, field, match)


def test_deep_nesting_is_refused_by_the_ledger_gather_and_the_decoupled_receive():
    """The two schemas a hostile rank meets: the ledger gather (torch_dist) and the decoupled contribution."""
    _refused(DEEP, _WORLD_SCHEMA, "nesting", "refused before parsing")
    _refused(DEEP, CONTRIBUTION_SCHEMA, "nesting", "refused before parsing", kind=CONTRIBUTION)
    # brackets inside strings do not nest
    assert control.decode(control.encode("ledger", "[" * 3000), "ledger", str, peer=0) == "[" * 3000


def test_integer_and_number_fields_are_bounded_by_the_schema():
    good = {"tick": 8, "fragment": 0, "round": 0, "status": "fresh", "sent_s": 8.0, "tokens": 512, "steps": 8,
            "inner_steps": 8}
    assert control.decode(control.encode(CONTRIBUTION, good), CONTRIBUTION, CONTRIBUTION_SCHEMA, 1) == good
    for key, value, rule in [("tokens", -1, "must be an integer in"), ("tokens", 1.0, "must be an integer"),
                             ("tokens", True, "must be an integer"), ("sent_s", -0.5, "must be a number in"),
                             ("status", "fresh ", "must be one of fresh|absent|not_ready")]:
        with pytest.raises(ControlError, match=rf"from rank 1: body.{key}: {rule}") as e:
            control.decode(control.encode(CONTRIBUTION, {**good, key: value}), CONTRIBUTION, CONTRIBUTION_SCHEMA, 1)
        assert e.value.field == f"body.{key}"
    with pytest.raises(ControlError, match=r"body.island: must be an integer in \[0, "):
        control.decode(control.encode("ledger", {"island": -1}), "ledger", {"island": control.Int(0)}, 2)
    # a key a peer chose appears quoted in the error (no newline can reach the message)
    with pytest.raises(ControlError, match=r"body\['a\\nb'\]: must be an integer") as e:
        control.decode(control.encode("x", {"a\nb": "1"}), "x", control.MapOf(int), 2)
    assert "\n" not in str(e.value)


# -- payloads -------------------------------------------------------------------------------------------------------

def _topk(block_size: int = 64, numel: int = 200) -> tuple[Payload, PayloadSpec]:
    p = get_codec("top16_int4", block_size).encode(torch.randn(numel, generator=torch.Generator().manual_seed(0)))
    return p, PayloadSpec.of(p)


def _with_index(p: Payload, at: int, value: int) -> bytes:
    nb = -(-p.numel // p.block_size)
    data = p.data.clone()
    data[4 * nb + at] = value
    return encode_bytes(Payload(p.codec, p.numel, p.block_size, data))  # the CRC is recomputed: it is valid


@pytest.mark.parametrize("at, value, why", [
    (0, 255, "index past every block"),
    (3, 100, "crosses into the next block (block of 64)"),  # before the check it decoded into block 1, silently
    (2, 0, "out of order (a repeat of an earlier index)"),
    (4 * 3, 8, "partial last block (8 values) indexed at its length"),  # numel 200 = 3 blocks of 64 + 8
])
def test_topk_indices_are_range_checked_before_any_indexing(at, value, why):
    p, spec = _topk()
    with pytest.raises(PayloadError, match=r"payload from rank 4: indices: block \d+ holds in-block indices") as e:
        peer.read_payload(_with_index(p, at, value), spec, peer=4)
    assert e.value.peer == 4 and e.value.field == "indices", why


def test_codes_off_the_grid_are_refused_but_non_finite_scales_pass_to_the_defences():
    x = torch.randn(256, generator=torch.Generator().manual_seed(1))
    for name, code in [("int8", 255), ("int4", 15), ("fp8_e4m3", 0x7F), ("fp8_e4m3", 0xFF)]:
        p = get_codec(name, 128).encode(x)
        data = p.data.clone()
        data[8] = code if name != "int4" else code | (code << 4)  # the first codes after the two scales
        with pytest.raises(PayloadError, match=rf"from rank 2: codes: value 0 has code {code}, not on the {name} grid"):
            peer.read_payload(encode_bytes(Payload(name, 256, 128, data)), PayloadSpec.of(p), peer=2)
    # the `nan` attack (a NaN block scale) is a value: it reaches the defences, as in the simulator
    p = get_codec("int4", 128).encode(x)
    data = p.data.clone()
    data[:4] = torch.tensor([float("nan")], dtype=torch.float32).view(torch.uint8)
    got = peer.read_payload(encode_bytes(Payload("int4", 256, 128, data)), PayloadSpec.of(p), peer=2)
    assert torch.isnan(get_codec("int4", 128).decode(got)[:128]).all()


SCALED = [s.name for s in CODEC_SPECS.values() if s.block_scaled or (s.sparse and s.values != "fp32")]


@pytest.mark.parametrize("name", SCALED)
def test_a_finite_scale_that_overflows_on_decode_is_refused_by_every_scaled_codec(name):
    """3e38 is finite, so it once passed Codec.check in all 16 scaled codecs and turned into inf only when decoded;
    the largest finite scale whose decode stays finite still passes."""
    assert len(SCALED) == 16
    codec = get_codec(name, 64)
    p = codec.encode(torch.randn(256, generator=torch.Generator().manual_seed(1)))
    assert codec.check(p) is None
    for scale, refused in [(3e38, True), (torch.finfo(torch.float32).max / codec.spec.qmax / 2, False)]:
        data = p.data.clone()
        data[:4] = torch.tensor([scale], dtype=torch.float32).view(torch.uint8)  # block 0's scale comes first
        raw = encode_bytes(Payload(name, 256, 64, data))
        if refused:
            with pytest.raises(PayloadError, match=r"from rank 2: scales: block 0's scale 3e\+38 overflows float32"):
                peer.read_payload(raw, PayloadSpec.of(p), peer=2)
        else:
            assert torch.isfinite(codec.decode(peer.read_payload(raw, PayloadSpec.of(p), peer=2))).all()


def test_payload_header_must_be_what_the_receiver_expects():
    p = get_codec("int8", 128).encode(torch.ones(300))
    spec = PayloadSpec.of(p)
    assert torch.equal(peer.read_payload(encode_bytes(p), spec, 1).data, p.data)
    huge = Payload("fp32", 1, 2 ** 31, torch.zeros(4, dtype=torch.uint8))  # would size a 8 GiB decode buffer
    other = get_codec("int4", 128).encode(torch.ones(300))
    for raw, field in [(encode_bytes(huge), "codec"), (encode_bytes(other), "codec"),
                       (encode_bytes(Payload("int8", 300, 64, get_codec("int8", 64).encode(torch.ones(300)).data)),
                        "block_size"),
                       (encode_bytes(get_codec("int8", 128).encode(torch.ones(299))), "numel"),
                       (encode_bytes(p)[:-1], "data"), (b"IKCP", "header")]:
        with pytest.raises(PayloadError, match=rf"payload from rank 1: {field}: ") as e:
            peer.read_payload(raw, spec, 1)
        assert e.value.field == field and "\n" not in str(e.value)


@pytest.mark.parametrize("t", [1e30, float("nan"), float("inf"), -1.0])
def test_a_peers_clock_is_finite_non_negative_and_not_far_ahead(t):
    with pytest.raises(PayloadError, match=r"island 1's all_reduce from rank 2: sent_at: simulated time") as e:
        peer.read_clock(t, 10.0, 2, "sent_at", "island 1's all_reduce")
    assert e.value.field == "sent_at"
    assert peer.read_clock(500.0, 10.0, 2, "sent_at") == 500.0  # a slower island, far ahead: fine
    assert peer.read_clock(0.5, 0.0, 2, "sent_at") == 0.5  # the receiver's clock at 0: one second of slack


# -- the decoupled synchroniser drops an island whose message is refused --------------------------------------------

def test_an_honest_contribution_is_merged():
    s, box, tick = synchroniser()
    from_island_1(box, contribution(s, tick))
    s.after_tick(tick)
    assert not box.lost and s.merge_log[0]["on_time"] == [0, 1]


@pytest.mark.parametrize("hostile, match", [
    (lambda s, t: contribution(s, t, sent_s=1e30), r"from rank 1: sent_s: simulated time 1e\+30 must be finite"),
    (lambda s, t: contribution(s, t, sent_s=t + 0.5), r"sent_s: .* is not a send time of this round"),
    # longer than a contribution can be: refused by its kind's limit before parsing (an integer of 400 digits, or
    # 3000 levels of nesting, past Python's recursion limit, used to reach the parser's own checks)
    (lambda s, t: (contribution(s, t)[0].replace(b'"tokens":', b'"tokens":1' + b"0" * 400 + b',"x":'),
                   contribution(s, t)[1]), r"from rank 1: 555 bytes is over the 271-byte limit"),
    (lambda s, t: (DEEP, b""), r"from rank 1: 6000 bytes is over the 271-byte limit"),
    (lambda s, t: (contribution(s, t)[0].replace(b'"tokens":', b'"tokens":1' + b"0" * 40 + b',"x":'),
                   contribution(s, t)[1]), "from rank 1: .*outside the int64 range"),
    (lambda s, t: (contribution(s, t)[0].replace(b'"steps"', b'"tick":0,"steps"'), contribution(s, t)[1]),
     "from rank 1: .*duplicate key 'tick'"),
    (lambda s, t: (contribution(s, t)[0].replace(b'"v":1', b'"v":true'), contribution(s, t)[1]),
     "from rank 1: version True"),
    (lambda s, t: (contribution(s, t)[0], encode_bytes(get_codec("int8", 128).encode(torch.ones(136)))),
     "from rank 1: codec: int8 numel=136 block_size=128 where this rank expects int4"),
    (lambda s, t: (contribution(s, t, status="absent")[0], contribution(s, t)[1]), "status: absent with a payload"),
    (lambda s, t: contribution(s, t, round=5), "round: names tick"),
    # a zero-token fresh contribution used to reach the merge's weighted mean and end the run with a ValueError
    (lambda s, t: contribution(s, t, tokens=0), "tokens: a fresh contribution of 0 tokens in 8 steps"),
    (lambda s, t: contribution(s, t, steps=0), "tokens: a fresh contribution of 512 tokens in 0 steps"),
])
def test_a_refused_contribution_drops_the_island_and_the_run_goes_on(hostile, match):
    s, box, tick = synchroniser()
    from_island_1(box, hostile(s, tick))
    s.after_tick(tick)  # no exception: the synchroniser goes on without island 1 (quorum 1)
    assert set(box.lost) == {1} and re.search(match, box.lost[1]) and "\n" not in box.lost[1], box.lost
    rec = s.merge_log[0]
    assert rec["absent"] == [1] and rec["on_time"] == [0] and rec["quorum_met"]


@pytest.mark.parametrize("over, match", [
    ({"inner_steps": 2 ** 63 - 1}, r"from rank 1: body.inner_steps: must be an integer in \[0, 9007199254740992\]"),
    ({"tokens": 2 ** 53 + 1}, r"from rank 1: body.tokens: must be an integer in \[0, 9007199254740992\]"),
    ({"inner_steps": 2 ** 53}, r"inner_steps: 9007199254740992 is more than the \d+ the schedule allows by tick"),
    ({"steps": 10 ** 6}, r"steps: 1000000 since the last contribution is more than its inner_steps"),
])
def test_a_counter_beyond_the_schedule_drops_the_island_and_is_never_counted(over, match):
    """inner_steps = 2^63 - 1 once made the driver's settle_lost count that many steps (a loop without end); a count
    is now bounded by the schema (2^53) and by the ticks the schedule has had, and a refused one is not kept."""
    s, box, tick = synchroniser()
    from_island_1(box, contribution(s, tick, **over))
    s.after_tick(tick)
    assert set(box.lost) == {1} and re.search(match, box.lost[1]), box.lost
    assert s.lost() == {1: 0}  # what the driver's settle_lost counts: the last accepted report, not the hostile one


@pytest.mark.parametrize("scale, reason", [(1e15, "norm_vs_others"), (float("nan"), "non_finite")])
def test_the_synchroniser_checks_values_and_drops_the_island_naming_it(scale, reason):
    """Decoupled mode had no value defence: a block scale of 1e15 (valid CRC) was merged and the island kept. With
    faults.defense the synchroniser runs lock-step's checks on each contribution and drops a flagged island."""
    from islands_kit.config import apply_overrides
    from islands_kit.config.presets import get_preset
    from islands_kit.faults import attach

    s, box, tick = synchroniser()
    attach(s.hooks, apply_overrides(get_preset("two_site", "smoke"), {"sync.mode": "decoupled", "faults.defense": "auto"}),
           s.transport.local_islands)
    body, _ = contribution(s, tick)
    x = torch.full((s.global_params[0].numel(),), 0.01)
    p = s.codec.encode(x)
    data = p.data.clone()
    data[:4] = torch.tensor([scale], dtype=torch.float32).view(torch.uint8)  # a compromised encoder writes the scale
    from_island_1(box, (body, encode_bytes(Payload(p.codec, p.numel, p.block_size, data))))
    s.after_tick(tick)
    assert set(box.lost) == {1} and box.lost[1].startswith(f"faults.defense: island 1's outer gradient of fragment 0 "
                                                           f"at step {tick} is refused: {reason}"), box.lost
    rec = s.merge_log[0]
    assert rec["on_time"] == [0] and rec["absent"] == [1]
    assert torch.isfinite(s.global_params[0]).all()


def test_a_zero_token_contribution_alone_in_its_round_is_refused_not_a_crash():
    """The synchroniser's island absent and island 1 fresh with 0 tokens: the merge's weights summed to zero and
    ``combine`` raised an uncaught ValueError that ended the run."""
    s, box, tick = synchroniser()
    s.tokens_since[0][0] = 0
    from_island_1(box, contribution(s, tick, tokens=0))
    s.after_tick(tick)
    assert set(box.lost) == {1} and "island 1's decoupled.contribution for tick 8" in box.lost[1]
    assert "tokens: a fresh contribution of 0 tokens" in box.lost[1] and not s.merge_log[0]["quorum_met"]


def test_a_final_send_time_past_the_last_landing_is_refused():
    """At the end an island sends once its last merges have landed, so the synchroniser, which priced every one of
    those landings, knows the latest honest send time. A final ``sent_s`` of 1000 s (inside the wire's 1000x bound)
    held the final merge and the run's clock until then: sim_wall_clock_s 1000.1 s against 0.31 s honest."""
    from islands_kit.comm.messages import CONTRIBUTION as KIND
    from islands_kit.comm.transport import LocalTransport
    from islands_kit.config import apply_overrides
    from islands_kit.config.presets import get_preset
    from islands_kit.run import run_experiment

    post = LocalTransport.post

    def hostile(self, src, dst, kind, body, payload=None):  # island 1's final contribution claims a far send time
        if kind == KIND and src == 1 and body["tick"] == 17:
            body = {**body, "sent_s": 1000.0}
        return post(self, src, dst, kind, body, payload)

    cfg = apply_overrides(get_preset("two_site", "smoke"), {"sync.mode": "decoupled", "steps": "17"})
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(LocalTransport, "post", hostile)
        with pytest.warns(RuntimeWarning, match=r"island 1 is lost.*sent_s: 1000.0 is not a send time of this round "
                                                r"\(due at [\d.]+, or at the end up to [\d.]+, when the last merge"):
            res = run_experiment(cfg)
    assert res["sim_wall_clock_s"] < 1.0 and set(res["decoupled"]["lost_islands"]) == {1}


def test_a_topk_contribution_with_a_bad_index_drops_the_island():
    s, box, tick = synchroniser(codec="top16_int4", codec_block_size=64)
    p = s.codec.encode(torch.randn(136, generator=torch.Generator().manual_seed(0)))
    from_island_1(box, (contribution(s, tick)[0], _with_index(p, 3, 100)))
    s.after_tick(tick)
    assert "from rank 1: indices: block 0 holds in-block indices" in box.lost[1]


# -- under torchrun: every rank names the peer ----------------------------------------------------------------------

HOSTILE_PAYLOAD_WORKER = r"""
# 2 ranks, lock-step all_reduce. Rank 1 is compromised: its header claims sent_at = 1e30, then NaN; then it sends a
# top-k payload with a valid CRC and an in-block index that crosses into the next block; then a frame longer than the
# operation's; then an honest round.
import sys
import torch
from islands_kit.comm.codecs import Payload, get_codec
from islands_kit.comm.torch_dist import DistributedError, TorchDistTransport
from islands_kit.comm.distributed import RankLayout, init_from_env
from islands_kit.config.presets import get_preset

def say(line):  # one write per line: the ranks share one stdout pipe
    sys.stdout.write(line + "\n")
    sys.stdout.flush()

init_from_env()
dt = TorchDistTransport(RankLayout.for_world(get_preset("two_site", "smoke"), 2), None)
me = dt.island
codec = get_codec("top16_int4", 64)
for name in ("clock_1e30", "clock_nan", "topk_index", "oversized", "honest"):
    n = 400 if me == 1 and name == "oversized" else 200  # a longer frame: gloo used to abort the process on it
    p = codec.encode(torch.randn(n, generator=torch.Generator().manual_seed(0)))
    saved = dt.clock.now[me]
    if me == 1 and name.startswith("clock"):
        dt.clock.now[me] = 1e30 if name == "clock_1e30" else float("nan")
    if me == 1 and name == "topk_index":
        data = p.data.clone()
        data[4 * 4 + 3] = 100  # block 0's 4th index: past the block of 64, inside the next one
        p = Payload(p.codec, p.numel, p.block_size, data)
    try:
        h = dt.all_reduce("fragments", {me: p}, {me: 1.0})
        dt.clock.now[me] = saved
        h.wait(me)
        say(f"accepted {name} on rank {dt.rank}")
    except DistributedError as e:
        assert "\n" not in str(e)
        say(f"refused {name} on rank {dt.rank} : {e}")
    dt.clock.now[me] = saved
"""


@pytest.mark.slow
def test_torchrun_every_rank_names_the_hostile_peer(tmp_path):
    """Lock-step: a payload header with sent_at 1e30 or NaN, and a top-k payload with a valid CRC and an index
    crossing into the next block, are refused with one line naming island 1, rank 1 and the field; a frame of another
    length is refused before gloo sees it; an honest round after them still works."""
    script = tmp_path / "hostile_payload.py"
    script.write_text(HOSTILE_PAYLOAD_WORKER)
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    env.update(OMP_NUM_THREADS="1", ISLANDS_KIT_DIST_TIMEOUT_S="60", PYTHONUNBUFFERED="1")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", "--max-restarts=0",
           str(script)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    lines = proc.stdout.splitlines()
    who = "island 1's all_reduce #{} on 'fragments' from rank 1"
    for seq, name, field in [(0, "clock_1e30", "sent_at: simulated time 1e+30"),
                             (1, "clock_nan", "sent_at: simulated time nan"),
                             (2, "topk_index", "indices: block 0 holds in-block indices")]:
        hit = [line for line in lines if line.startswith(f"refused {name} on rank 0 :")]
        assert len(hit) == 1 and f"{who.format(seq)}: {field}" in hit[0], lines
    # rank 1 refuses its own NaN and bad index too (every rank decodes every payload)
    assert any(line.startswith("refused clock_nan on rank 1 :") for line in lines), lines
    assert any(line.startswith("refused topk_index on rank 1 :") for line in lines), lines
    # a frame of another length is refused before gloo receives it (it used to SIGABRT the process), on both ranks,
    # each naming the other island (with two, neither can tell which one is wrong)
    for rank, other in ((0, 1), (1, 0)):
        hit = [line for line in lines if line.startswith(f"refused oversized on rank {rank} :")]
        assert len(hit) == 1 and (f"all_reduce #3 on 'fragments': island {other} (rank {other}) announced a frame of"
                                  in hit[0]) and "refused before it is received" in hit[0], lines
    assert "accepted honest on rank 0" in lines and "accepted honest on rank 1" in lines, lines


def test_the_clock_bound_is_absolute_and_does_not_compound():
    """A peer at the relative limit at every sync used to multiply the receiver's clock by 1000 each time (1.5e30 s
    after 10 syncs); the run's horizon, fixed from its config, does not move with the clock the peer pushed."""
    horizon = 1e6
    now, refused = 0.0, None
    for sync in range(10):
        t = peer.CLOCK_LEAD * (now + 1.0)  # the most the relative bound allows
        try:
            now = peer.read_clock(t, now, 2, "sent_at", "island 1's all_reduce", horizon)
        except PayloadError as e:
            refused = (sync, str(e))
            break
    assert refused is not None and refused[0] == 1 and "the run's horizon from its config" in refused[1]
    assert now <= horizon


def test_every_run_gets_a_finite_horizon_from_its_config():
    from islands_kit.config import LinkConfig
    from islands_kit.config.presets import get_preset
    from islands_kit.train.experiment import Experiment

    cfg = get_preset("two_site", "smoke")
    ex = Experiment(cfg)
    slowest = max(ex.step_s.values())
    assert cfg.steps * slowest * peer.CLOCK_LEAD < ex.transport.horizon_s < math.inf
    assert ex.transport.horizon_s == peer.clock_horizon(cfg.steps, slowest, cfg.link, 4 * ex.params_total, 2)
    # an intermittent link's contact period widens it: an honest transfer may wait that long
    assert peer.clock_horizon(10, 1.0, LinkConfig(contact_period_s=60.0, contact_fraction=0.5), 0, 2) > \
        peer.clock_horizon(10, 1.0, LinkConfig(), 0, 2)


# -- under torchrun: the decoupled mailbox's lengths -------------------------------------------------------------------

MAILBOX_WORKER = r"""
# 2 ranks, decoupled messages. Rank 1 (island 1) is compromised; argv[1] says how it lies about a CONTRIBUTION:
# "announce": its header announces 64 MB of control bytes (the kind's limit is 271);
# "longer": its header announces the honest lengths, then it sends 4096 more bytes than announced.
import sys, time
import torch
import torch.distributed as dist
from islands_kit.comm.messages import CONTRIBUTION, CONTRIBUTION_SCHEMA
from islands_kit.comm.torch_dist import TorchDistTransport
from islands_kit.comm.torch_dist.frames import channel_id
from islands_kit.comm.distributed import RankLayout, init_from_env
from islands_kit.config.presets import get_preset

def say(line):
    sys.stdout.write(line + "\n")
    sys.stdout.flush()

init_from_env()
dt = TorchDistTransport(RankLayout.for_world(get_preset("two_site", "smoke"), 2), None, decoupled=True)
body = {"tick": 8, "fragment": 0, "round": 0, "status": "absent", "sent_s": 8.0, "tokens": 0, "steps": 0,
        "inner_steps": 8}
if dt.island == 1:
    from islands_kit.comm import control
    raw = control.encode(CONTRIBUTION, body)
    announced = (64 << 20) if sys.argv[1] == "announce" else len(raw)
    extra = 4096 if sys.argv[1] == "longer" else 0
    head = torch.tensor([0, channel_id(CONTRIBUTION), announced, 0], dtype=torch.int64)
    msg = torch.frombuffer(bytearray(raw + b" " * extra), dtype=torch.uint8)
    g = dt._pair_groups[0]
    works = [dist.isend(head, 0, group=g, tag=0), dist.isend(msg, 0, group=g, tag=1)]  # kept: a dropped one is lost
    time.sleep(5)  # the receiver decides meanwhile
    say("sender done")
else:
    t0 = time.perf_counter()
    got = dt.receive(0, 1, CONTRIBUTION, CONTRIBUTION_SCHEMA)
    say(f"receiver: got {got} in {time.perf_counter() - t0:.3f} s; lost: {dt.lost.get(1)}")
sys.stdout.flush()
import os
os._exit(0)  # the lie left a send pending: skip the process group's teardown
"""


def _mailbox_run(tmp_path, how: str) -> subprocess.CompletedProcess:
    script = tmp_path / "mailbox.py"
    script.write_text(MAILBOX_WORKER)
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    env.update(OMP_NUM_THREADS="1", ISLANDS_KIT_DIST_TIMEOUT_S="30", PYTHONUNBUFFERED="1",
               PYTHONPATH=os.pathsep.join([str(Path(__file__).resolve().parents[1]), env.get("PYTHONPATH", "")]))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", "--max-restarts=0",
           str(script), how]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=180)


@pytest.mark.slow
def test_torchrun_a_message_announced_over_its_kinds_limit_is_refused_unread(tmp_path):
    """The header's announced length is held to the kind's limit before a buffer is allocated or a byte received:
    the synchroniser drops the island, naming the limits."""
    proc = _mailbox_run(tmp_path, "announce")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    line = next(x for x in proc.stdout.splitlines() if x.startswith("receiver:"))
    assert "got None" in line and "announced 67108864 + 0 bytes, over its kind's limits of 271 (control) + 0" in line
    assert "refused before it is read" in line


@pytest.mark.slow
def test_torchrun_a_frame_longer_than_announced_aborts_the_receiver_a_documented_limit(tmp_path):
    """Not defended, and documented (docs/threat-model.md, 'Not defended: a peer that sends more than it
    announced'): gloo checks a frame's size against the buffer posted for it inside its own I/O thread and aborts
    the process (SIGABRT) when the frame is longer. Whatever buffer a receiver posts, a peer can send more, so no
    receive over gloo can be made safe against it: the receiving process dies without a kit error."""
    proc = _mailbox_run(tmp_path, "longer")
    assert proc.returncode != 0
    assert "Received data size doesn't match expected size" in proc.stderr and "SIGABRT" in proc.stderr, proc.stderr[-4000:]
    assert not any(x.startswith("receiver:") for x in proc.stdout.splitlines())
