"""The ns-3.37 reference: build the scenario, run it on our cells and seeds (cached),
read its interval records, and drive its rl buffer policy (or a sender agent's flows) from a
policy in this process.

The scenario (`rlbm_jax/ns3/scenario/rlbm_scenario.cc`, built by `rlbm_jax/ns3/scenario/build.sh`;
both ship with the package as data) takes `make_params`'s names as options, so a
scenario dict (`rlbm_jax.scenarios`) configures both simulators.  Poisson cells are fed
exactly the flows our simulator starts for the seed (`write_schedule` -> `--flows_in`),
so comparisons are paired.  A cell with a capacity schedule (`capacity_schedule`) gives
ns-3 the same table (`write_capacity` -> `--capacity_in`), and the scenario then reports
util_wire over the capacity the schedule offered, as `metrics.summarize` does.

With an agent interval the scenario writes, per interval, the raw record of
`metrics.Interval` (`--intervals_out`, and in lock-step on its stdout); it computes no
observation or reward.  Python computes both from the record with the formulation's
own JAX functions (`records_to_interval`, `score_records`), so ns-3 and the JAX env
share one definition of every formulation.  `drive` runs the lock-step protocol:
    scenario -> "rec K name=value ..."  (per-class values "v0,v1"; flows "size:class:slowdown;...")
    driver   -> "class_alpha=a0,a1,..." (policy rl), "mark_prob=p" (policy rl-mark),
                "buffer_size_pkts=n" (policy rl-size), "cwnd_gain=g" (a sender agent, Orca: the
                agent flow's window times g, set in its socket's congestion state) or
                "rate_gain=g" (Aurora: the agent flow is the scenario's rate sender, tcp rate,
                and its pacing rate is multiplied by g): the knobs the formulation derives
                from the action
A sender agent's run (`agent_flows` = 1) adds the agent flow's rows to every record
(`agent_counts`, `agent_state`: its transmissions, retransmissions and distinct packets
delivered over the interval; its cwnd, ns-3's sRTT estimate, its least RTT sample and
pacing rate at the end, the sRTT at the start).
A formulation that observes a window of w intervals (`Formulation.window`) is given the
last w records' observations, oldest first, kept here as the packet env keeps them: the
first record's observation in every place, then each record's appended and the oldest
dropped (`Formulation.first_window`, `next_window`).
An `Agent` is a stateless policy (an MLP: obs -> action) or a recurrent one (an exported
LSTM: (obs, h, c) -> (action index, h, c, logits)) whose state is carried from one
decision to the next within a run and starts at zero in every run.
"""
from __future__ import annotations

import concurrent.futures as cf
import csv
import dataclasses
import functools
import hashlib
import json
import math
import os
import subprocess
import tempfile
import time
from importlib import resources
from pathlib import Path
from typing import Callable

import jax
import numpy as np

from rlbm_jax.env import metrics as mx, model, sim, traffic
from rlbm_jax.env.params import host_params, make_params
from rlbm_jax.progress import Progress

# the scenario's source and build script, package data (the build goes to build/ beside them)
NS3_DIR = Path(str(resources.files("rlbm_jax.ns3") / "scenario"))
BUILD = NS3_DIR / "build.sh"
SOURCE = NS3_DIR / "rlbm_scenario.cc"
# record fields the scenario writes (the rest of metrics.INTERVAL_FIELDS follow from `flows`)
NS3_RECORD_FIELDS = tuple(n for n, _ in mx.INTERVAL_FIELDS if n not in ("flows_logged", "flows_overflow"))
# knobs the scenario reads back (rl: class_alpha, rl-mark: mark_prob, rl-size: buffer_size_pkts; a
# sender agent, agent_flows > 0: cwnd_gain, or rate_gain where its flows are rate senders), in the reply's order
KNOB_ORDER = ("class_alpha", "mark_prob", "buffer_size_pkts", "cwnd_gain", "rate_gain")


def repo_root() -> Path:
    """The directory that holds the package (the checkout's root with `pip install -e .`);
    the commands a run records name the files under it by their path relative to it."""
    return Path(__file__).resolve().parents[2]


@dataclasses.dataclass
class Cell:
    name: str
    kind: str  # "thesis" (Poisson flows, fed from our schedule) or "long"
    kw: dict  # make_params keyword arguments, the same names the ns-3 scenario takes
    seconds: float
    # spread the seeds over the phase of ns-3's packet clock (`seed_kw`); both simulators
    # then run seed s at the same shifted bottleneck delay
    phase_spread: bool = False


