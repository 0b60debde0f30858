"""Wire codecs: byte accounting, layouts, rounding (nearest and stochastic) against brute-force grids, error feedback,
and the self-describing serialisation."""
from __future__ import annotations

import io
import math
import struct

import pytest
import torch

from islands_kit import config
from islands_kit.comm.codecs import (
    FP4_E2M1_GRID,
    FP4_E3M0_GRID,
    HEADER_BYTES,
    ErrorFeedback,
    Payload,
    decode_bytes,
    encode_bytes,
    fp32_codec,
    get_codec,
)
from islands_kit.config.codec_registry import CODEC_SPECS, SPARSE_CODECS
from islands_kit.config.codec_registry import CODECS as ALL_CODECS
from islands_kit.config.codec_registry import DENSE_CODECS as CODECS  # the sparse ones: tests/test_topk_codec.py

QUANTISED = [c for c in CODECS if c not in ("fp32", "bf16")]
LOSSY = [c for c in CODECS if c != "fp32"]
# The stated formula, written independently of the implementation: (bits per value, scale bytes per block).
LAYOUT = {"fp32": (32, 0), "bf16": (16, 0), "int8": (8, 4), "fp8_e4m3": (8, 4), "int4": (4, 4), "fp4_e2m1": (4, 4),
          "fp4_e3m0": (4, 4),
          "int2": (2, 4)}
QMAX = {"int8": 127.0, "fp8_e4m3": 448.0, "int4": 7.0, "fp4_e2m1": 6.0, "fp4_e3m0": 16.0, "int2": 1.5}


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def grid(name: str) -> torch.Tensor:
    """Every representable value of a block codec in scaled units (v = x / scale), sorted, float64."""
    if name == "fp8_e4m3":
        g = torch.arange(256, dtype=torch.int32).to(torch.uint8).view(torch.float8_e4m3fn).to(torch.float64)
        g = g[torch.isfinite(g)]
    elif name in ("fp4_e2m1", "fp4_e3m0"):
        g = torch.tensor(FP4_E2M1_GRID if name == "fp4_e2m1" else FP4_E3M0_GRID, dtype=torch.float64)
        g = torch.cat([g, -g])
    else:
        q = QMAX[name]
        g = torch.arange(int(2 * q) + 1, dtype=torch.float64) - q
    return torch.unique(g)


