"""TorchDistTransport (torch.distributed, gloo) against the in-process simulator, and its failure bounds.

End to end through the real CLI under torchrun: two_site with 2 processes (one per island), two_site with 3 processes
(one per data-parallel rank: island 0's two ranks share gradients and Shampoo blocks over their island group; and the
same under Muon),
eight_cell and hierarchical with 8 processes must write the same result.json as the simulator — final_val_bpb, the byte ledger per
channel and link, the simulated clock, peak rate and transfer times — to the last bit (only wall_time_s and cpu_time_s differ).
Failures: a peer that vanishes ends the survivor with a DistributedError long before the (deliberately huge) timeout;
a peer that hangs ends it after the per-operation timeout; a peer that never arrives ends the rendezvous after it.
Decoupled mode (sync.mode=decoupled, point-to-point messages only): the same result.json as the simulator with a
straggler, a slow link and a preemption; an island that vanishes, hangs or is killed is dropped and the run finishes
(with quorum 1 merging without it, with quorum 2 skipping merges), equal to the simulator with that island preempted.
"""
from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from islands_kit.comm.distributed import RankLayout
from islands_kit.config import ConfigError, apply_overrides, parse_set
from islands_kit.config.presets import get_preset

pytestmark = pytest.mark.slow  # every test here starts processes

FAULTY = Path(__file__).with_name("faulty_transport.py")  # the CLI with the test-only fault-injecting transport
FAST = ["steps=8", "eval_every=4"]  # eval at step 4 runs while a fragment / exchange is still in flight
SHAMPOO = ["optim.name=shampoo", "optim.start_preconditioning_step=2", "optim.precondition_frequency=2"]
MUON = ["optim.name=muon"]  # Muon on the hidden matrices (experts per expert), AdamW on the rest


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}
    env.update(OMP_NUM_THREADS="1", ISLANDS_KIT_DIST_TIMEOUT_S="120", WANDB_MODE="disabled", PYTHONUNBUFFERED="1")
    env.update(extra)
    return env


def _torchrun(nproc: int, experiment: str, sets: list[str], out: Path, timeout: float, resume: bool = False,
              **env: str) -> subprocess.CompletedProcess:
    # fault injection (ISLANDS_KIT_TEST_DIE_*) lives in a test-only transport, not in the production one
    entry = [str(FAULTY)] if any(k.startswith("ISLANDS_KIT_TEST_DIE") for k in env) else ["-m", "islands_kit"]
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}", "--max-restarts=0",
           *entry, "run", experiment, "--preset", "smoke", "--out", str(out)]
    if resume:
        cmd += ["--resume", str(out)]
    for s in sets:
        cmd += ["--set", s]
    return subprocess.run(cmd, env=_env(**env), capture_output=True, text=True, timeout=timeout)


def _simulate(experiment: str, sets: list[str], out: Path) -> dict:
    from islands_kit.run import run_experiment

    cfg = apply_overrides(get_preset(experiment, "smoke"), parse_set(sets))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # like the OMP_NUM_THREADS=1 workers: same kernels, same float results
    try:
        run_experiment(cfg, out)
    finally:
        torch.set_num_threads(threads)
    return json.loads((out / "result.json").read_text())


@pytest.mark.parametrize("experiment,nproc,extra", [
    ("two_site", 2, []),  # one process per island: island 0's dp_ranks=2 folded into its micro-batches
    ("two_site", 3, SHAMPOO),  # one process per rank: island 0 = ranks 0, 1 (grads summed, Shampoo blocks shared)
    ("two_site", 3, MUON),  # the same ranks under Muon: each of island 0's ranks orthogonalises the summed gradient
    ("eight_cell", 8, []),  # butterfly exchanges over isend/irecv
    # int8 deltas with error feedback: each rank holds its own cell's reference; after the exact average at step 4
    # every rank's new reference must be the same bits for the deltas to decode as in the simulator
    ("eight_cell", 8, ["sync.codec=int8", "sync.butterfly.payload=delta", "sync.H=4",
                       "sync.butterfly.exact_average_every=1"]),
    # hierarchical: site syncs every 2 steps and WAN fragment syncs every 4 (reduce-scatter, int4 exchange across the
    # sites, all-gather) over send/recv rounds, on the two link kinds
    ("hierarchical", 8, ["sync.H=4", "sync.hierarchical.site_every=2"]),
    ("hierarchical", 8, ["sync.H=4", "sync.hierarchical.site_every=3", "sync.hierarchical.site_mode=pairwise"]),
])
def test_torchrun_matches_simulator(tmp_path: Path, experiment: str, nproc: int, extra: list[str]) -> None:
    sets = FAST + extra
    cfg = apply_overrides(get_preset(experiment, "smoke"), parse_set(sets))
    assert RankLayout.for_world(cfg, nproc).world_size == nproc
    proc = _torchrun(nproc, experiment, sets, tmp_path / "dist", timeout=240)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    dist_res = json.loads((tmp_path / "dist" / "result.json").read_text())
    sim_res = _simulate(experiment, sets, tmp_path / "sim")
    assert dist_res["final_val_bpb"] == sim_res["final_val_bpb"]  # bit-identical, not approximately
    assert dist_res["cross_site_bytes"] > 0 and dist_res["ledger"] == sim_res["ledger"]
    diff = {k for k in sim_res if sim_res[k] != dist_res.get(k)}
    assert diff == {"wall_time_s", "cpu_time_s"}, {k: (sim_res[k], dist_res.get(k)) for k in diff}
    hist_d = [json.loads(l) for l in (tmp_path / "dist" / "history.jsonl").read_text().splitlines()]
    hist_s = [json.loads(l) for l in (tmp_path / "sim" / "history.jsonl").read_text().splitlines()]
    for d, s in zip(hist_d, hist_s, strict=True):  # the mid-run records see the whole world's ledger and clock
        assert (d["step"], d["val_bpb"], d["cross_site_bytes"], d["sim_time_s"]) == (s["step"], s["val_bpb"], s["cross_site_bytes"], s["sim_time_s"])


