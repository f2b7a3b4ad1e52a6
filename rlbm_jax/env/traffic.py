"""Traffic: flow-size tables, Poisson flow arrivals and flow-slot allocation.

Flow sizes are drawn by inverse CDF with linear interpolation inside a segment
from a `size_bytes,cdf` table.  `websearch` and `datamining` ship as package
data; any CSV of that form is accepted.  Arrivals of all senders form one
Poisson process (the sum of the per-sender processes) whose sender is drawn
uniformly; at most one flow starts per tick, a later one waits for the next
tick (its exact arrival time is kept for its FCT).  A start that finds every
flow slot busy is refused and counted.
"""
from __future__ import annotations

import csv
import hashlib
import io
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

TABLE_POINTS = 32  # tables are padded to this length so that they can be vmapped
BUILTIN_TABLES = ("websearch", "datamining")


@dataclass(frozen=True)
class SizeTable:
    size_bytes: np.ndarray
    cdf: np.ndarray
    name: str = "custom"

    @property
    def mean_bytes(self) -> float:
        return float(mean_size_bytes(jnp.asarray(self.size_bytes), jnp.asarray(self.cdf)))

    @property
    def digest(self) -> str:
        """SHA-256 of the table's values (float64 sizes, then probabilities): what a run's
        output records, so that two runs can be told to have used the same table."""
        h = hashlib.sha256(np.asarray(self.size_bytes, np.float64).tobytes())
        h.update(np.asarray(self.cdf, np.float64).tobytes())
        return h.hexdigest()


def check_cdf(size_bytes, cdf, rows=None, name: str = "") -> None:
    """Refuse a table that is not a flow-size CDF; `rows` names each entry (file line
    numbers) in the error, else its position."""
    size_bytes = np.asarray(size_bytes, dtype=np.float64)
    cdf = np.asarray(cdf, dtype=np.float64)
    if size_bytes.ndim != 1 or size_bytes.shape != cdf.shape or size_bytes.size < 2:
        raise ValueError("cdf: need at least two (size_bytes, cdf) rows of equal length")
    tag = f"{name} " if name else ""
    where = (lambda i: f"{tag}line {rows[i]}") if rows is not None else (lambda i: f"{tag}row {i + 1}")
    for name, v in (("size_bytes", size_bytes), ("cdf", cdf)):
        bad = np.flatnonzero(~np.isfinite(v))
        if bad.size:
            raise ValueError(f"cdf {where(bad[0])}: {name} {v[bad[0]]} is not a finite number")
    bad = np.flatnonzero(size_bytes < 0)
    if bad.size:
        raise ValueError(f"cdf {where(bad[0])}: size_bytes must be non-negative, got {size_bytes[bad[0]]}")
    bad = np.flatnonzero(np.diff(size_bytes) < 0)
    if bad.size:
        raise ValueError(f"cdf {where(bad[0] + 1)}: the size_bytes column must be non-decreasing "
                         f"({size_bytes[bad[0] + 1]} after {size_bytes[bad[0]]})")
    bad = np.flatnonzero(np.diff(cdf) < 0)
    if bad.size:
        raise ValueError(f"cdf {where(bad[0] + 1)}: the cdf column must be non-decreasing (monotone): "
                         f"{cdf[bad[0] + 1]} after {cdf[bad[0]]}")
    if cdf[0] < 0 or abs(cdf[-1] - 1.0) > 1e-6:
        raise ValueError(f"cdf: the cdf column must start >= 0 and end at 1, ends at {cdf[-1]} ({where(cdf.size - 1)})")
    # probability given to flows of no bytes: at the first row, or on a segment ending at size 0
    mass = np.concatenate([cdf[:1], np.diff(cdf)])
    bad = np.flatnonzero((size_bytes <= 0) & (mass > 0))
    if bad.size:
        raise ValueError(f"cdf {where(bad[0])}: flows of {size_bytes[bad[0]]:g} bytes get probability "
                         f"{mass[bad[0]]:g}; every flow must carry data (sizes > 0)")


