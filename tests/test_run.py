"""End-to-end runs on the smoke preset: the result contract, determinism, the ledger, preemption, and exact resume
after a SIGKILL."""
from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from islands_kit.cli import main as cli_main
from islands_kit.config import ConfigError, apply_overrides
from islands_kit.config.presets import get_preset
from islands_kit.records.tracking import RESULT_KEYS
from islands_kit.run import run_experiment
from islands_kit.sync.butterfly import butterfly_schedule
from islands_kit.train.checkpoint import FILENAME

os.environ["WANDB_MODE"] = "disabled"


def smoke(experiment: str, **overrides):
    return apply_overrides(get_preset(experiment, "smoke"), {k.replace("__", "."): str(v) for k, v in overrides.items()})


@pytest.fixture(scope="module")
def two_site_result(tmp_path_factory):
    out = tmp_path_factory.mktemp("two_site")
    return run_experiment(smoke("two_site", steps=12), out), out


def test_result_contract_and_files(two_site_result):
    res, out = two_site_result
    saved = json.loads((out / "result.json").read_text())
    for k in RESULT_KEYS:
        assert k in saved, k
    assert saved["final_val_bpb"] == res.final_val_bpb and math.isfinite(res.final_val_bpb)
    assert res.tokens == 12 * 40 * 32  # steps x global batch x seq_len
    hist = [json.loads(line) for line in (out / "history.jsonl").read_text().splitlines()]
    assert [h["step"] for h in hist] == [12] and hist[-1]["final"]
    assert res.val_curve == [[h["tokens"], h["val_bpb"]] for h in hist]
    assert set(res.compressor_bpb) == {"gzip", "bz2", "xz"}
    assert 0 < saved["cpu_time_s"] and 0 < saved["wall_time_s"]


def test_a_run_records_its_cpu_seconds_apart_from_its_wall_seconds():
    """cpu_time_s: what the run's process computed, which on a shared machine wall time overstates (waiting for the
    cores counts in wall time, not in CPU time); a resume carries it on."""
    import time

    from islands_kit.train.experiment import Experiment

    exp = Experiment(smoke("baseline"))
    cpu0, wall0 = exp.cpu_s(), exp.elapsed_s()
    time.sleep(0.3)  # waiting: wall time, no CPU time
    assert exp.elapsed_s() - wall0 >= 0.3 and exp.cpu_s() - cpu0 < 0.1
    t = time.process_time()
    while time.process_time() - t < 0.2:  # computing: CPU time
        pass
    assert exp.cpu_s() - cpu0 >= 0.2
    state = exp.state_dict()
    again = Experiment(smoke("baseline"))
    again.load_state_dict(state)
    assert again.cpu_s() >= state["cpu_s"] >= 0.2


@pytest.mark.slow
def test_regime_figures_count_what_happened(two_site_result):
    """tokens per active parameter, and the syncs each fragment took, counted by the strategy as they happened."""
    res, out = two_site_result
    saved = json.loads((out / "result.json").read_text())
    assert saved["tokens_per_active_param"] == res.tokens / res.params_active
    # 12 steps, H = 8, two fragments at offsets 4 and 0, tau = 1: fragment 0 syncs after steps 4 and 12 (the second
    # lands in finalize, leaving nothing to flush), fragment 1 after step 8 and in the final flush of steps 9-12
    assert saved["outer_steps_per_fragment"] == [2, 2]
    # 13 steps: fragment 0 after 4 and 12 and its flush of step 13; fragment 1 after 8 and its flush of steps 9-13
    assert run_experiment(smoke("two_site", steps=13)).outer_steps_per_fragment == [3, 2]
    # a warm start averages every fragment plainly for its 4 steps (no outer step) and takes fragment 0's sync after
    # step 4 with it: fragment 0 has only its flush of steps 5-10, fragment 1 its sync after 8 and the flush of 9-10
    assert run_experiment(smoke("two_site", steps=10, sync__diloco__warm_start_steps=4)).outer_steps_per_fragment == [1, 2]
    assert run_experiment(smoke("baseline", steps=3)).outer_steps_per_fragment is None
    # the butterfly counts its exchanges: the schedule's, E = 3 per fragment per window of H = 8
    cells = run_experiment(smoke("eight_cell", steps=8))
    sched = butterfly_schedule(8, 8, 3, 2, 8)
    assert cells.outer_steps_per_fragment == [sum(e.fragment == p for e in sched) for p in range(2)] == [3, 3]