GOLDEN = 0.6180339887498949


def delay_phase_s(c: Cell, seed: int) -> float:
    """How much seed `seed` of a phase-spread cell lengthens the one-way bottleneck delay:
    frac(seed * golden ratio) of half a data packet's bottleneck serialisation time T.

    ns-3's links have exact, jitter-free delays, so in a busy queue the ACK-clocked
    arrivals fall at a fixed point of each packet's service time: the round trip modulo
    T.  Where that point lies decides how much of the time a full queue stays full and
    so what share of the exogenous arrivals (SYNs, a new flow's first window) it drops,
    while throughput, mean queue and drop rate hardly move (calibration/REPORT.md,
    section 2).  A tick of our simulator has no such point: it places an arrival
    uniformly among the tick's.  Spreading the seeds' round trips evenly over one T
    (the one-way delay over T / 2) compares both at the average over that phase."""
    return _phase_shift_s(host_params(**c.kw), seed) if c.phase_spread else 0.0


def _phase_shift_s(params, seed: int) -> float:
    half_t = 0.5 * float(params.data_pkt_bits) / float(params.bottleneck_rate_bps)
    return half_t * ((int(seed) * GOLDEN) % 1.0)


def seed_kw(c: Cell, seed: int) -> dict:
    """The cell's make_params arguments for one seed (the delay of a phase-spread cell)."""
    if not c.phase_spread:
        return c.kw
    p = host_params(**c.kw)
    base = c.kw.get("bottleneck_delay_s", float(p.bottleneck_delay_s))  # the given value, not its float32
    return {**c.kw, "bottleneck_delay_s": float(base) + _phase_shift_s(p, seed)}


