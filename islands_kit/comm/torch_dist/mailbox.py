"""Bounded point-to-point messages between island 0 (the synchroniser) and each other island, in decoupled mode:
a control message plus an optional payload, sequenced per pair; a peer that dies, stays silent or sends what the wire
refuses is lost, not fatal (unless the message is required)."""
from __future__ import annotations

import warnings
from datetime import timedelta
from typing import Any, Callable

import torch
import torch.distributed as dist

from islands_kit.comm.layout import RankLayout
from islands_kit.comm.torch_dist.errors import DistributedError
from islands_kit.comm.torch_dist.frames import channel_id, irecv


class PairMailbox:
    """The messages half of ``TorchDistTransport`` (decoupled mode): its state is set up by the transport."""

    rank: int
    island: int
    layout: RankLayout
    timeout_s: float
    lost: dict[int, str]
    _out_seq: list[int]
    _in_seq: list[int]
    _outbox: dict[int, list[tuple[list[Any], list[torch.Tensor]]]]
    _pair_groups: dict[int, Any]
    _refused: Callable[[int, str, bool], None]  # Transport's policy: end the run or drop the peer

    def _error(self, what: str, e: BaseException) -> DistributedError:
        cause = str(e).strip().splitlines()[0] if str(e).strip() else ""
        return DistributedError(
            f"islands_kit.comm.distributed: {what} failed on rank {self.rank} (island {self.island}): a peer process "
            f"exited, never arrived or stopped answering (timeout {self.timeout_s:g} s, ISLANDS_KIT_DIST_TIMEOUT_S). "
            f"Cause: {type(e).__name__}: {cause}")

    def _lose(self, island: int, what: str, e: BaseException, required: bool) -> None:
        err = self._error(what, e)
        if required:
            raise err from e
        self.drop(island, str(err))

    def drop(self, island: int, why: str) -> None:
        """Go on without ``island`` (decoupled mode): its process died, stopped answering, or sent something the
        wire refused (``comm.peer``); ``why`` says which, in one line. Nothing is sent to or read from it again."""
        if island not in self.lost:
            self.lost[island] = why
            warnings.warn(f"islands_kit.comm.distributed: island {island} is lost, the run goes on without it ({why})",
                          RuntimeWarning, stacklevel=3)

    def _post_bytes(self, src: int, dst: int, kind: str, raw: bytes, data: bytes) -> None:
        """Send the message's header and bytes without waiting; a send that fails loses ``dst``."""
        group = self._pair_group(dst)
        seq = self._out_seq[dst]
        self._out_seq[dst] += 1
        head = torch.tensor([seq, channel_id(kind), len(raw), len(data)], dtype=torch.int64)
        msg = torch.frombuffer(bytearray(raw + data), dtype=torch.uint8)
        rank = self.layout.first_rank(dst)
        try:
            works = [dist.isend(head, rank, group=group, tag=2 * seq),
                     dist.isend(msg, rank, group=group, tag=2 * seq + 1)]
        except Exception as e:  # a peer whose sockets closed
            self._lose(dst, f"message {kind!r} #{seq} to island {dst}", e, required=False)
            return
        self._outbox.setdefault(dst, []).append((works, [head, msg]))

    def _pair_group(self, island: int) -> Any:
        if island not in self._pair_groups:
            raise ValueError(f"decoupled messages run between island 0 (the synchroniser) and each other island, "
                             f"in decoupled mode only: island {self.island} cannot message island {island}")
        return self._pair_groups[island]

    def _finish_sends(self, island: int, required: bool, wait: timedelta) -> None:
        """Complete the sends to ``island`` (gloo completes a send once the receiver has posted its receive)."""
        for works, _ in self._outbox.pop(island, []):
            try:
                for w in works:
                    w.wait(wait)
            except Exception as e:
                self._lose(island, f"message to island {island}", e, required)
                return

    def finish_messages(self) -> None:
        """Complete every send still in flight (bounded; a peer that fails them is lost)."""
        for island in list(self._outbox):
            self._finish_sends(island, required=False, wait=timedelta(seconds=self.timeout_s))

    def _next_bytes(self, dst: int, src: int, kind: str, timeout_s: float, required: bool,
                    limits: tuple[int, int]) -> tuple[bytes, bytes, int] | None:
        """The next message from ``src``: its header (sequence, kind, lengths within ``limits``) checked, then its
        bytes (nothing is allocated for a length over its kind's limit); errors name the sender's rank."""
        group = self._pair_group(src)
        wait = timedelta(seconds=timeout_s)
        self._finish_sends(src, required, wait)  # everything we said before: src reads it before answering
        if src in self.lost:
            return None
        seq = self._in_seq[src]
        self._in_seq[src] += 1
        what = f"message {kind!r} #{seq} from island {src}"
        rank = self.layout.first_rank(src)
        head = torch.zeros(4, dtype=torch.int64)
        try:
            irecv(head, rank, group, 2 * seq).wait(wait)
        except Exception as e:
            self._lose(src, what, e, required)
            return None
        got_seq, kind_id, n_raw, n_data = (int(x) for x in head)
        if (got_seq, kind_id) != (seq, channel_id(kind)):
            self._refused(src, f"islands_kit.comm.distributed: protocol desync on rank {self.rank} (island "
                               f"{self.island}): expected {what} (rank {rank}), got header "
                               f"{[got_seq, kind_id, n_raw, n_data]}", required)
            return None
        if not (0 < n_raw <= limits[0] and 0 <= n_data <= limits[1]):
            self._refused(src, f"islands_kit.comm.distributed: on rank {self.rank}: {what} (rank {rank}) announced "
                               f"{n_raw} + {n_data} bytes, over its kind's limits of {limits[0]} (control) + "
                               f"{limits[1]} (payload); refused before it is read", required)
            return None
        msg = torch.empty(n_raw + n_data, dtype=torch.uint8)
        try:
            irecv(msg, rank, group, 2 * seq + 1).wait(wait)
        except Exception as e:
            self._lose(src, what, e, required)
            return None
        b = msg.numpy().tobytes()
        return b[:n_raw], b[n_raw:], rank

    def _on_this_side(self, why: str) -> str:
        return f"islands_kit.comm.distributed: on rank {self.rank}: {why}"

    def _wire_error(self, why: str) -> Exception:
        return DistributedError(why)
