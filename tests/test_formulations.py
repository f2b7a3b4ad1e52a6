"""Formulations: the interval record every formulation reads (it adds up to the run's
counters), the named rewards, a formulation added in one file plus its registration,
`rlbm_jax.make`, batching different buffers, and the env inside a purejaxrl-style PPO
through gymnax's own wrappers."""
import csv
import dataclasses
from pathlib import Path

import gymnax
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import linen as nn
from gymnax.environments import spaces
from gymnax.wrappers.purerl import FlattenObservationWrapper, GymnaxWrapper, LogWrapper

import rlbm_jax
from rlbm_jax.env import (backends, RLBMEnv, SymmetricActions, formulations, metrics as mx, sim, stack_params, thesis_params,
                          traffic)
from rlbm_jax.env.formulations import Field, Formulation, per_class
from rlbm_jax.env.params import LEGACY_TCP_MODEL
from rlbm_jax.evaluate import score
from rlbm_jax.simulate import with_policy

ROOT = Path(__file__).resolve().parents[1]


def _episode(env, params, actions, key=0):
    """Run the env; return the record of every step and the final state."""
    step = jax.jit(env.step_env)
    obs, st = env.reset_env(jax.random.PRNGKey(key), params)
    recs = []
    for i, a in enumerate(actions):
        obs, st, r, _, info = step(jax.random.PRNGKey(i), st, a, params)
        recs.append(jax.device_get(st.sim.interval))
    return recs, st


@pytest.fixture(scope="module")
def busy():
    """Two classes, long flows and many short ones into small buffers: drops, timeouts,
    lost SYNs and completions in most intervals; 2 flows listed per interval."""
    sizes = traffic.SizeTable(np.array([1_000.0, 20_000.0, 300_000.0]), np.array([0.0, 0.7, 1.0]), "short")
    env = RLBMEnv(thesis_params(policy="rl", load=1.2, long_flows=3, buffer_per_class_pkts=20, cdf=sizes,
                                class_threshold_bytes=100_000, tcp="newreno", interval_log_size=2,
                                completion_log_size=4096),
                  formulation="RLBM-thesis-v0", agent_interval_s=0.1, episode_s=10.0)
    p = env.default_params
    acts = [jnp.asarray(a, jnp.float32) for a in np.random.default_rng(0).uniform(0.05, 1, (40, 2))]
    recs, st = _episode(env, p, acts)
    return env, p, recs, st


def test_the_interval_record_adds_up_to_the_run(busy):
    env, p, recs, st = busy
    m, sp = st.sim.metrics, p.sim
    tot = lambda f: np.sum([np.asarray(getattr(r, f)) for r in recs], axis=0)
    assert tot("arrivals_pkts").tolist() == np.asarray(m.arrive_warm).tolist()  # no warm-up: every tick
    assert tot("drops_pkts").tolist() == np.asarray(m.drop_warm).tolist() and tot("drops_pkts").sum() > 0
    assert int(tot("dequeues_pkts").sum()) == int(m.deq_total)
    # the record counts distinct packets delivered; copies resent after a timeout are not goodput
    distinct = int(m.sink_total) - int(m.spur_sink_total)
    assert int(tot("sink_pkts")) == distinct and int(m.spur_sink_total) > 0
    assert int(tot("rto_count")) == int(m.rto_total) > 0
    assert int(tot("syn_drops")) == int(m.syn_drops) > 0
    assert int(tot("flows_done").sum()) == int(m.flows_completed) > 40
    np.testing.assert_array_equal(np.asarray(recs[-1].queue_end_pkts), np.asarray(st.sim.queue.pkts))
    np.testing.assert_allclose(tot("queue_pkt_s"), np.asarray(m.queue_sum) * float(sp.tick_s), rtol=1e-4)
    # the flows listed are the run's completion log, interval by interval; the rest are counted
    log = np.asarray(m.log)[:int(m.log_count)]
    at = 0
    for r in recs:
        n = int(np.sum(r.flows_done))
        mine = log[at:at + n]
        at += n
        k = int(r.flows_logged)
        assert k == min(n, 2) and int(r.flows_overflow) == n - k
        np.testing.assert_array_equal(np.asarray(r.flows)[:k], mine[:k][:, [0, 1, 3]])
        for c in range(2):
            sd = mine[mine[:, 1] == c, 3]
            assert int(r.flows_done[c]) == sd.size
            assert float(r.slowdown_max[c]) == (sd.max() if sd.size else 0.0)
            np.testing.assert_allclose(float(r.log_slowdown_sum[c]), np.log(np.maximum(sd, 1)).sum(), rtol=1e-5,
                                       atol=1e-5)
    assert sum(int(r.flows_overflow) for r in recs) > 0
    # payload bytes: whole segments, less the unused end of every finished flow's last one
    mss = float(sp.mss_bytes)
    short = np.sum(np.ceil(log[:, 0] / mss) * mss - log[:, 0])
    np.testing.assert_allclose(tot("sink_bytes"), distinct * mss - short, rtol=1e-5)


