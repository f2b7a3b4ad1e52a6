"""`lfq.py ns3`: LFQ's exported cap network judged inside ns-3.37, beside the baselines
there and the JAX evaluation of the same configurations and seeds.

LFQ's scenario carries one flow, and one flow through the fair queue at cap N is a
drop-tail FIFO of N packets (bit for bit in JAX: tests/test_lfq.py).  So in ns-3 the
agent drives the scenario's rl-size policy in lock-step (`harness.Agent`; the
formulation's knob flow_cap_pkts is read there as buffer_size_pkts): at each boundary of
LFQ's interval (10 of the link's packet slots: the cell's own length in seconds, the
packet env's float32 value) the scenario writes the interval's record, the driver moves
the observation's carry on (the six signals and their ten averages, given the cap that
was in force, as the packet env does) and answers the cap the exported ONNX graph gives;
the scenario admits while the queue holds fewer than floor(cap) packets, checked at each
arrival.  The baselines: fq at 100 and 1000 packets and at the flow's BDP as drop-tail
FIFOs of that size, FQ-CoDel as ns-3's FqCoDelQueueDisc.

A run lasts the flow's n agent steps (`study.steps_for`, as `study.deploy` runs it) and
half an interval more, so that the n-th interval closes; its metrics come from ns-3's own
records of those n intervals: throughput (payload reaching the receiver), the time-average
queue, the largest queue (ns-3's occupancy histogram over the run), the cap in force
(ns-3 reports floor(cap), the limit it applies; JAX's column is the network's output
before the floor, at most one packet more) and the formulation's reward (its Eq. 1 from
each record, averaged).
"""
from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

import numpy as np

from rlbm_jax import jsonio, scenarios
from rlbm_jax.env.params import config_record, make_params
from rlbm_jax.lfq import study as S

POLICIES = ("LFQ", *S.BASELINES)
KNOB_NAMES = (("flow_cap_pkts", "buffer_size_pkts"),)  # one flow: the fair queue's cap is the FIFO's limit


def parse_config(text: str) -> tuple:
    """'RATE_MBPS:DELAY_MS:TCP' -> (rate_mbps, delay_ms, tcp), checked as `scenarios.lfq` checks."""
    parts = text.split(":")
    if len(parts) != 3:
        raise ValueError(f"--configs: {text!r} is not RATE_MBPS:DELAY_MS:TCP")
    try:
        rate, delay = float(parts[0]), float(parts[1])
    except ValueError:
        raise ValueError(f"--configs: {text!r} is not RATE_MBPS:DELAY_MS:TCP (numbers for the first two)") from None
    if parts[2] not in S.TCPS:
        raise ValueError(f"--configs: {text!r}: the TCP must be one of {S.TCPS}")
    scenarios.lfq(rate_bps=rate * 1e6, delay_s=delay * 1e-3, tcp=parts[2])  # raises on a bad rate or delay
    if rate * 1e6 > S.MAX_RATE_BPS or delay * 1e-3 > S.MAX_DELAY_S:
        raise ValueError(f"--configs: {text!r} is outside LFQ's range (at most {S.MAX_RATE_BPS / 1e6:g} Mbit/s and "
                         f"{S.MAX_DELAY_S * 1e3:g} ms)")
    return rate, delay, parts[2]


def cell_kw(config, policy: str) -> dict:
    """ns-3's make_params arguments for `policy` ("LFQ" or a `study.BASELINES` name) on
    config (rate_mbps, delay_ms, tcp): the whole run measured (no warm-up), as JAX's
    evaluation measures the flow from its start."""
    rate, delay, tcp = config
    base = dict(rate_bps=rate * 1e6, delay_s=delay * 1e-3, tcp=tcp, warmup_s=0.0)
    if policy == "LFQ":
        return scenarios.lfq(policy="rl-size", **base)
    if S.BASELINES[policy][0] == "fq-codel":
        return scenarios.lfq(policy="fq-codel", **base)
    size = int(np.floor(S.baseline_caps(policy, [config])[0]))  # the fair queue's admission: floor(cap)
    return scenarios.lfq(policy="droptail", buffer_per_class_pkts=size, buffer_pkts=size, **base)


