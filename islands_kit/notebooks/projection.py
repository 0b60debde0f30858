"""What the notebooks draw from the projections (``islands_kit.projection``): utilisation against bandwidth for the
published tables' cases."""
from __future__ import annotations

from islands_kit.projection.published import CASES, GRID_GBPS, METHODS, PUBLISHED, T6, T6_STEP_FACTOR, paper_utilisation

__all__ = ["utilisation_curves"]


def utilisation_curves(case: str, step_factor: float = T6_STEP_FACTOR
                       ) -> tuple[dict[str, tuple[list[float], list[float]]], dict[str, list[tuple[float, float]]], str]:
    """For ``case`` of the published tables: the kit's utilisation on every grid bandwidth per method (the papers'
    schedule at ``step_factor`` x the printed step time, by default the reading that reproduces Charles et al.'s
    Table 6), that table's cells as (Gbit/s, target) points, and a title."""
    if case not in CASES:
        raise ValueError(f"utilisation_case: must be one of {'|'.join(CASES)} (got {case!r})")
    c = CASES[case]
    curves: dict[str, tuple[list[float], list[float]]] = {}
    points: dict[str, list[tuple[float, float]]] = {}
    for H, label in METHODS:
        curves[label] = (list(GRID_GBPS), [paper_utilisation(c, H, g, step_factor) for g in GRID_GBPS])
        for pub in PUBLISHED.get((case, H), []):
            if pub.source == T6:
                targets = (0.5, 0.8, 0.9, 0.95, 0.99)
                points[label] = [(g, t) for g, t in zip(pub.gbps, targets) if g is not None]
    title = (f"{case}, two sites: the papers' schedule on the kit's clock at {step_factor:g} x {c.step_s:.3g} s "
             f"per step\n(circles: {T6})")
    return curves, points, title
