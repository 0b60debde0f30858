"""The kit as a user installs it: a wheel built from this checkout, installed into a fresh virtual environment, runs
``islands-kit notebook`` on the smoke preset from an unrelated folder.

To stay fast and offline the wheel is installed with ``--no-deps`` and the new environment borrows the running
interpreter's site-packages (torch, papermill, ...) through a ``.pth`` line appended after its own site-packages, so
``islands_kit`` itself comes from the wheel (asserted) and nothing is downloaded.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # every test here starts processes

ROOT = Path(__file__).resolve().parent.parent
SOURCES = ("pyproject.toml", "setup.py", "MANIFEST.in", "README.md", "islands_kit", "notebooks", "data_cards", "benchmarks")


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(wheel path, venv bin folder, environment for its commands) of a wheel built and installed once."""
    tmp = tmp_path_factory.mktemp("install")
    src = tmp / "src"
    for name in SOURCES:  # a clean copy: building in place would leave build/ and *.egg-info in the checkout
        s = ROOT / name
        if s.is_dir():
            shutil.copytree(s, src / name, ignore=shutil.ignore_patterns("__pycache__", "_resources", "*.pyc"))
        else:
            src.mkdir(exist_ok=True)
            shutil.copy2(s, src / name)
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
    subprocess.run(pip + ["wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp / "dist"), str(src)],
                   check=True, capture_output=True)
    (wheel,) = (tmp / "dist").glob("islands_kit-*.whl")
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    py = venv / "bin" / "python"
    subprocess.run(pip + ["--python", str(py), "install", "--no-deps", "--no-index", "-q", str(wheel)], check=True,
                   capture_output=True)
    site = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], check=True,
                          capture_output=True, text=True).stdout.strip()
    Path(site, "_islands_kit_test_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(WANDB_MODE="disabled", OMP_NUM_THREADS="1")
    return wheel, venv / "bin", env


def test_wheel_carries_the_notebooks_and_data_cards(installed):
    wheel, _, _ = installed
    names = set(zipfile.ZipFile(wheel).namelist())
    for nb in (ROOT / "notebooks").glob("*.ipynb"):
        assert f"islands_kit/_resources/notebooks/{nb.name}" in names
    for card in (ROOT / "data_cards").glob("*.md"):
        assert f"islands_kit/_resources/data_cards/{card.name}" in names
    assert not any(n.startswith("islands_kit/_resources/notebooks/") and n.endswith(".py") for n in names)
    frontiers = sorted((ROOT / "benchmarks").glob("frontier-*.json"))
    assert frontiers and all(f"islands_kit/_resources/benchmarks/{f.name}" in names for f in frontiers)
    assert not any(n.startswith("islands_kit/_resources/benchmarks/") and n.endswith(".py") for n in names)
    for sets in (ROOT / "islands_kit" / "orbital").glob("*.tle"):  # the shipped element sets, found by name
        assert f"islands_kit/orbital/{sets.name}" in names


def test_installed_wheel_finds_the_frontiers_the_notebooks_draw(installed, tmp_path):
    _, bin_dir, env = installed
    code = ("from islands_kit.notebooks import show_frontier\n"
            "import sys\n"
            "sys.exit(0 if show_frontier('benchmarks/frontier-demo.json', 'out') and "
            "show_frontier('benchmarks/frontier-eight_cell-demo.json', 'out8', 'eight_cell') else 1)")
    run = subprocess.run([str(bin_dir / "python"), "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                         check=False)
    assert run.returncode == 0, run.stdout + run.stderr[-2000:]
    assert (tmp_path / "out" / "frontier.png").is_file() and (tmp_path / "out8" / "frontier.png").is_file()


def test_installed_wheel_runs_a_notebook_outside_the_checkout(installed, tmp_path):
    _, bin_dir, env = installed
    where = subprocess.run([str(bin_dir / "python"), "-c", "import islands_kit; print(islands_kit.__file__)"],
                           cwd=tmp_path, env=env, check=True, capture_output=True, text=True).stdout
    assert where.startswith(str(bin_dir.parent)), where  # the wheel's copy, not the checkout's
    cmd = str(bin_dir / "islands-kit")
    bad = subprocess.run([cmd, "notebook", "nope"], cwd=tmp_path, env=env, capture_output=True, text=True,
                         check=False)
    valid = "(valid: baseline, compare, eight_cell, hierarchical, orbital, poisoned_island, scaling, tour, two_site)"
    assert bad.returncode == 2 and valid in bad.stderr
    run = subprocess.run([cmd, "notebook", "baseline", "-p", "preset", "smoke", "-p", "wandb_mode", "disabled",
                          "--out", "nb"], cwd=tmp_path, env=env, capture_output=True, text=True, check=False)
    assert run.returncode == 0, run.stderr[-3000:]
    res = json.loads((tmp_path / "nb" / "result.json").read_text())
    assert res["experiment"] == "baseline" and res["preset"] == "smoke" and res["final_val_bpb"] > 0
    assert (tmp_path / "nb" / "baseline.ipynb").is_file() and (tmp_path / "nb" / "bpb_vs_tokens.png").is_file()
