"""The bottleneck's capacity over time: a piecewise-constant schedule per env.

A schedule is a table of segments: segment i starts at `times_s[i]` (the first at 0) and
runs at `rates_bps[i]` until the next one starts.  After the last start the last rate
holds for ever, or, with a finite `period_s`, the table repeats every `period_s` seconds
(as Mahimahi replays a trace).  Every rate is at most the link's `bottleneck_rate_bps`,
which stays the link's peak: the tick is `pkts_per_tick` packet times at that rate, and a
schedule only takes packet times away.

Where a schedule comes from (`load`, what `make_params(capacity_schedule=...)` takes):
  - a shipped trace by name (`BUILTIN`, package data under `data/`, written by
    `write_shipped` from the generators below with fixed seeds): "step" (10, 5, 2, 8 Mbit/s
    for 5 s each), "cellular" (`markov_cellular`) and "wifi" (`wifi_like`), each peaking at
    10 Mbit/s, the thesis scenario's bottleneck;
  - a CSV file of `time_s,rate_bps` rows (`from_csv`): a last row with no rate (`60,`) ends
    the trace there and makes it repeat;
  - a Mahimahi trace (`mahimahi_to_schedule`: one line per 1500-byte delivery opportunity,
    its time in ms; the trace repeats after its last line), recognised by its content;
  - a `Schedule` object (the generators' output, or one built by hand).

In `SimParams` a schedule is a fixed-length table per env (K = `capacity_rows`, static;
`table` builds it), so that envs with different traces batch in one `vmap`:
`capacity_times_s` [K] (padding rows start at +inf: never), `capacity_rates_bps` [K],
`capacity_cum_bits` [K] (the bits the link offers from the period's start to each
segment's start) and `capacity_period_s` [] (+inf: no repeat).  K = 0 is no schedule:
`bottleneck_rate_bps` throughout, and the tick leaves the schedule's code out.

Service (`offered_pkts`, read by `sim.clock`): the link keeps a departure credit in data
packets.  Each tick it earns the packets the schedule offers over the tick, the integral
of the rate across every rate change inside it divided by a data packet's bits; it sends
at most floor(credit) packets and carries the fraction.  Whole packet times it could not
use (its queues were empty) are lost, as on a real link.  So at every `pkts_per_tick`,
the packets a saturated link has sent by the end of any tick are the schedule's integral
up to then, in whole packets, and a constant schedule at `bottleneck_rate_bps` earns
exactly `pkts_per_tick` a tick (bit for bit the run without a schedule).  Times are
float32 in the tick: a rate change is placed to float32 precision (about 4 us at 60 s);
within a segment the credit is exact.
"""
from __future__ import annotations

import csv
import hashlib
import io
import math
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path

import jax.numpy as jnp
import numpy as np

NONE = "none"  # no schedule: the default
BUILTIN = ("step", "cellular", "wifi")  # shipped traces (data/capacity_<name>.csv)
PAD_S = 3.0e38  # a padding row's start, and "no period" (float32 holds no inf in the leaves' convention)
MAHIMAHI_MTU_BYTES = 1500  # what one line of a Mahimahi trace delivers


