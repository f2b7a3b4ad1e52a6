"""Run a scenario with a buffer policy over seeds and write a JSON summary.

    python scripts/simulate.py --scenario thesis --policy sb-naive --json -
    python scripts/simulate.py --scenario long --long-flows 16 --buffer-pkts 60 --tcp cubic
    python scripts/simulate.py --scenario long --long-flows 16 --policy codel --ecn
    python scripts/simulate.py --scenario dumbbell --policy fq-codel --seconds 10

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
SHA-256 of its values).  Retransmission timeouts, retransmitted packets offered to the
buffer and spurious copies received (`rto_count`, `retx_arrivals`, `spurious_retx`) are
report fields, and so are CE marks (`mark_rate`, `marks_c<c>`).
"""
from __future__ import annotations

import json
import math
import sys
from pathlib import Path

from rlbm_jax import scenarios
from rlbm_jax.cli import add_backend_arg, add_model_args, apply_backend, fail, name_flags, parser
from rlbm_jax.devices import is_main_process
from rlbm_jax.env import buffer, formulations, traffic
from rlbm_jax.env.params import TCP_NAMES, make_params
from rlbm_jax.simulate import AQMS, BASELINES, run_scenario, with_policy

PROG = "simulate.py"
# flag dest -> make_params field
FIELDS = {"tcp": "tcp", "senders": "num_senders", "classes": "num_classes", "flow_slots": "num_flow_slots",
          "access_bps": "access_rate_bps", "access_delay_s": "access_delay_s",
          "bottleneck_bps": "bottleneck_rate_bps", "bottleneck_delay_s": "bottleneck_delay_s",
          "buffer_pkts": "buffer_per_class_pkts", "shared_buffer_pkts": "buffer_pkts",
          "scheduler": "scheduler", "class_threshold_bytes": "class_threshold_bytes", "mss_bytes": "mss_bytes",
          "initial_cwnd": "initial_cwnd_pkts", "min_rto_s": "min_rto_s", "delayed_ack": "delayed_ack",
          "load": "load", "arrival": "arrival", "arrival_stop_s": "arrival_stop_s", "cdf": "cdf",
          "long_flows": "long_flows", "warmup_s": "warmup_s", "cubic_beta": "cubic_beta",
          "cubic_c": "cubic_c", "dupthresh": "dupthresh", "max_rto_s": "max_rto_s",
          "syn_timeout_s": "syn_timeout_s", "alpha": "alpha", "beta": "beta",
          "long_flow_start_spread_s": "long_flow_start_spread_s", "flow_log_size": "completion_log_size",
          "pkts_per_tick": "pkts_per_tick", "rto_recovery": "rto_recovery", "rtt_samples": "rtt_samples",
          "red_min_th_pkts": "red_min_th_pkts", "red_max_th_pkts": "red_max_th_pkts", "red_max_p": "red_max_p",
          "red_weight": "red_weight", "pie_target_s": "pie_target_s", "pie_tupdate_s": "pie_tupdate_s",
          "pie_max_burst_s": "pie_max_burst_s", "pie_mark_threshold": "pie_mark_threshold",
          "codel_target_s": "codel_target_s", "codel_interval_s": "codel_interval_s", "dctcp_g": "dctcp_g",
          "fq_quantum_bytes": "fq_quantum_bytes"}