CONTRACT_WORKER = r"""
# Runs on 3 ranks (two_site smoke layout: island 0 = ranks 0, 1; island 1 = rank 2). Every rank builds every island's
# payloads from the same seeds, posts its own island's share on TorchDistTransport and all of them on LocalTransport,
# waits out of order, and checks results, arrivals, clocks and the merged ledger bit for bit.
import torch
from islands_kit.comm.codecs import get_codec
from islands_kit.comm.link import LinkModel
from islands_kit.comm.transport import LocalTransport
from islands_kit.comm.torch_dist import TorchDistTransport
from islands_kit.comm.distributed import RankLayout, init_from_env
from islands_kit.config.presets import get_preset

cfg = get_preset("two_site", "smoke")
init_from_env()
import sys
from islands_kit.config import link_config
# "lossy": a link that loses a third of its 16-byte chunks and never re-requests them, so payloads arrive with holes
lossy = sys.argv[1:] == ["lossy"]
link = link_config("transpacific-25g", loss_prob=0.3, chunk_bytes=16) if lossy else cfg.link
dt = TorchDistTransport(RankLayout.for_world(cfg, 3), LinkModel(link, seed=5, repair=not lossy))
lt = LocalTransport(2, LinkModel(link, seed=5, repair=not lossy))
intact = LocalTransport(2, LinkModel(link, seed=5))  # the same transfers, repaired: what the holes change
n_damaged = 0
me, ids = dt.island, [0, 1]
assert dt.local_islands == [me] and (dt.island_group is not None) == (me == 0)
g = torch.Generator().manual_seed(0)
batch = []
for k in range(9):
    codec = get_codec(["int4", "fp32", "fp8_e4m3"][k % 3], 32)
    pay = {i: codec.encode(torch.randn(50 + 7 * k, generator=g), stochastic=True, generator=g) for i in ids}
    w = {i: float(3 * i + k + 1) for i in ids}
    kind = ["all_reduce", "all_gather", "send_recv"][k % 3]
    if kind == "send_recv":
        hd, hl = dt.send_recv("x", {me: pay[me]}, {0: 1, 1: 0}), lt.send_recv("x", pay, {0: 1, 1: 0})
        hi = intact.send_recv("x", pay, {0: 1, 1: 0})
    else:
        hd, hl = getattr(dt, kind)("c%d" % (k % 2), {me: pay[me]}, {me: w[me]}), getattr(lt, kind)("c%d" % (k % 2), pay, w)
        hi = getattr(intact, kind)("c%d" % (k % 2), pay, w)
    assert me in hd.arrival  # participation is visible before completion
    batch.append((kind, hd, hl, hi))
    dt.compute(me, 0.01 * (me + 1) * (k + 1))
    for i in ids:
        lt.compute(i, 0.01 * (i + 1) * (k + 1))
        intact.compute(i, 0.01 * (i + 1) * (k + 1))
    if len(batch) == 3:  # newest first: completing it must complete the older ones first (FIFO)
        for kind, hd, hl, hi in reversed(batch):
            got, want, clean = hd.wait(me), [hl.wait(i) for i in ids][me], [hi.wait(i) for i in ids][me]
            if kind == "all_gather":
                n_damaged += any(not torch.equal(a, b) for (_, _, a), (_, _, b) in zip(want, clean))
            else:
                n_damaged += not torch.equal(want, clean)
            if kind == "all_gather":
                assert [(i, w) for i, w, _ in got] == [(i, w) for i, w, _ in want]
                assert all(torch.equal(a, b) for (_, _, a), (_, _, b) in zip(got, want))
            else:
                assert torch.equal(got, want), kind
            assert hd.arrival[me] == hl.arrival[me]
        batch = []
assert dt.clock.now[me] == lt.clock.now[me] and dt.clock.idle[me] == lt.clock.idle[me]
with dt.world_view():
    assert dt.ledger.to_dict() == lt.ledger.to_dict(), (dt.ledger.to_dict(), lt.ledger.to_dict())
    assert dt.ledger.timeline == lt.ledger.timeline
    assert (dt.clock.now, dt.clock.busy, dt.clock.idle) == (lt.clock.now, lt.clock.busy, lt.clock.idle)
    assert dt.transfer_stats("c0") == lt.transfer_stats("c0")
    inbound = sum(b for (src, dst), b in dt.ledger.links.items() if dst == me)
assert dt.ledger.bytes() == (inbound if dt.is_leader else 0)  # back to the local ledger: what this island's leader received
assert (n_damaged > 0) == lossy, n_damaged  # lossy: holes reached the results, identically on both transports
sys.stdout.write(f"contract ok on rank {dt.rank}\n")  # one write: the ranks share one stdout pipe
sys.stdout.flush()
"""


