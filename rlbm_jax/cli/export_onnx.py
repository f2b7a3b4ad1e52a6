"""Export a trained policy to ONNX (deterministic action, observation normalisation in
the graph, dynamic batch; observation layout, action mapping and env in the metadata).

    python scripts/export_onnx.py --checkpoint runs/default --out policy.onnx

--checkpoint takes a training run directory (its `policy/`, the best seed, is exported;
`--seed I` picks `policy_seed<I>/`) or a policy directory itself.  The exported model is
checked against the JAX policy on random observations before the command returns.
Needs the `export` extra: pip install -e '.[export]'.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from rlbm_jax.cli import fail, parser

PROG = "export_onnx.py"


def policy_dir(run: Path, seed: int | None) -> Path:
    if seed is not None:
        return run / f"policy_seed{seed}"
    return run if (run / "policy.json").is_file() else run / "policy"


def main(argv=None) -> int:
    ap = parser(__doc__, PROG)
    ap.add_argument("--checkpoint", required=True, help="training run directory, or a policy directory")
    ap.add_argument("--out", required=True, help="the .onnx file to write")
    ap.add_argument("--seed", type=int, default=None, help="export policy_seed<SEED>/ of the run")
    ap.add_argument("--flows-scale", type=float, default=10.0,
                    help="the env's flows_scale (the thesis observation's flows finished / this)")
    a = ap.parse_args(argv)
    src = policy_dir(Path(a.checkpoint), a.seed)
    if not (src / "policy.json").is_file():
        ap.error(f"{a.checkpoint}: no policy found (looked for {src}/policy.json)")
    from rlbm_jax.onnx_policy import load_checked, to_onnx
    from rlbm_jax.policy import load_policy

    try:
        out = to_onnx(src, a.out, flows_scale=a.flows_scale)
    except ValueError as e:
        return fail(PROG, str(e))
    fn_onnx, meta = load_checked(out)
    fn_jax, _ = load_policy(src, obs_layout=meta["obs_layout"])
    obs = np.random.default_rng(0).normal(size=(256, meta["obs_dim"])).astype(np.float32)
    err = float(np.max(np.abs(np.asarray(fn_jax(obs)) - fn_onnx(obs))))
    print(f"wrote {out}: obs [batch, {meta['obs_dim']}] -> action [batch, {meta['act_dim']}] "
          f"({meta['action_map']}); max |onnx - jax| on 256 random observations {err:.2e}")
    if err > 1e-5:
        print("error: the exported model disagrees with the JAX policy", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