def build_parser():
    ap = parser(__doc__, PROG)
    ap.add_argument("--scenario", choices=list(scenarios.SCENARIOS), default="thesis",
                    help="; ".join(f"{k}: {t}" for k, (_, t) in scenarios.SCENARIOS.items()))
    ap.add_argument("--policy", default="sb-naive",
                    help=f"buffer policy ({'|'.join(BASELINES)}), AQM ({'|'.join(AQMS)}) or a policy directory")
    g = ap.add_argument_group("scenario parameters (unset: the scenario's value)")
    g.add_argument("--tcp", choices=TCP_NAMES, help="TCP of every sender (dctcp turns --ecn on)")
    g.add_argument("--senders", type=int, help="number of senders")
    g.add_argument("--classes", type=int, help="priority classes at the bottleneck")
    g.add_argument("--flow-slots", type=int, help="flow slots per env (a full table refuses and counts arrivals)")
    g.add_argument("--access-bps", type=float, help="access link rate (bit/s)")
    g.add_argument("--access-delay-s", type=float, help="access link one-way delay (s)")
    g.add_argument("--bottleneck-bps", type=float, help="bottleneck rate (bit/s)")
    g.add_argument("--bottleneck-delay-s", type=float, help="bottleneck one-way delay (s)")
    g.add_argument("--buffer-pkts", type=int, help="FIFO cap of each class; the shared buffer is their sum")
    g.add_argument("--shared-buffer-pkts", type=int, help="shared buffer size B (default: sum of class caps)")
    g.add_argument("--scheduler", choices=["rr", "strict"], help="round robin or strict priority between classes")
    g.add_argument("--class-threshold-bytes", type=float, help="flow size above which a flow is in class 1")
    g.add_argument("--mss-bytes", type=int, help="payload per data packet (bytes)")
    g.add_argument("--initial-cwnd", type=int, help="initial congestion window (segments)")
    g.add_argument("--min-rto-s", type=float, help="minimum retransmission timeout (s)")
    g.add_argument("--delayed-ack", type=int, choices=[1, 2], help="segments per ACK")
    g.add_argument("--no-hystart", action="store_true", help="CUBIC without HyStart")
    g.add_argument("--cubic-beta", type=float, help="CUBIC multiplicative decrease")
    g.add_argument("--cubic-c", type=float, help="CUBIC scaling constant")
    g.add_argument("--dupthresh", type=int, help="duplicate ACKs that declare a loss")
    g.add_argument("--max-rto-s", type=float, help="maximum retransmission timeout (s)")
    g.add_argument("--syn-timeout-s", type=float, help="wait after a lost SYN (ns-3 ConnTimeout, s)")
    g.add_argument("--alpha", type=float, nargs="+", help="policy weights per class (SB, DT, ABM)")
    g.add_argument("--beta", type=float, nargs="+", help="RL threshold weights per class")
    g.add_argument("--long-flow-start-spread-s", type=float, help="long flows start uniformly in [0, this)")
    g.add_argument("--flow-log-size", type=int, help="completed flows kept per run (overflow is counted)")
    g.add_argument("--load", type=float, help="offered load (fraction of the bottleneck)")
    g.add_argument("--arrival", choices=["load", "thesis-code"],
                   help="load: lambda = load*C/(8E[size]); thesis-code: 5*load flows/s per sender")
    g.add_argument("--arrival-stop-s", type=float, help="no new flows after this time (s)")
    g.add_argument("--cdf", help="flow sizes: websearch, datamining or a CSV of size_bytes,cdf rows")
    g.add_argument("--long-flows", type=int, help="long-lived flows started at t = 0")
    g.add_argument("--pkts-per-tick", type=int, default=1, help="bottleneck packets per tick (fidelity/speed dial)")
    g.add_argument("--warmup-s", type=float, help="excluded from time-averaged metrics (s)")
    g = ap.add_argument_group("ECN and AQM (unset: ns-3.37's queue-disc defaults)")
    g.add_argument("--ecn", action="store_true", help="ECN-capable senders (RFC 3168); the AQM marks instead of drops")
    g.add_argument("--red-min-th-pkts", type=float, help="RED/ARED: average queue where early drops start "
                   "(default 5; ared: max(5, 5 ms of link packets / 2))")
    g.add_argument("--red-max-th-pkts", type=float, help="RED/ARED: average queue of max_p (default 15; ared: 3 min)")
    g.add_argument("--red-max-p", type=float, help="RED: drop probability at max_th (ARED's start; default 0.02)")
    g.add_argument("--red-weight", type=float, help="RED: EWMA weight per packet (default 0.002; ared: 1-exp(-1/C))")
    g.add_argument("--no-red-gentle", action="store_true", help="RED without the gentle region above max_th")
    g.add_argument("--pie-target-s", type=float, help="PIE: queueing delay reference (default 0.015)")
    g.add_argument("--pie-tupdate-s", type=float, help="PIE: probability update period (default 0.015)")
    g.add_argument("--pie-max-burst-s", type=float, help="PIE: burst allowance (default 0.15)")
    g.add_argument("--pie-mark-threshold", type=float, help="PIE: marks only below this probability (default 0.1)")
    g.add_argument("--codel-target-s", type=float, help="CoDel, FQ-CoDel: target sojourn (default 0.005)")
    g.add_argument("--codel-interval-s", type=float, help="CoDel, FQ-CoDel: interval (default 0.1)")
    g.add_argument("--fq-quantum-bytes", type=int, help="FQ-CoDel: deficit round robin quantum in bytes, at least one "
                   "data packet (MSS + 52; default 1500, ns-3's device MTU)")
    g.add_argument("--dctcp-g", type=float, help="DCTCP: weight of a window's marked fraction in alpha (default 1/16)")
    add_model_args(ap)
    add_backend_arg(ap)
    g = ap.add_argument_group("run")
    g.add_argument("--seconds", type=float, default=60.0, help="simulated seconds per seed")
    g.add_argument("--seeds", type=int, default=4, help="number of seeds")
    g.add_argument("--seed-base", type=int, default=0, help="seeds are seed-base, seed-base+1, ...")
    g.add_argument("--agent-interval-s", type=float, default=0.1, help="how often a policy directory acts (s)")
    g.add_argument("--json", default="-", help="output path, - for stdout")
    g.add_argument("--no-progress", action="store_true", help="no progress bar")
    return ap


