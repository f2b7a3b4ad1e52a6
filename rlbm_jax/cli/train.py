"""Train a buffer-management policy with PPO on the thesis scenario, with domain
randomisation: every episode draws its per-class buffer N (100..1000 packets), load
(0.1..0.9) and TCP (CUBIC or NewReno).  --env picks the formulation (observation,
action, reward; `rlbm_jax.list_envs()`), --reward swaps its reward for a named one.
The default reproduces the committed run (results/train_default): the thesis
formulation, with the policy picking each class's threshold in BDPs (`--action-map bdp`)
from 4 BDPs for class 0 and 0.5 BDP for class 1 (`rlbm_jax.ppo.THESIS_PPO`).

    python scripts/train.py                          # defaults: 256 envs, about 70 s on 2 cores
    python scripts/train.py --num-envs 4096          # on an accelerator
    python scripts/train.py --env RLBM-v0            # the default reward (results/reward_analysis)
    python scripts/train.py --num-seeds 4            # 4 independent seeds in one vmapped call
    python scripts/train.py --run-dir runs/x --resume
    python scripts/train.py --run-dir runs/x --overwrite   # replace the run runs/x holds

The run directory gets config.json, metrics.csv (one row per seed and update),
curves.png, orbax checkpoints every --checkpoint-every updates, and one deployable
policy per seed (policy_seed<i>/) plus policy/ = the seed with the best final reward.
The progress bar moves every update with env steps/s and the ETA; on a machine without
an accelerator a run whose estimate exceeds --warn-after-min minutes says so.  Before
anything is compiled, the memory one update needs is estimated (`rlbm_jax.ppo.memory`):
a run that needs more than the device has is refused, one that needs more than half of
it is noted.
`python scripts/evaluate.py --policy RUN/policy` scores the policy against the baselines.
"""
from __future__ import annotations

import csv
import json
import shutil
import sys
import time
from pathlib import Path

import jax
import numpy as np

from rlbm_jax import jsonio, scenarios
from rlbm_jax.cli import (add_backend_arg, add_model_args, add_overwrite_arg, apply_backend, fail,
                          flag_of, held_run, model_kw, name_flags, parser, printed_config, refuse_held_run)
from rlbm_jax.devices import single_process_only
from rlbm_jax.env import formulations
from rlbm_jax.env.params import TCP_NAMES, recorded_tcp_model
from rlbm_jax.env.randomize import BUFFER_DISTS, thesis_randomized_env
from rlbm_jax.ppo import PPO, THESIS_PPO, PPOConfig, memory
from rlbm_jax.ppo.checkpoint import Checkpointer
from rlbm_jax.ppo.export import export_policy
from rlbm_jax.progress import Progress, fmt_s
from rlbm_jax.study.trainer import plot_curves, write_rows

PROG = "train.py"
TRAIN_ENV = "RLBM-thesis-v0"  # the committed default run's formulation


