"""Optional kernels: every Triton kernel equals its torch definition (the model references in kernels/reference.py,
the wire codecs in comm/codecs.py), and each reference equals plain math.

Without a GPU the Triton tests run on Triton's CPU interpreter: the ``interpreted`` fixture sets ``TRITON_INTERPRET=1``
only while this module's Triton tests run (not at import, so other test modules still see the default torch path).
They are skipped with a message when triton is not installed; the reference and dispatch tests always run.
"""
from __future__ import annotations

import ast
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import islands_kit.kernels as K
from islands_kit.comm import codecs
from islands_kit.config.codec_registry import CODEC_SPECS
from islands_kit.kernels import dispatch
from islands_kit.kernels.reference import grouped_mm_reference, mx_qdq_reference, mx_quantize_reference

HAS_TRITON = importlib.util.find_spec("triton") is not None
GPU = torch.cuda.is_available()
DEV = "cuda" if GPU else "cpu"
BLOCK_CODECS = tuple(name for name, spec in CODEC_SPECS.items() if spec.block_scaled)
KERNELS_DIR = Path(K.__file__).parent


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


@pytest.mark.slow
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
        "from islands_kit.comm.codecs import get_codec\n"
        "q = get_codec('int4', 16).encode(torch.randn(40), stochastic=True, generator=torch.Generator().manual_seed(1))\n"
        "assert y.shape == (5, 3) and q.nbytes == 4 * 3 + 20\n"
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


def test_kernels_package_is_a_leaf():
    """No module under islands_kit/kernels imports anything of islands_kit outside the package (kernels take tensors
    and return tensors); relative imports stay inside it."""
    for path in sorted(KERNELS_DIR.glob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0 else [])
            for name in names:
                assert not name.startswith("islands_kit") or name.startswith("islands_kit.kernels"), (path.name, name)


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


@pytest.mark.slow
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


def _codec_both_paths(codec, block, x, res, u, monkeypatch):
    """encode_ef, encode and decode of the comm codec on the torch path and on the Triton fast path."""
    calls = []
    fused_q, fused_d = K.codec_quantize_ef, K.codec_dequantize
    monkeypatch.setattr(K, "codec_quantize_ef", lambda *a, **k: calls.append("q") or fused_q(*a, **k))
    monkeypatch.setattr(K, "codec_dequantize", lambda *a, **k: calls.append("d") or fused_d(*a, **k))
    out = {}
    for backend in ("torch", "triton"):
        c = codecs.get_codec(codec, block)
        with K.set_backend(backend):
            p, dec, r = c.encode_ef(x, res, stochastic=u is not None, noise=u)
            plain = c.encode(x, stochastic=u is not None, noise=u)
            back = c.decode(p)
        out[backend] = (p.data, dec, r, plain.data, back)
        if backend == "torch":
            assert calls == [], "the torch path called the kernel"
    assert calls == ["q", "q", "d"], "the triton path did not run the fused kernels"
    return out["torch"], out["triton"]


@pytest.mark.parametrize("codec", BLOCK_CODECS)
def test_codec_triton_fast_path_is_bit_identical_to_torch(interpreted, codec, monkeypatch):
    # (128, 700): several programs, a partial last block; (8, 45): small blocks; (16, 5): one partial block; empty.
    # Each case: (block, n, stochastic with given noise?, with a residual?).
    for block, n, sr, with_res in [(128, 700, True, True), (128, 700, False, False), (8, 45, True, True),
                                   (8, 45, False, True), (16, 5, True, False), (16, 0, True, True)]:
        x = _codec_input(n, n).to(DEV)
        res = (torch.randn(n) * 0.01).to(DEV) if with_res else None
        u = torch.rand(n, device=DEV) if sr else None
        want, got = _codec_both_paths(codec, block, x, res, u, monkeypatch)
        monkeypatch.undo()
        for name, a, b in zip(("payload", "decoded", "residual", "encode", "decode"), want, got):
            assert torch.equal(_bits(a), _bits(b)), (codec, block, n, sr, name)


def test_codec_triton_path_in_error_feedback_and_non_finite(interpreted):
    """ErrorFeedback over several rounds gives the same payloads and residuals on both paths; a NaN is refused on both;
    a block size whose codes straddle bytes takes the torch path even when triton is forced."""
    xs = [_codec_input(300, s).to(DEV) for s in range(3)]
    runs = {}
    for backend in ("torch", "triton"):
        ef, c, g = codecs.ErrorFeedback(), codecs.get_codec("int2", 32), torch.Generator(device=DEV).manual_seed(5)
        with K.set_backend(backend):
            runs[backend] = [ef.compress("k", x, c, stochastic=True, generator=g)[0].data for x in xs]
            runs[backend].append(ef.residual("k"))
            with pytest.raises(codecs.NonFiniteError):
                c.encode(torch.tensor([1.0, float("nan")] * 20, device=DEV))
    for a, b in zip(runs["torch"], runs["triton"]):
        assert torch.equal(_bits(a), _bits(b))
    with K.set_backend("triton"):
        odd = codecs.get_codec("int4", 7)  # 4-bit codes, 7-value blocks: a byte straddles two blocks
        assert not odd._fused(xs[0])
        assert odd.decode(odd.encode(xs[0])).shape == xs[0].shape  # runs (torch path) instead of raising


def test_triton_module_refuses_a_changed_interpret_mode(interpreted, monkeypatch):
    mod = dispatch.triton_module("triton_mx")  # defined in the current mode
    assert mod.INTERPRETED == dispatch.interpreting()
    monkeypatch.setenv("TRITON_INTERPRET", "0" if mod.INTERPRETED else "1")
    with pytest.raises(K.KernelBackendError, match="TRITON_INTERPRET"):
        dispatch.triton_module("triton_mx")
