"""Shared pieces of the sync strategies: fragments of a model, flattening, transfers in flight, and the strategy
interface.

A strategy sees the replicas of the islands this process holds (``models``: island id -> module) and a ``Transport``.
It knows no experiment loop. Two kinds, each driven by its own driver (``train/drivers.py``):

* ``LockstepStrategy``: every island takes inner step t together; the driver calls ``reduce_gradients`` after
  backward, ``after_inner_step`` after every inner optimizer step and ``finalize`` at the end;
* ``ClockedStrategy``: every island steps on its own simulated clock; the driver calls ``land`` before each of an
  island's inner steps, ``island_step_done`` after it, ``after_tick`` at the end of every tick of the global schedule
  and ``finalize`` at the end.
"""
from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import Any, Iterator

import torch
from torch import nn

from islands_kit.comm.transport import Handle, SimClock, Transport

INPUT_SIDE = "tok_emb"  # the model's parameters outside the blocks that sit at the input end (the token embedding)


def strided_fragments(block_names: list[list[str]], extra: dict[str, list[str]], n_fragments: int) -> list[list[str]]:
    """Streaming DiLoCo's strided assignment: block l goes to fragment l mod P, so every fragment spans the depth of
    the network (the paper found strided better than sequential). The token embedding (``extra["tok_emb"]``) joins
    fragment 0 and everything else outside the blocks (final norm + output head) joins fragment P - 1, so the two ends
    of the network sync at different times too (tests/test_streaming.py checks membership for every preset model)."""
    P = n_fragments
    if P > len(block_names):
        raise ValueError(f"sync.n_fragments: must be <= the number of transformer blocks ({len(block_names)}) (got {P})")
    frags: list[list[str]] = [[] for _ in range(P)]
    for l, names in enumerate(block_names):
        frags[l % P].extend(names)
    for key, names in extra.items():
        frags[0 if key == INPUT_SIDE else P - 1].extend(names)
    return frags


class FragmentView:
    """The parameters of one fragment of one replica, flattened to a single fp32 vector (on the replica's device)
    and written back."""

    def __init__(self, model: nn.Module, names: list[str]) -> None:
        params = dict(model.named_parameters())
        missing = [n for n in names if n not in params]
        if missing:
            raise KeyError(f"fragment names not in model: {missing[:3]}")
        self.params = [params[n] for n in names]
        self.device = self.params[0].device if self.params else torch.device("cpu")
        self.numel = sum(p.numel() for p in self.params)

    @torch.no_grad()
    def flat(self) -> torch.Tensor:
        return torch.cat([p.detach().reshape(-1).float() for p in self.params])

    @torch.no_grad()
    def assign(self, flat: torch.Tensor) -> None:
        off = 0
        for p in self.params:
            n = p.numel()
            p.copy_(flat[off:off + n].view_as(p))
            off += n

    @torch.no_grad()
    def flat_grad(self, out: torch.Tensor | None = None) -> torch.Tensor:
        """The gradients as one fp32 vector (a missing gradient reads as zeros), written into ``out`` when given: a
        buffer reused every step spares allocating (and page-faulting) a fresh model-sized vector."""
        return torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1).float()
                          for p in self.params], out=out)

    @torch.no_grad()
    def assign_grad(self, flat: torch.Tensor) -> None:
        """Set the gradients to ``flat``'s values, copied into the existing gradient tensors (new ones only where a
        parameter has none), so the replica never shares storage with ``flat`` or with another replica."""
        off = 0
        for p in self.params:
            n = p.numel()
            src = flat[off:off + n].view_as(p)
            if p.grad is None:
                p.grad = src.clone()
            else:
                p.grad.copy_(src)
            off += n


@dataclass
class Pending:
    """One transfer in flight: posted after inner step ``sent_at``, applied after inner step ``apply_at``."""

    apply_at: int
    fragment: int
    handle: Handle
    sent_at: int = 0


