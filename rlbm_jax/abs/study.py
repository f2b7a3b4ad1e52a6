"""ABS (Adaptive Buffer Sizing, Tang et al.) on the paper's Env 2 with a capacity trace
(`ABS-trace-v0`, scenario `abs-env2-trace`): its training mix, its PPO recipe (ABSRL: PPO
with an LSTM), the buffer-sizing baselines it is judged against, each run as a buffer-size
schedule on the same env, and the evaluation that scores them all alike.

Scaling (`scenarios.abs_env2_trace`): 2 long-lived flows at a 100 ms base RTT, MTU-sized
packets, a drop-tail buffer of 1 to 100 packets set every 0.1 s, the bottleneck's rate
following a capacity trace of 10 Mbit/s peak.  The paper replays one measured cellular trace
(its first 500 s for training, the rest for testing) and a second one for generalisation;
here the traces are synthetic Wi-Fi-like ones (`capacity.wifi_like`, peak 10 Mbit/s, mean
about 5 Mbit/s, repeating every 60 s):
    training traces   wifi_like seeds TRAIN_TRACE_SEEDS, each started at 0, 10, ..., 50 s
                      into its 60 s period, NewReno and CUBIC: one (trace, start, TCP) per
                      10 s episode, so the episodes cover the whole traces
    test traces       held out: wifi_like seeds TEST_TRACE_SEEDS and the shipped "wifi"
                      trace (the same generator, a seed not trained on), and the shipped
                      "step" trace (10, 5, 2, 8 Mbit/s for 5 s each: another kind of change)
An evaluation run of seed s starts its trace at 10 s x (s mod 6) (`offset_of`), and the 2
flows start within its first 0.1 s (the paper's start together; the spread gives each seed
its own TCP phase; without it the runs are deterministic whatever the seed).
Seeds are fixed before any run and disjoint: training seeds 0.., selection seeds
SELECTION_SEEDS (choosing each baseline family's parameter on the training traces, and the
agent's training seed to report), test seeds TEST_SEEDS.

Baselines (`BASELINES`), each a function of the last interval's record (`metrics.Interval`,
its capacity_pkts the capacity the link offered) and a carry, giving the buffer-size action
index for the next interval; RED and CoDel are the switch's own policies ("red", "codel":
drop-tail at 100 packets with that AQM in front; the action is then ignored):
    fix-N             a fixed size of N packets, N in FIX_SIZES (the paper's Fix(10), Fix(100))
    bdp               the peak rate x the base RTT (84 packets), fixed
    bdp-sqrt          the same / sqrt(flows) (60), fixed
    bdp-resize        each interval, the capacity offered in the last one x the base RTT
    bdp-resize-sqrt   the same / sqrt(flows): the paper's BDP baseline (Appenzeller's rule with
                      the bandwidth and propagation RTT of the current interval, Sec. IV-B-1)
    cocoa-<gain>      Cocoa (Bachl et al.) as the ABS paper describes it: "changes the buffer
                      size based on the standing queue and spare ratio in the past with no
                      prediction".  Assumed rule: where the link had spare capacity in the last
                      interval (sr = 1 - sent / offered > 1 %: the queue ran empty), grow by
                      gain x sr x the packets offered; else shrink by the standing queue Y, the
                      interval's smallest queue (the record's queue_min_pkts).  Starts at 50
                      packets.  (Cocoa's own paper grows the buffer when the queue empties and
                      measures the standing queue over a congestion-control cycle; the ABS
                      paper's one-interval version is taken here.)
    red-rX            RED at min_th = X x 100 packets, max_th = 3 min_th, max_p 0.1
    codel-Tms         CoDel with target T ms and interval 100 ms
    abssl             the paper's supervised model (Sec. III-C): an LSTM over the same window of
                      5 observations predicts the next interval's standing queue y; the buffer
                      moves by -y, clipped to 10 packets a step (the paper limits the change and
                      names no bound; its public code's classes are -10..+10), from 50 packets.
                      Trained in place (`train_abssl`): rounds of running the current predictor
                      on the training traces with the training seeds, each prediction's ground
                      truth from the next interval by Eq. 10 (y + Y where the standing queue Y
                      > 0, y - capacity x spare ratio where Y = 0 and the link had spare, else
                      y), fitted by Adam (MSE; the paper's classes are regressed here).

The agent acts on the observation of `formulations.abs` (a window of 5 intervals) through an
LSTM and two 64-64 tanh towers; PPO's rewards are the QoE / 100 (the paper's 0-100 scale
shrunk so that the value loss does not swamp the clipped gradient).
"""
from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from rlbm_jax import scenarios
from rlbm_jax.env import capacity
from rlbm_jax.env.formulations.abs import ABS_TRACE, SIZE_LEVELS, interval_state
from rlbm_jax.env.params import make_params, stack_params
from rlbm_jax.env.randomize import MixtureEnv
from rlbm_jax.env.rlbm_env import RLBMEnv
from rlbm_jax.env.wrappers import RewardScale
from rlbm_jax.study import rollout, trainer
from rlbm_jax.study.stats import mean_se  # noqa: F401  (re-exported: the tables' mean ± s.e.)