def block_scale(x: torch.Tensor, name: str, B: int) -> torch.Tensor:
    """Per-element scale absmax(block) / qmax, as the module docstring states (float32 arithmetic)."""
    n = x.numel()
    nb = -(-n // B)
    xb = torch.zeros(nb * B)
    xb[:n] = x.reshape(-1)
    s = xb.view(nb, B).abs().amax(1, keepdim=True) / QMAX[name]  # (nb, 1)
    return s.expand(nb, B).reshape(-1)[:n]


def wide_values(n: int, seed: int) -> torch.Tensor:
    """Values over many magnitudes (so minifloat codecs exercise subnormals, binades and zeros)."""
    g = gen(seed)
    x = torch.randn(n, generator=g) * torch.pow(10.0, torch.empty(n).uniform_(-5, 3, generator=g))
    x[::17] = 0.0
    return x


# ---------------------------------------------------------------------------------------------------------------------
# Registry, byte accounting, layouts
# ---------------------------------------------------------------------------------------------------------------------


def test_registry_matches_config_and_rejects_bad_names() -> None:
    assert config.CODECS is ALL_CODECS  # config validates sync.codec against the registry itself
    assert set(ALL_CODECS) == set(CODECS) | set(SPARSE_CODECS) and not set(CODECS) & set(SPARSE_CODECS)
    for name in CODECS:
        c = get_codec(name, 64)
        assert c.name == name and c.block_size == 64 and c.spec is CODEC_SPECS[name]
        assert c.nbytes(1000) * 8 == pytest.approx(1000 * c.spec.bits + (32 * 16 if c.spec.block_scaled else 0), abs=7)
    with pytest.raises(ValueError, match=r"sync\.codec: unknown codec 'int3'.*fp32\|bf16"):
        get_codec("int3")
    with pytest.raises(ValueError, match=r"sync\.codec_block_size"):
        get_codec("int4", 0)


def test_wire_ids_are_frozen() -> None:
    """The codec id is written in every serialised payload (checkpoints, the torch.distributed wire): pinned here."""
    assert {n: s.wire_id for n, s in CODEC_SPECS.items()} == {
        "fp32": 0, "bf16": 1, "int8": 2, "fp8_e4m3": 3, "int4": 4, "fp4_e2m1": 5, "int2": 6,
        "top8_int4": 7, "top16_int4": 8, "top32_int4": 9, "top16_int2": 10, "ctop32_int2": 11, "ctop64_int2": 12,
        "ctop128_int2": 13, "ctop32_int4": 14, "ctop64_int4": 15, "ctop64_fp32": 16, "fp4_e3m0": 17,
        "ctop16_int2": 18}
    for name in ALL_CODECS:
        assert encode_bytes(get_codec(name).encode(torch.zeros(3)))[5] == CODEC_SPECS[name].wire_id



@pytest.mark.parametrize("name", CODECS)
def test_nbytes_matches_formula_and_payload(name: str) -> None:
    bits, scale_bytes = LAYOUT[name]
    for B in (1, 2, 3, 7, 64, 128, 1000):
        c = get_codec(name, B)
        for n in (0, 1, 2, 3, 4, 5, 7, 127, 128, 129, 255, 1001):
            expected = scale_bytes * math.ceil(n / B) + math.ceil(n * bits / 8)
            assert c.nbytes(n) == expected, (name, B, n)
            p = c.encode(torch.randn(n, generator=gen(n)), stochastic=True, generator=gen(B))
            assert p.data.dtype == torch.uint8 and p.data.dim() == 1
            assert p.nbytes == p.data.numel() == expected
            out = c.decode(p)
            assert out.dtype == torch.float32 and out.shape == (n,)


def test_int4_and_int2_wire_layout() -> None:
    """Codes k = q + qmax, first element in the low bits, scales (float32) first — the documented layout."""
    x = torch.arange(-7, 8, dtype=torch.float32)  # absmax 7 -> scale 1, q = x
    p = get_codec("int4", 16).encode(x)
    assert p.data[:4].view(torch.float32).item() == 1.0
    k = (x + 7).to(torch.uint8).tolist() + [0]  # 15 codes, zero pad nibble
    assert p.data[4:].tolist() == [k[2 * i] | (k[2 * i + 1] << 4) for i in range(8)]
    x2 = torch.tensor([-1.5, -0.5, 0.5, 1.5, 1.5, -1.5])  # absmax 1.5 -> scale 1, codes 0,1,2,3,3,0
    p2 = get_codec("int2", 8).encode(x2)
    assert p2.data[:4].view(torch.float32).item() == 1.0
    assert p2.data[4:].tolist() == [0 | 1 << 2 | 2 << 4 | 3 << 6, 3 | 0 << 2]


def test_fp4_codes_follow_ocp_e2m1() -> None:
    """Code = sign << 3 | (exponent bits << 1 | mantissa bit); each magnitude decodes to (1 + m/2) * 2^(e-1)."""
    x = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.5, -6.0])  # absmax 6 -> scale 1
    p = get_codec("fp4_e2m1", 16).encode(x)
    codes = [(b >> s) & 0xF for b in p.data[4:].tolist() for s in (0, 4)][: x.numel()]
    for code, v in zip(codes, x.tolist()):
        e, m = (code >> 1) & 3, code & 1
        mag = m * 0.5 if e == 0 else (1 + m / 2) * 2.0 ** (e - 1)
        assert (-mag if code & 8 else mag) == v


def test_fp4_e3m0_codes_are_sign_and_exponent() -> None:
    """Streaming DiLoCo's E3M0: code = sign << 3 | exponent field e; e = 0 is zero, else 2^(e - 3) (bias 3, no
    mantissa), so the grid is 0 and the powers of two 2^-2 .. 2^4, written independently of the codec here."""
    x = torch.tensor([0.0, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, -0.25, -16.0])  # absmax 16 -> scale 1
    p = get_codec("fp4_e3m0", 16).encode(x)
    assert p.data[:4].view(torch.float32).item() == 1.0
    codes = [(b >> s) & 0xF for b in p.data[4:].tolist() for s in (0, 4)][: x.numel()]
    assert codes == [0, 1, 2, 3, 4, 5, 6, 7, 9, 15]
    for code, v in zip(codes, x.tolist()):
        e = code & 7
        mag = 0.0 if e == 0 else 2.0 ** (e - 3)
        assert (-mag if code & 8 else mag) == v


