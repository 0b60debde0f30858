"""The seed-scale projection: two-site Streaming DiLoCo (lock-step and decoupled) against synchronous data parallelism
on a wide-area link, at the seed run's size, without training.

Every price comes from what training uses: step times from ``islands.step_flops`` and the ``islands.HARDWARE`` table,
payload sizes from the codecs (``Codec.nbytes``), the schedules those of training's own drivers and strategies run on
stand-in islands (``projection/lockstep.py``, ``projection/decoupled.py``), both pinned equal to training runs by
tests/test_projection.py, the link model of ``comm/link``.

Assumptions (every number is an argument)
-----------------------------------------
* Model: 32e9 total parameters, 256 routed experts, top-8, 48 layers, width 2048, 4096-byte sequences. Active
  parameters ≈ 3e9: with ~2e9 outside the routed experts and 8/256 of the ~30e9 routed-expert parameters, ~9–10%
  active — the ratio of Qwen3-30B-A3B (30.5B total / 3.3B active, 128 experts top-8, width 2048, 48 layers).
* Compute: the simulated clock's FLOPs per token, 6 · N_active + 12 · n_layers · d_model · seq_len (with attention),
  at the hardware profile's peak and MFU (``islands.HARDWARE``). Intra-site communication is inside the MFU.
* Sites: 160 GPUs each; global batch 4e6 tokens per inner step split 3:2 between them. With equal GPUs the split
  makes the sites' step times differ, so the faster site idles at every deadline even on an infinitely fast link;
  ``batch_share="balanced"`` splits the batch in proportion to site throughput instead. The projection reports the
  infinite-link utilisation (the compute-balance ceiling) beside the real one, and their ratio, ``link_efficiency``,
  which isolates what the link costs.
* Streaming DiLoCo: H = 50, P = 16 equal fragments (≈ 3 layers each for 48 layers), τ = 1; a fragment's outer
  gradient crosses the link through ``codec`` (int4 with one float32 scale per block of 128).
* Routing statistics: n_layers · n_experts fp32 loads every step, all-reduced on their own channel and used
  ``routing_tau`` steps late (``sync.routing.RoutingSync``; 0 makes every step wait for them).
* DDP: the fp32 gradient all-reduced every step and waited for (``sync.ddp``), no overlap with the backward.
* The steady state: no closing sync at the end of the simulated windows.
"""
from __future__ import annotations

from dataclasses import asdict
from typing import Any, Sequence

from islands_kit.comm.codecs import get_codec
from islands_kit.comm.link import LinkModel, effective_rate_bps, link_config
from islands_kit.config import LinkConfig, ModelConfig, SyncConfig
from islands_kit.projection.decoupled import DecoupledPlan, DecoupledResult, price_decoupled
from islands_kit.projection.lockstep import LockStepPlan, price_lock_step, summary
from islands_kit.sync.diloco_spec import DiLoCoConfig
from islands_kit.train.islands import HARDWARE, HardwareProfile, step_flops

__all__ = ["ideal_link", "seed_scale_projection", "site_step_times"]

SCHEDULES = ("streaming", "ddp", "decoupled")


def ideal_link() -> LinkConfig:
    """A link with (practically) infinite bandwidth and no latency, jitter, tail or loss: the compute-only ceiling."""
    return link_config("intra-dc", bandwidth_bps=1e18, rtt_s=0.0, jitter_sigma=0.0, tail_prob=0.0, loss_prob=0.0,
                       corrupt_prob=0.0)


def _shares(batch_share: Sequence[float] | str, throughput: list[float]) -> list[float]:
    if batch_share == "balanced":
        return [t / sum(throughput) for t in throughput]
    if isinstance(batch_share, str):
        raise ValueError(f"batch_share: must be a list of fractions or 'balanced' (got {batch_share!r})")
    share = [float(x) / sum(batch_share) for x in batch_share]
    if len(share) != len(throughput):
        raise ValueError(f"batch_share: need one per site ({len(throughput)}), got {len(share)}")
    return share


