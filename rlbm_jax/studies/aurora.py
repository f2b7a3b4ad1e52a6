"""Aurora (`Aurora-v0`: PCC-RL's agent, a rate sender whose pacing rate it moves every 20 ms by
x (1 + 0.025 a) or / (1 - 0.025 a), a in [-10, 10]) on Aurora's own training distribution of
links, as a study of the kit: the agent's flow (tcp rate, starting at half the link) alone on a
dumbbell (`scenarios.cc_rate`), judged on Aurora's reward and on what an operator reads beside it.

    training    the agent's flow alone on a bottleneck of 300 packets a second (3.6 Mbit/s, inside
                Aurora's 100-500 pkt/s), base RTTs of 50, 200 and 500 ms (its 50-500 ms latencies),
                drop-tail buffers of 0.2, 1 and 4 BDP (its random buffer as three sizes): 9 cells,
                one drawn per 10 s episode.  One rate: a training mixture shares one tick length
                (the link's packet slot), and Aurora's observation holds no rate (latency
                inflation, latency ratio, send ratio), so the other rates are left to the test
    selection   300 pkt/s, 200 ms, the three buffers, SELECTION_SEEDS
    test        alone: 100, 300 and 500 pkt/s x 50 and 500 ms x the three buffers, and at 200
                pkt/s and 100 ms (neither trained on) on the three buffers; beside a CUBIC flow
                (never met in training) at 300 pkt/s and 200 ms on the three buffers; TEST_SEEDS
    baselines   cubic, newreno, bbr (the agent's flow runs them, no agent acting,
                `Study.undriven_env`, scored by Aurora's reward on that flow's record),
                rate-hold (action 0: the rate sender held at half the link) and delay-target over
                its gain k: a = clip(k (1.1 - r), -10, 10) with r the last interval's sRTT over
                min RTT, a rate that rises while the queueing delay is below a tenth of the min
                RTT and falls above
A run is EVAL_S (20 s) scored after WARMUP_S (5 s).
"""
import jax.numpy as jnp

from rlbm_jax import scenarios
from rlbm_jax.env.formulations.cc import AURORA, AURORA_ACTION_MAX, AURORA_INTERVAL_S
from rlbm_jax.env.params import make_params
from rlbm_jax.studies.orca import agent_tcp, interval_metrics, record_step
from rlbm_jax.study import Baseline, Seeds, Study

PKT_BITS = 1500 * 8
TRAIN_RATE_PPS = 300.0
TEST_RATES_PPS = (100.0, 300.0, 500.0)
TRAIN_RTTS_S = (0.05, 0.2, 0.5)
BUFFERS_BDP = (0.2, 1.0, 4.0)
EPISODE_S = 10.0
EVAL_S, WARMUP_S = 20.0, 5.0
SELECTION_SEEDS = range(650_000, 650_010)
TEST_SEEDS = range(660_000, 660_020)
DELAY_TARGET_GAINS = (1.0, 2.0, 5.0, 10.0)
RATIO_COL = list(AURORA.obs_layout(1)).index("latency_ratio_lag0")  # the last interval's sRTT / min RTT
PPO_RECIPE = dict(network="mlp", hidden=(64, 64), activation="tanh", action="gaussian", action_map="none",
                  init_log_std=0.0, gamma=0.99, gae_lambda=0.95, clip_eps=0.2, lr=3e-4, anneal_lr=True,
                  ent_coef=0.0, num_envs=64, num_steps=100, update_epochs=4, num_minibatches=4, total_updates=250)
TEST_ALONE = [(r, t) for r in TEST_RATES_PPS for t in (0.05, 0.5)] + [(200.0, 0.1)]
BESIDE = (300.0, 0.2)