def build_ns3() -> Path:
    """Builds (if needed) the ns-3 scenario against the installed ns-3.37 (scripts/install_ns3.sh)."""
    proc = subprocess.run(["bash", str(BUILD)], capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"ns-3 scenario build failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
    return Path(proc.stdout.strip().splitlines()[-1])


def cdf_path(name: str) -> str:
    if Path(name).exists():
        return str(Path(name).resolve())
    return str(resources.files("rlbm_jax.env") / "data" / f"{name}.csv")


# shapes of our simulator, and its choices of what to model (ns-3.37 is the reference:
# it always recovers from a timeout by go-back-N)
NOT_NS3 = model.NOT_NS3
# of those, the ones that are ours alone by nature (shapes, our TCP model, our logs): any other
# is a modelling choice the scenario cannot take, so a value other than the default is refused
OURS_ONLY_GROUPS = ("shapes", "tcp-model", "measurement", "buffer", "aqm")


# ARED's thresholds and weight that a cell leaves unset (None) are the automatic ones
# make_params derives from the link rate; the scenario's ared is RED with an adaptive max_p
# at the thresholds it is given, so it is given those
RED_RESOLVED = ("red_min_th_pkts", "red_max_th_pkts", "red_weight")


def write_capacity(spec, path: Path) -> Path | None:
    """Writes the capacity schedule `spec` (what `make_params(capacity_schedule=...)` takes)
    as ns-3's `--capacity_in` CSV at `path` (the same table: `capacity.Schedule.to_csv`);
    None, writing nothing, for no schedule.  ns-3's point-to-point device cannot send at
    0 bit/s, so a schedule with an outage (a rate of 0) is refused."""
    from rlbm_jax.env import capacity

    s = capacity.load(spec)
    if s is None:
        return None
    if float(np.min(s.rates_bps)) <= 0:
        raise ValueError(f"the ns-3 scenario cannot run capacity_schedule {s.name}: it has a rate of 0 "
                         "(an outage), and ns-3's point-to-point device sends at a positive rate only")
    path = Path(path)
    text = s.to_csv()
    if not path.exists() or path.read_text() != text:  # (atomically: parallel runs may share the file)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.{id(text)}.tmp")
        tmp.write_text(text)
        os.replace(tmp, path)
    return path


def _capacity_file(spec, inputs: Path | None) -> Path | None:
    """Where a cell's schedule goes: `<inputs>.capacity.csv` beside the run's other inputs,
    else a file named by the table's digest in the system's temporary folder."""
    from rlbm_jax.env import capacity

    s = capacity.load(spec)
    if s is None:
        return None
    if inputs is None:
        folder = Path(tempfile.gettempdir()) / "rlbm_ns3_inputs"
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"capacity_{s.digest[:16]}.csv"
    else:
        path = Path(f"{inputs}.capacity.csv")
    return write_capacity(s, path)


# the congestion controls the scenario runs (its --tcp): ns-3.37's TcpCubic, TcpNewReno, TcpDctcp, TcpBbr, and
# the scenario's rate sender (tcp rate, Aurora's: its pacing rate held until an agent moves it)
NS3_TCPS = ("cubic", "newreno", "dctcp", "bbr", "rate")


def ns3_args(c: Cell, seed: int, inputs: Path | None = None) -> list[str]:
    """The scenario's options for (cell, seed).  A capacity schedule is written as a CSV at
    `<inputs>.capacity.csv` (`inputs` unset: in the temporary folder, named by its digest)
    and passed as `--capacity_in`."""
    args = {"seconds": c.seconds, "seed": seed}
    kw = seed_kw(c, seed)
    tcps = kw.get("tcp", model.DEFAULTS["tcp"])
    for t in ([tcps] if isinstance(tcps, str) else list(tcps)):
        if t not in NS3_TCPS:
            raise ValueError(f"the ns-3 scenario has no tcp {t!r}; it runs {', '.join(NS3_TCPS)}")
    if kw.get("policy") == "ared" and any(kw.get(k) is None for k in RED_RESOLVED):
        p = host_params(**kw)
        kw = {**kw, **{k: float(getattr(p, k)) for k in RED_RESOLVED if kw.get(k) is None}}
    for k, v in kw.items():
        decl = model.BY_NAME.get(k)
        if k in NOT_NS3 or v is None:  # None: make_params's default, which is the scenario's
            if decl is not None and decl.group not in OURS_ONLY_GROUPS and v is not None and v != decl.default:
                raise ValueError(f"the ns-3 scenario has no option for {k}; it runs ns-3's default "
                                 f"({decl.default}), not {v!r}")
            continue
        if decl is not None:
            k = decl.ns3_option
        if k == "cdf":
            v = cdf_path(v)
        if decl is not None and decl.kind == "schedule":
            v = _capacity_file(v, inputs)
            if v is None:  # "none": no option, the scenario's constant rate
                continue
        args[k] = v
    args.setdefault("cdf", cdf_path("websearch"))
    flat = []
    for k, v in args.items():
        if isinstance(v, (list, tuple)):
            v = ",".join(str(x) for x in v)
        elif isinstance(v, bool):
            v = int(v)
        flat.append(f"--{k}={v}")
    return flat


_schedule = jax.jit(sim.flow_schedule, static_argnums=2)


def write_schedule(c: Cell, seed: int, path: Path) -> int:
    """Writes the flows our simulator starts for (cell, seed) as ns-3's `--flows_in` CSV,
    so both simulators carry the same workload; returns the number of flows."""
    params = make_params(**seed_kw(c, seed))
    stop = min(float(params.arrival_stop_s), c.seconds)
    rate = float(traffic.arrival_rate_per_s(params))
    n = int(rate * stop * 1.5 + 10 * math.sqrt(rate * stop + 1) + 16)
    t, sender, size = _schedule(jax.random.PRNGKey(int(seed)), params, n)
    t, sender, size = np.asarray(t, np.float64), np.asarray(sender), np.asarray(size, np.float64)
    if t[-1] < stop:
        raise RuntimeError(f"flow schedule of {c.name} seed {seed} needs more than {n} flows")
    keep = t < stop
    with path.open("w") as f:
        f.write("start_s,sender,size_bytes\n")
        for a, b, d in zip(t[keep], sender[keep], size[keep]):
            f.write(f"{a:.9f},{int(b)},{d:.3f}\n")
    return int(keep.sum())


def call(cmd: list[str]):
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"ns-3 run failed ({' '.join(cmd)}):\n{proc.stderr[-3000:]}")


def bench_cell(name: str, kw: dict, seconds: float) -> Cell:
    """The cell that times ns-3 on the scenario dict `kw` (`rlbm_jax.scenarios`) for
    `seconds`: Poisson flows (load > 0) are fed from our schedule as in calibration, at
    the scenario's exact delay (no phase spread).  Where the scenario stops its arrivals
    before `seconds` (the dumbbell's at 75 % of its own length), they go on to the end,
    so that ns-3 is timed under load throughout, as `bench_env` times ours."""
    kw = dict(kw)
    if float(kw.get("load", 0.0)) > 0 and float(kw.get("arrival_stop_s", math.inf)) < seconds:
        kw["arrival_stop_s"] = float(seconds)
    return Cell(f"bench/{name}", "thesis" if float(kw.get("load", 0.0)) > 0 else "long", kw, float(seconds))


