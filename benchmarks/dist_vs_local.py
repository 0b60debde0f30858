"""Time per inner step over torch.distributed (gloo, one process per island) vs the in-process simulator, side by side
in one run; and the byte ledger vs the bytes counted independently at the torch.distributed calls.

    python benchmarks/dist_vs_local.py [--experiment two_site|eight_cell|baseline] [--preset smoke] [--steps 30]
                                       [--nproc N] [--warmup 3] [--repeats 3]

Both sides drive the same ``Experiment.train_step`` (no evaluation) with OMP_NUM_THREADS=1 per process: the simulator
runs every island one after another in one process; the gloo run has one process per island (or per data-parallel
rank with ``--nproc sum(dp_ranks)``) on however many cores the machine has. A step's time on the gloo side is rank 0's
wall time per step, which includes waiting at the every-step routing all-reduce for the slowest island. CPU time per
step (``time.process_time``, all threads) is summed over the processes: the total compute the distributed step costs,
less sensitive to other load on the machine than wall time. The two sides alternate ``--repeats`` times (a fresh
torchrun each time); figures are medians over all steps after ``--warmup`` in each repeat.

Wire count: every ``torch.distributed.all_gather`` / ``batch_isend_irecv`` / ``broadcast`` call the transport makes is
wrapped to count tensor bytes (an all-gather among k ranks sends each rank's tensor to k - 1 peers). The cross-island
(leader) bytes must equal the ledger plus the fixed per-message header (40-byte transport header + 24-byte
``encode_bytes`` header); intra-island broadcasts (several ranks per island) are reported separately.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from islands_kit.config import EXPERIMENTS, apply_overrides
from islands_kit.config.presets import get_preset


def _config(args: argparse.Namespace):
    cfg = get_preset(args.experiment, args.preset)
    return apply_overrides(cfg, {"steps": args.steps, "progress": "false", "wandb_mode": "disabled"})


def _step_times(exp, steps: int, finalize: bool = True) -> tuple[list[float], list[float]]:
    """(wall seconds, CPU seconds) of each inner step."""
    wall, cpu = [], []
    for _ in range(steps):
        t, c = time.perf_counter(), time.process_time()
        exp.train_step()
        wall.append(time.perf_counter() - t)
        cpu.append(time.process_time() - c)
    if finalize:
        exp.strategy.finalize(exp.step)
    return wall, cpu


def _count_wire() -> dict[str, int]:
    """Wrap the torch.distributed calls the transport makes; return the live counters."""
    import torch.distributed as dist

    counts = {"cross_bytes": 0, "cross_messages": 0, "island_bytes": 0}
    orig_ag, orig_p2p, orig_bc = dist.all_gather, dist.batch_isend_irecv, dist.broadcast

    def all_gather(tensor_list, tensor, group=None, async_op=False):
        k = dist.get_world_size(group)
        counts["cross_bytes"] += tensor.numel() * tensor.element_size() * (k - 1)
        counts["cross_messages"] += k - 1
        return orig_ag(tensor_list, tensor, group=group, async_op=async_op)

    def batch_isend_irecv(ops):
        for op in ops:
            if op.op is dist.isend:
                counts["cross_bytes"] += op.tensor.numel() * op.tensor.element_size()
                counts["cross_messages"] += 1
        return orig_p2p(ops)

    def broadcast(tensor, src=None, group=None, async_op=False, **kw):
        if dist.get_rank() == src:
            counts["island_bytes"] += tensor.numel() * tensor.element_size() * (dist.get_world_size(group) - 1)
        return orig_bc(tensor, src=src, group=group, async_op=async_op, **kw)

    dist.all_gather, dist.batch_isend_irecv, dist.broadcast = all_gather, batch_isend_irecv, broadcast
    return counts


def worker(args: argparse.Namespace) -> None:
    from islands_kit.comm.codecs import HEADER_BYTES
    from islands_kit.comm.distributed import make_transport
    from islands_kit.comm.torch_dist import META_BYTES
    from islands_kit.run import Experiment
    from islands_kit.sync.registry import link_model

    cfg = _config(args)
    counts = _count_wire()
    transport = make_transport(cfg, link_model(cfg))
    exp = Experiment(cfg, None, transport)
    transport.barrier()
    times, cpu = _step_times(exp, args.steps)
    ledger, _ = transport.gather_world()
    rec = {"rank": transport.rank, "times": times, "cpu": cpu, **counts, "ledger_bytes": ledger.bytes(),
           "ledger_messages": sum(e.messages for e in ledger.channels.values()),
           "channels": {k: v.bytes for k, v in ledger.channels.items()}, "header_bytes": META_BYTES + HEADER_BYTES}
    Path(args.out, f"rank{transport.rank}.json").write_text(json.dumps(rec))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--experiment", default="two_site", choices=list(EXPERIMENTS))
    ap.add_argument("--preset", default="smoke")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--nproc", type=int, default=0, help="processes (default: one per island)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--out", default="", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        return worker(args)

    cfg = _config(args)
    nproc = args.nproc or len(cfg.islands)
    torch.set_num_threads(1)
    from islands_kit.run import Experiment

    local, local_cpu, dist_t, dist_cpu = [], [], [], []
    for _ in range(args.repeats):
        exp = Experiment(cfg)
        w, c = _step_times(exp, args.steps)
        local += w[args.warmup:]
        local_cpu += c[args.warmup:]
        local_ledger = exp.transport.ledger.bytes()
        with tempfile.TemporaryDirectory() as tmp:
            cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
                   __file__, "--worker", "--out", tmp, "--experiment", args.experiment, "--preset", args.preset,
                   "--steps", str(args.steps)]
            env = {**os.environ, "OMP_NUM_THREADS": "1", "WANDB_MODE": "disabled"}
            subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL)
            recs = [json.loads(p.read_text()) for p in sorted(Path(tmp).glob("rank*.json"))]
        r0 = next(r for r in recs if r["rank"] == 0)
        dist_t += r0["times"][args.warmup:]
        dist_cpu += [sum(col) for col in zip(*(r["cpu"] for r in recs))][args.warmup:]
    cross = sum(r["cross_bytes"] for r in recs)
    msgs = sum(r["cross_messages"] for r in recs)
    island = sum(r["island_bytes"] for r in recs)
    hdr = r0["header_bytes"]

    ml, md = statistics.median(local), statistics.median(dist_t)
    cl, cd = statistics.median(local_cpu), statistics.median(dist_cpu)
    print(f"{args.experiment} preset={args.preset} islands={len(cfg.islands)} processes={nproc} "
          f"cores={os.cpu_count()} steps={args.steps} x {args.repeats} repeats (medians of {len(local)} steps)")
    print(f"  wall per step  in-process simulator : {ml * 1e3:9.1f} ms   (all islands in one process)")
    print(f"  wall per step  gloo, {nproc} processes   : {md * 1e3:9.1f} ms   (rank 0)   ratio {md / ml:.3f}")
    print(f"  CPU  per step  in-process simulator : {cl * 1e3:9.1f} ms")
    print(f"  CPU  per step  gloo, sum of {nproc} procs : {cd * 1e3:9.1f} ms              ratio {cd / cl:.3f}")
    print(f"  ledger bytes  simulator / gloo  : {local_ledger:,} / {r0['ledger_bytes']:,}  channels {r0['channels']}")
    print(f"  wire bytes counted at the calls : {cross:,} in {msgs} messages (+ {island:,} intra-island broadcast)")
    print(f"  wire - {hdr} B header x messages : {cross - hdr * msgs:,}  == ledger: {cross - hdr * msgs == r0['ledger_bytes']}"
          f"   (header overhead {100 * hdr * msgs / max(1, r0['ledger_bytes']):.3f}%)")


if __name__ == "__main__":
    main()
