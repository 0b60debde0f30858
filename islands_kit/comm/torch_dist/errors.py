"""The error a failed peer raises, and the bound on every wait (``ISLANDS_KIT_DIST_TIMEOUT_S``)."""
from __future__ import annotations

import os

from islands_kit.config import ConfigError

DEFAULT_TIMEOUT_S = 300.0


class DistributedError(RuntimeError):
    """A peer died, never arrived, stopped answering within the timeout, or the protocol went out of step."""


def dist_timeout_s() -> float:
    """Bound on any one collective / rendezvous wait: ``$ISLANDS_KIT_DIST_TIMEOUT_S`` seconds (default 300)."""
    raw = os.environ.get("ISLANDS_KIT_DIST_TIMEOUT_S", "")
    try:
        t = float(raw) if raw else DEFAULT_TIMEOUT_S
    except ValueError:
        raise ConfigError(f"ISLANDS_KIT_DIST_TIMEOUT_S: must be a number of seconds > 0 (got {raw!r})") from None
    if not t > 0:
        raise ConfigError(f"ISLANDS_KIT_DIST_TIMEOUT_S: must be a number of seconds > 0 (got {raw!r})")
    return t
