"""A comparison as text: a terminal table that fits 100 columns (``wide``: every column, as ``git log`` without
``--oneline``), Markdown, CSV or JSON (those three carry everything), the seed table, and the legend under them.

Fitting: each display column has a priority; while the table is wider than ``WIDTH`` the least needed column goes
(its name listed under the table with ``--wide`` to see it), then the run labels are shortened in the middle. Columns
that say nothing for these runs (a window wait off the orbit, a note no row has) are left out in either mode.
"""
from __future__ import annotations

import csv
import io
import math
import textwrap
from pathlib import PurePath
from typing import Any, Callable, Collection, Sequence

from islands_kit.compare.rows import (
    ComparisonError,
    compare_table,
    format_bytes,
    ratio_words,
    seed_summary,
    smoke_note,
)
from islands_kit.io import dumps_strict

FORMATS = ("table", "markdown", "csv", "json")
WIDTH = 100  # a terminal table's width unless wide
Cell = Callable[[dict[str, Any]], str]
_NONE = ("", "—")


def _bpb(r: dict[str, Any]) -> str:
    if r.get("diverged_at_step") is not None:
        return f"diverged at step {r['diverged_at_step']}"
    return f"{r['final_val_bpb']:.4f}"


def _outer_steps(steps: list[int] | None) -> str:
    """Syncs per fragment: one number when every fragment took as many, else min..max; — without fragment syncs."""
    if not steps:
        return "—"
    return str(steps[0]) if min(steps) == max(steps) else f"{min(steps)}..{max(steps)}"


def _mean_sd(r: dict[str, Any]) -> str:
    """The mean bpb over seeds, with its sample sd only where there are two seeds or more (never "± 0")."""
    m, sd = r["final_val_bpb_mean"], r["final_val_bpb_sd"]
    return "diverged" if not math.isfinite(m) else f"{m:.4f}" if sd is None else f"{m:.4f} (sd {sd:.4f})"


# (header, cell, priority): priority 0 is never left out; otherwise the highest number goes first when fitting
RUN_COLUMNS: list[tuple[str, Cell, int]] = [
    ("run", lambda r: r["run"], 0), ("experiment", lambda r: r["experiment"], 4),
    ("corpus", lambda r: str(r["corpus"]), 12), ("preset", lambda r: str(r["preset"]), 11),
    ("tokens", lambda r: f"{r['tokens']:,}", 10), ("seed", lambda r: str(r["seed"]), 1), ("bpb", _bpb, 0),
    ("bpb / {ref}", lambda r: f"{r['bpb_vs_ref']:.4f}", 0),
    ("link bytes", lambda r: format_bytes(r["cross_site_bytes"]), 0),
    ("per island", lambda r: format_bytes(r["bytes_per_island"]), 9),
    ("busiest link", lambda r: "—" if r["busiest_link_bytes"] is None else format_bytes(r["busiest_link_bytes"]), 9),
    ("bytes vs {ref}", lambda r: ratio_words(r["x_fewer_than_ref"]), 2),
    ("bytes vs own all-reduce", lambda r: ratio_words(r["x_fewer_bytes"]), 3),
    ("tokens / active param",
     lambda r: "—" if r["tokens_per_active_param"] is None else f"{r['tokens_per_active_param']:.1f}", 8),
    ("outer steps / fragment", lambda r: _outer_steps(r["outer_steps_per_fragment"]), 8),
    ("sim s", lambda r: f"{r['sim_wall_clock_s']:.2f}", 3),  # the time the islands buy: kept before util
    ("util", lambda r: f"{100 * r['compute_utilization']:.1f}%", 5),
    ("window wait s", lambda r: "—" if r.get("window_wait_s") is None else f"{r['window_wait_s']:.2f}", 6),
    ("note", lambda r: str(r.get("note", r.get("mismatch", "")) or ""), 0),
]
SEED_COLUMNS: list[tuple[str, Cell, int]] = [
    ("experiment", lambda r: r["experiment"], 0), ("seeds", lambda r: " ".join(map(str, r["seeds"])), 1),
    ("bpb mean", _mean_sd, 0), ("bpb / {ref}, paired [95% CI]", lambda r: r["bpb_vs_ref_text"], 0),
    ("link bytes mean", lambda r: format_bytes(r["cross_site_bytes_mean"]), 2),
    ("bytes vs {ref}", lambda r: ratio_words(r["x_fewer_than_ref_mean"]), 3),
    ("bytes vs own all-reduce", lambda r: ratio_words(r["x_fewer_bytes_mean"]), 4),
    ("util", lambda r: f"{100 * r['compute_utilization_mean']:.1f}%", 5),
]


