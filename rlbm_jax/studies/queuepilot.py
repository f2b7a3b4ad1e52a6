"""QueuePilot (an RL ECN-marking AQM, `QueuePilot-v0`) at 1/10 scale, as a study of the kit:
the scaling, training mix, test grid, seeds and classic AQMs of `rlbm_jax.queuepilot.study`.

    selection   every configuration of the training mix (N x RTT x TCP), SELECTION_SEEDS
    test        the test grid (N = 30 and RTT 100 ms outside the training range), TEST_SEEDS
    baselines   droptail, ARED (r = 0.1, 0.2, 0.3), PIE, CoDel and FQ-CoDel, two settings each;
                one variant per algorithm chosen
Judging inside ns-3 (`study.py queuepilot ns3`) is `scripts/queuepilot.py ns3` on the chosen run with
the chosen variants.
"""
from rlbm_jax.env.formulations.queuepilot import QUEUEPILOT
from rlbm_jax.env.params import host_params
from rlbm_jax.queuepilot import study as qp
from rlbm_jax.study import Baseline, Seeds, Study


def _label(n, r, t) -> str:
    return f"N={n} rtt={r * 1e3:g}ms {t}"


def _variant(name):
    def overrides(config: dict) -> dict:
        return qp.baseline_variants(int(host_params(**config).buffer_pkts))[name]
    return overrides


def baselines() -> list:
    return [Baseline(v, qp.algorithm_of(v), _variant(v)) for v in qp.baseline_variants(100)]


STUDY = Study(
    name="queuepilot", title="QueuePilot at 1/10 scale against the classic AQMs", formulation=QUEUEPILOT,
    step_s=qp.STEP_S, episode_s=qp.EPISODE_S,
    recipes={"lstm": dict(qp.PPO_RECIPE, num_envs=64),
             "lstm-paper-lr": dict(qp.PPO_RECIPE, num_envs=64, lr=1e-4)},  # the paper's learning rate
    train_configs=qp.train_configs,
    selection_configs=lambda: {_label(n, r, t): qp.config_kw(n, r, t) for t in qp.TRAIN_TCPS for n in qp.TRAIN_FLOWS
                               for r in qp.TRAIN_RTTS_S},
    test_configs=lambda: {_label(n, r, t): qp.config_kw(n, r, t) for t in ("cubic", "newreno")
                          for n in qp.TEST_FLOWS for r in qp.TEST_RTTS_S},
    baselines=baselines,
    seeds=Seeds(train=range(0, 1000), selection=qp.SELECTION_SEEDS, test=qp.TEST_SEEDS),
    eval_s=qp.EVAL_S, warmup_s=qp.EVAL_WARMUP_S,
    metrics={"util_wire": True, "drop_rate": False, "queue_mean_pkts": False, "drop_steps": False},
    legacy_runs={"results/queuepilot": "lstm"},  # trained by scripts/queuepilot.py (2048 envs x 64 steps)
    ns3="rlbm_jax.cli.queuepilot:study_ns3", ns3_markdown="rlbm_jax.queuepilot.ns3:markdown", step_record=qp.record_step)
