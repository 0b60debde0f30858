"""The scaling knobs of a study (beside ``batch``, protocol/batch.py): one value each, resolved into ``--set`` keys.

* ``width`` — the model's d_model. Everything that should scale with it follows the preset's shape: ``d_expert`` =
  width x (d_expert / d_model of the preset), ``n_heads`` = max(2, round(width x n_heads / d_model)), so the head size
  stays near the preset's (the demo: 64 wide, 2 heads of 32, d_expert 64 → width 32: 2 heads of 16, d_expert 32;
  48: 2 of 24; 96: 3 of 32). Depth, experts, top-k and the context length stay. A width whose heads do not split it
  into even head sizes (RoPE) is refused, naming ``width``.
* ``lr_scale`` — the inner lr times this factor (a per-size lr grid: ``lr_scale = ["0.707", "1", "1.41"]``); under
  ``optim.name=muon`` every group's lr (``optim.muon.lr`` and the AdamW group's).
* ``tokens_per_active_param`` — the training tokens as a multiple of the model's active parameters (the published
  study's and the demo's budget axis: the demo trains 1200 x 40 x 128 bytes on 201,280 active parameters, 30.5).
  ``steps`` becomes tokens / (global batch x seq_len), rounded to a multiple of 4 (so ``batch_scale`` 0.5 and 2 stay
  whole: at most 2 steps off, under 1% from 300 steps up); the warm-up and the evaluation, log and checkpoint cadence
  scale with the steps (the schedule keeps its shape); the sync window ``sync.H`` stays in steps.
* ``length`` — ``steps`` itself, with the same step-counted settings scaled (the length axis: everything else kept).
* ``equal_tokens`` — ``"true"``: the steps planned so that the tokens the islands *process* reach the tokens the
  config plans (steps x global batch x seq_len) — a decoupled run whose islands skip throttled steps (eclipses:
  ``train/orbit.py``, ``steps_for_tokens``) plans more ticks, at most one tick past the budget; the warm-up and the
  cadences scale with the steps, as for ``length``. Applied last (after the batch); a run that throttles nothing
  keeps its steps.
* ``batch_scale`` — the global batch as a multiple of the point's, at equal tokens (protocol/batch.py: the steps and
  everything counted in steps move with it, H included, so the outer steps per fragment are unchanged); a grid key,
  so one grid tunes the batch at every size.

**Regime** (DESIGN.md, "Regime"): every trial outside the ``smoke`` preset keeps >= 24 outer steps per fragment
(steps // sync.H, the strategies with outer steps). The outer steps per fragment are tokens / (global batch x seq_len x
H), which ``batch`` leaves alone, so the token budget alone decides them: when a point's tokens would leave fewer
than 24, the ``tokens_per_active_param`` knob first shrinks the global batch (keeping H in steps) to the largest whole
split of the preset's islands (every island's share and micro-batch whole) that keeps the regime, as the published
study's batch shrinks with its model; only below the smallest whole split does it shrink H to steps // 24. The
resolution depends only on the islands, H and the tokens, so a baseline and its DiLoCo arm at one point get the same
batch. Where even that cannot keep the regime a ``KnobError`` names the field and the rule.
"""
from __future__ import annotations

from fractions import Fraction
from typing import Any

from islands_kit.config import ConfigError, ExperimentConfig, apply_overrides
from islands_kit.model.transformer import active_params as model_active_params
from islands_kit.protocol.batch import BATCH_KEY, at_global_batch, global_batch
from islands_kit.train.orbit import steps_for_tokens

WIDTH, LR_SCALE, TOKENS, LENGTH, BATCH_SCALE = "width", "lr_scale", "tokens_per_active_param", "length", "batch_scale"
EQUAL_TOKENS = "equal_tokens"
KNOBS = (WIDTH, LR_SCALE, TOKENS, LENGTH, BATCH_SCALE, EQUAL_TOKENS)
MIN_OUTER_STEPS = 24  # per fragment, every preset but smoke (DESIGN.md, "Regime")
REGIME_EXEMPT = ("smoke",)
STEP_MULTIPLE = 4
# step-counted settings that follow the length of a run (a schedule kept in shape); sync.H does not (it is the cadence)
SCHEDULE_KEYS = ("optim.warmup_steps", "eval_every", "log_every", "checkpoint_every")


class KnobError(ConfigError):
    """A knob's value cannot be made (or not in the regime); the message names the knob and the rule."""


def active_params(cfg: ExperimentConfig) -> int:
    """Parameters one token uses (the model's ``num_active_params``, from the config alone): embedding and head,
    per block attention, norms and the MoE's active part, the final norm."""
    return model_active_params(cfg.model)