STEP_S = 0.1
EPISODE_S = 10.0
PEAK_BPS = 10e6  # every trace's nominal peak: the link's rate (the tick), so that all batch together
TRAIN_TRACE_SEEDS = tuple(range(10, 16))
TRAIN_TCPS = ("newreno", "cubic")
TEST_TRACE_SEEDS = (100, 101)
TEST_TRACES = tuple(f"wifi-s{s}" for s in TEST_TRACE_SEEDS) + ("wifi", "step")
SELECTION_SEEDS = tuple(range(1000, 1003))
TEST_SEEDS = tuple(range(2000, 2005))
EVAL_S, EVAL_WARMUP_S = 30.0, 5.0
FIX_SIZES = (5, 10, 20, 50, 100)
REWARD_SCALE = 0.01  # PPO's reward = QoE / 100

PPO_RECIPE = dict(network="lstm", lstm_size=64, hidden=(64, 64), activation="tanh", gamma=0.9, gae_lambda=0.95,
                  clip_eps=0.2, lr=3e-4, anneal_lr=False, ent_coef=0.01, num_steps=50, update_epochs=4,
                  num_minibatches=4)


# ---- traces and configurations ---------------------------------------------------------
def trace(name: str) -> capacity.Schedule:
    """A trace by name: "wifi-s<seed>" (`capacity.wifi_like(seed)`, 10 Mbit/s peak), or a
    shipped one ("wifi", "step", "cellular")."""
    if name.startswith("wifi-s"):
        try:
            seed = int(name[len("wifi-s"):])
        except ValueError:
            raise ValueError(f"trace {name!r}: expected wifi-s<integer seed>") from None
        return capacity.wifi_like(seed=seed, peak_bps=PEAK_BPS, name=name)
    if name in capacity.BUILTIN:
        return capacity.load(name)
    raise ValueError(f"trace {name!r}: choose wifi-s<seed> or one of {', '.join(capacity.BUILTIN)}")


TRAIN_TRACES = tuple(f"wifi-s{s}" for s in TRAIN_TRACE_SEEDS)
ALL_TRACES = TRAIN_TRACES + TEST_TRACES + ("cellular",)
MAX_ROWS = max(trace(t).rows for t in ALL_TRACES) + 1  # (+1: a rotation splits a segment)
START_SPREAD_S = 0.1  # the 2 flows start uniformly within the first 0.1 s (a seed's TCP phase)
OFFSET_STEP_S = 10.0  # where in its trace a run starts: a multiple of this (`offset_of`)
TRAIN_OFFSETS_S = tuple(OFFSET_STEP_S * k for k in range(6))  # every 10 s of the 60 s training traces


