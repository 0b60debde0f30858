#!/usr/bin/env bash
# A real emulated WAN between two islands: two network namespaces joined by a veth pair, `tc netem` delay / rate /
# loss on both ends, one islands_kit process per namespace talking gloo over that link (rank 0 = island 0 in namespace
# A, rank 1 = island 1 in namespace B). Where the simulator *models* the link, this puts the real TCP stack behind it.
#
#   sudo scripts/wan_netns.sh [--delay-ms 72] [--jitter-ms 5] [--rate 100mbit] [--loss 0] [--rate-only-ok]
#                             [-- RUN ARGS...]
#
# RUN ARGS default to: two_site --preset smoke --out runs/two_site-wan   (a config with exactly 2 processes).
# --delay-ms is one way, applied on each end, so the ping RTT is about twice it (72 ms -> ~145 ms: the seed's link).
# Skips with a message and exit code 0 when not root, when ip/tc are missing, or when namespaces / netem are not
# available (e.g. an unprivileged container). Without the sch_netem kernel module, --rate-only-ok runs anyway with
# only the rate limit (tc tbf; no delay, jitter or loss). Everything it creates is removed on exit.
set -euo pipefail

DELAY_MS=72
JITTER_MS=5
RATE=100mbit
LOSS=0
RATE_ONLY_OK=0
PY=${PYTHON:-python}
while [ $# -gt 0 ]; do
  case "$1" in
    --delay-ms) DELAY_MS=$2; shift 2 ;;
    --jitter-ms) JITTER_MS=$2; shift 2 ;;
    --rate) RATE=$2; shift 2 ;;
    --loss) LOSS=$2; shift 2 ;;
    --rate-only-ok) RATE_ONLY_OK=1; shift ;;
    --) shift; break ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    *) echo "wan_netns.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
if [ $# -eq 0 ]; then set -- two_site --preset smoke --out runs/two_site-wan; fi

skip() { echo "wan_netns.sh: skipped: $*" >&2; exit 0; }
[ "$(id -u)" = 0 ] || skip "needs root (network namespaces and tc); try: sudo $0"
command -v ip >/dev/null 2>&1 || skip "iproute2 'ip' not found (apt-get install iproute2)"
command -v tc >/dev/null 2>&1 || skip "'tc' not found (apt-get install iproute2)"

NS_A="ik_wan_a_$$"
NS_B="ik_wan_b_$$"
ADDR_A=10.77.0.1
ADDR_B=10.77.0.2
PIDS=()
cleanup() {
  for p in "${PIDS[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null || true; done
  ip netns del "$NS_A" 2>/dev/null || true
  ip netns del "$NS_B" 2>/dev/null || true
}
trap cleanup EXIT

ip netns add "$NS_A" 2>/dev/null || skip "cannot create network namespaces here (needs CAP_SYS_ADMIN)"
ip netns add "$NS_B"
ip link add ikwa type veth peer name ikwb 2>/dev/null || skip "cannot create a veth pair"
ip link set ikwa netns "$NS_A"
ip link set ikwb netns "$NS_B"
ip -n "$NS_A" addr add "$ADDR_A/24" dev ikwa
ip -n "$NS_B" addr add "$ADDR_B/24" dev ikwb
for ns in "$NS_A" "$NS_B"; do ip -n "$ns" link set lo up; done
ip -n "$NS_A" link set ikwa up
ip -n "$NS_B" link set ikwb up
NETEM=(netem delay "${DELAY_MS}ms" "${JITTER_MS}ms" rate "$RATE" loss "${LOSS}%" limit 100000)
TBF=(tbf rate "$RATE" burst 64kb latency 1s)
if tc -n "$NS_A" qdisc add dev ikwa root "${NETEM[@]}" 2>/dev/null; then
  tc -n "$NS_B" qdisc add dev ikwb root "${NETEM[@]}"
  echo "wan_netns.sh: link $ADDR_A <-> $ADDR_B: one-way delay ${DELAY_MS} ms +- ${JITTER_MS} ms, rate $RATE, loss ${LOSS}% each way"
elif [ "$RATE_ONLY_OK" = 1 ] && tc -n "$NS_A" qdisc add dev ikwa root "${TBF[@]}" 2>/dev/null; then
  tc -n "$NS_B" qdisc add dev ikwb root "${TBF[@]}"
  echo "wan_netns.sh: tc netem unavailable; link $ADDR_A <-> $ADDR_B rate-limited to $RATE each way (tbf), no delay/loss"
else
  skip "tc netem unavailable (kernel module sch_netem missing?); --rate-only-ok runs with a rate limit only"
fi
if command -v ping >/dev/null 2>&1; then ip netns exec "$NS_A" ping -c 3 -i 0.2 -q "$ADDR_B" | tail -1 || true; fi

PORT=$(( 20000 + $$ % 20000 ))
COMMON=(WORLD_SIZE=2 MASTER_ADDR="$ADDR_A" MASTER_PORT="$PORT" OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}")
start=$(date +%s)
ip netns exec "$NS_A" env "${COMMON[@]}" RANK=0 LOCAL_RANK=0 GLOO_SOCKET_IFNAME=ikwa "$PY" -m islands_kit run "$@" &
PIDS+=($!)
ip netns exec "$NS_B" env "${COMMON[@]}" RANK=1 LOCAL_RANK=0 GLOO_SOCKET_IFNAME=ikwb "$PY" -m islands_kit run "$@" &
PIDS+=($!)
rc=0
for p in "${PIDS[@]}"; do wait "$p" || rc=$?; done
PIDS=()
echo "wan_netns.sh: both islands finished in $(( $(date +%s) - start )) s wall (exit code $rc)"
tc -n "$NS_A" -s qdisc show dev ikwa | sed -n '1,3p'
exit "$rc"
