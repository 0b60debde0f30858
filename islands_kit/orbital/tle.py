"""Two-line element sets as text: where a configured set is (``link.orbit.tle_file``, or the lines themselves in
``link.orbit.tle``), and a check of their format, so a bad file is refused when the config is read — before any
work, and without the propagator (``sgp4_orbit.py``, the optional ``orbit`` extra).

The format is NORAD's, as CelesTrak and Space-Track publish it: each set is two 69-character lines starting "1 " and
"2 ", optionally after a name line (the "3LE" form); column 69 of each line is a checksum, the sum of its digits
(a minus sign counting 1) modulo 10; both lines carry the same catalogue number in columns 3-7.

Shipped sets (``SHIPPED``, in this folder): a file named like one of them is found here when the path given does not
exist, so ``--set link.orbit.tle_file=starlink-plane-2025-07-19.tle`` works from any folder and from an installed
wheel. Their source and date: data_cards/starlink-plane-2025-07-19.md.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import NamedTuple

from islands_kit.io import read_limited

HERE = Path(__file__).resolve().parent
MAX_BYTES = 16 << 20  # an element-set file (CelesTrak's whole active catalogue is about 3 MB)
_D = r"[ +-]\d{5}[+-]\d"  # an exponent field: mantissa with an assumed leading point, then the power of ten
# each field's columns (0-based slices) and its shape, as NORAD's format fixes them; the checksum does not see a
# letter (it counts digits), so '1X.0638310Q' for a mean motion passed it and failed later inside the propagator
LINE1 = ((slice(2, 7), r"[0-9A-Z][0-9]{4}", "catalogue number"), (slice(18, 32), r"\d{5}\.\d{8}", "epoch"),
         (slice(33, 43), r"[ +-]\.\d{8}", "mean motion's first derivative"), (slice(44, 52), _D, "its second derivative"),
         (slice(53, 61), _D, "drag term (B*)"))
LINE2 = ((slice(8, 16), r"[ \d]{3}\.\d{4}", "inclination"), (slice(17, 25), r"[ \d]{3}\.\d{4}", "right ascension"),
         (slice(26, 33), r"\d{7}", "eccentricity"), (slice(34, 42), r"[ \d]{3}\.\d{4}", "argument of perigee"),
         (slice(43, 51), r"[ \d]{3}\.\d{4}", "mean anomaly"), (slice(52, 63), r"[ \d]{2}\.\d{8}", "mean motion"))
# ranges of line 2's angles (degrees) and mean motion (revolutions a day: a circular orbit at the Earth's surface
# makes about 17)
RANGES = {"inclination": (0.0, 180.0), "right ascension": (0.0, 360.0), "argument of perigee": (0.0, 360.0),
          "mean anomaly": (0.0, 360.0), "mean motion": (1e-6, 20.0)}
SHIPPED = ("starlink-plane-2025-07-19.tle",)


class ElementSet(NamedTuple):
    name: str  # the name line, or the catalogue number when the file has none
    line1: str
    line2: str


def checksum(line: str) -> int:
    """The TLE checksum of a line's first 68 columns: its digits summed, each minus sign counting 1, modulo 10."""
    return sum(int(c) if c.isdigit() else 1 if c == "-" else 0 for c in line[:68]) % 10


def _check_line(line: str, want: str, where: str) -> None:
    if not line.startswith(want + " "):
        raise ValueError(f"{where}: expected line {want} of an element set (starting '{want} '), got {line[:20]!r}")
    if len(line) < 69:
        raise ValueError(f"{where}: a TLE line has 69 characters, this one {len(line)}")
    if not line[68].isdigit() or int(line[68]) != checksum(line):
        raise ValueError(f"{where}: checksum {line[68]!r} does not match the line's ({checksum(line)})")
    for cols, shape, name in LINE1 if want == "1" else LINE2:
        text = line[cols]
        if not re.fullmatch(shape, text):
            raise ValueError(f"{where}: columns {cols.start + 1}-{cols.stop}, the {name}, read {text!r}: not in "
                             "the element-set format")
        if name in RANGES:
            lo, hi = RANGES[name]
            if not lo <= float(text) <= hi:
                raise ValueError(f"{where}: the {name} {text.strip()} is outside [{lo:g}, {hi:g}]")
    if want == "1" and not 1 <= float(line[20:32]) < 367:
        raise ValueError(f"{where}: the epoch's day of the year {line[20:32].strip()} is outside [1, 367)")


def parse(text: str, source: str) -> list[ElementSet]:
    """The element sets of a TLE text (2- or 3-line form, blank lines ignored); ValueError naming ``source``, the line
    and what is wrong with it."""
    lines = [(i + 1, ln.rstrip()) for i, ln in enumerate(text.splitlines()) if ln.strip()]
    out: list[ElementSet] = []
    j = 0
    while j < len(lines):
        name = ""
        if not lines[j][1].startswith("1 "):
            name = lines[j][1].strip()
            j += 1
        if j + 1 >= len(lines):
            raise ValueError(f"{source}: line {lines[-1][0]}: an element set needs a line 1 and a line 2 (the text ends "
                             "here)")
        (n1, l1), (n2, l2) = lines[j], lines[j + 1]
        _check_line(l1, "1", f"{source}: line {n1}")
        _check_line(l2, "2", f"{source}: line {n2}")
        if l1[2:7] != l2[2:7]:
            raise ValueError(f"{source}: lines {n1}-{n2}: catalogue numbers differ ({l1[2:7]!r} and {l2[2:7]!r})")
        out.append(ElementSet(name or l1[2:7].strip(), l1[:69], l2[:69]))
        j += 2
    if not out:
        raise ValueError(f"{source}: no element set in it")
    return out


def resolve(path: str) -> Path:
    """``path`` when it exists; else the shipped set of that file name (``SHIPPED``); FileNotFoundError otherwise."""
    p = Path(path).expanduser()
    if p.is_file():
        return p
    if p.name in SHIPPED:
        return HERE / p.name
    raise FileNotFoundError(f"no such file: {path} (shipped sets, found by name from anywhere: {', '.join(SHIPPED)})")


def element_sets(tle_file: str, tle_lines: list[str]) -> list[ElementSet]:
    """The configured sets: from ``tle_file`` (a path, or a shipped set's name) or from ``tle_lines``; [] for
    neither."""
    if tle_file:
        p = resolve(tle_file)
        return parse(read_limited(p, MAX_BYTES, "an element-set file").decode(errors="replace"), str(p))
    if tle_lines:
        return parse("\n".join(tle_lines), "link.orbit.tle")
    return []