def _columns(rows: Sequence[dict[str, Any]], columns: Sequence[tuple[str, Cell, int]] | None) -> list[tuple[str, Cell, int]]:
    """The display columns for ``rows`` (run or seed rows), less those with nothing to say for any row."""
    cols = list(columns or (RUN_COLUMNS if rows and "run" in rows[0] else SEED_COLUMNS))
    return [c for c in cols if c[2] == 0 and c[0] != "note" or any(str(c[1](r)) not in _NONE for r in rows)]


def _shorten(text: str, width: int) -> str:
    """``text`` cut in the middle to ``width`` characters (``runs/…/two_site``)."""
    if len(text) <= width:
        return text
    left = (width - 1) // 2
    return text[:left] + "…" + text[len(text) - (width - 1 - left):]


def _two_lines(header: str) -> list[str]:
    """A header over two lines, split between words where the longer line is shortest."""
    words = header.split(" ")
    if len(words) < 2:
        return [header]
    splits = [(" ".join(words[:k]), " ".join(words[k:])) for k in range(1, len(words))]
    return list(min(splits, key=lambda ab: max(map(len, ab))))


def fit(hdr: list[str], body: list[list[str]], prio: list[int], width: int = WIDTH) -> tuple[list[list[str]], list[list[str]], list[str]]:
    """Fit a table into ``width`` columns: a header wider than its column's cells goes over two lines; then the
    least needed columns are left out (highest ``prio`` first, 0 never); then the first column is shortened in the
    middle. Returns the header lines (one or two), the body and the names of the columns left out."""
    cells = [max((len(line[c]) for line in body), default=0) for c in range(len(hdr))]
    split = [_two_lines(h) if len(h) > cells[c] else [h] for c, h in enumerate(hdr)]
    keep = list(range(len(hdr)))

    def total(idx: list[int]) -> int:
        return sum(max(cells[c], *map(len, split[c])) for c in idx) + 2 * (len(idx) - 1)

    dropped: list[str] = []
    while total(keep) > width and any(prio[c] for c in keep):
        worst = max(keep, key=lambda c: (prio[c], c))
        keep.remove(worst)
        dropped.append(hdr[worst])
    two = any(len(split[c]) == 2 for c in keep)
    head = [[(split[c][0] if len(split[c]) == 2 else "") for c in keep]] if two else []
    head.append([split[c][-1] for c in keep])
    body = [[line[c] for c in keep] for line in body]
    over = total(keep) - width
    if over > 0 and body:
        first = max(*map(len, (h[0] for h in head)), max(len(line[0]) for line in body) - over, 12)
        body = [[_shorten(line[0], first)] + line[1:] for line in body]
    return head, body, dropped


def render(rows: Sequence[dict[str, Any]], fmt: str = "table", columns: Sequence[tuple[str, Cell, int]] | None = None,
           wide: bool = False) -> str:
    """``rows`` as a terminal table (fitted to ``WIDTH`` unless ``wide``), Markdown (every display column), CSV or
    JSON (every field: non-finite numbers become empty cells / ``null``)."""
    return _render(rows, fmt, columns, wide)[0]


