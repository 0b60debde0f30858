"""The wide-area link section (``link.*``) and the named links (``LINK_PRESETS``)."""
from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from islands_kit.orbital.config import OrbitConfig
from islands_kit.rules import MAX_CHUNK_FAILURE, MAX_SENDS_PER_CHUNK, _check, _check_fields

# Physical ranges of a link. Rates: 1 bit/s (below any modem) to 1e18 bit/s (1000x the fastest fibre; the kit's
# "free link" stand-in for projections sits there): past them transfer times underflow to 0 or overflow to inf.
# Delays: at most an hour one way or round trip (Earth-Mars at their farthest is ~45 minutes round trip); contact
# periods and idle timeouts at most a day.
MIN_RATE_BPS, MAX_RATE_BPS = 1.0, 1e18
MAX_DELAY_S = 3600.0
MAX_PERIOD_S = 86400.0
MAX_CHUNK_BYTES = 1 << 40

SCHEDULES = ("periodic", "orbit")


@dataclass
class LinkConfig:
    """Wide-area link between islands; see islands_kit/comm/link/ for the model and ``LINK_PRESETS`` below for the
    named links."""

    preset: str = "transpacific-25g"  # named link (comm/link/); setting it sets every link field
    bandwidth_bps: float = 25e9  # bits per second
    rtt_s: float = 0.145  # base round-trip time
    jitter_sigma: float = 0.25  # log-normal body of the per-transfer extra latency (relative to rtt)
    tail_prob: float = 0.01  # probability that a chunk/transfer hits the heavy (Pareto) tail
    tail_alpha: float = 1.5  # Pareto shape of the tail
    tail_scale_s: float = 0.2  # Pareto scale (seconds)
    loss_prob: float = 0.0  # per-chunk loss probability
    corrupt_prob: float = 0.0  # per-chunk corruption probability (detected by checksum)
    n_connections: int = 8  # parallel connections a chunked transfer spreads over
    warm: bool = True  # keep connections warm (no slow start)
    idle_timeout_s: float = 1.0  # an idle connection falls back to cold after this long
    init_cwnd_bytes: int = 14600  # TCP initial window (10 MSS)
    pacing_bps: float = 0.0  # 0 = no pacing cap
    chunk_bytes: int = 4 << 20  # chunk size of a chunked transfer
    method: str = "chunked"  # chunked | naive
    schedule: str = "periodic"  # contact schedule: periodic (contact_period_s, every pair alike) | orbit (link.orbit)
    contact_period_s: float = 0.0  # periodic, >0: intermittent contact; link up for contact_fraction of each period
    contact_fraction: float = 1.0  # share of each contact period the link is up
    orbit: OrbitConfig = field(default_factory=OrbitConfig)  # schedule=orbit: per-link windows from orbit geometry
    fec_group: int = 16  # chunked + FEC: data chunks per erasure-coded group
    fec_parity: int = 0  # parity chunks per group (any fec_group of the group's chunks rebuild it); 0 = no FEC

    def __post_init__(self) -> None:
        p = "link."
        _check_fields(self, p)
        _check(MIN_RATE_BPS <= self.bandwidth_bps <= MAX_RATE_BPS, p + "bandwidth_bps",
               f"must be in [{MIN_RATE_BPS:g}, {MAX_RATE_BPS:g}] bits per second (a physical link)", self.bandwidth_bps)
        _check(0 <= self.rtt_s <= MAX_DELAY_S, p + "rtt_s", f"must be in [0, {MAX_DELAY_S:g}] s (an hour: farther "
               "than Earth-Mars at their farthest)", self.rtt_s)
        _check(0 <= self.jitter_sigma <= 4, p + "jitter_sigma", "must be >= 0 and <= 4 (the late-chunk threshold "
               "rtt/2 x e^(3 sigma) is already 1.6e5 round trips at 4)", self.jitter_sigma)
        _check(0 <= self.tail_prob <= 1, p + "tail_prob", "must be in [0, 1]", self.tail_prob)
        _check(self.tail_alpha >= 1, p + "tail_alpha", "must be >= 1 (a Pareto tail with alpha < 1 has an infinite "
               "mean delay)", self.tail_alpha)
        _check(0 <= self.tail_scale_s <= MAX_DELAY_S, p + "tail_scale_s", f"must be in [0, {MAX_DELAY_S:g}] s",
               self.tail_scale_s)
        _check(0 <= self.loss_prob < 1, p + "loss_prob", "must be in [0, 1)", self.loss_prob)
        _check(0 <= self.corrupt_prob < 1, p + "corrupt_prob", "must be in [0, 1)", self.corrupt_prob)
        _check(self.loss_prob + self.corrupt_prob <= MAX_CHUNK_FAILURE, p + "loss_prob",
               f"loss_prob + corrupt_prob must be <= {MAX_CHUNK_FAILURE} (a chunk is resent at most "
               f"{MAX_SENDS_PER_CHUNK} times; beyond that bound a transfer can run out of resends)",
               self.loss_prob + self.corrupt_prob)
        _check(1 <= self.n_connections <= 1024, p + "n_connections", "must be >= 1 and <= 1024 (parallel connections of "
               "one direction)", self.n_connections)
        _check(0 <= self.idle_timeout_s <= MAX_PERIOD_S, p + "idle_timeout_s", f"must be in [0, {MAX_PERIOD_S:g}] s",
               self.idle_timeout_s)
        _check(1 <= self.init_cwnd_bytes <= MAX_CHUNK_BYTES, p + "init_cwnd_bytes", "must be in [1, 2^40]",
               self.init_cwnd_bytes)
        _check(self.pacing_bps == 0 or MIN_RATE_BPS <= self.pacing_bps <= MAX_RATE_BPS, p + "pacing_bps",
               f"must be 0 (no cap) or in [{MIN_RATE_BPS:g}, {MAX_RATE_BPS:g}] bits per second", self.pacing_bps)
        _check(1 <= self.chunk_bytes <= MAX_CHUNK_BYTES, p + "chunk_bytes", "must be in [1, 2^40]", self.chunk_bytes)
        _check(self.method in ("chunked", "naive"), p + "method", "must be one of chunked|naive", self.method)
        _check(self.schedule in SCHEDULES, p + "schedule", "must be one of " + "|".join(SCHEDULES), self.schedule)
        _check(self.schedule == "periodic" or self.contact_period_s == 0, p + "contact_period_s",
               "must be 0 with schedule=orbit (the orbit decides every link's windows)", self.contact_period_s)
        _check(isinstance(self.orbit, OrbitConfig), p + "orbit", "must be an OrbitConfig", self.orbit)
        _check(0 <= self.contact_period_s <= MAX_PERIOD_S, p + "contact_period_s",
               f"must be in [0, {MAX_PERIOD_S:g}] s (0: always in contact)", self.contact_period_s)
        _check(0 < self.contact_fraction <= 1, p + "contact_fraction", "must be in (0, 1]", self.contact_fraction)
        # a window too short to carry a chunk makes one transfer cross windows without end (1e-300 s never finishes)
        rate = min(self.bandwidth_bps, self.pacing_bps) if self.pacing_bps > 0 else self.bandwidth_bps
        _check(self.contact_period_s == 0 or (self.contact_period_s >= 1e-3 and
                                              self.contact_period_s * self.contact_fraction * rate / 8 >= self.chunk_bytes),
               p + "contact_period_s", f"must be 0 (always in contact) or >= 1 ms with each contact window "
               f"(contact_fraction of it) long enough to carry one chunk of {self.chunk_bytes} bytes at the link's rate",
               self.contact_period_s)
        _check(self.fec_group >= 1, p + "fec_group", "must be >= 1", self.fec_group)
        _check(self.fec_parity >= 0, p + "fec_parity", "must be >= 0 (0 = no FEC)", self.fec_parity)
        _check(self.fec_group + self.fec_parity <= 255, p + "fec_parity",
               "fec_group + fec_parity must be <= 255 (a Reed-Solomon code over GF(2^8))", self.fec_group + self.fec_parity)
        _check(self.fec_parity == 0 or self.method == "chunked", p + "fec_parity", "needs method=chunked",
               self.fec_parity)


