"""Fuzzing the decoders a peer can reach: random mutations of a valid payload of every codec (CRC recomputed, so the
checksum is no shield) and of every control message kind either decode to something the kit can use or raise the
kit's own ``PeerError`` naming the peer. Any other exception (IndexError, OverflowError, RecursionError, ...) fails.
Seeded and a few hundred mutations each, so a failure reproduces and the file runs in seconds."""
from __future__ import annotations

import contextlib
import json
import random
import struct
import time
import zlib
from typing import Any, Callable, Iterator

import pytest
import torch
from lone_synchroniser import contribution, from_island_1, synchroniser

from islands_kit.comm import control, peer
from islands_kit.comm.codecs import HEADER_BYTES, NonFiniteError, encode_bytes, get_codec
from islands_kit.comm.messages import APPLY, APPLY_SCHEMA, CONTRIBUTION, CONTRIBUTION_SCHEMA, DECISION, DECISION_SCHEMA
from islands_kit.comm.peer import PayloadSpec, PeerError
from islands_kit.comm.torch_dist.frames import WORLD_SCHEMA as _WORLD_SCHEMA
from islands_kit.config.codec_registry import CODECS

N = 250  # mutations per decoder
PEER = 7


def _with_crc(b: bytearray) -> bytes:
    """The payload with its header's CRC-32 recomputed over its (mutated) data."""
    if len(b) >= HEADER_BYTES:
        struct.pack_into("<I", b, HEADER_BYTES - 4, zlib.crc32(bytes(b[HEADER_BYTES:])))
    return bytes(b)


def _mutate_payload(raw: bytes, rng: random.Random) -> bytes:
    b = bytearray(raw)
    how = rng.randrange(6)
    if how == 0:  # a few bytes of the data (scales, indices, codes)
        for _ in range(rng.randint(1, 4)):
            b[rng.randrange(HEADER_BYTES, len(b))] = rng.randrange(256)
    elif how == 1:  # one header field: codec id, numel, block size (magic and version included)
        off, fmt = rng.choice([(5, "<B"), (8, "<Q"), (16, "<I"), (4, "<B"), (6, "<H")])
        struct.pack_into(fmt, b, off, rng.choice([0, 1, 2, 255, 2 ** 31, rng.randrange(2 ** (8 * struct.calcsize(fmt)))])
                         % 2 ** (8 * struct.calcsize(fmt)))
    elif how == 2:  # cut short or extended
        b = b[: rng.randrange(len(b))] if rng.random() < 0.5 else b + bytes(rng.randrange(1, 64))
    elif how == 3:  # every in-block index / code byte in a range set to one value
        i = rng.randrange(HEADER_BYTES, len(b))
        b[i: i + rng.randint(1, 16)] = bytes([rng.randrange(256)]) * len(b[i: i + 16])
    elif how == 4:  # a scale set to a special float
        if len(b) >= HEADER_BYTES + 4:
            struct.pack_into("<f", b, HEADER_BYTES, rng.choice([float("nan"), float("inf"), -1.0, 1e38, 0.0]))
    else:  # random bytes anywhere
        for _ in range(rng.randint(1, 8)):
            b[rng.randrange(len(b))] = rng.randrange(256)
    return _with_crc(b)


@contextlib.contextmanager
def _timed(raw: bytes) -> Iterator[None]:
    """Every fuzzed input is decoded (or refused) within 0.5 s plus 1 s per MB of it (a loaded box's slack)."""
    t0 = time.perf_counter()
    try:
        yield
    finally:
        took = time.perf_counter() - t0
        assert took <= 0.5 + len(raw) / 2 ** 20, f"{len(raw)} bytes took {took:.3f} s"


@pytest.mark.parametrize("name", CODECS)
def test_payload_mutations_raise_only_peer_errors(name: str) -> None:
    rng = random.Random(f"payload-{name}")
    block = 64
    p = get_codec(name, block).encode(torch.randn(300, generator=torch.Generator().manual_seed(0)), stochastic=True,
                                      generator=torch.Generator().manual_seed(1))
    raw, spec = encode_bytes(p), PayloadSpec.of(p)
    refused = 0
    for k in range(N):
        bad = _mutate_payload(raw, rng)
        try:
            with _timed(bad):
                got = peer.read_payload(bad, spec, PEER)
        except PeerError as e:
            assert e.peer == PEER and f"from rank {PEER}" in str(e) and "\n" not in str(e), (k, e)
            refused += 1
            continue
        out = get_codec(name, block).decode(got)  # accepted: it must decode, whatever its values
        assert out.shape == (300,) and out.dtype == torch.float32, k
    assert refused > 0  # the mutations do reach the checks