def _sites(params_active: float, n_layers: int, d_model: int, seq_len: int, n_experts: int, top_k: int,
           gpus: Sequence[int], hardware: Sequence[str], global_batch_tokens: float,
           batch_share: Sequence[float] | str) -> tuple[list[HardwareProfile], list[float], list[float], float,
                                                        list[float]]:
    """Each site's hardware profile, batch share, tokens per step, the FLOPs per token and each site's step time."""
    n = len(gpus)
    if len(hardware) != n or any(h not in HARDWARE for h in hardware):
        raise ValueError(f"hardware: need one profile of islands.HARDWARE ({', '.join(HARDWARE)}) per site ({n}), "
                         f"got {list(hardware)}")
    profiles = [HARDWARE[h] for h in hardware]
    throughput = [g * hw.peak_flops * hw.mfu for g, hw in zip(gpus, profiles)]  # achieved FLOP/s per site
    share = _shares(batch_share, throughput)
    tokens = [global_batch_tokens * s for s in share]
    shape = ModelConfig(seq_len=seq_len, d_model=d_model, n_layers=n_layers, n_heads=1, n_experts=n_experts,
                        top_k=top_k)
    flops_per_token = step_flops(shape, int(params_active), 1)
    step_time = [flops_per_token * tok / thr for tok, thr in zip(tokens, throughput)]  # batches need not be whole
    return profiles, share, tokens, flops_per_token, step_time


def site_step_times(*, params_active: float = 3e9, n_layers: int = 48, d_model: int = 2048, seq_len: int = 4096,
                    n_experts: int = 256, top_k: int = 8, gpus: Sequence[int] = (160, 160),
                    hardware: Sequence[str] = ("h100", "h100"), global_batch_tokens: float = 4e6,
                    batch_share: Sequence[float] | str = (0.6, 0.4)) -> list[float]:
    """Each site's step time (s) in the seed-scale projection (same defaults as ``seed_scale_projection``)."""
    return _sites(params_active, n_layers, d_model, seq_len, n_experts, top_k, gpus, hardware, global_batch_tokens,
                  batch_share)[4]


