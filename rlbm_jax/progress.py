"""A dependency-free progress bar with rate and ETA, written to stderr.

On a terminal the bar redraws one line (`\\r`); into a file or a pipe (CI logs,
`2> log`) it writes whole lines instead, at most one every `every_s` seconds (and the
last), so a log reads as a list of progress lines rather than one line of carriage
returns.  The rate and the ETA are measured from the first `update` on, so time spent
before it (compiling) does not distort them.
"""
from __future__ import annotations

import math
import sys
import time


def fmt_s(s: float) -> str:
    """Seconds as 45s, 3m07s or 2h05m."""
    if not math.isfinite(s):
        return "--"
    s = int(round(s))
    if s >= 3600:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    if s >= 60:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s}s"


class Progress:
    def __init__(self, total: float, unit: str = "", label: str = "", stream=None, width: int = 28,
                 every_s: float = 30.0, tty: bool | None = None, rate_unit: str = "", rate_scale: float = 1.0):
        """`rate_unit` (e.g. "env-steps/s"): every line shows the rate, in units done per second
        times `rate_scale`, once it is known."""
        self.total = float(total)
        self.rate_unit = rate_unit
        self.rate_scale = rate_scale
        self.unit = unit
        self.label = label
        self.stream = stream if stream is not None else sys.stderr
        self.width = width
        self.every_s = every_s
        self.created = time.perf_counter()
        self.t0 = None  # time and count of the first update: the rate is measured from there
        self.done0 = 0.0
        self.done = 0.0
        self.enabled = self.stream is not None
        if tty is None:
            isatty = getattr(self.stream, "isatty", None)
            tty = bool(isatty and isatty())
        self.tty = tty
        self._last_line = -math.inf
        self._pending = ""

    def rate(self) -> float:
        """Units per second since the first update (NaN before a second one)."""
        if self.t0 is None or self.done <= self.done0:
            return float("nan")
        return (self.done - self.done0) / max(time.perf_counter() - self.t0, 1e-9)

    def eta_s(self) -> float:
        r = self.rate()
        return (self.total - self.done) / r if r > 0 else float("nan")

    def update(self, done: float, extra: str = "", measure: bool = True) -> None:
        """Show `done` units done; `measure=False` shows it without starting the rate's clock
        (a first display before compiling)."""
        now = time.perf_counter()
        if self.t0 is None and measure:
            self.t0, self.done0 = now, float(done)
        self.done = float(done)
        if not self.enabled:
            return
        r = self.rate()
        if self.rate_unit and r == r:
            extra = f"{r * self.rate_scale:,.0f} {self.rate_unit} {extra}"
        frac = min(self.done / self.total, 1.0) if self.total > 0 else 1.0
        bar = "#" * int(frac * self.width)
        text = (f"{self.label}[{bar:<{self.width}}] {frac * 100:5.1f}% {self.done:g}/{self.total:g}{self.unit} "
                f"elapsed {fmt_s(now - self.created)} ETA {fmt_s(self.eta_s())} {extra}").rstrip()
        if self.tty:
            self.stream.write("\r" + text)
            self.stream.flush()
        elif now - self._last_line >= self.every_s or self.done >= self.total:
            self.stream.write(text + "\n")
            self.stream.flush()
            self._last_line = now
            self._pending = ""
        else:
            self._pending = text

    def note(self, text: str) -> None:
        """A message on a line of its own (the bar, on a terminal, is redrawn after it)."""
        if self.enabled:
            self.stream.write(("\n" if self.tty else "") + text + "\n")
            self.stream.flush()

    def close(self) -> None:
        if not self.enabled:
            return
        if self.tty:
            self.stream.write("\n")
        elif self._pending:
            self.stream.write(self._pending + "\n")
        self.stream.flush()
