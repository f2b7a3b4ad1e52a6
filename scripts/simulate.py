#!/usr/bin/env python
"""Run a scenario with a buffer policy over seeds and write a JSON summary.

    python scripts/simulate.py --scenario thesis --policy sb-naive --json -
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rlbm_jax.env import buffer  # noqa: E402
from rlbm_jax.env.params import THESIS_DEFAULTS, make_params  # noqa: E402
from rlbm_jax.simulate import BASELINES, run_scenario, with_policy  # noqa: E402


def build_parser():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scenario", choices=["thesis", "long"], default="thesis",
                    help="thesis: 10 senders, Poisson web-search flows (REFERENCE section 1); "
                         "long: --long-flows long-lived flows, no arrivals")
    ap.add_argument("--policy", default="sb-naive",
                    help=f"buffer policy ({'|'.join(BASELINES)}) or a policy directory (CHECKPOINT)")
    ap.add_argument("--tcp", choices=["newreno", "cubic"])
    ap.add_argument("--senders", type=int)
    ap.add_argument("--classes", type=int)
    ap.add_argument("--flow-slots", type=int)
    ap.add_argument("--access-bps", type=float)
    ap.add_argument("--access-delay-s", type=float)
    ap.add_argument("--bottleneck-bps", type=float)
    ap.add_argument("--bottleneck-delay-s", type=float)
    ap.add_argument("--buffer-pkts", type=int, help="FIFO cap of each class; the shared buffer is their sum")
    ap.add_argument("--shared-buffer-pkts", type=int, help="shared buffer size B (default: sum of class caps)")
    ap.add_argument("--scheduler", choices=["rr", "strict"])
    ap.add_argument("--class-threshold-bytes", type=float)
    ap.add_argument("--mss-bytes", type=int)
    ap.add_argument("--initial-cwnd", type=int)
    ap.add_argument("--min-rto-s", type=float)
    ap.add_argument("--delayed-ack", type=int, choices=[1, 2])
    ap.add_argument("--no-hystart", action="store_true")
    ap.add_argument("--cubic-beta", type=float)
    ap.add_argument("--cubic-c", type=float)
    ap.add_argument("--dupthresh", type=int)
    ap.add_argument("--max-rto-s", type=float)
    ap.add_argument("--syn-timeout-s", type=float, help="wait after a lost SYN (ns-3 ConnTimeout)")
    ap.add_argument("--alpha", type=float, nargs="+", help="policy weights per class (SB, DT, ABM)")
    ap.add_argument("--beta", type=float, nargs="+", help="RL threshold weights per class")
    ap.add_argument("--long-flow-start-spread-s", type=float, help="long flows start uniformly in [0, this)")
    ap.add_argument("--flow-log-size", type=int, help="completed flows kept per run (overflow is counted)")
    ap.add_argument("--load", type=float)
    ap.add_argument("--arrival", choices=["load", "thesis-code"],
                    help="load: lambda = load*C/(8E[size]); thesis-code: 5*load flows/s per sender")
    ap.add_argument("--arrival-stop-s", type=float)
    ap.add_argument("--cdf", help="websearch, datamining or a CSV of size_bytes,cdf")
    ap.add_argument("--long-flows", type=int)
    ap.add_argument("--pkts-per-tick", type=int, default=1, help="bottleneck packets per tick (fidelity/speed dial)")
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--warmup-s", type=float)
    ap.add_argument("--seeds", type=int, default=4, help="number of seeds")
    ap.add_argument("--seed-base", type=int, default=0)
    ap.add_argument("--agent-interval-s", type=float, default=0.1)
    ap.add_argument("--json", default="-", help="output path, - for stdout")
    ap.add_argument("--no-progress", action="store_true")
    return ap


def params_from_args(a):
    if a.scenario == "thesis":
        kw = dict(THESIS_DEFAULTS)
    else:
        n = a.long_flows if a.long_flows is not None else 1
        kw = dict(num_senders=max(1, n), num_classes=1, load=0.0, long_flows=n, num_flow_slots=max(1, n),
                  policy="droptail", access_rate_bps=1e9, bottleneck_rate_bps=100e6, bottleneck_delay_s=10e-3,
                  access_delay_s=0.0, tcp="newreno", mss_bytes=1000, buffer_per_class_pkts=250)
    kw["pkts_per_tick"] = a.pkts_per_tick
    mapping = {"tcp": "tcp", "senders": "num_senders", "classes": "num_classes", "flow_slots": "num_flow_slots",
               "access_bps": "access_rate_bps", "access_delay_s": "access_delay_s",
               "bottleneck_bps": "bottleneck_rate_bps", "bottleneck_delay_s": "bottleneck_delay_s",
               "buffer_pkts": "buffer_per_class_pkts", "shared_buffer_pkts": "buffer_pkts",
               "scheduler": "scheduler", "class_threshold_bytes": "class_threshold_bytes", "mss_bytes": "mss_bytes",
               "initial_cwnd": "initial_cwnd_pkts", "min_rto_s": "min_rto_s", "delayed_ack": "delayed_ack",
               "load": "load", "arrival": "arrival", "arrival_stop_s": "arrival_stop_s", "cdf": "cdf",
               "long_flows": "long_flows", "warmup_s": "warmup_s", "cubic_beta": "cubic_beta",
               "cubic_c": "cubic_c", "dupthresh": "dupthresh", "max_rto_s": "max_rto_s", "syn_timeout_s": "syn_timeout_s", "alpha": "alpha",
               "beta": "beta", "long_flow_start_spread_s": "long_flow_start_spread_s",
               "flow_log_size": "completion_log_size"}
    for arg, field in mapping.items():
        v = getattr(a, arg)
        if v is not None:
            kw[field] = v
    if a.no_hystart:
        kw["hystart"] = False
    if kw.get("num_flow_slots", 64) < kw.get("long_flows", 0):
        kw["num_flow_slots"] = kw["long_flows"]
    if a.policy in buffer.POLICY_NAMES:
        kw["policy"] = a.policy
    return make_params(**kw), kw


def main(argv=None):
    a = build_parser().parse_args(argv)
    try:
        params, kw = params_from_args(a)
        agent = None
        policy_name = a.policy
        if a.policy not in buffer.POLICY_NAMES:
            if not Path(a.policy).exists():
                raise ValueError(f"unknown policy {a.policy!r}: neither one of {', '.join(BASELINES)} nor a directory")
            from rlbm_jax.env.rlbm_env import obs_dim
            from rlbm_jax.policy import load_policy
            agent, _ = load_policy(a.policy, obs_dim=obs_dim(params.num_classes), act_dim=params.num_classes)
            params = with_policy(params, "rl")
        res = run_scenario(params, seconds=a.seconds, seeds=list(range(a.seed_base, a.seed_base + a.seeds)),
                           agent=agent, agent_interval_s=a.agent_interval_s, show_progress=not a.no_progress)
    except ValueError as e:
        print(f"simulate.py: error: {e}", file=sys.stderr)
        return 2
    res = {"scenario": a.scenario, "policy": policy_name,
           "config": {k: (v if not isinstance(v, float) or math.isfinite(v) else str(v)) for k, v in kw.items()},
           **res}
    text = json.dumps(res, indent=2, default=float)
    if a.json == "-":
        print(text)
    else:
        Path(a.json).parent.mkdir(parents=True, exist_ok=True)
        Path(a.json).write_text(text + "\n")
        print(f"wrote {a.json}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
