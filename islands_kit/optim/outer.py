"""Outer optimizers: a step on slow weights from a pseudo-gradient, and SNOO, the single-worker form.

Symbols as in SNOO (Kallusky et al. 2025, "SNOO: Step-K Nesterov Outer Optimizer", arXiv 2510.15830) and DiLoCo
(Douillard et al. 2023):

    w̃_{t,0} = w_t;  w̃_{t,k+1} = w̃_{t,k} − η̃_{t,k} T(w̃_{t,k})   (K inner steps of AdamW / Shampoo on the fast weights)
    s_t = w_t − w̃_{t,K}                                        (the pseudo-gradient; DiLoCo: the islands' averaged Δ)
    b_t = μ b_{t−1} + s_t,   w_{t+1} = w_t − η (μ b_t + s_t)     (Nesterov; heavy ball: w_t − η b_t)

then the fast weights restart from w_{t+1}. With μ = 0 it is Lookahead (α = η); with η = 1, μ = 0 the slow weights
become the fast ones and training is the inner optimizer alone. η/(1 − μ) is the step's long-run gain on a constant
pseudo-gradient (DiLoCo's published 0.7 / 0.9: 7x; the authors' modded-nanogpt record, 0.68 / 0.37: 1.08x).

``OuterStep`` holds one slow tensor's outer optimizer (``torch.optim.SGD``, or anything an ``OuterFactory`` builds:
torchft's shape, the optimizer handed in; a config names one of ``OUTER_MAKERS``: sgd, adam, or one registered), its
momentum ramp and what each step did (``OuterRecord``: ‖s‖/‖w‖, the cosine with the previous s, ‖w‖ after the
step, the applied step over ‖s‖). ``sync/diloco.py`` gives each fragment's global copy one; ``Snoo`` wraps an
island's inner optimizer with one over all of its parameters.
"""
from __future__ import annotations

import math
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator

import torch
from torch import nn

from islands_kit.config import ConfigError
from islands_kit.config.model import OUTER_OPTIMIZERS

# builds the outer optimizer over one list of slow parameters (torchft takes the outer optimizer the same way)
OuterFactory = Callable[[list[nn.Parameter]], torch.optim.Optimizer]


def nesterov_sgd(lr: float, momentum: float, nesterov: bool = True) -> OuterFactory:
    """DiLoCo's and SNOO's outer optimizer: SGD with (Nesterov) momentum μ at learning rate η; μ = 0 is plain SGD
    on the pseudo-gradient (Lookahead)."""
    return lambda params: torch.optim.SGD(params, lr=lr, momentum=momentum, nesterov=nesterov and momentum > 0)


def adam(lr: float, momentum: float, nesterov: bool = False) -> OuterFactory:
    """Adam on the pseudo-gradient at learning rate η, β1 = μ, β2 = 0.999 (``nesterov`` is not read)."""
    return lambda params: torch.optim.Adam(params, lr=lr, betas=(momentum, 0.999))


# (lr, momentum, nesterov) -> the factory of one outer optimizer; the names a config may choose are
# config.model.OUTER_OPTIMIZERS (torch-free, for validation), kept equal to these keys by register_outer_optimizer
OuterMaker = Callable[[float, float, bool], OuterFactory]
OUTER_MAKERS: dict[str, OuterMaker] = {"sgd": nesterov_sgd, "adam": adam}


def outer_factory(name: str, lr: float, momentum: float, nesterov: bool) -> OuterFactory:
    """The outer optimizer a config names (``sync.diloco.outer_optimizer``, ``optim.snoo.outer_optimizer``)."""
    if name not in OUTER_MAKERS:
        raise ConfigError(f"outer_optimizer: must be one of {'|'.join(OUTER_MAKERS)} (got {name!r})")
    return OUTER_MAKERS[name](lr, momentum, nesterov)


def register_outer_optimizer(name: str, make: OuterMaker, help: str) -> None:
    """Let configs name another outer optimizer (anything with ``torch.optim.Optimizer``'s interface, built from
    (lr, momentum, nesterov)); ``help`` is its one line. A ValueError if the name is taken."""
    if name in OUTER_MAKERS or name in OUTER_OPTIMIZERS:
        raise ValueError(f"outer optimizer {name!r} is already registered")
    OUTER_MAKERS[name] = make
    OUTER_OPTIMIZERS[name] = help