def test_two_site_ledger(two_site_result):
    res, _ = two_site_result
    # fragments: two directions per sync; routing stats every step on their own channel
    assert res.cross_site_bytes == res.fragment_bytes + res.routing_sync_bytes
    assert res.fragment_bytes > 0 and res.routing_sync_bytes > 0
    assert res.ledger["channels"]["routing"]["messages"] == 2 * 12
    assert res.ddp_equivalent_bytes == 8 * res.params_total * 12
    assert res.cross_site_bytes < res.ddp_equivalent_bytes / 5
    assert 0 < res.compute_utilization <= 1 and res.sim_wall_clock_s > 0


@pytest.mark.slow
def test_same_seed_identical_different_seed_differs(tmp_path):
    a = run_experiment(smoke("baseline", steps=6))
    b = run_experiment(smoke("baseline", steps=6))
    c = run_experiment(smoke("baseline", steps=6, seed=1))
    assert a.final_val_bpb == b.final_val_bpb and a.val_curve == b.val_curve
    assert c.final_val_bpb != a.final_val_bpb


def test_the_tuning_split_is_scored_only_when_asked():
    """``data.tune_fraction`` holds the split out of training either way; only ``data.score_tune`` scores it, so a
    run nobody tunes spends no final pass on it — and the training and validation numbers do not depend on it."""
    held = run_experiment(smoke("baseline", steps=2, data__tune_fraction=0.05))
    scored = run_experiment(smoke("baseline", steps=2, data__tune_fraction=0.05, data__score_tune="true"))
    assert held.final_tune_bpb is None and math.isfinite(scored.final_tune_bpb)
    assert held.final_val_bpb == scored.final_val_bpb and held.val_curve == scored.val_curve
    with pytest.raises(ConfigError, match="data.score_tune: needs a tuning split"):
        smoke("baseline", data__score_tune="true").validate()


def test_baseline_ledger_is_the_ddp_formula():
    res = run_experiment(smoke("baseline", steps=3, sync__routing_sync="false"))
    assert res.gradient_bytes == res.ddp_equivalent_bytes == 8 * res.params_total * 3


@pytest.mark.slow
def test_preempted_island_rejoins(tmp_path):
    res = run_experiment(smoke("two_site", steps=16, faults__preempt_island=1, faults__preempt_start=4,
                               faults__preempt_steps=5))
    assert res.tokens == 16 * 40 * 32 - 5 * 16 * 32  # site B's 16 sequences missing for 5 steps
    assert math.isfinite(res.final_val_bpb)
    assert res.island_idle_s[1] > 0  # the preempted island's lost steps show up as idle time


VICTIM = Path(__file__).with_name("paused_victim.py")  # the CLI, pausing itself where the test will kill it