@dataclass(frozen=True, eq=False)  # (compared and hashed as objects: its fields are arrays)
class Schedule:
    """A piecewise-constant capacity: segment i runs at rates_bps[i] from times_s[i] to the
    next start; the last rate holds for ever (period_s inf) or the table repeats every
    period_s seconds."""

    times_s: np.ndarray
    rates_bps: np.ndarray
    period_s: float = math.inf
    name: str = "custom"

    def __post_init__(self):
        t = np.asarray(self.times_s, np.float64).reshape(-1)
        r = np.asarray(self.rates_bps, np.float64).reshape(-1)
        object.__setattr__(self, "times_s", t)
        object.__setattr__(self, "rates_bps", r)
        object.__setattr__(self, "period_s", float(self.period_s))
        check(t, r, self.period_s, name=self.name)

    @property
    def rows(self) -> int:
        return int(self.times_s.size)

    @property
    def repeats(self) -> bool:
        return math.isfinite(self.period_s)

    @property
    def peak_bps(self) -> float:
        return float(self.rates_bps.max())

    @property
    def span_s(self) -> float:
        """The time one pass of the table covers: its period, else up to its last start
        (the whole table when it has one row: 1 s, for a mean)."""
        if self.repeats:
            return self.period_s
        return float(self.times_s[-1]) if self.rows > 1 else 1.0

    @property
    def mean_bps(self) -> float:
        """The time-weighted mean rate over `span_s`."""
        return self.bits_between(0.0, self.span_s) / self.span_s

    @property
    def digest(self) -> str:
        """SHA-256 of the table (float64 starts, rates, then the period)."""
        h = hashlib.sha256(self.times_s.tobytes())
        h.update(self.rates_bps.tobytes())
        h.update(np.float64(self.period_s).tobytes())
        return h.hexdigest()

    def rate_at(self, t_s):
        """The rate at times t_s (float64, host side)."""
        t = np.asarray(t_s, np.float64)
        if self.repeats:
            t = np.mod(t, self.period_s)
        return self.rates_bps[np.searchsorted(self.times_s, t, side="right") - 1]

    def bits_between(self, t0_s: float, t1_s: float) -> float:
        """The bits the schedule offers over [t0_s, t1_s] (float64, host side): the reference
        the tick's credit is checked against."""
        def upto(t):
            ends = np.append(self.times_s[1:], self.period_s if self.repeats else math.inf)
            if self.repeats:
                per_bits = float(np.sum(self.rates_bps * (ends - self.times_s)))
                n, t = divmod(t, self.period_s)
            else:
                per_bits, n = 0.0, 0
            dur = np.clip(np.minimum(ends, t) - self.times_s, 0.0, None)
            return n * per_bits + float(np.sum(self.rates_bps * dur))

        return upto(float(t1_s)) - upto(float(t0_s))

    def scaled(self, factor: float, name: str | None = None) -> "Schedule":
        """The same pattern with every rate times `factor`."""
        return Schedule(self.times_s, self.rates_bps * float(factor), self.period_s,
                        name or f"{self.name}x{factor:g}")

    def to_csv(self) -> str:
        """The schedule as `from_csv` reads it (times to the microsecond, rates to the bit/s)."""
        lines = ["time_s,rate_bps"] + [f"{t:.6f},{r:.0f}" for t, r in zip(self.times_s, self.rates_bps)]
        if self.repeats:
            lines.append(f"{self.period_s:.6f},")
        return "\n".join(lines) + "\n"


def check(times_s, rates_bps, period_s=math.inf, name: str = "", rows=None) -> None:
    """Refuse a table that is not a schedule, naming the row (`rows`: file line numbers)."""
    t = np.asarray(times_s, np.float64)
    r = np.asarray(rates_bps, np.float64)
    tag = f"capacity_schedule {name}: " if name else "capacity_schedule: "
    where = (lambda i: f"line {rows[i]}") if rows is not None else (lambda i: f"row {i + 1}")
    if t.ndim != 1 or t.shape != r.shape or t.size < 1:
        raise ValueError(tag + "need at least one (time_s, rate_bps) row, in columns of equal length")
    for what, v in (("time_s", t), ("rate_bps", r)):
        bad = np.flatnonzero(~np.isfinite(v))
        if bad.size:
            raise ValueError(tag + f"{where(bad[0])}: {what} {v[bad[0]]} is not a finite number")
    if t[0] != 0.0:
        raise ValueError(tag + f"{where(0)}: the first segment must start at time 0, not {t[0]:g}")
    bad = np.flatnonzero(np.diff(t) <= 0)
    if bad.size:
        raise ValueError(tag + f"{where(bad[0] + 1)}: times must increase ({t[bad[0] + 1]:g} after {t[bad[0]]:g})")
    bad = np.flatnonzero(r < 0)
    if bad.size:
        raise ValueError(tag + f"{where(bad[0])}: rate_bps must be >= 0, got {r[bad[0]]:g}")
    p = float(period_s)
    if math.isnan(p) or (math.isfinite(p) and p <= t[-1]):
        raise ValueError(tag + f"the period (where the trace ends and repeats) must come after the last start "
                               f"({t[-1]:g} s), got {p:g}")


# ---------------------------------------------------------------------------------------
# reading: CSV, Mahimahi, the shipped traces
# ---------------------------------------------------------------------------------------

def _text_of(path_or_text) -> tuple[str, str]:
    """(text, name) of a path or of text itself (a string with a newline)."""
    if isinstance(path_or_text, Path) or (isinstance(path_or_text, str) and "\n" not in path_or_text):
        path = Path(path_or_text)
        if not path.is_file():
            raise ValueError(f"capacity_schedule: {str(path_or_text)!r} is neither a shipped trace "
                             f"({', '.join(BUILTIN)}), 'none', nor a file")
        return path.read_text(), str(path_or_text)
    return str(path_or_text), "custom"


