"""Packet conservation, queue limits, determinism and vmap over params, on randomised configs
(the buffer policies, and the AQMs with and without ECN, FQ-CoDel's per-flow queues among them)."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlbm_jax.env import backends, sim, tcp
from rlbm_jax.env.switch import buffer, queue as qm
from rlbm_jax.env.switch.disciplines import fq_codel
from tests.conftest import random_configs

SECONDS = 3.0


def _flow_queues(s, num_classes):
    """Per class, the packets the per-flow queues' runs hold; per flow, whether its queue's
    counter agrees with its runs and a queue that holds packets is on a list of FQ-CoDel;
    and whether each list's positions are 0..n-1 (zeros and True without flow queues)."""
    fq, st = s.flowq, s.aqm.fq_codel
    n, cap = fq.runs.shape[0], fq.runs.shape[1]
    if n != s.flows.ints.shape[1]:  # no per-flow queues (a placeholder)
        return jnp.zeros((num_classes,), jnp.int32), jnp.asarray(True)
    j = jnp.arange(cap)
    cnt = jnp.take_along_axis(fq.runs[..., qm.COUNT], (fq.head[:, None] + j[None, :]) % cap, axis=1)
    held = jnp.sum(jnp.where(j[None, :] < fq.nruns[:, None], cnt, 0), axis=1)  # [F]
    cls = tcp.column(s.flows, "cls")
    by_cls = jnp.zeros((num_classes,), jnp.int32).at[cls].add(held)
    ok = jnp.all(held == fq.pkts) & jnp.all((fq.pkts == 0) | (st.lst != fq_codel.INACTIVE))
    for lst in (fq_codel.NEW, fq_codel.OLD):
        on = st.lst == lst
        seen = jnp.zeros((n + 1,), jnp.int32).at[jnp.where(on, jnp.clip(st.pos, 0, n), n)].add(1)[:n]
        ok = ok & jnp.all(seen == (jnp.arange(n) < jnp.sum(on)).astype(jnp.int32))
    return by_cls, ok


def _trace(s):
    m = s.metrics
    fl = tcp.unpack(s.flows)
    q = s.queue
    fq_pkts, fq_ok = _flow_queues(s, q.pkts.shape[0])
    return dict(
        tx=m.tx_total, drop=m.drop_total, deq=m.deq_total, sink=m.sink_total, marks=m.mark_total,
        queued=jnp.sum(q.pkts),
        qlen=q.pkts, thr=s.thresholds,
        ring_pkts=jnp.sum(jnp.where(jnp.arange(q.runs.shape[1])[None, :] < q.nruns[:, None],
                                    jnp.take_along_axis(q.runs[..., qm.COUNT],
                                                        (q.head[:, None] + jnp.arange(q.runs.shape[1])[None, :])
                                                        % q.runs.shape[1], axis=1), 0), axis=1) + fq_pkts,
        fq_ok=fq_ok,
        neg=jnp.minimum(jnp.min(jnp.stack([fl.outstanding, fl.lost_q, fl.retx_out, fl.retx_dropped,
                                           fl.undet, fl.ghost, fl.gbn_left, fl.gbn_ahead])), 0),
        # go-back-N bookkeeping: the ghosts not yet ACKed are either still to resend or resent
        gbn_over=jnp.max(jnp.where(fl.active, fl.gbn_left + fl.gbn_ahead - fl.ghost, 0)),
        spur_tx=m.spur_tx_total, spur_sink=m.spur_sink_total, retx_tx=m.retx_tx_total,
        cwnd_min=jnp.min(jnp.where(fl.active, fl.cwnd, 1.0)),
    )


# the quick tier (python -m pytest -m quick) checks conservation and the rest on k = 1
@pytest.fixture(scope="module", params=[pytest.param((1, False), marks=pytest.mark.quick), (4, False), (2, True)],
                ids=["k1", "k4", "aqm-k2"])
def batch(request):
    k, aqm = request.param
    # aqm: each of the five AQMs with ECN off and on
    stacked, configs = random_configs(10 if aqm else 6, seed=10 + k, aqm=aqm, pkts_per_tick=k)
    n = sim.ticks_for(SECONDS, configs[0])

    def one(p, key):
        s0 = sim.init(key, p)

        def tr(s):
            d = _trace(s)
            d["on_wire"] = sim.on_wire(s, p)
            return d

        s, trace = backends.run(s0, p, n, trace_fn=tr)
        return s, trace

    keys = jax.random.split(jax.random.PRNGKey(7), len(configs))
    final, trace = jax.jit(jax.vmap(one))(stacked, keys)
    return configs, stacked, keys, final, jax.tree.map(np.asarray, trace), one


