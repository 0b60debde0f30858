"""The same contact schedule decides delivery under torch.distributed as in the simulator: a ground station and a
satellite (link.schedule=orbit, one pass or so a day at Redu) exchange payloads over two gloo ranks, posted at
times inside and between passes; every arrival, clock and received tensor equals ``LocalTransport``'s to the bit."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from ports import free_port

from islands_kit.comm.codecs import get_codec
from islands_kit.comm.link import LinkModel, link_config
from islands_kit.comm.transport import LocalTransport, Transport
from islands_kit.config import LinkConfig, OrbitConfig

STEPS = [1.0, 9000.0, 2500.0, 600.0, 40000.0]  # compute before each exchange: into, between and across passes


def orbit_link() -> LinkConfig:
    return link_config("leo-orbit", orbit=OrbitConfig(n_satellites=1, horizon_s=43200.0, time_compression=2.0))


def script(tr: Transport, island: int | None) -> list[dict]:
    """The exchanges both transports run; ``island`` None: every island in this process."""
    codec = get_codec("int8")
    out = []
    islands = [0, 1] if island is None else [island]
    for k, dt in enumerate(STEPS):
        for i in islands:
            tr.clock.compute(i, dt)
        payloads = {i: codec.encode(torch.linspace(-1.0, 1.0, 300_000) * (i + k + 1)) for i in islands}
        h = tr.send_recv("model", payloads, {0: 1, 1: 0})
        for i in islands:
            got = h.wait(i)
            out.append({"island": i, "now": tr.clock.now[i], "arrival": h.arrival[i],
                        "sum": float(got.double().sum()), "idle": tr.clock.idle[i]})
    return out


WORKER = """
import json, sys
sys.path.insert(0, sys.argv[2])
from test_contact_dist import orbit_link, script
from islands_kit.comm.layout import RankLayout
from islands_kit.comm.link import LinkModel
from islands_kit.comm.torch_dist import TorchDistTransport
from islands_kit.comm.distributed import init_from_env, shutdown
rank, world = init_from_env("gloo")
tr = TorchDistTransport(RankLayout((1, 1)), LinkModel(orbit_link(), seed=5))
rows = script(tr, rank)
json.dump(rows, open(f"{sys.argv[1]}/rank{rank}.json", "w"))
shutdown()
"""


@pytest.mark.slow
def test_torch_dist_delivers_on_the_simulators_contact_schedule(tmp_path: Path) -> None:
    sim = LocalTransport(2, LinkModel(orbit_link(), seed=5))
    want = script(sim, None)
    assert sum(r["idle"] for r in want) > 1000.0  # the islands really waited for passes
    path = tmp_path / "worker.py"
    path.write_text(WORKER)
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), WORLD_SIZE="2",
               GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join([str(Path(__file__).resolve().parent.parent), os.environ.get("PYTHONPATH", "")]))
    procs = [subprocess.Popen([sys.executable, str(path), str(tmp_path), str(Path(__file__).parent)],
                              env=dict(env, RANK=str(r), LOCAL_RANK=str(r)), stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT) for r in range(2)]
    try:
        outs = [p.communicate(timeout=240)[0].decode() for p in procs]  # generous: a loaded 2-core box
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    assert all(p.returncode == 0 for p in procs), "\n".join(outs)
    got = [row for r in range(2) for row in json.loads((tmp_path / f"rank{r}.json").read_text())]
    key = lambda row: (row["island"], row["now"])  # noqa: E731
    assert sorted(got, key=key) == sorted(want, key=key)
