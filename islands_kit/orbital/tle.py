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

from pathlib import Path
from typing import NamedTuple

HERE = Path(__file__).resolve().parent
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
        return parse(p.read_text(), str(p))
    if tle_lines:
        return parse("\n".join(tle_lines), "link.orbit.tle")
    return []
