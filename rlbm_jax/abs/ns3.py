"""`abs.py export` and `abs.py ns3`: the trained ABS agent as deployable policies (checked
against the trained network), and judged inside ns-3.37 beside the JAX simulator.

In ns-3 the agent drives the scenario's rl-size policy in lock-step (`harness.drive`): at
each 0.1 s boundary the scenario writes the interval's record (capacity_pkts included: the
trace's integral over the interval), the driver keeps the last 5 observations as the
packet env does and answers "buffer_size_pkts=n"; the scenario then admits while the queue
is below n (checked at each arrival).  A fixed-size baseline is drop-tail at its size
(ns-3's rl-size without an agent, i.e. the FIFO cap), RED and CoDel ns-3's own queue discs;
BDP re-sizing and Cocoa, which set the size every interval from the record, run only in JAX.
Every ns-3 run is scored by the formulation's QoE from ns-3's own interval records."""
from __future__ import annotations

import hashlib
import sys
import time
from pathlib import Path

import jax
import numpy as np

from rlbm_jax import jsonio
from rlbm_jax.abs import study as S
from rlbm_jax.env.formulations.abs import ABS_TRACE, interval_state
from rlbm_jax.env.params import config_record, make_params
from rlbm_jax.study.ns3 import check_judging, write_judging
from rlbm_jax.study.export import export_plan, export_run, policy_paths
from rlbm_jax.study.stats import fmt_mean_se

PROG = "abs.py"
NS3_CAPABLE = ("fix", "bdp", "bdp-sqrt", "red", "codel")  # families that need no per-interval decision
# the baselines `ns3` runs by default: fixed limits (drop-tail at the size) and ns-3's AQMs; where the
# run has a selection (`evaluate`: <run>/kit/ledger.json, or a pre-kit results.json), its chosen fix, red
# and codel replace these
DEFAULT_NS3_BASELINES = ("fix-10", "fix-50", "fix-100", "bdp-sqrt", "red-r0.1", "codel-5ms")


def default_baselines(run: Path) -> tuple[list, str]:
    """The baselines `ns3` runs without --baselines, and where they came from: Fix(10) and
    Fix(100) (the paper's), static BDP / sqrt(N), and the variants `evaluate` chose for the
    families ns-3 can run (the last selection of the kit's ledger, <run>/kit/ledger.json; a run
    evaluated before the kit: its results.json), else DEFAULT_NS3_BASELINES."""
    import json

    from rlbm_jax.study.protocol import LEDGER, chosen_variants

    res, chosen = run / "kit" / LEDGER, chosen_variants(run / "kit")
    if not chosen:
        res = run / "results.json"
        chosen = json.loads(res.read_text()).get("chosen") if res.is_file() else None
    if not chosen:
        return list(DEFAULT_NS3_BASELINES), "default (no chosen variants in the run)"
    names = ["fix-10", "fix-100", "bdp-sqrt"] + [chosen[f] for f in ("fix", "red", "codel") if f in chosen]
    return list(dict.fromkeys(names)), (f"Fix(10), Fix(100), bdp-sqrt and the chosen fix, red and codel of "
                                        f"{res.relative_to(run)}")


def export_config(a) -> dict:
    """What `export` writes (`study.export.export_plan`)."""
    return export_plan(Path(a.run_dir), S.trained_run(Path(a.run_dir)), ABS_TRACE)


def export(a, cfg: dict, argv=None) -> int:
    run = Path(cfg["run_dir"])
    print(f"config: {jsonio.dumps(cfg)}")
    ppo, params, stats, seeds, updates = S.load_trained(run)
    env_info = {"scenario": {"name": "abs-env2-trace", "agent_interval_s": S.STEP_S, "buffer_policy": "rl-size",
                             "train_traces": S.trained_run(run)["train_traces"]},
                "updates": updates}
    return export_run(PROG, ppo, params, stats, seeds, run, formulation=ABS_TRACE, interval_s=S.STEP_S,
                      env_info=env_info, tol=1e-4)


def _fail(message: str, code: int = 2) -> int:
    print(f"{PROG}: error: {message}", file=sys.stderr)
    return code