def time_ns3(c: Cell, seed: int = 1, seconds: float | None = None, binary: Path | None = None) -> dict:
    """Runs ONE ns-3 process of cell `c` (for `seconds` simulated seconds, `c.seconds`
    unset) and times it from process start to exit: {"ns3_sim_seconds_per_wall_s",
    "ns3_sim_seconds" (simulated time covered), "ns3_wall_s" (the process), "ns3_run_wall_s"
    (ns-3's own Simulator::Run), "ns3_flows_scheduled", "ns3_flows_started",
    "ns3_last_flow_start_s", "ns3_util_wire", "ns3_seed", "ns3_cmd"}.  The flow schedule (ours, as in
    calibration) is written before the clock starts.  The scenario stops its simulator at
    `seconds` with Simulator::Stop, an event that keeps the queue busy until then, so a
    process that exits 0 has simulated all of it; a Poisson cell is checked besides: it
    must have started every scheduled flow.  `binary` unset: `build_ns3()`."""
    if seconds is not None:
        c = dataclasses.replace(c, seconds=float(seconds))
    if not (math.isfinite(c.seconds) and c.seconds > 0):
        raise ValueError(f"seconds must be a positive number, got {c.seconds!r}")
    binary = Path(binary) if binary is not None else build_ns3()
    if not os.access(binary, os.X_OK) or not binary.is_file():
        raise RuntimeError(f"no ns-3 scenario binary at {binary}: build it with {BUILD} (rlbm_jax.ns3.harness.build_ns3)")
    with tempfile.TemporaryDirectory(prefix="rlbm_ns3_time_") as tmp:
        out = Path(tmp) / "report.json"
        cmd = [str(binary), *ns3_args(c, seed, Path(tmp) / "in"), f"--out={out}"]
        scheduled, last_start = None, None
        if c.kind == "thesis":
            schedule = Path(tmp) / "schedule.csv"
            scheduled = write_schedule(c, seed, schedule)
            starts = [float(line.split(",", 1)[0]) for line in schedule.read_text().splitlines()[1:] if line]
            last_start = max(starts, default=None)
            cmd.append(f"--flows_in={schedule}")
        t0 = time.perf_counter()
        call(cmd)
        wall = time.perf_counter() - t0
        rep = json.loads(out.read_text())
        shown = " ".join(cmd[1:]).replace(tmp, "<tmp>")
    sim_s = float(rep["sim_seconds"])
    if abs(sim_s - c.seconds) > 1e-9 * max(1.0, c.seconds):
        raise RuntimeError(f"ns-3 reports {sim_s} simulated seconds for a run of {c.seconds}")
    # long-lived flows start beside the schedule's and are counted with them: all of them where
    # the run outlasts their start window, else some
    long_flows = int(c.kw.get("long_flows") or 0)
    starts = c.kw.get("long_flow_start_s") or 0.0  # (one value, or one per flow group)
    window_s = max(map(float, starts if isinstance(starts, (list, tuple)) else [starts])) \
        + float(c.kw.get("long_flow_start_spread_s") or 0.0)
    started = int(rep["flows_started"])
    if scheduled is not None and not (scheduled + (long_flows if c.seconds > window_s else 0) <= started
                                      <= scheduled + long_flows):
        raise RuntimeError(f"ns-3 started {rep['flows_started']} of the {scheduled} scheduled flows"
                           + (f" and {long_flows} long-lived ones" if long_flows else "")
                           + f": it did not simulate all of its {c.seconds} s")
    root = str(repo_root()) + os.sep
    return {"ns3_sim_seconds_per_wall_s": sim_s / wall, "ns3_sim_seconds": sim_s, "ns3_wall_s": wall,
            "ns3_run_wall_s": float(rep["wall_s"]), "ns3_flows_scheduled": scheduled,
            "ns3_flows_started": int(rep["flows_started"]), "ns3_last_flow_start_s": last_start,
            "ns3_util_wire": float(rep["util_wire"]), "ns3_seed": int(seed),
            "ns3_cmd": shown.replace(root, "")}


# ---------------------------------------------------------------------------
# interval records
# ---------------------------------------------------------------------------

