"""Export a trained policy to ONNX (deterministic action, observation normalisation in
the graph, dynamic batch; observation layout, action mapping and env in the metadata).
A recurrent (lstm) policy becomes a one-step graph (obs, h_in, c_in) -> (action index,
h_out, c_out, logits) whose state the caller carries.

    python scripts/export_onnx.py --checkpoint runs/default --out policy.onnx

--checkpoint takes a training run directory (its `policy/`, the best seed, is exported;
`--seed I` picks `policy_seed<I>/`) or a policy directory itself.  The exported model is
checked against the JAX policy on random observations before the command returns (a
recurrent one over a sequence of steps with its state carried and reset halfway).
Needs the `export` extra: pip install -e '.[export]'.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

from rlbm_jax import jsonio
from rlbm_jax.cli import fail, parser, printed_config

PROG = "export_onnx.py"
# what run_config reports of the exported policy's policy.json
POLICY_FIELDS = ("network", "formulation", "num_classes", "obs_dim", "act_dim", "action_map")


def policy_dir(run: Path, seed: int | None) -> Path:
    if seed is not None:
        return run / f"policy_seed{seed}"
    return run if (run / "policy.json").is_file() else run / "policy"


def build_parser():
    ap = parser(__doc__, PROG)
    ap.add_argument("--checkpoint", required=True, help="training run directory, or a policy directory")
    ap.add_argument("--out", required=True, help="the .onnx file to write")
    ap.add_argument("--seed", type=int, default=None, help="export policy_seed<SEED>/ of the run")
    ap.add_argument("--flows-scale", type=float, default=10.0,
                    help="the env's flows_scale (the thesis observation's flows finished / this)")
    return ap


def run_config(a) -> dict:
    """What this command exports (`--print-config` prints it; the export prints it beside
    the model it wrote): the policy directory that --checkpoint and --seed name and what its
    policy.json declares (network, formulation, shapes, the agent interval the graph
    records), the output file and the flows scale."""
    src = policy_dir(Path(a.checkpoint), a.seed)
    if not (src / "policy.json").is_file():
        raise ValueError(f"{a.checkpoint}: no policy found (looked for {src}/policy.json)")
    meta = {"network": "mlp", **json.loads((src / "policy.json").read_text())}  # as `policy.read_policy` reads it
    scenario = (meta.get("env") or {}).get("scenario", {})
    return {"checkpoint": a.checkpoint, "seed": a.seed, "policy_dir": str(src), "out": a.out,
            "flows_scale": a.flows_scale, "agent_interval_s": float(scenario.get("agent_interval_s", 0.1)),
            "policy": {k: meta.get(k) for k in POLICY_FIELDS}}


def main(argv=None) -> int:
    a = build_parser().parse_args(argv)
    try:
        cfg = run_config(a)
    except ValueError as e:
        return fail(PROG, str(e))
    if printed_config(a, cfg):
        return 0
    from rlbm_jax.onnx_policy import load_checked, to_onnx
    from rlbm_jax.policy import load_policy

    src = Path(cfg["policy_dir"])
    try:
        out = to_onnx(src, cfg["out"], agent_interval_s=cfg["agent_interval_s"], flows_scale=cfg["flows_scale"])
    except ValueError as e:
        return fail(PROG, str(e))
    print(f"config: {jsonio.dumps(cfg)}")
    fn_onnx, meta = load_checked(out)
    rng = np.random.default_rng(0)
    if meta["network"] == "lstm":
        err, agree = check_recurrent(src, fn_onnx, meta, rng)
        print(f"wrote {out}: (obs [batch, {meta['obs_dim']}], h_in, c_in [batch, {meta['lstm_size']}]) -> "
              f"(action index of {meta['num_actions']}, h_out, c_out, logits); over {SEQ_STEPS} steps of "
              f"{SEQ_BATCH} random sequences max |onnx - jax| of logits and state {err:.2e}, "
              f"argmax agreement {agree:.3f}")
        bad = err > 1e-5 or agree < 1.0
    else:
        fn_jax, _ = load_policy(src, obs_layout=meta["obs_layout"])
        obs = rng.normal(size=(256, meta["obs_dim"])).astype(np.float32)
        err = float(np.max(np.abs(np.asarray(fn_jax(obs)) - fn_onnx(obs))))
        print(f"wrote {out}: obs [batch, {meta['obs_dim']}] -> action [batch, {meta['act_dim']}] "
              f"({meta['action_map']}); max |onnx - jax| on 256 random observations {err:.2e}")
        bad = err > 1e-5
    if bad:
        print("error: the exported model disagrees with the JAX policy", file=sys.stderr)
        return 1
    return 0


SEQ_STEPS, SEQ_BATCH = 32, 8


def check_recurrent(src, fn_onnx, meta, rng):
    """(max |onnx - jax| over logits, h and c; fraction of equal actions) of the exported
    recurrent policy against the policy directory's, stepping both through random
    sequences with the state carried, reset to zero halfway."""
    import jax

    from rlbm_jax.policy import load_recurrent_policy

    policy, _ = load_recurrent_policy(src, obs_layout=meta["obs_layout"])
    step = jax.jit(policy.logits)
    h, c = policy.initial_state(SEQ_BATCH)
    ho, co = fn_onnx.initial_state(SEQ_BATCH)
    err, agree = 0.0, []
    for t in range(SEQ_STEPS):
        if t == SEQ_STEPS // 2:
            h, c = policy.initial_state(SEQ_BATCH)
            ho, co = fn_onnx.initial_state(SEQ_BATCH)
        obs = rng.normal(size=(SEQ_BATCH, meta["obs_dim"])).astype(np.float32)
        logits, h, c = step(obs, h, c)
        action, ho, co, logits_o = fn_onnx(obs, ho, co)
        err = max(err, *(float(np.max(np.abs(np.asarray(a) - b))) for a, b in ((logits, logits_o), (h, ho), (c, co))))
        logits = np.asarray(logits)  # the ONNX choice is the JAX one, up to a tie within rounding
        agree.append(np.take_along_axis(logits, action[:, None], -1)[:, 0] >= logits.max(-1) - 1e-5)
    return err, float(np.mean(agree))

if __name__ == "__main__":
    sys.exit(main())