def _render(rows: Sequence[dict[str, Any]], fmt: str, columns: Sequence[tuple[str, Cell, int]] | None,
            wide: bool) -> tuple[str, list[str]]:
    """:func:`render`'s text and the display columns it shows (their names as in ``RUN_COLUMNS``, "{ref}" kept;
    every field's name for CSV and JSON)."""
    if fmt not in FORMATS:
        raise ComparisonError(f"format: must be one of {'|'.join(FORMATS)} (got {fmt!r})")
    if fmt == "json":
        return dumps_strict(list(rows), indent=1), list(rows[0]) if rows else []
    if fmt == "csv":
        buf = io.StringIO()
        keys = list(rows[0]) if rows else []
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(keys)
        for r in rows:
            w.writerow(["" if isinstance(v, float) and not math.isfinite(v) else
                        " ".join(map(str, v)) if isinstance(v, list) else "" if v is None else v for v in r.values()])
        return buf.getvalue().rstrip("\n"), keys
    cols = _columns(rows, columns)
    body = [[str(f(r)) for _, f, _ in cols] for r in rows]
    # "{ref}" in a header: the reference run's experiment, so that no ratio column stands without its reference
    ref = str(rows[0].get("reference_experiment", "ref")) if rows else "ref"
    hdr = [name.replace("{ref}", ref) for name, _, _ in cols]
    if fmt == "markdown":
        esc = [[v.replace("|", "\\|") for v in line] for line in [hdr] + body]
        md = ["| " + " | ".join(esc[0]) + " |", "|" + "|".join("---" for _ in hdr) + "|"]
        return "\n".join(md + ["| " + " | ".join(line) + " |" for line in esc[1:]]), [name for name, _, _ in cols]
    if hdr and hdr[0] == "run" and not wide:  # a fitted table names a run by its folder's last parts
        for line, short in zip(body, short_run_labels([line[0] for line in body])):
            line[0] = short
    dropped: list[str] = []
    head: list[list[str]] = [hdr]
    if not wide:
        head, body, dropped = fit(hdr, body, [p for _, _, p in cols])
    lines = head + body
    widths = [max(len(line[c]) for line in lines) for c in range(len(head[0]))]
    text = "\n".join("  ".join(v.ljust(w) for v, w in zip(line, widths)).rstrip() for line in lines)
    if dropped:
        text += "\n" + _wrap(f"(left out to fit {WIDTH} columns: {', '.join(dropped)}; --wide shows every column)")
    return text, [name for name, _, _ in cols if name.replace("{ref}", ref) not in dropped]


def short_run_labels(labels: Sequence[str]) -> list[str]:
    """Each absolute path as its fewest trailing parts that still tell the runs apart (``/home/u/runs/demo/baseline``
    -> ``baseline``; two ``.../s0`` -> ``a/s0``, ``b/s0``); a relative label stays as it is. Notebooks run in their
    output folder, so their runs' folders were absolute and crowded the table's columns out."""
    parts = [PurePath(x).parts if PurePath(x).is_absolute() else None for x in labels]
    deepest = max((len(p) for p in parts if p), default=0)
    for k in range(1, deepest + 1):
        out = [x if p is None else "/".join(p[-k:]) for x, p in zip(labels, parts)]
        if len(set(out)) == len(set(labels)):
            return out
    return list(labels)


def _wrap(text: str) -> str:
    return "\n".join(textwrap.fill(line, WIDTH) if len(line) > WIDTH else line for line in text.splitlines())


def reference_note(rows: Sequence[dict[str, Any]], swept: bool = False, shown: Collection[str] | None = None) -> str:
    """The legend under a table: what "ref" is and what each number column means (wrapped to ``WIDTH``); with
    ``shown`` (the columns a fitted table kept, as ``RUN_COLUMNS`` names them) only those columns'."""
    if not rows:
        return ""
    legend = _legend(rows, swept)
    return _wrap("\n".join(line for cols, line in legend if shown is None or any(c in shown for c in cols)))


