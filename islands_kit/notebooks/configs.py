"""A notebook's parameters turned into validated configs before anything trains: one run's config
(``notebook_config``) and output folder, the two_site notebook's lock-step vs decoupled pair, the poisoned-island
notebook's three runs. A bad value raises ConfigError naming the field."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping

from islands_kit.config import LINK_PRESETS, ExperimentConfig, _check, apply_overrides


def notebook_config(experiment: str, preset: str, seed: int, steps: int,
                    named: Mapping[str, Any] | None = None,
                    overrides: Mapping[str, Any] | None = None) -> ExperimentConfig:
    """The validated config of one notebook run: ``presets.get_preset(experiment, preset)``, then ``seed``, ``steps``
    (0 = the preset's), the dotted-path values of the notebook's named parameters (``named``: ``{"sync.H": H,
    "link.preset": link, ...}``) whose value is not None (None = keep the preset's), then the notebook's free-form
    ``overrides`` parameter (any ``--set`` key: ``{"optim.lr": 3e-3, "threads": 1}``). A key set both ways is refused
    (set it in one place). Any bad value raises ConfigError naming the field and the rule; a corpus that names no
    registered corpus, hub dataset or existing file is refused here too, before training."""
    from islands_kit.config.presets import get_preset

    _check(isinstance(steps, int) and not isinstance(steps, bool) and steps >= 0, "steps",
           "must be an integer >= 0 (0 = the preset's)", steps)
    overrides = check_overrides(overrides)
    cfg = get_preset(experiment, preset)
    ov: dict[str, Any] = {"seed": seed}
    if steps:
        ov["steps"] = steps
    ov.update({k: v for k, v in (named or {}).items() if v is not None})
    for key in overrides:
        _check(key not in ov, "overrides", f"{key!r} is also set by a named parameter of the notebook; set it in "
               "one place", overrides)
    ov.update(overrides)
    cfg = apply_overrides(cfg, ov)
    from islands_kit.data import check_corpus_spec

    check_corpus_spec(cfg.data.corpus)  # a path matching nothing is refused before any work
    return cfg


def check_overrides(overrides: Mapping[str, Any] | None) -> dict[str, Any]:
    """A notebook's ``overrides`` parameter: a mapping of dotted config keys (``--set`` keys) to values."""
    if overrides is None:
        return {}
    _check(isinstance(overrides, Mapping), "overrides",
           'must be a mapping of dotted config keys to values, e.g. {"optim.lr": 0.003}', overrides)
    for key in overrides:
        _check(isinstance(key, str) and key != "", "overrides", "keys must be dotted config keys such as 'sync.H'",
               key)
    return dict(overrides)


# the folder a notebook's relative output paths start from, when set (``make lab`` sets it to the checkout): a Jupyter
# kernel runs in the notebook's own folder, so ``runs/...`` would otherwise land in ``notebooks/runs/...``, where
# ``islands-kit compare runs/...`` from the checkout does not look
BASE_DIR_ENV = "ISLANDS_KIT_BASE_DIR"


def resolve_out_dir(out_dir: str | Path, default: str | Path | ExperimentConfig) -> Path:
    """``out_dir`` made absolute and created; when empty, ``default`` (for a config:
    ``runs/<experiment>-<preset>-s<seed>``). A relative path starts from ``$ISLANDS_KIT_BASE_DIR`` when set, else from
    the working directory."""
    if isinstance(default, ExperimentConfig):
        default = Path("runs") / f"{default.experiment}-{default.preset}-s{default.seed}"
    out = Path(os.environ.get(BASE_DIR_ENV) or ".") / Path(out_dir if str(out_dir) else default)
    out = out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    return out


def decoupled_pair(cfg: ExperimentConfig, windows: int, straggler_factor: float,
                   link: str = "") -> dict[str, ExperimentConfig]:
    """The two runs of the two_site notebook's decoupled section, built (and so validated) before anything trains.

    Both are ``cfg`` with site B (island 1) a ``straggler_factor``x straggler (``faults.straggler_*``), the named
    ``link`` (empty: ``cfg``'s) and one evaluation at the end: ``lockstep`` (``sync.mode=lockstep``) takes ``windows``
    x H inner steps, every one waiting for site B; ``decoupled`` (``sync.mode=decoupled``) runs round(that x
    ``straggler_factor``) ticks of the global schedule: site A takes a step every tick, site B one every
    ``straggler_factor`` ticks, as many as in lock-step (the same simulated time when the link never holds lock-step
    up; ``benchmarks/decoupled.py``'s equal-time arm). They log to their own wandb group (``<group>-side-runs``):
    side runs of the notebook, not members of the comparison the notebook may be part of."""
    _check(isinstance(windows, int) and not isinstance(windows, bool) and windows >= 1, "decoupled_windows",
           "must be an integer >= 1 (the section's length in H-step windows)", windows)
    _check(isinstance(straggler_factor, (int, float)) and not isinstance(straggler_factor, bool)
           and straggler_factor >= 1, "straggler_factor", "must be a number >= 1 (site B's step time multiplier)",
           straggler_factor)
    _check(link == "" or link in LINK_PRESETS, "decoupled_link", "must be empty (the notebook's link) or one of "
           + "|".join(LINK_PRESETS), link)
    _check(len(cfg.islands) >= 2, "islands", "the decoupled section needs a site B (island 1)", len(cfg.islands))
    steps = windows * cfg.sync.H
    ticks = round(steps * straggler_factor)
    slow: dict[str, Any] = {"faults.straggler_island": 1, "faults.straggler_factor": float(straggler_factor),
                            "wandb_group": f"{cfg.wandb_group or f'{cfg.experiment}-{cfg.preset}'}-side-runs"}
    if link:
        slow["link.preset"] = link
    return {"lockstep": apply_overrides(cfg, {**slow, "sync.mode": "lockstep", "steps": steps, "eval_every": steps}),
            "decoupled": apply_overrides(cfg, {**slow, "sync.mode": "decoupled", "steps": ticks,
                                               "eval_every": ticks})}


POISONED_RUNS = ("clean", "attacked", "defended")


def poisoned_island_setup(preset: str, seed: int, steps: int, attack: str, attack_island: int, attack_start: int,
                          attack_scale: float, attack_noise_std: float, defense: str, wandb_mode: str,
                          out_dir: str | Path, overrides: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The poisoned-island notebook's three validated two_site configs, before any training.

    ``clean`` (no attack), ``attacked`` (``faults.attack`` from ``attack_island`` from step ``attack_start``, no
    defence) and ``defended`` (the same attack, ``faults.defense = defense``); ``attack_start`` -1 means 40% into
    the run. ``overrides`` (any dotted config key) apply to all three. Returns ``{"runs": {name: cfg}, "labels":
    {name: legend}, "start": step, "start_tokens": training tokens before the attack, "out": folder}``."""
    _check(isinstance(attack_start, int) and attack_start >= -1, "attack_start",
           "must be an integer >= 0, or -1 (40% into the run)", attack_start)
    # every run merges with the plain mean, the rule the defences replace, so the defence is the one change
    common = {"wandb_mode": wandb_mode, "wandb_group": f"poisoned_island-{preset}-s{seed}", "sync.diloco.average": "mean"}
    clean = notebook_config("two_site", preset, seed, steps, common, overrides)
    start = attack_start if attack_start >= 0 else int(0.4 * clean.steps)
    faults = {"faults.attack": attack, "faults.attack_island": attack_island, "faults.attack_start": start,
              "faults.attack_scale": attack_scale, "faults.attack_noise_std": attack_noise_std}
    runs = {
        "clean": clean,
        "attacked": notebook_config("two_site", preset, seed, steps, {**common, **faults, "faults.defense": "none"},
                                    overrides),
        "defended": notebook_config("two_site", preset, seed, steps, {**common, **faults, "faults.defense": defense},
                                    overrides),
    }
    labels = {"clean": "clean", "attacked": f"{attack} from site {attack_island}, no defence",
              "defended": f"{attack} from site {attack_island}, defence {defense}"}
    tokens_per_step = clean.model.seq_len * sum(i.batch_size for i in clean.islands)
    out = resolve_out_dir(out_dir, Path("runs") / f"poisoned_island-{preset}-s{seed}")
    return {"runs": runs, "labels": labels, "start": start, "start_tokens": start * tokens_per_step, "out": out}