# -- control messages -----------------------------------------------------------------------------------------------

TOKENS = [b"1e999", b"-1e999", b"NaN", b"Infinity", b"9" * 30, b"-" + b"9" * 25, b"[", b"]", b"{", b"}", b'"', b",",
          b":", b"true", b"null", b"1.0", b'"v":1,', b"[" * 2000, b"\\", b"\xff", b"0.5", b"-1"]

KINDS: dict[str, tuple[Any, Any]] = {
    CONTRIBUTION: (CONTRIBUTION_SCHEMA, {"tick": 8, "fragment": 0, "round": 0, "status": "fresh", "sent_s": 8.0,
                                         "tokens": 512, "steps": 8, "inner_steps": 8}),
    DECISION: (DECISION_SCHEMA, {"fragment": 1, "round": 3, "merge_s": 9.25}),
    APPLY: (APPLY_SCHEMA, {"fragment": 1, "round": 3, "merge_s": 9.25, "outer_step": True, "landing_s": None}),
    "ledger": (_WORLD_SCHEMA, {"island": 1, "leader": True, "sent": {"fragments": 4096},
                               "records": [[[3, 0, 1], [1.5, 1.75, 4096, 0, 1, "fragments"]]],
                               "clock": {"now": {"1": 9.5}, "busy": {"1": 8.0}, "idle": {"1": 1.5}}}),
    "checkpoint.steps": ([int], [4, 8, 12]),
    "checkpoint.error": (control.Opt(str), "rank 1: no shard"),
}


def _mutate_json(raw: bytes, rng: random.Random) -> bytes:
    b = bytearray(raw)
    for _ in range(rng.randint(1, 3)):
        how = rng.randrange(4)
        i = rng.randrange(len(b) + 1)
        if how == 0:  # a hostile token in place of a few bytes
            b[i: i + rng.randint(0, 4)] = rng.choice(TOKENS)
        elif how == 1:  # a byte
            if b:
                b[min(i, len(b) - 1)] = rng.randrange(256)
        elif how == 2:  # a range deleted
            del b[i: i + rng.randint(1, 8)]
        else:  # a piece of the message repeated (duplicate keys, extra items)
            j = rng.randrange(len(b) + 1)
            b[i:i] = b[min(i, j): max(i, j)][:40]
    return bytes(b)


@pytest.mark.parametrize("kind", list(KINDS))
def test_control_mutations_raise_only_peer_errors(kind: str) -> None:
    schema, body = KINDS[kind]
    raw = control.encode(kind, body)
    rng = random.Random(f"control-{kind}")
    refused = 0
    for k in range(N):
        bad = _mutate_json(raw, rng)
        try:
            with _timed(bad):
                got = peer.read_control(bad, kind, schema, PEER)
        except PeerError as e:
            assert e.peer == PEER and f"from rank {PEER}" in str(e) and "\n" not in str(e), (k, bad, e)
            refused += 1
            continue
        json.dumps(got, allow_nan=False)  # accepted: plain, finite data of the schema
    assert refused > N // 2


def test_contribution_mutations_reach_the_synchroniser_as_a_drop_or_a_merge() -> None:
    """End to end on the synchroniser: a mutated CONTRIBUTION (body and payload) either merges, drops island 1
    (naming it; the round is decided without it) or, when a block scale was made non-finite (the ``nan`` attack, a
    value the wire leaves to the defences), ends in the NonFiniteError the run reads as divergence."""
    rng = random.Random("contribution-e2e")
    outcomes: dict[str, int] = {"merged": 0, "dropped": 0, "diverged": 0}
    mutate: list[Callable[[bytes, bytes], tuple[bytes, bytes]]] = [
        lambda c, d: (_mutate_json(c, rng), d), lambda c, d: (c, _mutate_payload(d, rng))]
    for _ in range(30):
        s, box, tick = synchroniser()
        from_island_1(box, rng.choice(mutate)(*contribution(s, tick)))
        try:
            s.after_tick(tick)
        except NonFiniteError:
            outcomes["diverged"] += 1
            continue
        if box.lost:
            assert set(box.lost) == {1} and ("rank 1" in box.lost[1] or "island 1" in box.lost[1]), box.lost
            outcomes["dropped"] += 1
        else:
            outcomes["merged"] += 1
        assert s.merge_log and s.merge_log[0]["round"] == 0
    assert outcomes["dropped"] > 0 and outcomes["merged"] > 0, outcomes