def rotated(s: capacity.Schedule, offset_s: float) -> capacity.Schedule:
    """The repeating schedule `s` started `offset_s` into its period (s'(t) = s(t + offset))."""
    if not s.repeats:
        raise ValueError(f"rotated: schedule {s.name} does not repeat; give it a period to start it elsewhere")
    per = s.period_s
    off = float(offset_s) % per
    if off == 0.0:
        return s
    t, r = s.times_s, s.rates_bps
    i = int(np.searchsorted(t, off, side="right") - 1)
    times = np.concatenate([[0.0], t[i + 1:] - off, t[: i + 1] + (per - off)])
    rates = np.concatenate([[r[i]], r[i + 1:], r[: i + 1]])
    keep = np.concatenate([[True], times[1:] < per - 1e-12])
    return capacity.merged(times[keep], rates[keep], per, f"{s.name}@{off:g}s")


def offset_of(seed: int, period_s: float = 60.0) -> float:
    """Where an evaluation run of `seed` starts in its trace: 10 s x (seed mod 6), within the
    trace's period (each seed meets another stretch of the held-out trace)."""
    return (OFFSET_STEP_S * (int(seed) % 6)) % period_s


def config_kw(trace_name: str, tcp: str = "newreno", offset_s: float = 0.0, **overrides) -> dict:
    """One configuration's make_params arguments: the trace started `offset_s` into its
    period, the flows starting within START_SPREAD_S, and the shared static sizes (every
    trace's table padded to MAX_ROWS rows, the link at PEAK_BPS, so that all batch together)."""
    sched = rotated(trace(trace_name), offset_s) if offset_s else trace(trace_name)
    overrides.setdefault("long_flow_start_spread_s", START_SPREAD_S)
    return scenarios.abs_env2_trace(sched, tcp=tcp, rate_bps=PEAK_BPS, capacity_rows=MAX_ROWS, **overrides)


def run_kw(trace_name: str, tcp: str, seed: int, **overrides) -> dict:
    """An evaluation run's configuration: the trace started at `offset_of(seed)`."""
    return config_kw(trace_name, tcp, offset_of(seed, trace(trace_name).period_s), **overrides)


def train_configs(traces=TRAIN_TRACES, tcps=TRAIN_TCPS, offsets_s=TRAIN_OFFSETS_S) -> list[dict]:
    """Every training trace started at every offset, with every TCP."""
    return [config_kw(t, c, o) for c in tcps for t in traces for o in offsets_s]


def make_env(sim_params, episode_s: float = EPISODE_S) -> RLBMEnv:
    return RLBMEnv(sim_params, formulation=ABS_TRACE, agent_interval_s=STEP_S, episode_s=episode_s)


def train_env(episode_s: float = EPISODE_S, configs=None):
    """(env, params): every episode runs one configuration of the training mix, reward x
    REWARD_SCALE."""
    sims = [make_params(**kw) for kw in (configs or train_configs())]
    env = MixtureEnv(make_env(sims[0], episode_s), sims)
    return RewardScale(env, REWARD_SCALE), env.default_params


def make_ppo(ppo_cfg: dict, episode_s: float = EPISODE_S, configs=None):
    from rlbm_jax.ppo import PPO, PPOConfig

    env, env_params = train_env(episode_s, configs)
    cfg = PPOConfig.from_dict(ppo_cfg)
    return PPO(env, env_params, cfg), cfg


