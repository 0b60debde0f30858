"""Run records: result.json (written atomically), wandb logging (offline by default) and a reader for offline runs.

wandb is optional at run time: a disabled run (the tests) never imports it; ``offline`` (the kit's default) writes
runs under ``<out_dir>/wandb`` for a later ``wandb sync`` (:func:`sync_command`). The runs of one comparison share
``wandb_group``; :func:`log_comparison` adds the comparison itself as a run of that group. ``islands_kit.compare``
builds the comparison tables from result.json files, so it needs no wandb server.
"""
from __future__ import annotations

import json
import math
import os
import re
import time
from pathlib import Path
from typing import Any, Sequence

from islands_kit.config.strategies import modes_of
from islands_kit.io import RESULT_KEYS, dumps_strict, finite, load_result, write_json_atomic
from islands_kit.records.wandb_files import offline_run_records, wait_for_offline_run

__all__ = ["RESULT_KEYS", "Tracker", "dumps_strict", "load_result", "offline_run_records", "wait_for_offline_run",
           "write_json_atomic"]

WANDB_MODES = ("offline", "online", "disabled")
WANDB_RUN_FILE = "wandb_run.json"  # the run's wandb id, mode and folder: --resume continues the same wandb run


def resolve_wandb_mode(cfg_mode: str) -> str:
    """The wandb mode of one run: ``disabled`` when either the config or ``$WANDB_MODE`` says so, else ``$WANDB_MODE``
    when it names a mode (the caller's explicit choice, e.g. ``WANDB_MODE=online make demo``), else the config's.

    The environment is only read, never written, so a run's mode cannot leak into the next run of the same process;
    the mode reaches wandb as an explicit setting, which wandb ranks above its own environment variables."""
    env = os.environ.get("WANDB_MODE", "")
    if cfg_mode == "disabled" or env == "disabled":
        return "disabled"
    return env if env in WANDB_MODES else cfg_mode


def run_tags(cfg: Any) -> list[str]:
    """The wandb tags of a run: experiment, preset, corpus, sync strategy and mode, token budget (each at most 64
    characters)."""
    tags = [cfg.experiment, f"preset:{cfg.preset}", f"corpus:{cfg.data.corpus}", f"strategy:{cfg.sync.strategy}",
            f"sync_mode:{cfg.sync.mode}", f"tokens:{token_budget(cfg)}"]
    return [t[:64] for t in tags]


def token_budget(cfg: Any) -> int:
    """Planned training tokens: steps x global batch x sequence length."""
    return int(cfg.steps) * sum(int(i.batch_size) for i in cfg.islands) * int(cfg.model.seq_len)


def _si(n: float) -> str:
    for unit, div in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(n) >= div:
            return f"{n / div:.3g}{unit}"
    return f"{n:.0f}"


def run_name(cfg: Any, out_dir: str | Path | None) -> str:
    """A wandb run name that tells the runs of one group apart: experiment, preset, seed, the sync mode of a DiLoCo
    run, the token budget, and the run folder's own name when it adds something (the two_site notebook's
    ``decoupled/lockstep`` and ``decoupled/decoupled`` side runs), e.g. ``two_site-demo-s0-lockstep-3.07Mtok``."""
    parts = [cfg.experiment, cfg.preset, f"s{cfg.seed}"]
    if len(modes_of(cfg.sync.strategy)) > 1:  # a strategy that runs in more than one sync mode says which
        parts.append(cfg.sync.mode)
    parts.append(f"{_si(token_budget(cfg))}tok")
    leaf = Path(out_dir).name if out_dir else ""
    if leaf and leaf not in parts and leaf != f"{cfg.experiment}-{cfg.preset}-s{cfg.seed}":
        parts.append(leaf)
    return "-".join(parts)[:128]


def wandb_group(cfg: Any) -> str:
    """The run's wandb group: ``wandb_group`` when set (a comparison's, a sweep's, a study's name), else
    ``<experiment>-<preset>``, so that a lone run is never left without one."""
    return str(cfg.wandb_group or f"{cfg.experiment}-{cfg.preset}")


