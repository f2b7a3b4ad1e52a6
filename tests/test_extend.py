"""A buffer policy plugs in through the registry, without touching the tick."""
import jax
import jax.numpy as jnp
import numpy as np

from rlbm_jax.env import backends, sim, stack_params, thesis_params
from rlbm_jax.env.switch import buffer

NAME = "quarter-cap"


def _quarter_cap(view, p):
    return 0.25 * p.class_cap_pkts.astype(jnp.float32)


def test_registered_policy_runs_and_binds():
    if NAME not in buffer.POLICY_NAMES:
        buffer.register_policy(NAME, _quarter_cap, default_alpha=(1.0, 1.0))
    caps = 80
    kw = dict(load=0.9, long_flows=3, buffer_per_class_pkts=caps, tcp="newreno")
    configs = [thesis_params(policy=NAME, **kw), thesis_params(policy="droptail", **kw)]
    stacked = stack_params(configs)
    n = sim.ticks_for(8.0, configs[0])

    def one(p):
        return backends.run(sim.init(jax.random.PRNGKey(0), p), p, n, trace_fn=lambda s: s.queue.pkts)[1]

    q = np.asarray(jax.jit(jax.vmap(one))(stacked))  # [2, T, P]
    assert q[0].max() <= caps // 4
    assert q[1].max() > caps // 4  # droptail, same traffic, lets queues grow past it
