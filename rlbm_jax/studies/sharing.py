"""The thesis's learned buffer manager (`RLBM-v0`: per-class thresholds of one shared buffer,
the adopted reward flows-accrued) where buffer sharing matters, as a study of the kit: the
`sharing` preset (`scenarios.sharing`: 2 long CUBIC flows in class 1 beside Poisson web search
in class 0 on a 100 Mbit/s bottleneck, one shared buffer either class may fill alone).

    training    the preset at loads 0.2 .. 0.6 and buffers of 0.5, 1 and 2 BDPs (TRAIN_LOADS x
                BUFFERS_BDP), one configuration drawn per 10 s episode, a decision per 0.1 s
    selection   loads 0.3 and 0.5 on 1 and 2 BDPs, SELECTION_SEEDS
    test        loads 0.2, 0.4 and 0.6 on 0.5, 1 and 2 BDPs, TEST_SEEDS
    baselines   25 variants (`variants`, which `scripts/sharing.py` runs on the presets before any
                training): SB naive and sophisticated, drop-tail, DT and ABM over their alphas,
                static per-class thresholds in BDPs, the hand rule busy-bdp; one variant per
                family chosen on the selection cells
A run is `scenarios.SHARING_EPISODE_S` (10 s) scored from its start, as `scripts/sharing.py`
scores the baselines (results/sharing: the adopted reward ranks them as goodput and the
operator's dominance pairs do, 0.94 agreement, and 70 of the 300 pairs are separated).
The seeds of each role were fixed with this declaration; no committed run had used them
(`scripts/sharing.py` uses 400000..).  The agent's `rl` policy and every baseline but
busy-bdp run on the native tick where it is available (`auto`).
"""
from rlbm_jax import scenarios
from rlbm_jax.env import formulations
from rlbm_jax.ppo import THESIS_PPO
from rlbm_jax.study import Baseline, Seeds, Study

FORMULATION = formulations.get("RLBM-v0")
STEP_S = 0.1
EPISODE_S = scenarios.SHARING_EPISODE_S
BUFFERS_BDP = (0.5, 1.0, 2.0)
TRAIN_LOADS = (0.2, 0.3, 0.4, 0.5, 0.6)
SELECTION_CELLS = dict(load=(0.3, 0.5), buffer_bdp=(1.0, 2.0))
TEST_CELLS = dict(load=(0.2, 0.4, 0.6), buffer_bdp=BUFFERS_BDP)
SELECTION_SEEDS = range(410_000, 410_020)
TEST_SEEDS = range(420_000, 420_030)
# the baselines' variants (`scripts/sharing.py` runs them all on the presets, before training)
FREE = 1e6  # a threshold of this many BDPs is the free buffer (static-bdp), or the whole buffer (busy-bdp)
DT_ALPHAS = (0.125, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0)
ABM_ALPHAS = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0)
# static-bdp (class 0, class 1) in BDPs; (free, free) is DT with alpha 1 and is left out
STATIC = ((FREE, 0.5), (FREE, 0.25), (FREE, 0.1), (0.5, 0.5), (0.75, 0.25), (0.5, 0.25))
BUSY = (0.5, 0.25, 0.1)  # busy-bdp: class 1's threshold in BDPs beside a busy class 0 (class 0: whole buffer)
DUPLICATES = ("static free/free: min(free, B - Q) is DT with alpha 1 (both classes admit below B - Q)",
              "busy-bdp with class 1 at the whole buffer: drop-tail (each class may fill the buffer alone)",
              "SB with equal alphas below B / 2 per class is SB-naive whatever the scale of alpha")


def bdp_text(x: float) -> str:
    return "free" if x >= FREE else f"{x:g}"


def variants() -> list:
    """(name, family, make_params overrides) of every baseline variant."""
    out = [(p, p, {"policy": p}) for p in ("sb-naive", "sb-sophisticated", "droptail")]
    out += [(f"dt-a{a:g}", "dt", {"policy": "dt", "alpha": a}) for a in DT_ALPHAS]
    out += [(f"abm-a{a:g}", "abm", {"policy": "abm", "alpha": a}) for a in ABM_ALPHAS]
    out += [(f"static {bdp_text(x)}/{bdp_text(y)}", "static", {"policy": "static-bdp", "alpha": (x, y)})
            for x, y in STATIC]
    out += [(f"busy-bdp free/{y:g}", "busy-bdp", {"policy": "busy-bdp", "alpha": (FREE, y)}) for y in BUSY]
    return out


def _ring_pkts() -> int:
    """One buffer ring for every configuration (they batch together): the largest buffer's."""
    return int(scenarios.sharing(max(BUFFERS_BDP))["buffer_pkts"])


def cell(load: float, buffer_bdp: float) -> dict:
    """The preset at `load` with a shared buffer of `buffer_bdp` BDPs, the agent's policy."""
    return scenarios.sharing(buffer_bdp, load=load, policy="rl", queue_capacity_pkts=_ring_pkts())


def _cells(loads, buffers) -> dict:
    return {f"load={ld:g} B={b:g}BDP": cell(ld, b) for b in buffers for ld in loads}


def baselines() -> list:
    return [Baseline(name, family, ov) for name, family, ov in variants()]


STUDY = Study(
    name="sharing", title="The thesis's learned buffer manager where buffer sharing matters (sharing preset)",
    formulation=FORMULATION, step_s=STEP_S, episode_s=EPISODE_S,
    recipes={"thesis": dict(THESIS_PPO)},
    train_configs=lambda: list(_cells(TRAIN_LOADS, BUFFERS_BDP).values()),
    selection_configs=lambda: _cells(SELECTION_CELLS["load"], SELECTION_CELLS["buffer_bdp"]),
    test_configs=lambda: _cells(TEST_CELLS["load"], TEST_CELLS["buffer_bdp"]),
    baselines=baselines,
    seeds=Seeds(train=range(0, 1000), selection=SELECTION_SEEDS, test=TEST_SEEDS),
    eval_s=EPISODE_S, warmup_s=0.0,
    metrics={"goodput_bps": True, "slowdown_p99": False, "queue_p99_pkts": False, "drop_rate": False,
             "rto_count": False})
