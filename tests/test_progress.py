"""islands_kit.train.progress: what the lines say (step, tokens, tok/s, ETA, latest eval bpb), when they are written (a new
line off a terminal, one line rewritten in place on it), and that quiet means silent. A real run prints them too."""
from __future__ import annotations

import io
import re

import pytest

from islands_kit.config import apply_overrides
from islands_kit.config.presets import get_preset
from islands_kit.run import run_experiment
from islands_kit.train import progress as progress_mod
from islands_kit.train.progress import Progress, format_duration


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def clock(monkeypatch):
    c = Clock()
    monkeypatch.setattr(progress_mod.time, "perf_counter", c)
    monkeypatch.delenv("ISLANDS_KIT_QUIET", raising=False)
    return c


def test_lines_off_a_terminal_say_step_tokens_rate_eta_and_bpb(clock):
    out = io.StringIO()
    p = Progress("two_site s0", total_steps=100, tokens_per_step=1000, stream=out, tty=False, line_interval_s=1e9)
    p.start("preset demo")
    for step in range(1, 21):
        clock.t += 0.5  # 0.5 s per step: 2000 tokens/s
        p.update(step, step * 1000, 2.5)
    p.eval(20, 3.14159)
    lines = out.getvalue().splitlines()
    assert lines[0] == "[two_site s0] start: 100 steps x 1,000 tokens | preset demo"
    # one line per tenth of the run (steps 10 and 20) plus the first update, and one at the evaluation
    assert [int(re.search(r"step (\d+)/", x).group(1)) for x in lines[1:]] == [1, 10, 20, 20]
    # one unit for both scores, bits per byte (a train/val gap then reads as one), the loss's nats beside it
    assert lines[-1] == ("[two_site s0] step 20/100 (20%) | 20.0k tokens | 2,000 tok/s | ETA 40.0s | "
                         "train 3.607 bpb (2.500 nats) | val 3.142 bpb @20")
    clock.t += 40
    p.end("final val bpb 3.0000")
    assert out.getvalue().splitlines()[-1] == "[two_site s0] done in 50.0s: final val bpb 3.0000"


def test_an_evaluation_step_gets_one_line(clock):
    out = io.StringIO()
    p = Progress("x", total_steps=20, tokens_per_step=10, stream=out, tty=False, line_interval_s=1e9, eval_every=10)
    for step in range(1, 21):
        clock.t += 1
        p.update(step, step * 10, 1.0)
        if step % 10 == 0:
            p.eval(step, 2.0 - step / 100)
    steps = [re.search(r"step (\d+)/20 .*", x).group(0) for x in out.getvalue().splitlines()]
    assert [s.split("/")[0] for s in steps] == ["step 1", "step 2", "step 4", "step 6", "step 8", "step 10", "step 12",
                                                "step 14", "step 16", "step 18", "step 20"]
    assert steps[5].endswith("val 1.900 bpb @10") and steps[-1].endswith("val 1.800 bpb @20")


def test_a_terminal_gets_one_line_rewritten_in_place(clock):
    out = io.StringIO()
    p = Progress("b", total_steps=10, tokens_per_step=10, stream=out, tty=True, tty_interval_s=1.0)
    p.start()
    for step in range(1, 11):
        clock.t += 0.25
        p.update(step, step * 10, 1.0)
    text = out.getvalue()
    assert text.count("\n") == 1  # only the start line ends a line
    assert text.count("\r") == 4  # steps 1 (first), 5, 9 (one second apart) and 10 (the last)
    p.end("ok")
    assert out.getvalue().endswith("\r\x1b[K[b] done in 2.5s: ok\n")  # the in-place line is cleared first


def test_quiet_prints_nothing(clock, monkeypatch):
    out = io.StringIO()
    p = Progress("x", 10, 10, quiet=True, stream=out)
    p.start()
    p.update(10, 100, 1.0)
    p.eval(10, 2.0)
    p.end("done")
    assert out.getvalue() == ""
    monkeypatch.setenv("ISLANDS_KIT_QUIET", "1")  # CI
    p = Progress("x", 10, 10, stream=out, tty=False)
    p.start()
    p.update(10, 100, 1.0)
    assert out.getvalue() == ""


def test_resumed_run_measures_only_its_own_steps(clock):
    p = Progress("x", 100, 10, start_step=60, stream=io.StringIO(), tty=False)
    p.start()
    clock.t += 10
    p.update(70, 700, 1.0)
    assert p.tokens_per_s() == pytest.approx(10.0) and p.eta_s() == pytest.approx(30.0)


def test_format_duration():
    assert [format_duration(s) for s in (3.21, 75.2, 3725, float("nan"))] == ["3.2s", "1m15s", "1h02m", "?"]


@pytest.mark.slow
def test_a_run_prints_start_progress_and_end(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("ISLANDS_KIT_QUIET", raising=False)
    cfg = apply_overrides(get_preset("baseline", "smoke"), {"threads": 1, "progress": True, "steps": 12})
    res = run_experiment(cfg, tmp_path)
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith(f"[baseline s0] start: 12 steps x 1,280 tokens | preset smoke, seed 0, corpus "
                               f"shakespeare -> {tmp_path}")
    assert any(x.startswith("[baseline s0] step 12/12 (100%) | 15.4k tokens |") for x in lines)
    assert lines[-2].endswith(f"final val bpb {res['final_val_bpb']:.4f} (xz on the same bytes "
                              f"{res['compressor_bpb']['xz']:.3f})")
    assert lines[-1].startswith("wandb: off")  # then what wandb did, in one line
    run_experiment(apply_overrides(cfg, {"progress": False}), tmp_path / "q")
    assert capsys.readouterr().out.splitlines() == [lines[-1]]  # quiet: no progress, the wandb line still