@pytest.mark.parametrize("pause, left_tmp", [
    ("step:7", False),  # mid-run: the checkpoint of step 6 is the latest
    ("write:4", True),  # mid-write: the step-8 checkpoint is complete in its temporary file, not yet renamed
])
@pytest.mark.slow
def test_sigkill_and_resume_is_bit_identical(tmp_path, pause, left_tmp):
    """The victim stops itself at a known point and waits for a signal (no race against a timer on a fast machine);
    SIGKILL there, then --resume must finish with the uninterrupted run's numbers."""
    env = {**os.environ, "WANDB_MODE": "disabled", "OMP_NUM_THREADS": "1"}
    common = ["run", "two_site", "--preset", "smoke", "--set", "steps=12", "--set", "checkpoint_every=2"]
    ref_dir, killed_dir = tmp_path / "ref", tmp_path / "killed"
    victim = subprocess.Popen([sys.executable, str(VICTIM), *common, "--out", str(killed_dir)],
                              env={**env, "ISLANDS_KIT_TEST_PAUSE": pause}, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
    try:
        seen = []
        for line in victim.stdout:  # ends at EOF if the victim dies first
            seen.append(line)
            if line.startswith("paused at"):
                break
        assert seen and seen[-1].startswith("paused at"), "".join(seen)[-3000:]
    finally:
        victim.send_signal(signal.SIGKILL)
        victim.wait()
    assert victim.returncode == -signal.SIGKILL and not (killed_dir / "result.json").exists()
    assert bool(list(killed_dir.glob("checkpoint.pt.*.tmp"))) == left_tmp
    ref = subprocess.run([sys.executable, "-m", "islands_kit", *common, "--out", str(ref_dir)], env=env,
                         capture_output=True, text=True, timeout=600)
    assert ref.returncode == 0, ref.stdout + ref.stderr
    rc = subprocess.run([sys.executable, "-m", "islands_kit", *common, "--out", str(killed_dir), "--resume",
                         str(killed_dir)], env=env, capture_output=True, text=True, timeout=600)
    assert rc.returncode == 0, rc.stdout + rc.stderr
    assert not list(killed_dir.glob("*.tmp"))  # the killed write's temporary was swept by the resumed run
    a = json.loads((ref_dir / "result.json").read_text())
    b = json.loads((killed_dir / "result.json").read_text())
    for k in ("final_val_bpb", "val_curve", "cross_site_bytes", "sim_wall_clock_s", "compute_utilization", "ledger",
              "tokens", "routing_sync_bytes", "peak_link_bytes_per_s"):
        assert a[k] == b[k], k


def test_resume_refuses_truncated_and_mismatched(tmp_path):
    cfg = smoke("two_site", steps=4, checkpoint_every=2)
    run_experiment(cfg, tmp_path)
    ck = tmp_path / FILENAME
    good = ck.read_bytes()
    other = apply_overrides(cfg, {"sync.tau": "2"})
    with pytest.raises(ConfigError, match=r"different configuration \(first difference: sync.tau\)"):
        run_experiment(other, tmp_path / "x", resume=tmp_path)
    ck.write_bytes(good[: len(good) // 2])
    with pytest.raises(ConfigError, match="truncated or not a checkpoint"):
        run_experiment(cfg, tmp_path / "y", resume=tmp_path)
    assert not (tmp_path / "x").exists() and not (tmp_path / "y").exists()  # refused before any work


def test_cli_reports_bad_set_without_writing(tmp_path, capsys):
    out = tmp_path / "o"
    assert cli_main(["run", "two_site", "--preset", "smoke", "--set", "sync.tau=99", "--out", str(out)]) == 2
    assert "sync.tau" in capsys.readouterr().err
    assert not out.exists()


def _with_link(cfg, repair: bool):
    """Run ``cfg`` on a link that does (or does not) re-request; also return (chunks lost, holes left) in total."""
    from islands_kit.comm.link import LinkModel
    from islands_kit.comm.transport import LocalTransport

    class Counting(LinkModel):
        lost = holes = 0

        def transfer(self, *args, **kwargs):
            tr = super().transfer(*args, **kwargs)
            self.lost, self.holes = self.lost + tr.chunks_lost, self.holes + len(tr.holes)
            return tr

    link = Counting(cfg.link, seed=cfg.seed, repair=repair)
    res = run_experiment(cfg, transport=LocalTransport(len(cfg.islands), link))
    return res, (link.lost, link.holes)


@pytest.mark.slow
def test_lost_and_corrupted_chunks_cost_only_time_because_they_are_resent():
    """The link carries the payload bytes: a chunk that is neither resent nor rebuilt stays a hole (zeros) in what the
    receiver decodes. With resends the run equals the clean one; the same faults without resends change the numbers,
    so the equality holds only because every lost and corrupted chunk was re-requested."""
    clean = run_experiment(smoke("two_site", steps=10))
    lossy = smoke("two_site", steps=10, link__loss_prob=0.05, link__corrupt_prob=0.01, link__chunk_bytes=1024)
    faulty = run_experiment(lossy)
    assert faulty.final_val_bpb == clean.final_val_bpb and faulty.val_curve == clean.val_curve
    assert faulty.cross_site_bytes == clean.cross_site_bytes  # the ledger counts payloads; resends are the link's
    assert faulty.sim_wall_clock_s > clean.sim_wall_clock_s
    repaired, (lost, holes) = _with_link(lossy, repair=True)
    assert repaired.val_curve == clean.val_curve and lost > 0 and holes == 0
    unrepaired, (lost, holes) = _with_link(lossy, repair=False)
    assert lost > 0 and holes > 0
    assert unrepaired.val_curve != clean.val_curve and math.isfinite(unrepaired.final_val_bpb)  # different numbers


@pytest.mark.slow
def test_fec_alone_rebuilds_the_payload():
    """No re-requests at all: 4 parity chunks per 4 data chunks rebuild every group at 5% loss, so the run equals the
    clean one; without the parity the same losses leave holes and change the result."""
    clean = run_experiment(smoke("two_site", steps=10))
    base = dict(steps=10, link__loss_prob=0.05, link__chunk_bytes=1024, link__fec_group=4)
    with_fec, (lost, holes) = _with_link(smoke("two_site", link__fec_parity=4, **base), repair=False)
    assert lost > 0 and holes == 0  # chunks were lost, and parity rebuilt every one
    assert with_fec.val_curve == clean.val_curve and with_fec.final_val_bpb == clean.final_val_bpb
    without, (lost, holes) = _with_link(smoke("two_site", link__fec_parity=0, **base), repair=False)
    assert lost > 0 and holes > 0 and without.val_curve != clean.val_curve


def test_straggler_lowers_utilisation_by_the_step_times():
    """On a data-centre link compute dominates, so in lock-step the run goes at the straggler's pace: island 1 (3x
    slower) is busy the whole run, island 0 waits for it at every sync. Utilisation and simulated time follow from
    the step times alone: (t0 + 3 t1) / (2 · 3 t1) and steps · 3 t1 (the link's share is under a thousandth)."""
    from islands_kit.train.islands import step_seconds

    clean = run_experiment(smoke("two_site", steps=10, link__preset="intra-dc"))
    slow = run_experiment(smoke("two_site", steps=10, link__preset="intra-dc", faults__straggler_island=1,
                                faults__straggler_factor=3.0))
    cfg = smoke("two_site")
    t0, t1 = (step_seconds(ic, cfg.model, slow.params_active) for ic in cfg.islands)
    assert slow.island_busy_s == pytest.approx({0: 10 * t0, 1: 10 * 3 * t1}, rel=1e-9)
    assert slow.compute_utilization == pytest.approx((t0 + 3 * t1) / (2 * 3 * t1), rel=1e-3)
    assert slow.sim_wall_clock_s == pytest.approx(10 * 3 * t1, rel=1e-3)
    assert clean.compute_utilization == pytest.approx(1.0, rel=1e-2)


def test_attack_needs_diloco_before_any_work(tmp_path):
    with pytest.raises(ConfigError, match="faults.attack: attacks and defences need sync.strategy=diloco"):
        smoke("eight_cell", faults__attack="sign_flip")


@pytest.mark.slow
def test_resume_with_an_adversary_and_defence_is_bit_identical(tmp_path):
    cfg = smoke("two_site", steps=16, checkpoint_every=8, faults__attack="scale", faults__attack_start=4,
                faults__defense="auto", sync__diloco__average="mean")  # the mean: the rule a defence replaces
    full = run_experiment(cfg, tmp_path / "a")
    from islands_kit.run import Experiment
    from islands_kit.train.checkpoint import load_checkpoint

    exp = Experiment(cfg, tmp_path / "a")
    exp.load_state_dict(load_checkpoint(tmp_path / "a"))
    assert exp.step == 8
    again = exp.run()
    assert again.final_val_bpb == full.final_val_bpb and again.faults_report == full.faults_report
    assert full.faults_report  # the scaled update was flagged


@pytest.mark.parametrize("experiment, steps, every, overrides, held", [
    # island 1 is away for steps 5-10: the checkpoint after step 7 holds a routing message it took no part in
    ("two_site", 12, 7, dict(faults__preempt_island=1, faults__preempt_start=4, faults__preempt_steps=6), "routing"),
    # an outer result posted after step 8 lands after step 9 (tau=1): in flight at the checkpoint after step 8
    ("two_site", 12, 8, {}, "pending"),
    ("eight_cell", 12, 7, {}, "pending"),  # butterfly exchanges still in flight (merge delay)
])
@pytest.mark.slow
def test_resume_with_transfers_in_flight_is_bit_identical(tmp_path, experiment, steps, every, overrides, held):
    from islands_kit.run import Experiment
    from islands_kit.train.checkpoint import load_checkpoint

    cfg = smoke(experiment, steps=steps, checkpoint_every=every, **overrides)
    full = run_experiment(cfg, tmp_path / "a")
    exp = Experiment(cfg)
    exp.load_state_dict(load_checkpoint(tmp_path / "a"))
    assert exp.step == every
    if held == "pending":  # the checkpoint did hold a transfer in flight
        assert len(exp.strategy.pending) > 0
    else:
        assert [sorted(h.arrival) for h, _ in exp.driver.routing.in_flight] == [[0]]
    again = exp.run()
    for k in ("final_val_bpb", "val_curve", "ledger", "sim_wall_clock_s", "tokens", "island_idle_s"):
        assert again[k] == full[k], k


def test_routing_drift_diagnostics():
    """Identical replicas route identically (JS 0, top-k overlap 1); replicas trained apart drift; both figures are
    in every evaluation record of a multi-island run."""
    import torch

    from islands_kit.run import Experiment
    from islands_kit.sync.routing import js_divergence, topk_overlap

    p = torch.tensor([[0.5, 0.5, 0.0, 0.0]])
    q = torch.tensor([[0.0, 0.0, 0.5, 0.5]])
    assert float(js_divergence(p, p)) == pytest.approx(0.0, abs=1e-9)
    assert float(js_divergence(p, q)) == pytest.approx(1.0, abs=1e-6)  # disjoint support: 1 bit
    assert float(js_divergence(p, q)) == pytest.approx(float(js_divergence(q, p)))
    a = torch.tensor([[0, 1], [2, 3]])
    assert topk_overlap(a, a) == 1.0 and topk_overlap(a, a.flip(-1)) == 1.0  # order within top-k does not matter
    assert topk_overlap(a, torch.tensor([[0, 5], [6, 7]])) == 0.25 and topk_overlap(a, a + 4) == 0.0

    exp = Experiment(smoke("two_site", steps=6, sync__H=100, sync__n_fragments=1, sync__routing_sync="false"))
    start = exp.routing_drift()
    assert start == {"routing_js_bits": pytest.approx(0.0, abs=1e-9), "routing_topk_overlap": 1.0}
    for _ in range(6):  # no fragment sync within H=100, no routing sync: the replicas train apart
        exp.train_step()
    apart = exp.routing_drift()
    assert apart["routing_js_bits"] > 1e-4 and 0.0 < apart["routing_topk_overlap"] < 1.0
    res = exp.run()
    assert res.steps == 6
    rec = exp.history[-1]
    assert set(rec) >= {"routing_js_bits", "routing_topk_overlap"}