def load_onnx(path):
    """fn(obs [1, 66]) -> cap [1, 1] of an exported LFQ graph (`lfq.onnx.to_onnx`), its
    formulation id (its metadata, checked for the format and the observation's width)."""
    import onnxruntime as ort

    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    meta = sess.get_modelmeta().custom_metadata_map
    if meta.get("rlbm.format") != "rlbm-lfq-1" or int(meta.get("rlbm.obs_dim", -1)) != len(S.OBS_SCALE):
        raise ValueError(f"{path}: not an LFQ cap graph (format {meta.get('rlbm.format')!r}, "
                         f"obs_dim {meta.get('rlbm.obs_dim')!r}; expected rlbm-lfq-1 and {len(S.OBS_SCALE)})")
    return (lambda obs: sess.run(["cap"], {"obs": np.asarray(obs, np.float32)})[0]), meta["rlbm.formulation"]


def score_run(rows: list, rep: dict, ep, n: int, formulation) -> dict:
    """One ns-3 run's metrics over its first n interval records (`study.METRICS`)."""
    from rlbm_jax.ns3 import harness

    if len(rows) < n:
        raise RuntimeError(f"ns-3 closed {len(rows)} intervals, fewer than the flow's {n} steps")
    rows = rows[:n]
    iv = float(ep.agent_interval_s)
    hist = np.asarray(rep["queue_hist"], np.float64).reshape(-1)
    reward = harness.score_records(formulation, ep, rows)
    return {"bandwidth_mbps": float(np.mean([float(r["sink_bytes"]) for r in rows])) * 8.0 / iv / 1e6,
            "queue_pkts": float(np.mean([float(r["queue_pkt_s"]) for r in rows])) / iv,
            "queue_max_pkts": float(np.max(np.nonzero(hist)[0])) if hist.any() else 0.0,
            "cap_pkts": (float(np.mean([float(r["buffer_size_pkts"]) for r in rows])) if "buffer_size_pkts" in rows[0]
                         else float("nan")),
            "reward": float(np.mean(reward))}


def run_ns3(cfg: dict, progress: bool = True) -> tuple[dict, dict]:
    """Every policy x config x test seed in ns-3: ({policy: {metric: array}} laid out as
    `jax_runs` lays out JAX's, wall seconds per policy)."""
    from rlbm_jax.ns3 import harness
    from rlbm_jax.progress import Progress

    configs = [tuple(c) for c in cfg["configs"]]
    seeds, units = cfg["test_seeds"], [str(s) for s in cfg["training_seeds"]]
    env = S.make_env(cfg["alpha"])
    form = env.formulation
    fns = {}
    for u in units:
        fn, fid = load_onnx(cfg["policies"][u]["onnx"])
        if fid != form.id:
            raise ValueError(f"{cfg['policies'][u]['onnx']}: a policy of {fid}, the run's formulation is {form.id}")
        fns[u] = fn
    binary = harness.build_ns3()
    workdir = Path(cfg["run_dir"]) / "ns3_runs"
    # as `jax_runs` lays them out: LFQ [training seeds, test seeds, configs], a baseline
    # [test seeds, 1, configs] (its units the test seeds)
    out = {p: {m: np.full((len(units), len(seeds), len(configs)) if p == "LFQ" else (len(seeds), 1, len(configs)),
                          np.nan) for m in S.METRICS} for p in cfg["baselines_run"]}
    wall = {p: 0.0 for p in out}
    bar = Progress(len(configs), unit=" configs", label="ns-3 ") if progress else None
    for j, c in enumerate(configs):
        tag = f"{c[2]}_{c[0]:g}mbps_{c[1]:g}ms"
        ep = env.default_params.replace(sim=make_params(**cell_kw(c, "LFQ")))
        n = int(S.steps_for(cfg["duration_s"], c[0] * 1e6))
        seconds = (n + 0.5) * float(ep.agent_interval_s)
        for p in out:
            cell = harness.Cell(f"lfq/{p}/{tag}", "long", cell_kw(c, p), seconds)
            cep = env.default_params.replace(sim=make_params(**cell.kw))  # the same tick: rate and packet size
            t0 = time.perf_counter()
            for i, u in enumerate(units if p == "LFQ" else [None]):
                agent = None if u is None else harness.Agent(
                    fn=fns[u], digest=cfg["policies"][u]["sha256"], formulation=form, env_params=cep,
                    knob_names=KNOB_NAMES)
                res = harness.run_ns3(binary, [cell], seeds, cfg["jobs"], workdir, show_progress=False,
                                      fresh=cfg["fresh_ns3"], agent=agent, interval_s=float(ep.agent_interval_s))
                r = res[cell.name]
                for k in range(len(seeds)):
                    sc = score_run(r["intervals"][k], r["seeds"][k], cep, n, form)
                    if u is None:
                        sc["cap_pkts"] = float(np.floor(S.baseline_caps(p, [c])[0]))
                    for m in S.METRICS:
                        out[p][m][(i, k, j) if u is not None else (k, 0, j)] = sc[m]
            wall[p] += time.perf_counter() - t0
        if bar:
            bar.update(j + 1, extra=f"{tag}")
    if bar:
        bar.close()
    return out, {p: round(w, 1) for p, w in wall.items()}


