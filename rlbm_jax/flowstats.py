"""Per-flow statistics of a run's long-lived flows, per flow group, and the fairness between
them: what a congestion-control study reads (goodput share, Jain's index, retransmissions,
window and RTT of each flow).

The long flows are flow slots 0..K-1 (K = `long_flows`; slot k is sender k mod
num_senders, in flow group sender mod flow_groups; they never finish, so a slot keeps its
flow).  Every `sample_s` of simulated time (`simulate.run_scenario`'s `flow_sample_s`) each
seed's run is paused and each long flow's row read: packets delivered to the sink, cwnd, smoothed RTT, smallest RTT sample,
retransmissions sent (transmissions that were not new data).  Over the measurement window
(from the first sample at or after the run's `warmup_s` to the end):

    goodput_bps       distinct payload delivered in the window / its length
    share             the flow's part of the long flows' goodput
    retx_pkts         retransmissions sent in the window (go-back-N resends included)
    cwnd_mean_pkts    mean of the window's samples
    srtt_mean_s       mean of the window's samples of the smoothed RTT
    min_rtt_s         the smallest RTT sample of the run (the samples' smallest of the
                      sender's minimum, which a timeout clears)

Groups sum goodput and retransmissions over their flows and average the rest.  `jain` is
Jain's index over the flows' goodput, (sum x)^2 / (K sum x^2); `goodput_ratio` is flow 0's
goodput over flow 1's (with two flow groups, group 0's over group 1's).  Each value is a
mean over seeds with its standard error (`per_seed` keeps every seed's).
"""
from __future__ import annotations

import math
import jax.numpy as jnp
import numpy as np

from rlbm_jax.env import tcp
from rlbm_jax.env.params import SimParams

FIELDS = ("delivered_pkts", "cwnd_pkts", "srtt_s", "min_rtt_s", "retx_pkts")


def sample(state, K: int) -> jnp.ndarray:
    """[K, len(FIELDS)] the long flows' (slots 0..K-1) values now, as float32."""
    col = lambda n: tcp.column(state.flows, n)[:K]
    return jnp.stack([state.delivered[:K].astype(jnp.float32), col("cwnd"), col("srtt_s"), col("delay_min_s"),
                      (col("tx_next") - col("next_new")).astype(jnp.float32)], axis=-1)


def check(params: SimParams, sample_s: float) -> None:
    """A ValueError naming what cannot be measured: a batch, no long flows, a bad period."""
    if np.ndim(params.long_flows) != 0:
        raise ValueError("flow statistics take one run's params (not a batch)")
    if int(params.long_flows) < 1:
        raise ValueError("flow statistics need long flows (long_flows >= 1): the long flows are the ones measured")
    if not (math.isfinite(sample_s) and sample_s > 0):
        raise ValueError(f"the flows' sample period must be a positive finite number, got {sample_s!r}")


def flow_groups_of(params: SimParams, K: int) -> np.ndarray:
    """[K] the flow group of each long flow (slot k: sender k mod S, group sender mod G)."""
    return (np.arange(K) % params.num_senders) % params.flow_groups


def _tcp_names(params: SimParams) -> list:
    ids = np.asarray(params.group_tcp_id if params.flow_groups > 1 else params.tcp_id).reshape(-1)
    return [tcp.TCP_NAMES[int(i)] for i in np.broadcast_to(ids, (params.flow_groups,))]


def _delays(params: SimParams) -> list:
    d = np.asarray(params.group_base_rtt_s if params.flow_groups > 1 else params.base_rtt_s, np.float64)
    return [float(x) for x in np.broadcast_to(d.reshape(-1), (params.flow_groups,))]


