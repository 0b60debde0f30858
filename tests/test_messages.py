"""The point-to-point wire of decoupled mode (``Transport.post`` / ``receive``, ``comm/messages.py``) in one
process: messages travel as bytes through the same decoders as under torchrun, a refused or missing message loses
its sender, and the simulator's decoupled run sends every message a torchrun run sends."""
from __future__ import annotations

import collections
import warnings

import pytest
import torch

from islands_kit.comm import control
from islands_kit.comm.codecs import encode_bytes, get_codec
from islands_kit.comm.messages import (
    APPLY,
    CONTRIBUTION,
    CONTRIBUTION_SCHEMA,
    DECISION,
    DECISION_SCHEMA,
    contribution_fault,
    read_apply,
    read_decision,
)
from islands_kit.comm.peer import ControlError, PayloadSpec, PeerError
from islands_kit.comm.transport import LocalTransport, decode
from islands_kit.config import apply_overrides
from islands_kit.config.presets import get_preset
from islands_kit.run import run_experiment

BODY = {"tick": 8, "fragment": 1, "round": 0, "status": "fresh", "sent_s": 8.0, "tokens": 512, "steps": 8,
        "inner_steps": 8}


def test_a_message_crosses_as_bytes_and_arrives_in_order() -> None:
    wire = LocalTransport(3)
    codec = get_codec("int8")
    x = torch.linspace(-1, 1, 64)
    wire.post(1, 0, CONTRIBUTION, BODY, codec.encode(x))
    wire.post(1, 0, DECISION, {"fragment": 1, "round": 0, "merge_s": 9.5})
    body, payload = wire.receive(0, 1, CONTRIBUTION, CONTRIBUTION_SCHEMA, PayloadSpec("int8", 64, codec.block_size))
    assert body == BODY and payload is not None
    assert torch.equal(decode(payload), decode(codec.encode(x)))
    assert wire.receive(0, 1, DECISION, DECISION_SCHEMA) == ({"fragment": 1, "round": 0, "merge_s": 9.5}, None)
    assert not wire.lost_islands()


def test_a_refused_or_missing_message_loses_its_sender() -> None:
    wire = LocalTransport(3)
    wire.post(1, 0, DECISION, {"fragment": 1, "round": 0, "merge_s": 9.5})
    with pytest.warns(RuntimeWarning, match="island 1 is lost"):  # another kind than the receiver reads
        assert wire.receive(0, 1, CONTRIBUTION, CONTRIBUTION_SCHEMA) is None
    assert wire.lost_islands() == {1} and "decoupled.contribution" in wire.lost[1]
    wire.post(0, 1, DECISION, {"fragment": 0, "round": 0, "merge_s": 1.0})  # nothing goes to a lost island
    assert not wire._mail.get((0, 1))
    with pytest.warns(RuntimeWarning, match="island 2 is lost.*none was posted"):
        assert wire.receive(0, 2, CONTRIBUTION, CONTRIBUTION_SCHEMA) is None
    with pytest.raises(PeerError, match="none was posted"):  # the synchroniser's messages are required
        wire.receive(1, 0, DECISION, DECISION_SCHEMA, required=True)
    with pytest.raises(ValueError, match="island 5 is not held by this process"):
        wire.post(5, 0, DECISION, {"fragment": 0, "round": 0, "merge_s": 1.0})


def test_a_payload_must_be_what_the_receiver_expects() -> None:
    wire = LocalTransport(2)
    wire.post_bytes(1, 0, CONTRIBUTION, control.encode(CONTRIBUTION, BODY),
                    encode_bytes(get_codec("int8").encode(torch.ones(64))))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert wire.receive(0, 1, CONTRIBUTION, CONTRIBUTION_SCHEMA, PayloadSpec("int4", 64, 64)) is None
    assert "codec" in wire.lost[1]


@pytest.mark.parametrize("over, final, why", [
    ({}, False, None),
    ({"round": 3}, False, "round: names tick 8, fragment 1, round 3"),
    ({"status": "absent"}, False, "status: absent with a payload"),
    ({"status": "not_ready"}, True, "status: not_ready with a payload"),
    ({"sent_s": 7.5}, False, "sent_s: 7.5 is not a send time of this round"),
    ({"sent_s": 9.0}, True, None),  # at the end an island sends once its last merges landed
    ({"status": "fresh", "tokens": 0}, False, "tokens: a fresh contribution of 0 tokens"),
    ({"sent_s": 1e9}, False, "sent_s"),  # beyond the wire's clock bound
])
def test_contribution_fault_names_the_rule(over: dict, final: bool, why: str | None) -> None:
    got = contribution_fault({**BODY, **over}, object(), 1, (8, 1, 0), 8.0, final)  # type: ignore[arg-type]
    if why is None:
        assert got is None
    else:
        assert got is not None and why in got and "island 1" in got and "\n" not in got