def records_to_interval(rows: list[dict], num_classes: int, log_size: int, agent_flows: int = 0):
    """The records of `rows` ({field: text} as the scenario writes them: per-class values
    "v0,v1,...", flows "size:class:slowdown;...") as one `metrics.Interval` of numpy arrays
    with a leading axis [len(rows)].  The first `log_size` finished flows of an interval
    go to `flows`, the rest are counted in `flows_overflow`, as the JAX simulator does.
    With `agent_flows` = A > 0 the rows also carry the agent flows' `agent_counts` (A x 3
    values, flow by flow) and `agent_state` (A x 5): `metrics.AGENT_COUNTS`, `AGENT_STATE`.
    A missing field, a wrong class count or an unparsable value raises ValueError."""
    out = {n: [] for n, _ in mx.INTERVAL_FIELDS}
    for i, row in enumerate(rows):
        missing = [n for n in NS3_RECORD_FIELDS if n not in row]
        if missing:
            raise ValueError(f"interval record {i} lacks {missing}")
        for name, shape in mx.INTERVAL_FIELDS:
            if name in ("flows_logged", "flows_overflow"):
                continue
            text = row[name]
            try:
                if shape == "flows":
                    trip = [tuple(float(x) for x in f.split(":")) for f in text.split(";") if f]
                    if any(len(t) != 3 for t in trip):
                        raise ValueError("expected size:class:slowdown")
                    arr = np.zeros((log_size, 3), np.float64)
                    kept = trip[:log_size]
                    if kept:
                        arr[:len(kept)] = kept
                    out["flows"].append(arr)
                    out["flows_logged"].append(len(kept))
                    out["flows_overflow"].append(len(trip) - len(kept))
                    continue
                vals = [float(x) for x in str(text).split(",")]
            except ValueError as e:
                raise ValueError(f"interval record {i}: field {name}={text!r}: {e}") from None
            if shape == "P" and len(vals) != num_classes:
                raise ValueError(f"interval record {i}: field {name} has {len(vals)} values for {num_classes} classes")
            if shape == "" and len(vals) != 1:
                raise ValueError(f"interval record {i}: field {name} must be one number, got {text!r}")
            out[name].append(vals if shape == "P" else vals[0])
    arrays = {}
    for name, _ in mx.INTERVAL_FIELDS:
        dtype = np.int32 if name in mx.INTERVAL_INT_FIELDS else np.float32
        arrays[name] = np.asarray(out[name], np.float64).astype(dtype)
    if agent_flows:
        for name, cols, dtype in (("agent_counts", mx.AGENT_COUNTS, np.int32), ("agent_state", mx.AGENT_STATE,
                                                                               np.float32)):
            vals = []
            for i, row in enumerate(rows):
                try:
                    v = [float(x) for x in str(row[name]).split(",")]
                except KeyError:
                    raise ValueError(f"interval record {i} lacks {name} (a run of agent_flows {agent_flows} "
                                     "writes it: the scenario's --agent_flows)") from None
                except ValueError as e:
                    raise ValueError(f"interval record {i}: field {name}={row[name]!r}: {e}") from None
                if len(v) != agent_flows * len(cols):
                    raise ValueError(f"interval record {i}: field {name} has {len(v)} values for {agent_flows} agent "
                                     f"flows x {len(cols)} ({', '.join(cols)})")
                vals.append(v)
            arrays[name] = np.asarray(vals, np.float64).reshape(len(rows), agent_flows, len(cols)).astype(dtype)
    return mx.Interval(**arrays)


def parse_line(line: str) -> tuple[int, dict]:
    """(interval number, {field: text}) of a lock-step line "rec K name=value ..."."""
    parts = line.split()
    if len(parts) < 2 or parts[0] != "rec":
        raise ValueError(f"expected 'rec K name=value ...', got {line[:200]!r}")
    k = int(parts[1])
    fields = {}
    for tok in parts[2:]:
        name, sep, value = tok.partition("=")
        if not sep:
            raise ValueError(f"expected name=value, got {tok[:100]!r}")
        fields[name] = value
    return k, fields


def read_intervals(path) -> list[dict]:
    """The rows of an `--intervals_out` CSV as {field: text}: per-class columns
    `name_c0, name_c1, ...` joined into "v0,v1,..." (the lock-step line's form), plus the
    interval number, its end time and the alphas in effect."""
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    out = []
    for r in rows:
        joined = {}
        for key, value in r.items():
            base, sep, c = key.rpartition("_c")
            if sep and c.isdigit():
                joined.setdefault(base, []).append((int(c), value))
            else:
                joined[key] = value
        out.append({k: (",".join(v for _, v in sorted(vals)) if isinstance(vals, list) else vals)
                    for k, vals in joined.items()})
    return out