def build_parser():
    d = PPOConfig(**THESIS_PPO)
    rnd = scenarios.THESIS_RANDOM
    ap = parser(__doc__, PROG)
    ap.add_argument("--run-dir", default="runs/default", help="output directory")
    ap.add_argument("--resume", action="store_true", help="continue the run in --run-dir from its last checkpoint")
    add_overwrite_arg(ap)
    ap.add_argument("--seed", type=int, default=0, help="training seed (seeds of --num-seeds follow from it)")
    ap.add_argument("--num-seeds", type=int, default=1, help="independent training seeds, vmapped")
    ap.add_argument("--checkpoint-every", type=int, default=10, help="updates between checkpoints")
    ap.add_argument("--stop-after", type=int, default=None,
                    help="stop (checkpointed) once this many updates are done; continue later with --resume")
    ap.add_argument("--warn-after-min", type=float, default=30.0,
                    help="without an accelerator, warn when the run's estimate is longer than this (minutes)")
    ap.add_argument("--no-progress", action="store_true",
                    help="no progress bar (nor the warning above): the compiled chunk then holds no callback "
                         "to the host, so JAX's persistent compilation cache can keep it for the next run")
    g = ap.add_argument_group("env")
    g.add_argument("--env", default=TRAIN_ENV, choices=formulations.ids(), help="formulation (env id)")
    g.add_argument("--reward", default=None, choices=list(formulations.REWARDS),
                   help="replace the formulation's reward (results/reward_analysis compares them)")
    g.add_argument("--buffer-pkts", type=int, nargs=2, default=list(rnd["buffer_pkts"]), metavar=("LO", "HI"),
                   help="per-class buffer N range")
    g.add_argument("--buffer-dist", default=rnd["buffer_dist"], choices=BUFFER_DISTS,
                   help="how an episode draws N in the --buffer-pkts range")
    g.add_argument("--load", type=float, nargs=2, default=list(rnd["load"]), metavar=("LO", "HI"),
                   help="load range")
    g.add_argument("--tcp", nargs="+", default=list(rnd["tcp"]), choices=TCP_NAMES, help="TCPs drawn from")
    g.add_argument("--episode-s", type=float, default=scenarios.THESIS_EPISODE_S, help="episode length (s)")
    g.add_argument("--agent-interval-s", type=float, default=0.1, help="time between actions (s)")
    g.add_argument("--pkts-per-tick", type=int, default=1, help="bottleneck packets per tick (fidelity/speed dial)")
    add_model_args(ap)
    add_backend_arg(ap)
    g = ap.add_argument_group("PPO")
    g.add_argument("--num-envs", type=int, default=d.num_envs, help="envs stepped in parallel per seed")
    g.add_argument("--num-steps", type=int, default=d.num_steps, help="env steps per env per update")
    g.add_argument("--updates", type=int, default=d.total_updates, help="PPO updates in the run")
    g.add_argument("--update-epochs", type=int, default=d.update_epochs, help="epochs per update")
    g.add_argument("--num-minibatches", type=int, default=d.num_minibatches, help="minibatches per epoch")
    g.add_argument("--lr", type=float, default=d.lr, help="Adam step size (annealed to 0)")
    g.add_argument("--gamma", type=float, default=d.gamma, help="discount")
    g.add_argument("--gae-lambda", type=float, default=d.gae_lambda, help="GAE lambda")
    g.add_argument("--clip-eps", type=float, default=d.clip_eps, help="PPO clip range")
    g.add_argument("--ent-coef", type=float, default=d.ent_coef, help="entropy bonus")
    g.add_argument("--network", default=d.network, choices=["mlp", "lstm"], help="actor-critic network")
    g.add_argument("--hidden", type=int, nargs="+", default=list(d.hidden), help="hidden layer widths")
    g.add_argument("--action", default=d.action, choices=["gaussian", "discrete"], help="action distribution")
    g.add_argument("--action-map", default=d.action_map, help="how the Gaussian's output becomes the env's action "
                   "(rlbm_jax.policy: tanh01, clip01, exp2, pow2, bdp, or none)")
    g.add_argument("--init-log-std", type=float, default=d.init_log_std, help="initial log std of the Gaussian")
    g.add_argument("--init-action", type=float, nargs="+", default=None,
                   help="the untrained policy's action: alpha, or with --action-map bdp the threshold in BDPs; "
                        f"one value, or one per class; unset: {list(d.init_action)} (rlbm_jax.ppo.THESIS_PPO) for "
                        "the default Gaussian action with the bdp map, none otherwise")
    return ap


def parse(argv):
    return build_parser().parse_args(argv)


def _one_or_tuple(v):
    """argparse's list for a nargs="+" option: one value as a float, several as a tuple."""
    if v is None or isinstance(v, (int, float)):
        return v
    return float(v[0]) if len(v) == 1 else tuple(float(x) for x in v)


def config_from_args(a) -> tuple[PPOConfig, dict]:
    init_action = a.init_action
    if init_action is None and a.action == "gaussian" and a.action_map == THESIS_PPO["action_map"]:
        init_action = THESIS_PPO["init_action"]  # the default's starting thresholds
    cfg = PPOConfig(num_envs=a.num_envs, num_steps=a.num_steps, total_updates=a.updates,
                    update_epochs=a.update_epochs, num_minibatches=a.num_minibatches, lr=a.lr, gamma=a.gamma,
                    gae_lambda=a.gae_lambda, clip_eps=a.clip_eps, ent_coef=a.ent_coef, network=a.network,
                    hidden=tuple(a.hidden), action=a.action, action_map=a.action_map,
                    init_log_std=a.init_log_std, init_action=_one_or_tuple(init_action)).validate()
    env_cfg = dict(env=a.env, reward=a.reward, buffer_pkts=list(a.buffer_pkts), buffer_dist=a.buffer_dist,
                   load=list(a.load), tcp=list(a.tcp), episode_s=a.episode_s, agent_interval_s=a.agent_interval_s,
                   pkts_per_tick=a.pkts_per_tick, **model_kw(a, complete=True))
    return cfg, env_cfg