def total_params(cfg: ExperimentConfig) -> int:
    """Every parameter of the model (from the config alone): the active count with every expert in place of the
    routed top-k (the router and shared experts are counted once either way)."""
    m = cfg.model
    experts = (m.n_experts - m.top_k) * 3 * m.d_model * m.d_expert if m.n_experts > 1 else 0
    return active_params(cfg) + m.n_layers * experts


def tokens_of(cfg: ExperimentConfig) -> int:
    return cfg.steps * global_batch(cfg) * cfg.model.seq_len


def outer_steps(cfg: ExperimentConfig) -> int | None:
    """Outer steps per fragment a run of ``cfg`` takes (steps // H); None for a synchronous strategy (no outer steps:
    the registry's ``synchronous`` trait)."""
    return cfg.steps // cfg.sync.H if not cfg.sync.traits.synchronous and cfg.sync.H > 0 else None


def _number(v: str, name: str, positive_int: bool = False) -> float:
    try:
        x = float(v)
    except ValueError:
        raise KnobError(f"{name}: must be a number (got {v!r})") from None
    if not x > 0 or (positive_int and x != int(x)):
        raise KnobError(f"{name}: must be a positive {'whole number' if positive_int else 'number'} (got {v!r})")
    return x


def width_sets(cfg: ExperimentConfig, width: int) -> dict[str, str]:
    m = cfg.model
    heads = max(2, round(width * m.n_heads / m.d_model))
    d_expert = max(1, round(width * m.d_expert / m.d_model))
    if width % heads or (width // heads) % 2:
        raise KnobError(f"{WIDTH}: {width} does not split into {heads} heads of an even size (heads = max(2, "
                        f"round(width x {m.n_heads} / {m.d_model})); RoPE needs even head sizes): pick another width")
    return {"model.d_model": str(width), "model.n_heads": str(heads), "model.d_expert": str(d_expert)}


def _schedule(cfg: ExperimentConfig, steps: int) -> dict[str, str]:
    """``steps`` with the warm-up and the cadences scaled from ``cfg``'s (0 = off stays 0; at least 1 otherwise)."""
    f = Fraction(steps, cfg.steps)
    out = {"steps": str(steps)}
    for key in SCHEDULE_KEYS:
        obj: Any = cfg
        for part in key.split("."):
            obj = getattr(obj, part)
        if int(obj) > 0:
            out[key] = str(max(1, round(int(obj) * f)))
    return out


def _ladder(cfg: ExperimentConfig) -> list[int]:
    """Global batches up to the preset's whose every island share and micro-batch is whole, largest first."""
    old = global_batch(cfg)
    out = []
    for b in range(old, 0, -1):
        f = Fraction(b, old)
        if all((getattr(i, n) * f).denominator == 1 for i in cfg.islands for n in ("batch_size", "micro_batch_size")):
            out.append(b)
    return out


def _steps_for(tokens: float, batch: int, seq: int) -> int:
    return max(STEP_MULTIPLE, STEP_MULTIPLE * round(tokens / (batch * seq * STEP_MULTIPLE)))


def tokens_sets(cfg: ExperimentConfig, tpap: float, preset: str) -> dict[str, str]:
    """Steps (and, to keep the regime, the batch and then H) for ``tpap`` tokens per active parameter."""
    tokens = tpap * active_params(cfg)
    seq, H = cfg.model.seq_len, cfg.sync.H
    ladder = _ladder(cfg)
    batch = ladder[0]
    if preset not in REGIME_EXEMPT and H > 0:
        fits = [b for b in ladder if _steps_for(tokens, b, seq) // H >= MIN_OUTER_STEPS]
        batch = fits[0] if fits else ladder[-1]
    steps = _steps_for(tokens, batch, seq)
    f = Fraction(batch, ladder[0])
    out = {f"islands.{i}.{n}": str(int(getattr(isl, n) * f)) for i, isl in enumerate(cfg.islands)
           for n in ("batch_size", "micro_batch_size")} if batch != ladder[0] else {}
    out.update(_schedule(cfg, steps))
    if preset not in REGIME_EXEMPT and H > 0 and steps // H < MIN_OUTER_STEPS:
        new_h = steps // MIN_OUTER_STEPS
        if new_h < 1:
            raise KnobError(f"{TOKENS}: {tpap:g} tokens per active parameter train {steps} steps even at the smallest "
                            f"whole batch ({batch}): fewer than {MIN_OUTER_STEPS} outer steps per fragment at any H "
                            "(the regime, DESIGN.md): raise the budget")
        out["sync.H"] = str(new_h)
    return out


def length_sets(cfg: ExperimentConfig, steps: int) -> dict[str, str]:
    return _schedule(cfg, steps)


def check_regime(cfg: ExperimentConfig, preset: str, where: str = "trial") -> None:
    """KnobError unless ``cfg`` keeps >= 24 outer steps per fragment (presets other than smoke)."""
    n = outer_steps(cfg)
    if preset in REGIME_EXEMPT or n is None or n >= MIN_OUTER_STEPS:
        return
    raise KnobError(f"{where}: {cfg.steps} steps at sync.H={cfg.sync.H} give {n} outer steps per fragment, under the "
                    f"regime's {MIN_OUTER_STEPS} (DESIGN.md, 'Regime'): lengthen the run (length, "
                    f"{TOKENS}) or shrink sync.H")


def resolve(base: ExperimentConfig, preset: str, plain: dict[str, str], knobs: dict[str, str]) -> dict[str, str]:
    """The ``--set`` overrides of ``plain`` settings plus ``knobs`` (KNOBS and ``batch``), applied in order — width,
    then the length (``tokens_per_active_param`` or ``length``), ``lr_scale``, then the batch at equal tokens
    (``batch`` or ``batch_scale``), then ``equal_tokens`` — and the regime checked on the result."""
    unknown = sorted(set(knobs) - {*KNOBS, BATCH_KEY})
    if unknown:
        raise KnobError(f"{', '.join(unknown)}: not a knob ({', '.join((*KNOBS, BATCH_KEY))})")
    if TOKENS in knobs and LENGTH in knobs:
        raise KnobError(f"{TOKENS}, {LENGTH}: set one of the two (each decides the steps)")
    if BATCH_KEY in knobs and BATCH_SCALE in knobs:
        raise KnobError(f"{BATCH_KEY}, {BATCH_SCALE}: set one of the two (each decides the global batch)")
    out = dict(plain)
    cfg = apply_overrides(base, out)
    if WIDTH in knobs:
        out.update(width_sets(cfg, int(_number(knobs[WIDTH], WIDTH, positive_int=True))))
        cfg = apply_overrides(base, out)
    if TOKENS in knobs:
        out.update(tokens_sets(cfg, _number(knobs[TOKENS], TOKENS), preset))
        cfg = apply_overrides(base, out)
    if LENGTH in knobs:
        out.update(length_sets(cfg, int(_number(knobs[LENGTH], LENGTH, positive_int=True))))
        cfg = apply_overrides(base, out)
    if LR_SCALE in knobs:
        scale = _number(knobs[LR_SCALE], LR_SCALE)
        out["optim.lr"] = f"{cfg.optim.lr * scale:.6g}"
        if cfg.optim.name == "muon":  # every group's lr: Muon's, and the AdamW group's own where it has one
            out["optim.muon.lr"] = f"{cfg.optim.muon.lr * scale:.6g}"
            if cfg.optim.muon.adamw_lr > 0:
                out["optim.muon.adamw_lr"] = f"{cfg.optim.muon.adamw_lr * scale:.6g}"
        cfg = apply_overrides(base, out)
    if BATCH_KEY in knobs or BATCH_SCALE in knobs:
        if BATCH_SCALE in knobs:
            b = global_batch(cfg) * _number(knobs[BATCH_SCALE], BATCH_SCALE)
            if b != int(b):
                raise KnobError(f"{BATCH_SCALE}: {knobs[BATCH_SCALE]} x the point's global batch {global_batch(cfg)} "
                                "is not a whole number of sequences")
            batch = int(b)
        else:
            batch = int(_number(knobs[BATCH_KEY], BATCH_KEY, positive_int=True))
        try:
            out.update(at_global_batch(cfg, batch))
        except ConfigError as e:
            if BATCH_KEY in knobs:
                raise
            raise KnobError(f"{BATCH_SCALE}: {knobs[BATCH_SCALE]} x the point's global batch {global_batch(cfg)} = "
                            f"{batch}, which breaks the batch rule ({e})") from None
        cfg = apply_overrides(base, out)
    if EQUAL_TOKENS in knobs:
        if knobs[EQUAL_TOKENS] not in ("true", "false"):
            raise KnobError(f"{EQUAL_TOKENS}: must be true or false (got {knobs[EQUAL_TOKENS]!r})")
        steps = steps_for_tokens(cfg, tokens_of(cfg)) if knobs[EQUAL_TOKENS] == "true" else cfg.steps
        if steps != cfg.steps:
            out.update(_schedule(cfg, steps))
            cfg = apply_overrides(base, out)
    if set(knobs) - {BATCH_KEY, EQUAL_TOKENS}:  # the scaling knobs' trials (a plain study's rows may leave the regime on purpose)
        check_regime(cfg, preset, ", ".join(f"{k}={v}" for k, v in knobs.items()))
    return out
