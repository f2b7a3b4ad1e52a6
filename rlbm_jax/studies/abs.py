"""ABS (ABSRL, `ABS-trace-v0`) on the paper's Env 2 with a capacity trace, as a study of the
kit: the traces, training mix, seeds and buffer-sizing baselines of `rlbm_jax.abs.study`.

    selection   the first two training traces with both TCPs, SELECTION_SEEDS
    test        the held-out traces (wifi-s100, wifi-s101, the shipped wifi and step) with both
                TCPs, TEST_SEEDS; a run of seed s starts its trace at 10 s x (s mod 6)
    baselines   fixed sizes, the BDP rules, Cocoa, RED and CoDel (one variant per family chosen)
                ABSSL, the paper's supervised standing-queue predictor, trained in place
                (Eq. 10's ground truth) on every training trace and TCP at every other
                start offset, with training seeds ABSSL_SEEDS, before each stage runs it
The reward is the formulation's QoE; PPO sees it / 100.  Judging inside ns-3 (`study.py abs
ns3`) is `scripts/abs.py ns3` on the chosen run with the chosen variants ns-3 runs.
"""
import time

import jax.numpy as jnp

from rlbm_jax.abs import study as S
from rlbm_jax.env.formulations.abs import ABS_TRACE
from rlbm_jax.study import Baseline, Seeds, Study

SELECTION_TRACES = S.TRAIN_TRACES[:2]


def _configs(traces) -> dict:
    return {f"{t} {c}": S.config_kw(t, c) for c in S.TRAIN_TCPS for t in traces}


def _run_kw(label: str, config: dict, seed: int) -> dict:
    """The run of `seed` starts its trace at `study.offset_of(seed)`."""
    trace, tcp = label.split(" ")
    return S.run_kw(trace, tcp, seed, warmup_s=config["warmup_s"])


ABSSL_SEEDS = (0, 1, 2)  # training seeds (the committed agent's own)
ABSSL_ROUNDS = 4


def _abssl_fit(seeds) -> tuple:
    """ABSSL's predictor trained in place: (actor args, the record of its rounds)."""
    t0 = time.perf_counter()
    configs = [S.config_kw(t, c, o) for c in S.TRAIN_TCPS for t in S.TRAIN_TRACES for o in S.TRAIN_OFFSETS_S[::2]]
    params, hist = S.train_abssl(configs, seeds, rounds=ABSSL_ROUNDS)
    return {"abssl": params}, {"seeds": list(seeds), "rounds": hist, "runs_per_round": len(configs) * len(seeds),
                              "wall_s": round(time.perf_counter() - t0, 1)}


def baselines() -> list:
    return [Baseline(name, S.family_of(name), ov, S.baseline_actor(fn), c0)
            for name, (ov, fn, c0) in S.baselines().items()] + [
        Baseline("abssl", "abssl", {}, S.abssl_actor(), jnp.asarray(S.ABSSL_START_PKTS, jnp.float32),
                 fit=_abssl_fit, fit_seeds=ABSSL_SEEDS)]


STUDY = Study(
    name="abs", title="ABSRL against the buffer-sizing baselines (Env 2, capacity traces)", formulation=ABS_TRACE,
    step_s=S.STEP_S, episode_s=S.EPISODE_S, recipes={"lstm": dict(S.PPO_RECIPE, num_envs=64)},
    train_configs=S.train_configs, selection_configs=lambda: _configs(SELECTION_TRACES),
    test_configs=lambda: _configs(S.TEST_TRACES), baselines=baselines,
    seeds=Seeds(train=range(0, 1000), selection=S.SELECTION_SEEDS, test=S.TEST_SEEDS),
    eval_s=S.EVAL_S, warmup_s=S.EVAL_WARMUP_S, reward_scale=S.REWARD_SCALE,
    metrics={"util_wire": True, "delay_s": False, "throughput_mbps": True, "size_mean_pkts": False},
    legacy_runs={"results/abs": "lstm"},  # trained by scripts/abs.py (32 envs)
    run_kw=_run_kw, ns3="rlbm_jax.cli.abs:study_ns3", ns3_markdown="rlbm_jax.abs.ns3:markdown", step_record=S.record_step)
