"""The scaling notebook at smoke makes its two studies' runs in its own process: each run ends with the same
"wandb: off (...)" line, which the notebook printed 24 times; it says each distinct line once."""
from __future__ import annotations

from pathlib import Path

from islands_kit.scaling import trend


def test_the_smoke_trend_says_each_line_its_runs_print_once(monkeypatch, tmp_path: Path) -> None:
    def fake_run_points(study, root, jobs, say, execute_run):
        for _ in range(12):  # what 12 smoke runs print, each at its end
            print("wandb: off (the smoke preset sets wandb_mode=disabled; --set wandb_mode=offline logs the run)")
        print(f"{study.name}: a line of its own")
        return [object()] * 12

    monkeypatch.setattr(trend, "run_points", fake_run_points)
    monkeypatch.setattr(trend, "build_trend", lambda studies, roots, **kw: {"studies": [s.name for s in studies]})
    said: list[str] = []
    doc = trend.notebook_trend("smoke", tmp_path, say=said.append)
    assert len(doc["studies"]) == 2
    assert sum(line.startswith("wandb: off") for line in said) == 1
    assert [line for line in said if "a line of its own" in line] == [f"{s}: a line of its own" for s in doc["studies"]]
    assert [line for line in said if "runs made" in line] == [f"{s}: 12 runs made, the rest finished before"
                                                               for s in doc["studies"]]