def test_open_flows_cost_continues_across_intervals_and_adds_up_to_the_slowdowns(busy):
    env, p, recs, st = busy
    for a, b in zip(recs, recs[1:]):
        np.testing.assert_array_equal(np.asarray(b.open_log_slowdown_start), np.asarray(a.open_log_slowdown_end))
    # telescoping: what the accrued flow term charges over the run is every finished flow's
    # log slowdown plus what the flows still open at the end have accrued so far
    accrued = sum(np.asarray(r.log_slowdown_sum) + np.asarray(r.open_log_slowdown_end)
                  - np.asarray(r.open_log_slowdown_start) for r in recs)
    np.testing.assert_allclose(accrued, sum(np.asarray(r.log_slowdown_sum) for r in recs)
                               + np.asarray(recs[-1].open_log_slowdown_end) - np.asarray(recs[0].open_log_slowdown_start),
                               rtol=1e-4)
    assert float(np.sum(recs[-1].open_log_slowdown_end)) > 0  # the busy run ends with waiting flows


def _record(**kw):
    base = mx.init_interval(2, 3)
    return base.replace(**{k: jnp.asarray(v, getattr(base, k).dtype) for k, v in kw.items()})


def test_every_named_reward_is_its_formula():
    env = RLBMEnv(thesis_params(policy="rl"), formulation="RLBM-v0")
    p = env.default_params
    cap = formulations.capacity_pkts(p)
    rec = _record(sink_pkts=60, drops_pkts=[3, 2], rto_count=2, syn_drops=1, flows_done=[2, 1],
                  slowdown_max=[3.0, 1.5], log_slowdown_sum=[np.log(3.0) + np.log(2.0), np.log(1.5)],
                  open_log_slowdown_start=[0.5, 0.2], open_log_slowdown_end=[0.25, 0.7])
    thr = 60 / cap
    finished = np.log(3.0) + np.log(2.0) + np.log(1.5)
    accrued = finished + (0.25 + 0.7) - (0.5 + 0.2)
    want = {"thesis": -np.log(3.0) + np.log1p(thr), "thesis-linear": -np.log(3.0) + thr,
            "flows": thr - finished, "flows-accrued": thr - accrued,
            "penalties": thr - accrued - 5 / cap - 0.1 * 2 - 1.0 * 1}
    assert set(want) == set(formulations.REWARDS)
    for name, value in want.items():
        r, parts = formulations.REWARDS[name](rec, p)
        assert float(r) == pytest.approx(value, rel=1e-5), name
    # an empty interval: the thesis's slowdown term is 0, the flow terms charge only waiting flows
    empty = _record(sink_pkts=10, open_log_slowdown_start=[0.5, 0.0], open_log_slowdown_end=[1.0, 0.0])
    assert float(formulations.REWARDS["thesis"](empty, p)[0]) == pytest.approx(np.log1p(10 / cap))
    assert float(formulations.REWARDS["flows"](empty, p)[0]) == pytest.approx(10 / cap)
    assert float(formulations.REWARDS["flows-accrued"](empty, p)[0]) == pytest.approx(10 / cap - 0.5)
    with pytest.raises(ValueError, match="flows must be one of"):
        formulations.Reward("bad", "", flows="median")


