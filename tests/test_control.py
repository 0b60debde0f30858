"""No code runs because a peer or a file said so: control messages are schema-checked JSON, checkpoints load with
``torch.load(weights_only=True)``. The torch.distributed side (a peer rank sending a pickle) is in
test_torch_dist.py."""
from __future__ import annotations

import io
import pickle

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
    from islands_kit.checkpoint import FILENAME, FORMAT, load_checkpoint

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
    from islands_kit.presets import get_preset
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
