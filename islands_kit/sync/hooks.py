"""The hook points of a run, in one place: where a feature attaches instead of patching an object.

A feature (``train/features.py`` lists them: faults, attacks and defences; a bit flip in a replica; the orbit's
eclipses and contact report) registers functions on the run's ``Hooks`` with ``on(point, fn)`` before training
starts; the run calls each point where it stands, and a point nobody registered costs nothing and changes nothing.

    point             called by                                    fn(...) -> what it returns
    step_seconds      the drivers, before each inner step          (island, start_s, seconds) -> that step's seconds
    after_step        the training loop, after each global step    (step, {island: replica}) -> None
    outgoing          a strategy with an aggregation step, on each  (step, island, fragment, Δ) -> the Δ sent
                      island's outer gradient before encoding
    outgoing_payload  the same, on its encoded bytes               (step, island, fragment, payload) -> the payload
    merge             the lock-step merge, in place of its average  (step, fragment, [(island, weight, Δ)]) -> Δ̄
                      (at most one; the islands then all-gather)
    screen            the decoupled synchroniser, on a round's      (step, fragment, [(island, weight, Δ)])
                      fresh outer gradients before it merges          -> ({island: why dropped}, {island: why held})
    rescreen          the same, on a contribution held earlier      (step, fragment, (island, weight, Δ)) -> the same
                      (``sync/quorum.py``), at each later round
    not_merged        the same, on one still held at the end        (step, fragment, (island, weight, Δ)) -> None
    result            the run, when it writes result.json          (link timeline, simulated span s) -> fields

Several functions on one point run in registration order, each on what the one before returned (``step_seconds``,
``outgoing``, ``outgoing_payload``) or side by side (``after_step``, ``screen``, ``rescreen``, ``not_merged``,
``result``: their dicts merged).
``state`` names what a checkpoint must carry for a feature (an object with ``state_dict`` / ``load_state_dict``, or
None when the feature is off: the key is written either way).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

if TYPE_CHECKING:
    import torch
    from torch import nn

    from islands_kit.comm.codecs import Payload

POINTS = ("step_seconds", "after_step", "outgoing", "outgoing_payload", "merge", "screen", "rescreen", "not_merged",
          "result")
Verdicts = tuple[dict[int, str], dict[int, str]]  # a screen's ({island: why dropped}, {island: why held})
SINGLE = ("merge",)  # a point that replaces what the run would do: one function at most


class Hooks:
    """The functions registered on each point of one run (module doc)."""

    def __init__(self) -> None:
        self._fns: dict[str, list[Callable[..., Any]]] = {p: [] for p in POINTS}
        self.state: dict[str, Any] = {}  # checkpoint key -> the feature's stateful part (or None)

    def on(self, point: str, fn: Callable[..., Any]) -> None:
        """Register ``fn`` on ``point`` (a ValueError naming the points for an unknown one, or a second ``merge``)."""
        if point not in self._fns:
            raise ValueError(f"hook point {point!r}: must be one of {'|'.join(POINTS)}")
        if point in SINGLE and self._fns[point]:
            raise ValueError(f"hook point {point!r}: takes one function, and one is registered")
        self._fns[point].append(fn)

    def has(self, point: str) -> bool:
        return bool(self._fns[point])

    # -- the calls, one per point ---------------------------------------------------------------------------------
    def step_seconds(self, island: int, start_s: float, seconds: float) -> float:
        for fn in self._fns["step_seconds"]:
            seconds = fn(island, start_s, seconds)
        return seconds

    def after_step(self, step: int, models: Mapping[int, nn.Module]) -> None:
        for fn in self._fns["after_step"]:
            fn(step, models)

    def outgoing(self, step: int, island: int, fragment: int, delta: torch.Tensor) -> torch.Tensor:
        for fn in self._fns["outgoing"]:
            delta = fn(step, island, fragment, delta)
        return delta

    def outgoing_payload(self, step: int, island: int, fragment: int, payload: Payload) -> Payload:
        for fn in self._fns["outgoing_payload"]:
            payload = fn(step, island, fragment, payload)
        return payload

    def merge(self, step: int, fragment: int, gathered: Sequence[tuple[int, float, torch.Tensor]]) -> torch.Tensor:
        (fn,) = self._fns["merge"]
        merged: torch.Tensor = fn(step, fragment, gathered)
        return merged

    def screen(self, step: int, fragment: int, fresh: Sequence[tuple[int, float, torch.Tensor]]) -> Verdicts:
        return self._verdicts([fn(step, fragment, fresh) for fn in self._fns["screen"]])

    def rescreen(self, step: int, fragment: int, held: tuple[int, float, torch.Tensor]) -> Verdicts:
        return self._verdicts([fn(step, fragment, held) for fn in self._fns["rescreen"]])

    def not_merged(self, step: int, fragment: int, held: tuple[int, float, torch.Tensor]) -> None:
        for fn in self._fns["not_merged"]:
            fn(step, fragment, held)

    @staticmethod
    def _verdicts(each: list[Verdicts]) -> Verdicts:
        drop: dict[int, str] = {}
        hold: dict[int, str] = {}
        for d, h in each:
            drop.update(d)
            hold.update(h)
        return drop, {i: why for i, why in hold.items() if i not in drop}

    def result(self, timeline: Sequence[Sequence[Any]], span_s: float) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for fn in self._fns["result"]:
            out.update(fn(timeline, span_s))
        return out