def test_thesis_formulation_reproduces_the_committed_thesis_grid_rewards(monkeypatch):
    """The committed per-run rewards (results/thesis_grid/per_seed.csv, the thesis reward
    before formulations existed, on the TCP model of that version, made with the JAX tick)
    come out again on the JAX tick: SB-naive's bit for bit; the trained policy's to 1e-6
    (its network's float rounding depends on the JAX build that ran it).  The backend is
    named, since `auto` picks the native tick where it can, which agrees only to float
    rounding (tests/test_native.py)."""
    from rlbm_jax.policy import load_policy

    monkeypatch.setenv("RLBM_JAX_BACKEND", "jax")

    with open(ROOT / "results" / "thesis_grid" / "per_seed.csv") as f:
        rows = {(r["policy"], r["tcp"], r["buffer_per_class_pkts"], r["load"], r["seed"]): float(r["reward_mean"])
                for r in csv.DictReader(f)}
    p = thesis_params(tcp="newreno", buffer_per_class_pkts=100, load=0.1, policy="rl", queue_capacity_pkts=1000,
                      **LEGACY_TCP_MODEL)
    env = RLBMEnv(p, formulation="RLBM-thesis-v0", agent_interval_s=0.1, episode_s=60.0)
    ep = env.default_params
    agent, _ = load_policy(ROOT / "results" / "train_default" / "policy", obs_layout=env.obs_layout)
    naive = score(env, ep.replace(sim=with_policy(p, "sb-naive")), None, [100000])["reward_mean"][0]
    policy = score(env, ep, agent, [100000])["reward_mean"][0]
    assert float(naive) == rows[("sb-naive", "newreno", "100", "0.1", "100000")]
    assert float(policy) == pytest.approx(rows[("rl", "newreno", "100", "0.1", "100000")], rel=1e-6)


# ---- a formulation added in one file plus its registration -------------------------------------

@dataclasses.dataclass(frozen=True)
class QueueAndDrops:
    def fields(self, P):
        return per_class("queue_bdp", "BDP", "class {c}'s queue at the end / BDP", P) + (
            Field("drops_per_capacity", "1", "data packets dropped / capacity"),)

    def __call__(self, rec, params):
        cap = formulations.capacity_pkts(params)
        return jnp.concatenate([rec.queue_end_pkts / params.sim.bdp_pkts, jnp.sum(rec.drops_pkts)[None] / cap])


@dataclasses.dataclass(frozen=True)
class SharedAlpha:
    text: str = "one alpha in [0, 1] for every class"

    def fields(self, P):
        return (Field("alpha", "1", "every class's alpha"),)

    def space(self, P):
        return spaces.Box(0.0, 1.0, (1,), jnp.float32)

    def knobs(self, action, rec, params):
        a = jnp.clip(jnp.asarray(action, jnp.float32).reshape(()), 0.0, 1.0)
        return {"class_alpha": jnp.full((params.sim.num_classes,), a)}


@dataclasses.dataclass(frozen=True)
class ShortQueue:
    name: str = "short-queue"
    text: str = "delivered / capacity - mean queue in BDPs"

    def __call__(self, rec, params):
        cap = formulations.capacity_pkts(params)
        q = jnp.sum(rec.queue_pkt_s) / (params.ticks_per_step * params.sim.tick_s) / params.sim.bdp_pkts
        return rec.sink_pkts / cap - q, {"queue_term": -q}


TOY = Formulation("RLBM-toy-v0", "queues and drops in, one shared alpha out, short queues rewarded",
                  QueueAndDrops(), SharedAlpha(), ShortQueue())


@pytest.fixture(scope="module")
def toy():
    if TOY.id not in formulations.ids():
        formulations.register(TOY)
    return TOY


def test_a_new_formulation_is_one_module_and_its_registration(toy, tmp_path):
    from rlbm_jax.onnx_policy import load_checked, to_onnx
    from rlbm_jax.ppo import PPO, PPOConfig
    from rlbm_jax.ppo.export import export_policy

    assert toy.id in rlbm_jax.list_envs()
    env, p = rlbm_jax.make(toy.id, episode_s=0.5, load=0.9, long_flows=2, buffer_per_class_pkts=40)
    assert env.obs_layout == ("queue_bdp_c0", "queue_bdp_c1", "drops_per_capacity") and env.num_actions == 1
    obs, st = env.reset(jax.random.PRNGKey(0), p)
    obs, st, r, term, trunc, info = env.step(jax.random.PRNGKey(1), st, jnp.array([0.3]), p)
    np.testing.assert_allclose(np.asarray(st.sim.rl_alpha), [0.3, 0.3])  # the knob the action set
    assert obs.shape == (3,) and "queue_term" in info and float(r) <= 1.0
    g_env, g_p = gymnax.make(toy.id, episode_s=0.5)  # registered with gymnax too
    assert g_env.name == toy.id and g_p.max_steps_in_episode == 5
    # the trainer, the policy file and the ONNX export take it as they take the thesis's
    renv, rp = rlbm_jax.make(toy.id, randomize={"buffer_pkts": (20, 60)}, episode_s=0.5, completion_log_size=4)
    ppo = PPO(renv, rp, PPOConfig(num_envs=4, num_steps=3, total_updates=2, num_minibatches=2, action_map="tanh01"))
    ts, m = ppo.run(ppo.init(jax.random.PRNGKey(0)), 2)
    assert np.all(np.isfinite(np.asarray(m["reward_mean"])))
    path = export_policy(ppo, ts.params, ts.obs_stats, tmp_path / "pol", {"scenario": {"agent_interval_s": 0.1}})
    fn, meta = load_checked(to_onnx(path, tmp_path / "toy.onnx"), num_classes=2, formulation=toy.id)
    assert meta["obs_layout"] == list(env.obs_layout) and meta["action"] == toy.action.text
    assert fn(np.zeros((2, 3), np.float32)).shape == (2, 1)
    with pytest.raises(ValueError, match="already registered"):
        formulations.register(TOY)