def wandb_line(cfg: Any, info: dict[str, Any] | None) -> str:
    """The one line a run ends with about wandb: off and why; or the mode, group, the run's local folder and, for an
    offline run, the command that uploads it (``info``: :meth:`Tracker.info`)."""
    if info is None or info.get("mode", "disabled") == "disabled":
        return wandb_off_note(cfg) or "wandb: off"
    where = f"wandb: {info['mode']} run {info['id']} (project {info['project']!r}, group {info['group']!r}) in {info['sync_dir']}"
    if info["mode"] == "offline":
        return f"{where}; upload it with: {info['sync']}"
    return f"{where}; synced as it ran"


def wandb_off_note(cfg: Any) -> str | None:
    """Why a run logs nothing to wandb, in one line (None when it logs): the config or the environment said so."""
    if resolve_wandb_mode(cfg.wandb_mode) != "disabled":
        return None
    if cfg.wandb_mode == "disabled":
        who = "the smoke preset sets" if cfg.preset == "smoke" else "the config sets"
        return f"wandb: off ({who} wandb_mode=disabled; --set wandb_mode=offline logs the run)"
    return "wandb: off (WANDB_MODE=disabled in the environment)"


def wandb_settings(mode: str) -> Any:
    """Quiet settings: no banner or widget in notebook outputs, no console capture (progress lines stay in the cell),
    no system-metrics sampler competing with training for the CPU."""
    import wandb

    return wandb.Settings(mode=mode, silent=True, show_info=False, show_warnings=False,  # type: ignore[arg-type]
                          console="off", x_disable_stats=True, save_code=False)


def sync_command(wandb_dir: str | Path, run_id: str | None = None) -> str:
    """The shell command that uploads offline runs: every ``offline-run-*`` folder of ``wandb_dir/wandb`` (or only
    those of ``run_id``: a resumed run has one folder per invocation, which ``wandb sync`` uploads in order).

    The run's glob ends in ``*`` because of how wandb names the folder of a run resumed within the same second as
    its previous invocation: ``offline-run-<time>-<id>-1`` (see :func:`offline_run_dirs`)."""
    pattern = f"offline-run-*-{run_id}*" if run_id else "offline-run-*"
    return f"wandb sync {Path(wandb_dir) / 'wandb' / pattern}"


_OFFLINE_DIR = re.compile(r"offline-run-(\d{8}_\d{6})-(.+?)(?:-(\d+))?")


def offline_run_dirs(wandb_dir: str | Path, run_id: str | None = None) -> list[Path]:
    """The offline run folders under ``wandb_dir/wandb`` (only those of ``run_id`` when given), oldest first.

    wandb names a folder ``offline-run-<YYYYmmdd_HHMMSS>-<id>``: the start time to the second. When that folder exists
    already (a run and its resume that start in the same second) it appends ``-1``, ``-2``, ...; so a folder is
    matched by its parsed id, never by the end of its name, and ordered by (time, suffix)."""
    found: list[tuple[str, int, Path]] = []
    root = Path(wandb_dir) / "wandb"
    for p in root.glob("offline-run-*") if root.is_dir() else ():
        m = _OFFLINE_DIR.fullmatch(p.name)
        if m is None or not p.is_dir():
            continue
        stamp, rid, n = m.group(1), m.group(2), int(m.group(3) or 0)
        if run_id is None or rid == run_id:
            found.append((stamp, n, p))
    return [p for _, _, p in sorted(found)]


def offline_runs_hint(roots: Sequence[str | Path]) -> str | None:
    """Where the offline wandb runs under ``roots`` are and the one command that uploads them all (None if there
    are none)."""
    runs = sorted({p for r in roots if Path(r).is_dir() for p in Path(r).rglob("offline-run-*") if p.is_dir()})
    if not runs:
        return None
    folders = sorted({p.parent for p in runs})
    if len(folders) <= 2:
        cmd = "wandb sync " + " ".join(str(f / "offline-run-*") for f in folders)
    else:
        cmd = f"wandb sync $(find {' '.join(str(r) for r in roots)} -type d -name 'offline-run-*')"
    return "\n".join([f"wandb: {len(runs)} offline run{'s' if len(runs) != 1 else ''} under:", *(f"  {f}" for f in folders),
                      "upload them after `wandb login` with:", f"  {cmd}"])


