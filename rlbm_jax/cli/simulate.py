"""Run a scenario with a buffer policy over seeds and write a JSON summary.

    python scripts/simulate.py --scenario thesis --policy sb-naive --json -
    python scripts/simulate.py --scenario long --long-flows 16 --buffer-pkts 60 --tcp cubic
    python scripts/simulate.py --scenario long --long-flows 16 --policy codel --ecn
    python scripts/simulate.py --scenario dumbbell --policy fq-codel --seconds 10
    python scripts/simulate.py --scenario long --senders 2 --long-flows 2 --flow-groups 2 \
        --access-delay-s 0.0001 0.02 --tcp cubic newreno --warmup-s 10

Scenarios are `rlbm_jax.scenarios`; every simulator parameter has a flag (unset flags
keep the scenario's value).  --policy takes a baseline, an AQM (red, ared, pie, codel: the
droptail limit with ns-3.37's queue-disc algorithm in front of each class FIFO; fq-codel:
ns-3.37's FQ-CoDel, a queue per flow served by deficit round robin, CoDel in each, overflow
drops from the fattest flow; --ecn makes the senders ECN-capable and the AQM mark instead of
drop) or a policy directory written by
scripts/train.py (it then acts every --agent-interval-s through the formulation it was
trained on).  The JSON holds the report fields (mean, std and per seed), `tail` (FCT
slowdown p50/p99 per flow size, < 100 KB, 100 KB - 1 MB, > 1 MB and all, pooled over the
seeds), timings, the configuration and the flow-size table used (name, rows, mean and
SHA-256 of its values), and with --capacity-schedule the schedule (name, rows, period, mean
and peak rate, SHA-256); `util_wire` is then against the capacity the schedule offered, and
`capacity_mean_bps` is that capacity's mean.  Retransmission timeouts, retransmitted packets offered to the
buffer and spurious copies received (`rto_count`, `retx_arrivals`, `spurious_retx`) are
report fields, and so are CE marks (`mark_rate`, `marks_c<c>`).  Flow groups (--flow-groups
G: sender s is in group s mod G) give each group its own access delay and TCP (one value
of --access-delay-s and --tcp per group).  --flow-stats (on by itself with several flow
groups and long flows) reports each long flow's and group's goodput, share,
retransmissions, mean cwnd, sRTT and min RTT, and Jain's index and the goodput ratio, over
the run from --warmup-s (`flows` in the JSON, the lines on stderr; `rlbm_jax.flowstats`).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rlbm_jax import jsonio, scenarios
from rlbm_jax.cli import (MODEL_FLAGS, add_backend_arg, add_model_args, add_param_args, apply_backend, fail,
                          name_flags, param_flags, param_kw, parser, printed_config)
from rlbm_jax.devices import is_main_process
from rlbm_jax.env import capacity, formulations, traffic
from rlbm_jax.env.switch import buffer
from rlbm_jax.env.params import config_record, make_params
from rlbm_jax.simulate import run_scenario, with_policy

PROG = "simulate.py"
# the scenario builders' own arguments, besides make_params keywords
SCENARIO_ONLY = ("policy",)  # --policy also takes a policy directory
FLOW_SAMPLE_S = 0.01  # --flow-stats' sample period unless --flow-sample-s says


def build_parser():
    ap = parser(__doc__, PROG)
    ap.add_argument("--scenario", choices=list(scenarios.SCENARIOS), default="thesis",
                    help="; ".join(f"{k}: {t}" for k, (_, t) in scenarios.SCENARIOS.items()))
    ap.add_argument("--policy", default="sb-naive",
                    help=f"a registered buffer policy ({policy_list()}) or a policy directory")
    # one option per declared simulator parameter (rlbm_jax.env.model), the TCP model's last
    add_param_args(ap, exclude=(*SCENARIO_ONLY, *MODEL_FLAGS))
    add_model_args(ap)
    add_backend_arg(ap, whole_scenarios=True)
    g = ap.add_argument_group("run")
    g.add_argument("--seconds", type=float, default=60.0, help="simulated seconds per seed")
    g.add_argument("--seeds", type=int, default=4, help="number of seeds")
    g.add_argument("--seed-base", type=int, default=0, help="seeds are seed-base, seed-base+1, ...")
    g.add_argument("--agent-interval-s", type=float, default=0.1, help="how often a policy directory acts (s)")
    g.add_argument("--json", default="-", help="output path, - for stdout")
    g.add_argument("--no-progress", action="store_true", help="no progress bar")
    g.add_argument("--flow-stats", action=argparse.BooleanOptionalAction, default=None,
                   help="report the long flows' goodput, share, retransmissions, cwnd, sRTT and min RTT per flow "
                   "and flow group, with Jain's index and the goodput ratio (default: on with several flow groups "
                   "and long flows)")
    g.add_argument("--flow-sample-s", type=float, default=None,
                   help=f"how often --flow-stats samples the flows (s; default {FLOW_SAMPLE_S}, with a policy "
                   "directory its --agent-interval-s at least)")
    g.add_argument("--plot", default=None, help="draw the run to this PNG: queue and utilisation over time, FCT "
                   "slowdown by flow size")
    return ap


def policy_list(sep: str = "|") -> str:
    """The registered buffer policies (`rlbm_jax.env.switch.buffer`'s registry, run-time
    registrations included), those with a discipline in front (an AQM, fq) after the rest."""
    plain = [n for n in buffer.POLICY_NAMES if buffer.DEFAULT_AQM[n] == "none"]
    return sep.join(plain + [n for n in buffer.POLICY_NAMES if n not in plain])


def params_from_args(a):
    """(SimParams, the make_params keyword arguments) of the scenario with every given flag."""
    kw = {k: v for k, v in param_kw(a).items() if k not in SCENARIO_ONLY}  # --policy is read below
    if a.scenario == "long":
        n = kw.pop("long_flows", 1)
        kw = scenarios.kw("long", long_flows=n, **kw)
    elif a.scenario == "dumbbell":  # flows arrive during the first 75 % of the run
        kw = scenarios.kw("dumbbell", seconds=a.seconds, **kw)
    else:
        kw = scenarios.kw(a.scenario, **kw)
    if kw.get("num_flow_slots", 64) < kw.get("long_flows", 0):
        kw["num_flow_slots"] = kw["long_flows"]
    if a.policy in buffer.POLICY_NAMES:
        kw["policy"] = a.policy
    return make_params(**kw), kw


def cdf_info(name_or_table) -> dict:
    """What the run's flow sizes were: table name, rows, mean and the SHA-256 of its values."""
    table = traffic.load_table(name_or_table) if isinstance(name_or_table, str) else name_or_table
    return {"name": table.name, "rows": int(table.size_bytes.size), "mean_bytes": table.mean_bytes,
            "sha256": table.digest}