# Field overrides of LinkConfig per named link. The figures are round, plausible numbers, not measurements.
LINK_PRESETS: dict[str, dict[str, Any]] = {
    # The seed's link: 25 Gbit/s across ~14,500 km of fibre, 145 ms round trip at best; moderate jitter, a heavy tail.
    # Identical to the LinkConfig defaults, so LinkConfig() is this link.
    "transpacific-25g": dict(bandwidth_bps=25e9, rtt_s=0.145, jitter_sigma=0.25, tail_prob=0.01, tail_alpha=1.5,
                             tail_scale_s=0.2, loss_prob=0.0, corrupt_prob=0.0, n_connections=8, chunk_bytes=4 << 20,
                             contact_period_s=0.0, contact_fraction=1.0),
    # Inside one data centre: 400 Gbit/s, 50 us round trip, tiny jitter, rare millisecond stalls.
    "intra-dc": dict(bandwidth_bps=400e9, rtt_s=50e-6, jitter_sigma=0.1, tail_prob=1e-4, tail_alpha=2.0,
                     tail_scale_s=1e-3, loss_prob=0.0, corrupt_prob=0.0, n_connections=8, chunk_bytes=16 << 20,
                     contact_period_s=0.0, contact_fraction=1.0),
    # A home / small-office line: 1 Gbit/s, 30 ms, noisy, some loss.
    "consumer-1g": dict(bandwidth_bps=1e9, rtt_s=0.030, jitter_sigma=0.5, tail_prob=0.02, tail_alpha=1.5,
                        tail_scale_s=0.1, loss_prob=0.005, corrupt_prob=1e-4, n_connections=4, chunk_bytes=1 << 20,
                        contact_period_s=0.0, contact_fraction=1.0),
    # An intermittent low-earth-orbit link (illustrative): 200 Mbit/s, 40 ms, noisy, 1.5% chunk loss, and contact
    # only during the first half of every minute (think of passes over a ground station, compressed in time).
    "leo-satellite": dict(bandwidth_bps=200e6, rtt_s=0.040, jitter_sigma=0.4, tail_prob=0.02, tail_alpha=1.5,
                          tail_scale_s=0.1, loss_prob=0.015, corrupt_prob=0.001, n_connections=4, chunk_bytes=1 << 20,
                          contact_period_s=60.0, contact_fraction=0.5),
    # Ground links of satellites in low Earth orbit (link.orbit: satellites at 550 km, one station, 10° mask): up
    # only while a satellite is above the station's elevation mask, per satellite and station (minutes a pass).
    # 520 Mbit/s is Sentinel-2's X-band downlink (ESA); a round trip over the 10° slant range (1,815 km) is ~12.1 ms;
    # the noise figures are leo-satellite's. Sources: docs/methods.md.
    "leo-orbit": dict(bandwidth_bps=520e6, rtt_s=0.0121, jitter_sigma=0.4, tail_prob=0.02, tail_alpha=1.5,
                      tail_scale_s=0.1, loss_prob=0.015, corrupt_prob=0.001, n_connections=4, chunk_bytes=1 << 20,
                      schedule="orbit", contact_period_s=0.0, contact_fraction=1.0),
}


def link_config(preset: str, **overrides: Any) -> LinkConfig:
    """A validated ``LinkConfig`` for a named link (``LINK_PRESETS``) with field overrides; errors name the field."""
    _check(preset in LINK_PRESETS, "link.preset", "must be one of " + "|".join(LINK_PRESETS), preset)
    names = sorted(f.name for f in fields(LinkConfig) if f.name != "preset")
    for key in overrides:
        _check(key in names, f"link.{key}", "unknown link field (valid: " + ", ".join(names) + ")", key)
    return LinkConfig(preset=preset, **{**LINK_PRESETS[preset], **overrides})
