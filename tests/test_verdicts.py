"""A verdict word beside a ratio and its interval says what the interval supports (``stats.verdict``): the README,
RESULTS, docs/ and the notebooks are scanned for every ``mean [lo, hi]`` and the words of its clause — the text
before it back to the previous clause's end, and after it up to the next bracket or the end of its parenthesis.
"a tie" and "level" are never a verdict (an interval holding 1 is "not resolved"); "ahead"/"behind"/"resolved" need
an interval on one side of 1, "not resolved" one that holds 1 (or straddles a stated bar ``<= X``), "met"/"not met"
a stated bar the interval clears or misses, "within X%" an interval inside 1 ± X; "beats"/"outperforms" say
"ahead" and "loses to"/"trails" say "behind" in other words."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from islands_kit.stats import verdict

ROOT = Path(__file__).resolve().parent.parent
SOURCES = [ROOT / "README.md", ROOT / "benchmarks" / "RESULTS.md", *sorted((ROOT / "docs").glob("*.md")),
           *sorted((ROOT / "notebooks").glob("*.py"))]
INTERVAL = re.compile(r"(\d+\.\d+)\**\s+\[(\d+\.\d+),\s+(\d+\.\d+)\]")
NEVER = re.compile(r"\b(?:ties?|tied|level)\b", re.I)
BAR = re.compile(r"(?:<=|≤)\s*(\d+\.\d+)")
# the words that say an interval lies on one side of 1, each with the verdict it needs
SIDES = (("ahead", r"\b(?:ahead|beats?|beating|outperforms?)\b"), ("behind", r"\b(?:behind|loses to|trails)\b"))


def _clause(text: str, m: re.Match[str]) -> tuple[str, str]:
    """The words before the ratio (back to the last of . ; | ) ] or a blank line, at most 80 characters) and after
    its interval (up to the next [ ; | or newline, or through the first closing parenthesis, at most 60)."""
    before = text[max(0, m.start() - 80):m.start()]
    cut = max(before.rfind(c) for c in (". ", ";", "|", ")", "]", "\n\n"))
    before = before[cut + 1:] if cut >= 0 else before
    after = text[m.end():m.end() + 60]
    stops = [i for i in (after.find(c) for c in ("[", ";", "|", "\n")) if i >= 0]
    close = after.find(")")
    end = min(stops + ([close + 1] if close >= 0 else []) + [len(after)])
    return " ".join(before.split()), " ".join(after[:end].split())


def problems(text: str) -> list[str]:
    """Every verdict word the interval beside it does not support, as 'ratio [lo, hi]: word (clause)'."""
    out = []
    for m in INTERVAL.finditer(text):
        lo, hi = float(m.group(2)), float(m.group(3))
        if not lo <= float(m.group(1)) <= hi:  # not a ratio and its interval (a range of something else)
            continue
        before, after = _clause(text, m)
        clause = f"{before} {m.group(0)} {after}"
        bar = BAR.search(clause)
        said = verdict(lo, hi, bar=float(bar.group(1))) if bar else None
        plain = verdict(lo, hi)
        bad = []
        if NEVER.search(clause):
            bad.append(NEVER.search(clause).group(0))  # type: ignore[union-attr]
        words = clause.lower()
        if "not resolved" in words and not (plain == "not resolved" or said == "not resolved"):
            bad.append("not resolved")
        rest = words.replace("not resolved", "").replace("not met", "")
        if re.search(r"\bresolved\b", rest) and plain == "not resolved":
            bad.append("resolved")
        for side, pattern in SIDES:
            if plain != side:
                bad += dict.fromkeys(re.findall(pattern, rest))
        if bar and re.search(r"\bmet\b", rest) and said != "met":
            bad.append("met")
        if bar and "not met" in words and said != "not met":
            bad.append("not met")
        for w in re.findall(r"within (\d+(?:\.\d+)?)%", words):
            if verdict(lo, hi, within=float(w) / 100) != f"within {w}%":
                bad.append(f"within {w}%")
        out += [f"{m.group(0)}: {w} ({clause})" for w in bad]
    return out


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_verdict_beside_an_interval_is_what_the_interval_supports(path):
    found = problems(path.read_text())
    assert not found, f"{path.relative_to(ROOT)}:\n" + "\n".join(found)


def test_the_scan_reads_the_documents():
    counted = sum(len(INTERVAL.findall(p.read_text())) for p in SOURCES)
    assert counted > 50  # the README's tables and RESULTS' rows are read, not skipped


@pytest.mark.parametrize("text, word", [
    ("hierarchical ties eight_cell (0.9993 [0.9883, 1.0105], not resolved).", "ties"),
    ("H1 = 1 is level with two_site (1.0052 [0.9965, 1.0139]).", "level"),
    ("two_site is 2.2% ahead (0.9782 [0.9623, 1.0044]).", "ahead"),
    ("two_site is behind (1.0056 [0.9848, 1.0269]).", "behind"),
    ("the bar <= 1.02 is met (1.0149 [1.0007, 1.0292]).", "met"),
    ("eight_cell <= 1.04: met, 1.0394 [1.0184, 1.0607] over 3 seeds.", "met"),
    ("two_site comes within 2% (1.0149 [1.0007, 1.0292]).", "within 2%"),
    ("the gap is 1.0305 [1.0163, 1.0449], not resolved.", "not resolved"),
    ("decoupled beats lock-step (0.9743 [0.9150, 1.0370]).", "beats"),
    ("hierarchical loses to eight_cell (0.9993 [0.9883, 1.0105]).", "loses to"),
])
def test_a_planted_verdict_the_interval_does_not_support_fails(text, word):
    found = problems(text)
    assert found and any(f": {word} (" in f for f in found), found


@pytest.mark.parametrize("text", [
    "against eight_cell it is not resolved (0.9993 [0.9883, 1.0105]).",
    "two_site is behind the baseline (1.0305 [1.0163, 1.0449]) and ahead at equal time (0.9780 [0.9693, 0.9867]).",
    "<= 1.08: met, 1.0546 [1.0404, 1.0690].",
    "demo-long: 1.0149 [1.0007, 1.0292], not resolved against the bar <= 1.02.",
    "| two_site | 1.0272 [1.0211, 1.0334], behind | 353x fewer |",
    "H1 = 1 against H1 = 10 is 0.9740 [0.9653, 0.9827]; within 5% of two_site 1.0052 [0.9965, 1.0139].",
    "at equal simulated time it beats both: 0.9125 [0.9004, 0.9247] against two_site",
])
def test_a_verdict_the_interval_supports_passes(text):
    assert problems(text) == []
