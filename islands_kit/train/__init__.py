"""The training shell around the core: the experiment's state and loop (``experiment.py``), the drivers that step any
strategy through one interface (``drivers.py``), the strategy factory and sync schedule (``strategies.py``), evaluation
(``evaluation.py``), result assembly (``result.py``) and the files a finished run writes (``outputs.py``). The public
entry point is ``islands_kit.run.run_experiment``."""
