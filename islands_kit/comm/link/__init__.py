"""Wide-area link model: how long a payload takes to cross a slow, jittery, lossy link between two islands; the named
links are data in ``islands_kit.config.link``.

Model (one ``LinkModel`` per link; all times in seconds on the simulated clock)
-------------------------------------------------------------------------------
* Directions. The link is full duplex: each directed pair (src, dst) has its own *wire* with its own bandwidth, busy
  calendar, connections and random stream. Transfers in the same direction share the wire: bytes are serialised one
  piece at a time into the wire's free time (a calendar of busy intervals), so a transfer posted while another is on
  the wire waits for the gap after it. Rate of the wire: ``rate_bps = min(bandwidth_bps, pacing_bps)`` when
  ``pacing_bps > 0``, else ``bandwidth_bps``. The model has no router queue, so pacing only caps the rate here; the
  losses that pacing avoids in practice are whatever ``loss_prob`` says.
* Latency. A piece of data whose last byte leaves the sender at ``e`` arrives at ``e + L`` with one-way latency
  ``L = rtt/2 · exp(jitter_sigma · |Z|) + T`` (``Z`` standard normal: a log-normal body that never goes below the
  speed-of-light floor rtt/2), plus with probability ``tail_prob`` a Pareto tail ``T = tail_scale_s · U^(-1/tail_alpha)``
  (``U`` uniform in (0, 1], so ``T >= tail_scale_s``), else ``T = 0``.
* Contact windows (intermittent links, e.g. LEO). Each direction has a contact schedule (``contact.py``) and the wire
  serialises bytes only inside its up-intervals; a transfer pauses outside and resumes at the next window. Bytes
  already sent still arrive (propagation is not gated). ``link.schedule`` says where the schedules come from:
  ``periodic`` (the default) gives every pair the same windows, the first ``contact_fraction`` of each period
  ``[k·P, k·P + f·P)`` when ``contact_period_s > 0`` (always up otherwise); ``orbit`` gives each link its own list of
  windows, and possibly its own rate, from the orbit geometry of ``link.orbit`` (``islands_kit/orbital/windows.py``: ground
  passes, inter-satellite links). A ``ContactPlan`` passed to ``LinkModel`` replaces the config's (any windows per
  link). Every transport prices transfers with a ``LinkModel`` built from the same config, so the same schedule
  decides delivery in the simulator and under torch.distributed. A direction that is never up again stops the run
  with an error naming the link.
* Connections and slow start. A direction holds ``n_connections`` connections with a congestion window each. With
  ``warm=True`` keep-alives hold every window at the bandwidth-delay product (``BDP = rate_bps/8 · rtt_s`` bytes,
  shared among the connections), so a transfer runs at full rate from its first byte. With ``warm=False`` a connection
  never used, or idle for longer than ``idle_timeout_s`` since its last transfer ended, restarts at
  ``init_cwnd_bytes`` (RFC 5681 restart after idle). The window of the connections a transfer uses,
  ``W = sum of their windows``, limits each round trip: round ``j`` may carry ``W·2^j`` bytes and the next round opens
  one RTT after the round's first byte left (slow start doubles the window every RTT); once ``W·2^j >= BDP`` the
  transfer runs at the full rate. So a big cold transfer takes about ``log2(BDP / W)`` RTTs longer than a warm one.
  A single connection is allowed to fill the whole wire (per-flow limits of real TCP are not modelled).
* Randomness. Each transfer draws from its own ``numpy`` Generator seeded with ``(seed, src, dst, k)``, ``k`` the
  transfer's index in its direction (a chunked resend: ``(seed, src, dst, k, chunk, copy)``), so results are
  reproducible and do not depend on how calls to different directions interleave.

Methods (``cfg.method``)
------------------------
* ``naive`` — one connection carries the whole payload as one stream, with one latency draw per attempt. The payload
  is checked in ``chunk_bytes`` chunks: if any chunk is lost (``loss_prob``) or corrupted (``corrupt_prob``), the
  receiver notices at the would-be arrival ``a`` and the sender learns it one-way later, at ``a + rtt/2`` (an
  RTT-scale timeout after the attempt's last byte), and resends the *whole* payload from then.
* ``chunked`` — the payload is cut into ``chunk_bytes`` chunks sent over all ``n_connections`` connections (their
  windows add up), each chunk with its own latency draw, loss and checksum. The receiver declares a chunk missing
  when it is lost, when its checksum fails (at arrival), or when it is later than expected by more than
  ``late_threshold_s = rtt/2 · (exp(3·jitter_sigma) − 1) + rtt/8`` (3 sigma of the jitter body plus the 1/8-RTT
  reordering slack of QUIC's time threshold, RFC 9002) — so a chunk caught in the heavy tail is re-requested like a
  lost one instead of holding the transfer up. The request reaches the sender rtt/2 later; only that chunk is resent.
  The sender's queue is first-in first-out (re-requests join its back) and a re-request is dropped if the sender has
  already heard that the chunk arrived. The first good copy of a chunk is delivered; later copies are discarded. The
  transfer ends when its last chunk is delivered.
* ``chunked`` with forward error correction (``fec_parity = m > 0``) — the data chunks are cut into groups of
  ``fec_group = k`` (the last group may be smaller, k_g chunks); each group is followed on the wire by ``m`` parity
  chunks, each as large as the group's largest data chunk, of a maximum-distance-separable erasure code
  (Reed-Solomon over GF(2^8), hence ``k + m <= 255``): any k_g of the group's k_g + m chunks rebuild it. The
  receiver lets the first ``m`` chunks of a group that it declares missing (lost, corrupt or late, as above, in the
  order it notices them) go unrequested — parity will cover them — and re-requests any further ones; a re-request
  is dropped if the sender has heard that the group was already rebuilt. A data chunk is delivered at its own
  arrival or at its group's rebuild (the k_g-th arrival among the group's chunks), whichever is first. The parity
  costs ``m / k`` more bytes on the wire and buys the removal of most resend round trips from the tail.
  ``fec_parity = 0`` (the default) is exactly the plain chunked method.

Contents (``Transfer.holes``, ``received``)
------------------------------------------
The link carries the payload's bytes, not just its size: a chunk reaches the receiver only as a good copy (first
pass or a resend) or as part of a rebuilt FEC group. ``Transfer.holes`` lists the byte ranges ``[offset, length]`` of
the data chunks that never did; ``received(data, transfer.holes)`` is what the receiver holds: the payload with those
ranges zeroed (a lost chunk never came, a corrupt one failed its checksum and was discarded). The transports decode what
``received`` returns, so a chunk the protocol failed to re-request changes the numbers, not only the clock. With
``LinkModel(..., repair=True)`` (the default, and what every run uses) the resends and FEC leave no holes; with
``repair=False`` the receiver never re-requests (FEC still rebuilds what it can; a naive transfer makes one attempt),
the reference that shows what the repairs are for.

Closed form (tested exactly, both methods)
------------------------------------------
With ``loss_prob = corrupt_prob = jitter_sigma = tail_prob = 0``, warm connections, no contact windows and an idle
wire, a transfer of ``nbytes`` posted at ``start_s`` ends at ``start_s + duration_s`` with::

    duration_s = rtt_s / 2 + nbytes * 8 / rate_bps      # one-way latency + serialisation; rate_bps as above

(``closed_form_time`` returns it.) Both methods give it to the last bit when ``start_s == 0`` and to float rounding
otherwise: the chunked sender keeps its chunks back to back, so the last chunk's last byte leaves at the same time as
the naive stream's. With FEC the parity of every group but the last is serialised before the last group's data, so the
duration is the closed form of ``nbytes + (G - 1) · m · chunk_bytes`` (G groups).
"""
from islands_kit.comm.link.contact import (
    ALWAYS_UP,
    NEVER_UP,
    ContactPlan,
    Periodic,
    Windows,
    contact_plan,
    down_time_s,
    up_windows,
)
from islands_kit.comm.link.latency import (
    LATE_SIGMAS,
    REORDER_SLACK_RTT,
    closed_form_time,
    effective_rate_bps,
    late_threshold_s,
    one_way_latency,
)
from islands_kit.comm.link.model import LinkModel
from islands_kit.comm.link.transfer import Transfer, received, transfer_time_stats
from islands_kit.config import LINK_PRESETS, ConfigError, link_config

__all__ = ["ALWAYS_UP", "NEVER_UP", "LATE_SIGMAS", "REORDER_SLACK_RTT", "LINK_PRESETS", "ContactPlan", "LinkModel",
           "Periodic", "Transfer", "Windows", "closed_form_time", "contact_plan", "down_time_s", "effective_rate_bps",
           "late_threshold_s", "received", "link_config", "one_way_latency", "transfer_time_stats", "up_windows",
           "ConfigError"]
