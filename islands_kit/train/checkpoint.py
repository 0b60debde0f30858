"""Checkpoint and resume a run exactly.

A checkpoint holds everything the next step depends on: every replica (weights and buffers such as the expert bias),
inner optimizer and LR-schedule state, data-stream positions, the strategy's state (global parameters, outer
optimizer momentum, error-feedback residuals, codec RNG states, transfers in flight), the routing channel's messages
in flight, the simulated clock, the byte ledger, the link model (its per-direction calendars and RNG positions), the
evaluation history, and torch's global RNG state. A resumed run therefore produces a bit-identical result.json
(except wall_time_s).

Writing is atomic: the checkpoint goes to a temporary file in the same folder, is fsync'ed, then renamed over the old
one, so a crash (even SIGKILL mid-write) leaves the previous checkpoint intact. Loading refuses, with a clear error,
a file that is truncated or not a checkpoint, one written by another format version, one whose content does not
match the content hash computed last when it was written (``seal.py``: an edited tensor), and one whose
configuration differs from the run's (naming the first differing field).

Nothing in a checkpoint is pickled Python: it holds tensors and plain data (dicts, lists, numbers, strings) only, and is
read with ``torch.load(weights_only=True)``, so opening a checkpoint from someone else cannot run their code (a file
that needs anything else is refused as not a checkpoint). The transport's part — clock, ledger, link calendars and
RNG positions — comes from ``Transport.state_dict``.

Under torch.distributed every rank writes its own shard, ``checkpoint.rank<R>.step<T>.pt``, holding its islands (or
its share of one) and its transport state (operations in flight are completed first, on every rank at the same
step). After every rank has written step T (a barrier), each deletes its shards of earlier steps, so a crash at any
moment leaves at least one step for which every rank has a shard; ``--resume`` (under torchrun, same process count)
takes the latest such step. A shard that is missing, truncated or foreign stops every rank with the same error.
"""
from __future__ import annotations

import contextlib
import io
import math
import pickle  # only for its exception type: nothing here unpickles
import re
import zipfile
from pathlib import Path
from typing import Any, Iterator

import torch

from islands_kit.comm.clock import SimClock
from islands_kit.comm.control import Int, Items, Opt, Str
from islands_kit.comm.transport import Transport
from islands_kit.config import ConfigError, ExperimentConfig
from islands_kit.data import atomic_write_bytes
from islands_kit.model import ByteTransformer
from islands_kit.train.preflight import check_tensors
from islands_kit.train.seal import check_seal, seal

FORMAT = "islands_kit.train.checkpoint/3"  # a new layout takes a new version: a file of another version is refused
FILENAME = "checkpoint.pt"
SHARDS_SHOWN = 16  # shard steps each rank reports at resume (its latest)
ERROR_CHARS = 4096  # a rank's one-line error at resume, as sent to the others
STEPS_SCHEMA = Items(Int(0), SHARDS_SHOWN)  # the control messages of a torch.distributed resume
ERROR_SCHEMA = Opt(Str(ERROR_CHARS))
_SHARD = re.compile(r"checkpoint\.rank(\d+)\.step(\d+)\.pt")


def shard_name(rank: int, step: int) -> str:
    """The file of rank ``rank``'s checkpoint at step ``step`` under torch.distributed."""
    return f"checkpoint.rank{rank}.step{step:09d}.pt"


def rank_shards(folder: Path, rank: int) -> dict[int, Path]:
    """step -> shard file of ``rank`` in ``folder``."""
    out = {}
    for f in folder.glob(f"checkpoint.rank{rank}.step*.pt"):
        m = _SHARD.fullmatch(f.name)
        if m and int(m.group(1)) == rank:
            out[int(m.group(2))] = f
    return out


def latest_common_step(steps_per_rank: list[list[int]]) -> int | None:
    """The latest step for which every rank has a shard (None if there is none)."""
    common = set(steps_per_rank[0]) if steps_per_rank else set()
    for s in steps_per_rank[1:]:
        common &= set(s)
    return max(common) if common else None


def _sharded(transport: Transport | None) -> bool:
    """One shard per rank when the run spans several processes."""
    return transport is not None and transport.world_size > 1


# fields that may differ between the interrupted and the resumed invocation: the first seven change no number;
# ``steps`` extends (or shortens) the run, the cosine schedule then decaying to the new end from the resume on
RESUMABLE = ("progress", "log_every", "wandb_mode", "wandb_project", "wandb_group", "checkpoint_every", "threads", "steps")
_IGNORED = set(RESUMABLE)


