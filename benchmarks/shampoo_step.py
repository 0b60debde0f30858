"""Step time of Shampoo (islands_kit.optim.Shampoo) vs torch.optim.AdamW on the demo-size MoE model.

Two figures, measured side by side in one run (the two optimizers alternate window by window, the order flipping each
repeat, so load drifts hit both alike):
  * step only — ``optimizer.step()`` alone (forward/backward run untimed before it);
  * full      — forward + backward + step.
A sample is a window of ``--freq`` consecutive steps, so Shampoo's one root recomputation per window (the amortised
eigendecompositions) is inside every sample; we print the median per-step time over ``--repeats`` windows and the ratio
Shampoo / AdamW (goal for the full step: <= 1.25).

The model is the real one when importable (``islands_kit.model``: ``build_model(model_config("demo"))``, else
``MoETransformer(ModelConfig())``), otherwise a stand-in with the same parameter shapes (d_model 128, 4 layers,
16 experts of 128 x 128 SwiGLU matrices, top-2 routing).

    python benchmarks/shampoo_step.py [--repeats 7] [--batch 24] [--freq 10] [--inv-root-dtype float64]
"""
from __future__ import annotations

import argparse
import copy
import statistics
from typing import Callable

import torch
from step_timing import window  # benchmarks/step_timing.py, beside this script
from torch import Tensor, nn

from islands_kit.optim import Shampoo


class StandIn(nn.Module):
    """Same parameter shapes as the demo MoE transformer; tokens go to 2 experts by a fixed rule (timing only)."""

    def __init__(self, d: int = 128, layers: int = 4, experts: int = 16, f: int = 128) -> None:
        super().__init__()
        self.emb, self.head, self.E = nn.Embedding(256, d), nn.Linear(d, 256, bias=False), experts
        self.layers = nn.ModuleList()
        for _ in range(layers):
            blk = nn.Module()
            blk.norm1, blk.norm2 = nn.RMSNorm(d), nn.RMSNorm(d)
            blk.wqkv, blk.wo = nn.Linear(d, 3 * d, bias=False), nn.Linear(d, d, bias=False)
            blk.router = nn.Linear(d, experts, bias=False)
            blk.w1, blk.w3 = nn.Parameter(torch.randn(experts, d, f) * 0.02), nn.Parameter(torch.randn(experts, d, f) * 0.02)
            blk.w2 = nn.Parameter(torch.randn(experts, f, d) * 0.02)
            self.layers.append(blk)

    def forward(self, idx: Tensor, targets: Tensor) -> Tensor:
        B, T = idx.shape
        x = self.emb(idx)  # (B, T, D)
        for blk in self.layers:
            q, k, v = blk.wqkv(blk.norm1(x)).chunk(3, dim=-1)
            x = x + blk.wo(nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True))
            h = blk.norm2(x).reshape(B * T, -1)  # (N, D)
            gate = blk.router(h).softmax(-1)  # (N, E)
            out = torch.zeros_like(h)
            for j in range(2):  # expert of token i: (i + j) mod E, tokens grouped per expert: (E, N/E, D)
                hh = h.roll(-j, 0).reshape(self.E, -1, h.shape[-1]) if (B * T) % self.E == 0 else None
                assert hh is not None, "batch * seq must be divisible by the number of experts"
                y = torch.bmm(nn.functional.silu(torch.bmm(hh, blk.w1)) * torch.bmm(hh, blk.w3), blk.w2)  # (E, N/E, D)
                out = out + y.reshape(B * T, -1).roll(j, 0) * gate[:, :1]
            x = x + out.reshape(B, T, -1)
        return nn.functional.cross_entropy(self.head(x).reshape(B * T, -1), targets.reshape(-1))


def build(batch: int, standin: bool) -> tuple[nn.Module, Callable[[nn.Module], Tensor], str]:
    torch.manual_seed(0)
    idx, tgt = torch.randint(0, 256, (batch, 128)), torch.randint(0, 256, (batch, 128))
    if not standin:
        try:
            from islands_kit.config.presets import model_config
            from islands_kit.model import build_model

            model = build_model(model_config("demo"))
            return model, lambda m: _loss(m(idx, tgt)), "islands_kit.model demo"
        except ImportError:
            try:
                from islands_kit.config import ModelConfig
                from islands_kit.model import MoETransformer  # type: ignore[attr-defined]

                model = MoETransformer(ModelConfig())
                return model, lambda m: _loss(m(idx, tgt)), "islands_kit.model MoETransformer"
            except ImportError:
                pass
    return StandIn(), lambda m: m(idx, tgt), "stand-in (same shapes)"


def _loss(out: object) -> Tensor:
    aux = getattr(out, "aux_loss", None)
    return out.loss + aux if aux is not None else out.loss  # type: ignore[attr-defined]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--batch", type=int, default=24, help="sequences of 128 bytes per step (demo site-a batch: 24)")
    ap.add_argument("--freq", type=int, default=10, help="Shampoo precondition_frequency (= window length)")
    ap.add_argument("--inv-root-dtype", choices=("float64", "float32"), default="float64")
    ap.add_argument("--standin", action="store_true", help="use the stand-in model even if the real one imports")
    args = ap.parse_args()

    model, loss_fn, desc = build(args.batch, args.standin)
    n_params = sum(p.numel() for p in model.parameters())
    models = {"adamw": model, "shampoo": copy.deepcopy(model)}
    opts = {
        "adamw": torch.optim.AdamW(models["adamw"].parameters(), lr=1e-3, weight_decay=0.1),
        "shampoo": Shampoo(models["shampoo"].parameters(), lr=1e-3, weight_decay=0.1, precondition_frequency=args.freq,
                           start_preconditioning_step=1, inv_root_dtype=getattr(torch, args.inv_root_dtype)),
    }
    for name in opts:  # warm-up: first roots, allocator, lazy imports
        window(models[name], opts[name], loss_fn, args.freq)
    samples: dict[str, list[tuple[float, float]]] = {k: [] for k in opts}
    for r in range(args.repeats):
        for name in (("adamw", "shampoo") if r % 2 == 0 else ("shampoo", "adamw")):
            samples[name].append(window(models[name], opts[name], loss_fn, args.freq))
    med = {k: (statistics.median(s[0] for s in v), statistics.median(s[1] for s in v)) for k, v in samples.items()}

    print(f"model: {desc}, {n_params / 1e6:.2f} M params, batch {args.batch} x 128, threads {torch.get_num_threads()}")
    print(f"shampoo: precondition_frequency {args.freq}, inv_root_dtype {args.inv_root_dtype}; "
          f"medians over {args.repeats} windows of {args.freq} steps (root recomputation included)")
    print(f"{'':10s} {'step only (ms)':>15s} {'fwd+bwd+step (ms)':>18s}")
    for k in opts:
        print(f"{k:10s} {med[k][0] * 1e3:15.1f} {med[k][1] * 1e3:18.1f}")
    print(f"ratio shampoo/adamw: step only {med['shampoo'][0] / med['adamw'][0]:.2f}x, "
          f"full step {med['shampoo'][1] / med['adamw'][1]:.2f}x (goal <= 1.25)")
    print(f"root failures: {opts['shampoo'].root_failures}")  # type: ignore[attr-defined]


if __name__ == "__main__":
    main()
