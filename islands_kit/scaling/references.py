"""Published DiLoCo-vs-data-parallel points the scaling trend is drawn beside.

Charles et al. 2025, "Communication-Efficient Language Model Training Scales Reliably and Robustly: Scaling Laws for
DiLoCo" (arXiv 2503.09799): the relative difference of final evaluation loss, DiLoCo against data-parallel training,
each tuned, at about 20 tokens per parameter (Chinchilla budgets). Table 4 (measured): M = 2 replicas at every size;
M = 8 at the two ends. Table 5: M = 2 at 4B and 10B (the paper's extrapolation-checked runs). Their models are dense,
so active = total parameters. Douillard et al. 2025 (Streaming DiLoCo, M = 2, FP4 outer gradients): three sizes.
"""
from __future__ import annotations

# (parameters, gap = DiLoCo / data-parallel - 1 in final eval loss)
CHARLES_M2_TABLE4 = ((35e6, 0.007), (90e6, 0.005), (180e6, 0.003), (335e6, 0.001), (550e6, 0.002), (1.3e9, 0.002),
                     (2.4e9, -0.001))
CHARLES_M2_TABLE5 = ((4e9, -0.0018), (10e9, -0.0019))
CHARLES_M8_TABLE4 = ((35e6, 0.039), (2.4e9, 0.011))
STREAMING_M2 = ((35e6, 3.53 / 3.51 - 1), (500e6, 2.67 / 2.67 - 1), (1e9, 2.48 / 2.49 - 1))
CHINCHILLA_TOKENS_PER_PARAM = 20
SOURCE = "Charles et al. 2025 (arXiv 2503.09799), Table 4, M = 2 vs data-parallel, each tuned"


def charles_m2(with_table5: bool = False) -> tuple[tuple[float, float], ...]:
    """Table 4's seven M = 2 points (parameters, gap), and Table 5's two larger ones when ``with_table5``."""
    return CHARLES_M2_TABLE4 + (CHARLES_M2_TABLE5 if with_table5 else ())