def _first_difference(a: Any, b: Any, path: str = "") -> str | None:
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            if not path and k in _IGNORED:
                continue
            if k not in a or k not in b:
                return f"{path}{k}"
            d = _first_difference(a[k], b[k], f"{path}{k}.")
            if d:
                return d
        return None
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return path.rstrip(".")
        for i, (x, y) in enumerate(zip(a, b)):
            d = _first_difference(x, y, f"{path}{i}.")
            if d:
                return d
        return None
    return None if a == b else path.rstrip(".")


def save_checkpoint(state: dict[str, Any], out_dir: str | Path, transport: Transport) -> Path:
    """Write ``state`` (``Experiment.state_dict()``: its owners' ``state_dict``s) atomically; under torch.distributed
    this rank's shard, then, once every rank holds this step, drop this rank's older shards."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    state = seal({"format": FORMAT, **state})  # the content hash, computed last
    if not _sharded(transport):
        return _write_atomic(out / FILENAME, state)
    step = int(state["step"])
    path = _write_atomic(out / shard_name(transport.rank, step), state)
    transport.barrier()  # every rank now holds this step: the older shards can go
    for old, f in rank_shards(out, transport.rank).items():
        if old < step:
            f.unlink(missing_ok=True)
    return path


def _write_atomic(path: Path, state: dict[str, Any]) -> Path:
    buf = io.BytesIO()
    torch.save(state, buf)
    atomic_write_bytes(path, buf.getvalue())
    return path


def load_checkpoint(path: str | Path, transport: Transport | None = None) -> dict[str, Any]:
    """Read a checkpoint (a folder or a file). Under torch.distributed (``transport`` a TorchDistTransport; a
    collective): this rank's shard of the latest step every rank has, from the folder ``path``."""
    if transport is not None and _sharded(transport):  # (the None test is for the type checker)
        return _load_shard(Path(path), transport)
    p = Path(path)
    if p.is_dir():
        if not (p / FILENAME).exists() and any(p.glob("checkpoint.rank*.step*.pt")):
            raise ConfigError(f"--resume: {p} holds per-rank shards written under torch.distributed; resume it with "
                              "torchrun and the same number of processes")
        p = p / FILENAME
    return _read(p)


def _load_shard(folder: Path, tr: Transport) -> dict[str, Any]:
    mine = rank_shards(folder, tr.rank) if folder.is_dir() else {}
    # a rank keeps its latest shard (and the one before while the next is written): its latest few say it all
    steps = tr.gather_control("checkpoint.steps", sorted(mine)[-SHARDS_SHOWN:], STEPS_SCHEMA)
    step = latest_common_step(steps)
    err, state = None, {}
    if step is None:
        err = (f"--resume: {folder} has no step with a checkpoint shard for every one of the {len(steps)} ranks "
               f"(steps per rank: {steps})")
    else:
        try:
            state = _read(mine[step])
            if state["transport"]["world_size"] != tr.world_size or state["step"] != step:
                raise ConfigError(f"--resume: {mine[step]} is not a torch.distributed shard of step {step}")
        except ConfigError as e:
            err = f"rank {tr.rank}: {e}"
    # every rank stops with the same error, or none does
    errors = [e for e in tr.gather_control("checkpoint.error", err and err[:ERROR_CHARS], ERROR_SCHEMA) if e]
    if errors:
        raise ConfigError("; ".join(dict.fromkeys(errors)))
    return state


MAX_DEPTH = 32  # nesting of a checkpoint's plain data (the kit's own: under 10 levels)


def check_records(p: Path, where: str) -> None:
    """Every record of the torch file ``p`` is stored uncompressed (as ``torch.save`` writes them), so mapping the
    file maps the tensors' bytes as they are: a DEFLATE-compressed record would be inflated, to any size its
    header claims, before a single check ran (ConfigError naming the record). A file that is not a zip archive is
    left to ``torch.load`` to refuse."""
    try:
        with zipfile.ZipFile(p) as z:
            for info in z.infolist():
                if info.compress_type != zipfile.ZIP_STORED or info.file_size != info.compress_size:
                    raise ConfigError(f"{where}: record {info.filename[:80]!r} is compressed ({info.compress_size:,} "
                                      f"bytes claiming {info.file_size:,}); the kit writes none, refused unread")
    except (zipfile.BadZipFile, OSError, ValueError) as e:
        if isinstance(e, ConfigError):
            raise
        return


def check_depth(obj: Any, where: str, limit: int = MAX_DEPTH) -> None:
    """ConfigError when ``obj``'s dicts, lists and tuples nest deeper than ``limit`` (walked without recursion: the
    content hash and the checks after it recurse once per level)."""
    stack: list[tuple[Any, int]] = [(obj, 0)]
    while stack:
        node, depth = stack.pop()
        if depth > limit:
            raise ConfigError(f"{where}: nested deeper than {limit} levels; the kit writes none, refused")
        if isinstance(node, dict):
            stack.extend((v, depth + 1) for v in node.values())
        elif isinstance(node, (list, tuple)):
            stack.extend((v, depth + 1) for v in node)


