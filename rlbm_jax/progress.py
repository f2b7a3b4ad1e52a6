"""A dependency-free progress bar with rate and ETA, written to stderr."""
from __future__ import annotations

import sys
import time


class Progress:
    def __init__(self, total: float, unit: str = "", label: str = "", stream=None, width: int = 28):
        self.total = float(total)
        self.unit = unit
        self.label = label
        self.stream = stream if stream is not None else sys.stderr
        self.width = width
        self.start = time.perf_counter()
        self.done = 0.0
        self.enabled = self.stream is not None

    def update(self, done: float, extra: str = "") -> None:
        self.done = float(done)
        if not self.enabled:
            return
        frac = min(self.done / self.total, 1.0) if self.total > 0 else 1.0
        el = time.perf_counter() - self.start
        eta = el / frac - el if frac > 0 else float("nan")
        bar = "#" * int(frac * self.width)
        self.stream.write(f"\r{self.label}[{bar:<{self.width}}] {frac * 100:5.1f}% {self.done:.1f}/{self.total:.1f}"
                          f"{self.unit} elapsed {el:5.1f}s ETA {eta:5.1f}s {extra}")
        self.stream.flush()

    def close(self) -> None:
        if self.enabled:
            self.stream.write("\n")
            self.stream.flush()