@functools.partial(jax.jit, static_argnums=0)
def _rewards(formulation, rec, env_params):
    return jax.vmap(lambda r: formulation.reward_of(r, env_params)[0])(rec)


def score_records(formulation, env_params, rows: list[dict]) -> np.ndarray:
    """The formulation's reward of every interval record in `rows` [T]."""
    if not rows:
        return np.zeros((0,), np.float32)
    rec = records_to_interval(rows, env_params.sim.num_classes, env_params.sim.interval_log_size,
                              int(env_params.sim.agent_flows))
    return np.asarray(_rewards(formulation, rec, env_params))


# ---------------------------------------------------------------------------
# lock-step driving of the rl buffer policy
# ---------------------------------------------------------------------------

@functools.partial(jax.jit, static_argnums=0)
def _observe(formulation, rec, env_params):
    return formulation.observe(rec, env_params)


@functools.partial(jax.jit, static_argnums=0)
def _first_window(formulation, rec, env_params):
    return formulation.first_window(rec, env_params)


@functools.partial(jax.jit, static_argnums=0)
def _next_window(formulation, window, rec, env_params, knobs):
    return formulation.next_window(window, rec, env_params, knobs)


@functools.partial(jax.jit, static_argnums=0)
def _knobs(formulation, action, rec, env_params):
    return formulation.knobs(action, rec, env_params)


@dataclasses.dataclass(frozen=True)
class Agent:
    """A policy that sets the rl (rl-mark, rl-size) buffer policy's knobs, or a sender agent's
    flow's window (`agent_flows` = 1: Orca's cwnd_gain), inside ns-3 (`drive`),
    seen through `formulation`: stateless, fn(obs [1, D]) -> action [1, A]; or, with
    `recurrent`, fn(obs [1, D], h [1, H], c [1, H]) -> (action [1], h, c, ...) with
    fn.initial_state(1) -> (h, c) (`onnx_policy.OnnxRecurrentPolicy`), its state carried
    across the run's decisions from zeros.  A Discrete formulation's action is an index
    (an integer in [0, n)).  `env_params` gives the agent interval and the observation's
    own scales (flows_scale), each run the cell's simulator params; `digest` identifies
    the policy in the run cache.  `knob_names`: (formulation knob, scenario knob) pairs
    where the scenario reads a knob under another name (LFQ's flow_cap_pkts is rl-size's
    buffer_size_pkts when the cell carries one flow); a knob the scenario does not read
    (`KNOB_ORDER`) is refused, never left out of the reply."""
    fn: Callable
    digest: str
    formulation: object
    env_params: object
    recurrent: bool = False
    knob_names: tuple = ()

    @property
    def interval_s(self) -> float:
        return float(self.env_params.agent_interval_s)

    def args(self) -> list[str]:
        return ["--agent=stdio", f"--agent_interval_s={self.interval_s!r}"]

    def responder(self, sim_params) -> Callable[[dict], str]:
        """fn(record fields) -> the reply line, for a run of `sim_params` (a recurrent
        policy's state starts here, at zeros, and lives as long as the function)."""
        f, ep = self.formulation, self.env_params.replace(sim=sim_params)
        if int(ep.sim.agent_flows) > 1:
            raise ValueError(f"the ns-3 driver answers for one agent flow; this run has agent_flows "
                             f"{int(ep.sim.agent_flows)} (an agent axis): judge one agent flow per run")
        windowed = getattr(f, "window", 1) > 1
        P, M = ep.sim.num_classes, ep.sim.interval_log_size
        space = f.action_space(P)
        width, act_dim = len(f.obs_layout(P)), int(np.prod(space.shape))
        choices = getattr(space, "n", None) if not space.shape else None  # a Discrete space: n indices
        state = {"hc": self.fn.initial_state(1) if self.recurrent else None, "window": None, "knobs": None}
        rename = dict(self.knob_names)

        def act_of(obs):
            if not self.recurrent:
                return np.asarray(self.fn(obs))
            out = self.fn(obs, *state["hc"])
            state["hc"] = (np.asarray(out[1], np.float32), np.asarray(out[2], np.float32))
            return np.asarray(out[0])

        def answer(fields: dict) -> str:
            rec = jax.tree.map(lambda x: x[0], records_to_interval([fields], P, M, int(ep.sim.agent_flows)))
            if windowed:  # the last w observations, oldest first, as the packet env keeps them
                w = state["window"]
                # the knobs in force over the interval the record closes (an observation that keeps
                # its own carry reads them, as the packet env gives them: `RLBMEnv.step_env`)
                w = _first_window(f, rec, ep) if w is None else _next_window(f, w, rec, ep, state["knobs"])
                state["window"] = w
                obs = np.asarray(w, np.float32).reshape(1, -1)
            else:
                obs = np.asarray(_observe(f, rec, ep), np.float32)[None]
            act = act_of(obs)
            if choices is not None:
                ok = (act.shape in ((1,), (1, 1)) and np.issubdtype(act.dtype, np.integer)
                      and 0 <= int(act.ravel()[0]) < int(choices))
                if not ok:
                    raise ValueError(f"policy gave {act!r} for an observation of width {width}; expected one "
                                     f"action index in [0, {int(choices)})")
                a = np.asarray(int(act.ravel()[0]), np.int32)
            else:
                act = act.astype(np.float32)
                if act.shape != (1, act_dim) or not np.all(np.isfinite(act)):
                    raise ValueError(f"policy gave {act!r} for an observation of width {width}; expected "
                                     f"{act_dim} finite numbers")
                a = act[0]
            kn = _knobs(f, a, rec, ep)
            state["knobs"] = kn
            out = {rename.get(k, k): v for k, v in kn.items()}
            unread = sorted(k for k in out if k not in KNOB_ORDER)
            if unread:
                raise ValueError(f"{f.id} sets the knobs {unread}, which the scenario does not read (it reads "
                                 f"{', '.join(KNOB_ORDER)}); name their counterparts in Agent.knob_names")
            # repr of a float32 widened to float: the exact value, read back by strtod
            return " ".join(f"{name}=" + ",".join(repr(float(v)) for v in np.asarray(out[name], np.float32).ravel())
                            for name in KNOB_ORDER if name in out)

        return answer


