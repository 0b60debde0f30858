"""The scaling trend: the two-site gap against model size and training tokens, fitted with intervals and set beside
the published curve (``references.py``: Charles et al. 2025; ``fit.py``: the fits; ``trend.py``: a study's points
into ``benchmarks/scaling-trend.json``)."""