def parse_table(text: str, name: str = "custom") -> SizeTable:
    """A `size_bytes,cdf` table: one header line allowed before the first row, `#`
    comments and blank lines skipped; any other line that is not two numbers is refused
    with its line number."""
    rows, lines = [], []
    for lineno, line in enumerate(text.splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        parts = [p.strip() for p in next(csv.reader(io.StringIO(line)))]
        try:
            vals = [float(p) for p in parts]
        except ValueError:
            if not rows and not lines:  # the header
                lines.append(0)
                continue
            raise ValueError(f"cdf {name} line {lineno}: {line!r} is not two numbers (size_bytes,cdf)") from None
        if len(vals) != 2:
            raise ValueError(f"cdf {name} line {lineno}: expected 2 columns (size_bytes,cdf), got {len(vals)}")
        rows.append(vals)
        lines.append(lineno)
    lines = [n for n in lines if n]
    if not rows:
        raise ValueError(f"cdf: no (size_bytes, cdf) rows found in {name}")
    arr = np.asarray(rows)
    check_cdf(arr[:, 0], arr[:, 1], rows=lines, name=name)
    return SizeTable(arr[:, 0], arr[:, 1], name)


def load_table(name_or_path: str) -> SizeTable:
    """A built-in table by name, or a CSV file of `size_bytes,cdf` rows."""
    if name_or_path in BUILTIN_TABLES:
        text = resources.files("rlbm_jax.env").joinpath("data", f"{name_or_path}.csv").read_text()
        return parse_table(text, name_or_path)
    path = Path(name_or_path)
    if not path.is_file():
        raise ValueError(f"cdf: {name_or_path!r} is neither a built-in table ({', '.join(BUILTIN_TABLES)}) nor a file")
    return parse_table(path.read_text(), path.stem)


def pad_table(table: SizeTable, points: int = TABLE_POINTS):
    n = table.size_bytes.size
    if n > points:
        raise ValueError(f"cdf: at most {points} rows supported, got {n}")
    sizes = np.concatenate([table.size_bytes, np.full(points - n, table.size_bytes[-1])])
    probs = np.concatenate([table.cdf, np.ones(points - n)])
    return sizes, probs


def mean_size_bytes(size_bytes, cdf):
    """Mean of the piecewise-linear distribution."""
    mids = 0.5 * (size_bytes[1:] + size_bytes[:-1])
    return jnp.sum(mids * (cdf[1:] - cdf[:-1]))


def sample_size_bytes(u, size_bytes, cdf):
    """Inverse-CDF draw for a uniform u in [0, 1), linear inside the segment; never 0."""
    u = u * cdf[-1]
    u = jnp.maximum(u, cdf[0])
    idx = jnp.clip(jnp.sum(cdf <= u) - 1, 0, cdf.shape[0] - 2)
    c0, c1 = cdf[idx], cdf[idx + 1]
    s0, s1 = size_bytes[idx], size_bytes[idx + 1]
    frac = jnp.where(c1 > c0, (u - c0) / jnp.maximum(c1 - c0, 1e-12), 0.0)
    return jnp.maximum(s0 + frac * (s1 - s0), 1.0)


def arrival_rate_per_s(params):
    """Total flow arrival rate of all senders (flows/s)."""
    by_load = params.load * params.bottleneck_rate_bps / (8.0 * mean_size_bytes(params.cdf_size_bytes, params.cdf_prob))
    # thesis code: per-sender gaps of 100 * Exp(500 * load), i.e. 5 * load flows/s per sender
    thesis_code = 5.0 * params.load * params.num_senders
    return jnp.where(params.arrival_id == 0, by_load, thesis_code)


def arrival_draw(u, rate, params):
    """An arrival's size (bytes), sender and gap (s) to the next arrival, from its
    three uniforms u [3] (gap, size, sender) and the total arrival rate."""
    size_b = sample_size_bytes(u[1], params.cdf_size_bytes, params.cdf_prob)
    sender = jnp.minimum((u[2] * params.num_senders).astype(jnp.int32), params.num_senders - 1)
    return size_b, sender, gap_from_uniform_s(u[0], rate)


def gap_from_uniform_s(u, rate):
    """An exponential gap (s) of a Poisson process of `rate` per s, by inversion of the
    uniform u in [0, 1) (never, when the rate is 0)."""
    return _gap_s(-jnp.log(jnp.maximum(1.0 - u, 1e-12)), rate)


def next_gap_s(key, rate):
    return _gap_s(jax.random.exponential(key, ()), rate)


def _gap_s(exp1, rate):
    """A unit-mean exponential draw scaled to the arrival rate (never, when it is 0)."""
    return jnp.where(rate > 0, exp1 / jnp.maximum(rate, 1e-30), jnp.inf)


def hash_uniform(seed, counter, n: int):
    """n uniforms in [0, 1) from a counter-based integer hash of (seed, counter).

    Per-tick randomness of the simulator: far cheaper than a PRNG-key split per
    tick, deterministic under the seed, and independent across envs that have
    different seeds.  The mixer is the "lowbias32" finaliser."""
    x = (seed.astype(jnp.uint32) ^ (counter.astype(jnp.uint32) * jnp.uint32(0x9E3779B9)))
    x = x + jnp.arange(1, n + 1, dtype=jnp.uint32) * jnp.uint32(0x85EBCA6B)
    for _ in range(2):
        x = x ^ (x >> 16)
        x = x * jnp.uint32(0x7FEB352D)
        x = x ^ (x >> 15)
        x = x * jnp.uint32(0x846CA68B)
        x = x ^ (x >> 16)
    return (x >> 8).astype(jnp.float32) * jnp.float32(1.0 / (1 << 24))


def flow_class(size_bytes, class_threshold_bytes):
    """Class index: number of thresholds the size exceeds (thesis: > 2 MB is class 1)."""
    return jnp.sum(size_bytes > class_threshold_bytes).astype(jnp.int32)


def free_slot(active):
    """Index of the first free flow slot and whether there is one."""
    idx = jnp.argmin(active).astype(jnp.int32)
    return idx, ~active[idx]
