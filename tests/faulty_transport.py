"""Test-only fault injection for torch.distributed runs (kept out of the production transport).

``FaultyTransport`` is a ``TorchDistTransport`` whose rank ``ISLANDS_KIT_TEST_DIE_RANK`` (default: the last rank)
vanishes silently (exit code 0, like a machine that drops off the network) at its ``ISLANDS_KIT_TEST_DIE_AT_STEP``-th
inner step, or with ``ISLANDS_KIT_TEST_DIE_MODE=hang`` stays alive, sockets open, without ever answering again (the
survivors then fail after the timeout). Run as a script it is the CLI with this transport:

    torchrun --nproc-per-node 2 tests/faulty_transport.py run two_site --preset smoke --out DIR
"""
from __future__ import annotations

import os
import sys
import time

from islands_kit.comm.torch_dist import TorchDistTransport
from islands_kit.config import ConfigError


class FaultyTransport(TorchDistTransport):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        die = os.environ.get("ISLANDS_KIT_TEST_DIE_AT_STEP", "")
        self.die_at = int(die) if die else 0
        self.die_rank = int(os.environ.get("ISLANDS_KIT_TEST_DIE_RANK", str(self.world_size - 1)))
        self.die_mode = os.environ.get("ISLANDS_KIT_TEST_DIE_MODE", "exit")
        if self.die_mode not in ("exit", "hang"):
            raise ConfigError(f"ISLANDS_KIT_TEST_DIE_MODE: must be exit or hang (got {self.die_mode!r})")
        self.steps = 0  # compute() calls: the island's inner steps in this process

    def compute(self, island: int, seconds: float) -> None:
        super().compute(island, seconds)
        self.steps += 1
        if self.die_at and self.steps == self.die_at and self.rank == self.die_rank:
            verb = "vanishes" if self.die_mode == "exit" else "hangs"
            sys.stderr.write(f"islands_kit: fault injection: rank {self.rank} {verb} at step {self.steps}\n")
            sys.stderr.flush()
            if self.die_mode == "hang":  # alive, sockets open, never answering: only the timeout can catch it
                while True:
                    time.sleep(3600)
            os._exit(0)  # silently: no error, no goodbye


if __name__ == "__main__":
    import islands_kit.comm.distributed as distributed
    from islands_kit.cli import main

    plain = distributed.make_transport
    distributed.make_transport = lambda cfg, link: plain(cfg, link, FaultyTransport)  # the CLI imports it at call time
    sys.exit(main(sys.argv[1:]))