def test_a_final_send_time_is_bounded_by_the_last_landing() -> None:
    """At the end an island sends once the merges sent to it have landed: ``latest``, the last landing the
    synchroniser priced, bounds the send time (a later one would hold the final merge and the clock)."""
    body = {**BODY, "sent_s": 9.0}
    assert contribution_fault(body, object(), 1, (8, 1, 0), 8.0, True, latest=9.5) is None  # type: ignore[arg-type]
    got = contribution_fault(body, object(), 1, (8, 1, 0), 8.0, True, latest=8.5)  # type: ignore[arg-type]
    assert got is not None and "sent_s: 9.0 is not a send time of this round (due at 8.0, or at the end up to 8.5" in got
    assert contribution_fault(body, object(), 1, (8, 1, 0), 8.0, True, latest=0.0) is not None  # type: ignore[arg-type]


def test_an_island_refuses_a_synchroniser_out_of_step() -> None:
    wire = LocalTransport(2)
    wire.post(0, 1, DECISION, {"fragment": 0, "round": 2, "merge_s": 4.0})
    with pytest.raises(ControlError, match="round: decided fragment 0, round 2 where fragment 0, round 1 was due"):
        read_decision(wire, 1, (0, 1), final=False)
    wire.post(0, 1, DECISION, {"fragment": 0, "round": 1, "merge_s": None})
    with pytest.raises(ControlError, match="merge_s: none for fragment 0, round 1, a regular round"):
        read_decision(wire, 1, (0, 1), final=False)
    wire.post(0, 1, APPLY, {"fragment": 0, "round": 1, "merge_s": 4.0, "outer_step": True, "landing_s": 4.5})
    with pytest.raises(ControlError, match="outer_step: True without a payload"):
        read_apply(wire, 1, (4.0, 0, 1), PayloadSpec("int8", 8, 8))


def _decoupled(**sets: object):
    cfg = get_preset("two_site", "smoke")
    return apply_overrides(cfg, {"threads": 1, "progress": False, "steps": 24, "eval_every": 24, "sync.H": 4,
                                 "sync.mode": "decoupled", "link.preset": "intra-dc", **sets})


def test_the_simulator_sends_every_message_a_torchrun_run_sends(monkeypatch: pytest.MonkeyPatch) -> None:
    """Island 1 of a simulated decoupled run talks to the synchroniser only through the wire: one CONTRIBUTION and
    one DECISION per round, one APPLY per merge (torchrun sends the same; tests/test_torch_dist.py checks the numbers
    are equal), every one read back."""
    sent: collections.Counter[tuple[int, int, str]] = collections.Counter()
    post_bytes = LocalTransport.post_bytes

    def count(self, src, dst, kind, raw, data):  # type: ignore[no-untyped-def]
        sent[(src, dst, kind)] += 1
        post_bytes(self, src, dst, kind, raw, data)

    monkeypatch.setattr(LocalTransport, "post_bytes", count)
    res = run_experiment(_decoupled())
    merges = res["decoupled"]["merges"]
    rounds = len([m for m in merges if not m.get("final")]) + res["config"]["sync"]["n_fragments"]  # + the final ones
    assert sent[(1, 0, CONTRIBUTION)] == sent[(0, 1, DECISION)] == rounds > 2
    assert sent[(0, 1, APPLY)] == len(merges)
    assert set(sent) == {(1, 0, CONTRIBUTION), (0, 1, DECISION), (0, 1, APPLY)}  # island 0 shares the syncer's process


def test_a_corrupt_apply_in_the_simulator_stops_the_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """The simulator's islands check what the synchroniser sends, as torchrun's do."""
    post_bytes = LocalTransport.post_bytes

    def corrupt(self, src, dst, kind, raw, data):  # type: ignore[no-untyped-def]
        if kind == APPLY:
            raw = raw.replace(b'"outer_step":true', b'"outer_step":false')
        post_bytes(self, src, dst, kind, raw, data)

    monkeypatch.setattr(LocalTransport, "post_bytes", corrupt)
    with pytest.raises(ControlError, match="outer_step: False with a payload"):
        run_experiment(_decoupled())