def jax_runs(cfg: dict) -> tuple[dict | None, str]:
    """The JAX evaluation of the same policies (the training seeds with a graph), configs and
    test seeds, run here by the study kit's rollout (`rlbm_jax.studies.lfq`'s baselines and
    agent); (runs {policy: {metric: [units, test seeds, configs]}}, where they came from)."""
    from rlbm_jax.study import get, pipeline

    study = get("lfq")
    configs = S.labelled_configs([tuple(c) for c in cfg["configs"]])
    seeds, seconds = cfg["test_seeds"], cfg["duration_s"]
    steps, warm = pipeline._steps(study, configs, seconds, 0.0)
    runs_of = lambda b: pipeline._runs(study, configs, seeds, 0.0, seconds, b)
    names = [p for p in cfg["baselines_run"] if p != "LFQ"]
    table = {p: res for p, (_, res) in pipeline._policies(study, names, runs_of, steps, warm, 50).items()}
    if "LFQ" in cfg["baselines_run"]:
        actor, per_seed, _ = study.agent_kind.policies(study, Path(cfg["run_dir"]), {"seeds": cfg["training_seeds"]})
        table["LFQ"] = [pipeline._rollouts(study, runs_of(None), steps, warm, actor, args, 50, name=None)
                        for _, args in per_seed]
    # a run's results in (config, seed) order -> [test seeds, configs]
    grid = lambda res, m: np.asarray([float(r[m]) for r in res]).reshape(len(configs), len(seeds)).T
    # the agent's units are its training seeds [units, seeds, configs]; a baseline's its test seeds [seeds, 1, configs]
    out = {p: {m: (np.stack([grid(res, m) for res in table[p]]) if p == "LFQ" else grid(table[p], m)[:, None])
               for m in S.METRICS} for p in cfg["baselines_run"]}
    return out, "run here (the study kit's rollout, `study.py lfq`)"


def ns3_config(run: Path, test_seeds: int, duration_s: float, configs: list, baselines: list | None, jobs: int,
               fresh: bool, jax: bool, out_dir) -> dict:
    cfg_path = run / "config.json"
    if not cfg_path.is_file():
        raise ValueError(f"--run-dir {run}: no config.json (run `lfq.py train --run-dir {run}` first)")
    train = json.loads(cfg_path.read_text())
    alpha = float(train["ab_fork"]["alpha"] if "ab_fork" in train else train["alpha"])  # a kit run, or a pre-kit one
    if not 1 <= test_seeds <= len(S.TEST_SEEDS):
        raise ValueError(f"--test-seeds must be 1..{len(S.TEST_SEEDS)}, got {test_seeds}")
    if not duration_s > 0:
        raise ValueError(f"--duration-s must be positive, got {duration_s}")
    if jobs < 1:
        raise ValueError(f"--jobs must be >= 1, got {jobs}")
    for b in baselines or ():
        if b not in S.BASELINES:
            raise ValueError(f"--baselines: unknown {b}; choose among {list(S.BASELINES)}")
    policies, missing = {}, []
    for s in train["seeds"]:
        onnx_path = run / f"policy_seed{s}.onnx"
        if not onnx_path.is_file():
            missing.append(int(s))
            continue
        policies[str(s)] = {"onnx": str(onnx_path), "sha256": hashlib.sha256(onnx_path.read_bytes()).hexdigest()}
    if not policies:
        raise ValueError(f"--run-dir {run}: no policy_seed<s>.onnx (run `lfq.py export --run-dir {run}` first)")
    configs = [list(parse_config(c)) for c in configs] if configs else [list(c) for c in S.test_configs()]
    names = list(S.BASELINES) if baselines is None else list(dict.fromkeys(baselines))
    return {"cmd": "ns3", "run_dir": str(run), "out_dir": str(Path(out_dir) if out_dir else run / "ns3"),
            "alpha": alpha, "training_seeds": [int(s) for s in policies],
            "training_seeds_without_policy": missing, "policies": policies,
            "test_seeds": list(S.TEST_SEEDS[:test_seeds]), "duration_s": duration_s, "configs": configs,
            "baselines_run": ["LFQ", *names], "jobs": jobs, "fresh_ns3": fresh, "jax": jax,
            # each policy's ns-3 parameters on the first configuration (the others differ in rate, delay, TCP)
            "params_first_config": {p: config_record(cell_kw(tuple(configs[0]), p)) for p in ["LFQ", *names]}}


