"""The published grid the scaling trend is set beside, as data.

Charles et al. 2025, "Communication-Efficient Language Model Training Scales Reliably and Robustly: Scaling Laws for
DiLoCo" (arXiv 2503.09799 v1), the per-size table: final evaluation loss on C4 of data-parallel training (DP) and
DiLoCo with M = 1, 2, 4, 8 replicas, at seven sizes from 35M to 2.4B parameters. Conditions: D = 20 N tokens
(Chinchilla), H = 30, inner AdamW (0.9, 0.99), outer Nesterov momentum 0.9 with the outer lr swept; every cell tuned
over the inner lr (powers of sqrt 2) and the global batch (powers of 2), each grid extended until its minimum was
interior. Their models are dense: active = total parameters. Their own fits, L = A N^alpha per column, are
``THEIR_FITS`` (theirs, quoted; what this kit fits to the same losses is labelled "this kit's fit to published
values" wherever it appears). Table 5: M = 2 at 4B and 10B (their extrapolation-checked runs, gaps only).
Douillard et al. 2025 (Streaming DiLoCo, M = 2, FP4 outer gradients): three sizes (gaps from their losses).
"""
from __future__ import annotations

SOURCE = "Charles et al. 2025 (arXiv 2503.09799 v1), per-size evaluation loss, DP and DiLoCo M = 1, 2, 4, 8, each tuned"
SIZES = (35e6, 90e6, 180e6, 335e6, 550e6, 1.3e9, 2.4e9)
COLUMNS = ("DP", "M=1", "M=2", "M=4", "M=8")
# final evaluation loss per size (rows: SIZES), per column (COLUMNS)
LOSSES = {
    "DP": (3.485, 3.167, 2.950, 2.784, 2.653, 2.460, 2.326),
    "M=1": (3.482, 3.162, 2.943, 2.777, 2.645, 2.451, 2.317),
    "M=2": (3.508, 3.182, 2.957, 2.788, 2.657, 2.464, 2.323),
    "M=4": (3.554, 3.213, 2.981, 2.808, 2.673, 2.472, 2.332),
    "M=8": (3.621, 3.265, 3.019, 2.841, 2.698, 2.493, 2.351),
}
# their fits L = A N^alpha (A, alpha), as printed
THEIR_FITS = {"DP": (18.129, -0.0953), "M=1": (18.363, -0.0961), "M=2": (18.768, -0.0969), "M=4": (19.762, -0.0992),
              "M=8": (21.051, -0.1018)}
CHARLES_M2_TABLE5 = ((4e9, -0.0018), (10e9, -0.0019))
STREAMING_M2 = ((35e6, 3.53 / 3.51 - 1), (500e6, 2.67 / 2.67 - 1), (1e9, 2.48 / 2.49 - 1))
CHINCHILLA_TOKENS_PER_PARAM = 20
# the published column set beside each arm of ours
BESIDE = {"two_site": "M=2", "eight_cell": "M=8"}
# losses are printed to 3 decimals: rounding alone spreads a loss uniformly over +-0.0005
ROUNDING_SD = 0.0005 / 3 ** 0.5


def gaps(column: str) -> tuple[tuple[float, float], ...]:
    """(parameters, loss / DP loss - 1) of one DiLoCo column, from the losses (not from rounded percentages)."""
    if column not in LOSSES or column == "DP":
        raise ValueError(f"column: {column!r} is not one of {', '.join(c for c in COLUMNS if c != 'DP')}")
    return tuple((n, m / d - 1.0) for n, m, d in zip(SIZES, LOSSES[column], LOSSES["DP"]))


def charles_m2(with_table5: bool = False) -> tuple[tuple[float, float], ...]:
    """The M = 2 column's gaps at the seven sizes, and Table 5's two larger ones when ``with_table5``."""
    return gaps("M=2") + (CHARLES_M2_TABLE5 if with_table5 else ())