def trained_run(run: Path, weights: bool = True) -> dict:
    """The config.json of the training run in `run` (a ValueError when it holds none, or,
    with `weights`, no trained.msgpack).  A run of the study kit's `abs` (`abs.py train`
    since the kit) trained on the declared mix: its traces, TCPs and offsets are filled in."""
    how = f"`abs.py train --run-dir {run}`"
    cfg = trainer.trained_run(run, required=("ppo", "episode_s", "seeds"), weights=weights, how=how)
    if "train_traces" in cfg:
        return cfg
    if cfg.get("study") != "abs":
        raise ValueError(f"{Path(run) / 'config.json'} lacks train_traces and is no run of the study abs ({how})")
    return {**cfg, "train_traces": list(TRAIN_TRACES), "train_tcps": list(TRAIN_TCPS),
            "train_offsets_s": list(TRAIN_OFFSETS_S)}


def load_trained(run: Path):
    """(ppo, params [seeds], obs_stats [seeds], seeds, updates) of a training run."""
    def make(cfg):
        configs = train_configs(cfg["train_traces"], cfg.get("train_tcps", TRAIN_TCPS),
                                cfg.get("train_offsets_s", TRAIN_OFFSETS_S))
        return make_ppo(cfg["ppo"], cfg["episode_s"], configs)[0]

    return trainer.load_trained(run, make, trained_run(run))


# ---- baselines -------------------------------------------------------------------------
N_LEVELS = len(SIZE_LEVELS)


def size_to_action(size_pkts):
    """The action index whose buffer size is nearest `size_pkts` (1 to 100 packets)."""
    return jnp.clip(jnp.round(jnp.asarray(size_pkts, jnp.float32)) - 1, 0, N_LEVELS - 1).astype(jnp.int32)


def _bdp_pkts(ep, rate_pkts_per_s):
    return rate_pkts_per_s * ep.sim.base_rtt_s


def fixed(size_pkts: float):
    """fn(carry, rec, ep) -> (carry, action): always `size_pkts`."""
    return lambda carry, rec, ep: (carry, size_to_action(size_pkts))


def bdp_static(sqrt_flows: bool):
    """The peak rate x the base RTT (/ sqrt(flows)), fixed."""
    def act(carry, rec, ep):
        b = _bdp_pkts(ep, ep.sim.bottleneck_rate_bps / ep.sim.data_pkt_bits)
        return carry, size_to_action(b / (jnp.sqrt(ep.sim.long_flows * 1.0) if sqrt_flows else 1.0))
    return act


def bdp_resize(sqrt_flows: bool):
    """Each interval: the capacity the last interval offered (its record's capacity_pkts over
    its length) x the base RTT (/ sqrt(flows)); the peak rate's BDP before any interval."""
    def act(carry, rec, ep):
        interval_s = ep.ticks_per_step * ep.sim.tick_s
        rate = jnp.where(rec.capacity_pkts > 0, rec.capacity_pkts / interval_s,
                         ep.sim.bottleneck_rate_bps / ep.sim.data_pkt_bits)
        b = _bdp_pkts(ep, rate)
        return carry, size_to_action(b / (jnp.sqrt(ep.sim.long_flows * 1.0) if sqrt_flows else 1.0))
    return act


COCOA_START_PKTS = 50.0


def cocoa(gain: float = 1.0):
    """Cocoa as assumed in the module's docstring; carry = the size in effect []."""
    def act(size, rec, ep):
        cap = rec.capacity_pkts
        sent = jnp.sum(rec.dequeues_pkts).astype(jnp.float32)
        spare = jnp.where(cap > 0, jnp.clip(1.0 - sent / jnp.maximum(cap, 1e-6), 0.0, 1.0), 0.0)
        standing = jnp.sum(rec.queue_min_pkts).astype(jnp.float32)
        new = jnp.where(spare > SPARE_MIN, size + gain * spare * cap, size - standing)
        new = jnp.where(cap > 0, jnp.clip(new, 1.0, SIZE_LEVELS[-1]), size)  # the empty first record: no change
        return new, size_to_action(new)
    return act


SPARE_MIN = 0.01  # a spare ratio above this is spare capacity (below: rounding of the packet count)