def evaluate(cfg: dict, argv, progress: bool = True) -> dict:
    t0 = time.perf_counter()
    configs = [tuple(c) for c in cfg["configs"]]
    n3, wall = run_ns3(cfg, progress)
    jx, jax_source = jax_runs(cfg) if cfg["jax"] else (None, "not run (--no-jax)")
    table = {"ns3": S.summarize(n3, configs), "jax": S.summarize(jx, configs) if jx else None}
    rep = {"command": "python scripts/lfq.py " + " ".join(argv), "config": cfg, "jax_source": jax_source,
           "summary": table, "paper_table7": S.PAPER_TABLE7,
           "runs": {sim: {p: {m: np.asarray(v[m]).tolist() for m in S.METRICS} for p, v in r.items()}
                    for sim, r in (("ns3", n3), ("jax", jx)) if r},
           "wall_s": {**wall, "total": round(time.perf_counter() - t0, 1)}}
    out = Path(cfg["out_dir"])
    out.mkdir(parents=True, exist_ok=True)
    (out / "command.txt").write_text(rep["command"] + "\n")
    jsonio.write(out / "results.json", rep)
    md = markdown(rep)
    (out / "RESULTS.md").write_text(md)
    plot(n3, jx, configs, out / "ns3_vs_jax.png")
    rep["markdown"] = md
    return rep


