"""Top-k codecs: per block only the largest magnitudes cross the wire, as (in-block index, value) pairs."""
from __future__ import annotations

from typing import Iterator

import torch

from islands_kit.comm.codecs.base import Codec
from islands_kit.comm.codecs.block import UniformCodec
from islands_kit.comm.codecs.grids import off_grid, pack, pack_bits, scale_overflow, stream_bits, unpack
from islands_kit.comm.codecs.payload import NonFiniteError, Payload
from islands_kit.config import ConfigError
from islands_kit.config.codec_registry import CODEC_SPECS, CodecSpec


class TopKCodec(Codec):
    """Sparsified values: in every block of B values only the ``k = ceil(len / every)`` largest magnitudes are sent,
    as (in-block index, value) pairs; the rest decode to zero and — with error feedback — wait in the residual until
    they grow large enough to be picked. Ties in magnitude go to the lower index (stable sort): the same input always
    selects the same entries. Two index formats (``spec.kind``):

    * ``topk`` (``top{every}_{values}``): one byte per index, so B <= 256.
    * ``chunk_topk`` (``ctop{every}_{values}``), SparseLoCo's chunked Top-k (Sarfi et al. 2025, "Communication
      Efficient LLM Pre-training with SparseLoCo"): a block is one of the paper's chunks (4096 values there, the
      64 x 64 tiles of its reference code), any size, and each index takes ``ib = ceil(log2 B)`` bits (12 at 4096),
      the partial last chunk's too.

    Layout: ``[nb float32 scales][K indices, ib bits each, packed][K value codes, packed]``, ``K = Σ_blocks
    ceil(len_b / every)``, indices ascending within each block; the bit streams are little-endian (element i at stream
    bits ``[i·w, (i+1)·w)``, stream bit j in byte ``j // 8`` at bit ``j % 8``), pad bits 0. The kept values use the
    grid of ``int4`` (qmax 7) or ``int2`` (levels ±0.5, ±1.5) with the block's absmax scale (the largest kept
    magnitude) and the same rounding recipe (stochastic or nearest-even); ``values="fp32"`` sends them raw and no
    scales. ``nbytes = 4 nb [quantised values only] + ceil(K · ib / 8) + ceil(K · bits / 8)``.

    ``decode`` checks what it reads: scales finite and >= 0, every index inside its block and strictly ascending
    within it, index pad bits zero; a payload that fails raises ``ValueError`` (``NonFiniteError`` for NaN/inf)."""

    def __init__(self, spec: CodecSpec, block_size: int = 128) -> None:
        super().__init__(spec, block_size)
        if spec.kind == "topk" and block_size > 256:
            raise ConfigError(f"sync.codec_block_size: must be <= 256 for the top-k codec {spec.name} "
                              f"(one-byte indices) (got {block_size})")
        self.every, self.bits, self.qmax = spec.every, spec.bits, spec.qmax
        self.index_bits = 8 if spec.kind == "topk" else (block_size - 1).bit_length()  # ceil(log2 B)
        self.scaled = spec.values != "fp32"
        # the kept values' grid and rounding: the dense uniform codec with the same bits
        self.values = UniformCodec(CODEC_SPECS[spec.values], block_size) if self.scaled else None

    def _kept(self, numel: int) -> tuple[int, int, int, int]:
        """(blocks, full blocks, k of a full block, K in all)."""
        B = self.block_size
        nb, full = -(-numel // B), numel // B
        k = -(-B // self.every)
        last = numel - full * B
        return nb, full, k, full * k + (-(-last // self.every) if last else 0)

    def _sections(self, numel: int) -> tuple[int, int, int]:
        """Byte lengths of the (scales, indices, values) sections."""
        nb, _, _, K = self._kept(numel)
        return 4 * nb * self.scaled, -(-K * self.index_bits // 8), -(-K * self.bits // 8)

    def nbytes(self, numel: int) -> int:
        return sum(self._sections(numel))

    def _blocks(self, n: int) -> list[tuple[int, int, int]]:
        """(start, length, k) of each group of blocks with the same k: the full blocks, then a partial last one."""
        B = self.block_size
        nb, full, k, K = self._kept(n)
        out = [(0, full * B, k)] if full else []
        if nb > full:
            out.append((full * B, n - full * B, K - full * k))
        return out

    def _encode(self, xf: torch.Tensor, u: torch.Tensor | None) -> torch.Tensor:
        n = xf.numel()
        if not bool(torch.isfinite(xf).all()):
            raise NonFiniteError(f"{self.name}.encode: payload contains non-finite values")
        scales, idxs, vals = [], [], []
        for start, length, k in self._blocks(n):
            L = min(length, self.block_size)
            xb = xf[start:start + length].view(-1, L)  # (blocks, L)
            order = torch.sort(xb.abs(), dim=1, descending=True, stable=True).indices[:, :k]  # (blocks, k)
            idx = torch.sort(order, dim=1).values  # ascending in-block positions
            kept = torch.gather(xb, 1, idx)  # (blocks, k)
            idxs.append(idx.reshape(-1))
            if self.values is None:
                vals.append(kept.reshape(-1))
                continue
            scale = xb.abs().amax(dim=1, keepdim=True) / self.qmax  # (blocks, 1)
            scales.append(scale.reshape(-1))
            vals.append((kept / torch.where(scale > 0, scale, torch.ones_like(scale))).clamp(-self.qmax, self.qmax)
                        .reshape(-1))
        if not idxs:
            return torch.zeros(0, dtype=torch.uint8, device=xf.device)
        v = torch.cat(vals)  # (K,)
        if self.values is None:
            body = v.contiguous().view(torch.uint8)
        else:
            body = pack(self.values._quantise(v, None if u is None else u[: v.numel()]), self.bits)
        head = torch.cat(scales).view(torch.uint8) if scales else torch.zeros(0, dtype=torch.uint8, device=xf.device)
        return torch.cat([head, pack_bits(torch.cat(idxs), self.index_bits), body])

    def check(self, p: Payload) -> str | None:
        # encode refuses non-finite input, so a non-finite or negative scale or fp32 value is never an honest payload
        _, _, _, K = self._kept(p.numel)
        s_len, i_len, _ = self._sections(p.numel)
        data = p.data if p.data.storage_offset() % 4 == 0 else p.data.clone()  # float32 views need alignment
        scale = data[:s_len].view(torch.float32)
        if not bool(torch.isfinite(scale).all()) or bool((scale < 0).any()):
            return "scales: a block scale is negative or not finite"
        overflow = scale_overflow(scale, self.qmax)
        if overflow:
            return overflow
        if self.values is None and not bool(torch.isfinite(data[s_len + i_len:].clone().view(torch.float32)).all()):
            return "values: a kept value is not finite"
        try:
            idx = self._read_indices(p.data[s_len: s_len + i_len], K)  # (K,)
        except ValueError:
            return "indices: the index stream's pad bits are not zero"
        for _start, L, _off_k, b0, ib in self._block_indices(idx, p.numel):
            bad = (ib >= L).any(dim=1)
            if ib.shape[1] > 1:
                bad |= (ib[:, 1:] <= ib[:, :-1]).any(dim=1)
            if bool(bad.any()):
                b = int(bad.nonzero()[0])
                return (f"indices: block {b0 + b} holds in-block indices {ib[b].tolist()[:8]}"
                        f"{'...' if ib.shape[1] > 8 else ''}: each must be < {L} (the block's length) and they must ascend")
        if self.values is None:
            return None
        return off_grid(self.values.spec, unpack(p.data[s_len + i_len:], self.bits, K))

    def _decode(self, data: torch.Tensor, n: int) -> torch.Tensor:
        nb, _, _, K = self._kept(n)
        s_len, i_len, _ = self._sections(n)
        idx = self._read_indices(data[s_len: s_len + i_len], K)  # (K,) int64
        if self.values is None:
            q = data[s_len + i_len:].clone().view(torch.float32)  # (K,) raw values (clone: 4-byte aligned)
            scale = torch.ones(nb, dtype=torch.float32, device=data.device)
        else:
            q = self.values._levels(unpack(data[s_len + i_len:], self.bits, K))  # (K,)
            scale = data[:s_len].view(torch.float32)  # (nb,)
        if not bool(torch.isfinite(scale).all() and torch.isfinite(q).all()):
            raise NonFiniteError(f"{self.name}.decode: payload contains non-finite values")
        if bool((scale < 0).any()):
            raise ValueError(f"{self.name}.decode: corrupted payload: a block scale is negative")
        out = torch.zeros(n, dtype=torch.float32, device=data.device)
        for start, L, off_k, b0, ib in self._block_indices(idx, n):
            nblk, k = ib.shape
            if bool((ib >= L).any()):
                raise ValueError(f"{self.name}.decode: corrupted payload: an in-block index is >= the block's "
                                 f"{L} values")
            if k > 1 and bool((ib[:, 1:] <= ib[:, :-1]).any()):
                raise ValueError(f"{self.name}.decode: corrupted payload: in-block indices must be strictly ascending")
            blk = torch.arange(nblk, device=data.device).repeat_interleave(k)  # (nblk * k,)
            out[start + blk * L + ib.reshape(-1)] = q[off_k: off_k + nblk * k] * scale[b0 + blk]
        return out

    def _block_indices(self, idx: torch.Tensor, n: int) -> Iterator[tuple[int, int, int, int, torch.Tensor]]:
        """For each group of equal blocks (``_blocks``): its start, block length L, offset of its first kept value in
        ``idx``, index of its first block, and its in-block positions (nblk, k) as read (unchecked)."""
        off_k, b0 = 0, 0
        for start, length, k in self._blocks(n):
            L = min(length, self.block_size)
            nblk = length // L
            yield start, L, off_k, b0, idx[off_k: off_k + nblk * k].view(nblk, k)
            off_k += nblk * k
            b0 += nblk

    def _read_indices(self, data: torch.Tensor, K: int) -> torch.Tensor:
        """The K packed indices as int64; the stream's pad bits must be zero."""
        bits = stream_bits(data)  # (8 * len,)
        used = K * self.index_bits
        if bool(bits[used:].any()):
            raise ValueError(f"{self.name}.decode: corrupted payload: index pad bits are not zero")
        if self.index_bits == 0:
            return torch.zeros(K, dtype=torch.int64, device=data.device)
        w = torch.arange(self.index_bits, device=data.device)
        return (bits[:used].view(K, self.index_bits) << w).sum(dim=1)
