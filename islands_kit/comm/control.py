"""Control messages between ranks: small, versioned, length-limited JSON checked against a schema on receipt.

Why not ``torch.distributed.all_gather_object``: it unpickles whatever a peer sends, so one compromised island could
run arbitrary code on every other island — far worse than the poisoned updates the defences in ``faults.py`` handle.
Everything that is not a payload tensor (checkpoint steps and errors at resume, the ledger and clocks merged at the
end of a run) travels instead as

    UTF-8 JSON  {"v": VERSION, "kind": "<what>", "body": <plain data>}

where ``body`` must match the schema the receiver names for ``kind``. A schema is written with Python values:

* ``int`` / ``float`` / ``str`` / ``bool``: that JSON scalar (``float`` also accepts an integer; ``int`` refuses
  ``true``/``false`` and ``1.0``); ``None``: null;
* ``Int(lo, hi)`` / ``Num(lo, hi)``: an integer / a number within ``[lo, hi]`` (either bound may be None);
* ``OneOf("a", "b", ...)``: one of those strings;
* ``Opt(s)``: null or ``s``;
* ``[s]``: a list, every item matching ``s``; ``Items(s, n)``: the same, at most ``n`` items;
* ``Str(n)``: a string of at most ``n`` characters;
* ``(s1, s2, ...)``: a list of exactly those items (a record);
* ``{"key": s, ...}``: an object with exactly those keys;
* ``MapOf(s)``: an object with any string keys and values matching ``s``.

Every kind has its own length limit, from what the kit can send: a schema of bounded parts (no plain ``[s]``,
``str`` or ``MapOf``) bounds its longest compact encoding (``max_encoded``; a contribution's is under 300 bytes);
a kind with an open-ended schema (the ledger) passes the bound its receiver computes from its own run. ``MAX_BYTES``
caps everything. Decoding refuses, with a one-line ``ControlError`` naming the peer rank and the field, a message
that is longer than its kind's limit (checked from the announced length *before* anything is allocated or parsed), nested deeper than
``MAX_DEPTH`` (counted on the raw bytes before the parser recurses), not UTF-8 JSON (a pickle, for instance), with a
duplicate key, a number that is not finite (``NaN``, ``Infinity``, or a literal such as ``1e999`` that overflows to
inf), an integer outside the int64 range (refused from its digits, before it is built), of another version (an
integer, not ``true`` or ``1.0``) or kind, or off-schema. Nothing a peer sends is ever executed.

``PeerError`` is the base of every refusal of something a peer sent (``ControlError`` here, ``comm.peer.PayloadError``
for payloads): a ``ValueError`` that carries the peer and the field.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

VERSION = 1
MAX_BYTES = 64 << 20  # the ceiling of every limit; the largest kind (the ledger of a long run) stays far below
MAX_DEPTH = 16  # nesting of arrays/objects, envelope included; the deepest schema here (the ledger) needs 6
INT_MIN, INT_MAX = -(2 ** 63), 2 ** 63 - 1  # every integer the kit sends fits an int64 (steps, bytes, seeds)


class PeerError(ValueError):
    """Something a peer sent that the kit refuses; ``peer`` names the sender (a rank or an island, as the message
    says) and ``field`` what was wrong in it. The message is one line."""

    def __init__(self, message: str, peer: int, field: str) -> None:
        super().__init__(message)
        self.peer, self.field = peer, field


class ControlError(PeerError):
    """A control message from a peer that is oversized, too deep, not strict JSON, of another version/kind, or
    off-schema."""


@dataclass(frozen=True)
class Opt:
    """Schema: null or ``inner``."""

    inner: Any


@dataclass(frozen=True)
class Int:
    """Schema: an integer in ``[lo, hi]`` (None: the int64 bound)."""

    lo: int | None = None
    hi: int | None = None


@dataclass(frozen=True)
class Num:
    """Schema: a finite number (an integer is accepted) in ``[lo, hi]`` (None: unbounded on that side)."""

    lo: float | None = None
    hi: float | None = None


class OneOf:
    """Schema: one of the given strings."""

    def __init__(self, *values: str) -> None:
        self.values = values


@dataclass(frozen=True)
class Items:
    """Schema: a list of at most ``n`` items, each matching ``item``."""

    item: Any
    n: int


@dataclass(frozen=True)
class Str:
    """Schema: a string of at most ``n`` characters."""

    n: int


@dataclass(frozen=True)
class MapOf:
    """Schema: an object with arbitrary string keys, every value matching ``value``."""

    value: Any


FLOAT_CHARS = 24  # the longest repr of a finite float64: -2.2250738585072014e-308


def _longest(s: Any) -> int | None:
    """The most characters a value matching schema ``s`` takes in compact JSON (``encode``); None: no bound."""
    if s is None:
        return 4
    if s is bool:
        return 5
    if s is int or isinstance(s, Int):
        lo, hi = (s.lo, s.hi) if isinstance(s, Int) else (None, None)
        return max(len(str(INT_MIN if lo is None else lo)), len(str(INT_MAX if hi is None else hi)))
    if s is float or isinstance(s, Num):  # a float's repr, or an integer (int64) where a number is asked for
        return max(FLOAT_CHARS, len(str(INT_MIN)))
    if isinstance(s, OneOf):
        return max(len(json.dumps(v)) for v in s.values)
    if isinstance(s, Str):
        return 2 + 12 * s.n  # quotes, and at worst a surrogate pair of \uXXXX escapes per character
    if isinstance(s, Opt):
        inner = _longest(s.inner)
        return None if inner is None else max(4, inner)
    parts: list[int | None]
    if isinstance(s, Items):
        inner = _longest(s.item)
        return None if inner is None else 2 + s.n * inner + max(s.n - 1, 0)
    if isinstance(s, tuple):
        parts = [_longest(x) for x in s]
    elif isinstance(s, dict):
        parts = [len(json.dumps(k)) + 1 + v if v is not None else None for k, v in ((k, _longest(x)) for k, x in s.items())]
    else:  # str, [s], MapOf: open-ended
        return None
    if any(x is None for x in parts):
        return None
    return 2 + sum(x for x in parts if x is not None) + max(len(parts) - 1, 0)


def max_encoded(kind: str, schema: Any) -> int | None:
    """The longest message of ``kind`` whose body matches ``schema`` that ``encode`` can produce (envelope included);
    None when the schema is open-ended (the caller then passes its own limit)."""
    body = _longest(schema)
    return None if body is None else len(encode(kind, 0)) - 1 + body


def limit(kind: str, schema: Any, bound: int | None = None) -> int:
    """A kind's length limit: ``bound`` when the receiver computed one, else the schema's own (``max_encoded``); at
    most ``MAX_BYTES``."""
    got = bound if bound is not None else max_encoded(kind, schema)
    return min(MAX_BYTES, got if got is not None else MAX_BYTES)


def encode(kind: str, body: Any) -> bytes:
    """The wire bytes of one control message (strict JSON: NaN/inf raise here, on the sender)."""
    return json.dumps({"v": VERSION, "kind": kind, "body": body}, allow_nan=False, separators=(",", ":")).encode()


def _show(x: Any) -> str:
    """A peer's value in an error message: its repr (one line: newlines escaped), cut short."""
    r = repr(x)
    return r if len(r) <= 40 else r[:37] + "..."