def _read(p: Path) -> dict[str, Any]:
    if not p.exists():
        raise ConfigError(f"--resume: no checkpoint at {p}")
    check_records(p, f"--resume: {p}")
    try:
        # tensors and plain data only: never runs code; mapped, so no tensor is read before the checks below
        state = torch.load(p, map_location="cpu", weights_only=True, mmap=True)
    except pickle.UnpicklingError as e:  # weights_only refused a global: a pickled object, maybe one that runs code
        last = str(e).strip().splitlines()[-1][:300] if str(e).strip() else ""
        raise ConfigError(f"--resume: {p} holds objects other than tensors and plain data (loading it could run "
                          f"code), refused: {last}") from None
    except Exception as e:  # truncated zip, garbage bytes, ...
        first = str(e).strip().splitlines()[0][:300] if str(e).strip() else ""
        raise ConfigError(f"--resume: {p} is truncated or not a checkpoint ({type(e).__name__}: {first})") from None
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise ConfigError(f"--resume: {p} is not an {FORMAT} checkpoint (format={state.get('format') if isinstance(state, dict) else None!r})")
    check_depth(state, f"--resume: {p}")
    check_seal(state, f"--resume: {p}")
    return state


REQUIRED = ("config", "step", "islands", "strategy", "routing", "history", "val_curve", "torch_rng", "elapsed_s",
            "transport")
ISLAND_PARTS = ("model", "optimizer", "scheduler", "stream")


def _int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def check_state(cfg: ExperimentConfig, state: dict[str, Any], islands: list[int]) -> None:
    """Check a checkpoint against the run's config before anything is restored: every entry present, the counters in
    range, torch's RNG state of the size this torch has, and every model tensor of the islands this process holds
    (``islands``) of the shape the config makes (counted on the meta device). ConfigError naming the entry."""
    missing = [k for k in REQUIRED if k not in state]
    if missing:
        raise ConfigError(f"--resume: the checkpoint has no {missing[0]!r} entry")
    diff = _first_difference(cfg.to_dict(), state["config"]) if isinstance(state["config"], dict) else "config"
    if diff is not None:
        raise ConfigError(f"--resume: checkpoint was written with a different configuration (first difference: {diff})")
    step = state["step"]
    if not (_int(step) and 0 <= step < cfg.steps):
        raise ConfigError(f"--resume: the checkpoint's step must be an integer in [0, steps={cfg.steps}) (got {step!r})")
    n = len(cfg.islands)
    inner = state.get("inner_steps")
    if inner is not None and not (isinstance(inner, dict) and sorted(inner) == list(range(n))
                                  and all(_int(v) and 0 <= v <= step for v in inner.values())):
        raise ConfigError(f"--resume: the checkpoint's inner_steps must give each of the {n} islands an integer in "
                          f"[0, step={step}] (got {str(inner)[:120]})")
    rng, want = state["torch_rng"], torch.get_rng_state()
    if not (isinstance(rng, torch.Tensor) and rng.dtype == want.dtype and rng.shape == want.shape):
        got = f"{tuple(rng.shape)} {rng.dtype}" if isinstance(rng, torch.Tensor) else type(rng).__name__
        raise ConfigError(f"--resume: the checkpoint's torch_rng must be a {tuple(want.shape)} {want.dtype} tensor "
                          f"(torch's generator state; got {got})")
    elapsed = state["elapsed_s"]
    if not (isinstance(elapsed, (int, float)) and math.isfinite(elapsed) and elapsed >= 0):
        raise ConfigError(f"--resume: the checkpoint's elapsed_s must be a finite number >= 0 (got {elapsed!r})")
    if not isinstance(state["history"], list) or not all(isinstance(h, dict) for h in state["history"]):
        raise ConfigError("--resume: the checkpoint's history must be a list of records")
    curve = state["val_curve"]
    if not (isinstance(curve, list) and all(isinstance(v, list) and len(v) == 2 for v in curve)):
        raise ConfigError("--resume: the checkpoint's val_curve must be a list of [tokens, bpb] pairs")
    if not isinstance(state["islands"], dict) or sorted(state["islands"]) != sorted(islands):
        held = sorted(state["islands"]) if isinstance(state["islands"], dict) else state["islands"]
        raise ConfigError(f"--resume: checkpoint holds islands {held}, this process {sorted(islands)}")
    with torch.device("meta"):
        expected = ByteTransformer(cfg.model).state_dict()
    for i in islands:
        isl = state["islands"][i]
        lacks = [k for k in ISLAND_PARTS if not isinstance(isl, dict) or k not in isl]
        if lacks:
            raise ConfigError(f"--resume: the checkpoint's islands.{i} has no {lacks[0]!r} entry")
        if not isinstance(isl["model"], dict):
            raise ConfigError(f"--resume: the checkpoint's islands.{i}.model is not a mapping of tensors")
        _check_scheduler(isl["scheduler"], f"--resume: the checkpoint's islands.{i}.scheduler", cfg.steps)
        check_tensors(expected, isl["model"], f"--resume: the checkpoint's islands.{i}.model")
    if not (isinstance(state["transport"], dict) and _int(state["transport"].get("world_size"))):
        raise ConfigError("--resume: the checkpoint's transport entry has no integer world_size")
    try:  # the clocks as the transport will read them (here too, so that --dry-run --resume refuses what the run does)
        SimClock([]).load_state_dict(state["transport"]["clock"])
    except (KeyError, TypeError, AttributeError, ValueError) as e:
        raise ConfigError(f"--resume: {e if isinstance(e, ValueError) else 'the checkpoint transport clock is not a clock'}") \
            from None


