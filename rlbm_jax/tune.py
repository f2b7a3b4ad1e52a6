"""Tune an AQM's continuous parameters by gradient descent through the fluid model, and
judge the result on the packet simulator against a grid search run on the packet
simulator itself.

A *knob* (`KNOBS`) maps an unconstrained vector u to the parameters it sets (RED's
min_th, max_th and max_p; or a drop-tail buffer's size), and lists the points of its grid.
An *objective* (`OBJECTIVES`) scores a run from its utilisation and mean queue, the same
function of the fluid model's `summary` and of the packet simulator's report.  The
scenario is a set of long-flow cells (`presets.long_flows`: one flow count each, the same
buffer in BDPs, TCP and link); the objective is their mean.

    tune_fluid        Adam on u through the fluid model (`jax.value_and_grad` of the mean
                      objective, the gradient truncated every `grad_horizon_s`); the iterate
                      with the best fluid objective is the result

The packet side is the study kit's (`rlbm_jax.tune_study`: the tuner an agent, the grid the
baselines, a run's reward the objective of its summary); `scripts/tune_aqm.py` runs its
stages.
"""
from __future__ import annotations

import dataclasses
import time
from typing import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from rlbm_jax.env.params import SimParams, host_params, make_params
from rlbm_jax.env.presets import long_flows

# ---------------------------------------------------------------------------------------
# objectives: a function of (utilisation, mean queue in packets, params), to maximise
# ---------------------------------------------------------------------------------------


def queue_delay_rtts(queue_pkts, params: SimParams):
    """The mean queueing delay in base RTTs: queue / C / base RTT."""
    return queue_pkts * params.data_pkt_bits / params.bottleneck_rate_bps / params.base_rtt_s


def power(util, queue_pkts, params, delay_weight):
    """Kleinrock's power normalised: utilisation / (1 + queueing delay / base RTT), i.e.
    throughput / RTT against the link's C / base RTT (1 at a full link with no queue)."""
    return util / (1.0 + queue_delay_rtts(queue_pkts, params))


def util_delay(util, queue_pkts, params, delay_weight):
    """utilisation - delay_weight x queueing delay / base RTT."""
    return util - delay_weight * queue_delay_rtts(queue_pkts, params)


OBJECTIVES: dict[str, Callable] = {"power": power, "util-delay": util_delay}
OBJECTIVE_TEXT = {"power": "utilisation / (1 + mean queueing delay / base RTT) (Kleinrock's power, normalised)",
                  "util-delay": "utilisation - delay_weight x mean queueing delay / base RTT"}


# ---------------------------------------------------------------------------------------
# knobs
# ---------------------------------------------------------------------------------------

def _logit(x):
    x = np.clip(np.asarray(x, np.float64), 1e-6, 1 - 1e-6)
    return np.log(x / (1 - x))


@dataclasses.dataclass(frozen=True)
class Knob:
    """What is tuned: `names` (SimParams fields, float), their values from u (`values`,
    traceable, given the cell's `bounds`, concrete numbers read outside any trace) and back
    (`to_u`), the policy it runs under, and its grid (`grid`: a list of {name: value})."""

    name: str
    text: str
    names: tuple
    policy: str
    bounds: Callable  # params -> the concrete numbers `values` scales by (the buffer, or the buffer's range)
    values: Callable  # (u [k], bounds) -> {name: value}, jnp, inside jit
    to_u: Callable  # ({name: value}, bounds) -> u (numpy)
    grid: Callable  # (params, axes) -> [{name: value}]
    start: Callable  # params -> {name: value}
    axes: dict  # default grid axes {axis: values}

    def packet_kw(self, vals: dict, params: SimParams) -> dict:
        """make_params keywords that set `vals` in the packet simulator (a buffer given in BDPs,
        `buffer_bdp`, in whole packets of the cell `params`)."""
        if self.name == "buffer":
            pkts = float(vals["buffer_bdp"]) * float(params.bdp_pkts) if "buffer_bdp" in vals else vals["buffer_pkts"]
            b = max(1, int(round(float(pkts))))
            return {"buffer_per_class_pkts": b, "queue_capacity_pkts": b}
        return {k: float(v) for k, v in vals.items()}