def from_csv(path_or_text, name: str | None = None) -> Schedule:
    """A schedule from `time_s,rate_bps` rows (a header line allowed first, `#` comments and
    blank lines skipped).  A last row with a time and no rate (`60,`) ends the trace there
    and makes it repeat from time 0; without it the last rate holds for ever.  A line that
    is not two numbers is refused with its line number."""
    text, default = _text_of(path_or_text)
    name = name or default
    times, rates, lines, period = [], [], [], math.inf
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        parts = [p.strip() for p in next(csv.reader(io.StringIO(line)))]
        if math.isfinite(period):
            raise ValueError(f"capacity_schedule {name} line {lineno}: a row after the end row (a time with no rate)")
        try:
            vals = [float(p) if p else None for p in parts]
        except ValueError:
            if not times:  # the header
                continue
            raise ValueError(f"capacity_schedule {name} line {lineno}: {line!r} is not two numbers "
                             "(time_s,rate_bps)") from None
        if len(vals) == 2 and vals[0] is not None and vals[1] is None and times:
            period = vals[0]  # the end row
            if not period > times[-1]:
                raise ValueError(f"capacity_schedule {name} line {lineno}: the end row's time ({period:g}) must "
                                 f"come after the last start ({times[-1]:g})")
            continue
        if len(vals) != 2 or None in vals:
            raise ValueError(f"capacity_schedule {name} line {lineno}: expected 2 numbers (time_s,rate_bps), "
                             f"got {line!r}")
        times.append(vals[0])
        rates.append(vals[1])
        lines.append(lineno)
    if not times:
        raise ValueError(f"capacity_schedule: no (time_s, rate_bps) rows in {name}")
    check(times, rates, period, name=name, rows=lines)
    return Schedule(np.asarray(times), np.asarray(rates), period, name)


def mahimahi_to_schedule(path_or_text, bin_s: float = 0.01, mtu_bytes: int = MAHIMAHI_MTU_BYTES,
                         name: str | None = None) -> Schedule:
    """A Mahimahi trace (one line per delivery opportunity of one `mtu_bytes` packet, its
    time in whole milliseconds, non-decreasing; the trace repeats after its last line's
    time) as a schedule that repeats with the same period: the opportunities counted in
    bins of `bin_s` (the last bin ends at the period), each bin's rate their bits over its
    width, equal neighbours merged.  The bits per period are the trace's exactly; a finer
    bin keeps more of the trace's burstiness and makes a longer table, and the peak
    (which `bottleneck_rate_bps` must reach, and which sets the tick) grows as the bin
    shrinks.  An opportunity at the period's end is the next period's first (Mahimahi's
    base time moves by the period)."""
    text, default = _text_of(path_or_text)
    name = name or default
    ms, lines = [], []
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line:
            continue
        try:
            v = int(line)
        except ValueError:
            raise ValueError(f"capacity_schedule {name} line {lineno}: {line!r} is not a whole number of "
                             "milliseconds (a Mahimahi trace has one per line)") from None
        if v < 0 or (ms and v < ms[-1]):
            raise ValueError(f"capacity_schedule {name} line {lineno}: Mahimahi times must be non-negative and "
                             f"non-decreasing, got {v} after {ms[-1] if ms else 'the start'}")
        ms.append(v)
        lines.append(lineno)
    if not ms or ms[-1] <= 0:
        raise ValueError(f"capacity_schedule {name}: a Mahimahi trace needs lines and a last time above 0 ms")
    if not bin_s > 0:
        raise ValueError(f"mahimahi_to_schedule: bin_s must be positive, got {bin_s}")
    period_s = ms[-1] / 1e3
    at_s = np.mod(np.asarray(ms, np.float64) / 1e3, period_s)
    nbins = int(math.ceil(period_s / bin_s - 1e-9))
    starts = np.arange(nbins) * bin_s
    widths = np.minimum(starts + bin_s, period_s) - starts
    counts = np.bincount(np.minimum((at_s / bin_s + 1e-9).astype(np.int64), nbins - 1), minlength=nbins)
    rates = counts * (mtu_bytes * 8.0) / widths
    return merged(starts, rates, period_s, name)


