"""What a run leaves behind besides its numbers, and who may write where: the run tracker (result.json, history.jsonl,
the standard figures, wandb logging offline by default) in ``tracking.py``, wandb's offline run files read back in
``wandb_files.py``, and the folder locks that keep one writer per run in ``locks.py``. The strict-JSON writer and
``load_result`` are lower down, in ``islands_kit/io.py``.

Imports nothing from ``train``, ``commands`` or the entry points (``run.py``, ``cli.py``): a run's loop reports to
the tracker, never the reverse. Import from the modules (``islands_kit.records.tracking``); this file re-exports
nothing."""