def capacity_info(spec) -> dict | None:
    """What the run's capacity schedule was (None without one): name, rows, period (None: the
    last rate holds), mean and peak rate, SHA-256 of its table."""
    sched = capacity.load(spec)
    if sched is None:
        return None
    return {"name": sched.name, "rows": sched.rows, "period_s": sched.period_s if sched.repeats else None,
            "mean_bps": sched.mean_bps, "peak_bps": sched.peak_bps, "sha256": sched.digest}


def fluid_refuses_given(given) -> None:
    """A ValueError naming each parameter in `given` (set on the command line) that the
    fluid model does not read: nothing asked for is dropped silently."""
    from rlbm_jax.env.backends import fluid

    bad = fluid.ignored(given)
    if bad:
        raise ValueError(f"the fluid backend does not model {', '.join(bad)}: leave them unset, or use a packet "
                         "backend (--backend jax or native)")


def plan(a):
    """(run_config(a), the SimParams it runs)."""
    from rlbm_jax.env import backends

    if a.seeds < 1:
        raise ValueError("--seeds must be at least 1")
    params, kw = params_from_args(a)
    form = formulations.DEFAULT
    if a.policy not in buffer.POLICY_NAMES:
        if not Path(a.policy).exists():
            raise ValueError(f"unknown policy {a.policy!r}: neither one of {policy_list(', ')} nor a directory")
        from rlbm_jax.policy import read_policy

        form = formulations.get(read_policy(a.policy)[1].get("formulation") or "")
        params = with_policy(params, "rl")
    if a.plot is not None:
        check_figure_path(a.plot)
    name = a.backend or backends.default()
    if name != "auto":
        backends.resolve(name, params)  # a named backend that cannot run it is refused by name
    if name == "fluid":
        fluid_refuses_given(param_kw(a))
    flow_stats = a.flow_stats if a.flow_stats is not None else (params.flow_groups > 1 and int(params.long_flows) > 0)
    if a.flow_sample_s is not None and not flow_stats:
        raise ValueError("--flow-sample-s: no flow statistics are taken in this run (give --flow-stats)")
    driven = a.policy not in buffer.POLICY_NAMES  # a policy directory acts every --agent-interval-s
    default_s = max(FLOW_SAMPLE_S, a.agent_interval_s) if driven else FLOW_SAMPLE_S
    sample_s = (default_s if a.flow_sample_s is None else a.flow_sample_s) if flow_stats else None
    if flow_stats:
        from rlbm_jax import flowstats

        flowstats.check(params, sample_s)
        if name == "fluid":
            raise ValueError("--flow-stats: the fluid backend has no flows to sample; use a packet backend")
    run = {"scenario": a.scenario, "policy": a.policy, "formulation": form.id if a.policy not in buffer.POLICY_NAMES
           else None, "seconds": a.seconds, "seeds": list(range(a.seed_base, a.seed_base + a.seeds)),
           "agent_interval_s": a.agent_interval_s, "backend": a.backend or backends.default(),
           "flow_stats": bool(flow_stats), "flow_sample_s": sample_s,
           "json": a.json, "plot": a.plot, "progress": not a.no_progress, "cdf": cdf_info(kw.get("cdf", "websearch")),
           "config": config_record(kw, params)}
    cap = capacity_info(kw.get("capacity_schedule", capacity.NONE))
    if cap is not None:  # (a run without a schedule records what it always did)
        run["capacity"] = cap
    return run, params


