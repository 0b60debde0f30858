"""Seed-scale projection without training: compute utilisation of two-site Streaming DiLoCo in lock-step, of the
same fragments merged by Decoupled DiLoCo (each site at its own pace), and of synchronous data parallelism (fp32
gradient all-reduce every step) on the seed's wide-area link, side by side.

    python benchmarks/seed_scale.py [--seeds 3] [--windows 4]

Every row simulates ``--windows`` H-step windows of streaming and a few DDP steps on the same link model (see
islands_kit/projection/seed_scale.py for the assumptions: 32B total / 3B active params, 256 experts top-8, 48 layers,
the hardware table's peak and MFU, 4M-token global batch, H=50, P=16, int4 fragments; lock-step and DDP are priced by
the training loop's clock, ledger and ring all-reduce, projection/lockstep.py). "ceiling" is the utilisation on an infinitely fast link (the
compute balance between the sites); "link eff." = utilisation / ceiling isolates what the link costs. "decoupled"
replays training's own decoupled schedule (projection/decoupled.py: sync/decoupled.py on stand-in fragments) over the
same span of the global schedule (``--windows`` x H steps of the faster site, the steady state: no closing merges)
with quorum = both sites unless the row says otherwise (τ does not apply). A decoupled site never waits: a round it is
not ready for (its last merge of that fragment has not landed) is skipped and its progress rides in its next
contribution. "goodput" = merged tokens per second / every site at full speed, "late" = contributions that missed
their merge, "n/ready" = rounds a site was not ready for, "merges" = merges applied in the span. Figures are medians
over ``--seeds`` link seeds. Goals: streaming >= 99% on transpacific-25g; decoupled >= 95% on the 3:2 rows.
"""
from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

from islands_kit.projection import seed_scale_projection

H100_A100 = ("h100", "a100")  # islands.HARDWARE profiles

SCENARIOS: list[tuple[str, dict[str, Any]]] = [
    ("balanced H100+H100, tau=1", dict(batch_share="balanced")),
    ("3:2 H100+H100, tau=1 (default)", dict()),
    ("3:2 H100+A100, tau=1", dict(hardware=H100_A100)),
    ("balanced H100+A100, tau=1", dict(hardware=H100_A100, batch_share="balanced")),
    ("balanced, tau=0 (blocking)", dict(batch_share="balanced", tau=0)),
    ("balanced, tau=2", dict(batch_share="balanced", tau=2)),
    ("balanced, tau=5", dict(batch_share="balanced", tau=5)),
    ("balanced, routing blocking (routing_tau=0)", dict(batch_share="balanced", routing_tau=0)),
    ("balanced, 1% chunk loss", dict(batch_share="balanced", link_overrides=dict(loss_prob=0.01))),
    # naive DDP never completes at 1% chunk loss (P(clean 128 GB attempt) ~ 1e-133): streaming only
    ("balanced, naive transfers, 1% loss", dict(batch_share="balanced", schedules=("streaming", "decoupled"),
                                                link_overrides=dict(loss_prob=0.01, method="naive"))),
    ("balanced, consumer-1g link", dict(batch_share="balanced", link_preset="consumer-1g")),
    # forward error correction: 4 parity chunks per 32 (13% more bytes) instead of resend round trips
    ("balanced, tau=1, FEC 32+4", dict(batch_share="balanced", link_overrides=dict(fec_group=32, fec_parity=4))),
    ("balanced, 1% chunk loss, FEC 32+4", dict(batch_share="balanced",
                                               link_overrides=dict(loss_prob=0.01, fec_group=32, fec_parity=4))),
    # decoupled only: a quorum of one site (the synchroniser's own), with and without a grace window for the other
    ("3:2 H100+A100, 1% loss, quorum 1, grace 0", dict(hardware=H100_A100, quorum=1, grace_s=0.0,
                                                       schedules=("decoupled",), link_overrides=dict(loss_prob=0.01))),
    ("3:2 H100+A100, 1% loss, quorum 1, grace 2s", dict(hardware=H100_A100, quorum=1, grace_s=2.0,
                                                        schedules=("decoupled",), link_overrides=dict(loss_prob=0.01))),
    ("balanced, consumer-1g link, quorum 1, grace 0", dict(batch_share="balanced", link_preset="consumer-1g", quorum=1,
                                                           grace_s=0.0, schedules=("decoupled",))),
]


def cell(x: float, width: int, fmt: str) -> str:
    """``x`` formatted, or a dash where the schedule was not simulated."""
    return f"{'—' if x != x else format(x, fmt):>{width}s}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--windows", type=int, default=4, help="H-step windows of streaming per run")
    ap.add_argument("--ddp-steps", type=int, default=4)
    ap.add_argument("--only", default="", help="run only the scenarios whose label contains this text")
    args = ap.parse_args()
    base = seed_scale_projection(n_windows=1, ddp_steps=1, schedules=("streaming",))  # sizes only
    print(f"fragment {base['fragment_bytes'] / 1e9:.3f} GB, routing {base['routing_bytes']} B/step, "
          f"DDP {base['ddp_bytes_per_direction'] / 1e9:.0f} GB per direction per step")
    print(f"{'scenario':46s} {'step s (A/B)':>13s} {'stream util':>11s} {'ceiling':>8s} {'link eff.':>9s} "
          f"{'frag p99 s':>10s} {'decoupled':>9s} {'goodput':>8s} {'late':>5s} {'n/ready':>7s} {'merges':>6s} {'DDP util':>9s} "
          f"{'stream/DDP':>10s}")
    t0 = time.time()
    for label, kw in [(l, kw) for l, kw in SCENARIOS if args.only in l]:
        runs = [seed_scale_projection(n_windows=args.windows, ddp_steps=args.ddp_steps, seed=s, **kw)
                for s in range(args.seeds)]
        def med(path: str) -> float:
            """Median over seeds of a dotted entry of the projection's result (nan where not simulated)."""
            vals = []
            for r in runs:
                v: Any = r
                for k in path.split("."):
                    v = None if v is None else v[k]
                if v is not None:
                    vals.append(v)
            return statistics.median(vals) if vals else float("nan")

        st = runs[0]["step_time_s"]
        print(f"{label:46s} {f'{st[0]:.3f}/{st[1]:.3f}':>13s} {cell(med('streaming.compute_utilization'), 11, '.4f')} "
              f"{cell(med('streaming.utilization_infinite_link'), 8, '.4f')} "
              f"{cell(med('streaming.link_efficiency'), 9, '.4f')} "
              f"{cell(med('streaming.channels.fragments.p99_s'), 10, '.3f')} "
              f"{cell(med('decoupled.compute_utilization'), 9, '.4f')} {cell(med('decoupled.goodput'), 8, '.4f')} "
              f"{cell(med('decoupled.late_contributions'), 5, '.0f')} "
              f"{cell(med('decoupled.not_ready_rounds'), 7, '.0f')} {cell(med('decoupled.n_merges'), 6, '.0f')} "
              f"{cell(med('ddp.compute_utilization'), 9, '.4f')} "
              f"{cell(med('utilization_ratio'), 10, '.1f')}")
    print(f"({time.time() - t0:.0f} s)")


if __name__ == "__main__":
    main()