class PendingQueue:
    """The transfers a strategy has posted and not yet applied (DiLoCo's outer results, butterfly's exchanges).

    ``due(step)`` hands back, in posting order, those whose ``apply_at`` has come; ``drain()`` all of them, in the
    order they would have landed (``apply_at``, then fragment). The state is plain data for checkpoints: each entry
    as ``(apply_at, fragment, results, arrival, sent_at)`` with the results of every island taking part."""

    def __init__(self) -> None:
        self._items: list[Pending] = []

    def push(self, apply_at: int, fragment: int, handle: Handle, sent_at: int = 0) -> None:
        self._items.append(Pending(apply_at, fragment, handle, sent_at))

    def due(self, step: int) -> list[Pending]:
        out = [x for x in self._items if x.apply_at <= step]
        self._items = [x for x in self._items if x.apply_at > step]
        return out

    def drain(self) -> list[Pending]:
        out = sorted(self._items, key=lambda x: (x.apply_at, x.fragment))
        self._items = []
        return out

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[Pending]:
        return iter(list(self._items))

    def state_dict(self) -> list[tuple]:
        return [(x.apply_at, x.fragment, *x.handle.state(), x.sent_at) for x in self._items]

    def load_state_dict(self, rows: list[tuple], clock: SimClock) -> None:
        self._items = [Pending(int(a), int(p), Handle.from_state(res, arr, clock), int(s)) for a, p, res, arr, s in rows]


class SyncStrategy(abc.ABC):
    """What every strategy gives the run: presence (preemption), the parameters to evaluate, the final flush and
    what the result records."""

    name: str = "base"
    # does ``eval_state`` score the first local island's own replica? (then a separate replica score adds nothing)
    deploys_own_replica: bool = True
    # can the run end without some islands' ranks (lost: dead or hung) and still write its result?
    outlives_lost_islands: bool = False

    def __init__(self, models: dict[int, nn.Module], transport: Transport) -> None:
        self.models = models
        self.transport = transport
        self.ids = sorted(models)
        self.present: dict[int, bool] = {i: True for i in self.ids}  # False while an island is away (preempted)

    def set_present(self, island: int, present: bool) -> None:
        """Preemption, called by the driver before every inner step: an island that goes away takes part in no sync
        until it is back (the others go on without it); one that comes back first ``rejoin``s."""
        if present and not self.present[island]:
            self.rejoin(island)
        self.present[island] = present

    def rejoin(self, island: int) -> None:
        """A returning island takes the current shared state. Only strategies with a global state can do that
        (the config allows preemption with diloco only)."""
        raise NotImplementedError(f"{self.name}: an island cannot rejoin (no global state to rejoin from)")

    def finalize(self, step: int) -> None:
        """Complete everything in flight at the end of training."""

    def outer_steps_per_fragment(self) -> list[int] | None:
        """How many times each fragment was synchronised so far (DiLoCo: outer optimizer steps; butterfly: pairwise
        exchanges), counted as they happened; None for a strategy without fragment syncs (data-parallel)."""
        return None

    @abc.abstractmethod
    def eval_state(self) -> dict[str, torch.Tensor]:
        """Parameters to evaluate (a state_dict subset applied over a replica): the global model where there is one."""

    def lost(self) -> dict[int, int]:
        """Islands whose process this strategy lost (torch.distributed), each with the inner steps it last reported."""
        return {}

    def unmerged_tokens(self) -> float:
        """Tokens processed but never merged into the model (goodput does not count them)."""
        return 0.0

    def result_fields(self) -> dict[str, Any]:
        """Fields the strategy adds to result.json."""
        return {}

    def outer_records(self) -> list[dict[str, Any]]:
        """One record per outer optimizer step so far (``optim.outer.OuterRecord`` with its step and fragment);
        empty for a strategy without one."""
        return []


class LockstepStrategy(SyncStrategy):
    """A strategy whose islands take inner step t together (module doc); its state checkpoints."""

    def reduce_gradients(self, step: int, tokens: dict[int, int]) -> None:
        """Called after backward, before the inner step. Only synchronous data-parallel training uses it."""

    @abc.abstractmethod
    def after_inner_step(self, step: int, tokens: dict[int, int]) -> None:
        """Called after inner step ``step`` (1-based) with the tokens each local island processed in it."""

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, d: dict[str, Any]) -> None:
        pass


class ClockedStrategy(SyncStrategy):
    """A strategy whose islands step on their own simulated clocks (module doc); ``tick_s`` is the global schedule's
    step T_ref."""

    outlives_lost_islands = True  # a lost island is dropped and the rest trains on (sync/decoupled.py)
    tick_s: float

    @abc.abstractmethod
    def land(self, island: int, now_s: float) -> None:
        """Before each of ``island``'s inner steps: apply whatever has reached it by ``now_s``."""

    @abc.abstractmethod
    def island_step_done(self, island: int, tokens: int) -> None:
        """After each of ``island``'s inner steps, with the tokens it processed."""

    @abc.abstractmethod
    def after_tick(self, tick: int) -> None:
        """At the end of tick ``tick`` of the global schedule (every local island has stepped up to it)."""