# ---- ABSSL: the paper's supervised standing-queue predictor ----------------------------
ABSSL_CLIP_PKTS = 10.0  # the largest change per interval (the paper limits it; its code's classes -10..+10)
ABSSL_START_PKTS = 50.0
ABSSL_HIDDEN = 32
# the observation's fields scaled to about 1 before the LSTM (queue delay and RTT in 100 ms,
# the ratios as they are, the capacity in 10 Mbit/s)
ABSSL_SCALE = (0.1, 1.0, 1.0, 0.1, 10.0)


def _abssl_net():
    import flax.linen as nn

    class Predictor(nn.Module):
        """LSTM over the window of 5 observations (oldest first) -> the next interval's
        standing queue in packets (positive: shrink by it, negative: grow)."""

        @nn.compact
        def __call__(self, window):  # [..., W, 5]
            x = window / jnp.asarray(ABSSL_SCALE, jnp.float32)
            h = nn.RNN(nn.OptimizedLSTMCell(ABSSL_HIDDEN))(x)[..., -1, :]
            return nn.Dense(1)(nn.tanh(nn.Dense(32)(h)))[..., 0] * ABSSL_CLIP_PKTS

    return Predictor()


def abssl_init(key):
    from rlbm_jax.env.formulations.abs import WINDOW

    return _abssl_net().init(key, jnp.zeros((WINDOW, 5), jnp.float32))


def abssl_step(params, size, obs):
    """(new size, prediction): the buffer moves by the clipped prediction (Sec. III-C-2)."""
    from rlbm_jax.env.formulations.abs import WINDOW

    y_hat = jnp.clip(_abssl_net().apply(params, obs.reshape(WINDOW, 5)), -ABSSL_CLIP_PKTS, ABSSL_CLIP_PKTS)
    return jnp.clip(size - y_hat, 1.0, SIZE_LEVELS[-1]), y_hat


def abssl_actor():
    """ABSSL as a rollout actor: args = {"abssl": params, "carry0": start size}."""
    def act(args, size, obs, state, first, ep):
        new, _ = abssl_step(args["abssl"], size, obs)
        new = jnp.where(first, size, new)  # the episode's first answer: the start size
        return new, size_to_action(new)
    return act


def abssl_truth(y_hat, rec_next):
    """Eq. 10: the ground truth of the prediction y_hat made before the interval `rec_next`,
    from its standing queue Y (the interval's smallest queue) and spare ratio sr: y_hat + Y
    where Y > 0, y_hat - capacity x sr where Y = 0 and sr > 0, else y_hat."""
    cap = rec_next.capacity_pkts
    sent = jnp.sum(rec_next.dequeues_pkts).astype(jnp.float32)
    sr = jnp.where(cap > 0, jnp.clip(1.0 - sent / jnp.maximum(cap, 1e-6), 0.0, 1.0), 0.0)
    Y = jnp.sum(rec_next.queue_min_pkts).astype(jnp.float32)
    return jnp.where(Y > 0, y_hat + Y, jnp.where(sr > SPARE_MIN, y_hat - cap * sr, y_hat))


def abssl_collect_fn(env, steps: int):
    """jit(sims [N], keys [N], params) -> (windows [N, T, 25], truths [N, T]): the ABSSL
    policy with `params` run for `steps` intervals, each prediction with its Eq. 10 truth."""
    def one(sp, key, params):
        ep = env.default_params.replace(sim=sp)
        k0, key = jax.random.split(key)
        obs, st = env.reset_env(k0, ep)

        def body(c, i):
            st, obs, size, key = c
            key, k = jax.random.split(key)
            new, y_hat = abssl_step(params, size, obs)
            new = jnp.where(i == 0, size, new)
            obs2, st, _, _, _ = env.step_env(k, st, size_to_action(new), ep)
            return (st, obs2, new, key), (obs, abssl_truth(y_hat, st.sim.interval))

        init = (st, obs, jnp.asarray(ABSSL_START_PKTS, jnp.float32), key)
        _, (w, y) = jax.lax.scan(body, init, jnp.arange(steps))
        return w, y

    return jax.jit(jax.vmap(one, in_axes=(0, 0, None)))