def test_make_builds_every_registered_env_and_refuses_unknown_ids():
    assert {"RLBM-thesis-v0", "RLBM-v0"} <= set(rlbm_jax.list_envs())
    env, p = rlbm_jax.make("RLBM-v0")
    assert env.name == "RLBM-v0" and env.formulation.reward.name == "flows-accrued"
    steps = int(p.max_steps_in_episode)
    assert steps == round(60.0 / float(p.agent_interval_s)) and int(p.sim.policy_id) == 5  # thesis scenario, "rl"
    env, p = rlbm_jax.make("RLBM-thesis-v0", reward="flows", tcp="newreno", load=0.3)
    assert env.formulation.reward.name == "flows" and float(p.sim.load) == pytest.approx(0.3)
    env, p = rlbm_jax.make("RLBM-thesis-v0", randomize=True)
    assert type(env).__name__ == "RandomizedEnv" and p.env.sim.queue_capacity_pkts == 1000
    env, p = rlbm_jax.make("RLBM-v0", scenario="long", long_flows=4, buffer_bdp=0.5)
    assert int(p.sim.long_flows) == 4 and p.sim.num_classes == 1
    g, gp = gymnax.make("RLBM-thesis-v0")
    assert g.name == "RLBM-thesis-v0" and gp.max_steps_in_episode == steps
    with pytest.raises(ValueError, match="unknown formulation 'RLBM-nope-v0'; registered: RLBM-thesis-v0"):
        rlbm_jax.make("RLBM-nope-v0")
    with pytest.raises(ValueError, match="unknown reward"):
        rlbm_jax.make("RLBM-v0", reward="gameable")


def test_different_buffers_and_tcps_batch_in_one_vmap():
    """stack_params pads the ring sizes to the largest buffer; each padded run equals the
    same config run alone (integer state compared)."""
    configs = [thesis_params(buffer_per_class_pkts=n, tcp=t, load=0.9, long_flows=2, policy=pol)
               for n, t, pol in ((30, "newreno", "dt"), (120, "cubic", "sb-naive"), (400, "cubic", "abm"))]
    assert len({c.queue_capacity_pkts for c in configs}) == 3
    with pytest.raises(ValueError):  # without the helper the batch cannot be built
        jax.tree.map(lambda *xs: jnp.stack(xs), *configs)
    batch = stack_params(configs)
    assert batch.queue_capacity_pkts == 400
    n = sim.ticks_for(3.0, configs[0])

    def run(p):
        s = backends.run(sim.init(jax.random.PRNGKey(0), p), p, n)[0]
        return s.queue.pkts, s.metrics.drop_total, s.metrics.sink_total, s.metrics.flows_completed, s.flows.ints

    together = jax.jit(jax.vmap(run))(batch)
    for i, c in enumerate(configs):
        alone = jax.jit(run)(c)
        for a, b in zip(alone, together):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b)[i])
    # env params batch the same way
    envs = [RLBMEnv(c.replace(policy_id=jnp.int32(5)), formulation="RLBM-v0", episode_s=1.0).default_params
            for c in configs]
    assert stack_params(envs).sim.buffer_pkts.tolist() == [60, 240, 800]
    # a static field that shapes the simulation itself cannot be padded: the error names it
    with pytest.raises(ValueError, match="static field num_flow_slots differs"):
        stack_params([thesis_params(num_flow_slots=32), thesis_params(num_flow_slots=64)])
    with pytest.raises(ValueError, match="static field pkts_per_tick"):
        stack_params([thesis_params(), thesis_params(pkts_per_tick=4)])


# ---- the env in a purejaxrl-style trainer ---------------------------------------------------------

class ClipAction(GymnaxWrapper):
    """purejaxrl's action clipping: a Gaussian policy's samples clipped to [-1, 1]."""

    def step(self, key, state, action, params=None):
        return self._env.step(key, state, jnp.clip(action, -1.0, 1.0), params)


