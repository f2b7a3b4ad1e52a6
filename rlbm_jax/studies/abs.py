"""ABS (ABSRL, `ABS-trace-v0`) on the paper's Env 2 with a capacity trace, as a study of the
kit: the traces, training mix, seeds and buffer-sizing baselines of `rlbm_jax.abs.study`.

    selection   the first two training traces with both TCPs, SELECTION_SEEDS
    test        the held-out traces (wifi-s100, wifi-s101, the shipped wifi and step) with both
                TCPs, TEST_SEEDS; a run of seed s starts its trace at 10 s x (s mod 6)
    baselines   fixed sizes, the BDP rules, Cocoa, RED and CoDel (one variant per family chosen)
The reward is the formulation's QoE; PPO sees it / 100.  ABSSL (the paper's supervised
predictor, trained in place on the training traces) runs in `scripts/abs.py evaluate` only:
it is not a declared baseline here.  Judging inside ns-3 (`study.py abs ns3`) is
`scripts/abs.py ns3` on the chosen run with the chosen variants ns-3 runs.
"""
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


def baselines() -> list:
    return [Baseline(name, S.family_of(name), ov, S.baseline_actor(fn), c0)
            for name, (ov, fn, c0) in S.baselines().items()]


STUDY = Study(
    name="abs", title="ABSRL against the buffer-sizing baselines (Env 2, capacity traces)", formulation=ABS_TRACE,
    step_s=S.STEP_S, episode_s=S.EPISODE_S, recipes={"lstm": dict(S.PPO_RECIPE, num_envs=64)},
    train_configs=S.train_configs, selection_configs=lambda: _configs(SELECTION_TRACES),
    test_configs=lambda: _configs(S.TEST_TRACES), baselines=baselines,
    seeds=Seeds(train=range(0, 1000), selection=S.SELECTION_SEEDS, test=S.TEST_SEEDS),
    eval_s=S.EVAL_S, warmup_s=S.EVAL_WARMUP_S, reward_scale=S.REWARD_SCALE,
    metrics={"util_wire": True, "delay_s": False, "throughput_mbps": True, "size_mean_pkts": False},
    legacy_runs={"results/abs": "lstm"},  # trained by scripts/abs.py (32 envs)
    run_kw=_run_kw, ns3="rlbm_jax.cli.abs:study_ns3", step_record=S.record_step)