def train_abssl(configs, seeds, rounds: int = 4, seconds: float = 20.0, epochs: int = 60, lr: float = 3e-3,
                key=0, log=None):
    """ABSSL trained in place (Sec. III-C-2): each round runs the current predictor on every
    (configuration, seed), takes each prediction's ground truth from the next interval
    (Eq. 10) and fits the predictor to them with Adam (full-batch MSE, `epochs` steps); the
    first round's predictor is the untrained network.  Returns (params, per-round loss)."""
    import optax

    sims = [make_params(**kw) for kw in configs for _ in seeds]
    keys = jnp.stack([jax.random.PRNGKey(int(s)) for _ in configs for s in seeds])
    sp = stack_params(sims)
    steps = int(round(seconds / STEP_S))
    collect = abssl_collect_fn(make_env(sims[0], episode_s=seconds + STEP_S), steps)
    params = abssl_init(jax.random.PRNGKey(key))
    tx = optax.adam(lr)
    net = _abssl_net()
    from rlbm_jax.env.formulations.abs import WINDOW

    @jax.jit
    def fit(params, w, y):
        opt = tx.init(params)
        x = w.reshape(-1, WINDOW, 5)
        t = jnp.clip(y.reshape(-1), -4 * ABSSL_CLIP_PKTS, 4 * ABSSL_CLIP_PKTS)

        def loss_fn(p):
            return jnp.mean((net.apply(p, x) - t) ** 2)

        def step(c, _):
            p, o = c
            l, g = jax.value_and_grad(loss_fn)(p)
            u, o = tx.update(g, o, p)
            return (optax.apply_updates(p, u), o), l

        (params, _), losses = jax.lax.scan(step, (params, opt), None, length=epochs)
        return params, losses

    hist = []
    for r in range(rounds):
        w, y = collect(sp, jax.vmap(lambda k: jax.random.fold_in(k, r))(keys), params)
        params, losses = fit(params, w, y)
        hist.append({"round": r + 1, "loss_first": float(losses[0]), "loss_last": float(losses[-1]),
                     "truth_mean_pkts": float(jnp.mean(y)), "samples": int(y.size)})
        if log is not None:
            log(hist[-1])
    return params, hist


def baselines() -> dict:
    """name -> (make_params overrides, actor fn(carry, rec, ep) -> (carry, action), carry0)."""
    none = jnp.zeros((), jnp.float32)
    out = {f"fix-{n}": ({}, fixed(n), none) for n in FIX_SIZES}
    out["bdp"] = ({}, bdp_static(False), none)
    out["bdp-sqrt"] = ({}, bdp_static(True), none)
    out["bdp-resize"] = ({}, bdp_resize(False), none)
    out["bdp-resize-sqrt"] = ({}, bdp_resize(True), none)
    for g in (1.0, 0.5):
        out[f"cocoa-{g:g}"] = ({}, cocoa(g), jnp.asarray(COCOA_START_PKTS, jnp.float32))
    for r in (0.05, 0.1, 0.2):
        lo = r * 100
        out[f"red-r{r:g}"] = (dict(policy="red", red_min_th_pkts=lo, red_max_th_pkts=3 * lo, red_max_p=0.1),
                              fixed(100), none)
    out["codel-5ms"] = (dict(policy="codel", codel_target_s=0.005, codel_interval_s=0.1), fixed(100), none)
    out["codel-20ms"] = (dict(policy="codel", codel_target_s=0.020, codel_interval_s=0.1), fixed(100), none)
    return out


FAMILIES = ("fix", "bdp", "bdp-sqrt", "bdp-resize", "bdp-resize-sqrt", "cocoa", "red", "codel", "abssl")


