"""Control messages between ranks: small, versioned, length-limited JSON checked against a schema on receipt.

Why not ``torch.distributed.all_gather_object``: it unpickles whatever a peer sends, so one compromised island could
run arbitrary code on every other island — far worse than the poisoned updates the defences in ``faults.py`` handle.
Everything that is not a payload tensor (checkpoint steps and errors at resume, the ledger and clocks merged at the
end of a run) travels instead as

    UTF-8 JSON  {"v": VERSION, "kind": "<what>", "body": <plain data>}

where ``body`` must match the schema the receiver names for ``kind``. A schema is written with Python values:

* ``int`` / ``float`` / ``str`` / ``bool``: that JSON scalar (``float`` also accepts an integer; ``int`` refuses
  ``true``/``false``); ``None``: null. NaN and infinities are refused (strict JSON);
* ``Opt(s)``: null or ``s``;
* ``[s]``: a list, every item matching ``s``;
* ``(s1, s2, ...)``: a list of exactly those items (a record);
* ``{"key": s, ...}``: an object with exactly those keys;
* ``MapOf(s)``: an object with any string keys and values matching ``s``.

Decoding refuses, with a one-line ``ControlError`` naming the peer rank, a message that is longer than its limit
(checked from the announced length *before* anything is allocated or parsed), not UTF-8 JSON (a pickle, for
instance), of another version or kind, or off-schema. Nothing a peer sends is ever executed.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

VERSION = 1
MAX_BYTES = 64 << 20  # per message; the largest (the ledger at the end of a long run) stays far below


class ControlError(ValueError):
    """A control message from a peer that is oversized, truncated, not JSON, of another version/kind, or off-schema."""


@dataclass(frozen=True)
class Opt:
    """Schema: null or ``inner``."""

    inner: Any


@dataclass(frozen=True)
class MapOf:
    """Schema: an object with arbitrary string keys, every value matching ``value``."""

    value: Any


def encode(kind: str, body: Any) -> bytes:
    """The wire bytes of one control message (strict JSON: NaN/inf raise here, on the sender)."""
    return json.dumps({"v": VERSION, "kind": kind, "body": body}, allow_nan=False, separators=(",", ":")).encode()


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not strict JSON")


def decode(raw: bytes, kind: str, schema: Any, peer: int, max_bytes: int = MAX_BYTES) -> Any:
    """The body of a control message from rank ``peer``, validated against ``schema``; ``ControlError`` otherwise."""
    where = f"control message {kind!r} from rank {peer}"
    if len(raw) > max_bytes:
        raise ControlError(f"{where}: {len(raw)} bytes is over the {max_bytes}-byte limit")
    try:
        msg = json.loads(raw.decode("utf-8"), parse_constant=_refuse_constant)
    except (UnicodeDecodeError, ValueError) as e:  # a pickle, garbage, or a message cut short
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise ControlError(f"{where}: not a UTF-8 JSON control message, refused ({first})") from None
    if not isinstance(msg, dict) or set(msg) != {"v", "kind", "body"}:
        raise ControlError(f"{where}: not a control message envelope (want keys v, kind, body)")
    if msg["v"] != VERSION:
        raise ControlError(f"{where}: version {msg['v']!r}, this kit speaks version {VERSION}")
    if msg["kind"] != kind:
        raise ControlError(f"{where}: kind {msg['kind']!r} where {kind!r} was expected (ranks out of step)")
    err = _check(msg["body"], schema, "body")
    if err:
        raise ControlError(f"{where}: {err}")
    return msg["body"]


def _check(x: Any, s: Any, path: str) -> str | None:
    """The first place where ``x`` departs from schema ``s`` (None when it matches)."""
    if s is None:
        return None if x is None else f"{path}: must be null"
    if isinstance(s, Opt):
        return None if x is None else _check(x, s.inner, path)
    if s is bool:
        return None if isinstance(x, bool) else f"{path}: must be a boolean"
    if s is int:
        return None if isinstance(x, int) and not isinstance(x, bool) else f"{path}: must be an integer"
    if s is float:
        return None if isinstance(x, (int, float)) and not isinstance(x, bool) else f"{path}: must be a number"
    if s is str:
        return None if isinstance(x, str) else f"{path}: must be a string"
    if isinstance(s, list):
        if not isinstance(x, list):
            return f"{path}: must be a list"
        for i, item in enumerate(x):
            err = _check(item, s[0], f"{path}[{i}]")
            if err:
                return err
        return None
    if isinstance(s, tuple):
        if not isinstance(x, list) or len(x) != len(s):
            return f"{path}: must be a list of {len(s)} items"
        for i, (item, si) in enumerate(zip(x, s)):
            err = _check(item, si, f"{path}[{i}]")
            if err:
                return err
        return None
    if isinstance(s, MapOf):
        if not isinstance(x, dict):
            return f"{path}: must be an object"
        for k, v in x.items():
            err = _check(v, s.value, f"{path}.{k}")
            if err:
                return err
        return None
    if isinstance(s, dict):
        if not isinstance(x, dict) or set(x) != set(s):
            return f"{path}: must be an object with keys {sorted(s)}"
        for k, si in s.items():
            err = _check(x[k], si, f"{path}.{k}")
            if err:
                return err
        return None
    raise TypeError(f"schema at {path}: unsupported {s!r}")