def previous_wandb_run(resume: str | Path | None) -> dict[str, Any] | None:
    """The ``wandb_run.json`` beside the checkpoint ``resume`` (a folder or a checkpoint file), if there is one."""
    if resume is None:
        return None
    p = Path(resume)
    f = (p if p.is_dir() else p.parent) / WANDB_RUN_FILE
    if not f.exists():
        return None
    with open(f) as fh:
        return json.load(fh)


class Tracker:
    """One wandb run per experiment run (``job_type="experiment"``), or nothing when wandb is disabled.

    What it logs, and against which x-axis (``define_metric``):

    Units are in the names: losses in nats per byte (``train/loss_nats``), bits per byte (``*/bpb``; bpb = nats / ln 2),
    bytes, seconds, tokens per second.

    * every ``cfg.log_every`` inner steps: ``train/loss_nats`` (the training cross-entropy, mean over islands, and
      ``train/loss_nats_island<i>`` per island), ``train/bpb`` (the same mean in bits per byte), ``train/tokens_per_s``
      (real throughput since the previous log), ``routing/balance_loss/layer<l>`` and
      ``routing/max_over_mean_load/layer<l>`` against ``tokens``; ``link/<channel>_bytes`` and
      ``link/cross_site_bytes`` (cumulative) against ``sim_time_s``, the simulated wall-clock;
    * every evaluation: ``eval/bpb`` against tokens and ``eval_sim/bpb`` (the same number) against simulated seconds,
      each on the curve's subset (``data.eval_bytes``) to the end; the final model on every held-out byte once, as
      ``eval/final_bpb_all_held_out`` (``final_val_bpb``);
    * at the end (:meth:`finish`): the summary (result.json's numbers, compressor floors, versions), the evaluation
      history as a ``wandb.Table``, the run's figures as images, and result.json / history.jsonl / the PNGs as one
      artifact of type ``run-result``.

    The run id, mode and folder go to ``out_dir/wandb_run.json``; a run resumed from that folder (``resume``) reopens
    the same wandb run id."""

    def __init__(self, cfg: Any, out_dir: str | Path | None, resume: str | Path | None = None) -> None:
        self.run: Any = None
        self.cfg = cfg
        self.out_dir = Path(out_dir) if out_dir else Path(".")
        self.mode = resolve_wandb_mode(cfg.wandb_mode)
        self._last_train: tuple[float, int] | None = None
        self._outer_logged = 0  # outer-step records already logged (log_outer)
        self.figures: list[Path] = []  # drawn by draw_figures, logged by finish
        if self.mode == "disabled":
            return
        import wandb

        self.out_dir.mkdir(parents=True, exist_ok=True)
        prev = previous_wandb_run(resume)
        run_id = prev["id"] if prev and prev.get("project") == cfg.wandb_project else None
        self.run = wandb.init(project=cfg.wandb_project, group=wandb_group(cfg), job_type="experiment",
                              name=run_name(cfg, out_dir), tags=run_tags(cfg), notes=cfg.sync.traits.description,
                              config=cfg.to_dict(), dir=str(self.out_dir), id=run_id,
                              resume="allow" if run_id else None, reinit="create_new",
                              settings=wandb_settings(self.mode))
        r = self.run
        r.define_metric("tokens")
        r.define_metric("sim_time_s")
        for pattern in ("train/*", "routing/*", "eval/*"):
            r.define_metric(pattern, step_metric="tokens")
        r.define_metric("eval/bpb", step_metric="tokens", summary="min")
        r.define_metric("eval_sim/*", step_metric="sim_time_s")
        r.define_metric("link/*", step_metric="sim_time_s")
        write_json_atomic(self.out_dir / WANDB_RUN_FILE, self.info())

    def info(self) -> dict[str, Any]:
        """id, project, group, mode, the offline folder and the command that uploads it."""
        if self.run is None:
            return {"mode": "disabled"}
        return {"id": self.run.id, "project": self.cfg.wandb_project, "group": wandb_group(self.cfg), "mode": self.mode,
                "sync_dir": str(self.run.settings.sync_dir),
                "sync": sync_command(self.out_dir, self.run.id) if self.mode == "offline" else None}

    def log_train(self, rec: dict[str, Any]) -> None:
        """An inner-step record from the run loop: step, tokens, sim_time_s, train_loss, island_loss {i: loss},
        link_bytes {channel: cumulative bytes}, balance_loss / max_over_mean_load (one value per layer)."""
        if self.run is None:
            return
        now = time.perf_counter()
        d: dict[str, Any] = {"step": rec["step"], "tokens": rec["tokens"], "sim_time_s": rec["sim_time_s"],
                             "train/loss_nats": rec["train_loss"], "train/bpb": rec["train_loss"] / math.log(2)}
        for i, v in rec.get("island_loss", {}).items():
            d[f"train/loss_nats_island{i}"] = v
        if self._last_train is not None and now > self._last_train[0]:
            d["train/tokens_per_s"] = (rec["tokens"] - self._last_train[1]) / (now - self._last_train[0])
        if rec["sim_time_s"] > 0:
            d["train/sim_tokens_per_s"] = rec["tokens"] / rec["sim_time_s"]
        self._last_train = (now, rec["tokens"])
        for ch, b in rec.get("link_bytes", {}).items():
            d[f"link/{ch}_bytes"] = b
        d["link/cross_site_bytes"] = sum(rec.get("link_bytes", {}).values())
        for key in ("balance_loss", "max_over_mean_load"):
            for layer, v in enumerate(rec.get(key) or []):
                d[f"routing/{key}/layer{layer}"] = v
        self.run.log(finite(d))

    def log_outer(self, records: list[dict[str, Any]]) -> None:
        """The outer steps (``Experiment.outer_records``) not logged yet: ‖Δ‖/‖θ‖, cos with the previous Δ, ‖θ‖ and
        the applied step over ‖Δ‖, per fragment (``outer/<fragment>/...``) at the inner step each landed."""
        if self.run is None:
            return
        for rec in records[self._outer_logged:]:
            d = {"step": rec["step"]}
            for k in ("rel_delta", "cos_prev", "weight_norm", "applied_over_delta"):
                if rec.get(k) is not None:
                    d[f"outer/{rec['fragment']}/{k}"] = rec[k]
            self.run.log(finite(d))
        self._outer_logged = len(records)

    def log_eval(self, rec: dict[str, Any]) -> None:
        """A history.jsonl record (one evaluation)."""
        if self.run is None:
            return
        d = {"step": rec["step"], "tokens": rec["tokens"], "sim_time_s": rec["sim_time_s"],
             "link/cross_site_bytes": rec["cross_site_bytes"]}
        # the chart is one quantity, the curve's subset, to its end; the final model on every held-out byte has a
        # metric of its own (joined to the curve, it drew a tick that read as overfitting)
        curve = rec.get("val_bpb_subset", math.nan) if rec.get("final") else rec["val_bpb"]
        if math.isfinite(curve):
            d["eval/bpb"] = d["eval_sim/bpb"] = curve
        if rec.get("final") and math.isfinite(rec["val_bpb"]):
            d["eval/final_bpb_all_held_out"] = rec["val_bpb"]
        for k in ("routing_js_bits", "routing_topk_overlap"):
            if k in rec:
                d[f"routing/{k}"] = rec[k]
        self.run.log(finite(d))

    def finish(self, res: dict[str, Any], history: list[dict[str, Any]]) -> None:
        """Summary, evaluation table, figures and the result artifact (after result.json and history.jsonl exist)."""
        if self.run is None:
            return
        import wandb

        r = self.run
        for k, v in res.items():
            if isinstance(v, (int, float, str)) and not isinstance(v, bool):
                r.summary[k] = finite(v)
        r.summary["compressor_bpb"] = dict(res["compressor_bpb"])
        r.summary["versions"] = dict(res["versions"])
        sent = res["cross_site_bytes"]
        r.summary["x_fewer_bytes_than_ddp"] = res["ddp_equivalent_bytes"] / sent if sent else None
        cols = ["step", "tokens", "sim_time_s", "val_bpb", "train_loss", "cross_site_bytes", "final"]
        headers = [{"train_loss": "train_loss_nats"}.get(c, c) for c in cols]  # the table says its units too
        table = wandb.Table(columns=list[Any](headers), data=[[finite(h.get(c)) for c in cols] for h in history])
        figures = self.figures or self.draw_figures(res, history)
        logged: dict[str, Any] = {"eval_history": table}
        logged.update({f"figures/{p.stem}": wandb.Image(str(p)) for p in figures})
        r.log(logged)
        art = wandb.Artifact(f"result-{res['experiment']}-{r.id}", type="run-result",
                             description=f"{res['experiment']} {res['preset']} seed {res['seed']}: result.json, "
                                         "history.jsonl and figures",
                             metadata={"final_val_bpb": finite(res["final_val_bpb"])})
        for name in ("result.json", "history.jsonl"):
            if (self.out_dir / name).exists():
                art.add_file(str(self.out_dir / name), name=name)
        for p in figures:
            art.add_file(str(p), name=f"figures/{p.name}")
        r.log_artifact(art)

    def draw_figures(self, res: dict[str, Any], history: list[dict[str, Any]],
                     timeline: list[list[Any]] | None = None) -> list[Path]:
        """The run's standard figures (``figures.standard_figures``, the ones the experiment notebooks draw) as PNGs
        in ``out_dir``. Only for a run logged to wandb; run.write_outputs draws them before result.json (so that file
        is the last one written) and :meth:`finish` logs them."""
        if self.run is None:
            return []
        from islands_kit.plots.figures import save_standard_figures  # matplotlib: only a run that draws pays its import

        self.figures = save_standard_figures(res, history, timeline, self.out_dir)
        return self.figures

    def close(self, failed: bool = False) -> None:
        if self.run is not None:
            sync_file = self.run.settings.sync_file
            self.run.finish(exit_code=1 if failed else 0)
            self.run = None
            if self.mode == "offline":
                wait_for_offline_run(sync_file)