def family_of(name: str) -> str:
    """The baseline family of a variant ("fix-10" -> "fix", "bdp-resize-sqrt" -> itself)."""
    if name in FAMILIES:
        return name
    return next((f for f in ("fix", "cocoa", "red", "codel") if name.startswith(f + "-")), name)


# ---- evaluation ------------------------------------------------------------------------
def record_step(st, r, info, a, ep):
    """Per step: the QoE's parts, the queueing delay, the buffer size in effect, the capacity
    offered and the rate sent."""
    sp = ep.sim
    s = interval_state(st.sim.interval, ep)
    return {"qoe_throughput": info["qoe_throughput"], "qoe_delay": info["qoe_delay"], "delay_s": s["queue_delay_s"],
            "size_mean_pkts": jnp.minimum(st.sim.rl_size_pkts[0], sp.class_cap_pkts[0].astype(jnp.float32)),
            "capacity_mbps": s["capacity_mbps"],
            "throughput_mbps": jnp.sum(st.sim.interval.dequeues_pkts) * sp.data_pkt_bits / STEP_S / 1e6}


def _eval_env(sp, steps):
    return make_env(sp, episode_s=max(steps * STEP_S, STEP_S) + STEP_S)


TRACES = {"size_mean_pkts_trace": "size_trace", "capacity_mbps_trace": "capacity_trace_mbps",
          "throughput_mbps_trace": "sent_trace_mbps"}


def run_batch(runs, steps, warm_steps, actor, args, chunk: int = 40, key=None) -> list:
    """runs: list of (make_params kwargs, seed).  Per-run results (numpy;
    `rlbm_jax.study.rollout.run_batch`, compiled once per shape and `key`, which names the
    actor: a baseline's name, or "agent"): mean QoE (`qoe`), its throughput and delay parts
    and the mean queueing delay over the steps after `warm_steps`, the mean buffer size and
    throughput, the buffer size, capacity offered and rate sent per step (`size_trace`,
    `capacity_trace_mbps`, `sent_trace_mbps`), and the run summary (`metrics.summarize`, from
    the sims' warmup_s).  `actor` is an actor of `rlbm_jax.study.rollout`."""
    out = rollout.run_batch(_eval_env, runs, steps, warm_steps, actor, args, chunk=chunk, step_record=record_step,
                            traces=("size_mean_pkts", "capacity_mbps", "throughput_mbps"), log=False, name=key)
    for r in out:
        r["qoe"] = r.pop("reward")
        for k, v in TRACES.items():
            r[v] = r.pop(k)
    return out


def baseline_actor(fn):
    """A baseline fn(carry, rec, ep) as a rollout actor (rec: the last interval's record)."""
    return lambda args, carry, obs, state, first, ep: fn(carry, state.sim.interval, ep)


lstm_actor = rollout.lstm_actor
actor_args = rollout.actor_args


SCORE_FIELDS = ("qoe", "qoe_throughput", "qoe_delay", "util_wire", "delay_s", "throughput_mbps", "drop_rate",
                "size_mean_pkts")


def score(results) -> dict:
    return {k: mean_se([r[k] for r in results]) for k in SCORE_FIELDS}


def mean_over_seeds(per_seed: list) -> dict:
    """Each training seed's score (a dict of (mean, se)), as mean ± s.e. over training seeds."""
    return {k: mean_se([p[k][0] for p in per_seed]) for k in SCORE_FIELDS}


__all__ = ["run_kw", "rotated", "offset_of", "train_abssl", "abssl_actor", "STEP_S", "EPISODE_S", "PPO_RECIPE", "TRAIN_TRACES", "TEST_TRACES", "SELECTION_SEEDS", "TEST_SEEDS",
           "FIX_SIZES", "config_kw", "train_configs", "train_env", "make_env", "baselines",
           "run_batch", "lstm_actor", "actor_args", "baseline_actor", "score", "mean_se", "trace"]
