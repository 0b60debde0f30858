"""The rules every config field is checked against: ``ConfigError`` naming the field and the rule, the scalar type
check run first in every ``__post_init__``, and the bounds shared by several sections."""
from __future__ import annotations

import math
import numbers
from dataclasses import fields
from typing import Any


class ConfigError(ValueError):
    """A configuration value broke a rule; the message names the field and the rule."""


def _check(cond: bool, field_name: str, rule: str, value: Any) -> None:
    if not cond:
        raise ConfigError(f"{field_name}: {rule} (got {_show(value)})")


def _show(value: Any) -> str:
    """``repr(value)`` cut to one readable line (an integer of thousands of digits cannot even be repr'd)."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 64:
        return f"an integer of {value.bit_length()} bits"
    text = repr(value)
    return text if len(text) <= 120 else text[:117] + "..."


INT_MAX = 2**63 - 1  # torch counters and numpy/torch seeds are signed 64-bit: a larger integer overflows them
SEED_MAX = 2**32 - 1  # derived seeds (seed x 1,000,003 + ...) must stay inside torch's 64-bit seed range
STEPS_MAX = 10**9  # inner steps: the schedules and counters are exact far beyond any run this kit can do
MAX_LR = 10.0  # a learning rate above this only diverges (weights are O(init_std); Adam steps are O(lr))
MAX_THREADS = 1024  # torch allocates a pool per thread: a million threads ends in MemoryError before step 1
# The link resends a chunk until it arrives and gives up after MAX_SENDS_PER_CHUNK sends (comm/link/). At a failure
# probability p = loss_prob + corrupt_prob <= MAX_CHUNK_FAILURE, giving up has probability p^10000 < 1e-43.
MAX_SENDS_PER_CHUNK = 10_000
MAX_CHUNK_FAILURE = 0.99


def _check_fields(obj: Any, prefix: str) -> None:
    """Every scalar field holds its annotated type: an ``int`` field an integer within a signed 64-bit integer, a
    ``float`` field a finite number (no inf, no NaN: every float of the config is a rate, a time or a probability),
    a ``bool`` field a boolean, a ``str`` field a string. Run first in every ``__post_init__``, so the range rules
    after it compare numbers."""
    for f in fields(obj):
        v, name = getattr(obj, f.name), prefix + f.name
        if f.type == "int":
            _check(isinstance(v, numbers.Integral) and not isinstance(v, bool), name, "must be an integer", v)
            _check(-INT_MAX - 1 <= v <= INT_MAX, name, "must fit a signed 64-bit integer", v)
        elif f.type == "float":
            _check(isinstance(v, numbers.Real) and not isinstance(v, bool), name, "must be a number", v)
            _check(_finite(v), name, "must be a finite number", v)
        elif f.type == "bool":
            _check(isinstance(v, bool), name, "must be a boolean (true/false)", v)
        elif f.type == "str":
            _check(isinstance(v, str), name, "must be a string", v)


def _finite(v: Any) -> bool:
    try:
        return math.isfinite(v)
    except OverflowError:  # an int too large for a float
        return False