def check_figure_path(path: str) -> None:
    """Refuse (ValueError) a --plot path whose format matplotlib cannot write, before the run."""
    from matplotlib.backend_bases import FigureCanvasBase

    kinds = FigureCanvasBase.get_supported_filetypes()
    ext = Path(path).suffix.lstrip(".").lower()
    if ext and ext not in kinds:
        raise ValueError(f"--plot {path}: no figure format {ext!r} (one of {', '.join(sorted(kinds))})")


def run_config(a) -> dict:
    """What this command runs (`--print-config` prints it; the output JSON holds it): the
    scenario, the buffer policy or policy directory and its formulation, every simulator
    parameter (`config`: `params.config_record`), the flow-size table, seeds, duration,
    backend and outputs."""
    return plan(a)[0]


def main(argv=None):
    ap = build_parser()
    a = ap.parse_args(argv)
    flags = {**param_flags(), "class_cap_pkts": "--buffer-pkts", "seconds": "--seconds", "seeds": "--seeds",
             "agent_interval_s": "--agent-interval-s"}
    try:
        run, params = plan(a)
        if printed_config(a, run):
            return 0
        for flag, path in (("--json", a.json), ("--plot", a.plot)):  # outputs' folders made (or refused) first
            if path is not None and path != "-":
                try:
                    Path(path).parent.mkdir(parents=True, exist_ok=True)
                except OSError as e:
                    raise ValueError(f"{flag} {path}: cannot make its folder ({e})") from e
        apply_backend(a)
        agent, form = None, formulations.DEFAULT
        if run["formulation"] is not None:
            from rlbm_jax.policy import load_policy

            form = formulations.get(run["formulation"])
            agent, _ = load_policy(a.policy, obs_layout=form.obs_layout(params.num_classes))
        res = run_scenario(params, seconds=a.seconds, seeds=run["seeds"], agent=agent,
                           agent_interval_s=a.agent_interval_s, formulation=form, show_progress=not a.no_progress,
                           plot_path=a.plot, flow_sample_s=run["flow_sample_s"])
    except ValueError as e:
        return fail(PROG, name_flags(str(e), flags))
    res = {**run, **res}
    if not is_main_process():  # a multi-process run: process 0 reports for all
        return 0
    try:
        jsonio.write(a.json, res)  # strict JSON: a statistic with no sample (NaN) is written as null
    except OSError as e:  # the results go to stdout rather than nowhere
        jsonio.write("-", res)
        return fail(PROG, f"--json {a.json}: not written ({e}); the results are on stdout", code=1)
    if "flows" in res:
        from rlbm_jax.flowstats import lines

        print("\n".join(lines(res["flows"])), file=sys.stderr)
    if a.json != "-":
        print(f"wrote {a.json}", file=sys.stderr)
    if "plot_error" in res:  # the results are written; the figure alone failed
        return fail(PROG, f"--plot {a.plot}: the figure was not written ({res['plot_error']}); the results were",
                    code=1)
    if a.plot is not None:
        print(f"wrote {a.plot}", file=sys.stderr)
    return 0

if __name__ == "__main__":
    sys.exit(main())