def ns3_kw(name: str | None, trace: str, tcp: str, warmup_s: float, seed: int = 0) -> dict:
    """make_params arguments of baseline `name` (None: the agent's rl-size) for ns-3 in a run
    of `seed` (`study.run_kw`: the trace started where the seed says): a fixed size or a
    static BDP rule as drop-tail at that size, RED and CoDel as they are."""
    kw = S.run_kw(trace, tcp, seed, warmup_s=warmup_s)
    if name is None:
        return kw
    fam = S.family_of(name)
    if fam not in NS3_CAPABLE:
        raise ValueError(f"--baselines: {name} sets the buffer every interval from the record; ns-3 runs "
                         f"the families {', '.join(NS3_CAPABLE)} (fixed limits and ns-3's AQMs)")
    ov, fn, c0 = S.baselines()[name]
    if ov:
        return {**kw, **ov}
    ep = S.make_env(make_params(**kw)).default_params
    size = int(fn(c0, None, ep)[1]) + 1  # the static rule's size (fix, bdp, bdp-sqrt read no record)
    return {**kw, "policy": "droptail", "buffer_per_class_pkts": size, "queue_capacity_pkts": 100}


def ns3_config(a) -> dict:
    run = Path(a.run_dir)
    trained = S.trained_run(run, weights=not a.no_jax)
    check_judging(a.seeds, len(S.TEST_SEEDS), a.jobs, a.seconds, a.warmup_s)
    for tr in a.traces:
        if float(np.min(S.trace(tr).rates_bps)) <= 0:
            raise ValueError(f"--traces: {tr} has an outage (rate 0), which ns-3's point-to-point device refuses")
    if a.agent_only:
        names, source = [], "--agent-only"
    elif a.baselines:
        names, source = list(a.baselines), "--baselines"
    else:
        names, source = default_baselines(run)
    configs = [(t, c) for c in a.tcp for t in a.traces]
    for v in names:
        if v not in S.baselines():
            raise ValueError(f"--baselines: unknown {v}; choose among {list(S.baselines())}")
        ns3_kw(v, *configs[0], a.warmup_s, S.TEST_SEEDS[0])
    policies = {}
    for s in trained["seeds"]:
        _, onnx_path = policy_paths(run, s)
        if not onnx_path.is_file():
            raise ValueError(f"{onnx_path} is missing: run `{PROG} export --run-dir {run}` first")
        policies[str(s)] = {"onnx": str(onnx_path), "sha256": hashlib.sha256(onnx_path.read_bytes()).hexdigest()}
    steps, warm = int(round(a.seconds / S.STEP_S)), int(round(a.warmup_s / S.STEP_S))
    return {"run_dir": str(run), "out_dir": str(Path(a.out_dir) if a.out_dir else run / "ns3"),
            "configs": [list(c) for c in configs], "seeds": list(S.TEST_SEEDS[: a.seeds]),
            "training_seeds": trained["seeds"], "policies": policies, "baselines": names,
            "baselines_source": source, "seconds": a.seconds,
            "warmup_s": a.warmup_s, "steps": steps, "warmup_steps": warm, "jobs": a.jobs, "fresh_ns3": a.fresh_ns3,
            "jax": not a.no_jax,
            "params": {v or "absrl": {" ".join(c): config_record(ns3_kw(v, *c, a.warmup_s, S.TEST_SEEDS[0]))
                                      for c in configs} for v in (None, *names)}}


@jax.jit
def _states(rec, ep):
    return jax.vmap(lambda r: interval_state(r, ep))(rec)


