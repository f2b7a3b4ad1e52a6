"""The study kit: a study is a declaration (`Study`: formulation, configurations, recipes,
baselines, seeds, metrics) and one pipeline runs every stage of every study alike
(`pipeline`: train, select, test, export, report), keeping the protocol in code
(`protocol`: seeds disjoint by role, a ledger of every stage, provenance, staleness).

    python scripts/study.py queuepilot train --num-seeds 3
    python scripts/study.py queuepilot select --runs runs/queuepilot/lstm
    python scripts/study.py queuepilot test
    python scripts/study.py queuepilot export
    python scripts/study.py queuepilot report

Declarations live in `rlbm_jax.studies` (one module each, its `STUDY`).  Parts shared by
every study's own code: `trainer` (PPO over several seeds, loading a run), `rollout` (the
batched evaluation rollout and the trained policy as an actor), `export` (ONNX with its
parity check), `stats` (paired differences, Holm's correction).
"""
from rlbm_jax.study.declare import Baseline, Study, get, names
from rlbm_jax.study.protocol import Ledger, Seeds

__all__ = ["Baseline", "Study", "Seeds", "Ledger", "get", "names"]
