"""Live progress of a training run: step, tokens, tokens per second, ETA and the latest evaluation bpb.

One plain-text line per update, written to stdout so that it reads the same in every place a run is watched:

* a terminal (stdout is a TTY): the line is rewritten in place (carriage return) at most every ``tty_interval_s``;
* anything else — an executed notebook's output cell (papermill), a pipe, a CI log: a new line at every evaluation,
  at every tenth of the run, and at least every ``line_interval_s`` seconds, so a log stays short and readable.

A run also prints one line when it starts and one when it ends (``start`` / ``end``). ``quiet`` (the config's
``progress = false``, the CLI's ``--quiet`` or ``ISLANDS_KIT_QUIET=1`` for CI) silences all of it.

Both scores are in bits per byte, so that a gap between them is a train/validation gap and not a change of unit: the
training loss in bpb (its natural-log value, nats per byte as the optimizer sees it, beside it in brackets) and the
validation score on the held-out bytes (the same number as ``val_bpb`` in history.jsonl).
"""
from __future__ import annotations

import math
import os
import sys
import time
from typing import IO, Any


def quiet_from_env() -> bool:
    """``ISLANDS_KIT_QUIET`` set to anything but ``""``/``0``: no progress output (CI, test logs)."""
    return os.environ.get("ISLANDS_KIT_QUIET", "") not in ("", "0")


def format_duration(s: float) -> str:
    """``75.2`` -> ``"1m15s"``; ``3725`` -> ``"1h02m"``; under a minute ``"12.3s"``."""
    if s != s or s < 0:  # NaN: no estimate yet
        return "?"
    if s < 60:
        return f"{s:.1f}s"
    m, sec = divmod(int(round(s)), 60)
    if m < 60:
        return f"{m}m{sec:02d}s"
    h, m = divmod(m, 60)
    return f"{h}h{m:02d}m"


class Progress:
    """Progress of one run of ``total_steps`` inner steps of ``tokens_per_step`` tokens each.

    ``update(step, tokens, loss)`` after every inner step; ``eval(step, bpb)`` after every evaluation (every
    ``eval_every`` steps and at the end). Throughput and ETA are measured from the first update of this process (a
    resumed run does not count the steps it skipped)."""

    def __init__(self, label: str, total_steps: int, tokens_per_step: int, start_step: int = 0, quiet: bool = False,
                 stream: IO[str] | None = None, tty: bool | None = None, line_interval_s: float = 30.0,
                 tty_interval_s: float = 0.5, eval_every: int = 0) -> None:
        self.label = label
        self.total = int(total_steps)
        self.tokens_per_step = int(tokens_per_step)
        self.quiet = quiet or quiet_from_env()
        self.stream = stream if stream is not None else sys.stdout
        self.tty = tty if tty is not None else bool(getattr(self.stream, "isatty", lambda: False)())
        self.line_interval_s = line_interval_s
        self.tty_interval_s = tty_interval_s
        self.start_step = int(start_step)
        self.step = int(start_step)
        self.tokens = 0
        self.loss = float("nan")
        self.bpb: float | None = None
        self.bpb_step: int | None = None
        self.t0 = time.perf_counter()
        self._last_print = -float("inf")
        self._every = max(1, self.total // 10)
        self.eval_every = eval_every  # steps followed by an evaluation get their line from eval(), not update()
        self._dirty_tty = False

    # -- events ---------------------------------------------------------------------------------------------------
    def start(self, detail: str = "") -> None:
        self._line(f"[{self.label}] start: {self.total} steps x {self.tokens_per_step:,} tokens"
                   + (f" from step {self.start_step}" if self.start_step else "") + (f" | {detail}" if detail else ""))
        self.t0 = time.perf_counter()

    def update(self, step: int, tokens: int, loss: float) -> None:
        self.step, self.tokens, self.loss = int(step), int(tokens), float(loss)
        if self.quiet:
            return
        now = time.perf_counter()
        if self.tty:
            if now - self._last_print >= self.tty_interval_s or step == self.total:
                self._emit(now)
        elif step == self.total or (self.eval_every and step % self.eval_every == 0):
            return  # an evaluation follows; its line says the same and more
        elif step % self._every == 0 or now - self._last_print >= self.line_interval_s:
            self._emit(now)

    def eval(self, step: int, bpb: float) -> None:
        self.bpb, self.bpb_step = float(bpb), int(step)
        if not self.quiet:
            self._emit(time.perf_counter(), force_line=True)

    def end(self, summary: str) -> None:
        self._line(f"[{self.label}] done in {format_duration(self.elapsed_s())}: {summary}")

    # -- numbers --------------------------------------------------------------------------------------------------
    def elapsed_s(self) -> float:
        return time.perf_counter() - self.t0

    def tokens_per_s(self) -> float:
        done = self.step - self.start_step
        dt = self.elapsed_s()
        return done * self.tokens_per_step / dt if done > 0 and dt > 0 else float("nan")

    def eta_s(self) -> float:
        done = self.step - self.start_step
        return (self.total - self.step) * self.elapsed_s() / done if done > 0 else float("nan")

    def status(self) -> str:
        """``[two_site] step 150/300 (50%) | 768.0k tokens | 2,450 tok/s | ETA 1m02s | train 2.758 bpb (1.912
        nats) | val 2.910 bpb @150``: both scores in bits per byte (bpb = nats / ln 2), the training loss's natural-log
        value (what the optimizer sees) in brackets."""
        pct = 100.0 * self.step / max(1, self.total)
        tps = self.tokens_per_s()
        bpb = "" if self.bpb is None else f" | val {self.bpb:.3f} bpb @{self.bpb_step}"
        return (f"[{self.label}] step {self.step}/{self.total} ({pct:.0f}%) | {_si(self.tokens)} tokens | "
                f"{'?' if tps != tps else f'{tps:,.0f}'} tok/s | ETA {format_duration(self.eta_s())} | "
                f"train {self.loss / math.log(2):.3f} bpb ({self.loss:.3f} nats){bpb}")

    # -- output ---------------------------------------------------------------------------------------------------
    def _emit(self, now: float, force_line: bool = False) -> None:
        self._last_print = now
        if self.tty and not force_line:
            self.stream.write("\r" + self.status() + "\x1b[K")
            self._dirty_tty = True
            self.stream.flush()
        else:
            self._line(self.status())

    def _line(self, text: str) -> None:
        if self.quiet:
            return
        if self._dirty_tty:
            self.stream.write("\r\x1b[K")
            self._dirty_tty = False
        self.stream.write(text + "\n")
        self.stream.flush()


def _si(n: float) -> str:
    for unit, div in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(n) >= div:
            return f"{n / div:.1f}{unit}"
    return f"{n:.0f}"


def describe(cfg: Any, out_dir: Any) -> str:
    """What a run's start line adds: preset, seed, corpus and where its files go."""
    return f"preset {cfg.preset}, seed {cfg.seed}, corpus {cfg.data.corpus}" + (f" -> {out_dir}" if out_dir else "")
