"""A run's final models on disk, and bytes sampled from them (``islands-kit sample RUN_DIR --prompt ...``).

At the end of a run ``save_final_models`` writes, beside result.json:

* ``model.pt``: the model the run deploys and scores (the global parameters for DiLoCo, cell 0's replica for the
  butterfly, the one model of data-parallel training);
* ``model.island<i>.pt``: every island's own replica (under torch.distributed each rank writes the islands it holds).

Each file is ``torch.save`` of plain data — ``{"format", "which", "experiment", "step", "model_config": {...},
"state_dict": {name: tensor}, "content_blake2b"}`` — so ``torch.load(..., weights_only=True)`` reads it (no pickled
classes); the content hash (``seal.py``) is computed last and checked before anything else in the file is used.

``generate`` samples bytes autoregressively: the logits of the last position, divided by the temperature, restricted
to the ``top_k`` most likely bytes (0 = all 256), sampled with a seeded generator; the context is the last
``model.seq_len`` bytes (the positions the model was trained on).
"""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import torch

from islands_kit.config import ConfigError, ExperimentConfig, ModelConfig, _check, from_dict
from islands_kit.io import RESULT_FILE, atomic_write_bytes
from islands_kit.model import ByteTransformer
from islands_kit.train.checkpoint import check_depth, check_records
from islands_kit.train.preflight import check_memory, check_tensors
from islands_kit.train.seal import check_seal, seal

FORMAT = "islands_kit.model/2"
DEPLOYED = "model.pt"


def island_file(i: int) -> str:
    return f"model.island{i}.pt"


def _write(path: Path, which: str, experiment: str, step: int, model_cfg: ModelConfig,
           state: dict[str, torch.Tensor]) -> None:
    import io

    payload = {"format": FORMAT, "which": which, "experiment": experiment, "step": int(step),
               "model_config": dataclasses.asdict(model_cfg),
               "state_dict": {k: v.detach().cpu().clone() for k, v in state.items()}}
    buf = io.BytesIO()
    torch.save(seal(payload), buf)  # the content hash, computed last
    atomic_write_bytes(path, buf.getvalue())


def save_final_models(out_dir: str | Path, cfg: ExperimentConfig, step: int, replicas: dict[int, torch.nn.Module],
                      deployed: torch.nn.Module | None) -> list[Path]:
    """Write the replica of every island this process holds and, where given (the writing process), the deployed
    model."""
    out = Path(out_dir)
    paths = []
    for i, m in sorted(replicas.items()):
        p = out / island_file(i)
        _write(p, f"island {i} ({cfg.islands[i].name})", cfg.experiment, step, cfg.model, m.state_dict())
        paths.append(p)
    if deployed is not None:
        p = out / DEPLOYED
        _write(p, "deployed", cfg.experiment, step, cfg.model, deployed.state_dict())
        paths.append(p)
    return paths