def summarize(x: np.ndarray, times: np.ndarray, params: SimParams, *, seeds: list) -> dict:
    """The report of samples x [seeds, n, K, FIELDS] taken at `times` [n] (s), the window
    from the first sample at or after the run's warmup_s to the last."""
    K = x.shape[2]
    first = int(np.searchsorted(times, float(params.warmup_s) - 1e-9))
    if first >= len(times) - 1:
        raise ValueError(f"warmup_s ({float(params.warmup_s):g}) leaves no measurement window in the run "
                         f"({times[-1]:g} s)")
    f = {name: x[..., i] for i, name in enumerate(FIELDS)}  # [seeds, n, K]
    span = times[-1] - times[first]
    mss_bits = float(params.mss_bytes) * 8.0
    goodput = (f["delivered_pkts"][:, -1] - f["delivered_pkts"][:, first]) * mss_bits / span  # [seeds, K]
    total = goodput.sum(axis=1, keepdims=True)
    per_flow = {
        "goodput_bps": goodput,
        "share": goodput / np.where(total > 0, total, 1.0),
        "retx_pkts": f["retx_pkts"][:, -1] - f["retx_pkts"][:, first],
        "cwnd_mean_pkts": f["cwnd_pkts"][:, first + 1:].mean(axis=1),
        "srtt_mean_s": f["srtt_s"][:, first + 1:].mean(axis=1),
        # the smallest RTT sample of the run (a timeout clears the sender's own minimum)
        "min_rtt_s": _nan_inf(np.where(f["min_rtt_s"] > 0, f["min_rtt_s"], np.inf).min(axis=1)),
    }
    grp = flow_groups_of(params, K)
    G = params.flow_groups
    per_group = {}
    for k, v in per_flow.items():
        agg = np.sum if k in ("goodput_bps", "share", "retx_pkts") else np.mean
        per_group[k] = np.stack([agg(v[:, grp == g], axis=1) if np.any(grp == g) else np.full(len(seeds), np.nan)
                                 for g in range(G)], axis=1)
    sq = np.sum(goodput ** 2, axis=1)
    jain = np.where(sq > 0, total[:, 0] ** 2 / (K * np.where(sq > 0, sq, 1.0)), np.nan)
    fair = {"jain": jain, "utilisation": total[:, 0] / float(params.bottleneck_rate_bps)}
    if G == 2 and K >= 2:
        fair["goodput_ratio"] = _ratio(per_group["goodput_bps"][:, 0], per_group["goodput_bps"][:, 1])
    elif G == 1 and K >= 2:
        fair["goodput_ratio"] = _ratio(goodput[:, 0], goodput[:, 1])

    def ms(a):
        a = np.asarray(a, np.float64)
        se = a.std(axis=0, ddof=1) / math.sqrt(a.shape[0]) if a.shape[0] > 1 else np.full(a.shape[1:], np.nan)
        return {"mean": _py(a.mean(axis=0)), "se": _py(se)}

    tcps, rtts = _tcp_names(params), _delays(params)
    return {
        "window_s": [float(times[first]), float(times[-1])], "samples": int(len(times) - first),
        "sample_s": float(np.median(np.diff(times))),
        "seeds": seeds, "long_flows": K,
        "flows": [{"flow": k, "group": int(grp[k]), "tcp": tcps[grp[k]], "base_rtt_s": rtts[grp[k]],
                   **{name: {"mean": _py(v[:, k].mean()), "se": ms(v[:, k:k + 1])["se"][0]}
                      for name, v in per_flow.items()}} for k in range(K)],
        "groups": [{"group": g, "tcp": tcps[g], "base_rtt_s": rtts[g], "flows": int(np.sum(grp == g)),
                    **{name: {"mean": _py(v[:, g].mean()), "se": ms(v[:, g:g + 1])["se"][0]}
                       for name, v in per_group.items()}} for g in range(G)],
        "fairness": {k: {"mean": _py(v.mean()), "se": ms(v[:, None])["se"][0]} for k, v in fair.items()},
        "per_seed": {"flows": {k: _py(v) for k, v in per_flow.items()}, "fairness": {k: _py(v) for k, v in fair.items()}},
    }


def lines(rep: dict) -> list[str]:
    """The report as lines a person reads: one per flow group (one per flow where there is a
    flow per group), then the fairness; a value with no sample reads n/a."""
    def v(x, scale=1.0, digits=3):
        m = x["mean"]
        return "n/a" if m is None else f"{m * scale:.{digits}f}"

    out = []
    rows = rep["groups"] if len(rep["groups"]) > 1 else rep["flows"]
    for r in rows:
        name = f"group {r['group']}" if "flows" in r and isinstance(r["flows"], int) else f"flow {r['flow']}"
        head = f"{name} ({r['tcp']}, base RTT {r['base_rtt_s'] * 1e3:.1f} ms)"
        if isinstance(r.get("flows"), int) and r["flows"] == 0:
            out.append(f"{head}: no long flow")
            continue
        out.append(f"{head}: goodput {v(r['goodput_bps'], 1e-6, 2)} Mbit/s (share {v(r['share'])}), "
                   f"{v(r['retx_pkts'], 1, 0)} retransmissions, mean cwnd {v(r['cwnd_mean_pkts'], 1, 1)} pkts, "
                   f"sRTT {v(r['srtt_mean_s'], 1e3, 1)} ms, min RTT {v(r['min_rtt_s'], 1e3, 1)} ms")
    fr = rep["fairness"]
    tail = f", goodput ratio {v(fr['goodput_ratio'])}" if "goodput_ratio" in fr else ""
    out.append(f"fairness over {rep['window_s'][0]:g}-{rep['window_s'][1]:g} s, {len(rep['seeds'])} seed(s): "
               f"Jain's index {v(fr['jain'])}{tail}, utilisation {v(fr['utilisation'])}")
    return out


def _ratio(a, b):
    return np.where(b > 0, a / np.where(b > 0, b, 1.0), np.nan)


def _nan_inf(a):
    return np.where(np.isfinite(a), a, np.nan)


def _py(a):
    a = np.asarray(a, np.float64)
    if a.ndim == 0:
        return float(a) if math.isfinite(a) else None
    return [_py(v) for v in a]