def merged(times_s, rates_bps, period_s=math.inf, name: str = "custom") -> Schedule:
    """A schedule with neighbouring segments of equal rate joined."""
    t = np.asarray(times_s, np.float64)
    r = np.asarray(rates_bps, np.float64)
    keep = np.concatenate([[True], r[1:] != r[:-1]])
    return Schedule(t[keep], r[keep], period_s, name)


def _looks_mahimahi(text: str) -> bool:
    for line in text.splitlines():
        line = line.strip()
        if line:
            return line.isdigit()
    return False


def shipped_path(name: str):
    """The package data file of shipped trace `name`."""
    return resources.files("rlbm_jax.env").joinpath("data", f"capacity_{name}.csv")


@lru_cache(maxsize=None)
def _builtin(name: str) -> Schedule:
    return from_csv(shipped_path(name).read_text(), name=name)


def load(spec) -> Schedule | None:
    """What `make_params(capacity_schedule=spec)` runs: None for "none" (no schedule), a
    shipped trace by name, a CSV or Mahimahi file (told apart by content), or a
    `Schedule` as is."""
    if isinstance(spec, Schedule):
        return spec
    if not isinstance(spec, (str, Path)):
        raise ValueError(f"capacity_schedule must be 'none', a shipped trace ({', '.join(BUILTIN)}), a CSV or "
                         f"Mahimahi file, or a capacity.Schedule, got {type(spec).__name__}")
    if str(spec) == NONE:
        return None
    if str(spec) in BUILTIN:
        return _builtin(str(spec))
    text, name = _text_of(spec)
    return mahimahi_to_schedule(text, name=name) if _looks_mahimahi(text) else from_csv(text, name=name)


# ---------------------------------------------------------------------------------------
# generators (the shipped traces are theirs, with fixed seeds)
# ---------------------------------------------------------------------------------------

def step_pattern(levels_bps=(10e6, 5e6, 2e6, 8e6), hold_s: float = 5.0, name: str = "step") -> Schedule:
    """Each rate of `levels_bps` for `hold_s` in turn, repeating."""
    levels = np.asarray(levels_bps, np.float64)
    return Schedule(np.arange(levels.size) * hold_s, levels, levels.size * hold_s, name)