def test_fp4_e3m0_rounds_between_binades() -> None:
    """Without mantissa bits the neighbours of v are the powers of two around it: round-to-nearest takes the closer
    (a tie, 1.5 · 2^e, goes up), stochastic rounding the upper one with probability (v - lo) / (hi - lo)."""
    x = torch.tensor([16.0, 3.0, 2.9, 3.1, 0.1, 0.125, 0.2, -5.0, 12.0])  # absmax 16 -> scale 1
    c = get_codec("fp4_e3m0", 16)
    assert c.decode(c.encode(x)).tolist() == [16.0, 4.0, 2.0, 4.0, 0.0, 0.0, 0.25, -4.0, 16.0]
    draws = c.decode(c.encode(torch.tensor([16.0, 3.0]).repeat(4000), stochastic=True, generator=gen(9)))
    ups = (draws.view(4000, 2)[:, 1] == 4.0).double().mean().item()
    assert abs(ups - 0.5) < 0.03 and set(draws.view(4000, 2)[:, 1].tolist()) == {2.0, 4.0}


# ---------------------------------------------------------------------------------------------------------------------
# Round-to-nearest
# ---------------------------------------------------------------------------------------------------------------------


def test_fp32_roundtrip_is_bitwise_and_passes_non_finite() -> None:
    x = torch.tensor([1.0, -0.0, float("nan"), float("inf"), -float("inf"), 1e-45, 3.4e38])
    c = get_codec("fp32")
    out = c.decode(c.encode(x.view(7, 1), stochastic=True, generator=gen(0)))
    assert torch.equal(out.view(torch.int32), x.view(torch.int32))


def test_fp32_wrap_sends_the_tensor_s_own_bytes_and_read_values_reads_them_in_place() -> None:
    """The no-copy pair the gradient all-reduce uses: ``wrap`` gives encode's bytes over the tensor's own storage,
    ``read_values`` gives decode's values without copying; anything they cannot serve as such is refused or copied."""
    c = fp32_codec()
    x = torch.randn(9, generator=gen(3))
    p = c.wrap(x)
    assert torch.equal(p.data, c.encode(x).data) and p.data.data_ptr() == x.data_ptr()
    v = c.read_values(p)
    assert torch.equal(v, c.decode(p)) and v.data_ptr() == x.data_ptr()
    unaligned = Payload("fp32", 9, 128, torch.cat([torch.zeros(1, dtype=torch.uint8), p.data])[1:])
    assert torch.equal(c.read_values(unaligned), x) and c.read_values(unaligned).data_ptr() != unaligned.data.data_ptr()
    q = get_codec("int8")
    assert torch.equal(q.read_values(q.encode(x)), q.decode(q.encode(x)))  # a codec whose bytes are not the values decodes
    for bad in (x.double(), x.view(3, 3), x[::2]):  # not float32, not 1-D, not contiguous
        with pytest.raises(ValueError, match="fp32.wrap: x must be a 1-D contiguous float32"):
            c.wrap(bad)


def test_bf16_rtn_equals_torch_cast() -> None:
    x = wide_values(4000, 1)
    c = get_codec("bf16")
    assert torch.equal(c.decode(c.encode(x)), x.to(torch.bfloat16).float())


def test_fp8_rtn_equals_torch_float8_cast() -> None:
    ties = torch.tensor([448.0, 17.0, 19.0, -17.0, 1.5 * 2**-9, 2.5 * 2**-9, 232.0, 0.0])  # scale 1, exact midpoints
    x = torch.cat([ties, wide_values(4096, 2)])
    assert get_codec("fp8_e4m3", 8).decode(get_codec("fp8_e4m3", 8).encode(ties)).tolist()[1:7] == [16, 20, -16, 2**-8, 2**-8, 224]
    for B in (128, 5, 8):
        c = get_codec("fp8_e4m3", B)
        s = block_scale(x, "fp8_e4m3", B)
        ref = (x / torch.where(s > 0, s, 1.0)).clamp(-448, 448).to(torch.float8_e4m3fn).float() * s
        assert torch.equal(c.decode(c.encode(x)), ref)


