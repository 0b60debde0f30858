"""The train/validation split, per-island batch streams and the fixed evaluation windows.

``split_bytes`` takes the *last* ``val_fraction`` of the bytes as validation (a contiguous tail, so no document
straddles the boundary more than once); ``BatchStream`` draws random training windows per island; ``eval_windows``
fixes the validation windows every experiment is scored on.
"""
from __future__ import annotations

import hashlib
from typing import Any

import torch

from islands_kit.config import _check


def split_bytes(data: bytes, val_fraction: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Split bytes into (train, val) uint8 tensors: val = the last ``round(len(data) * val_fraction)`` bytes, train =
    everything before. ``val_fraction`` is ``data.val_fraction`` and must be in [0.05, 0.5) (the same rule as
    ``DataConfig``): below 5% the validation figure is too noisy to compare runs, and compressor floors too pessimistic.
    """
    _check(isinstance(val_fraction, (int, float)) and 0.05 <= val_fraction < 0.5, "data.val_fraction",
           "must be in [0.05, 0.5) (validation is at least 5% of the bytes)", val_fraction)
    n = len(data)
    n_val = round(n * val_fraction)
    _check(n - n_val >= 2 and n_val >= 2, "data.corpus", "must hold enough bytes for a train and a validation split", n)
    all_u8 = torch.frombuffer(bytearray(data), dtype=torch.uint8)  # (N,)
    return all_u8[: n - n_val].clone(), all_u8[n - n_val:].clone()


def _mix_seed(*ints: int) -> int:
    """A 63-bit seed from integers, stable across processes and Python versions (unlike ``hash``)."""
    h = hashlib.sha256(b"islands_kit.data:" + b",".join(str(int(i)).encode() for i in ints)).digest()
    return int.from_bytes(h[:8], "little") & ((1 << 63) - 1)


def _check_u8(t: Any, name: str) -> None:
    _check(isinstance(t, torch.Tensor) and t.dtype == torch.uint8 and t.dim() == 1, name,
           "must be a 1-D uint8 tensor (from split_bytes)", getattr(t, "dtype", type(t).__name__))


class BatchStream:
    """Deterministic random windows of seq_len+1 bytes from `train` for one island/rank.

    Batch number ``k`` is drawn from a ``torch.Generator`` seeded with a hash of ``(seed, stream_id, k)``: islands (or
    ranks) with different ``stream_id`` see independent streams; the same ``(seed, stream_id)`` gives identical batches;
    the whole state is the counter ``k``, so ``load_state_dict`` resumes exactly and ``window_starts(k)`` addresses
    any batch directly. The global RNG is never touched. Window starts are uniform over all ``len(train) - seq_len``
    positions (sampling with replacement).
    """

    def __init__(self, train: torch.Tensor, batch_size: int, seq_len: int, seed: int, stream_id: int) -> None:
        _check_u8(train, "train")
        _check(isinstance(batch_size, int) and batch_size >= 1, "batch_size", "must be an integer >= 1", batch_size)
        _check(isinstance(seq_len, int) and seq_len >= 1, "model.seq_len", "must be an integer >= 1", seq_len)
        _check(seq_len + 1 <= train.numel(), "model.seq_len",
               f"must be < the training split length ({train.numel()} bytes): a window holds seq_len+1 bytes", seq_len)
        _check(isinstance(seed, int) and seed >= 0, "seed", "must be an integer >= 0", seed)
        _check(isinstance(stream_id, int) and stream_id >= 0, "stream_id", "must be an integer >= 0", stream_id)
        self.train, self.batch_size, self.seq_len, self.seed, self.stream_id = train, batch_size, seq_len, seed, stream_id
        self.step = 0
        self._gen = torch.Generator(device="cpu")
        self._offsets = torch.arange(seq_len + 1)  # (T+1,)

    def window_starts(self, k: int) -> torch.Tensor:
        """Start offsets (B,) of batch number ``k`` (0-based)."""
        self._gen.manual_seed(_mix_seed(self.seed, self.stream_id, k))
        return torch.randint(0, self.train.numel() - self.seq_len, (self.batch_size,), generator=self._gen)

    def next(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The next (x, y), each (B, T) int64 on CPU; ``y[:, t] = x[:, t+1]`` along the source bytes."""
        starts = self.window_starts(self.step)  # (B,)
        self.step += 1
        win = self.train[starts[:, None] + self._offsets[None, :]].long()  # (B, T+1)
        return win[:, :-1], win[:, 1:]

    def state_dict(self) -> dict:
        return {"seed": self.seed, "stream_id": self.stream_id, "batch_size": self.batch_size,
                "seq_len": self.seq_len, "n_train": int(self.train.numel()), "step": self.step}

    def load_state_dict(self, d: dict) -> None:
        mine = self.state_dict()
        for key in ("seed", "stream_id", "batch_size", "seq_len", "n_train"):
            _check(d.get(key) == mine[key], f"BatchStream state {key}",
                   f"must match this stream ({mine[key]!r}) to resume the same batches", d.get(key))
        _check(isinstance(d.get("step"), int) and d["step"] >= 0, "BatchStream state step", "must be an integer >= 0", d.get("step"))
        self.step = d["step"]


def eval_windows(val: torch.Tensor, seq_len: int, max_bytes: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """The fixed validation windows: (x, y), each (N, T) int64, T = ``seq_len``.

    Tile the validation split into ``M = (len(val) - 1) // T`` non-overlapping slots; slot ``j`` covers bytes
    ``[j*T, j*T + T]`` (T+1 bytes: inputs ``[j*T, j*T+T)``, targets ``[j*T+1, j*T+T]``), so together the slots score
    every target byte ``val[1 : 1 + M*T]`` exactly once (the last ``< T`` bytes are not scored). With
    ``max_bytes = 0`` all M slots are used; otherwise ``N = min(M, max(1, max_bytes // T))`` slots evenly spaced
    through the split, slot ``floor(i * M / N)`` for ``i = 0..N-1`` — at most ``max_bytes`` targets (at least one
    window). Deterministic: the same val, seq_len and max_bytes always give the same windows.
    """
    _check_u8(val, "val")
    _check(isinstance(seq_len, int) and seq_len >= 1, "model.seq_len", "must be an integer >= 1", seq_len)
    _check(seq_len + 1 <= val.numel(), "model.seq_len",
           f"must be < the validation split length ({val.numel()} bytes): a window holds seq_len+1 bytes", seq_len)
    _check(isinstance(max_bytes, int) and max_bytes >= 0, "data.eval_bytes", "must be an integer >= 0 (0 = all)", max_bytes)
    T = seq_len
    M = (val.numel() - 1) // T
    N = M if max_bytes == 0 else min(M, max(1, max_bytes // T))
    slots = (torch.arange(N, dtype=torch.int64) * M) // N  # (N,) distinct, increasing
    win = val[slots[:, None] * T + torch.arange(T + 1)[None, :]].long()  # (N, T+1)
    return win[:, :-1].contiguous(), win[:, 1:].contiguous()

