"""Self-describing, checksummed serialisation of a payload: for checkpoints and the torch.distributed wire."""
from __future__ import annotations

import struct
import zlib

import torch

from islands_kit.comm.codecs.factory import get_codec
from islands_kit.comm.codecs.payload import Payload
from islands_kit.config.codec_registry import CODEC_SPECS

_MAGIC = b"IKCP"
_VERSION = 1
_HEADER = struct.Struct("<4sBBHQII")  # magic, version, codec id, reserved (0), numel, block_size, crc32(data)
HEADER_BYTES = _HEADER.size  # 24
_NAME_OF_ID = {s.wire_id: s.name for s in CODEC_SPECS.values()}


def encode_bytes(p: Payload) -> bytes:
    """``HEADER_BYTES`` header (magic, version, codec id, numel, block size, CRC-32 of the data) + ``p.data``."""
    body = p.data.detach().cpu().contiguous().numpy().tobytes()
    return _HEADER.pack(_MAGIC, _VERSION, CODEC_SPECS[p.codec].wire_id, 0, p.numel, p.block_size, zlib.crc32(body)) + body


def read_header(b: bytes) -> tuple[str, int, int]:
    """(codec name, numel, block_size) from the header of a serialised payload, before anything is sized from it;
    raises ValueError on a truncated or garbled header or an unknown codec."""
    if len(b) < HEADER_BYTES:
        raise ValueError(f"decode_bytes: truncated payload: {len(b)} bytes is shorter than the {HEADER_BYTES}-byte header")
    magic, version, cid, reserved, numel, block_size, _ = _HEADER.unpack_from(b)
    if magic != _MAGIC:
        raise ValueError(f"decode_bytes: bad magic {magic!r} (expected {_MAGIC!r}): not an islands_kit payload")
    if version != _VERSION or reserved != 0:
        raise ValueError(f"decode_bytes: unsupported header version {version} / reserved field {reserved}")
    if cid not in _NAME_OF_ID:
        raise ValueError(f"decode_bytes: unknown codec id {cid} (valid: {sorted(_NAME_OF_ID)})")
    if block_size < 1:
        raise ValueError(f"decode_bytes: garbled header: block_size {block_size} must be >= 1")
    return _NAME_OF_ID[cid], numel, block_size


def decode_bytes(b: bytes | bytearray | memoryview) -> Payload:
    """Inverse of :func:`encode_bytes`; raises ValueError on a truncated, garbled or unknown payload. (A payload from
    a peer goes through ``comm.peer.read_payload``, which also checks it against what the receiver expects.)"""
    b = bytes(b)
    name, numel, block_size = read_header(b)
    crc = _HEADER.unpack_from(b)[-1]
    expected = get_codec(name, block_size).nbytes(numel)
    if len(b) - HEADER_BYTES != expected:
        raise ValueError(f"decode_bytes: {'truncated' if len(b) - HEADER_BYTES < expected else 'oversized'} payload: "
                         f"{name} numel={numel} block_size={block_size} needs {expected} data bytes, got {len(b) - HEADER_BYTES}")
    body = b[HEADER_BYTES:]
    if zlib.crc32(body) != crc:
        raise ValueError("decode_bytes: checksum mismatch: payload data is corrupted")
    data = torch.frombuffer(bytearray(body), dtype=torch.uint8) if body else torch.zeros(0, dtype=torch.uint8)
    return Payload(name, numel, block_size, data)
