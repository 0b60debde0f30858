"""The simulated clock of every island (``SimClock``) and an operation in flight on it (``Handle``).

Simulated clock. Each island has a clock (seconds). ``compute(island, seconds)`` advances it; a payload posted by island
``i`` leaves at ``clock[i]`` and its arrival time at each receiver comes from the link model. ``Handle.wait(island)``
advances the receiver's clock to the arrival if it is not there yet and records the wait as idle time — the only way an
island ever idles. Utilisation = busy / (busy + idle).
"""
from __future__ import annotations

import math
from typing import Any, Callable


class SimClock:
    """Per-island simulated time, with busy (compute) and idle (waiting for a payload) totals. How long a step takes
    is the caller's to say (the drivers ask the run's ``step_seconds`` hook point: an orbiting island in eclipse is
    slower, ``islands_kit/train/orbit.py``)."""

    def __init__(self, islands: list[int]) -> None:
        self.now = {i: 0.0 for i in islands}
        self.busy = {i: 0.0 for i in islands}
        self.idle = {i: 0.0 for i in islands}

    def compute(self, island: int, seconds: float) -> None:
        self.now[island] += seconds
        self.busy[island] += seconds

    def wait_until(self, island: int, t: float) -> None:
        if t > self.now[island]:
            self.idle[island] += t - self.now[island]
            self.now[island] = t

    def idle_beyond(self, island: int, busy_s: float) -> None:
        """Count ``island``'s busy time beyond ``busy_s`` as idle: its clock ran on past the work it really did (a
        lost island, mirrored from the config until the loss was noticed). ``now`` does not move."""
        extra = self.busy[island] - busy_s
        if extra > 0:
            self.busy[island] = busy_s
            self.idle[island] += extra

    def utilization(self) -> float:
        busy = sum(self.busy.values())
        total = busy + sum(self.idle.values())
        return busy / total if total > 0 else 1.0

    def state_dict(self) -> dict[str, Any]:
        return {"now": dict(self.now), "busy": dict(self.busy), "idle": dict(self.idle)}

    def load_state_dict(self, d: dict[str, Any]) -> None:
        """Restore a checkpoint's clocks; ValueError naming the entry for a time that is not finite and >= 0."""
        for f in ("now", "busy", "idle"):
            for k, v in d[f].items():
                if not (isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 0):
                    raise ValueError(f"the checkpoint's transport clock.{f}[{k!r}] must be a finite number of "
                                     f"seconds >= 0 (got {v!r})")
        self.now = {int(k): float(v) for k, v in d["now"].items()}
        self.busy = {int(k): float(v) for k, v in d["busy"].items()}
        self.idle = {int(k): float(v) for k, v in d["idle"].items()}


class Handle:
    """An operation in flight: ``wait(island)`` returns that island's result once the payloads it needs have arrived
    (advancing its simulated clock to the arrival if needed)."""

    def __init__(self, results: dict[int, Any], arrival: dict[int, float], clock: SimClock,
                 finish: Callable[[], None] | None = None) -> None:
        self._results = results
        self.arrival = arrival
        self._clock = clock
        self._finish = finish

    def wait(self, island: int) -> Any:
        if self._finish is not None:  # a real transport completes its collective on first wait
            self._finish()
            self._finish = None
        self._clock.wait_until(island, self.arrival[island])
        return self._results[island]

    def wait_result(self, island: int) -> Any:
        """The result without touching the clock (used to checkpoint an operation still in flight)."""
        if self._finish is not None:
            self._finish()
            self._finish = None
        return self._results[island]

    def state(self) -> tuple[dict[int, Any], dict[int, float]]:
        """(results, arrival) of every island taking part, for a checkpoint of an operation still in flight."""
        return {i: self.wait_result(i) for i in self.arrival}, dict(self.arrival)

    @classmethod
    def from_state(cls, results: dict[int, Any], arrival: dict[int, float], clock: SimClock) -> "Handle":
        """The operation back from :meth:`state`: completed, each island's clock still to wait for its arrival."""
        return cls({int(i): r for i, r in results.items()}, {int(i): float(a) for i, a in arrival.items()}, clock)
