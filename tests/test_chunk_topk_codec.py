"""SparseLoCo's chunked top-k codecs (ctop*): the exact byte formula (scales + ceil(log2 chunk)-bit indices + value
codes, each section rounded up to whole bytes), the kept entries and their 2/4-bit values against a plain per-chunk
loop, the index bit stream read back by hand, and decoders that refuse corrupted payloads."""
from __future__ import annotations

import math

import pytest
import torch

from islands_kit.comm.codecs import NonFiniteError, Payload, TopKCodec, decode_bytes, encode_bytes, get_codec
from islands_kit.config.codec_registry import CODEC_SPECS, CodecSpec

CTOP = [n for n, s in CODEC_SPECS.items() if s.kind == "chunk_topk"]


def formula(name: str, n: int, B: int) -> int:
    """The stated wire size, written from the docstring: 4 bytes per chunk scale (quantised values only), then K
    indices of ceil(log2 B) bits, then K value codes, each section padded to a whole byte."""
    s = CODEC_SPECS[name]
    K = sum(math.ceil(min(B, n - c) / s.every) for c in range(0, n, B))
    scales = 4 * math.ceil(n / B) if s.values != "fp32" else 0
    return scales + math.ceil(K * math.ceil(math.log2(B)) / 8) + math.ceil(K * s.bits / 8)


def reference(x: torch.Tensor, every: int, B: int, qmax: float, offset: float) -> torch.Tensor:
    """Per chunk, a loop: keep the ceil(len/every) largest |x| (lower index first on ties), round-to-nearest-even onto
    the grid at scale absmax/qmax (qmax 0: the raw value), everything else zero."""
    out = torch.zeros_like(x)
    for s in range(0, x.numel(), B):
        blk = x[s:s + B]
        k = math.ceil(blk.numel() / every)
        order = sorted(range(blk.numel()), key=lambda i: (-abs(float(blk[i])), i))[:k]
        scale = torch.tensor(float(blk.abs().max()) / qmax if qmax else 1.0, dtype=torch.float32)
        for i in order:
            if not qmax:
                out[s + i] = blk[i]
                continue
            v = max(-qmax, min(qmax, float(blk[i] / scale))) if scale > 0 else 0.0
            j = torch.round(torch.tensor(v - offset)).item() + offset
            out[s + i] = torch.tensor(j, dtype=torch.float32) * scale
    return out


@pytest.mark.parametrize("name", CTOP)
@pytest.mark.parametrize("B", [1, 100, 4096])
def test_bytes_equal_the_formula(name, B):
    c = get_codec(name, B)
    for n in (0, 1, 7, 99, 100, 101, 4095, 4096, 10000):
        x = torch.randn(n, generator=torch.Generator().manual_seed(n))
        p = c.encode(x, stochastic=True, generator=torch.Generator().manual_seed(1))
        assert p.nbytes == c.nbytes(n) == formula(name, n, B), (name, B, n)
        d = c.decode(p)
        assert d.shape == (n,)
        assert torch.equal(c.decode(decode_bytes(encode_bytes(p))), d)


@pytest.mark.parametrize("name", CTOP)
def test_kept_entries_and_values_match_a_plain_loop(name):
    s = CODEC_SPECS[name]
    qmax, offset = (s.qmax, s.qmax - int(s.qmax)) if s.values != "fp32" else (0.0, 0.0)
    x = torch.randn(2 * 640 + 300, generator=torch.Generator().manual_seed(5))
    x[10] = x[11] = 4.0  # a tie: the lower index goes first
    c = get_codec(name, 640)
    got = c.decode(c.encode(x, stochastic=False))
    assert torch.equal(got, reference(x, s.every, 640, qmax, offset))


