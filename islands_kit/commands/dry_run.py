"""``islands-kit run --dry-run``: every check a run makes before it trains, then what would run, where, how much
memory a step needs at least and about how long each run takes here."""
from __future__ import annotations

import os
from pathlib import Path

from islands_kit.config import ConfigError, ExperimentConfig
from islands_kit.records.locks import lock_owner
from islands_kit.train.checkpoint import check_resume, read_config
from islands_kit.train.estimate import estimate_within
from islands_kit.train.preflight import describe_memory, preflight
from islands_kit.train.progress import format_duration


def dry_run(cfgs: list[ExperimentConfig], outs: list[Path], resume: str | None) -> int:
    """Make every check a run makes before training (islands_kit.train.preflight: config, output folder, corpus, device,
    memory; the checkpoint when resuming) for each run (one, or a sweep's one per seed), say what would run, where
    each run writes, and about how long each takes here (``estimate.estimate_within``: a few timed steps, stopped at a deadline)."""
    devices = []
    for cfg, out in zip(cfgs, outs):
        devices.append(preflight(cfg, out))
        owner = lock_owner(out)
        if owner is not None:
            raise ConfigError(f"--out: {out} is in use by another run ({owner}); wait for it to end or choose another "
                              "--out")
        if resume:
            check_resume(cfg, resume)
    from islands_kit.notebooks import config_summary  # here: the notebooks' package draws with matplotlib, which a run never needs

    print(config_summary(cfgs[0]) + (f"\nseeds {' '.join(str(c.seed) for c in cfgs)}: one run each" if len(cfgs) > 1 else ""))
    for cfg, out in zip(cfgs, outs):
        where = f"resume {resume} and write {out}" if resume else f"write {out}"
        print(f"dry run: valid; {cfg.experiment} seed {cfg.seed} would {where}/result.json (nothing trained)")
    print(describe_memory(cfgs[0], devices[0]))
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        print("time: not estimated under torchrun (each process holds only its own islands)")
        return 0
    try:
        est = estimate_within(cfgs[0], read_config(resume)[1] if resume else 0)
    except RuntimeError as e:
        print(e)
        return 1
    total = f"; all {len(cfgs)} runs, one after another: about {format_duration(len(cfgs) * est.total_s)}" if len(cfgs) > 1 else ""
    print(f"time: {est.describe()}{total}")
    return 0