def drive(cmd: list[str], answer: Callable[[dict], str]) -> int:
    """Run `cmd` (the scenario with --agent=stdio), answering each record line with
    answer(fields) -> knob line; returns the number of decisions.  Raises RuntimeError,
    with the end of the scenario's stderr, when the scenario fails or speaks out of
    protocol, or the policy's answer is refused."""
    with tempfile.TemporaryFile(mode="w+") as err:
        proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, text=True,
                                bufsize=1)

        def fail(why: str):
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            err.seek(0)
            tail = err.read()[-3000:]
            raise RuntimeError(f"ns-3 agent run ({' '.join(cmd)}): {why}" + (f"\nns-3 stderr:\n{tail}" if tail else ""))

        decisions = 0
        try:
            for line in proc.stdout:
                try:
                    k, fields = parse_line(line)
                    if k != decisions:
                        raise ValueError(f"expected record {decisions}, got {k}")
                except ValueError as e:
                    fail(f"protocol: {e}")
                try:
                    reply = answer(fields)
                except ValueError as e:
                    fail(f"record {decisions}: {e}")
                proc.stdin.write(reply + "\n")
                proc.stdin.flush()
                decisions += 1
        except BrokenPipeError:
            fail(f"the scenario stopped reading after {decisions} decisions")
        except BaseException:  # the policy raised, or an interrupt: stop the scenario too
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            raise
        finally:
            if proc.stdin and not proc.stdin.closed:
                try:
                    proc.stdin.close()
                except BrokenPipeError:
                    pass
        rc = proc.wait()
        if rc != 0:
            fail(f"exit status {rc} after {decisions} decisions")
    return decisions


# ---------------------------------------------------------------------------
# runs
# ---------------------------------------------------------------------------