class _Refused(ValueError):
    """A literal the strict parser refuses (raised inside json.loads, turned into a ControlError)."""


def _refuse_constant(name: str) -> Any:
    raise _Refused(f"{name} is not strict JSON")


def _parse_float(s: str) -> float:
    x = float(s)
    if not math.isfinite(x):
        raise _Refused(f"number {s[:24]} is not finite")
    return x


def _parse_int(s: str) -> int:
    if len(s.lstrip("-")) > 19:  # refused from its digits: a 10**400 is never built (nor a 4300-digit one parsed)
        raise _Refused(f"integer {s[:24]}{'...' if len(s) > 24 else ''} is outside the int64 range")
    x = int(s)
    if not INT_MIN <= x <= INT_MAX:
        raise _Refused(f"integer {s} is outside the int64 range")
    return x


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An object's members, refused when a key repeats (plain json keeps the last: two readers could disagree)."""
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        for k, _ in pairs:
            if k in seen:
                raise _Refused(f"duplicate key {_show(k)}")
            seen.add(k)
    return out


def nesting_depth(raw: bytes, chunk: int = 1 << 20) -> int:
    """The deepest nesting of JSON arrays/objects in ``raw``, counted on the bytes outside string literals (no
    recursion, so a hostile ``[[[[...`` is measured before the parser would recurse into it).

    One pass, linear in ``len(raw)`` and bounded in memory (``chunk`` bytes at a time, the state carried between
    chunks): a ``"`` opens or closes a string unless an odd run of backslashes precedes it. On the valid prefix of a
    message (all the parser ever recurses into) this is the parser's own reading; past it the count may differ, but
    the parser refuses there. (A regex that strips strings first is quadratic on an unterminated ``"\\"\\"...``.)"""
    a_all = np.frombuffer(raw, dtype=np.uint8)
    run = 0  # backslashes ending the previous chunk
    quotes = 0  # unescaped quotes so far (odd: inside a string)
    depth = deepest = 0
    for at in range(0, a_all.size, chunk):
        a = a_all[at:at + chunk]
        idx = np.arange(a.size, dtype=np.int64)
        last_other = np.maximum.accumulate(np.where(a != ord("\\"), idx, -1 - run))  # last non-backslash at or before i
        ending = idx - last_other  # length of the backslash run ending at i (0 where a[i] is not a backslash)
        before = np.concatenate(([run], ending[:-1]))  # ... ending just before i
        quote = (a == ord('"')) & (before % 2 == 0)
        outside = (np.cumsum(quote, dtype=np.int64) + quotes) % 2 == 0
        step = ((a == ord("[")) | (a == ord("{"))).astype(np.int64) - ((a == ord("]")) | (a == ord("}")))
        level = np.cumsum(np.where(outside, step, 0)) + depth
        deepest = max(deepest, int(level.max(initial=0)))
        run, quotes, depth = int(ending[-1]), quotes + int(quote.sum()), int(level[-1])
    return deepest


