"""Launch glue for torch.distributed: ``init_from_env`` (torchrun's environment -> a process group with bounded waits)
and ``make_transport(cfg, link)`` (a ``TorchDistTransport`` for the config over the run's link model, after checking WORLD_SIZE against it).

    torchrun --standalone --nproc-per-node 2 -m islands_kit run two_site --preset smoke --out runs/two_site-dist
    torchrun --standalone --nproc-per-node 8 -m islands_kit run eight_cell --preset smoke --out runs/eight_cell-dist

The CLI switches to this transport when ``WORLD_SIZE > 1``. Processes: ``len(islands)`` (one per island; an island's
``dp_ranks`` become micro-batches, bit-identical to the in-process simulator) or ``sum(islands[*].dp_ranks)`` (one per
data-parallel rank; ``RankLayout`` below maps ranks to islands).

Backend: ``gloo`` without CUDA; with CUDA ``cpu:gloo,cuda:nccl`` — torch then routes each collective by its tensors'
device. A run on the GPU (``device`` auto or cuda: ``cuda:LOCAL_RANK`` on every rank, ``islands_kit/device.py``) keeps
its gradients, routing loads and Shampoo blocks there and sends its wire messages from there too (``device.wire_device``),
all over NCCL; a run with ``device=cpu`` keeps everything on the CPU, over gloo. ``ISLANDS_KIT_DIST_BACKEND`` overrides
(gloo | nccl | cpu:gloo,cuda:nccl). The ledger/clock merging always runs on a gloo group. Only gloo is exercised by
the tests (no GPU in CI).

Bounded waits (``ISLANDS_KIT_DIST_TIMEOUT_S``, default 300 s, = T):
  * a peer that never arrives: the rendezvous gives up after T (rank 0 waits for the others' store connections);
  * a peer that dies: its sockets close and the survivors' next collective fails at once (well under a second on
    gloo), and they exit non-zero with a ``DistributedError`` naming rank, island, channel and operation;
  * a peer that hangs (alive, not answering): every collective is bounded by T (gloo's per-operation timeout; NCCL's
    watchdog with async error handling).
Under torchrun a worker that *fails* (non-zero exit) also makes the agent stop the others at once.

``sync.mode=decoupled`` (one process per island only) uses no collective after the rendezvous: the islands and the
synchroniser (rank 0) exchange bounded point-to-point messages, and an island that dies or stops answering is dropped
from the run rather than ending it (``comm/torch_dist/``, ``sync/decoupled.py``). Preemption faults run there too.
"""
from __future__ import annotations

import atexit
import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist

from islands_kit.comm.layout import RankLayout
from islands_kit.comm.link import LinkModel
from islands_kit.comm.torch_dist import DistributedError, TorchDistTransport, dist_timeout_s
from islands_kit.config import ConfigError, ExperimentConfig

MIXED = "cpu:gloo,cuda:nccl"
__all__ = ["abandon", "init_from_env", "make_transport", "shutdown", "world_size", "DistributedError", "RankLayout"]




def world_size() -> int:
    """``$WORLD_SIZE`` as set by torchrun (1 when not launched by it)."""
    raw = os.environ.get("WORLD_SIZE", "1")
    try:
        return int(raw)
    except ValueError:
        raise ConfigError(f"WORLD_SIZE: must be an integer (got {raw!r})") from None


def _env_int(name: str) -> int:
    raw = os.environ.get(name)
    if raw is None:
        raise ConfigError(f"{name}: not set; launch with torchrun (or set RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT)")
    try:
        return int(raw)
    except ValueError:
        raise ConfigError(f"{name}: must be an integer (got {raw!r})") from None