def _red_bounds(p):
    return float(p.buffer_pkts)


def _red_values(u, B):
    lo = B * jax.nn.sigmoid(u[0])
    hi = lo + (B - lo) * jax.nn.sigmoid(u[1])
    return {"red_min_th_pkts": lo, "red_max_th_pkts": hi, "red_max_p": jax.nn.sigmoid(u[2])}


def _red_to_u(vals, B):
    lo, hi = float(vals["red_min_th_pkts"]), float(vals["red_max_th_pkts"])
    return _logit([lo / B, (hi - lo) / (B - lo), float(vals["red_max_p"])])


def _red_grid(p, axes):
    B = float(p.buffer_pkts)
    out = []
    for a in axes["min_th_frac"]:
        for b in axes["max_th_frac"]:
            for m in axes["max_p"]:
                lo = a * B
                out.append({"red_min_th_pkts": lo, "red_max_th_pkts": lo + b * (B - lo), "red_max_p": m})
    return out


def _buffer_range(p):
    bdp = float(p.bdp_pkts)
    return BUFFER_BDP_RANGE[0] * bdp, BUFFER_BDP_RANGE[1] * bdp


BUFFER_BDP_RANGE = (0.05, 4.0)  # the buffer knob's range, in BDPs


def _buffer_values(u, bounds):
    lo, hi = bounds
    return {"buffer_pkts": lo + (hi - lo) * jax.nn.sigmoid(u[0])}


def _buffer_to_u(vals, bounds):
    lo, hi = bounds
    return _logit([(float(vals["buffer_pkts"]) - lo) / (hi - lo)])


KNOBS = {
    "red": Knob("red", "RED's min_th, max_th and max_p (min_th = B s(u0), max_th = min_th + (B - min_th) s(u1), "
                       "max_p = s(u2), s the logistic function; B the buffer)",
                ("red_min_th_pkts", "red_max_th_pkts", "red_max_p"), "red", _red_bounds, _red_values, _red_to_u,
                _red_grid,
                lambda p: {"red_min_th_pkts": float(p.buffer_pkts) / 4, "red_max_th_pkts": 3 * float(p.buffer_pkts) / 4,
                           "red_max_p": 0.1},
                {"min_th_frac": (0.02, 0.05, 0.15, 0.4), "max_th_frac": (0.1, 0.35, 1.0),
                 "max_p": (0.01, 0.04, 0.15, 0.5)}),
    "buffer": Knob("buffer", f"a drop-tail buffer's size, in [{BUFFER_BDP_RANGE[0]}, {BUFFER_BDP_RANGE[1]}] BDP "
                             "(logistic in u)", ("buffer_pkts",), "droptail", _buffer_range, _buffer_values, _buffer_to_u,
                   lambda p, axes: [{"buffer_bdp": float(b)} for b in axes["buffer_bdp"]],  # packets per cell
                   lambda p: {"buffer_pkts": float(p.buffer_pkts)},
                   {"buffer_bdp": (0.1, 0.2, 0.35, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 4.0)}),
}


# ---------------------------------------------------------------------------------------
# the scenario: long-flow cells
# ---------------------------------------------------------------------------------------

def cells(knob: Knob, flows: Sequence[int], buffer_bdp: float, warmup_s: float, **kw) -> list[dict]:
    """make_params keywords of one cell per flow count: long flows through `buffer_bdp` x BDP
    under the knob's policy (RED at its starting point), the starts spread over 0.2 s unless
    given.  `make_params(**cell)` builds each."""
    kw = {"long_flow_start_spread_s": 0.2, **kw, "warmup_s": warmup_s, "policy": knob.policy}
    out = []
    for n in flows:
        cell = long_flows(int(n), buffer_bdp, **kw)
        if knob.name == "red":
            cell.update(knob.start(host_params(**cell)))
        out.append(cell)
    return out