def markov_cellular(seed: int = 0, duration_s: float = 60.0, peak_bps: float = 10e6,
                    levels=(0.05, 0.15, 0.3, 0.5, 0.75, 1.0), mean_dwell_s: float = 0.8,
                    outage_per_s: float = 1 / 15, outage_s=(0.2, 1.0), grid_s: float = 0.01,
                    name: str = "cellular") -> Schedule:
    """A cellular-like pattern (synthetic, not fitted to a measurement): a Markov chain over
    rate `levels` (fractions of `peak_bps`) that moves to a neighbouring level, now and
    then two, after an exponential dwell of mean `mean_dwell_s` (fading, load in the cell,
    the scheduler's share), with outages (rate 0: a handover, a deep fade) starting as a
    Poisson process of `outage_per_s` and lasting uniformly `outage_s`.  Times on a
    `grid_s` grid; the trace repeats after `duration_s`."""
    rng = np.random.default_rng(seed)
    levels = np.asarray(levels, np.float64)
    n = levels.size
    grid = lambda x: np.round(np.asarray(x) / grid_s) * grid_s
    times, rates = [], []
    t, i = 0.0, int(rng.integers(n // 2, n))
    while t < duration_s:
        times.append(t)
        rates.append(levels[i])
        t = float(grid(t + max(rng.exponential(mean_dwell_s), grid_s)))
        step = int(rng.choice([-2, -1, -1, 1, 1, 2]))
        i = int(np.clip(i + step, 0, n - 1))
    base = Schedule(np.asarray(times), np.asarray(rates), duration_s)
    t_out = np.cumsum(rng.exponential(1 / outage_per_s, size=int(duration_s * outage_per_s * 3) + 3))
    lens = rng.uniform(*outage_s, size=t_out.size)
    return _overlay(base, grid(t_out), grid(t_out + lens), 0.0, peak_bps, duration_s, grid_s, name)


def wifi_like(seed: int = 0, duration_s: float = 60.0, peak_bps: float = 10e6, phy_levels=(0.45, 0.65, 0.85, 1.0),
              mean_adapt_s: float = 3.0, share_step_s: float = 0.05, share=(0.55, 1.0),
              burst_per_s: float = 0.25, burst_s=(0.02, 0.15), burst_level: float = 0.1,
              name: str = "wifi") -> Schedule:
    """A Wi-Fi-like pattern (synthetic): rate adaptation moves the PHY rate between
    `phy_levels` (fractions of `peak_bps`) after exponential holds of mean `mean_adapt_s`;
    contention gives the station a new airtime share, uniform in `share` (to 0.05), every
    `share_step_s`; interference bursts (Poisson, `burst_per_s`, lasting uniformly
    `burst_s`) cut the rate to `burst_level` of itself.  Repeats after `duration_s`."""
    rng = np.random.default_rng(seed)
    phy = np.asarray(phy_levels, np.float64)
    steps = int(round(duration_s / share_step_s))
    times = np.arange(steps) * share_step_s
    shares = np.round(rng.uniform(*share, size=steps) / 0.05) * 0.05
    # the PHY level: a random walk over phy_levels at exponential times
    level = np.empty(steps)
    i, next_change = phy.size - 1, rng.exponential(mean_adapt_s)
    for j, t in enumerate(times):
        while t >= next_change:
            i = int(np.clip(i + rng.choice([-1, 1]), 0, phy.size - 1))
            next_change += rng.exponential(mean_adapt_s)
        level[j] = phy[i]
    base = Schedule(times, level * shares, duration_s)
    t_b = np.cumsum(rng.exponential(1 / burst_per_s, size=int(duration_s * burst_per_s * 3) + 3))
    lens = rng.uniform(*burst_s, size=t_b.size)
    grid = lambda x: np.round(np.asarray(x) / 0.01) * 0.01
    return _overlay(base, grid(t_b), grid(t_b + lens), burst_level, peak_bps, duration_s, 0.01, name, relative=True)


def _overlay(base: Schedule, starts, ends, level, peak_bps, duration_s, grid_s, name, relative=False) -> Schedule:
    """`base` (fractions of the peak) with [starts, ends) windows set to `level` (times the
    base rate where `relative`), scaled to `peak_bps` and rounded to the bit/s, on a
    `grid_s` grid inside [0, duration_s)."""
    cuts = np.round(np.concatenate([base.times_s, starts, ends]) / grid_s) * grid_s
    cuts = np.unique(cuts[(cuts >= 0) & (cuts < duration_s - grid_s / 2)])
    frac = base.rate_at(cuts)
    inside = np.zeros(cuts.size, bool)
    for a, b in zip(starts, ends):
        inside |= (cuts >= a) & (cuts < b)
    frac = np.where(inside, frac * level if relative else level, frac)
    return merged(cuts, np.round(frac * peak_bps), duration_s, name)


def shipped(name: str) -> Schedule:
    """The generator's output a shipped trace was written from (`write_shipped`)."""
    makers = {"step": lambda: step_pattern(),
              "cellular": lambda: markov_cellular(seed=1),
              "wifi": lambda: wifi_like(seed=2)}
    return makers[name]()


def write_shipped(folder=None) -> list[Path]:
    """Write every shipped trace (`BUILTIN`) from its generator into `folder` (default: the
    package's data folder), as `capacity_<name>.csv`."""
    folder = Path(folder) if folder is not None else Path(__file__).parent / "data"
    out = []
    for name in BUILTIN:
        s = shipped(name)
        path = folder / f"capacity_{name}.csv"
        path.write_text(f"# {name}: rlbm_jax.env.capacity.shipped({name!r}), a synthetic trace; "
                        "time_s,rate_bps rows, the last row ends it (it repeats)\n" + s.to_csv())
        out.append(path)
    return out


# ---------------------------------------------------------------------------------------
# the table in SimParams, and the tick's credit
# ---------------------------------------------------------------------------------------

def table(schedule: Schedule | None, rows: int, bottleneck_rate_bps: float):
    """The leaves of a schedule padded to `rows` rows: (times_s [rows], rates_bps [rows],
    cum_bits [rows], period_s []) as float64 numpy; None with rows > 0 is the constant
    schedule at `bottleneck_rate_bps` (what the run without a schedule does)."""
    if schedule is None:
        schedule = Schedule(np.zeros(1), np.full(1, float(bottleneck_rate_bps))) if rows > 0 else None
    if schedule is None:
        z = np.zeros(0)
        return z, z, z, PAD_S
    n = schedule.rows
    if n > rows:
        raise ValueError(f"capacity_rows ({rows}) must be >= the schedule's rows ({n})")
    ends = np.append(schedule.times_s[1:], schedule.period_s if schedule.repeats else schedule.times_s[-1])
    cum = np.concatenate([[0.0], np.cumsum(schedule.rates_bps * (ends - schedule.times_s))[:-1]])
    pad = rows - n
    times = np.concatenate([schedule.times_s, np.full(pad, PAD_S)])
    rates = np.concatenate([schedule.rates_bps, np.zeros(pad)])
    cum = np.concatenate([cum, np.full(pad, cum[-1])])
    period = schedule.period_s if schedule.repeats else PAD_S
    return times, rates, cum, period


def pad_leaves(times_s, rates_bps, cum_bits, period_s, bottleneck_rate_bps, rows: int):
    """Leaves of one env's table (numpy or jax, unbatched) padded to `rows` rows (an env with
    none gets the constant schedule at its `bottleneck_rate_bps`, which runs bit for bit as
    no schedule)."""
    n = np.shape(times_s)[-1]
    if n == rows:
        return times_s, rates_bps, cum_bits, period_s
    if n == 0:
        t, r, c, p = table(None, rows, float(np.asarray(bottleneck_rate_bps)))
        f32 = lambda x: jnp.asarray(x, jnp.float32)
        return f32(t), f32(r), f32(c), f32(p)
    pad = rows - n
    cat = lambda x, v: jnp.concatenate([jnp.asarray(x, jnp.float32), jnp.full((pad,), v, jnp.float32)])
    return (cat(times_s, PAD_S), cat(rates_bps, 0.0), cat(cum_bits, jnp.asarray(cum_bits)[-1]), period_s)


def _integral_pkts(a, b, tick_s, params):
    """Packets the schedule offers over [a, b] ticks of its period (0 <= a <= b), the same
    segment's share exactly f (b - a) k with f = rate / bottleneck_rate_bps; across
    changes the first and last segments' parts and the bits of those between."""
    times, rates, cum = params.capacity_times_s, params.capacity_rates_bps, params.capacity_cum_bits
    K = times.shape[-1]
    k = params.pkts_per_tick
    ia = jnp.clip(jnp.searchsorted(times, a * tick_s, side="right") - 1, 0, K - 1)
    ib = jnp.clip(jnp.searchsorted(times, b * tick_s, side="left") - 1, ia, K - 1)
    fa, fb = rates[ia] / params.bottleneck_rate_bps, rates[ib] / params.bottleneck_rate_bps
    start_next = times[jnp.minimum(ia + 1, K - 1)] / tick_s  # ticks
    start_b = times[ib] / tick_s
    span = b - a
    head = fa * jnp.clip(start_next - a, 0.0, span)
    tail = fb * jnp.clip(b - start_b, 0.0, span)
    between = jnp.maximum(cum[ib] - cum[jnp.minimum(ia + 1, K - 1)], 0.0) / params.data_pkt_bits
    return jnp.where(ia == ib, fa * span * k, (head + tail) * k + between)


def offered_pkts(t, tick_s, params):
    """[] The packets (data packets' bits) the schedule offers in tick t, [t, t+1) in ticks:
    the integral of the rate over the tick (across the period's end where it repeats)."""
    tf = t.astype(jnp.float32)
    periodic = params.capacity_period_s < PAD_S / 2
    per_ticks = jnp.where(periodic, params.capacity_period_s / tick_s, 1.0)
    n = jnp.where(periodic, jnp.floor(tf / per_ticks), 0.0)
    here = tf - n * per_ticks  # the tick's start within its period (t itself without one)
    per = jnp.where(periodic, per_ticks, jnp.inf)
    here = jnp.clip(jnp.where(here >= per, here - per, here), 0.0, None)
    end = here + 1.0
    wrap = end > per
    first = _integral_pkts(here, jnp.minimum(end, per), tick_s, params)
    second = _integral_pkts(jnp.zeros_like(here), jnp.where(wrap, end - per, 0.0), tick_s, params)
    return first + jnp.where(wrap, second, 0.0)


def serve(credit_pkts, t, tick_s, params):
    """The link's packet slots this tick, the credit it carries and what the schedule
    offered over the tick: (slots [] int32 <= pkts_per_tick, credit [] float32 in [0, 1],
    offered [] float32, `offered_pkts`)."""
    offered = offered_pkts(t, tick_s, params)
    avail = credit_pkts + offered
    slots = jnp.minimum(jnp.floor(avail), params.pkts_per_tick)
    return slots.astype(jnp.int32), jnp.clip(avail - slots, 0.0, 1.0), offered