def config(rate_pps: float, rtt_s: float, buffer_bdp: float, competitor: str | None = None, shapes=True) -> dict:
    """The agent's rate sender (starting at half the link) at `rate_pps` 1500-byte packets a
    second, base RTT `rtt_s` (the competitor's too), a drop-tail buffer of `buffer_bdp` BDPs,
    alone or beside `competitor`."""
    alone = competitor is None
    kw = scenarios.cc_rate(rate_bps=rate_pps * PKT_BITS, tcp=("rate",) if alone else ("rate", competitor),
                           rtt_s=rtt_s if alone else (rtt_s, rtt_s), buffer_bdp=buffer_bdp)
    return {**kw, **SHAPES} if shapes else kw


def _shapes() -> dict:
    """One queue ring and one delay line for every configuration (they batch together)."""
    kws = [config(r, t, max(BUFFERS_BDP), c, shapes=False) for r in (*TEST_RATES_PPS, 200.0)
           for t in (*TRAIN_RTTS_S, 0.1) for c in (None, "cubic")]
    return {"queue_capacity_pkts": max(int(kw["buffer_per_class_pkts"]) for kw in kws),
            "delay_line_ticks": max(int(make_params(**kw).delay_line_ticks) for kw in kws)}


SHAPES = _shapes()


def label(rate_pps: float, rtt_s: float, buffer_bdp: float, competitor: str | None = None) -> str:
    return (f"{rate_pps:g}pps rtt={rtt_s * 1e3:g}ms B={buffer_bdp:g}BDP "
            + ("alone" if competitor is None else f"vs {competitor}"))


def _cells(pairs, competitor=None) -> dict:
    return {label(r, t, b, competitor): config(r, t, b, competitor) for r, t in pairs for b in BUFFERS_BDP}


def delay_target(args, carry, obs, state, first, ep):
    """a = clip(k (1.1 - r), -10, 10), k = the carry (the variant's gain), r the last interval's
    sRTT over min RTT (1 before the first sample)."""
    r = obs[RATIO_COL]
    return carry, jnp.clip(carry * (1.1 - r), -AURORA_ACTION_MAX, AURORA_ACTION_MAX).reshape((1,))


def hold(args, carry, obs, state, first, ep):
    """Action 0: the rate sender holds the rate it started at (half the link)."""
    return carry, jnp.zeros((1,), jnp.float32)


def baselines() -> list:
    return ([Baseline(t, t, agent_tcp(t)) for t in ("cubic", "newreno", "bbr")]
            + [Baseline("rate-hold", "rate-hold", {}, hold, jnp.zeros((), jnp.float32))]
            + [Baseline(f"delay-target-k{k:g}", "delay-target", {}, delay_target, jnp.asarray(k, jnp.float32))
               for k in DELAY_TARGET_GAINS])


STUDY = Study(
    name="aurora", title="Aurora (a rate sender's agent) on Aurora's links against CUBIC, NewReno, BBR, a held rate "
                         "and a tuned delay rule",
    formulation=AURORA, step_s=AURORA_INTERVAL_S, episode_s=EPISODE_S,
    # mlp: tried first (exploration noise 1 in a, the rate x 1.025 per unit); mlp-g95: quieter (0.37) and a
    # shorter horizon (gamma 0.95: about 20 intervals, a round trip or two, where a loss shows)
    recipes={"mlp": PPO_RECIPE, "mlp-g95": dict(PPO_RECIPE, init_log_std=-1.0, gamma=0.95)},
    train_configs=lambda: list(_cells([(TRAIN_RATE_PPS, t) for t in TRAIN_RTTS_S]).values()),
    selection_configs=lambda: _cells([BESIDE]),
    test_configs=lambda: {**_cells(TEST_ALONE), **_cells([BESIDE], "cubic")},
    baselines=baselines,
    seeds=Seeds(train=range(0, 1000), selection=SELECTION_SEEDS, test=TEST_SEEDS),
    eval_s=EVAL_S, warmup_s=WARMUP_S,
    metrics={"agent_share": True, "competitor_share": True, "agent_loss": False, "agent_queueing_delay": False,
             "util_wire": True},
    step_record=record_step, record_metrics=interval_metrics,
    ns3="rlbm_jax.study.ns3_sender:judge", ns3_markdown="rlbm_jax.study.ns3_sender:markdown")