def tcp_model(env_cfg: dict) -> dict:
    """The run's TCP-model choices (`params.recorded_tcp_model`: a run resumes on the
    simulator it started on)."""
    return recorded_tcp_model(env_cfg)


def make_env(env_cfg: dict):
    form = formulations.get(env_cfg.get("env", TRAIN_ENV))
    if env_cfg.get("reward"):
        form = form.with_reward(env_cfg["reward"])
    return thesis_randomized_env(buffer_pkts=tuple(env_cfg["buffer_pkts"]),
                                 buffer_dist=env_cfg.get("buffer_dist", "uniform"), load=tuple(env_cfg["load"]),
                                 tcp=tuple(env_cfg["tcp"]), episode_s=env_cfg["episode_s"],
                                 agent_interval_s=env_cfg["agent_interval_s"], pkts_per_tick=env_cfg["pkts_per_tick"],
                                 formulation=form, **tcp_model(env_cfg))


def read_rows(path: Path, upto: int):
    if not path.is_file():
        return []
    with path.open() as f:
        return [r for r in csv.DictReader(f) if int(r["update"]) <= upto]


def sim_params(env_params):
    """The simulator's params inside an env's (the randomised env's params wrap the env's)."""
    p = env_params
    while not hasattr(p, "sim"):
        p = p.env
    return p.sim


def sim_backend(env_params, backend: str | None = None) -> str:
    """The simulator tick ("jax" or "native") that runs the env of `env_params` under
    `backend` (None: the process's --backend): a ValueError when the backend asked for
    cannot run it."""
    from rlbm_jax.env import backends

    return backends.resolve(backend, sim_params(env_params), ticks=True)


def _flags(ap) -> dict:
    """Library field names -> the option that sets them, for error messages."""
    flags = flag_of(ap)
    flags.update(total_updates="--updates", buffer_pkts="--buffer-pkts", buffer_dist="--buffer-dist")
    return flags


def plan(a) -> tuple[dict, PPOConfig, dict]:
    """(run_config(a), the PPO config, the env config) of the run: from the options, or
    with --resume from the run directory's config.json."""
    from rlbm_jax.env import backends

    if a.num_seeds < 1 or a.checkpoint_every < 1:
        raise ValueError("--num-seeds and --checkpoint-every must be >= 1")
    run = Path(a.run_dir)
    if a.resume:
        if not (run / "config.json").is_file():
            raise ValueError(f"nothing to resume in {run}: it has no config.json (start the run without --resume)")
        saved = json.loads((run / "config.json").read_text())
        cfg = PPOConfig.from_dict(saved["ppo"])
        env_cfg, seed, num_seeds = saved["env"], saved["seed"], saved["num_seeds"]
    else:
        cfg, env_cfg = config_from_args(a)
        seed, num_seeds = a.seed, a.num_seeds
    record = {"ppo": cfg.to_dict(), "env": env_cfg, "seed": seed, "num_seeds": num_seeds,
              "backend_asked": a.backend or backends.default(), "run_dir": str(run), "resume": a.resume,
              "overwrite": a.overwrite,
              "checkpoint_every": a.checkpoint_every, "stop_after": a.stop_after, "warn_after_min": a.warn_after_min,
              "progress": not a.no_progress}
    return record, cfg, env_cfg


def check(a, cfg: PPOConfig, env_cfg: dict, num_seeds: int):
    """Everything the run refuses before it compiles, as a ValueError, for the run and for
    --print-config alike: the env's ranges and values (`make_env`), the PPO config against
    the env, the memory one update needs (refused when the device lacks it), and a named
    --backend that cannot run the env.  Returns (env, env params, the memory note or None)."""
    env, env_params = make_env(env_cfg)
    ppo = PPO(env, env_params, cfg)  # refuses a config this env cannot take (e.g. init_action's length)
    note = memory.check(ppo, num_seeds)  # refuses a run too large for the device, before compiling
    if a.backend not in (None, "auto"):  # (auto runs whatever it can: nothing to refuse)
        sim_backend(env_params, a.backend)
    return env, env_params, note


