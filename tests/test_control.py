"""No code runs because a peer or a file said so: control messages are schema-checked JSON, checkpoints load with
``torch.load(weights_only=True)``. The torch.distributed side (a peer rank sending a pickle) is in
test_torch_dist.py."""
from __future__ import annotations

import io
import math
import pickle
import random
from typing import Any

import pytest
import torch

from islands_kit.comm import control
from islands_kit.comm.control import ControlError, MapOf, Opt
from islands_kit.config import ConfigError


class MakesMarker:
    """Unpickling this creates a file: the proof that a loader ran code from the data."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


SCHEMA = {"island": int, "leader": bool, "sent": MapOf(int), "records": [((int, int), (float, str))], "note": Opt(str)}
BODY = {"island": 3, "leader": True, "sent": {"fragments": 12}, "records": [[[0, 1], [0.1 + 0.2, "routing"]]],
        "note": None}


def test_round_trip_is_exact():
    got = control.decode(control.encode("ledger", BODY), "ledger", SCHEMA, peer=2)
    assert got == BODY and got["records"][0][1][0] == 0.1 + 0.2  # floats survive JSON bit for bit


def test_unpickling_a_control_message_is_refused_and_runs_nothing(tmp_path):
    marker = tmp_path / "pwned"
    evil = pickle.dumps(MakesMarker(str(marker)))
    with pytest.raises(ControlError, match=r"control message 'ledger' from rank 5: not a UTF-8 JSON control message"):
        control.decode(evil, "ledger", SCHEMA, peer=5)
    assert not marker.exists()
    pickle.loads(evil)  # the same bytes given to pickle do run code: the test would catch a loader that unpickles
    assert marker.exists()


@pytest.mark.parametrize("raw, match", [
    (control.encode("ledger", BODY)[:-7], "not a UTF-8 JSON control message"),  # truncated
    (b"x" * 101, "101 bytes is over the 100-byte limit"),  # oversized: refused before parsing
    (control.encode("steps", BODY), "kind 'steps' where 'ledger' was expected"),
    (b'{"v":2,"kind":"ledger","body":{}}', "version 2, this kit speaks version 1"),
    (control.encode("ledger", {**BODY, "island": "3"}), r"body.island: must be an integer"),
    (control.encode("ledger", {**BODY, "leader": 1}), r"body.leader: must be a boolean"),
    (control.encode("ledger", {**BODY, "sent": {"fragments": 1.5}}), r"body.sent.fragments: must be an integer"),
    (control.encode("ledger", {**BODY, "records": [[[0, 1], [0.5]]]}), r"body.records\[0\]\[1\]: must be a list of 2"),
    (control.encode("ledger", {k: v for k, v in BODY.items() if k != "note"}), "body: must be an object with keys"),
    (b'{"v":1,"kind":"ledger","body":NaN}', "not a UTF-8 JSON control message"),
])
def test_malformed_messages_are_refused_with_one_line_naming_the_peer(raw, match):
    with pytest.raises(ControlError, match=match) as e:
        control.decode(raw, "ledger", SCHEMA, peer=1, max_bytes=100 if raw == b"x" * 101 else control.MAX_BYTES)
    assert "from rank 1" in str(e.value) and "\n" not in str(e.value)


def test_the_sender_refuses_what_is_not_strict_json():
    with pytest.raises(ValueError):
        control.encode("ledger", {"x": float("nan")})
    with pytest.raises(TypeError):
        control.encode("ledger", {"x": MakesMarker("/nonexistent")})


def test_a_crafted_checkpoint_is_refused_and_runs_nothing(tmp_path):
    from islands_kit.train.checkpoint import FILENAME, FORMAT, load_checkpoint

    marker = tmp_path / "pwned"
    buf = io.BytesIO()
    torch.save({"format": FORMAT, "step": 1, "ledger": MakesMarker(str(marker))}, buf)
    (tmp_path / FILENAME).write_bytes(buf.getvalue())
    with pytest.raises(ConfigError, match="holds objects other than tensors and plain data .* refused") as e:
        load_checkpoint(tmp_path)
    assert not marker.exists() and "\n" not in str(e.value)
    torch.load(tmp_path / FILENAME, weights_only=False)  # the file really does run code when loaded unsafely
    assert marker.exists()


@pytest.mark.slow
def test_checkpoints_are_plain_data(tmp_path):
    """Every checkpoint a run writes loads with weights_only=True (the loader uses exactly that)."""
    from islands_kit.config import apply_overrides
    from islands_kit.config.presets import get_preset
    from islands_kit.run import run_experiment

    for exp in ("two_site", "eight_cell"):
        cfg = apply_overrides(get_preset(exp, "smoke"), {"steps": "4", "checkpoint_every": "3"})
        run_experiment(cfg, tmp_path / exp)
        state = torch.load(tmp_path / exp / "checkpoint.pt", weights_only=True)
        assert state["step"] == 3 and state["transport"]["ledger"]["timeline"]


@pytest.mark.slow
def test_one_process_transport_checks_control_messages_too():
    """The one-process default of Transport.gather_control goes through the same encode/decode: a body off its own
    schema fails here, not first under torchrun."""
    from islands_kit.comm.transport import LocalTransport

    tr = LocalTransport(2)
    assert tr.gather_control("checkpoint.steps", [2, 4], [int]) == [[2, 4]]
    with pytest.raises(ControlError, match=r"'checkpoint.steps' from rank 0: body\[1\]: must be an integer"):
        tr.gather_control("checkpoint.steps", [2, "4"], [int])
    with tr.world_view() as view:
        assert view is tr


def _depth_by_regex(raw: bytes) -> int:
    """The plain reference: strip string literals with a regex, then count brackets (quadratic on an unterminated
    string of escaped quotes, so only for well-formed messages)."""
    import re

    stripped = re.sub(rb'"(?:[^"\\]|\\.)*"', b"", raw)
    depth = deepest = 0
    for c in stripped:
        depth += (c in b"[{") - (c in b"]}")
        deepest = max(deepest, depth)
    return deepest


def test_nesting_depth_agrees_with_the_regex_reference_across_chunk_boundaries():
    import json
    import random

    rng = random.Random(0)
    leaves = ['a"[{\\', "\\\\", '\\"]]', 1, 2.5, None, 'x\\\\"[', "}}", ""]

    def gen(d: int):
        r = rng.random()
        if d > 5 or r < 0.3:
            return rng.choice(leaves)
        if r < 0.65:
            return [gen(d + 1) for _ in range(rng.randint(0, 3))]
        return {f"{rng.choice(leaves)}{i}": gen(d + 1) for i in range(rng.randint(0, 3))}

    for _ in range(300):
        raw = json.dumps(gen(0)).encode()
        want = _depth_by_regex(raw)
        for chunk in (1, 2, 3, 7, 1 << 20):  # the state carried between chunks: backslash runs, quotes, depth
            assert control.nesting_depth(raw, chunk) == want, (raw, chunk)


WORST = {  # hostile messages that cost a regex or a recursive parser more than their size
    "escaped quotes, unterminated": lambda n: b'"' + b'\\"' * (n // 2),
    "quotes": lambda n: b'"' * n,
    "backslashes": lambda n: b"\\" * n,
    "open brackets": lambda n: b"[" * n,
    "brackets inside a string": lambda n: b'"' + b"[" * n + b'"',
}


@pytest.mark.parametrize("name", sorted(WORST))
def test_decoding_is_linear_in_the_input(name):
    """Every hostile control message is refused within a budget proportional to its size: 0.5 s plus 1 s per MB (the
    regex that stripped strings before took 6-11 s for the 32 KB unterminated string of escaped quotes)."""
    import time

    for n in (32_000, 1 << 20):
        raw = WORST[name](n)
        t0 = time.perf_counter()
        try:
            control.decode(raw, "ledger", [int], 3)
        except ControlError as e:
            assert "rank 3" in str(e)
        took = time.perf_counter() - t0
        assert took <= 0.5 + len(raw) / 2 ** 20, f"{name}: {len(raw)} bytes decoded in {took:.2f} s"


# -- a limit per kind -------------------------------------------------------------------------------------------------

def _kinds() -> dict[str, Any]:
    """Every control-message kind the kit sends with a schema of bounded parts (the ledger's is open-ended: its
    receiver computes the bound, ``comm/torch_dist/world.share_limit``)."""
    from islands_kit.comm import messages as m
    from islands_kit.train import checkpoint

    return {m.CONTRIBUTION: m.CONTRIBUTION_SCHEMA, m.DECISION: m.DECISION_SCHEMA, m.APPLY: m.APPLY_SCHEMA,
            "checkpoint.steps": checkpoint.STEPS_SCHEMA, "checkpoint.error": checkpoint.ERROR_SCHEMA}


def _extreme(s: Any, rng: random.Random | None = None) -> Any:
    """The longest value matching schema ``s`` (with ``rng``: a random one)."""
    if isinstance(s, control.Opt):
        return _extreme(s.inner, rng) if rng is None or rng.random() < 0.8 else None
    if s is bool:
        return False if rng is None else rng.random() < 0.5
    if isinstance(s, control.Int):
        lo, hi = (control.INT_MIN if s.lo is None else s.lo), (control.INT_MAX if s.hi is None else s.hi)
        if rng is not None:
            return rng.choice([lo, hi, rng.randint(lo, hi), rng.randint(lo, min(hi, lo + 1000))])
        return lo if len(str(lo)) > len(str(hi)) else hi
    if isinstance(s, control.Num):
        lo = -math.inf if s.lo is None else s.lo
        tiny = -2.2250738585072014e-308 if lo < 0 else 2.2250738585072014e-308  # the longest reprs
        return tiny if rng is None else rng.choice([tiny, rng.uniform(max(lo, 0.0), 1e300), 0.1 + rng.random()])
    if isinstance(s, control.OneOf):
        return max(s.values, key=len) if rng is None else rng.choice(s.values)
    if isinstance(s, control.Str):
        return "\U0001F600" * s.n if rng is None else "".join(rng.choice('a"\\\U0001F600\n') for _ in range(rng.randint(0, s.n)))
    if isinstance(s, control.Items):
        return [_extreme(s.item, rng) for _ in range(s.n if rng is None else rng.randint(0, s.n))]
    if isinstance(s, dict):
        return {k: _extreme(v, rng) for k, v in s.items()}
    raise TypeError(s)


def test_every_kind_has_a_limit_its_longest_honest_message_fits():
    """A shared 64 MB limit let a contribution-sized kind carry 64 MB (20 s and 2.2 GB to parse before its schema
    refused it). Each kind's limit is now its schema's longest compact encoding: the longest honest body fits it to
    the byte (no slack a peer could fill), and so do 2000 random ones."""
    rng = random.Random(0)
    limits = {kind: control.max_encoded(kind, schema) for kind, schema in _kinds().items()}
    assert limits == {"decoupled.contribution": 271, "decoupled.decision": 138, "decoupled.apply": 191,
                      "checkpoint.steps": 362, "checkpoint.error": 49195}
    for kind, schema in _kinds().items():
        longest = _extreme(schema)
        assert len(control.encode(kind, longest)) <= limits[kind]
        assert control.decode(control.encode(kind, longest), kind, schema, 1) == longest
        for _ in range(400):
            body = _extreme(schema, rng)
            assert len(control.encode(kind, body)) <= limits[kind] and control.decode(control.encode(kind, body), kind, schema, 1) == body
    # the bound is tight where a value can reach it (integers at int64's ends, strings of astral characters)
    assert len(control.encode("checkpoint.error", _extreme(_kinds()["checkpoint.error"]))) == limits["checkpoint.error"]
    assert control.max_encoded("ledger", [int]) is None and control.limit("ledger", [int]) == control.MAX_BYTES


def test_refusing_an_oversized_message_costs_nothing_and_the_largest_honest_one_little():
    """A contribution of just under the old shared 64 MB limit (valid JSON, a list of 32 million items: it parsed
    before its schema refused it) is refused from its length before a byte is parsed:
    the figures in docs/threat-model.md ('a limit per kind') are these bounds."""
    import time
    import tracemalloc

    from islands_kit.comm.messages import CONTRIBUTION, CONTRIBUTION_SCHEMA
    from islands_kit.comm.transport import LocalTransport

    raw = b'{"v":1,"kind":"decoupled.contribution","body":{"tick":[' + b"0," * ((32 << 20) - 64) + b"0]}}"  # < 64 MB
    wire = LocalTransport(2)
    wire.post_bytes(1, 0, CONTRIBUTION, raw, b"")
    tracemalloc.start()
    t0 = time.perf_counter()
    with pytest.warns(RuntimeWarning, match=r"from rank 1: 67108795 bytes is over the 271-byte limit"):
        assert wire.receive(0, 1, CONTRIBUTION, CONTRIBUTION_SCHEMA) is None
    took, peak = time.perf_counter() - t0, tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert took < 0.05 and peak < 1 << 20, (took, peak)
    for kind, schema in _kinds().items():  # the worst inputs at each kind's own limit: well under a millisecond each
        n = control.max_encoded(kind, schema)
        assert n is not None
        for make in WORST.values():
            t0 = time.perf_counter()
            with pytest.raises(ControlError):
                control.decode(make(n)[:n], kind, schema, 1)
            assert time.perf_counter() - t0 < 0.05