def load_model(run_dir: str | Path, island: int | None = None) -> tuple[ByteTransformer, dict[str, Any]]:
    """The model saved in ``run_dir`` (the deployed one, or island ``island``'s replica), in eval mode, with the
    file's metadata. Everything the file claims is checked before the model is built: its config (every
    ``ModelConfig`` rule, and its weights must fit in free memory) and every tensor's name and shape against the
    model that config makes (counted on the meta device, nothing allocated). ConfigError naming the file and the
    field or tensor; a folder without result.json (a run that did not finish) is refused too."""
    d = Path(run_dir)
    p = d / (DEPLOYED if island is None else island_file(island))
    if not d.is_dir():
        raise ConfigError(f"sample: the folder {d} does not exist (give a finished run's folder, e.g. "
                          "runs/two_site-smoke-s0)")
    if not p.is_file():
        have = sorted(q.name for q in d.glob("model*.pt")) if d.is_dir() else []
        raise ConfigError(f"sample: no {p.name} in {d} (a finished run writes model.pt and model.island<i>.pt; "
                          f"found: {', '.join(have) or 'none'})")
    if not (d / RESULT_FILE).is_file():
        raise ConfigError(f"sample: {d} is not a finished run (no {RESULT_FILE}: the run stopped before its end)")
    check_records(p, f"sample: {p}")
    try:  # mmap: the tensors stay on disk until the checks below have passed
        payload = torch.load(p, map_location="cpu", weights_only=True, mmap=True)
    except Exception as e:  # noqa: BLE001 - truncated file, not a torch file, an object weights_only refuses
        raise ConfigError(f"sample: {p} is not a model file ({type(e).__name__}: {e})") from None
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise ConfigError(f"sample: {p} is not an {FORMAT} file")
    check_depth(payload, f"sample: {p}")
    check_seal(payload, f"sample: {p}")
    model_cfg = _model_config(payload.get("model_config"), p)
    check_memory(model_cfg, 0, torch.device("cpu"), where=f"sample: {p}: ")
    state = payload.get("state_dict")
    if not isinstance(state, dict):
        raise ConfigError(f"sample: {p} has no state_dict mapping")
    with torch.device("meta"):
        expected = ByteTransformer(model_cfg).state_dict()
    check_tensors(expected, state, f"sample: {p}")
    model = ByteTransformer(model_cfg)
    model.load_state_dict(state)
    model.eval()
    meta = {k: v for k, v in payload.items() if k != "state_dict"}
    return model, meta


def _model_config(d: Any, p: Path) -> ModelConfig:
    """The file's ``model_config`` through the config's own typed builder (unknown keys, types and ranges)."""
    if not isinstance(d, dict):
        raise ConfigError(f"sample: {p} has no model_config mapping")
    try:
        return from_dict(ModelConfig, d, "model.")
    except ConfigError as e:
        raise ConfigError(f"sample: {p}: {e}") from None



@torch.no_grad()
def generate(model: ByteTransformer, prompt: bytes, max_bytes: int = 256, temperature: float = 1.0, top_k: int = 0,
             seed: int = 0) -> bytes:
    """``max_bytes`` bytes sampled after ``prompt`` (temperature 0 = greedy: the most likely byte each time)."""
    _check(isinstance(max_bytes, int) and max_bytes >= 1, "max_bytes", "must be an integer >= 1", max_bytes)
    _check(temperature >= 0, "temperature", "must be >= 0 (0 = greedy)", temperature)
    _check(isinstance(top_k, int) and 0 <= top_k <= 256, "top_k", "must be an integer in [0, 256] (0 = all)", top_k)
    _check(len(prompt) >= 1, "prompt", "must hold at least one byte", prompt)
    T = model.cfg.seq_len
    gen = torch.Generator().manual_seed(seed)
    seq = list(prompt)
    out = bytearray()
    for _ in range(max_bytes):
        ctx = torch.tensor([seq[-T:]], dtype=torch.long)  # (1, t <= seq_len)
        logits = model(ctx).logits[0, -1].float()  # (256,)
        if temperature == 0:
            nxt = int(logits.argmax())
        else:
            logits = logits / temperature
            if top_k:
                kth = torch.topk(logits, top_k).values[-1]
                logits = logits.masked_fill(logits < kth, float("-inf"))
            nxt = int(torch.multinomial(torch.softmax(logits, -1), 1, generator=gen))
        seq.append(nxt)
        out.append(nxt)
    return bytes(out)


def printable(data: bytes) -> str:
    """Sampled bytes as text safe for a terminal: UTF-8 where it decodes, newlines and tabs kept, every other control
    character (ESC, BEL, backspace, ...; a young model emits them) and every undecodable byte written as an escape
    such as ``\\x1b``, so a sample cannot move the cursor or recolour the terminal."""
    out = []
    text = data.decode("utf-8", "backslashreplace")
    for ch in text:
        out.append(ch if ch in "\n\t" or ch.isprintable() else f"\\x{ord(ch):02x}" if ord(ch) < 256
                   else f"\\u{ord(ch):04x}")
    return "".join(out)
