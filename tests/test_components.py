"""Property tests of the pure components against plain-Python reference models."""
from collections import deque

import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import given, settings, strategies as st

from rlbm_jax.env.switch import buffer, queue as qm, scheduler

P, K = 3, 5
_rr = jax.jit(lambda q, r: scheduler.round_robin(q, K, r))
_sp = jax.jit(lambda q: scheduler.strict_priority(q, K))
_admit = jax.jit(buffer.admit)

qlens = st.lists(st.integers(0, 9), min_size=P, max_size=P)


def rr_reference(q, k, start):
    q = list(q)
    served = [0] * len(q)
    c = start
    for _ in range(k):
        for _ in range(len(q)):
            if q[c] > 0:
                break
            c = (c + 1) % len(q)
        if q[c] == 0:
            break
        q[c] -= 1
        served[c] += 1
        c = (c + 1) % len(q)
    return served, c


@settings(max_examples=200, deadline=None)
@given(qlens, st.integers(0, P - 1))
def test_round_robin_matches_per_packet_reference(q, start):
    served, nxt = _rr(jnp.array(q, jnp.int32), jnp.int32(start))
    ref, ref_next = rr_reference(q, K, start)
    assert np.asarray(served).tolist() == ref
    if sum(ref) > 0:
        assert int(nxt) == ref_next


@settings(max_examples=100, deadline=None)
@given(qlens)
def test_strict_priority_serves_in_class_order(q):
    served = np.asarray(_sp(jnp.array(q, jnp.int32)))
    assert served.sum() == min(K, sum(q)) and (served <= q).all()
    left = K
    for c in range(P):
        assert served[c] == min(q[c], left)
        left -= served[c]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 20), min_size=P, max_size=P), qlens,
       st.lists(st.floats(0, 30), min_size=P, max_size=P), st.integers(0, 40))
def test_admission_respects_threshold_and_shared_space(arr, q, thr, free):
    adm = np.asarray(_admit(jnp.array(arr, jnp.int32), jnp.array(q, jnp.int32),
                            jnp.array(thr, jnp.float32), jnp.int32(free)))
    assert (adm >= 0).all() and (adm <= arr).all()
    assert (np.array(q) + adm <= np.maximum(np.floor(thr), q)).all()
    assert adm.sum() <= free
    # work-conserving: a class is refused only when its threshold or the buffer is reached
    for c in range(P):
        if adm[c] < arr[c]:
            assert q[c] + adm[c] >= np.floor(thr[c]) or adm.sum() == free


R, F, M = 8, 4, 3
_enq = jax.jit(lambda q, cls, adm, rank, t: qm.enqueue(q, jnp.arange(F, dtype=jnp.int32), cls, adm,
                                                         jnp.zeros(F, jnp.int32), jnp.zeros(F, jnp.int32), rank, t))
_deq = jax.jit(lambda q, n: qm.dequeue(q, n, M))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.lists(st.integers(0, 2), min_size=F, max_size=F),
                          st.integers(0, M)), min_size=1, max_size=12))
def test_run_ring_is_a_fifo_of_packets(ops):
    """One class; each op enqueues flow f's adm packets (in slot order) then dequeues n."""
    q = qm.init_queue(1, R)
    ref = deque()
    for t, (adm, n) in enumerate(ops):
        adm = np.array(adm)
        room = R - len(ref)
        adm = np.minimum(adm, np.maximum(room - (np.cumsum(adm) - adm), 0))  # stay within capacity
        rank = np.cumsum(adm > 0) - (adm > 0)
        q = _enq(q, jnp.zeros(F, jnp.int32), jnp.array(adm, jnp.int32), jnp.array(rank, jnp.int32), jnp.int32(t))
        for f in range(F):
            ref.extend([f] * int(adm[f]))
        q, out = _deq(q, jnp.array([n], jnp.int32))
        got = []
        for flow, cnt in np.asarray(out[0][:, [qm.FLOW, qm.COUNT]]):
            got.extend([int(flow)] * int(cnt))
        want = [ref.popleft() for _ in range(min(n, len(ref)))]
        assert got == want
        assert int(q.pkts[0]) == len(ref)


_syn_lost = jax.jit(buffer.syn_lost)


def _syn_lost_reference(pos, arrivals, q, thr, occ, b):
    """Packet by packet: `arrivals` packets of one class reach the switch in turn, the SYN
    after `pos` of them; a packet is admitted while its class is below floor(thr) and the
    buffer below b; the SYN is lost when it finds either limit reached."""
    for i in range(arrivals + 1):
        full = q >= int(np.floor(thr)) or occ >= b
        if i == pos:
            return full
        if not full:
            q, occ = q + 1, occ + 1


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 12), st.integers(0, 30), st.floats(0, 30), st.integers(0, 20), st.integers(0, 60))
def test_lost_syn_is_judged_where_it_arrives_among_the_ticks_packets(arr, q, thr, other, b):
    # one class carries all of this tick's arrivals; `other` packets sit in other classes
    thr = float(np.float32(thr))  # the switch's threshold is float32: 1.9999999999999964 is 2
    q = min(q, max(int(np.floor(thr)), 0))
    occ = min(q + other, max(b, q))
    arrivals = jnp.array([arr, 0], jnp.int32)
    qs = jnp.array([q, other], jnp.int32)
    thrs = jnp.array([thr, 30.0], jnp.float32)
    adm = _admit(arrivals, qs, thrs, jnp.int32(max(b - occ, 0)))
    lost = [bool(_syn_lost(jnp.float32((pos + 0.5) / (arr + 1)), 0, arrivals, adm, qs, thrs, jnp.int32(occ),
                           jnp.int32(b))) for pos in range(arr + 1)]
    assert lost == [_syn_lost_reference(pos, arr, q, thr, occ, b) for pos in range(arr + 1)]


def test_syn_at_a_brim_full_queue_is_lost_when_it_follows_the_filling_packet():
    # the class sits one below its threshold and one packet arrives: a SYN behind that
    # packet finds the queue full, one ahead of it does not (judged at the tick's start,
    # it would never be lost)
    arrivals, qs, thr = jnp.array([1, 0], jnp.int32), jnp.array([9, 0], jnp.int32), jnp.array([10.0, 10.0])
    adm = _admit(arrivals, qs, thr, jnp.int32(100))
    us = (np.arange(1000) + 0.5) / 1000
    lost = np.array([bool(_syn_lost(jnp.float32(u), 0, arrivals, adm, qs, thr, jnp.int32(9), jnp.int32(100)))
                     for u in us])
    assert lost.mean() == 0.5 and not lost[us < 0.5].any()