def score_ns3_run(rep: dict, rows: list, ep, warm: int) -> dict:
    """One ns-3 run scored as `study.rollout_fn` scores a JAX run: the QoE, its parts and the
    queueing delay averaged over the intervals after `warm` from ns-3's records; utilisation
    and drop rate from its report."""
    from rlbm_jax.ns3 import harness

    q = harness.score_records(ABS_TRACE, ep, rows)
    rec = harness.records_to_interval(rows, 1, ep.sim.interval_log_size)
    st = jax.device_get(_states(rec, ep))
    sizes = [float(r["buffer_size_pkts"]) for r in rows if "buffer_size_pkts" in r]
    sent = np.asarray(rec.dequeues_pkts).sum(-1) * float(ep.sim.data_pkt_bits) / S.STEP_S / 1e6
    return {"qoe": float(np.mean(q[warm:])), "qoe_throughput": float(np.mean(st["throughput"][warm:])),
            "qoe_delay": float(np.mean(np.asarray(ABS_TRACE.reward.delay(st["queue_delay_s"]))[warm:])),
            "delay_s": float(np.mean(st["queue_delay_s"][warm:])), "util_wire": float(rep["util_wire"]),
            "throughput_mbps": float(np.mean(sent[warm:])), "drop_rate": float(rep["drop_rate"]),
            "size_mean_pkts": float(np.mean(sizes[warm:])) if sizes else float("nan"),
            "capacity_pkts": np.asarray(rec.capacity_pkts), "queue_end_pkts": np.asarray(rec.queue_end_pkts)[:, 0],
            "sizes": sizes}


def ns3(a, cfg: dict, argv) -> int:
    from rlbm_jax.ns3 import harness
    from rlbm_jax.onnx_policy import load_checked

    run, out = Path(cfg["run_dir"]), Path(cfg["out_dir"])
    configs = [tuple(c) for c in cfg["configs"]]
    seeds, steps, warm = cfg["seeds"], cfg["steps"], cfg["warmup_steps"]
    out.mkdir(parents=True, exist_ok=True)
    command = f"python scripts/abs.py {' '.join(argv)}"
    (out / "command.txt").write_text(command + "\n")
    t0 = time.perf_counter()
    binary = harness.build_ns3()
    workdir = run / "ns3_runs"
    slug = lambda c: f"{c[1]}_{c[0]}"
    ep_of = lambda kw: S.make_env(make_params(**kw), episode_s=cfg["seconds"]).default_params
    ns3_runs, wall = {}, {}
    # every run's boundaries at the agent's interval (the env's float32 0.1 s: the driven runs' times)
    interval_s = float(ep_of(S.config_kw(*configs[0])).agent_interval_s)

    def run_cells(label, v, agent=None):
        # one call per seed: a run's trace starts where its seed says (`study.run_kw`)
        by = {c: [] for c in configs}
        tc = time.perf_counter()
        for seed in seeds:
            cells = [harness.Cell(f"abs/{label}/{slug(c)}_s{seed}", "long", ns3_kw(v, *c, cfg["warmup_s"], seed),
                                  cfg["seconds"]) for c in configs]
            res = harness.run_ns3(binary, cells, [seed], cfg["jobs"], workdir, fresh=cfg["fresh_ns3"], agent=agent,
                                  interval_s=interval_s, label=f"ns-3 {label} seed {seed} ")
            for c, cell in zip(configs, cells):
                r = res[cell.name]
                sc = score_ns3_run(r["seeds"][0], r["intervals"][0], ep_of(cell.kw), warm)
                if not sc["sizes"]:  # a fixed limit (drop-tail at its size; the AQMs' 100 packets)
                    sc["size_mean_pkts"] = float(cell.kw.get("buffer_per_class_pkts", 100))
                by[c].append(sc)
        wall[label] = round(time.perf_counter() - tc, 1)
        return by

    for s in cfg["training_seeds"]:
        p = cfg["policies"][str(s)]
        try:
            fn, _ = load_checked(p["onnx"], num_classes=1, agent_interval_s=S.STEP_S, formulation=ABS_TRACE.id)
        except ValueError as e:
            return _fail(str(e))
        agent = harness.Agent(fn=fn, digest=p["sha256"], formulation=ABS_TRACE,
                              env_params=ep_of(S.config_kw(*configs[0])), recurrent=True)
        ns3_runs[f"absrl-seed{s}"] = run_cells(f"absrl-seed{s}", None, agent)
    for v in cfg["baselines"]:
        ns3_runs[v] = run_cells(v, v)
    t_ns3 = time.perf_counter() - t0

    jax_runs = {}
    if cfg["jax"]:
        tj = time.perf_counter()
        base = S.baselines()
        runs = [(S.run_kw(t, c, s, warmup_s=cfg["warmup_s"]), s) for (t, c) in configs for s in seeds]
        split = lambda res: {c: res[i * len(seeds):(i + 1) * len(seeds)] for i, c in enumerate(configs)}
        for v in cfg["baselines"]:
            ov, fn, c0 = base[v]
            rv = [({**kw, **ov}, s) for kw, s in runs]
            jax_runs[v] = split(S.run_batch(rv, steps, warm, S.baseline_actor(fn), {"carry0": c0}, len(rv), key=v))
        ppo, params, stats, tseeds, _ = S.load_trained(run)
        actor = S.lstm_actor(ppo)
        for j, s in enumerate(tseeds):
            args = S.actor_args(ppo, jax.tree.map(lambda x: x[j], params), jax.tree.map(lambda x: x[j], stats))
            jax_runs[f"absrl-seed{s}"] = split(S.run_batch(runs, steps, warm, actor, args, len(runs)))
        wall["jax"] = round(time.perf_counter() - tj, 1)

    report = build_report(ns3_runs, jax_runs, configs, cfg)
    report["command"] = command
    report["config"] = cfg
    return write_judging(out, report, markdown, wall, t_ns3, t0)