def unregister_outer_optimizer(name: str) -> None:
    """Take a registered outer optimizer away again (a test's clean-up)."""
    OUTER_MAKERS.pop(name, None)
    OUTER_OPTIMIZERS.pop(name, None)


@dataclass
class OuterRecord:
    """One outer step: ``rel_delta`` = ‖s‖ / ‖w‖ before the step, ``cos_prev`` = cos(s, previous s) (None at the first
    step), ``weight_norm`` = ‖w‖ after it, ``applied_over_delta`` = ‖w_after − w_before‖ / ‖s‖ (1 for η = 1, μ = 0)."""

    rel_delta: float
    cos_prev: float | None
    weight_norm: float
    applied_over_delta: float

    def as_dict(self) -> dict[str, Any]:
        return {"rel_delta": self.rel_delta, "cos_prev": self.cos_prev, "weight_norm": self.weight_norm,
                "applied_over_delta": self.applied_over_delta}


def _norm(ts: Iterable[torch.Tensor]) -> float:
    return math.sqrt(sum(float(t.double().pow(2).sum()) for t in ts))


def _dot(a: Iterable[torch.Tensor], b: Iterable[torch.Tensor]) -> float:
    return sum(float((x.double() * y.double()).sum()) for x, y in zip(a, b))


class OuterStep:
    """The outer optimizer of ``slow`` (parameters holding w), with the momentum ramp of ``momentum_warmup`` steps:
    the k-th step (k = 0, 1, …) runs at momentum μ · min(1, k / K), so the first steps are not amplified by a buffer
    holding one direction (μ read from the optimizer's first group when built)."""

    def __init__(self, slow: list[nn.Parameter], factory: OuterFactory, momentum_warmup: int = 0) -> None:
        self.slow = slow
        self.opt = factory(slow)
        self.momentum = float(self.opt.param_groups[0].get("momentum", 0.0))
        self.momentum_warmup = momentum_warmup
        self.n = 0  # outer steps taken
        self.prev: list[torch.Tensor] | None = None  # the previous pseudo-gradient (for cos_prev)

    @torch.no_grad()
    def step(self, deltas: list[torch.Tensor]) -> OuterRecord:
        """w ← the outer optimizer's step with pseudo-gradient ``deltas`` (one per slow tensor, any shape of equal
        numel); returns what the step did."""
        before = [w.detach().clone() for w in self.slow]
        grads = [d.reshape(w.shape).to(w.device, copy=True) for d, w in zip(deltas, self.slow)]
        for w, g in zip(self.slow, grads):
            w.grad = g
        K = self.momentum_warmup
        if K > 0:
            for group in self.opt.param_groups:
                if "momentum" in group:
                    group["momentum"] = self.momentum * min(1.0, self.n / K)
        self.opt.step()
        for w in self.slow:
            w.grad = None
        self.n += 1
        d_norm = _norm(grads)
        cos = None
        if self.prev is not None:
            p_norm = _norm(self.prev)
            cos = _dot(grads, self.prev) / (d_norm * p_norm) if d_norm > 0 and p_norm > 0 else 0.0
        self.prev = grads
        w_before = _norm(before)
        applied = _norm([w.detach() - b for w, b in zip(self.slow, before)])
        return OuterRecord(rel_delta=d_norm / w_before if w_before > 0 else math.inf, cos_prev=cos,
                           weight_norm=_norm(w.detach() for w in self.slow),
                           applied_over_delta=applied / d_norm if d_norm > 0 else 0.0)

    def state_dict(self) -> dict[str, Any]:
        return {"opt": self.opt.state_dict(), "n": self.n,
                "prev": None if self.prev is None else [t.clone() for t in self.prev]}

    def load_state_dict(self, d: dict[str, Any]) -> None:
        self.opt.load_state_dict(d["opt"])
        self.n = int(d["n"])
        # a checkpoint loads onto the CPU: the previous pseudo-gradient goes where the slow weights are
        self.prev = None if d["prev"] is None else [t.to(w.device, copy=True) for t, w in zip(d["prev"], self.slow)]