# ---------------------------------------------------------------------------------------
# the fluid side: Adam through the model
# ---------------------------------------------------------------------------------------

# (the arguments that make the program, its jitted value_and_grad) of tune_fluid's last call
_LAST_VG: list = []


def tune_fluid(knob: Knob, kws: Sequence[dict], objective: str, *, seconds: float, warmup_s: float,
               steps: int, lr: float, grad_horizon_s: float | None, delay_weight: float = 1.0,
               progress=None, u0=None) -> dict:
    """Adam (optax) on the knob's u, from the knob's starting point (or `u0`), maximising the
    mean fluid objective over the cells.  Returns the history (objective and values per step),
    the best iterate's values and objective, and the wall time (compilation included)."""
    import optax

    from rlbm_jax.env.backends import fluid

    t0 = time.perf_counter()
    obj = OBJECTIVES[objective]
    plist = [make_params(**kw) for kw in kws]
    # the feedback rings must hold the largest RTT a traced value can reach: the whole buffer
    # range for the buffer knob, the cell's buffer for RED
    cfgs = []
    for p in plist:
        full = float(p.base_rtt_s) + (_buffer_range(p)[1] if knob.name == "buffer" else float(p.buffer_pkts)) \
            * float(p.data_pkt_bits) / float(p.bottleneck_rate_bps)
        cfgs.append(fluid.configure(p, max_rtt_s=1.25 * full))

    bounds = [knob.bounds(p) for p in plist]

    def J(u):
        vals = []
        for p, cfg, bd in zip(plist, cfgs, bounds):
            out = fluid.summary(p, seconds, warmup_s=warmup_s, overrides=knob.values(u, bd), config=cfg,
                                grad_horizon_s=grad_horizon_s)
            vals.append(obj(out["util_wire"], out["queue_mean_pkts"], p, delay_weight))
        return jnp.mean(jnp.stack(vals))

    # the value-and-gradient program of the last call, reused by the next call with the same knob
    # and cells (the same objects) and settings: a run's next start, whose u0 is the program's
    # argument, not a part of it
    same = (knob, kws, (objective, seconds, warmup_s, grad_horizon_s, delay_weight))
    if _LAST_VG and _LAST_VG[0][0] is knob and _LAST_VG[0][1] is kws and _LAST_VG[0][2] == same[2]:
        vg = _LAST_VG[1]
    else:
        vg = jax.jit(jax.value_and_grad(J))
        _LAST_VG[:] = [same, vg]
    u = jnp.asarray(knob.to_u(knob.start(plist[0]), bounds[0]) if u0 is None else u0, jnp.float32)
    opt = optax.adam(lr)
    state = opt.init(u)
    history = []
    best = None
    for i in range(steps + 1):
        val, g = vg(u)
        val, g = float(val), np.asarray(g)
        if not (np.isfinite(val) and np.all(np.isfinite(g))):
            raise FloatingPointError(f"tune: the fluid objective or its gradient is not finite at step {i} "
                                     f"(u = {np.asarray(u).tolist()}, value {val}, gradient {g.tolist()})")
        vals = {k: float(v) for k, v in knob.values(u, bounds[0]).items()}
        history.append({"step": i, "objective": val, **vals, "grad_norm": float(np.linalg.norm(g))})
        if best is None or val > best["objective"]:
            best = history[-1]
        if progress is not None:
            progress.update(i + 1, extra=f"objective {val:.4f}")
        if i < steps:
            updates, state = opt.update(-jnp.asarray(g), state)  # maximise
            u = optax.apply_updates(u, updates)
    return {"history": history, "best": {k: best[k] for k in knob.names}, "best_objective": best["objective"],
            "best_step": best["step"], "wall_s": time.perf_counter() - t0}