@pytest.mark.parametrize("name", QUANTISED)
def test_rtn_is_nearest_grid_point_and_deterministic(name: str) -> None:
    """Reference: brute-force argmin over every representable value; error <= half the local grid step."""
    x = wide_values(2048, 3) if name.startswith("fp") else torch.randn(2048, generator=gen(3))
    B = 64
    c = get_codec(name, B)
    p = c.encode(x)
    assert torch.equal(p.data, c.encode(x.clone()).data)
    s = block_scale(x, name, B).double()
    v = x.double() / torch.where(s > 0, s, 1.0)
    q = c.decode(p).double() / torch.where(s > 0, s, 1.0)
    g = grid(name)
    nearest = (v[:, None] - g[None, :]).abs().min(1).values
    assert torch.all((v - q).abs() <= nearest + 1e-5 * (1 + v.abs()))  # (v - q) up to fp32 rounding of x / scale
    on_grid = (q[:, None] - g[None, :]).abs().min(1).values <= 1e-6 * (1 + q.abs())  # q * scale / scale: fp32 noise
    assert on_grid.all()


def test_fp4_ties_round_to_even_code() -> None:
    x = torch.tensor([6.0, 2.5, 5.0, 0.25, 0.75, 1.25, 1.75, 3.5, -2.5, -5.0])  # absmax 6 -> scale 1, exact ties
    out = get_codec("fp4_e2m1", 16).decode(get_codec("fp4_e2m1", 16).encode(x))
    assert out.tolist() == [6.0, 2.0, 4.0, 0.0, 1.0, 1.0, 2.0, 4.0, -2.0, -4.0]


# ---------------------------------------------------------------------------------------------------------------------
# Stochastic rounding
# ---------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", LOSSY)
def test_stochastic_rounding_is_unbiased_and_picks_a_neighbour(name: str) -> None:
    """2000 seeded draws in one batched call (blocks align with the copies, so every copy has the same scales)."""
    n, draws, B = 128, 2000, 64
    x = torch.randn(n, generator=gen(4)) * torch.linspace(0.01, 3, n)
    x[::31] = 0.0
    c = get_codec(name, B)
    dec = c.decode(c.encode(x.repeat(draws), stochastic=True, generator=gen(5))).view(draws, n).double()  # (draws, n)
    if name == "bf16":  # neighbours: truncation toward zero and the next bf16 away from zero
        lo = (x.view(torch.int32) & -65536).view(torch.float32).double()
        hi = torch.nextafter(lo.float().to(torch.bfloat16), torch.copysign(torch.tensor(1e30), x).to(torch.bfloat16)).double()
        hi = torch.where(lo.float() == x, lo, hi)
    else:  # neighbours from the brute-force grid, in scaled units
        s = block_scale(x, name, B).double()
        v = x.double() / torch.where(s > 0, s, 1.0)
        g = grid(name)
        lo = torch.where(g[None, :] <= v[:, None] + 1e-9, g[None, :], -1e9).max(1).values * s
        hi = torch.where(g[None, :] >= v[:, None] - 1e-9, g[None, :], 1e9).min(1).values * s
    frac = ((x.double() - lo) / (hi - lo)).nan_to_num(0.0).clamp(0, 1)  # P(round to hi); 0 on the grid
    se = (hi - lo).abs() * (frac * (1 - frac) / draws).sqrt()  # exact standard error of the mean of SR draws
    err = (dec.mean(0) - x.double()).abs()
    assert torch.all(err <= 5 * se + 1e-6 * x.abs().double()), err.max()  # 1e-6: fp32 rounding of x / scale * scale
    near = lambda a, b: (a - b).abs() <= 1e-6 * (b.abs() + 1e-30)  # noqa: E731
    assert torch.all(near(dec, lo[None, :]) | near(dec, hi[None, :]))
    mid = (frac > 0.05) & (frac < 0.95)  # P(all 2000 draws equal) <= 0.95^2000 ~ 1e-45
    assert mid.sum() > 30 and dec.std(0)[mid].min() > 0  # off-grid values really are randomised