class ActorCritic(nn.Module):
    act_dim: int

    @nn.compact
    def __call__(self, x):
        h = nn.tanh(nn.Dense(32)(x))
        mean = nn.Dense(self.act_dim, kernel_init=nn.initializers.zeros)(h)
        log_std = self.param("log_std", nn.initializers.constant(-0.5), (self.act_dim,))
        value = nn.Dense(1)(nn.tanh(nn.Dense(32)(x)))[..., 0]
        return mean, log_std, value


def test_purejaxrl_style_ppo_through_gymnax_log_and_flatten_wrappers():
    base = RLBMEnv(thesis_params(policy="rl", load=0.9, long_flows=2, buffer_per_class_pkts=40, num_flow_slots=16),
                   formulation="RLBM-v0", agent_interval_s=0.1, episode_s=0.5)
    env = ClipAction(LogWrapper(FlattenObservationWrapper(SymmetricActions(base))))
    params = base.default_params
    n_envs, n_steps, n_updates = 6, 5, 3
    net = ActorCritic(act_dim=2)
    tx = optax.adam(3e-3)

    def train(key):
        k_net, k_env, key = jax.random.split(key, 3)
        obs, state = jax.vmap(env.reset, in_axes=(0, None))(jax.random.split(k_env, n_envs), params)
        net_params = net.init(k_net, obs)
        opt = tx.init(net_params)

        def update(carry, _):
            net_params, opt, obs, state, key = carry

            def step(c, _):
                obs, state, key = c
                key, k_a, k_s = jax.random.split(key, 3)
                mean, log_std, value = net.apply(net_params, obs)
                a = mean + jnp.exp(log_std) * jax.random.normal(k_a, mean.shape)
                logp = jnp.sum(-0.5 * ((a - mean) / jnp.exp(log_std)) ** 2 - log_std, -1)
                obs2, state, r, term, trunc, info = jax.vmap(env.step, in_axes=(0, 0, 0, None))(
                    jax.random.split(k_s, n_envs), state, a, params)
                # a 5-value trainer's done, and what it needs to bootstrap a truncation
                done = jnp.logical_or(term, trunc)
                boot = net.apply(net_params, info["final_observation"])[2]
                return (obs2, state, key), dict(obs=obs, a=a, logp=logp, v=value, r=r, done=done, term=term,
                                                boot=boot, alpha=state.env_state.sim.rl_alpha,
                                                ret=info["returned_episode_returns"], ended=info["returned_episode"])

            (obs, state, key), tr = jax.lax.scan(step, (obs, state, key), None, n_steps)
            nxt = jnp.where(tr["term"], 0.0, tr["boot"])
            adv = tr["r"] + 0.99 * nxt - tr["v"]  # one-step advantages, truncation bootstrapped

            def loss(pp):
                mean, log_std, v = net.apply(pp, tr["obs"])
                logp = jnp.sum(-0.5 * ((tr["a"] - mean) / jnp.exp(log_std)) ** 2 - log_std, -1)
                ratio = jnp.exp(logp - tr["logp"])
                pg = -jnp.minimum(ratio * adv, jnp.clip(ratio, 0.8, 1.2) * adv).mean()
                return pg + 0.5 * ((v - (tr["r"] + 0.99 * nxt)) ** 2).mean()

            l, g = jax.value_and_grad(loss)(net_params)
            upd, opt = tx.update(g, opt, net_params)
            return (optax.apply_updates(net_params, upd), opt, obs, state, key), (l, tr)

        _, (losses, trs) = jax.lax.scan(update, (net_params, opt, obs, state, key), None, n_updates)
        return losses, trs

    losses, trs = jax.jit(train)(jax.random.PRNGKey(0))
    assert np.all(np.isfinite(np.asarray(losses)))
    r = np.asarray(trs["r"]).reshape(-1, n_envs)  # [updates * steps, envs]
    ended = np.asarray(trs["ended"]).reshape(-1, n_envs)
    ret = np.asarray(trs["ret"]).reshape(-1, n_envs)
    # every 5th step ends an episode by truncation, and LogWrapper's return is its reward sum
    assert ended.sum() == n_envs * n_updates and np.all(ended[4::5])
    for e in range(n_envs):
        for t in np.flatnonzero(ended[:, e]):
            np.testing.assert_allclose(ret[t, e], r[t - 4:t + 1, e].sum(), rtol=1e-5)
    # the untrained policy (mean 0) runs the switch at alpha 0.5, not a blocked class
    alpha = np.asarray(trs["alpha"]).reshape(-1, n_envs, 2)
    assert 0.2 < alpha[0].mean() < 0.8 and (alpha > 0).mean() > 0.95