def decode(raw: bytes, kind: str, schema: Any, peer: int, max_bytes: int | None = None) -> Any:
    """The body of a control message from rank ``peer``, validated against ``schema``, at most ``max_bytes`` long
    (default: the kind's ``limit``); ``ControlError`` otherwise."""
    where = f"control message {kind!r} from rank {peer}"
    max_bytes = limit(kind, schema, max_bytes)

    def refuse(field: str, why: str) -> ControlError:
        return ControlError(f"{where}: {why}", peer, field)

    if len(raw) > max_bytes:
        raise refuse("length", f"{len(raw)} bytes is over the {max_bytes}-byte limit")
    depth = nesting_depth(raw)
    if depth > MAX_DEPTH:
        raise refuse("nesting", f"nested {depth} levels deep, over the limit of {MAX_DEPTH}; refused before parsing")
    try:
        msg = json.loads(raw.decode("utf-8"), parse_constant=_refuse_constant, parse_float=_parse_float,
                         parse_int=_parse_int, object_pairs_hook=_unique_keys)
    except _Refused as e:
        raise refuse("json", f"not a UTF-8 JSON control message, refused ({e})") from None
    except (UnicodeDecodeError, ValueError) as e:  # a pickle, garbage, or a message cut short
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise refuse("json", f"not a UTF-8 JSON control message, refused ({first})") from None
    if not isinstance(msg, dict) or set(msg) != {"v", "kind", "body"}:
        raise refuse("envelope", "not a control message envelope (want keys v, kind, body)")
    if type(msg["v"]) is not int or msg["v"] != VERSION:  # not True, not 1.0: they compare equal to 1
        raise refuse("v", f"version {_show(msg['v'])}, this kit speaks version {VERSION} (an integer)")
    if msg["kind"] != kind:
        raise refuse("kind", f"kind {_show(msg['kind'])} where {kind!r} was expected (ranks out of step)")
    err = _check(msg["body"], schema, "body")
    if err:
        raise refuse(err[0], f"{err[0]}: {err[1]}")
    return msg["body"]


def _bounded(x: Any, lo: float | None, hi: float | None, what: str, path: str) -> tuple[str, str] | None:
    if (lo is not None and x < lo) or (hi is not None and x > hi):
        return path, f"must be {what} in [{'-inf' if lo is None else lo}, {'inf' if hi is None else hi}] (got {_show(x)})"
    return None


def _check(x: Any, s: Any, path: str) -> tuple[str, str] | None:
    """The first place where ``x`` departs from schema ``s``, as (path, rule); None when it matches."""
    is_int = isinstance(x, int) and not isinstance(x, bool)
    if s is None:
        return None if x is None else (path, "must be null")
    if isinstance(s, Opt):
        return None if x is None else _check(x, s.inner, path)
    if s is bool:
        return None if isinstance(x, bool) else (path, "must be a boolean")
    if s is int or isinstance(s, Int):
        if not is_int:
            return path, "must be an integer"
        lo, hi = (s.lo, s.hi) if isinstance(s, Int) else (None, None)
        return _bounded(x, INT_MIN if lo is None else lo, INT_MAX if hi is None else hi, "an integer", path)
    if s is float or isinstance(s, Num):
        if not (is_int or isinstance(x, float)) or not math.isfinite(x):
            return path, "must be a finite number"
        return _bounded(x, s.lo, s.hi, "a number", path) if isinstance(s, Num) else None
    if s is str:
        return None if isinstance(x, str) else (path, "must be a string")
    if isinstance(s, OneOf):
        return None if isinstance(x, str) and x in s.values else (path, f"must be one of {'|'.join(s.values)}")
    if isinstance(s, Str):
        return None if isinstance(x, str) and len(x) <= s.n else (path, f"must be a string of at most {s.n} characters")
    if isinstance(s, (list, Items)):
        if not isinstance(x, list):
            return path, "must be a list"
        if isinstance(s, Items) and len(x) > s.n:
            return path, f"must be a list of at most {s.n} items (got {len(x)})"
        item_schema = s.item if isinstance(s, Items) else s[0]
        for i, item in enumerate(x):
            err = _check(item, item_schema, f"{path}[{i}]")
            if err:
                return err
        return None
    if isinstance(s, tuple):
        if not isinstance(x, list) or len(x) != len(s):
            return path, f"must be a list of {len(s)} items"
        for i, (item, si) in enumerate(zip(x, s)):
            err = _check(item, si, f"{path}[{i}]")
            if err:
                return err
        return None
    if isinstance(s, MapOf):
        if not isinstance(x, dict):
            return path, "must be an object"
        for k, v in x.items():
            err = _check(v, s.value, f"{path}.{k}" if k.isidentifier() else f"{path}[{_show(k)}]")
            if err:
                return err
        return None
    if isinstance(s, dict):
        if not isinstance(x, dict) or set(x) != set(s):
            return path, f"must be an object with keys {sorted(s)}"
        for k, si in s.items():
            err = _check(x[k], si, f"{path}.{k}")
            if err:
                return err
        return None
    raise TypeError(f"schema at {path}: unsupported {s!r}")