@pytest.mark.parametrize("name", LOSSY)
def test_noise_tensor_matches_generator_and_rounding_direction(name: str) -> None:
    """u < frac takes the upper neighbour: u = 0 rounds up (magnitude for float grids), u -> 1 rounds down."""
    x = torch.randn(300, generator=gen(6))
    c = get_codec(name, 32)
    u = torch.rand(300, generator=gen(7))
    assert torch.equal(c.encode(x, stochastic=True, generator=gen(7)).data, c.encode(x, stochastic=True, noise=u).data)
    up = c.decode(c.encode(x, stochastic=True, noise=torch.zeros(300)))
    down = c.decode(c.encode(x, stochastic=True, noise=torch.full((300,), 1 - 2**-24)))
    if name in ("int8", "int4", "int2"):  # uniform grid: toward +inf / -inf
        assert torch.all(up >= x - 1e-6 * x.abs()) and torch.all(down <= x + 1e-6 * x.abs())
    else:  # float grids: magnitude away from / toward zero
        assert torch.all(up.abs() >= x.abs() * (1 - 1e-6)) and torch.all(down.abs() <= x.abs() * (1 + 1e-6))
    with pytest.raises(ValueError, match="noise must have numel"):
        c.encode(x, stochastic=True, noise=torch.zeros(299))


@pytest.mark.parametrize("name", LOSSY)
def test_same_seed_same_bytes(name: str) -> None:
    x = torch.randn(777, generator=gen(8))
    c = get_codec(name, 100)
    a, b = (c.encode(x, stochastic=True, generator=gen(9)) for _ in range(2))
    assert torch.equal(a.data, b.data)
    assert not torch.equal(a.data, c.encode(x, stochastic=True, generator=gen(10)).data)


@pytest.mark.parametrize("name", LOSSY)
def test_non_finite_input_raises(name: str) -> None:
    for bad in (float("nan"), float("inf")):
        x = torch.randn(50)
        x[13] = bad
        with pytest.raises(ValueError, match="non-finite"):
            get_codec(name, 16).encode(x)


def test_shapes_dtypes_and_unaligned_payload() -> None:
    x = torch.randn(6, 5, generator=gen(11), dtype=torch.float64)
    c = get_codec("int4", 7)
    p = c.encode(x.t())  # non-contiguous input is flattened row-major
    assert torch.equal(p.data, c.encode(x.t().contiguous().float()).data)
    buf = torch.cat([torch.zeros(1, dtype=torch.uint8), p.data])[1:]  # storage offset 1
    assert torch.equal(c.decode(Payload("int4", 30, 7, buf)), c.decode(p))
    with pytest.raises(ValueError, match="encoded by codec 'int4'"):
        get_codec("int2", 7).decode(p)
    with pytest.raises(ValueError, match="expected"):
        c.decode(Payload("int4", 31, 7, p.data))
    with pytest.raises(ValueError, match="floating"):
        c.encode(torch.arange(4))


# ---------------------------------------------------------------------------------------------------------------------
# Error feedback
# ---------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", LOSSY)
@pytest.mark.parametrize("stochastic", [False, True])
def test_error_feedback_reconstructs_input(name: str, stochastic: bool) -> None:
    """decoded + residual == x_eff bit for bit where x_eff - decoded is exact: always under RTN on grids with a zero;
    elsewhere only a value below one step rounded away from zero may lose up to 2^-24 of its residual."""
    ef, c, g = ErrorFeedback(), get_codec(name, 64), gen(12)
    x = wide_values(1000, 13).view(10, 100)
    for _ in range(5):
        prev = ef.residual("k")
        x_eff = x.reshape(-1) + prev if prev is not None else x.reshape(-1)
        p, dec = ef.compress("k", x, c, stochastic=stochastic, generator=g)
        assert dec.shape == x.shape and torch.equal(dec.reshape(-1), c.decode(p))
        r, d = ef.residual("k"), dec.reshape(-1)
        recon = d + r
        sterbenz = (d == 0) | ((torch.sign(d) == torch.sign(x_eff)) & (d.abs() <= 2 * x_eff.abs()) & (x_eff.abs() <= 2 * d.abs()))
        if not stochastic and name != "int2":
            assert sterbenz.all()
        assert torch.equal(recon[sterbenz], x_eff[sterbenz])
        assert torch.all((recon - x_eff).abs() <= 2**-23 * (x_eff.abs() + d.abs()))


@pytest.mark.parametrize("name,top_step", [("int8", 1.0), ("fp8_e4m3", 32.0), ("int4", 1.0), ("fp4_e2m1", 2.0), ("fp4_e3m0", 8.0),
                                           ("int2", 1.0)])