def run_config(a) -> dict:
    """What this command runs (`--print-config` prints it; config.json holds it, with the
    backend that ran): the PPO config, the env config (formulation, reward, the randomised
    scenario's ranges, every TCP-model choice), the training seeds, the run directory and
    its checkpointing."""
    return plan(a)[0]


def main(argv=None):
    ap = build_parser()
    a = ap.parse_args(argv)
    try:
        refuse_held_run(a.run_dir, overwrite=a.overwrite, resume=a.resume, how=", --resume continues it")
        record, cfg, env_cfg = plan(a)
        env, env_params, note = check(a, cfg, env_cfg, record["num_seeds"])  # a dry run refuses what the run does
    except ValueError as e:
        return fail(PROG, name_flags(str(e), _flags(ap)))
    if printed_config(a, record):
        return 0
    backend = apply_backend(a)
    if refusal := single_process_only(PROG):
        return fail(PROG, refusal)
    run = Path(a.run_dir)
    try:
        seed, num_seeds = record["seed"], record["num_seeds"]
        fresh_after_resume = a.resume and Checkpointer.latest_in(run / "checkpoints") is None
        ran = sim_backend(env_params)  # (builds the native tick on its first use)
    except ValueError as e:
        return fail(PROG, name_flags(str(e), _flags(ap)))
    if note:
        print(note, file=sys.stderr)
    made_run_dir = not run.exists()
    run.mkdir(parents=True, exist_ok=True)
    if not a.resume:  # a fresh run, or --overwrite: nothing of the run it replaces is left
        old = [run / f for f in held_run(run)] + list(run.glob("policy_seed*")) + list(run.glob("curves.png"))
        for f in old:
            shutil.rmtree(f) if f.is_dir() else f.unlink()
        # "backend": the tick that runs (jax or native); "backend_asked": --backend (or auto)
        jsonio.write(run / "config.json", {**record, "backend": ran})

    keys = jax.random.split(jax.random.PRNGKey(seed), num_seeds)
    t0 = time.perf_counter()
    ckpt = Checkpointer(run / "checkpoints")
    start = 0
    if a.resume and fresh_after_resume:
        print(f"{run} has no checkpoint yet (the run stopped before its first): starting it from update 0 "
              "with its saved config", file=sys.stderr)
    elif a.resume:
        start = Checkpointer.latest_in(run / "checkpoints")
    rows = read_rows(run / "metrics.csv", start) if a.resume and start else []
    wall0 = float(rows[-1]["wall_s"]) if rows else 0.0
    steps_per_update = cfg.batch_size * num_seeds
    print(f"{env.name}{' (reward ' + env_cfg['reward'] + ')' if env_cfg.get('reward') else ''}: "
          f"{num_seeds} seed(s) x {cfg.num_envs} envs x {cfg.num_steps} steps per update, "
          f"{cfg.total_updates} updates ({cfg.total_updates * steps_per_update:,} env steps) on "
          f"{jax.default_backend()} (simulator backend {ran}{'' if backend == ran else ', asked ' + backend}); "
          f"run dir {run}", file=sys.stderr)
    print("TCP model: " + ", ".join(f"{k}={v}" for k, v in tcp_model(env_cfg).items()), file=sys.stderr)
    stop = cfg.total_updates if a.stop_after is None else min(a.stop_after, cfg.total_updates)
    bar = Progress(cfg.total_updates, unit=" updates", label="train ", rate_unit="env-steps/s",
                   rate_scale=steps_per_update)
    bar.enabled = not a.no_progress
    seen = {"update": start, "warned": False}

    def on_update(update, reward):
        # called from inside the compiled chunk after every update (once per seed)
        update = int(update)
        if update <= seen["update"]:
            return
        seen["update"] = update
        bar.update(update, extra=f"reward {float(reward):+.4f}")  # the first one starts the clock
        rate = bar.rate() * steps_per_update
        eta_min = bar.eta_s() / 60
        if not seen["warned"] and eta_min == eta_min and jax.default_backend() == "cpu" and eta_min > a.warn_after_min:
            seen["warned"] = True
            bar.note(f"warning: no accelerator (JAX runs on the CPU): at {rate:,.0f} env steps/s the remaining "
                     f"{cfg.total_updates - update} updates need about {fmt_s(eta_min * 60)}. Fewer --num-envs or "
                     "--updates, or a GPU (pip install -U 'jax[cuda12]'), shorten it; --stop-after and --resume "
                     "split it.")

    ppo = PPO(env, env_params, cfg, on_update=None if a.no_progress else on_update)
    u = start
    try:
        # waited for here: XLA:CPU reports an allocation that fails in this asynchronous call
        # only to whoever waits on its result, not to the update that reads it (which would
        # then wait for ever)
        ts = jax.block_until_ready(ppo.init_seeds(keys))
        if start:
            ts = ckpt.restore(ts)
            start = u = int(np.asarray(ts.update)[0])
            print(f"resumed {run} at update {start}/{cfg.total_updates}", file=sys.stderr)
        bar.update(start, extra="compiling", measure=False)
        while u < stop:
            n = min(a.checkpoint_every, stop - u)
            ts, m = ppo.run_seeds(ts, n)
            m = jax.device_get(m)
            wall = wall0 + time.perf_counter() - t0
            for s in range(num_seeds):
                for i in range(n):
                    row = {"seed": s, "update": u + i + 1, "env_steps": (u + i + 1) * cfg.batch_size,
                           "wall_s": f"{wall:.2f}"}
                    row.update({k: f"{float(v[s, i]):.6g}" for k, v in sorted(m.items())})
                    rows.append(row)
            u += n
            ckpt.save(u, ts)
            write_rows(run / "metrics.csv", rows)
    except jax.errors.JaxRuntimeError as e:
        if "RESOURCE_EXHAUSTED" not in str(e):
            raise
        bar.close()
        ckpt.close()
        if made_run_dir and u == start:  # nothing saved: leave no run directory behind
            shutil.rmtree(run)
        kept = "" if u == start else f"; {run} keeps updates 1-{u} (--resume continues them)"
        return fail(PROG, f"out of memory ({str(e).splitlines()[0]}): lower --num-envs{kept}")
    bar.close()
    ckpt.close()
    plot_curves(rows, run / "curves.png")
    if u < cfg.total_updates:
        print(f"stopped at update {u}/{cfg.total_updates}; continue with --run-dir {run} --resume", file=sys.stderr)
        return 0

    # deployable policies, one per seed; policy/ = best mean reward over the last 10 % of updates
    env_info = {"name": env.name, "reward": getattr(env.formulation.reward, "name", None),
                "obs": f"{env.formulation.id} observation [{len(env.obs_layout)}]",
                "action": env.formulation.action.text, "scenario": env_cfg, "ppo": cfg.to_dict()}
    finals = []
    for s in range(num_seeds):
        p_s = jax.tree.map(lambda x: x[s], ts.params)
        st_s = jax.tree.map(lambda x: x[s], ts.obs_stats)
        try:
            export_policy(ppo, p_s, st_s, run / f"policy_seed{s}", env_info)
        except ValueError as e:
            print(f"note: {e}", file=sys.stderr)
            break
        tail = [float(r["reward_mean"]) for r in rows if int(r["seed"]) == s][-max(1, cfg.total_updates // 10):]
        finals.append(float(np.mean(tail)))
    if finals:
        best = int(np.argmax(finals))
        if (run / "policy").exists():
            shutil.rmtree(run / "policy")
        shutil.copytree(run / f"policy_seed{best}", run / "policy")
        print(f"final reward per seed {np.round(finals, 4).tolist()}; policy/ = seed {best}", file=sys.stderr)
    total_s = time.perf_counter() - t0
    steps = (cfg.total_updates - start) * steps_per_update
    print(jsonio.dumps({"run_dir": str(run), "updates": cfg.total_updates, "env_steps_this_call": steps,
                      "wall_s": round(total_s, 1), "env_steps_per_s": round(steps / max(total_s, 1e-9), 1)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
