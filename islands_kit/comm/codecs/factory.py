"""The codec for a registry name."""
from __future__ import annotations

from islands_kit.comm.codecs.base import Bf16Codec, Codec, Fp32Codec
from islands_kit.comm.codecs.block import Fp4Codec, Fp8E4M3Codec, UniformCodec
from islands_kit.comm.codecs.topk import TopKCodec
from islands_kit.config import ConfigError
from islands_kit.config.codec_registry import CODEC_SPECS, CODECS, CodecSpec


def _codec_class(spec: CodecSpec) -> type[Codec]:
    """The class implementing a registry row: by its value format (the two minifloats differ only in their codes)."""
    if spec.kind == "minifloat":
        return Fp8E4M3Codec if spec.bits == 8 else Fp4Codec
    return {"fp32": Fp32Codec, "bf16": Bf16Codec, "uniform": UniformCodec, "topk": TopKCodec,
            "chunk_topk": TopKCodec}[spec.kind]


def fp32_codec(block_size: int = 128) -> Fp32Codec:
    """The ``fp32`` codec, typed as such (for ``Fp32Codec.wrap``)."""
    return Fp32Codec(CODEC_SPECS["fp32"], block_size)


def get_codec(name: str, block_size: int = 128) -> Codec:
    """The codec named ``name`` (one of ``codec_registry.CODECS``); unknown names raise a ConfigError naming
    ``sync.codec``."""
    if name not in CODEC_SPECS:
        raise ConfigError(f"sync.codec: unknown codec {name!r} (valid: {'|'.join(CODECS)})")
    spec = CODEC_SPECS[name]
    return _codec_class(spec)(spec, block_size)