def seed_scale_projection(link_preset: str = "transpacific-25g", tau: int = 1, H: int = 50, n_fragments: int = 16, *,
                          params_total: float = 32e9, params_active: float = 3e9, n_layers: int = 48,
                          d_model: int = 2048, seq_len: int = 4096, n_experts: int = 256, top_k: int = 8,
                          gpus: Sequence[int] = (160, 160), hardware: Sequence[str] = ("h100", "h100"),
                          global_batch_tokens: float = 4e6, batch_share: Sequence[float] | str = (0.6, 0.4),
                          codec: str = "int4", codec_block_size: int = 128, routing_tau: int = 1,
                          n_windows: int = 4, ddp_steps: int = 6, seed: int = 0,
                          link_overrides: dict[str, Any] | None = None, quorum: int | None = None,
                          grace_s: float = 0.0, schedules: Sequence[str] = SCHEDULES) -> dict[str, Any]:
    """Utilisation of two-site Streaming DiLoCo (H, P = ``n_fragments``, τ = ``tau``) in lock-step, of the same
    fragments merged by Decoupled DiLoCo (``quorum``, ``grace_s``; τ does not apply), and of DDP, on the same link.

    Symbols as in Streaming DiLoCo (Douillard et al., 2025). Returns step times, payload sizes, and for each schedule
    the utilisation, the infinite-link ceiling, link_efficiency = utilisation / ceiling, transfer times and peak rate;
    for the decoupled one (the steady state, no closing merges) also goodput, inner steps and tokens per island, the
    rounds an island was not ready for (on the real and on the infinite link), late / dropped contributions and
    skipped merges.
    ``schedules`` picks which of "streaming", "ddp" and "decoupled" to simulate (DDP's 128 GB payloads are the slow
    part)."""
    unknown = sorted(set(schedules) - set(SCHEDULES))
    if unknown or not schedules:
        raise ValueError(f"schedules: must be a non-empty subset of {'|'.join(SCHEDULES)} (got {list(schedules)})")
    profiles, share, tokens, flops_per_token, step_time = _sites(params_active, n_layers, d_model, seq_len, n_experts,
                                                                 top_k, gpus, hardware, global_batch_tokens,
                                                                 batch_share)
    n = len(gpus)
    numel = int(params_total) // n_fragments
    frag = get_codec(codec, codec_block_size).nbytes(numel)
    fp32 = get_codec("fp32")
    routing = fp32.nbytes(n_layers * n_experts)
    grad = fp32.nbytes(int(params_total))
    cfg = link_config(link_preset, **(link_overrides or {}))
    n_stream = n_windows * H
    stream = LockStepPlan(step_time, n_stream, [frag] * n_fragments, H, tau,
                          routing_bytes=routing, routing_delay=routing_tau)
    ddp = LockStepPlan(step_time, ddp_steps, routing_bytes=routing, routing_delay=0, gradient_bytes=grad)

    def run(plan: LockStepPlan) -> dict[str, Any]:
        real = summary(price_lock_step(plan, LinkModel(cfg, seed)))
        ceiling = price_lock_step(plan, LinkModel(ideal_link(), seed)).clock.utilization()
        return {**real, "utilization_infinite_link": ceiling, "link_efficiency": real["compute_utilization"] / ceiling,
                "n_steps": plan.steps, "payload_bytes_per_step": real["payload_bytes"] / plan.steps}

    def run_decoupled() -> dict[str, Any]:
        sync = SyncConfig(strategy="diloco", mode="decoupled", H=H, n_fragments=n_fragments, codec=codec,
                          codec_block_size=codec_block_size, routing_sync=False, quorum=n if quorum is None else quorum,
                          grace_s=grace_s, diloco=DiLoCoConfig(final_codec=""))
        plan = DecoupledPlan(step_time, [round(t) for t in tokens], n_stream, [numel] * n_fragments, sync, seed)

        def sim(c: LinkConfig) -> DecoupledResult:  # the steady state: no closing merges
            return price_decoupled(plan, LinkModel(c, seed), final=False)

        real, ceiling = sim(cfg), sim(ideal_link())
        return {"compute_utilization": real.compute_utilization,
                "utilization_infinite_link": ceiling.compute_utilization,
                "link_efficiency": real.compute_utilization / ceiling.compute_utilization, "goodput": real.goodput,
                "span_s": real.span_s, "idle_s": real.idle_s, "inner_steps": real.inner_steps,
                "tokens_per_island": real.tokens_per_island, "n_merges": len(real.merges),
                "not_ready_rounds": real.not_ready_rounds, "not_ready_rounds_infinite_link": ceiling.not_ready_rounds,
                "late_contributions": real.late_contributions, "dropped_contributions": real.dropped_contributions,
                "skipped_merges": real.skipped_merges, "payload_bytes": real.payload_bytes,
                "peak_link_bytes_per_s": real.peak_link_bytes_per_s, "channels": real.channels}

    runs = {"streaming": lambda: run(stream), "ddp": lambda: run(ddp), "decoupled": run_decoupled}
    streaming, sync, decoupled = (runs[k]() if k in schedules else None for k in SCHEDULES)
    return {
        "link": asdict(cfg),
        "link_rate_bps": effective_rate_bps(cfg),
        "assumptions": {
            "params_total": params_total, "params_active": params_active, "n_layers": n_layers, "d_model": d_model,
            "seq_len": seq_len, "n_experts": n_experts, "top_k": top_k,
            "flops_per_token": flops_per_token, "gpus": list(gpus),
            "hardware": list(hardware), "peak_flops": [hw.peak_flops for hw in profiles],
            "mfu": [hw.mfu for hw in profiles], "global_batch_tokens": global_batch_tokens, "batch_share": share,
            "H": H, "n_fragments": n_fragments, "tau": tau, "codec": codec, "codec_block_size": codec_block_size,
            "routing_tau": routing_tau, "seed": seed, "quorum": n if quorum is None else quorum, "grace_s": grace_s,
        },
        "tokens_per_step": tokens,
        "step_time_s": step_time,
        "fragment_bytes": frag,
        "routing_bytes": routing,
        "ddp_bytes_per_direction": grad,
        "streaming": streaming,
        "ddp": sync,
        "decoupled": decoupled,
        "utilization_ratio": (streaming["compute_utilization"] / sync["compute_utilization"]
                              if streaming and sync else None),
    }
