"""Single-event upsets (islands_kit/faults/seu.py): a flipped bit in a payload is caught by the wire's checksum and
repaired by a resend; a flipped bit in a replica's weights reaches the defence as part of an outer gradient, which
drops the large flips (exponent) and lets the small ones (sign, mantissa) through."""
from __future__ import annotations

import math

import pytest
import torch

from islands_kit.comm.codecs import get_codec
from islands_kit.comm.codecs.wire import decode_bytes, encode_bytes
from islands_kit.comm.link import LinkModel, link_config
from islands_kit.config import FaultConfig
from islands_kit.faults.defense import Defense
from islands_kit.faults.seu import EXPONENT_TOP_BIT, SIGN_BIT, chunk_corrupt_prob, flip_bit, flip_payload_bit


def test_flip_bit_is_the_ieee754_bit() -> None:
    x = torch.tensor([1.0, 0.25, -3.0])
    flip_bit(x, 0, SIGN_BIT)
    flip_bit(x, 1, EXPONENT_TOP_BIT)
    flip_bit(x, 2, 0)
    assert x[0] == -1.0 and x[1] == 0.25 * 2.0 ** 128 and x[2] == -(3.0 + 2.0 ** -22)  # 3 = 1.5 x 2^1: the last mantissa bit is 2^-22
    flip_bit(x, 2, 0)
    assert x[2] == -3.0  # a second flip undoes the first


@pytest.mark.parametrize("bit", [0, 7, 100, 8 * 24 + 3])
def test_an_upset_in_a_payload_fails_its_checksum(bit: int) -> None:
    codec = get_codec("int4", 32)
    g = torch.Generator().manual_seed(0)
    wire = encode_bytes(codec.encode(torch.randn(256, generator=g), generator=g))
    assert decode_bytes(wire).numel == 256
    with pytest.raises(ValueError, match="checksum mismatch|garbled|bad magic|unsupported|unknown codec|payload"):
        decode_bytes(flip_payload_bit(wire, bit))


def test_upsets_in_flight_are_repaired_by_resends_at_a_cost_in_time() -> None:
    p = chunk_corrupt_prob(1e-7, 1 << 20)
    assert p == pytest.approx(1 - (1 - 1e-7) ** (8 << 20), rel=1e-9) and 0.5 < p < 0.6
    assert chunk_corrupt_prob(0.0, 1 << 20) == 0.0
    nbytes = 64 << 20
    clean = LinkModel(link_config("leo-satellite", corrupt_prob=0.0, loss_prob=0.0, contact_period_s=0.0), seed=0)
    upset = LinkModel(link_config("leo-satellite", corrupt_prob=0.05, loss_prob=0.0, contact_period_s=0.0), seed=0)
    a, b = clean.transfer(nbytes, 0.0, 1, 0), upset.transfer(nbytes, 0.0, 1, 0)
    assert a.chunks_corrupted == 0 and b.chunks_corrupted > 0  # caught (CRC per chunk) ...
    assert b.end_s > a.end_s  # ... and resent: the payload arrives whole, later


def _defense_sees(bit: int, syncs: int = 4) -> list[dict]:
    """Three islands' honest outer gradients for a few syncs; in the last one island 1's replica carries an upset
    in one weight (Δ_1 = θ_g − θ_1 with that bit of θ_1 flipped). Returns the defence's flags."""
    g = torch.Generator().manual_seed(1)
    d = Defense(FaultConfig(defense="auto"), 3, window=1)
    theta_g = 0.05 * torch.randn(4096, generator=g)
    for s in range(syncs):
        gathered = []
        for i in range(3):
            theta_i = theta_g - 1e-3 * (torch.randn(4096, generator=g) + 1.0)  # a shared direction, noise
            if i == 1 and s == syncs - 1:
                flip_bit(theta_i, 123, bit)
            gathered.append((i, 1.0, theta_g - theta_i))
        d.aggregate(s, 0, gathered)
    return d.report()


def test_the_defence_drops_an_exponent_upset_in_a_replica() -> None:
    flags = _defense_sees(EXPONENT_TOP_BIT)
    assert {(f["island"], f["action"]) for f in flags} == {(1, "dropped")}
    assert {f["reason"] for f in flags} <= {"norm_vs_others", "norm_vs_history", "non_finite"}


@pytest.mark.parametrize("bit", [0, 12, 22, SIGN_BIT])
def test_the_defence_lets_small_upsets_through(bit: int) -> None:
    assert _defense_sees(bit) == []  # one weight changed by at most twice its size: within the honest spread


def test_bad_arguments_name_the_rule() -> None:
    with pytest.raises(ValueError, match="bit must be in"):
        flip_bit(torch.zeros(2), 0, 32)
    with pytest.raises(ValueError, match="float32"):
        flip_bit(torch.zeros(2, dtype=torch.float64), 0, 1)
    with pytest.raises(ValueError, match="bit_error_rate"):
        chunk_corrupt_prob(math.inf, 1)


@pytest.mark.slow  # trains for seconds
@pytest.mark.parametrize("bit,flagged", [(EXPONENT_TOP_BIT, True), (0, False)])
def test_an_upset_in_a_run_reaches_the_defence_only_when_it_is_large(tmp_path, bit: int, flagged: bool) -> None:
    from islands_kit.config import apply_overrides
    from islands_kit.config.presets import get_preset
    from islands_kit.run import run_experiment

    cfg = apply_overrides(get_preset("two_site", "smoke"), {
        "faults.upset_island": "1", "faults.upset_step": "7", "faults.upset_bit": str(bit),
        "faults.defense": "auto", "sync.diloco.average": "mean"})
    res = run_experiment(cfg, tmp_path)
    (up,) = res["upsets"]
    assert up["step"] == 7 and up["island"] == 1 and up["bit"] == bit and up["before"] != up["after"]
    reasons = {(f["island"], f["reason"]) for f in res["faults_report"]}
    if flagged:
        assert abs(up["after"]) > 1e30 and (1, "norm_vs_others") in reasons
        assert {i for i, _ in reasons} == {1}  # the honest site is never flagged
    else:
        assert reasons == set() and math.isfinite(res["final_val_bpb"])