def _run_one(binary: Path, c: Cell, seed: int, workdir: Path, extra: tuple, fresh: bool, source_digest: bytes,
             agent: Agent | None, interval_s: float | None, rtos: bool = False) -> dict:
    """One ns-3 run; reuses an earlier result when the scenario source, the command line,
    the flow schedule and the agent are all unchanged (unless `fresh`).  With
    `interval_s`, the run's interval records are kept; with `agent`, its rl policy is
    driven by it in lock-step; with `rtos`, every timeout is listed (`--rto_out`)."""
    stem = workdir / (f"{c.name.replace('/', '_')}_s{seed}" + (f"_{agent.digest[:10]}" if agent else ""))
    cmd = [str(binary), *ns3_args(c, seed, stem), *extra, f"--out={stem}.json", f"--flows_out={stem}.flows.csv"]
    if rtos:
        cmd.append(f"--rto_out={stem}.rto.csv")
    if agent is not None:
        interval_s = agent.interval_s
        cmd += agent.args()
    elif interval_s is not None:
        cmd.append(f"--agent_interval_s={float(interval_s)!r}")
    if interval_s is not None:
        cmd.append(f"--intervals_out={stem}.intervals.csv")
    key = hashlib.sha256(source_digest)
    if agent is not None:  # the policy, its formulation and the driver that answers for it
        key.update(agent.digest.encode())
        key.update(agent.formulation.id.encode())
        key.update(Path(__file__).read_bytes())
    if c.kind == "thesis":
        schedule = Path(f"{stem}.schedule.csv")
        write_schedule(c, seed, schedule)
        cmd.append(f"--flows_in={schedule}")
        key.update(schedule.read_bytes())
    if Path(f"{stem}.capacity.csv") in map(Path, (a.split("=", 1)[-1] for a in cmd)):
        key.update(Path(f"{stem}.capacity.csv").read_bytes())  # the schedule, not just its file's name
    key.update(" ".join(cmd[1:]).encode())
    key_file, out_json = Path(f"{stem}.key"), Path(f"{stem}.json")
    cached = not fresh and key_file.exists() and out_json.exists() and key_file.read_text() == key.hexdigest()
    if not cached:
        key_file.unlink(missing_ok=True)
        if agent is None:
            call(cmd)
        else:
            decisions = drive(cmd, agent.responder(make_params(**seed_kw(c, seed))))
            done = json.loads(out_json.read_text())["agent_intervals"]
            if decisions not in (done, done + 1):  # the last interval's end gets no decision
                raise RuntimeError(f"{stem}: {decisions} agent decisions for {done} intervals")
        root = str(repo_root()) + os.sep  # the run's record echoes its inputs' paths: keep them repo-relative
        text = out_json.read_text()
        if root in text:
            out_json.write_text(text.replace(root, ""))
        key_file.write_text(key.hexdigest())
    rep = json.loads(out_json.read_text())
    flows = np.loadtxt(f"{stem}.flows.csv", delimiter=",", skiprows=1, ndmin=2).tolist() \
        if Path(f"{stem}.flows.csv").stat().st_size > 40 else []
    intervals = read_intervals(f"{stem}.intervals.csv") if interval_s is not None else None
    root = str(repo_root()) + os.sep
    return {"rep": rep, "flows": flows, "intervals": intervals, "cmd": " ".join(cmd[1:]).replace(root, ""),
            "cached": cached, "rto_csv": Path(f"{stem}.rto.csv") if rtos else None}


def run_ns3(binary: Path, cells: list[Cell], seeds: list[int], jobs: int, workdir: Path,
            show_progress=True, extra: tuple = (), fresh: bool = False, agent: Agent | None = None,
            interval_s: float | None = None, label: str = "ns-3 ", rtos: bool = False) -> dict:
    """Every cell x seed in ns-3, `jobs` processes at a time: {cell name: {"seeds": [report],
    "flows": [[rows]], "intervals": [[records]] (with an interval or an agent), "hist",
    "wall_s", "example_cmd", "cached_runs", "rto_csv": [each run's list of timeouts, with
    `rtos`, else None]}}."""
    workdir.mkdir(parents=True, exist_ok=True)
    tasks = [(c, s) for c in cells for s in seeds]
    res = {}
    bar = Progress(len(tasks), unit=" runs", label=label) if show_progress else None
    with cf.ThreadPoolExecutor(max_workers=jobs) as ex:
        digest = hashlib.sha256(SOURCE.read_bytes()).digest()  # the cache key covers the scenario source
        futs = {ex.submit(_run_one, binary, c, s, workdir, extra, fresh, digest, agent, interval_s, rtos): (c.name, s)
                for c, s in tasks}
        for i, f in enumerate(cf.as_completed(futs)):
            res[futs[f]] = f.result()
            if bar:
                bar.update(i + 1)
    if bar:
        bar.close()
    out = {}
    for c in cells:
        runs = [res[(c.name, s)] for s in seeds]
        out[c.name] = {"seeds": [r["rep"] for r in runs], "flows": [r["flows"] for r in runs],
                       "intervals": [r["intervals"] for r in runs],
                       "hist": [r["rep"].get("queue_hist", []) for r in runs],
                       "wall_s": float(np.mean([r["rep"].get("wall_s", np.nan) for r in runs])),
                       "example_cmd": runs[0]["cmd"], "cached_runs": sum(r["cached"] for r in runs),
                       "rto_csv": [r["rto_csv"] for r in runs]}
    return out