def _legend(rows: Sequence[dict[str, Any]], swept: bool) -> list[tuple[tuple[str, ...], str]]:
    """The legend's lines, each with the columns it explains."""
    ref, exp = rows[0]["reference"], rows[0].get("reference_experiment", "ref")
    lines: list[tuple[tuple[str, ...], str]] = [
        (("bpb",), "bpb: bits per byte on the held-out bytes (lower is better)."),
        (("bpb / {ref}",), f"bpb / {exp}: over the {exp} run with the same seed (paired; reference run {ref})."),
    ]
    if swept:
        lines.append((("bpb / {ref}",), f"bpb / {exp}, paired [95% CI]: the geometric mean of the per-seed ratios, its "
                      "paired t interval (on log-ratios) and n seeds; 'not resolved' when the interval holds 1; one "
                      "seed has no interval."))
    else:
        lines.append((("bpb / {ref}",), f"Each bpb / {exp} is one seed's ratio (n = 1, no interval): runs of two seeds "
                      "or more per configuration (--seeds 0 1 2) give each ratio its 95% interval."))
    lines += [
        (("link bytes",), "link bytes: every byte the run put on the wide-area link (all islands, both directions)."),
        (("per island", "busiest link"), "per island: the link bytes over the run's islands; busiest link: the most "
         "bytes on one link in one direction."),
        (("bytes vs {ref}",), f"bytes vs {exp}: the run's link bytes against the {exp} run's with the same seed (the "
         "same reference as bpb)."),
        (("bytes vs own all-reduce",), "bytes vs own all-reduce: the run's link bytes against an fp32 gradient "
         "all-reduce every step among its own islands (data-parallel on the same hardware: eight islands all-reduce "
         "more than two)."),
        (("sim s",), "sim s: simulated wall-clock seconds (each island's compute time from its hardware profile, plus "
         "waiting for the simulated link), not the real time the run took."),
        (("util",), "util: compute utilisation, the share of that simulated time the islands spent computing rather "
         "than waiting."),
        (("window wait s",), "window wait s: on the orbit, simulated seconds the run's transfers spent waiting for "
         "their link's contact window, summed over transfers (— off the orbit); result.json's orbit section has bytes "
         "per link and window."),
        (("tokens / active param", "outer steps / fragment"), "tokens / active param, outer steps / fragment: the "
         "regime (the papers measure DiLoCo at >= 20 tokens per parameter and hundreds of outer steps; a handful of "
         "outer steps measures the method's warm-up)."),
        (("note",), f"note: '0.93x tokens' where a run trained 0.93 times the tokens of its {exp} pair within the same "
         "budget (the bpb ratio is then not at equal tokens); a different corpus or budget where compared anyway."),
    ]
    return lines


def report(results: Sequence[dict[str, Any]], fmt: str = "table", reference: str | None = None,
           allow_mismatch: bool = False, wide: bool = False) -> tuple[list[dict[str, Any]], list[dict[str, Any]], str]:
    """Rows, seed summary (when some configuration ran with more than one seed, else []) and the rendered text."""
    rows = compare_table(results, reference, allow_mismatch)
    seeds = seed_summary(rows, results)
    swept = any(s["n_seeds"] > 1 for s in seeds)
    if fmt == "json":
        return rows, seeds if swept else [], dumps_strict({"runs": rows, "seeds": seeds if swept else []}, indent=1)
    text, shown = _render(rows, fmt, None, wide)
    note = smoke_note([r.get("preset") for r in rows])
    if note and fmt != "csv":
        text = f"{_wrap(note)}\n\n{text}"
    if swept:
        head = "over seeds (each seed once; bpb ratios paired by seed):\n" if fmt == "table" else ""
        seed_text, seed_shown = _render(seeds, fmt, None if fmt == "csv" else SEED_COLUMNS, wide)
        text += "\n\n" + head + seed_text
        shown += [name.replace(" mean", "").split(", paired")[0] for name in seed_shown]
        notes = [f"{s['experiment']}: " + "; ".join(n for n in (s["note"], s["ratio_note"]) if n)
                 for s in seeds if s["note"] or s["ratio_note"]]
        if notes and fmt != "csv":
            text += "\n" + _wrap("\n".join(notes))
    if fmt != "csv":  # the fitted table's legend explains the columns it kept; Markdown keeps every one
        text += "\n\n" + reference_note(rows, swept, shown if fmt == "table" and not wide else None)
    return rows, seeds if swept else [], text