def build_report(ns3_runs, jax_runs, configs, cfg) -> dict:
    agents = [f"absrl-seed{s}" for s in cfg["training_seeds"]]
    policies = ["absrl", *cfg["baselines"]]

    def scores(runs):
        if not runs:
            return {}
        out = {}
        if all(k in runs for k in agents):
            per = [S.score([x for c in configs for x in runs[k][c]]) for k in agents]
            out["absrl"] = S.mean_over_seeds(per)
        for v in cfg["baselines"]:
            if v in runs:
                out[v] = S.score([x for c in configs for x in runs[v][c]])
        return out

    sn, sj = scores(ns3_runs), scores(jax_runs)
    return {"configs": [list(c) for c in configs], "test_seeds": cfg["seeds"], "training_seeds": cfg["training_seeds"],
            "seconds": cfg["seconds"], "warmup_s": cfg["warmup_s"], "policies": policies,
            "overall": {p: {"ns3": sn.get(p), "jax": sj.get(p)} for p in policies},
            "qoe_per_run": {sim: {p: {" ".join(c): [round(float(x["qoe"]), 4) for x in runs[p][c]] for c in configs}
                                  for p in runs} for sim, runs in (("ns3", ns3_runs), ("jax", jax_runs))},
            "agent_sizes_ns3": {k: [float(np.mean(x["sizes"][cfg["warmup_steps"]:])) for c in configs
                                    for x in ns3_runs[k][c]] for k in agents if k in ns3_runs}}


def markdown(rep) -> str:
    def _fmt(ms, scale=1.0, digits=2):
        return fmt_mean_se(ms, scale, digits)

    L = ["# ABS in ns-3.37 beside the JAX simulator", "",
         f"Traces and TCPs {', '.join(' '.join(c) for c in rep['configs'])}; test seeds {rep['test_seeds']}; "
         f"{rep['seconds']:g} s per run, the first {rep['warmup_s']:g} s left out. The agent (training seeds "
         f"{rep['training_seeds']}, mean ± s.e. over them) drives ns-3's rl-size limit in lock-step from its "
         "exported ONNX graph (window of 5 observations kept by the driver, LSTM state carried); the trained "
         "network in JAX. Baselines: mean ± s.e. over runs; a fixed size or static BDP is drop-tail at that size, "
         "RED and CoDel ns-3's own queue discs. QoE from each simulator's own interval records.", "",
         "| policy | simulator | QoE | utilisation | queueing delay (ms) | throughput (Mbit/s) | drop rate (%) | "
         "mean buffer (pkts) |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for p in rep["policies"]:
        for sim, label in (("ns3", "ns-3"), ("jax", "JAX")):
            o = rep["overall"][p][sim]
            if o is None:
                L.append(f"| {p} | {label} |" + " n/a |" * 6)
                continue
            L.append(f"| {p} | {label} | {_fmt(o['qoe'])} | {_fmt(o['util_wire'], 1, 3)} | "
                     f"{_fmt(o['delay_s'], 1e3, 1)} | {_fmt(o['throughput_mbps'])} | {_fmt(o['drop_rate'], 100, 2)} | "
                     f"{_fmt(o['size_mean_pkts'], 1, 1)} |")
    return "\n".join(L) + "\n"
