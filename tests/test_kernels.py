"""Optional kernels: every Triton kernel equals its torch reference, and each reference equals plain math.

Without a GPU the Triton tests run on Triton's CPU interpreter: the ``interpreted`` fixture sets ``TRITON_INTERPRET=1``
only while this module's Triton tests run (not at import, so other test modules still see the default torch path).
They are skipped with a message when triton is not installed; the reference and dispatch tests always run.
"""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest
import torch

import islands_kit.kernels as K
from islands_kit.kernels import dispatch, reference
from islands_kit.kernels.reference import (
    dequantize_reference, grouped_mm_reference, mx_qdq_reference, mx_quantize_reference, quantize_ef_reference,
)

HAS_TRITON = importlib.util.find_spec("triton") is not None
GPU = torch.cuda.is_available()
DEV = "cuda" if GPU else "cpu"
BLOCK_CODECS = ("int8", "fp8_e4m3", "int4", "fp4_e2m1", "int2")


@pytest.fixture(scope="module")
def interpreted():
    """Make Triton runnable here (interpreter on CPU-only machines) for the duration of this module's Triton tests."""
    if not HAS_TRITON:
        pytest.skip("triton is not installed (pip install 'islands_kit[kernels]'): Triton kernel tests skipped")
    with pytest.MonkeyPatch.context() as mp:
        if not GPU:
            mp.setenv("TRITON_INTERPRET", "1")
        yield


def _bits(t: torch.Tensor) -> torch.Tensor:
    """Bit pattern view, so equality also distinguishes -0.0 from 0.0."""
    return t.view(torch.int32) if t.dtype == torch.float32 else t


def _assert_same_quantized(a: reference.Quantized, b: reference.Quantized) -> None:
    for f in ("scales", "codes", "decoded", "residual"):
        assert torch.equal(_bits(getattr(a, f)), _bits(getattr(b, f))), f