def test_packet_conservation_every_tick(batch):
    configs, _, _, _, tr, _ = batch
    # every transmission offered to the switch is dropped, queued, or has left on the wire
    np.testing.assert_array_equal(tr["tx"], tr["drop"] + tr["queued"] + tr["deq"])
    # every packet on the wire is delivered or still propagating
    np.testing.assert_array_equal(tr["deq"], tr["sink"] + tr["on_wire"])
    # the class FIFOs' packet counters agree with the runs they hold (with FQ-CoDel: the
    # flows' queues of the class), FQ-CoDel's lists are well formed and hold every busy queue
    np.testing.assert_array_equal(tr["ring_pkts"], tr["qlen"])
    assert tr["fq_ok"].all(), "a flow queue's counter, or FQ-CoDel's lists, went wrong"
    assert tr["neg"].min() == 0, "a per-flow packet counter went negative"
    assert tr["cwnd_min"].min() >= 1.0
    assert tr["tx"][:, -1].min() > 0, "some configuration sent nothing"
    assert tr["drop"][:, -1].max() > 0, "no configuration exercised drops"
    # spurious go-back-N resends are retransmissions, reach the sink as copies, and never
    # outnumber the ghosts they stand for
    assert (tr["spur_tx"] <= tr["retx_tx"]).all() and (tr["spur_sink"] <= tr["spur_tx"]).all()
    assert tr["gbn_over"].max() <= 0
    # a retransmission that is not spurious repairs a drop: there are never more of them
    assert (tr["retx_tx"] - tr["spur_tx"] <= tr["drop"]).all()
    if configs[0].pkts_per_tick == 1:  # (the k = 4 draw has no spurious timeout in its 3 s)
        assert tr["spur_sink"][:, -1].max() > 0, "no configuration exercised go-back-N resends"
    # an AQM marks only with ECN (a packet that is not ECT is dropped instead), and a mark
    # neither loses nor creates a packet (the conservation above holds with marks)
    ecn = np.asarray([bool(p.ecn) for p in configs])
    assert (tr["marks"][~ecn] == 0).all(), "a packet was marked without ECN"
    if ecn.any():
        assert (tr["marks"][ecn, -1] > 0).mean() >= 0.5, "the ECN configurations hardly marked"
        assert (tr["marks"] <= tr["deq"] + tr["queued"]).all()


def test_queues_respect_caps_thresholds_and_buffer(batch):
    configs, _, _, _, tr, _ = batch
    q = tr["qlen"]  # [cfg, T, P] after each tick
    for i, p in enumerate(configs):
        assert (q[i].sum(-1) <= int(p.buffer_pkts)).all(), "the shared buffer overflowed"
        if buffer.needs_flow_queues(buffer.POLICY_NAMES[int(p.policy_id)]):
            continue  # FQ-CoDel's limit is the shared buffer alone (it drops from the fattest flow)
        caps = np.asarray(p.class_cap_pkts)
        assert (q[i] <= caps[None, :]).all(), "a class FIFO exceeded its cap"
        assert (q[i].sum(-1) <= int(p.buffer_pkts)).all(), "the shared buffer overflowed"
        # admissions never lift a queue above its threshold (it may already be above
        # when a threshold shrinks, e.g. DT as the buffer fills)
        prev = np.concatenate([np.zeros_like(q[i][:1]), q[i][:-1]], axis=0)
        limit = np.maximum(np.floor(tr["thr"][i] + 1e-4), prev)
        assert (q[i] <= limit).all(), "a queue grew past its admission threshold"


def test_vmap_over_params_matches_single_runs(batch):
    configs, _, keys, final, tr, one = batch
    for i in (0, len(configs) - 1):
        s, t1 = jax.jit(one)(configs[i], keys[i])
        np.testing.assert_array_equal(np.asarray(s.metrics.tx_total), np.asarray(final.metrics.tx_total[i]))
        np.testing.assert_array_equal(np.asarray(t1["qlen"]), tr["qlen"][i])
    # and the configurations really differ
    assert len({int(x) for x in np.asarray(final.metrics.tx_total)}) > 1


def test_same_seed_same_trajectory_other_seed_differs(batch):
    configs, _, keys, _, tr, one = batch
    p = configs[1]
    f = jax.jit(one)
    a_s, a = f(p, keys[1])
    b_s, b = f(p, keys[1])
    for x, y in zip(jax.tree.leaves((a_s, a)), jax.tree.leaves((b_s, b))):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    c_s, c = f(p, jax.random.PRNGKey(99))
    assert not np.array_equal(np.asarray(a["tx"]), np.asarray(c["tx"]))
