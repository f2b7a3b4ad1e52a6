"""One export for every study: each training seed's trained network as a deployable policy
(`policy_seed<s>/`, the format of `rlbm_jax.policy`) and an ONNX graph
(`policy_seed<s>.onnx`), each checked against the trained JAX network before it counts.

The check steps the JAX network (PPO's own apply, observation normalisation included) and
the ONNX graph through the same sequences of observations, the recurrent state carried and
reset halfway: the largest difference of logits and state, and the fraction of equal
actions (a Gaussian MLP: the deterministic actions, the graph's clipped to the action space
as the env clips it).  A policy that disagrees (beyond `tol`, or in any action) fails the
export.
"""
from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

CHECK_STEPS, CHECK_BATCH = 40, 8  # carried-state sequences, reset halfway


def policy_paths(run: Path, seed: int) -> tuple[Path, Path]:
    """(policy dir, ONNX file) of training seed `seed` of the run."""
    run = Path(run)
    return run / f"policy_seed{seed}", run / f"policy_seed{seed}.onnx"


def export_plan(run: Path, trained: dict, formulation) -> dict:
    """What an export of the training run in `run` (its config.json: `trained`) writes: the
    run, its PPO config and training seeds, the formulation, and per seed the policy
    directory and ONNX file."""
    run = Path(run)
    return {"run_dir": str(run), "ppo": trained["ppo"], "episode_s": trained["episode_s"],
            "training_seeds": list(trained["seeds"]), "formulation": formulation.id,
            "outputs": {str(s): [str(p) for p in policy_paths(run, s)] for s in trained["seeds"]}}


def _probe_obs(mean, std, t: int, rng) -> np.ndarray:
    """CHECK_BATCH observations around the training statistics (every fifth step 3x wider)."""
    obs = (mean + std * rng.normal(size=(CHECK_BATCH, mean.shape[-1])) * (1 + 2 * (t % 5 == 4))).astype(np.float32)
    return np.maximum(obs, 0.0)


def check_mlp_against_network(ppo, params, obs_stats, onnx_fn, rng, tol: float) -> dict:
    """A Gaussian MLP on a Box action: max |onnx - jax| of the deterministic action over
    CHECK_STEPS batches of observations, the ONNX action clipped to the env's action space as
    the trainer's adapter and the env clip it (action map "none": the graph gives the mean),
    and the fraction of actions within `tol`."""
    mean = np.asarray(obs_stats.mean, np.float32)
    std = np.sqrt(np.asarray(obs_stats.var, np.float32) + 1e-8)
    act = jax.jit(lambda o: ppo.act_deterministic(params, obs_stats, o)[1])
    low, high = np.asarray(ppo.adapter.low, np.float32), np.asarray(ppo.adapter.high, np.float32)
    err, agree = 0.0, []
    for t in range(CHECK_STEPS):
        obs = _probe_obs(mean, std, t, rng)
        a_jax = np.asarray(act(jnp.asarray(obs)), np.float32).reshape(CHECK_BATCH, -1)
        a_onnx = np.clip(np.asarray(onnx_fn(obs), np.float32).reshape(CHECK_BATCH, -1), low.reshape(-1),
                         high.reshape(-1))
        d = np.abs(a_jax - a_onnx)
        err = max(err, float(d.max()))
        agree.append(np.all(d <= tol, axis=-1))
    return {"max_abs_err": err, "action_agreement": float(np.mean(agree)), "steps": CHECK_STEPS,
            "batch": CHECK_BATCH}