@pytest.mark.parametrize("link", ["plain", "lossy"])
def test_transport_contract_matches_local_transport(tmp_path: Path, link: str) -> None:
    """all_reduce / all_gather / send_recv (a pairwise exchange) with three codecs, out-of-order waits, several ranks in one island: results,
    arrivals, clocks, ledger (records in the simulator's order) and transfer stats equal LocalTransport's bit for bit;
    also on a lossy link without re-requests, where the payloads' holes change the results the same way on both."""
    script = tmp_path / "contract.py"
    script.write_text(CONTRACT_WORKER)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=3", "--max-restarts=0", str(script)]
    cmd += ["lossy"] if link == "lossy" else []
    proc = subprocess.run(cmd, env=_env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    # the ranks share one stdout pipe, so their lines may interleave: find the marks anywhere
    assert sorted(re.findall(r"contract ok on rank (\d)", proc.stdout)) == ["0", "1", "2"], proc.stdout


DIRECTED_WORKER = r"""
# Runs on 3 ranks, one island each. Directed steps of three topologies' rounds (a ring each way, a pairing that leaves
# island 2 out) on TorchDistTransport and on LocalTransport: results, arrivals, clocks and the ledger bit for bit.
import sys
import torch
from islands_kit.comm.codecs import get_codec
from islands_kit.comm.link import LinkModel
from islands_kit.comm.transport import LocalTransport
from islands_kit.comm.torch_dist import TorchDistTransport
from islands_kit.comm.distributed import RankLayout, init_from_env
from islands_kit.config.presets import get_preset
from islands_kit.sync.topology import Topology, ring

init_from_env()
link = get_preset("two_site", "smoke").link
dt = TorchDistTransport(RankLayout((1, 1, 1)), LinkModel(link, seed=7))
lt = LocalTransport(3, LinkModel(link, seed=7))
me, ids = dt.island, [0, 1, 2]
rounds = [ring(3).targets(0), ring(3, hop=-1).targets(0), Topology("pair", ((1, 0, 2),)).targets(0)]
g = torch.Generator().manual_seed(1)
for k in range(6):
    codec = get_codec(["int4", "fp32"][k % 2], 32)
    pay = {i: codec.encode(torch.randn(40 + 5 * k, generator=g), stochastic=True, generator=g) for i in ids}
    targets = rounds[k % 3]
    hd, hl = dt.send_recv("ring", {me: pay[me]}, targets), lt.send_recv("ring", pay, targets)
    got, want = hd.wait(me), [hl.wait(i) for i in ids][me]
    assert torch.equal(got, want) and hd.arrival[me] == hl.arrival[me], k
    source = next(i for i, t in targets.items() if t == me)
    assert torch.equal(want, get_codec(codec.name, 32).decode(pay[source])), k  # what the source sent (fp32/int4 exact)
    dt.compute(me, 0.02 * (me + 1))
    for i in ids:
        lt.compute(i, 0.02 * (i + 1))
with dt.world_view():
    assert dt.ledger.to_dict() == lt.ledger.to_dict(), (dt.ledger.to_dict(), lt.ledger.to_dict())
    assert dt.ledger.timeline == lt.ledger.timeline
    assert (dt.clock.now, dt.clock.busy, dt.clock.idle) == (lt.clock.now, lt.clock.busy, lt.clock.idle)
    # two rounds of 3 transfers and one of 2 (island 2 sat out), twice over: every payload once to its target
    assert len(dt.ledger.timeline) == 16 and dt.ledger.bytes() == sum(r[2] for r in lt.ledger.timeline)
sys.stdout.write(f"directed ok on rank {dt.rank}\n")
sys.stdout.flush()
"""


def test_directed_rounds_match_local_transport(tmp_path: Path) -> None:
    """``send_recv`` with rounds that are not pairwise (a ring each way) and one where an island sits out: the
    receiver gets its source's payload, and results, arrivals, clocks and the ledger equal LocalTransport's."""
    script = tmp_path / "directed.py"
    script.write_text(DIRECTED_WORKER)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=3", "--max-restarts=0", str(script)]
    proc = subprocess.run(cmd, env=_env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    assert sorted(re.findall(r"directed ok on rank (\d)", proc.stdout)) == ["0", "1", "2"], proc.stdout


HOSTILE_WORKER = r"""
# 2 ranks. Rank 1 is compromised: in three rounds it sends, in place of its control message, a pickle that would
# create a marker file when unpickled, the same message cut short, and an oversized one. Both ranks take part in
# every round as in a real gather and must raise the same one-line DistributedError naming rank 1.
import pickle, sys
from islands_kit.comm import control
from islands_kit.comm.torch_dist import DistributedError, TorchDistTransport
from islands_kit.comm.distributed import RankLayout, init_from_env
from islands_kit.config.presets import get_preset

class MakesMarker:
    def __reduce__(self):
        return (open, (sys.argv[1], "w"))

def say(line):  # one write per line: the ranks share one stdout pipe
    sys.stdout.write(line + "\n")
    sys.stdout.flush()

init_from_env()
dt = TorchDistTransport(RankLayout.for_world(get_preset("two_site", "smoke"), 2), None)
good = control.encode("checkpoint.steps", [2, 4])
rounds = {"pickle": pickle.dumps(MakesMarker()), "truncated": good[:-3], "oversized": b"[" * (control.MAX_BYTES + 1)}
for name, bad in rounds.items():
    try:
        if dt.rank == 1:
            dt._decode_all("checkpoint.steps", [int], dt._gather_bytes("checkpoint.steps", bad, control.MAX_BYTES),
                           control.MAX_BYTES)
        else:
            dt.gather_control("checkpoint.steps", [2, 4], [int])
        say(f"NOT REFUSED {name} on rank {dt.rank}")
    except DistributedError as e:
        assert "\n" not in str(e)
        say(f"refused {name} on rank {dt.rank} : {e}")
say(f"alive on rank {dt.rank}")
"""


def test_hostile_peer_control_messages_are_refused_on_every_rank(tmp_path: Path) -> None:
    """A pickle (which would create a marker file), a truncated and an oversized control message from rank 1 are each
    refused on both ranks with a one-line error naming rank 1; the marker never appears and no rank hangs."""
    script, marker = tmp_path / "hostile.py", tmp_path / "pwned"
    script.write_text(HOSTILE_WORKER)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", "--max-restarts=0",
           str(script), str(marker)]
    proc = subprocess.run(cmd, env=_env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    lines = proc.stdout.splitlines()
    assert not marker.exists() and not any(l.startswith("NOT REFUSED") for l in lines), proc.stdout
    for rank in (0, 1):
        assert f"alive on rank {rank}" in lines
        for name, why in [("pickle", "not a UTF-8 JSON control message, refused"),
                          ("truncated", "not a UTF-8 JSON control message, refused"),
                          ("oversized", "announced 67108865 bytes, outside (0, 67108864]; refused before reading it")]:
            hit = [l for l in lines if l.startswith(f"refused {name} on rank {rank} :")]
            assert len(hit) == 1 and "control message 'checkpoint.steps' from rank 1" in hit[0] and why in hit[0], lines


def test_dead_peer_ends_survivor_without_waiting_for_timeout(tmp_path: Path) -> None:
    """Rank 1 vanishes silently (exit 0) at its 3rd step. The survivor's next collective sees the closed socket and
    raises at once: with a 1-hour timeout, only that detection can end the run inside the subprocess limit."""
    proc = _torchrun(2, "two_site", FAST, tmp_path / "die", timeout=150, ISLANDS_KIT_DIST_TIMEOUT_S="3600",
                     ISLANDS_KIT_TEST_DIE_AT_STEP="3", ISLANDS_KIT_TEST_DIE_RANK="1")
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "fault injection: rank 1 vanishes at step 3" in out
    assert "islands-kit: error: islands_kit.comm.distributed:" in out and "failed on rank 0 (island 0)" in out, out[-3000:]
    assert not (tmp_path / "die" / "result.json").exists()


ABANDON = """
import argparse, atexit, sys, time
import torch.distributed as dist
from islands_kit import cli
from islands_kit.comm.torch_dist import DistributedError

dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d", rank=0, world_size=1)
atexit.register(lambda: time.sleep(600))  # stands for a teardown that waits on a dead peer's queued work


def lost(args):
    raise DistributedError("islands_kit.comm.distributed: all_reduce #2 failed on rank 0 (island 0): peer gone")


p = argparse.ArgumentParser()
p.set_defaults(fn=lost)
cli.build_parser = lambda: p
sys.exit(cli.main([]))
"""


def test_a_lost_peer_ends_the_process_without_the_teardown_at_exit(tmp_path: Path) -> None:
    """CI saw a survivor print its DistributedError and then not exit for minutes: the teardown at exit (gloo drains
    queued work before destroying a group) can wait on the dead peer. The CLI ends such a process at once, exit 1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.run([sys.executable, "-c", ABANDON % port], env=_env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert proc.stderr.strip().endswith("islands-kit: error: islands_kit.comm.distributed: all_reduce #2 failed on "
                                        "rank 0 (island 0): peer gone"), proc.stderr[-2000:]


def test_hung_peer_ends_survivor_after_the_timeout(tmp_path: Path) -> None:
    """Rank 1 stops answering at its 3rd step but keeps its sockets open: only the per-operation timeout can end the
    survivor's wait (every process group, not just the default one, must carry ISLANDS_KIT_DIST_TIMEOUT_S)."""
    proc = _torchrun(2, "two_site", FAST, tmp_path / "hang", timeout=150, ISLANDS_KIT_DIST_TIMEOUT_S="3",
                     ISLANDS_KIT_TEST_DIE_AT_STEP="3", ISLANDS_KIT_TEST_DIE_MODE="hang")
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "fault injection: rank 1 hangs at step 3" in out
    assert "failed on rank 0 (island 0)" in out and "(timeout 3 s" in out and "Timed out" in out, out[-3000:]


def test_peer_that_never_arrives_times_out(tmp_path: Path) -> None:
    """Rank 0 of 2 started alone: the rendezvous gives up after ISLANDS_KIT_DIST_TIMEOUT_S with a clear error."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = _env(RANK="0", LOCAL_RANK="0", WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
               ISLANDS_KIT_DIST_TIMEOUT_S="2")
    cmd = [sys.executable, "-m", "islands_kit", "run", "two_site", "--preset", "smoke", "--out", str(tmp_path / "x")]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=90)
    assert proc.returncode != 0
    assert "rendezvous failed on rank 0 of 2" in proc.stderr and "within 2 s" in proc.stderr, proc.stderr[-3000:]


def test_rank_layout_maps_islands_to_contiguous_ranks() -> None:
    cfg = get_preset("two_site", "smoke")  # dp_ranks (2, 1)
    per_island = RankLayout.for_world(cfg, 2)
    assert per_island.ranks_per_island == (1, 1) and per_island.leaders == [0, 1]
    per_rank = RankLayout.for_world(cfg, 3)
    assert per_rank.ranks_per_island == (2, 1) and per_rank.leaders == [0, 2]
    assert [per_rank.island_of(r) for r in range(3)] == [0, 0, 1]
    assert per_rank.ranks_of(0) == [0, 1] and per_rank.ranks_of(1) == [2]
    with pytest.raises(ValueError, match="rank"):
        per_rank.island_of(3)


def test_wrong_world_size_names_the_field(monkeypatch: pytest.MonkeyPatch) -> None:
    """Checked before any rendezvous, so every rank fails at once with the same message."""
    from islands_kit.comm.distributed import make_transport

    monkeypatch.setenv("WORLD_SIZE", "5")
    with pytest.raises(ConfigError, match=r"islands\[\*\]\.dp_ranks: WORLD_SIZE must equal len\(islands\) = 2 .* = 3 .*got WORLD_SIZE=5"):
        make_transport(get_preset("two_site", "smoke"), None)  # refused before the link is used


def test_decoupled_needs_one_process_per_island(monkeypatch: pytest.MonkeyPatch) -> None:
    """two_site has dp_ranks (2, 1): 3 processes (one per data-parallel rank) are refused in decoupled mode, naming
    the field, before any rendezvous."""
    from islands_kit.comm.distributed import make_transport

    monkeypatch.setenv("WORLD_SIZE", "3")
    cfg = apply_overrides(get_preset("two_site", "smoke"), parse_set(["sync.mode=decoupled"]))
    with pytest.raises(ConfigError, match=r"islands\[\*\]\.dp_ranks: sync\.mode=decoupled runs one process per island"):
        make_transport(cfg, None)  # refused before the link is used


@pytest.mark.parametrize("sets,field", [
    (["faults.preempt_island=1", "faults.preempt_start=2", "faults.preempt_steps=3"], "faults.preempt_island"),
])
def test_unsupported_under_torch_distributed_names_the_field(monkeypatch: pytest.MonkeyPatch, sets: list[str], field: str) -> None:
    from islands_kit.comm.distributed import make_transport

    monkeypatch.setenv("WORLD_SIZE", "2")
    cfg = apply_overrides(get_preset("two_site", "smoke"), parse_set(sets + ["sync.strategy=diloco"]))
    with pytest.raises(ConfigError, match=field.replace(".", r"\.")):
        make_transport(cfg, None)  # refused before the link is used


def test_undefended_nan_island_diverges_at_the_same_step_as_the_simulator(tmp_path: Path) -> None:
    # the NaN reaches the global model (identical on every rank), so both ranks stop at the same step and rank 0
    # still writes the result; everything but wall time equals the simulator's
    sets = ["steps=17", "faults.attack=nan", "faults.attack_start=9", "eval_every=4"]
    proc = _torchrun(2, "two_site", sets, tmp_path / "dist", timeout=240)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    dist_res = json.loads((tmp_path / "dist" / "result.json").read_text())
    with pytest.warns(RuntimeWarning, match="diverged at step"):
        sim_res = _simulate("two_site", sets, tmp_path / "sim")
    assert sim_res["diverged_at_step"] is not None and sim_res["final_val_bpb"] is None
    diff = {k for k in sim_res if sim_res[k] != dist_res.get(k)}
    # the reason lists the islands this process saw diverge: rank 0 holds island 0 only
    assert diff <= {"wall_time_s", "cpu_time_s", "diverged_reason"}, {k: (sim_res[k], dist_res.get(k)) for k in diff}
    prefix = "Diverged: training loss is not finite on island(s) 0 (nan)"
    assert dist_res["diverged_reason"] == prefix and sim_res["diverged_reason"].startswith(prefix)


@pytest.mark.parametrize("experiment,nproc,extra", [
    ("two_site", 3, SHAMPOO),  # island 0 on ranks 0, 1: each shard holds its share of the Shampoo blocks
    ("two_site", 2, MUON),  # each shard holds its island's Muon momentum buffers and AdamW moments
    ("eight_cell", 8, []),
])
def test_killed_rank_and_torchrun_resume_is_bit_identical(tmp_path: Path, experiment: str, nproc: int,
                                                          extra: list[str]) -> None:
    """One rank vanishes at step 7; every rank wrote its shard of step 6 (checkpoint_every=2) and pruned the older
    ones; a torchrun --resume finishes the run with the simulator's result.json (wall time aside)."""
    from islands_kit.train.checkpoint import rank_shards

    sets = ["steps=12", "eval_every=4", "checkpoint_every=2", *extra]
    out = tmp_path / "dist"
    proc = _torchrun(nproc, experiment, sets, out, timeout=300, ISLANDS_KIT_TEST_DIE_AT_STEP="7",
                     ISLANDS_KIT_TEST_DIE_RANK="1", ISLANDS_KIT_DIST_TIMEOUT_S="60")
    assert proc.returncode != 0 and not (out / "result.json").exists()
    assert {r: sorted(rank_shards(out, r)) for r in range(nproc)} == {r: [6] for r in range(nproc)}
    proc = _torchrun(nproc, experiment, sets, out, timeout=300, resume=True)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    dist_res = json.loads((out / "result.json").read_text())
    sim_res = _simulate(experiment, sets, tmp_path / "sim")
    diff = {k for k in sim_res if sim_res[k] != dist_res.get(k)}
    assert diff == {"wall_time_s", "cpu_time_s"}, {k: (sim_res[k], dist_res.get(k)) for k in diff}


def test_torchrun_resume_refuses_a_missing_shard_on_every_rank(tmp_path: Path) -> None:
    from islands_kit.train.checkpoint import latest_common_step, rank_shards

    assert latest_common_step([[2, 4, 6], [4, 6], [6, 4]]) == 6 and latest_common_step([[2], [4]]) is None
    sets = ["steps=4", "checkpoint_every=2"]
    out = tmp_path / "dist"
    assert _torchrun(2, "two_site", sets, out, timeout=240).returncode == 0
    rank_shards(out, 1)[2].unlink()
    proc = _torchrun(2, "two_site", sets, out, timeout=240, resume=True)
    assert proc.returncode != 0
    assert proc.stdout.count("no step with a checkpoint shard for every one of the 2 ranks") + \
        proc.stderr.count("no step with a checkpoint shard for every one of the 2 ranks") >= 2  # both ranks say it
    from islands_kit.train.checkpoint import load_checkpoint

    with pytest.raises(ConfigError, match="per-rank shards written under torch.distributed; resume it with torchrun"):
        load_checkpoint(out)  # an in-process resume of a torchrun folder


DECOUPLED = ["sync.mode=decoupled", "faults.straggler_island=1", "faults.straggler_factor=2"]


@pytest.mark.parametrize("extra", [
    ["link.preset=intra-dc", "sync.grace_s=0"],  # merges land within a tick or two; island 1 always late, carried
    [],  # the transpacific link: every merge still in flight over many ticks (applied at the end); bounded staleness
    # island 1 preempted for steps 5..14: absent from those rounds, then rejoins from its copy of the global model
    ["link.preset=intra-dc", "faults.preempt_island=1", "faults.preempt_start=4", "faults.preempt_steps=10"],
    ["link.preset=intra-dc", *MUON],  # the decoupled driver with Muon inside the islands
])
def test_decoupled_torchrun_matches_simulator(tmp_path: Path, extra: list[str]) -> None:
    """sync.mode=decoupled over torchrun (2 processes, no collective; rank 0 is the synchroniser) with a 2x straggler
    on island 1: the whole result.json equals the simulator's to the last bit — final_val_bpb, inner steps and tokens
    per island (the straggler's half), the merge log (merge_s, on-time, late, carried, landing times), the ledger and
    the simulated clocks — wall time aside. Exact because every rank runs the simulator's arithmetic on its island
    in the same order: the synchroniser prices every transfer with the same seeded link model, decides with the same
    code, and every rank applies the same outer step to its copy of the global fragments."""
    sets = DECOUPLED + extra
    proc = _torchrun(2, "two_site", sets, tmp_path / "dist", timeout=240)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    dist_res = json.loads((tmp_path / "dist" / "result.json").read_text())
    sim_res = _simulate("two_site", sets, tmp_path / "sim")
    steps = sim_res["config"]["steps"]
    assert dist_res["inner_steps"]["0"] == steps and dist_res["inner_steps"]["1"] <= steps // 2  # the straggler
    assert dist_res["final_val_bpb"] == sim_res["final_val_bpb"]
    assert dist_res["decoupled"]["merges"] == sim_res["decoupled"]["merges"]
    diff = {k for k in sim_res if sim_res[k] != dist_res.get(k)}
    assert diff == {"wall_time_s", "cpu_time_s"}, {k: (sim_res[k], dist_res.get(k)) for k in diff}
    hist_d = [json.loads(l) for l in (tmp_path / "dist" / "history.jsonl").read_text().splitlines()]
    hist_s = [json.loads(l) for l in (tmp_path / "sim" / "history.jsonl").read_text().splitlines()]
    keys = ("step", "tokens", "val_bpb", "cross_site_bytes", "sim_time_s")
    assert [[d[k] for k in keys] for d in hist_d] == [[s[k] for k in keys] for s in hist_s]


@pytest.mark.parametrize("quorum", [1, 2])
def test_decoupled_run_survives_a_dead_island(tmp_path: Path, quorum: int) -> None:
    """Island 1's process vanishes at its 10th inner step (after its contribution at step 8). The synchroniser
    notices at the next due round (step 12), goes on without it and writes result.json. For the arithmetic a dead
    island is an island preempted from its last report on, so the run equals the simulator's with island 1 preempted
    after step 8 — bpb, merge log, inner steps, tokens, ledger — all but the clocks of island 1 (the dead one's
    stops when it is lost; the preempted one idles to the end). With quorum 1 the later merges go on with island 0;
    with quorum 2 they are skipped (contributions carried) and the final merge, which needs no quorum, takes them."""
    sets = ["sync.mode=decoupled", "link.preset=intra-dc", f"sync.quorum={quorum}"]
    proc = _torchrun(2, "two_site", sets, tmp_path / "dist", timeout=240, ISLANDS_KIT_TEST_DIE_AT_STEP="10",
                     ISLANDS_KIT_TEST_DIE_RANK="1", ISLANDS_KIT_DIST_TIMEOUT_S="60")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    assert "fault injection: rank 1 vanishes at step 10" in out
    # noticed from the closed socket (closed or reset, as the OS reports it), not after the 60 s timeout
    assert "island 1 is lost, the run goes on without it (islands_kit.comm.distributed: message 'decoupled.contribution'" \
        in out and re.search(r"Connection (closed|reset) by peer", out), out[-3000:]
    assert ("can no longer be met after step 12" in out) == (quorum == 2)
    res = json.loads((tmp_path / "dist" / "result.json").read_text())
    rep = res["decoupled"]
    assert rep["lost_islands"] == {"1": {"step": 12, "last_reported_steps": 8}}
    steps = res["config"]["steps"]
    assert res["inner_steps"] == {"0": steps, "1": 8}
    merges = [m for m in rep["merges"] if not m.get("final")]
    before, after = [m for m in merges if m["step"] <= 8], [m for m in merges if m["step"] > 8]
    assert before and all(m["on_time"] == [0, 1] for m in before)
    assert after and all(m["absent"] == [1] and 1 not in m["arrival_s"] for m in after)
    final = [m for m in rep["merges"] if m.get("final")]
    assert final and all(1 not in m["on_time"] + m["carried_in"] for m in final)
    if quorum == 1:
        assert all(m["quorum_met"] and m["on_time"] == [0] for m in after)
    else:
        assert all(not m["quorum_met"] for m in after) and rep["skipped_merges"] == len(after)
        assert sorted(i for m in final for i in m["carried_in"]) == [0] * len(after)  # the skipped rounds, merged
    sim = _simulate("two_site", sets + ["faults.preempt_island=1", "faults.preempt_start=8",
                                        "faults.preempt_steps=16"], tmp_path / "sim")
    strip = lambda m: {k: v for k, v in m.items() if k != "island_steps"}  # noqa: E731
    assert [strip(m) for m in rep["merges"]] == [strip(m) for m in sim["decoupled"]["merges"]]
    clocks = {"island_busy_s", "island_idle_s", "compute_utilization", "goodput", "config", "decoupled",
              "wall_time_s", "cpu_time_s"}
    diff = {k for k in sim if sim[k] != res.get(k)}
    assert diff <= clocks, {k: (sim[k], res.get(k)) for k in diff - clocks}
    assert res["final_val_bpb"] == sim["final_val_bpb"] and res["ledger"] == sim["ledger"]
    # the lost island's clock counts the steps it reported as busy and idles to the end, as the preempted one does:
    # utilisation sees the loss (its clock used to stop, and utilisation read 1.0)
    assert res["island_busy_s"] == sim["island_busy_s"] and res["island_idle_s"]["1"] > 0
    assert res["compute_utilization"] == pytest.approx(sim["compute_utilization"], rel=1e-9)
    assert res["compute_utilization"] < 0.9


def _launch_per_process(tmp_path: Path, timeout_s: int, n: int = 2) -> tuple[list[subprocess.Popen], Path, Path]:
    """``n`` processes started on their own (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT; no torchrun agent, so the
    test owns every PID): a decoupled two_site run (n = 3: a third island like site B, from a config file, and a 2x
    straggler on island 1) whose last island hangs at its 10th step. Rank 0's output goes to a file (never a pipe it
    could block on); the last rank's stderr is a pipe the test reads."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out, log = tmp_path / "dist", tmp_path / "rank0.txt"
    run = ["two_site", "--preset", "smoke"]
    if n == 3:
        d = get_preset("two_site", "smoke").to_dict()
        d["islands"].append({**d["islands"][1], "name": "site-c"})
        (tmp_path / "three.json").write_text(json.dumps(d))
        run = ["--config", str(tmp_path / "three.json"), "--set", "faults.straggler_island=1",
               "--set", "faults.straggler_factor=2"]
    cmd = [sys.executable, str(FAULTY), "run", *run, "--out", str(out), "--set", "sync.mode=decoupled",
           "--set", "link.preset=intra-dc"]
    env = _env(WORLD_SIZE=str(n), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), ISLANDS_KIT_DIST_TIMEOUT_S=str(timeout_s),
               ISLANDS_KIT_TEST_DIE_AT_STEP="10", ISLANDS_KIT_TEST_DIE_RANK=str(n - 1), ISLANDS_KIT_TEST_DIE_MODE="hang")
    procs = []
    with open(log, "w") as f:
        for r in range(n):
            last = r == n - 1
            procs.append(subprocess.Popen(cmd, env={**env, "RANK": str(r), "LOCAL_RANK": str(r)},
                                          stdout=f if r == 0 else subprocess.DEVNULL,
                                          stderr=subprocess.PIPE if last else (subprocess.STDOUT if r == 0 else None),
                                          text=True))
    return procs, out, log


def _end(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.wait()


def _check_lost_last_island(out: Path, text: str, n: int) -> None:
    """Island n-1 (no straggler: a step every tick) lost at step 12 after reporting 8 steps; the others go on."""
    j = n - 1
    assert f"island {j} is lost, the run goes on without it" in text, text[-3000:]
    res = json.loads((out / "result.json").read_text())
    assert res["decoupled"]["lost_islands"] == {str(j): {"step": 12, "last_reported_steps": 8}}
    steps = res["config"]["steps"]
    assert res["inner_steps"] == ({"0": steps, "1": steps // 2, "2": 8} if n == 3 else {"0": steps, "1": 8})
    later = [m for m in res["decoupled"]["merges"] if m["step"] > 8 and not m.get("final")]
    assert later and all(m["absent"] == [j] for m in later)
    assert all(sorted(m["on_time"] + m["late"]) == list(range(n - 1)) for m in later)  # every live island is in


@pytest.mark.parametrize("n", [2, 3])
def test_decoupled_run_goes_on_without_a_hung_island(tmp_path: Path, n: int) -> None:
    """The last island's process stops answering at its 10th step but keeps its sockets open: only the bound on the
    synchroniser's wait (ISLANDS_KIT_DIST_TIMEOUT_S=10) can tell. Rank 0 gives up on it after that and finishes the
    run (exit 0) while the hung process is still there (the test ends it). With 3 islands the live one, which waits
    for the synchroniser's decision meanwhile, takes part in every later merge (its connection to rank 0 is not the
    one that timed out)."""
    procs, out, log = _launch_per_process(tmp_path, timeout_s=10, n=n)
    try:
        for p in procs[:-1]:
            p.wait(timeout=180)
        still_hung = procs[-1].poll() is None
    finally:
        _end(procs)
    text = log.read_text()
    assert [p.returncode for p in procs[:-1]] == [0] * (n - 1) and still_hung, text[-3000:]
    assert "(timeout 10 s" in text and "Timed out" in text, text[-3000:]
    _check_lost_last_island(out, text, n)


def test_decoupled_run_survives_a_killed_island(tmp_path: Path) -> None:
    """The README's advice for islands that may crash: each process started on its own, no agent to stop the
    survivors. Island 1 is SIGKILLed (exit -9) at its 10th step; rank 0 notices the closed socket at its next due
    round, long before the (300 s) timeout, and finishes the run (exit 0) without it."""
    import signal
    import time

    procs, out, log = _launch_per_process(tmp_path, timeout_s=300)
    killed = None
    try:
        victim = procs[-1]
        assert victim.stderr is not None
        for line in victim.stderr:  # killed exactly there: stopped at its 10th step, before step 12's round
            if "fault injection: rank 1 hangs at step 10" in line:
                victim.send_signal(signal.SIGKILL)
                killed = time.time()
                break
        assert killed is not None, "island 1 never reached its 10th step"
        procs[0].wait(timeout=180)
        after = time.time() - killed
    finally:
        _end(procs)
    text = log.read_text()
    assert procs[1].returncode == -signal.SIGKILL and procs[0].returncode == 0, text[-3000:]
    assert after < 120 and re.search(r"Connection (closed|reset) by peer", text), (after, text[-3000:])
    _check_lost_last_island(out, text, 2)
