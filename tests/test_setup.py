"""scripts/setup.sh (``make install``) decides what to install: the CPU torch build from the PyTorch CPU index when it
answers, the plain pin with a one-line note when it does not (within seconds, even when the index never answers), and
the Triton kernels only where ``nvidia-smi`` finds a GPU. Run with DRY_RUN=1: the decisions, no installs."""
from __future__ import annotations

import http.server
import os
import platform
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SETUP = ROOT / "scripts" / "setup.sh"

pytestmark = pytest.mark.skipif(platform.system() != "Linux", reason="the CPU wheel index is tried on Linux only")


def setup_plan(tmp_path: Path, index: str, gpu: bool, **env: str) -> tuple[str, float]:
    """setup.sh's dry-run output and how long it took, with a stub nvidia-smi that finds a GPU or none."""
    stubs = tmp_path / "stubs"
    stubs.mkdir(exist_ok=True)
    smi = stubs / "nvidia-smi"
    smi.write_text(f"#!/bin/sh\nexit {0 if gpu else 1}\n")
    smi.chmod(0o755)
    full = {**os.environ, "PATH": f"{stubs}:{os.environ['PATH']}", "DRY_RUN": "1", "PYTHON": sys.executable,
            "VENV": str(tmp_path / "venv"), "TORCH_CPU_INDEX": index, "PROBE_TIMEOUT_S": "1", **env}
    t0 = time.monotonic()
    out = subprocess.run(["bash", str(SETUP)], cwd=ROOT, env=full, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout, time.monotonic() - t0


def pip_lines(plan: str) -> list[str]:
    return [line for line in plan.splitlines() if line.startswith("+ ")]


@pytest.fixture
def index_server(tmp_path):
    """A local stand-in for the CPU wheel index (it serves a ``torch/`` page)."""
    (tmp_path / "index" / "torch").mkdir(parents=True)
    (tmp_path / "index" / "torch" / "index.html").write_text("<html></html>")
    handler = lambda *a, **k: http.server.SimpleHTTPRequestHandler(*a, directory=str(tmp_path / "index"), **k)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_reachable_cpu_index_supplies_torch_and_no_gpu_means_no_kernels(tmp_path, index_server):
    plan, _ = setup_plan(tmp_path, index_server, gpu=False)
    lines = pip_lines(plan)
    (torch_line,) = [line for line in lines if "torch==" in line]
    assert f"--index-url {index_server}" in torch_line
    assert any(line.endswith("-e .[dev,orbit,cluster]") for line in lines) and "kernels" not in plan
    assert "not reachable" not in plan


@pytest.mark.slow  # runs scripts/setup.sh
def test_unreachable_index_falls_back_to_the_pin_with_a_note_in_seconds(tmp_path):
    with socket.socket() as s:  # accepts connections (the kernel's backlog) but never answers: a hung index
        s.bind(("127.0.0.1", 0))
        s.listen(8)
        plan, took = setup_plan(tmp_path, f"http://127.0.0.1:{s.getsockname()[1]}", gpu=False)
    assert took < 10, f"the fallback waited {took:.1f}s"
    notes = [line for line in plan.splitlines() if "not reachable" in line]
    assert len(notes) == 1 and "installing torch==2.13.0 from the default index" in notes[0]
    (torch_line,) = [line for line in pip_lines(plan) if "torch==" in line]
    assert "--index-url" not in torch_line


def test_a_gpu_gets_the_default_torch_build_and_the_kernels(tmp_path):
    plan, _ = setup_plan(tmp_path, "http://127.0.0.1:9", gpu=True)
    (torch_line,) = [line for line in pip_lines(plan) if "torch==" in line]
    assert "--index-url" not in torch_line and "not reachable" not in plan  # the CPU index is not even tried
    assert any(line.endswith("-e .[dev,orbit,cluster,kernels]") for line in pip_lines(plan))


def test_torch_build_setting_is_checked(tmp_path):
    with pytest.raises(AssertionError, match="TORCH_BUILD must be auto, cpu or default"):
        setup_plan(tmp_path, "http://127.0.0.1:9", gpu=False, TORCH_BUILD="gpu")
