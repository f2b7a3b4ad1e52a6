"""What every study's judging inside ns-3 shares (the lock-step driving and the scenario are
`rlbm_jax.ns3.harness`): the checks of a judging run's options and the writing of its report."""
from __future__ import annotations

import sys
import time
from pathlib import Path

from rlbm_jax.study.protocol import check_run_length


def check_judging(seeds: int, declared: int, jobs: int, seconds: float, warmup_s: float) -> None:
    """A ValueError naming the option of an ns-3 judging run that is out of range: the first
    `seeds` of the `declared` test seeds, `jobs` ns-3 processes, `seconds` per run with the
    first `warmup_s` left out."""
    if not 1 <= seeds <= declared:
        raise ValueError(f"--seeds must be in 1..{declared}, got {seeds}")
    if jobs < 1:
        raise ValueError(f"--jobs must be >= 1, got {jobs}")
    check_run_length(seconds, warmup_s)


def write_judging(out: Path, report: dict, markdown, wall: dict, t_ns3: float, t0: float) -> int:
    """Finish a judging run's report (`wall_s`: ns-3's, the other parts' in `wall`, the
    total since `t0`), write out/results.json and out/RESULTS.md (`markdown(report)`), print it."""
    from rlbm_jax import jsonio
    from rlbm_jax.progress import fmt_s

    report["wall_s"] = {"ns3": round(t_ns3, 1), **wall, "total": round(time.perf_counter() - t0, 1)}
    jsonio.write(Path(out) / "results.json", report)
    text = markdown(report)
    (Path(out) / "RESULTS.md").write_text(text)
    print(text)
    print(f"wrote {Path(out) / 'results.json'}, {Path(out) / 'RESULTS.md'} ({fmt_s(report['wall_s']['total'])})",
          file=sys.stderr)
    return 0
