"""SIGTERM to a running ``islands-kit notebook compare`` (what ``kill`` and a CI timeout send) ends every process it
started (the compare kernel, the runner processes, their kernels: each kernel in a session of its own) and prints
one line, no traceback. Before, three runners and three kernels went on training under PID 1."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from islands_kit.notebooks.stopping import _alive, end_descendants

ROOT = Path(__file__).resolve().parent.parent


def _under(p: psutil.Process, folder: Path) -> bool:
    try:
        return Path(p.cwd()).resolve().is_relative_to(folder)
    except (psutil.NoSuchProcess, psutil.AccessDenied, FileNotFoundError):
        return False


def test_end_descendants_ends_a_grandchild_in_a_session_of_its_own():
    """The shape that escaped a plain kill: a process that starts another with start_new_session (as jupyter_client
    starts a kernel); what lies below the root ends, across the session, and the count says so."""
    code = ("import subprocess, sys, time\n"
            "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'], start_new_session=True)\n"
            "time.sleep(120)\n")
    child = subprocess.Popen([sys.executable, "-c", code])
    try:
        deadline = time.monotonic() + 30
        while len(psutil.Process(child.pid).children()) < 1 and time.monotonic() < deadline:
            time.sleep(0.1)
        grandchild = psutil.Process(child.pid).children()[0]
        assert os.getsid(grandchild.pid) != os.getsid(child.pid)
        assert end_descendants(psutil.Process(child.pid)) == 1
        assert not _alive(grandchild) and child.poll() is None  # only what lies below the root ends
    finally:
        if child.poll() is None:
            child.kill()


@pytest.mark.slow
def test_sigterm_to_a_running_compare_notebook_ends_every_process_it_started(tmp_path):
    out = tmp_path / "demo"
    env = dict(os.environ, PYTHONPATH=str(ROOT), WANDB_MODE="disabled", OMP_NUM_THREADS="1")
    cmd = [sys.executable, "-m", "islands_kit", "notebook", "compare", "-p", "preset", "smoke", "-p", "steps", "100000",
           "-p", "jobs", "2", "-p", "experiments", '["baseline", "two_site"]', "--out", str(out)]
    top = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen: dict[int, psutil.Process] = {}
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and top.poll() is None:  # until both experiments' kernels train
            for p in psutil.Process(top.pid).children(recursive=True):
                seen.setdefault(p.pid, p)
            if sum(_under(p, out / e) for p in seen.values() for e in ("baseline", "two_site")) >= 2:
                break
            time.sleep(0.5)
        assert top.poll() is None, top.communicate()[1][-2000:]
        assert sum(_under(p, out / e) for p in seen.values() for e in ("baseline", "two_site")) >= 2
        for p in psutil.Process(top.pid).children(recursive=True):
            seen.setdefault(p.pid, p)
        top.send_signal(signal.SIGTERM)
        stdout, stderr = top.communicate(timeout=60)
    finally:
        if top.poll() is None:
            top.kill()
    time.sleep(1)  # what a plain kill orphans goes on running: give it a moment to show
    alive = [p for p in seen.values() if _alive(p)]
    strays = [p for p in psutil.process_iter() if _under(p, tmp_path) and _alive(p)]
    for p in alive + strays:  # leave the machine clean even when an assertion below fails
        p.kill()
    assert top.returncode == 128 + signal.SIGTERM
    assert alive == [] and strays == []
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert "Traceback" not in stderr + stdout
    assert lines[-1].startswith("islands-kit notebook: stopped by SIGTERM; ended the ")
    assert len([line for line in lines if "stopped by" in line]) == 1
