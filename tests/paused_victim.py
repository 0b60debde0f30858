"""Test-only: the CLI, stopping itself at a chosen point and waiting there for a signal (SIGKILL, from the test).

``ISLANDS_KIT_TEST_PAUSE=step:K`` pauses after inner step K; ``write:K`` pauses inside the K-th checkpoint write, after
the temporary file is complete and before it replaces the previous checkpoint (a crash mid-write). The victim prints
``paused at ...`` and blocks, so the test kills it exactly there instead of racing a timer.

    ISLANDS_KIT_TEST_PAUSE=step:7 python tests/paused_victim.py run two_site --preset smoke --out DIR
"""
from __future__ import annotations

import os
import signal
import sys


def _pause(where: str) -> None:
    print(f"paused at {where}", flush=True)
    while True:  # only a signal ends this
        signal.pause()


def main() -> int:
    kind, _, k = os.environ["ISLANDS_KIT_TEST_PAUSE"].partition(":")
    at = int(k)
    if kind == "step":
        from islands_kit.run import Experiment

        plain_step = Experiment.train_step

        def train_step(self):  # type: ignore[no-untyped-def]
            out = plain_step(self)
            if self.step == at:
                _pause(f"step {at}")
            return out

        Experiment.train_step = train_step
    elif kind == "write":
        plain_replace = os.replace
        writes = [0]

        def replace(src, dst, *a, **kw):  # type: ignore[no-untyped-def]
            if os.path.basename(str(dst)) == "checkpoint.pt":
                writes[0] += 1
                if writes[0] == at:
                    _pause(f"checkpoint write {at} ({src} complete, not yet renamed)")
            return plain_replace(src, dst, *a, **kw)

        os.replace = replace
    else:
        raise SystemExit(f"ISLANDS_KIT_TEST_PAUSE: must be step:K or write:K (got {kind}:{k})")
    from islands_kit.cli import main as cli_main

    return cli_main(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
