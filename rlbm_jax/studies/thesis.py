"""The thesis's learned buffer manager (per-class thresholds of a shared buffer, `RLBM-v0`: the
thesis's observation and action with the adopted reward, flows-accrued) against the
buffer-sharing policies, as a study of the kit.

    training    the thesis's randomised scenario: every episode draws its per-class buffer N,
                load and TCP (`scenarios.THESIS_RANDOM`), 60 s episodes, a decision per 0.1 s
    selection   12 cells of the thesis grid (both TCPs, N 100 and 1000, load 0.2, 0.5, 0.8),
                SELECTION_SEEDS
    test        the whole thesis grid (2 TCPs x N 100, 500, 1000 x load 0.1 .. 0.8), TEST_SEEDS
    baselines   SB naive and sophisticated, drop-tail, DT and ABM with their alpha tuned on the
                selection cells (one variant per family chosen)
A run is 60 s scored from its start, as the thesis scores it (flows arrive in the first 45 s).
The seeds of each role were fixed with this declaration and no committed run had used them
(`scripts/evaluate.py` defaults to 100000.., `reward_analysis` to 200000.., the untouched-seed
verdict of `results/thesis_untouched` used 900000..900019).
"""
from rlbm_jax import scenarios
from rlbm_jax.env import formulations
from rlbm_jax.env.randomize import thesis_randomized_env
from rlbm_jax.ppo import THESIS_PPO
from rlbm_jax.study import Baseline, Seeds, Study

FORMULATION = formulations.get("RLBM-v0")
STEP_S = 0.1
EPISODE_S = scenarios.THESIS_EPISODE_S
GRID = scenarios.THESIS_GRID
RING_PKTS = max(GRID["buffer_per_class_pkts"])  # one ring shape for every cell
SELECTION_CELLS = dict(tcp=GRID["tcp"], buffer_per_class_pkts=(100, 1000), load=(0.2, 0.5, 0.8))
SELECTION_SEEDS = range(300_000, 300_100)
TEST_SEEDS = range(910_000, 910_100)
DT_ALPHAS = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0)
ABM_ALPHAS = (0.5, 1.0, 2.0, 4.0, 8.0)


def cell(tcp: str, n: int, load: float) -> dict:
    return scenarios.thesis_cell(tcp, n, load, policy="rl", queue_capacity_pkts=RING_PKTS)


def _cells(grid: dict) -> dict:
    return {f"{t} N={n} load={ld:g}": cell(t, n, ld) for t, n, ld in scenarios.thesis_grid(**grid)}


def train_env(episode_s: float):
    """The thesis's randomised training env (`randomize.thesis_randomized_env`) on FORMULATION."""
    return thesis_randomized_env(episode_s=episode_s, agent_interval_s=STEP_S, formulation=FORMULATION)


def baselines() -> list:
    out = [Baseline(p, p, {"policy": p}) for p in ("sb-naive", "sb-sophisticated", "droptail")]
    out += [Baseline(f"dt-a{a:g}", "dt", {"policy": "dt", "alpha": a}) for a in DT_ALPHAS]
    out += [Baseline(f"abm-a{a:g}", "abm", {"policy": "abm", "alpha": a}) for a in ABM_ALPHAS]
    return out


STUDY = Study(
    name="thesis", title="The thesis's learned buffer manager against the buffer-sharing policies",
    formulation=FORMULATION, step_s=STEP_S, episode_s=EPISODE_S,
    recipes={"thesis": dict(THESIS_PPO)},
    train_configs=lambda: list(_cells(GRID).values()),
    train_env=train_env, train_draws=dict(scenarios.THESIS_RANDOM),
    selection_configs=lambda: _cells(SELECTION_CELLS), test_configs=lambda: _cells(GRID),
    baselines=baselines,
    seeds=Seeds(train=range(0, 1000), selection=SELECTION_SEEDS, test=TEST_SEEDS),
    eval_s=EPISODE_S, warmup_s=0.0,
    metrics={"goodput_bps": True, "slowdown_p99": False, "queue_p99_pkts": False, "drop_rate": False,
             "rto_count": False})