class Snoo:
    """SNOO around an inner optimizer (module doc): ``after_inner_step`` counts the inner steps and after every K-th
    one gives the slow weights the outer step with s = w − w̃ and restarts the fast weights (the model's parameters)
    from them. Every parameter takes the outer step (the authors' code excludes none). The model is scored as it
    stands (the fast weights, as the authors' code does), which after a K-th step are the slow weights.

    With several ``groups`` (Streaming DiLoCo's fragments, ``optim.snoo.fragments``) each group has its own outer
    optimizer and steps after the inner steps t ≡ ``offsets[p]`` (mod K): DiLoCo with M = 1 and staggered fragments,
    on any experiment's own data."""

    def __init__(self, groups: list[list[nn.Parameter]], k: int, factory: OuterFactory, momentum_warmup: int = 0,
                 decay: float = 0.0, fast_at: int | None = None, offsets: list[int] | None = None) -> None:
        """``decay``: the slow matrices (ndim >= 2) are scaled by 1 − ``decay`` after each outer step (decoupled
        weight decay on the slow weights; optim.snoo.lr x optim.snoo.weight_decay). ``fast_at``: the inner step
        (the run's last, ``optim.snoo.final=fast``) after which no outer step is taken: the slow weights become the
        fast ones, and the scored model carries no extrapolation. ``offsets``: each group's step in the K-step
        window (None: every group at t ≡ 0)."""
        if k < 1:
            raise ValueError(f"optim.snoo.k: must be >= 1 to build SNOO (got {k})")
        self.fast = groups
        self.k = k
        self.offsets = list(offsets) if offsets is not None else [0] * len(groups)
        if len(self.offsets) != len(groups) or not all(0 <= o < k for o in self.offsets):
            raise ValueError(f"optim.snoo: {len(groups)} groups need as many offsets in [0, {k}) (got {self.offsets})")
        self.outer = [OuterStep([nn.Parameter(p.detach().clone()) for p in g], factory, momentum_warmup) for g in groups]
        self.decay = decay
        self.fast_at = fast_at
        self.inner_steps = 0
        self.records: list[dict[str, Any]] = []  # one per outer step: its inner step, group and OuterRecord.as_dict()

    @torch.no_grad()
    def after_inner_step(self) -> None:
        self.inner_steps += 1
        for p, (outer, fast) in enumerate(zip(self.outer, self.fast)):
            if self.inner_steps == self.fast_at:
                for w, f in zip(outer.slow, fast):
                    w.copy_(f.detach())
                continue
            if self.inner_steps % self.k != self.offsets[p]:
                continue
            rec = outer.step([w.detach() - f.detach() for w, f in zip(outer.slow, fast)])
            for w, f in zip(outer.slow, fast):
                if self.decay > 0 and w.ndim >= 2:
                    w.mul_(1.0 - self.decay)
                f.copy_(w.detach())
            self.records.append({"step": self.inner_steps, "group": p, **rec.as_dict()})

    @contextmanager
    def external(self) -> Iterator[None]:
        """Around a write into the fast weights that is not the inner optimizer's (a sync strategy's merge landing
        on the island, a rejoin): the slow weights take the same change, so the window's own progress w̃ − w is
        unchanged and the next outer step smooths that progress alone. Without it the outer step would apply only
        η of the merge (and carry the rest in its momentum): SNOO inside each site would pull the sites' merges
        back toward its stale slow weights."""
        before = [[f.detach().clone() for f in g] for g in self.fast]
        yield
        with torch.no_grad():
            for o, g, b in zip(self.outer, self.fast, before):
                for w, f, f0 in zip(o.slow, g, b):
                    w.add_(f.detach() - f0)

    def state_dict(self) -> dict[str, Any]:
        return {"slow": [[w.detach().clone() for w in o.slow] for o in self.outer],
                "outer": [o.state_dict() for o in self.outer], "inner_steps": self.inner_steps,
                "records": list(self.records)}

    def load_state_dict(self, d: dict[str, Any]) -> None:
        with torch.no_grad():
            for o, vs in zip(self.outer, d["slow"]):
                for w, v in zip(o.slow, vs):
                    w.copy_(v)
        for o, s in zip(self.outer, d["outer"]):
            o.load_state_dict(s)
        self.inner_steps = int(d["inner_steps"])
        self.records = list(d["records"])
