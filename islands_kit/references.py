"""Published DiLoCo points that the scaling study's figure is drawn beside (final eval loss, DiLoCo vs data-parallel
at the same compute): Charles et al. 2025, "Scaling Laws for DiLoCo", Table 4; Douillard et al. 2025, Streaming
DiLoCo (M = 2, FP4 outer gradients). Their training budgets follow Chinchilla (about 20 tokens per parameter), so
their FLOPs are taken as 6 · N · 20 N — an assumption stated wherever the points are drawn."""
from __future__ import annotations

# (parameters, relative change of final eval loss vs data-parallel): M = 2 and M = 8 replicas
REFERENCE_DILOCO_M2 = [(35e6, 0.007), (90e6, 0.005), (335e6, 0.001), (1.3e9, 0.002), (2.4e9, -0.001)]
REFERENCE_DILOCO_M8 = [(35e6, 0.039), (2.4e9, 0.011)]
REFERENCE_STREAMING_M2 = [(35e6, 3.53 / 3.51 - 1), (500e6, 2.67 / 2.67 - 1), (1e9, 2.48 / 2.49 - 1)]
CHINCHILLA_TOKENS_PER_PARAM = 20


def reference_flops(params: float) -> float:
    """Training FLOPs of a published point under the Chinchilla assumption: 6 · N · (20 N)."""
    return 6.0 * params * CHINCHILLA_TOKENS_PER_PARAM * params
