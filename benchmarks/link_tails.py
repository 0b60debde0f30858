"""Tail latency of one fragment transfer on the seed's link: chunked (many connections, per-chunk resends and late-chunk
re-requests), chunked with forward error correction (k data + m parity chunks per group), and naive (one stream,
whole-payload resend), side by side on the same seeds.

    python benchmarks/link_tails.py [--transfers 1000] [--repeats 3] [--loss 0.01] [--preset transpacific-25g]
                                    [--fec 32+3 32+4 16+3]

Each repeat draws ``--transfers`` independent transfers (LinkModel seeds) per method and size, each on an idle link;
the table shows the median over repeats of p50, p99 and p99/p50 (min–max of the ratio in brackets). Goal: chunked
p99/p50 <= 1.2 for the ~1 GB fragment (32e9 params / 16 fragments at 4 bits + a float32 scale per block of 128, the int4 codec's size).
"""
from __future__ import annotations

import argparse
import statistics
import time

from islands_kit.comm.codecs import get_codec
from islands_kit.comm.link import LinkModel, closed_form_time, link_config, transfer_time_stats


def run(preset: str, loss: float, nbytes: int, method: str, seeds: range) -> dict[str, float]:
    if method.startswith("fec"):  # "fec k+m"
        k, m = (int(v) for v in method.split()[1].split("+"))
        cfg = link_config(preset, loss_prob=loss, method="chunked", fec_group=k, fec_parity=m)
    else:
        cfg = link_config(preset, loss_prob=loss, method=method)
    trs = [LinkModel(cfg, seed=s).transfer(nbytes, 0.0, 0, 1) for s in seeds]
    st = transfer_time_stats([t.duration_s for t in trs])
    st["wire_over_payload"] = statistics.fmean(t.bytes_on_wire / nbytes for t in trs)
    return st


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--transfers", type=int, default=1000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--loss", type=float, default=0.01, help="per-chunk loss probability")
    ap.add_argument("--preset", default="transpacific-25g")
    ap.add_argument("--fec", nargs="*", default=["32+3", "32+4", "16+3"], help="k+m: data+parity chunks per group")
    args = ap.parse_args()
    sizes = {"fragment 32B/16 @4b": get_codec("int4", 128).nbytes(int(32e9 / 16)), "small 64 MiB": 64 << 20}
    print(f"link {args.preset}, chunk loss {args.loss}, {args.transfers} transfers x {args.repeats} repeats")
    methods = ["chunked", *(f"fec {g}" for g in args.fec), "naive"]
    print(f"{'payload':22s} {'method':10s} {'ideal s':>8s} {'p50 s':>8s} {'p99 s':>8s} {'max s':>8s} {'p99/p50':>8s} "
          f"{'(range)':>13s} {'wire/payload':>12s}")
    t0 = time.time()
    for label, nbytes in sizes.items():
        ideal = closed_form_time(link_config(args.preset), nbytes)
        for method in methods:
            reps = [run(args.preset, args.loss, nbytes, method, range(r * args.transfers, (r + 1) * args.transfers))
                    for r in range(args.repeats)]
            ratio = [x["p99"] / x["p50"] for x in reps]
            med = {k: statistics.median(x[k] for x in reps) for k in reps[0]}
            print(f"{label:22s} {method:10s} {ideal:8.3f} {med['p50']:8.3f} {med['p99']:8.3f} {med['max']:8.3f} "
                  f"{statistics.median(ratio):8.3f} {f'[{min(ratio):.2f}-{max(ratio):.2f}]':>13s} "
                  f"{med['wire_over_payload']:12.3f}")
    print(f"({time.time() - t0:.1f} s)")


if __name__ == "__main__":
    main()