def test_error_feedback_makes_long_run_sum_unbiased(name: str, top_step: float) -> None:
    """Sending the same x n times with RTN: with EF the sum of decoded values tracks n·x (error = the bounded residual);
    without EF the per-sync rounding error repeats n times."""
    n_syncs, x = 200, torch.randn(384, generator=gen(14))
    c = get_codec(name, 128)
    with_ef, without = ErrorFeedback(True), ErrorFeedback(False)
    s_ef = torch.zeros(384, dtype=torch.float64)
    s_no = torch.zeros(384, dtype=torch.float64)
    r_max = 0.0
    for _ in range(n_syncs):
        s_ef += with_ef.compress(0, x, c, stochastic=False, generator=None)[1].double()
        s_no += without.compress(0, x, c, stochastic=False, generator=None)[1].double()
        r_max = max(r_max, with_ef.residual(0).abs().max().item())
    assert without.residual(0) is None
    amax = x.abs().max().item()
    assert r_max <= amax / (2 * QMAX[name] / top_step - 1) * (1 + 1e-5)  # R <= (A + R) * top_step / (2 qmax)
    err_ef = (s_ef - n_syncs * x.double()).abs().max().item()
    err_no = (s_no - n_syncs * x.double()).abs().max().item()
    assert err_ef <= r_max * (1 + 1e-3) + 1e-3
    assert err_ef * 20 < err_no


def test_error_feedback_state_dict_round_trip() -> None:
    x = torch.randn(2, 50, generator=gen(15))
    c = get_codec("int2", 16)
    a = ErrorFeedback()
    a.compress((0, 1), x, c, stochastic=True, generator=gen(16))
    buf = io.BytesIO()
    torch.save(a.state_dict(), buf)
    b = ErrorFeedback(enabled=False)
    b.load_state_dict(torch.load(io.BytesIO(buf.getvalue()), weights_only=True))
    assert b.enabled
    pa, _ = a.compress((0, 1), x, c, stochastic=True, generator=gen(17))
    pb, _ = b.compress((0, 1), x, c, stochastic=True, generator=gen(17))
    assert torch.equal(pa.data, pb.data) and torch.equal(a.residual((0, 1)), b.residual((0, 1)))
    with pytest.raises(ValueError, match="numel"):
        a.compress((0, 1), torch.randn(7), c, stochastic=False, generator=None)
    with pytest.raises(ValueError, match="expected keys"):
        b.load_state_dict({"residuals": {}})


# ---------------------------------------------------------------------------------------------------------------------
# Serialisation
# ---------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", CODECS)
def test_serialisation_round_trip(name: str) -> None:
    for n, B in ((0, 128), (1, 1), (333, 7)):
        p = get_codec(name, B).encode(torch.randn(n, generator=gen(n)), stochastic=True, generator=gen(1))
        b = encode_bytes(p)
        assert len(b) == HEADER_BYTES + p.nbytes
        q = decode_bytes(b)
        assert (q.codec, q.numel, q.block_size) == (name, n, B) and torch.equal(q.data, p.data)
        assert torch.equal(get_codec(name, B).decode(q), get_codec(name, B).decode(p))


def test_serialisation_rejects_truncated_and_garbled_bytes() -> None:
    b = encode_bytes(get_codec("int4", 16).encode(torch.randn(101, generator=gen(18))))
    with pytest.raises(ValueError, match="truncated payload"):
        decode_bytes(b[:-1])
    with pytest.raises(ValueError, match="truncated payload"):
        decode_bytes(b[:10])
    with pytest.raises(ValueError, match="oversized payload"):
        decode_bytes(b + b"\0")
    with pytest.raises(ValueError, match="bad magic"):
        decode_bytes(b"XXXX" + b[4:])
    with pytest.raises(ValueError, match="unknown codec id 99"):
        decode_bytes(b[:5] + bytes([99]) + b[6:])
    garbled_numel = b[:8] + struct.pack("<Q", 5) + b[16:]
    with pytest.raises(ValueError, match="oversized payload"):
        decode_bytes(garbled_numel)
    flipped = bytearray(b)
    flipped[HEADER_BYTES + 3] ^= 0x10
    with pytest.raises(ValueError, match="checksum mismatch"):
        decode_bytes(bytes(flipped))
