"""The sync schedules of DiLoCo and Streaming DiLoCo: which fragment syncs after which inner step.

Symbols as in :mod:`islands_kit.sync.diloco`: H inner steps per window, P fragments, fragment p syncing after steps
t ≡ offset_p (mod H); the quadratic synchronisation rule (``sync.diloco.h_schedule="qsr"``) stretches the windows as
the inner lr decays. Pure functions of integers (and the config), shared by the strategies, the projection and the
plots.
"""
from __future__ import annotations

import math
from typing import Callable

from islands_kit.config import ExperimentConfig
from islands_kit.optim.schedule import lr_lambda


def fragment_offsets(H: int, P: int) -> list[int]:
    """Step offsets inside the H-step window at which each fragment syncs (t ≡ offset_p mod H)."""
    return [round((p + 1) * H / P) % H for p in range(P)]


def streaming_schedule(H: int, P: int, steps: int) -> list[tuple[int, int]]:
    """(step, fragment) pairs at which fragments sync during ``steps`` inner steps (1-based steps)."""
    offs = fragment_offsets(H, P)
    return [(t, p) for t in range(1, steps + 1) for p in range(P) if t % H == offs[p]]


def qsr_windows(H_base: int, alpha: float, lr_at: Callable[[int], float], steps: int) -> list[tuple[int, int]]:
    """The quadratic synchronisation rule (Gu et al. 2023, "A Quadratic Synchronization Rule for Distributed Deep
    Learning"): windows (start, H_k) covering ``steps`` inner steps, H_k = max(H_base, floor((α / η_k)²)) with η_k =
    ``lr_at(start)``, the inner learning rate when the window starts (0-based step count)."""
    out, start = [], 0
    while start < steps:
        lr = lr_at(start)
        Hk = H_base if lr <= 0 else max(H_base, math.floor((alpha / lr) ** 2))
        out.append((start, Hk))
        start += Hk
    return out


def sync_schedule(H: int, P: int, steps: int, windows: list[tuple[int, int]] | None = None) -> list[tuple[int, int]]:
    """(step, fragment) pairs of the streaming schedule; with ``windows`` (``qsr_windows``) fragment p syncs in the
    window (s, H_k) after step s + offset_p(H_k), offset 0 meaning the window's last step — the constant schedule's
    rule applied window by window. Without ``windows`` it is ``streaming_schedule``."""
    if windows is None:
        return streaming_schedule(H, P, steps)
    out = []
    for start, Hk in windows:
        offs = fragment_offsets(Hk, P)
        out += [(start + (o if o else Hk), p) for p, o in enumerate(offs) if start + (o if o else Hk) <= steps]
    return sorted(out)


def diloco_schedule(cfg: ExperimentConfig) -> list[tuple[int, int]]:
    """The (step, fragment) syncs of a DiLoCo run (``sync.diloco.h_schedule``; decoupled: steps of the schedule).
    QSR reads the lr of the warm-up as the peak: the rule governs the decay (Gu et al. apply it after warm-up)."""
    s = cfg.sync
    windows = None
    if s.diloco.h_schedule == "qsr":
        o = cfg.optim
        windows = qsr_windows(s.H, s.diloco.qsr_alpha,
                              lambda t: o.lr * lr_lambda(max(t, o.warmup_steps), o, cfg.steps), cfg.steps)
    return sync_schedule(s.H, s.n_fragments, cfg.steps, windows)