def _check_scheduler(sch: Any, where: str, steps: int) -> None:
    """A LambdaLR state as the kit writes it: step counters in [0, steps + 1], learning rates finite, no state for
    the schedule function (a plain function has none; a crafted entry would be set as attributes on it). A counter of
    inf or "abc" used to load and fail later inside the optimizer."""
    if not isinstance(sch, dict):
        raise ConfigError(f"{where} is not a mapping")
    for k in ("last_epoch", "_step_count"):
        v = sch.get(k)
        if not (isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= steps + 1):
            raise ConfigError(f"{where}.{k} must be an integer in [0, steps + 1 = {steps + 1}] (got {v!r:.40})")
    for k in ("base_lrs", "_last_lr"):
        v = sch.get(k)
        if not (isinstance(v, list) and all(isinstance(x, (int, float)) and not isinstance(x, bool)
                                            and math.isfinite(x) and x >= 0 for x in v)):
            raise ConfigError(f"{where}.{k} must be a list of finite learning rates >= 0 (got {str(v):.60})")
    if not (isinstance(sch.get("lr_lambdas"), list) and all(x is None for x in sch["lr_lambdas"])):
        raise ConfigError(f"{where}.lr_lambdas must be a list of nulls (the schedule is a plain function; got "
                          f"{str(sch.get('lr_lambdas')):.60})")


@contextlib.contextmanager
def part(name: str) -> Iterator[None]:
    """One line naming the checkpoint entry whose nested state does not fit this run, instead of a raw traceback."""
    try:
        yield
    except (KeyError, IndexError, TypeError, ValueError, RuntimeError, AttributeError) as e:
        first = str(e).strip().splitlines()[0][:200] if str(e).strip() else ""
        raise ConfigError(f"--resume: the checkpoint's {name} does not fit this run ({type(e).__name__}: {first})") \
            from None


def check_world_size(state: dict[str, Any], transport: Transport) -> None:
    """A checkpoint resumes only on a transport of the process count it was written on (then its state loads)."""
    if state["transport"]["world_size"] != transport.world_size:
        raise ConfigError("--resume: a torch.distributed checkpoint needs a torchrun resume with the same number of "
                          f"processes and an in-process one an in-process resume (checkpoint: "
                          f"{state['transport']['world_size']} processes, this run: {transport.world_size})")
    try:
        transport.load_state_dict(state["transport"])
    except ValueError as e:
        raise ConfigError(f"--resume: {e}") from None


def read_config(path: str | Path) -> tuple[dict[str, Any], int]:
    """``(config dict, step)`` of the checkpoint ``--resume path`` would continue: ``checkpoint.pt`` in a folder (or
    the file itself), else the latest per-rank shard (torch.distributed; every rank's shard holds the same config).
    Lets ``--resume`` restore the configuration instead of asking for it again."""
    state = _resume_state(path)
    if not isinstance(state.get("config"), dict) or not _int(state.get("step")):
        raise ConfigError(f"--resume: the checkpoint in {path} has no config mapping and integer step")
    return state["config"], int(state["step"])


def _resume_state(path: str | Path) -> dict[str, Any]:
    """The checkpoint ``--resume path`` reads first: ``checkpoint.pt`` in a folder (or the file), else rank 0's
    latest shard."""
    p = Path(path)
    if p.is_dir() and not (p / FILENAME).exists():
        shards = rank_shards(p, 0)
        if shards:
            p = shards[max(shards)]
    return load_checkpoint(p) if p.is_file() else load_checkpoint(path)


def check_resume(cfg: ExperimentConfig, path: str | Path) -> None:
    """``--dry-run --resume``: the checkpoint the run would restore, checked against ``cfg`` (``check_state``) without
    building the run."""
    state = _resume_state(path)
    check_state(cfg, state, sorted(state["islands"]) if isinstance(state.get("islands"), dict) else [])