def log_comparison(rows: list[dict[str, Any]], project: str, group: str, mode: str, out_dir: str | Path,
                   figures: Sequence[Path] = (), files: Sequence[Path] = (),
                   seed_rows: Sequence[dict[str, Any]] = (), summary: dict[str, Any] | None = None) -> dict[str, Any]:
    """One wandb run of ``job_type="comparison"`` in the comparison's group: the comparison table (and the per-
    experiment seed aggregate) as ``wandb.Table``, the comparison figures as images, ``files`` as an artifact, and
    ``summary`` (``compare.comparison_summary``: each ratio with its interval and n) as the run's summary.
    Returns the run's info (id, mode, sync command), or ``{"mode": "disabled"}``."""
    mode = resolve_wandb_mode(mode)
    if mode == "disabled":
        return {"mode": "disabled"}
    import wandb

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    name = group if group.startswith("compare") else f"compare-{group}" if group else "compare"
    run = wandb.init(project=project, group=group or None, job_type="comparison", name=name[:128],
                     tags=["comparison"], dir=str(out), reinit="create_new", settings=wandb_settings(mode))
    try:
        logged: dict[str, Any] = {"comparison": _table(rows)}
        if seed_rows:
            logged["seed_aggregate"] = _table(list(seed_rows))
        logged.update({f"figures/{Path(p).stem}": wandb.Image(str(p)) for p in figures})
        run.log(logged)
        run.summary.update({k: _cell(v) for k, v in (summary or {}).items()})
        art = wandb.Artifact(f"comparison-{run.id}", type="comparison")
        for p in list(files) + list(figures):
            art.add_file(str(p), name=Path(p).name)
        run.log_artifact(art)
        info = {"id": run.id, "mode": mode, "sync_dir": str(run.settings.sync_dir),
                "sync": sync_command(out, run.id) if mode == "offline" else None}
    finally:
        sync_file = run.settings.sync_file
        run.finish()
    if mode == "offline":
        wait_for_offline_run(sync_file)
    return info


def _table(rows: list[dict[str, Any]]) -> Any:
    import wandb

    cols = list(rows[0]) if rows else []
    return wandb.Table(columns=list[Any](cols), data=[[_cell(r.get(c)) for c in cols] for r in rows])


def _cell(v: Any) -> Any:
    v = finite(v)
    return v if v is None or isinstance(v, (int, float, str, bool)) else json.dumps(v, default=str)