def test_index_stream_holds_12_bit_indices_for_4096_chunks():
    """At the paper's chunk of 4096 every index takes 12 bits: read the stream back with Python integers."""
    c = get_codec("ctop128_int2", 4096)
    x = torch.randn(4096 + 1000, generator=torch.Generator().manual_seed(6))
    p = c.encode(x)
    K = 32 + math.ceil(1000 / 128)  # 32 kept in the full chunk, 8 in the partial one
    raw = bytes(p.data.tolist())[8: 8 + math.ceil(12 * K / 8)]  # after the two float32 scales
    stream = int.from_bytes(raw, "little")
    idx = [(stream >> (12 * i)) & 0xFFF for i in range(K)]
    want = sorted(torch.topk(x[:4096].abs(), 32).indices.tolist()) + sorted(torch.topk(x[4096:].abs(), 8).indices.tolist())
    assert idx == want and stream >> (12 * K) == 0  # pad bits zero


def test_density_one_without_quantiser_is_lossless():
    """Keeping every entry with raw fp32 values (the chunked path at density 1) decodes bit for bit."""
    spec = CodecSpec("ctop1_fp32", 250, "chunk_topk", 32, every=1, values="fp32")
    c = TopKCodec(spec, 64)
    x = torch.randn(1000, generator=torch.Generator().manual_seed(7))
    x[3] = -0.0
    assert torch.equal(c.decode(c.encode(x)).view(torch.int32), x.view(torch.int32))
    assert c.nbytes(1000) == math.ceil(1000 * 6 / 8) + 4 * 1000


def _corrupt(p: Payload, edit) -> Payload:
    data = p.data.clone()
    edit(data)
    return Payload(p.codec, p.numel, p.block_size, data)


def test_decode_refuses_corrupted_fields():
    c = get_codec("ctop32_int2", 100)  # 7-bit indices, chunks of 100, a partial last chunk of 50
    x = torch.randn(250, generator=torch.Generator().manual_seed(8))
    p = c.encode(x)
    s_len = 4 * 3
    K = 4 + 4 + 2
    i_len = math.ceil(7 * K / 8)

    def set_index(j: int, value: int):
        def edit(data):
            bits = int.from_bytes(bytes(data[s_len:s_len + i_len].tolist()), "little")
            bits = (bits & ~(0x7F << (7 * j))) | (value << (7 * j))
            data[s_len:s_len + i_len] = torch.tensor(list(bits.to_bytes(i_len, "little")), dtype=torch.uint8)
        return edit

    with pytest.raises(ValueError, match="index is >= the block's 100 values"):
        c.decode(_corrupt(p, set_index(0, 120)))
    with pytest.raises(ValueError, match="index is >= the block's 50 values"):
        c.decode(_corrupt(p, set_index(K - 1, 60)))  # in range for a full chunk, not for the partial last one
    first = c.decode(p).nonzero().squeeze(1)
    with pytest.raises(ValueError, match="strictly ascending"):
        c.decode(_corrupt(p, set_index(1, int(first[0]))))  # a repeated index
    with pytest.raises(ValueError, match="pad bits"):
        c.decode(_corrupt(p, lambda d: d.__setitem__(s_len + i_len - 1, d[s_len + i_len - 1] | 0x80)))
    with pytest.raises(NonFiniteError):
        c.decode(_corrupt(p, lambda d: d.__setitem__(slice(0, 4), torch.tensor([float("nan")]).view(torch.uint8))))
    with pytest.raises(ValueError, match="scale is negative"):
        c.decode(_corrupt(p, lambda d: d.__setitem__(slice(4, 8), torch.tensor([-1.0]).view(torch.uint8))))
    with pytest.raises(ValueError, match="expected"):
        c.decode(Payload(p.codec, p.numel, p.block_size, p.data[:-1]))
    c.decode(p)  # the untouched payload still decodes
    raw = get_codec("ctop64_fp32", 64)
    q = raw.encode(x)
    with pytest.raises(NonFiniteError):
        raw.decode(_corrupt(q, lambda d: d.__setitem__(slice(q.nbytes - 4, q.nbytes),
                                                        torch.tensor([float("inf")]).view(torch.uint8))))


def test_one_byte_index_codec_refuses_an_index_past_its_block():
    c = get_codec("top16_int4", 64)
    p = c.encode(torch.randn(64, generator=torch.Generator().manual_seed(9)))
    with pytest.raises(ValueError, match="index is >= the block's 64 values"):
        c.decode(_corrupt(p, lambda d: d.__setitem__(4, 200)))
