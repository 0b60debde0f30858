"""The closed-form pieces of the link model: the wire's rate, the ideal duration, one-way latency draws and the
late-chunk threshold."""
from __future__ import annotations

import math

import numpy as np

from islands_kit.config import LinkConfig

LATE_SIGMAS = 3.0  # a chunk later than 3 sigma of the jitter body (plus reordering slack) is declared missing
REORDER_SLACK_RTT = 1.0 / 8.0  # RFC 9002 kTimeThreshold = 9/8: the extra 1/8 RTT


def effective_rate_bps(cfg: LinkConfig) -> float:
    """Rate of one direction's wire: the bandwidth, capped by pacing when pacing is on."""
    return min(cfg.bandwidth_bps, cfg.pacing_bps) if cfg.pacing_bps > 0 else cfg.bandwidth_bps


def closed_form_time(cfg: LinkConfig, nbytes: int) -> float:
    """The documented ideal duration (no loss, no jitter, no tail, warm, always in contact, idle wire)."""
    return cfg.rtt_s / 2 + nbytes * 8 / effective_rate_bps(cfg)


def late_threshold_s(cfg: LinkConfig) -> float:
    """How much later than expected (rtt/2 after its last byte left) a chunk may arrive before it is re-requested."""
    half = cfg.rtt_s / 2
    return half * (math.exp(LATE_SIGMAS * cfg.jitter_sigma) - 1.0) + REORDER_SLACK_RTT * cfg.rtt_s


def one_way_latency(cfg: LinkConfig, z: np.ndarray, u_tail: np.ndarray, u_pareto: np.ndarray) -> np.ndarray:
    """L = rtt/2 · exp(sigma·|z|) + [u_tail < tail_prob] · tail_scale · (1 − u_pareto)^(−1/alpha); arrays of draws."""
    half = cfg.rtt_s / 2
    body = half + half * (np.exp(cfg.jitter_sigma * np.abs(z)) - 1.0)  # == half exactly when sigma == 0
    tail = np.where(u_tail < cfg.tail_prob, cfg.tail_scale_s * (1.0 - u_pareto) ** (-1.0 / cfg.tail_alpha), 0.0)
    return body + tail
