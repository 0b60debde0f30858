"""The one registry of wire codecs: name, wire id and value grid of each (the formats are in ``comm/codecs/``).

A leaf module (imports nothing from islands_kit) so that ``config`` can validate ``sync.codec`` without importing the
wire, ``comm.codecs`` builds every codec from these rows, and the Triton codec kernel is handed a row's numbers.

``wire_id`` is written in every serialised payload header (checkpoints, the torch.distributed wire): never renumber a
codec; add new ones with a new id.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CodecSpec:
    """One wire codec.

    ``kind``: ``fp32`` (raw float32), ``bf16`` (bfloat16), ``uniform`` (per-block scaled grid ``{j + offset}``,
    ``|level| <= qmax``, offset 0.5 when qmax is a half-integer: int2's mid-rise grid), ``minifloat`` (per-block
    scaled OCP float grid with ``mbits`` mantissa bits, minimum normal exponent ``emin``, subnormals below, saturating
    at ``qmax``; the code is the OCP bit pattern, sign in the top bit), ``topk`` (sparsified: 1 value in every
    ``every`` of a block kept, as a one-byte index and a code on the ``values`` codec's grid) or ``chunk_topk``
    (SparseLoCo's format: the same selection per chunk of ``block_size`` values, any chunk size, each index in
    ``ceil(log2(block_size))`` bits; ``values`` int2/int4 on their grids with a float32 scale per chunk, or fp32 raw
    values and no scales). ``bits``: bits per value code on the wire.
    """

    name: str
    wire_id: int
    kind: str
    bits: int
    qmax: float = 0.0
    emin: int = 0
    mbits: int = 0
    every: int = 0  # topk: keep 1 value in every `every` per block
    values: str = ""  # topk: the dense uniform codec whose grid the kept values use

    @property
    def block_scaled(self) -> bool:
        """True for the dense per-block absmax-scaled codecs (all but fp32, bf16 and the sparse top-k ones)."""
        return self.kind in ("uniform", "minifloat")

    @property
    def sparse(self) -> bool:
        """True for the codecs that send only the top-k entries of each block (with their indices)."""
        return self.kind in ("topk", "chunk_topk")

    @property
    def offset(self) -> float:
        """Grid offset of a uniform codec: 0 for int8/int4, 0.5 for int2 (levels on half-integers)."""
        return self.qmax - int(self.qmax)


CODEC_SPECS: dict[str, CodecSpec] = {s.name: s for s in (
    CodecSpec("fp32", 0, "fp32", 32),
    CodecSpec("bf16", 1, "bf16", 16),
    CodecSpec("int8", 2, "uniform", 8, qmax=127.0),
    CodecSpec("fp8_e4m3", 3, "minifloat", 8, qmax=448.0, emin=-6, mbits=3),
    CodecSpec("int4", 4, "uniform", 4, qmax=7.0),
    CodecSpec("fp4_e2m1", 5, "minifloat", 4, qmax=6.0, emin=0, mbits=1),
    CodecSpec("int2", 6, "uniform", 2, qmax=1.5),
    # top-k sparsified outer gradients (SparseLoCo-style), top{every}_{values}
    CodecSpec("top8_int4", 7, "topk", 4, qmax=7.0, every=8, values="int4"),
    CodecSpec("top16_int4", 8, "topk", 4, qmax=7.0, every=16, values="int4"),
    CodecSpec("top32_int4", 9, "topk", 4, qmax=7.0, every=32, values="int4"),
    CodecSpec("top16_int2", 10, "topk", 2, qmax=1.5, every=16, values="int2"),
    # SparseLoCo (Sarfi et al. 2025): top-k per chunk (sync.codec_block_size, the paper's 4096), compact indices;
    # ctop{every}: k = chunk / every, so ctop64 at 4096 keeps 64 per chunk (1.56 %), ctop32 128 (3.1 %)
    CodecSpec("ctop32_int2", 11, "chunk_topk", 2, qmax=1.5, every=32, values="int2"),
    CodecSpec("ctop64_int2", 12, "chunk_topk", 2, qmax=1.5, every=64, values="int2"),
    CodecSpec("ctop128_int2", 13, "chunk_topk", 2, qmax=1.5, every=128, values="int2"),
    CodecSpec("ctop32_int4", 14, "chunk_topk", 4, qmax=7.0, every=32, values="int4"),
    CodecSpec("ctop64_int4", 15, "chunk_topk", 4, qmax=7.0, every=64, values="int4"),
    CodecSpec("ctop64_fp32", 16, "chunk_topk", 32, every=64, values="fp32"),  # sparsification alone (no quantiser)
    # Streaming DiLoCo's 4-bit float (Douillard et al. 2025): 3 exponent bits, no mantissa: +-{0, 2^-2 .. 2^4}
    CodecSpec("fp4_e3m0", 17, "minifloat", 4, qmax=16.0, emin=-2, mbits=0),
    # SparseLoCo denser: 1 in 16 of each chunk (6.25 %), the frontier sweep's step past the paper's 1-3 %
    CodecSpec("ctop16_int2", 18, "chunk_topk", 2, qmax=1.5, every=16, values="int2"),
)}
CODECS: tuple[str, ...] = tuple(CODEC_SPECS)  # the valid values of sync.codec
DENSE_CODECS: tuple[str, ...] = tuple(n for n, s in CODEC_SPECS.items() if not s.sparse)  # every value sent
SPARSE_CODECS: tuple[str, ...] = tuple(n for n, s in CODEC_SPECS.items() if s.sparse)