def _codec_input(n: int, seed: int) -> torch.Tensor:
    """Random values over several magnitudes, with exact zeros, a negative zero and an all-zero run."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, generator=g) * torch.rand(n, generator=g).mul(4).exp2()
    x[: min(n, 3)] = 0.0
    if n > 20:
        x[5] = -0.0
        x[8:20] = 0.0
    return x


# ---------------------------------------------------------------------------------------------------------------------
# Dispatch
# ---------------------------------------------------------------------------------------------------------------------


def test_backend_choice_env_override_and_context_manager(monkeypatch):
    monkeypatch.setenv(K.ENV_VAR, "torch")
    assert K.requested_backend() == "torch"
    monkeypatch.setenv(K.ENV_VAR, "cuda")
    with pytest.raises(ValueError, match="ISLANDS_KIT_KERNELS"):
        K.requested_backend()
    monkeypatch.setenv(K.ENV_VAR, "auto")
    with K.set_backend("torch"):  # the override beats the environment
        assert K.requested_backend() == "torch"
    assert K.requested_backend() == "auto"  # restored on exit
    with pytest.raises(ValueError, match="set_backend"):
        K.set_backend("fast")


def test_forcing_triton_where_it_cannot_run_raises_and_auto_falls_back(monkeypatch):
    monkeypatch.setattr(dispatch, "triton_installed", lambda: False)
    assert not K.available()
    with pytest.raises(K.KernelBackendError, match="not installed"):
        K.set_backend("triton")
    monkeypatch.setenv(K.ENV_VAR, "triton")
    x, w, gs = torch.randn(5, 4), torch.randn(2, 4, 3), torch.tensor([2, 3])
    with pytest.raises(K.KernelBackendError, match="grouped_mm"):
        K.grouped_mm(x, w, gs)
    monkeypatch.setenv(K.ENV_VAR, "auto")
    assert torch.equal(K.grouped_mm(x, w, gs), grouped_mm_reference(x, w, gs))
    monkeypatch.undo()
    if HAS_TRITON and not GPU:  # installed, but no GPU and no interpreter
        monkeypatch.delenv("TRITON_INTERPRET", raising=False)
        with pytest.raises(K.KernelBackendError, match="no CUDA GPU"):
            K.set_backend("triton")


def test_package_works_with_triton_unimportable():
    """In a fresh interpreter where `import triton` fails: the package imports, runs the torch path, refuses triton."""
    code = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] == 'triton': raise ModuleNotFoundError(name)\n"
        "sys.meta_path.insert(0, Block())\n"
        "import torch, islands_kit.kernels as K\n"
        "assert not K.available()\n"
        "y = K.grouped_mm(torch.randn(5, 8), torch.randn(2, 8, 3), torch.tensor([1, 4]), mxfp8=True)\n"
        "q = K.quantize_ef(torch.randn(40), codec='int4', block_size=16, seed=1)\n"
        "assert y.shape == (5, 3) and q.codes.numel() == 20\n"
        "try:\n"
        "    K.set_backend('triton'); raise SystemExit('set_backend(triton) should have raised')\n"
        "except K.KernelBackendError as e:\n"
        "    assert 'not installed' in str(e)\n"
        "assert 'triton' not in sys.modules\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", K.ENV_VAR)}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]


# ---------------------------------------------------------------------------------------------------------------------
# References against plain math
# ---------------------------------------------------------------------------------------------------------------------


def test_grouped_reference_equals_per_token_matmul_and_checks_sizes():
    torch.manual_seed(0)
    sizes = [0, 3, 0, 5, 1, 0]
    x, w = torch.randn(9, 7, dtype=torch.float64), torch.randn(6, 7, 4, dtype=torch.float64)
    out = grouped_mm_reference(x, w, torch.tensor(sizes))
    expert_of_row = torch.repeat_interleave(torch.arange(6), torch.tensor(sizes))  # (T,)
    naive = torch.stack([x[t] @ w[expert_of_row[t]] for t in range(9)])
    torch.testing.assert_close(out, naive, rtol=0, atol=1e-12)
    with pytest.raises(ValueError, match="sum to T"):
        grouped_mm_reference(x, w, torch.tensor([0, 3, 0, 5, 0, 0]))
    with pytest.raises(ValueError, match=r"w.shape\[1\]"):
        K.grouped_mm(x, w[:, :6], torch.tensor(sizes))
    with pytest.raises(ValueError, match="group_sizes"):
        K.grouped_mm(x, w, torch.tensor(sizes[:5]))


def test_mx_reference_worked_example_and_grid_properties():
    # One block of 4: amax 300 -> floor(log2 300) = 8 -> scale 2^(8-8) = 1. E4M3 spacing is 32 on [256, 512) (300 ->
    # 288), 2^-7 on [2^-4, 2^-3) (0.1 -> 13 * 2^-7), 2 on [16, 32) (-17 is a tie -> even mantissa -> -16).
    x = torch.tensor([300.0, 1.0, 0.1, -17.0])
    torch.testing.assert_close(mx_qdq_reference(x, block=4), torch.tensor([288.0, 1.0, 13 / 128, -16.0]), rtol=0, atol=0)
    # Halving the block scales the result exactly by 1/2 (the scale is a power of two).
    assert torch.equal(mx_qdq_reference(x / 2, block=4), mx_qdq_reference(x, block=4) / 2)

    torch.manual_seed(1)
    y = torch.randn(6, 70) * torch.logspace(-3, 3, 70)  # (R, K), K not a multiple of 32
    q, s = mx_quantize_reference(y, 32, dim=-1)  # q (6, 3, 32) E4M3 values, s (6, 3, 1)
    amax = torch.nn.functional.pad(y.abs(), (0, 26)).view(6, 3, 32).amax(-1, keepdim=True)
    assert torch.equal(s.float(), torch.floor(torch.log2(amax)) - 8)  # OCP rule, away from rounding edges
    assert q.abs().max() <= 448 and torch.equal(q.to(torch.float8_e4m3fn).float(), q)  # elements on the E4M3 grid
    z = mx_qdq_reference(y, 32)
    assert torch.equal(mx_qdq_reference(z, 32), z)  # idempotent: values on the grid stay put
    scale = torch.ldexp(torch.ones(6, 96), s.repeat_interleave(32, -1).view(6, 96))[:, :70]  # (6, 70) per element
    unsaturated = y.abs() <= 448 * scale
    # Half an E4M3 ulp: 2^-4 relative (3 mantissa bits), or 2^-4 * 2^-6 * scale absolute among the subnormals.
    bound = 2.0**-4 * torch.maximum(y.abs(), 2.0**-6 * scale)
    assert ((z - y).abs() <= bound)[unsaturated].all()
    assert unsaturated.float().mean() > 0.9


def test_mx_qdq_straight_through_gradient_and_dims():
    x = torch.randn(3, 40, 5, requires_grad=True)
    with K.set_backend("torch"):
        y = K.mx_qdq(x, 32, dim=1)
    assert torch.equal(y, mx_qdq_reference(x.detach().transpose(1, 2), 32, -1).transpose(1, 2))
    y.backward(torch.arange(600.0).view(3, 40, 5))
    assert torch.equal(x.grad, torch.arange(600.0).view(3, 40, 5))  # STE: identity
    with pytest.raises(ValueError, match="block"):
        K.mx_qdq(x, 0)


def test_codec_reference_stochastic_rounding_is_unbiased():
    v = torch.full((20000,), 0.3)
    v[::100] = 1.0  # one absmax per block of 100 fixes scale = 1/qmax
    for codec in BLOCK_CODECS:
        q = quantize_ef_reference(v, None, torch.rand(20000, generator=torch.Generator().manual_seed(0)),
                                  codec=codec, block_size=100)
        rest = q.decoded.view(200, 100)[:, 1:]
        assert abs(rest.mean().item() - 0.3) < 0.01, codec  # E[q] = v; the grid steps here are <= 2/3


def test_quantize_ef_rejects_bad_input():
    with K.set_backend("torch"):
        with pytest.raises(ValueError, match="non-finite"):
            K.quantize_ef(torch.tensor([1.0, float("nan")]), codec="int8")
        with pytest.raises(ValueError, match="codec"):
            K.quantize_ef(torch.ones(4), codec="fp32")
        with pytest.raises(ValueError, match="residual"):
            K.quantize_ef(torch.ones(4), torch.zeros(3), codec="int4")


@pytest.mark.parametrize("codec", BLOCK_CODECS)
def test_codec_reference_matches_comm_codecs_bit_for_bit(codec):
    codecs = pytest.importorskip("islands_kit.comm.codecs")
    for block, n in [(128, 700), (7, 45), (6, 50), (1, 5), (16, 0)]:
        x, r = _codec_input(n, n), torch.randn(n) * 0.01
        for u in (torch.rand(n), None):
            ef = codecs.ErrorFeedback()
            ef.compress("k", r, codecs.get_codec(codec, block), stochastic=False)  # seed a residual ...
            r_old = ef.residual("k").clone()
            payload, dec = ef.compress("k", x, codecs.get_codec(codec, block), stochastic=u is not None, noise=u)
            ours = quantize_ef_reference(x, r_old, u, codec=codec, block_size=block)  # ... and continue from it
            assert torch.equal(ours.wire(), payload.data), (block, n)
            assert torch.equal(_bits(ours.decoded), _bits(dec.reshape(-1)))
            assert torch.equal(_bits(ours.residual), _bits(ef.residual("k")))
            back = dequantize_reference(ours.scales, ours.codes, n, codec=codec, block_size=block)
            assert torch.equal(_bits(back), _bits(codecs.get_codec(codec, block).decode(payload)))


# ---------------------------------------------------------------------------------------------------------------------
# Triton kernels against the references
# ---------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("sizes,k,n", [([5, 0, 17, 3], 19, 23), ([0, 0, 40, 1, 0], 33, 70), ([0, 0], 8, 8)])
def test_grouped_mm_triton_matches_reference_fwd_bwd(interpreted, sizes, k, n):
    torch.manual_seed(0)
    gs = torch.tensor(sizes, device=DEV)
    x = torch.randn(sum(sizes), k, device=DEV, requires_grad=True)
    w = torch.randn(len(sizes), k, n, device=DEV, requires_grad=True)
    outs = {}
    for backend in ("torch", "triton"):
        with K.set_backend(backend):
            y = K.grouped_mm(x, w, gs)
            dy = torch.linspace(-1, 1, y.numel(), device=DEV).view_as(y)
            outs[backend] = (y, *torch.autograd.grad(y, (x, w), dy))
    assert "islands_kit.kernels.triton_grouped" in sys.modules  # the triton path really ran
    for a, b in zip(outs["torch"], outs["triton"]):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-5)  # fp32, IEEE products: summation order only
    empty = [e for e, s in enumerate(sizes) if s == 0]
    assert torch.count_nonzero(outs["triton"][2][empty]) == 0  # empty experts get a zero weight gradient


def test_grouped_mm_triton_bf16_and_mxfp8(interpreted):
    torch.manual_seed(1)
    gs = torch.tensor([7, 0, 9], device=DEV)
    x = torch.randn(16, 40, device=DEV).bfloat16()
    w = torch.randn(3, 40, 24, device=DEV).bfloat16()
    with K.set_backend("triton"):
        y = K.grouped_mm(x, w, gs)
        ymx = K.grouped_mm(x, w, gs, mxfp8=True)
    ref = grouped_mm_reference(x.float(), w.float(), gs)
    torch.testing.assert_close(y.float(), ref, rtol=2**-7, atol=1e-2)  # one bf16 rounding of the fp32 sum
    refmx = grouped_mm_reference(mx_qdq_reference(x, 32, -1).float(), mx_qdq_reference(w, 32, 1).float(), gs)
    torch.testing.assert_close(ymx.float(), refmx, rtol=2**-7, atol=1e-2)


@pytest.mark.parametrize("shape,dim,block", [((37, 70), -1, 32), ((5, 33, 9), 1, 32), ((4, 50), -1, 7)])
def test_mx_qdq_triton_bit_exact(interpreted, shape, dim, block):
    torch.manual_seed(2)
    x = torch.randn(shape, device=DEV) * torch.logspace(-3, 3, shape[-1], device=DEV)
    x.view(-1)[:40] = 0.0  # an all-zero block
    x.view(-1)[-3:] = torch.tensor([1e-38, -3e-39, 5e-40])  # tiny block: the clamped E8M0 scale
    with K.set_backend("triton"):
        y = K.mx_qdq(x, block, dim)
    assert torch.equal(_bits(y), _bits(mx_qdq_reference(x, block, dim)))
    xb = x.bfloat16()
    xb.view(-1)[-3:] = 1.0  # the interpreter's bf16 <-> fp32 casts mishandle subnormals, so none here
    with K.set_backend("triton"):
        assert torch.equal(K.mx_qdq(xb, block, dim), mx_qdq_reference(xb, block, dim))


@pytest.mark.parametrize("codec", BLOCK_CODECS)
def test_quantize_ef_triton_bit_exact(interpreted, codec):
    # (128, 700): packed in-kernel; (7, 45): odd blocks, sub-byte codes straddle bytes (host packing); (1, 5); empty.
    # Each case: (block, n, stochastic with given noise?, with a residual?).
    for block, n, sr, with_res in [(128, 700, True, True), (128, 700, False, False), (7, 45, True, True),
                                   (7, 45, False, True), (1, 5, True, False), (16, 0, True, True)]:
        x = _codec_input(n, n).to(DEV)
        res = (torch.randn(n) * 0.01).to(DEV) if with_res else None
        u = torch.rand(n, device=DEV) if sr else None
        want = quantize_ef_reference(x, res, u, codec=codec, block_size=block)
        with K.set_backend("triton"):
            got = K.quantize_ef(x, res, codec=codec, block_size=block, stochastic=sr, noise=u)
            back = K.dequantize(want.scales, want.codes, n, codec=codec, block_size=block)
        _assert_same_quantized(got, want)
        assert torch.equal(_bits(back), _bits(want.decoded))


@pytest.mark.parametrize("codec", BLOCK_CODECS)
def test_quantize_ef_triton_matches_comm_codecs(interpreted, codec):
    codecs = pytest.importorskip("islands_kit.comm.codecs")
    x, u = _codec_input(300, 7), torch.rand(300)
    c = codecs.get_codec(codec, 32)
    with K.set_backend("triton"):
        got = K.quantize_ef(x.to(DEV), codec=codec, block_size=32, noise=u.to(DEV))
    payload = c.encode(x, stochastic=True, noise=u)
    assert torch.equal(got.wire().cpu(), payload.data)
    assert torch.equal(_bits(got.decoded.cpu()), _bits(c.decode(payload)))


def test_quantize_ef_triton_seeded_rand_is_unbiased_and_reproducible(interpreted):
    v = torch.full((8192,), 0.3, device=DEV)
    v[::128] = 1.0  # scale = 1/7 for int4: 0.3 -> 2.1 grid steps, rounds to 2 or 3 with P(3) = 0.1
    with K.set_backend("triton"):
        a = K.quantize_ef(v, codec="int4", seed=123)
        b = K.quantize_ef(v, codec="int4", seed=123)
        c = K.quantize_ef(v, codec="int4", seed=124)
        back = K.dequantize(a.scales, a.codes, v.numel(), codec="int4")
    assert torch.equal(a.codes, b.codes) and not torch.equal(a.codes, c.codes)
    assert torch.equal(back, a.decoded)
    rest = a.decoded.view(64, 128)[:, 1:].cpu()
    assert set(torch.unique(rest * 7).round().tolist()) == {2.0, 3.0}
    p_up = ((rest * 7).round() == 3).double().mean().item()
    assert abs(p_up - 0.1) < 0.02  # 8128 Bernoulli(0.1) draws: sigma = 0.0033
    torch.testing.assert_close(a.residual + a.decoded, v)  # error feedback: x = decoded + residual


def test_triton_module_refuses_a_changed_interpret_mode(interpreted, monkeypatch):
    mod = dispatch.triton_module("triton_mx")  # defined in the current mode
    assert mod.INTERPRETED == dispatch.interpreting()
    monkeypatch.setenv("TRITON_INTERPRET", "0" if mod.INTERPRETED else "1")
    with pytest.raises(K.KernelBackendError, match="TRITON_INTERPRET"):
        dispatch.triton_module("triton_mx")