def markdown(rep: dict) -> str:
    cfg = rep["config"]
    f = lambda ms, d=1: "n/a" if ms is None else (f"{ms[0]:.{d}f} ± {ms[1]:.{d}f}" if ms[1] == ms[1] else f"{ms[0]:.{d}f}")
    L = [f"# LFQ (alpha {cfg['alpha']:g}) in ns-3.37 beside the JAX simulator", "",
         f"{len(cfg['configs'])} configurations x test seeds {cfg['test_seeds']}, one flow of {cfg['duration_s']:g} s "
         f"each. LFQ: the exported ONNX graph of each training seed {cfg['training_seeds']} (mean ± s.e. over them) "
         "sets the flow's cap every 10 packet slots, in ns-3 in lock-step (rl-size: the one flow's FIFO limit, "
         "floor(cap)). Baselines (mean ± s.e. over test seeds): fq at a fixed cap and at the BDP as drop-tail FIFOs "
         "of that size, FQ-CoDel as ns-3's queue disc. JAX: " + rep["jax_source"] + "."
         + (f" Training seeds without an exported graph, not run: {cfg['training_seeds_without_policy']}."
            if cfg["training_seeds_without_policy"] else ""), "",
         "| policy | simulator | throughput (Mbit/s) | max queue (pkts) | avg queue (pkts) | cap (pkts) | reward |",
         "|---|---|---|---|---|---|---|"]
    sims = [("ns3", "ns-3")] + ([("jax", "JAX")] if rep["summary"]["jax"] else [])
    for p in cfg["baselines_run"]:
        for sim, label in sims:
            m = rep["summary"][sim][p]["all"]
            L.append(f"| {p} | {label} | {f(m['bandwidth_mbps'], 2)} | {f(m['queue_max_pkts'])} | "
                     f"{f(m['queue_pkts'])} | {f(m['cap_pkts'])} | {f(m['reward'], 3)} |")
    for sim, label in sims:
        agent = rep["summary"][sim]["LFQ"]["all"]
        L += ["", f"LFQ against each baseline in {label} ('better' / 'worse' where the means differ by more than twice "
                  "the combined standard error, else 'tie'):", "",
              "| baseline | throughput | max queue | avg queue | reward | LFQ's avg queue / its | LFQ's max queue / its |",
              "|---|---|---|---|---|---:|---:|"]
        for p in cfg["baselines_run"][1:]:
            base = rep["summary"][sim][p]["all"]
            v = lambda m, hb: S.verdict(agent[m], base[m], hb)
            ratio = lambda m: agent[m][0] / base[m][0] if base[m][0] else float("nan")
            L.append(f"| {p} | {v('bandwidth_mbps', True)} | {v('queue_max_pkts', False)} | "
                     f"{v('queue_pkts', False)} | {v('reward', True)} | {ratio('queue_pkts'):.2f} | "
                     f"{ratio('queue_max_pkts'):.2f} |")
    if rep["summary"]["jax"]:
        L += ["", "ns-3 against JAX, per policy (relative difference of the means, (ns-3 - JAX) / JAX):", "",
              "| policy | throughput | max queue | avg queue | reward |", "|---|---:|---:|---:|---:|"]
        for p in cfg["baselines_run"]:
            a, b = rep["summary"]["ns3"][p]["all"], rep["summary"]["jax"][p]["all"]
            d = lambda m: f"{(a[m][0] - b[m][0]) / abs(b[m][0]):+.0%}" if b[m][0] else "n/a"
            L.append(f"| {p} | {d('bandwidth_mbps')} | {d('queue_max_pkts')} | {d('queue_pkts')} | {d('reward')} |")
    L += ["", "Per TCP in ns-3:", "",
          "| policy | TCP | throughput (Mbit/s) | max queue (pkts) | avg queue (pkts) | reward |", "|---|---|---|---|---|---|"]
    for p in cfg["baselines_run"]:
        for tcp in (t for t in S.TCPS if t in rep["summary"]["ns3"][p]):
            m = rep["summary"]["ns3"][p][tcp]
            L.append(f"| {p} | {tcp} | {f(m['bandwidth_mbps'], 2)} | {f(m['queue_max_pkts'])} | {f(m['queue_pkts'])} | "
                     f"{f(m['reward'], 3)} |")
    L += ["", "The paper's Table VII (400 flows, both CCAs; throughput Mbit/s, max / avg queue packets):", ""]
    L += [f"- {k}: {v[0]} Mbit/s, {v[1]} / {v[2]}" for k, v in S.PAPER_TABLE7.items()]
    L += ["", f"Wall time (s): {rep['wall_s']}."]
    return "\n".join(L) + "\n"


def plot(n3: dict, jx: dict | None, configs, path) -> None:
    """Per configuration (mean over units and seeds), each policy's average queue and
    throughput in ns-3 against JAX: on the diagonal where the simulators agree."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.2))
    for ax, (m, label) in zip(axes, (("queue_pkts", "avg queue (pkts)"), ("bandwidth_mbps", "throughput (Mbit/s)"))):
        lo, hi = np.inf, -np.inf
        for k, p in enumerate(n3):
            y = np.nanmean(np.asarray(n3[p][m]), axis=(0, 1))
            x = np.nanmean(np.asarray(jx[p][m]), axis=(0, 1)) if jx else np.arange(len(configs))
            ax.scatter(x, y, s=14, color=f"C{k}", label=p)
            lo, hi = min(lo, np.nanmin(x), np.nanmin(y)), max(hi, np.nanmax(x), np.nanmax(y))
        if jx:
            ax.plot([lo, hi], [lo, hi], "k--", lw=0.8)
            ax.set_xlabel(f"JAX {label}")
        else:
            ax.set_xlabel("configuration")
        ax.set_ylabel(f"ns-3 {label}")
        if m == "queue_pkts":  # queues span 1-1000 packets; symlog keeps an empty queue (0) on the plot
            ax.set_yscale("symlog", linthresh=1.0)
            if jx:
                ax.set_xscale("symlog", linthresh=1.0)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle("LFQ and its baselines per test configuration: ns-3.37 against JAX")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)