def check_against_network(ppo, params, obs_stats, onnx_fn, rng) -> dict:
    """max |onnx - jax| of logits, h and c over CHECK_BATCH sequences of CHECK_STEPS
    observations (around the training statistics, some far outside them), and the fraction
    of equal actions (ties within rounding count as equal)."""
    from rlbm_jax.ppo import networks

    mean = np.asarray(obs_stats.mean, np.float32)
    std = np.sqrt(np.asarray(obs_stats.var, np.float32) + 1e-8)

    @jax.jit
    def step(carry, obs, first):
        carry, logits, _ = ppo.net.apply(params, carry, ppo.normalize(obs_stats, obs)[None], first[None])
        return carry, logits.reshape(obs.shape[0], -1)

    carry = networks.initial_carry(CHECK_BATCH, ppo.cfg.lstm_size)
    h, c = onnx_fn.initial_state(CHECK_BATCH)
    err, agree, actions = 0.0, [], set()
    for t in range(CHECK_STEPS):
        first = np.full((CHECK_BATCH,), t in (0, CHECK_STEPS // 2))
        if first[0]:
            h, c = onnx_fn.initial_state(CHECK_BATCH)
        obs = _probe_obs(mean, std, t, rng)
        carry, logits = step(carry, jnp.asarray(obs), jnp.asarray(first))
        action, h, c, logits_o = onnx_fn(obs, h, c)
        logits = np.asarray(logits)
        c_jax, h_jax = (np.asarray(x) for x in carry)  # flax's carry is (c, h)
        err = max(err, *(float(np.max(np.abs(a - b))) for a, b in ((logits, logits_o), (h_jax, h), (c_jax, c))))
        agree.append(np.take_along_axis(logits, action[:, None], -1)[:, 0] >= logits.max(-1) - 1e-5)
        actions.update(int(x) for x in action)
    return {"max_abs_err": err, "action_agreement": float(np.mean(agree)), "steps": CHECK_STEPS,
            "batch": CHECK_BATCH, "actions_seen": sorted(actions)}


def export_seeds(ppo, params, obs_stats, seeds, run: Path, *, formulation, interval_s: float, env_info: dict,
                 tol: float = 1e-5, log=print) -> list[dict]:
    """Write and check the policy of every training seed (params and obs_stats [seeds]) of a
    recurrent PPO run on a Discrete action space, or of a Gaussian MLP on a Box action space.
    Returns one record per seed: the files, the check's numbers and `ok`; `log` gets a line
    per seed.  A ValueError where a policy cannot be written or read back (naming the seed)."""
    from rlbm_jax.onnx_policy import load_checked, to_onnx
    from rlbm_jax.ppo.export import export_policy

    info = {"name": formulation.id, "reward": formulation.reward.name,
            "obs": f"{formulation.id} observation [{len(formulation.obs_layout(1))}]",
            "action": formulation.action.text, "ppo": ppo.cfg.to_dict(), **env_info}
    rng = np.random.default_rng(0)
    out = []
    for j, s in enumerate(seeds):
        p_s = jax.tree.map(lambda x: x[j], params)
        st_s = jax.tree.map(lambda x: x[j], obs_stats)
        pdir, onnx_path = policy_paths(run, s)
        try:
            export_policy(ppo, p_s, st_s, pdir, {**info, "training_seed": int(s)})
            to_onnx(pdir, onnx_path, agent_interval_s=interval_s)
            fn, meta = load_checked(onnx_path, num_classes=1, agent_interval_s=interval_s, formulation=formulation.id)
        except ValueError as e:
            raise ValueError(f"seed {s}: {e}") from None
        if ppo.cfg.network == "mlp":
            chk = check_mlp_against_network(ppo, p_s, st_s, fn, rng, tol)
            what = (f"action map {meta['action_map']}, agent interval {interval_s:.6g} s); against the trained "
                    f"network over {chk['steps']} batches of {chk['batch']} observations")
        else:
            chk = check_against_network(ppo, p_s, st_s, fn, rng)
            what = (f"{meta['num_actions']} actions {meta['action_values']}, agent interval {interval_s:.6g} s); "
                    f"against the trained network over {chk['steps']} steps x {chk['batch']} carried-state sequences")
        ok = chk["max_abs_err"] <= tol and chk["action_agreement"] == 1.0
        log(f"seed {s}: wrote {pdir}/ and {onnx_path} ({what}: max |onnx - jax| {chk['max_abs_err']:.2e}, actions "
            f"equal {chk['action_agreement']:.3f}"
            + (f", actions seen {chk['actions_seen']}" if "actions_seen" in chk else "") + ("" if ok else "  MISMATCH"))
        out.append({"seed": int(s), "policy_dir": str(pdir), "onnx": str(onnx_path), **chk, "tol": tol, "ok": ok})
    return out


def export_run(prog: str, ppo, params, obs_stats, seeds, run: Path, **kw) -> int:
    """`export_seeds` as a script's `export` stage: the exit code (0; 2 where a policy cannot
    be written or read back; 1 where one disagrees with its trained network), the reason on
    stderr."""
    import sys

    try:
        recs = export_seeds(ppo, params, obs_stats, seeds, run, **kw)
    except ValueError as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return 2
    if not all(r["ok"] for r in recs):
        print(f"{prog}: error: an exported policy disagrees with the trained network", file=sys.stderr)
        return 1
    return 0