def init_from_env(backend: str | None = None, timeout_s: float | None = None) -> tuple[int, int]:
    """Initialise the default process group from torchrun's environment; return (rank, world_size).

    Reads RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT. Idempotent. Every wait (rendezvous and each
    collective) is bounded by ``timeout_s`` (default ``dist_timeout_s()``)."""
    if dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    rank, world = _env_int("RANK"), _env_int("WORLD_SIZE")
    for name in ("MASTER_ADDR", "MASTER_PORT"):
        if not os.environ.get(name):
            raise ConfigError(f"{name}: not set; launch with torchrun (or set RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT)")
    if not 0 <= rank < world:
        raise ConfigError(f"RANK: must be in [0, WORLD_SIZE={world}) (got {rank})")
    backend = backend or os.environ.get("ISLANDS_KIT_DIST_BACKEND") or (MIXED if torch.cuda.is_available() else "gloo")
    if backend not in ("gloo", "nccl", MIXED):
        raise ConfigError(f"ISLANDS_KIT_DIST_BACKEND: must be one of gloo|nccl|{MIXED} (got {backend!r})")
    t = dist_timeout_s() if timeout_s is None else float(timeout_s)
    if "nccl" in backend:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    try:
        dist.init_process_group(backend, init_method="env://", rank=rank, world_size=world, timeout=timedelta(seconds=t))
    except Exception as e:  # DistStoreError on a rendezvous timeout, RuntimeError on a refused connection
        raise DistributedError(
            f"islands_kit.comm.distributed: rendezvous failed on rank {rank} of {world} (MASTER_ADDR="
            f"{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}): not every process arrived within {t:g} s "
            f"(ISLANDS_KIT_DIST_TIMEOUT_S). Cause: {type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"
        ) from e
    atexit.register(shutdown)
    return rank, world


def make_transport(cfg: ExperimentConfig, link: LinkModel,
                   transport_cls: type[TorchDistTransport] = TorchDistTransport) -> TorchDistTransport:
    """A ``TorchDistTransport`` (or the subclass ``transport_cls``: the tests' fault injection) for ``cfg`` over the
    run's link model ``link`` (the strategy's: ``sync.registry.link_model(cfg)``, as the simulator's), initialising
    torch.distributed if needed. WORLD_SIZE is checked against the config *before* the rendezvous, so a
    wrong process count fails at once on every rank."""
    layout = RankLayout.for_world(cfg, world_size())  # raises a ConfigError naming islands[*].dp_ranks
    decoupled = cfg.sync.traits.own_clocks
    n = len(cfg.islands)
    if decoupled and layout.world_size != n:
        raise ConfigError(f"islands[*].dp_ranks: sync.mode=decoupled runs one process per island: WORLD_SIZE must "
                          f"equal len(islands) = {n} (each island's dp_ranks become micro-batches), not the "
                          f"{layout.world_size} data-parallel ranks of dp_ranks = {list(layout.ranks_per_island)}")
    f = cfg.faults
    if f.preempt_island >= 0 and f.preempt_steps > 0 and not decoupled:
        raise ConfigError(f"faults.preempt_island: preemption under torch.distributed needs sync.mode=decoupled (a "
                          f"lock-step collective needs every island); the in-process simulator has both (got "
                          f"{f.preempt_island})")
    init_from_env()
    return transport_cls(layout, link, decoupled=decoupled)


def _group_up() -> bool:
    return dist.is_available() and dist.is_initialized()


def shutdown() -> None:
    """Destroy the default process group (registered at exit by ``init_from_env``)."""
    if _group_up():
        dist.destroy_process_group()


def abandon(code: int) -> None:
    """End this process now, without ``shutdown``'s teardown, after a ``DistributedError`` ended the run: a peer is
    gone, and gloo drains a process group's queued work before destroying it, so work queued behind the dead peer
    would hold the exit for up to ISLANDS_KIT_DIST_TIMEOUT_S (CI saw a survivor print its error and then outlive it by
    more than two minutes). Nothing is lost: the run's files are written whole as they go (``io.atomic_write_bytes``)
    and a failed run writes no result.json; only stdio is flushed. With no process group up (a rendezvous that
    failed) there is nothing to tear down, and it returns."""
    if not _group_up():
        return
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe: nothing more can reach it anyway
            pass
    os._exit(code)
