"""``make demo`` twice would retrain over the first demo's runs without asking (15-20 minutes, the results replaced),
while ``islands-kit run`` refuses a finished folder: the demo refuses an OUT holding finished runs and names the two
ways on (FORCE=1, or a new OUT)."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="no make on this machine")


def _make(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    venv = tmp_path / "venv"  # never built: -o keeps make from running the set-up for it
    return subprocess.run(["make", "-s", f"VENV={venv}", "-o", f"{venv}/.installed", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)


def test_make_demo_refuses_a_folder_with_finished_runs_and_names_both_ways(tmp_path):
    out = tmp_path / "demo"
    (out / "two_site").mkdir(parents=True)
    (out / "two_site" / "result.json").write_text("{}")
    done = _make(tmp_path, "demo", f"OUT={out}")
    assert done.returncode != 0
    assert f"demo: {out} holds finished runs" in done.stderr
    assert "make demo FORCE=1" in done.stderr and "make demo OUT=" in done.stderr
    assert "islands-kit" not in done.stdout + done.stderr.replace("make demo", "")  # nothing ran: no notebook started
    assert sorted(p.name for p in out.iterdir()) == ["two_site"]


def test_make_demo_goes_on_with_force_or_a_new_folder_or_a_folder_without_results(tmp_path):
    out = tmp_path / "demo"
    (out / "baseline").mkdir(parents=True)
    assert _make(tmp_path, "demo-guard", f"OUT={out}").returncode == 0  # a folder without a result.json (a run cut short)
    (out / "baseline" / "result.json").write_text("{}")
    assert _make(tmp_path, "demo-guard", f"OUT={out}").returncode == 2
    assert _make(tmp_path, "demo-guard", f"OUT={out}", "FORCE=1").returncode == 0
    assert _make(tmp_path, "demo-guard", f"OUT={tmp_path / 'demo-2'}").returncode == 0


def test_make_demo_prints_the_table_once(tmp_path):
    """The notebook prints the table, its legend and the wandb lines; the demo then ran `islands-kit compare`, which
    printed them all again (the second copy narrower). Now it only says where they are kept."""
    done = _make(tmp_path, "-n", "demo", f"OUT={tmp_path / 'demo'}")
    commands = done.stdout.replace("\\\n", " ").splitlines()  # make -n prints the recipe, continuations joined here
    segments = [seg.strip() for c in commands for seg in c.split(";")]
    ran = [seg for seg in segments if "/islands-kit " in seg and not seg.startswith(("echo", "#", '"'))]
    assert len(ran) == 1 and "islands-kit notebook compare" in ran[0], commands