def params_from_args(a):
    kw = {}
    for arg, field in FIELDS.items():
        v = getattr(a, arg)
        if v is not None:
            kw[field] = v
    if a.no_hystart:
        kw["hystart"] = False
    if a.ecn:
        kw["ecn"] = True
    if a.no_red_gentle:
        kw["red_gentle"] = False
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


def main(argv=None):
    ap = build_parser()
    a = ap.parse_args(argv)
    apply_backend(a)
    flags = {field: "--" + arg.replace("_", "-") for arg, field in FIELDS.items()}
    flags["class_cap_pkts"] = "--buffer-pkts"
    try:
        if a.seeds < 1:
            raise ValueError("--seeds must be at least 1")
        params, kw = params_from_args(a)
        agent, form = None, formulations.DEFAULT
        policy_name = a.policy
        if a.policy not in buffer.POLICY_NAMES:
            if not Path(a.policy).exists():
                raise ValueError(f"unknown policy {a.policy!r}: neither one of {', '.join(BASELINES + AQMS)} nor a "
                                 "directory")
            from rlbm_jax.policy import load_policy, read_policy

            meta = read_policy(a.policy)[1]
            form = formulations.get(meta.get("formulation") or "")
            agent, _ = load_policy(a.policy, obs_layout=form.obs_layout(params.num_classes))
            params = with_policy(params, "rl")
        res = run_scenario(params, seconds=a.seconds, seeds=list(range(a.seed_base, a.seed_base + a.seeds)),
                           agent=agent, agent_interval_s=a.agent_interval_s, formulation=form,
                           show_progress=not a.no_progress)
        cdf = cdf_info(kw.get("cdf", "websearch"))
    except ValueError as e:
        return fail(PROG, name_flags(str(e), flags))
    res = {"scenario": a.scenario, "policy": policy_name, "cdf": cdf,
           "config": {k: (v if not isinstance(v, float) or math.isfinite(v) else str(v)) for k, v in kw.items()},
           **res}
    text = json.dumps(res, indent=2, default=float)
    if not is_main_process():  # a multi-process run: process 0 reports for all
        return 0
    if a.json == "-":
        print(text)
    else:
        Path(a.json).parent.mkdir(parents=True, exist_ok=True)
        Path(a.json).write_text(text + "\n")
        print(f"wrote {a.json}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
