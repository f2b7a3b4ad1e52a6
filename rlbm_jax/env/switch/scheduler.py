"""Bottleneck scheduler: how the tick's k transmission slots are shared by the classes.

Round robin serves one packet per non-empty class in turn, starting from the
class after the last one served (per-packet RR, as a multi-queue QueueDisc
does); strict priority empties lower class indices first.  Both are
work-conserving.
"""
from __future__ import annotations

import jax.numpy as jnp


def strict_priority(queue_pkts, k):
    before = jnp.cumsum(queue_pkts) - queue_pkts
    return jnp.clip(k - before, 0, queue_pkts)


def round_robin(queue_pkts, k, rr_next, max_k=None):
    """Per-packet round robin over k slots (k may be traced when `max_k`, a static bound on
    it, is given).  Returns (served [P], next class to serve)."""
    P = queue_pkts.shape[0]
    levels = jnp.arange((k if max_k is None else max_k) + 1, dtype=jnp.int32)
    served_at = jnp.sum(jnp.minimum(queue_pkts[None, :], levels[:, None]), axis=1)  # [k+1]
    rounds = jnp.minimum(jnp.max(jnp.where(served_at <= k, levels, 0)), jnp.max(queue_pkts))
    base = jnp.minimum(queue_pkts, rounds)
    left = k - jnp.sum(base)
    eligible = queue_pkts > rounds
    cyc = (jnp.arange(P) - rr_next) % P  # position in this round's service order
    order_rank = jnp.sum(eligible[None, :] & (cyc[None, :] < cyc[:, None]), axis=1)
    extra = eligible & (order_rank < left)
    served = base + extra.astype(jnp.int32)
    # the next round starts after the class that sent the last packet
    last_round = jnp.where(jnp.any(extra), extra, (base == rounds) & (rounds > 0))
    last = jnp.max(jnp.where(last_round, cyc, -1))
    nxt = jnp.where(last >= 0, (rr_next + last + 1) % P, rr_next)
    return served, nxt.astype(jnp.int32)


def serve(queue_pkts, k, rr_next, scheduler_id, max_k=None):
    """k slots shared by round robin or strict priority; `max_k`: a static bound on a traced k."""
    rr, nxt = round_robin(queue_pkts, k, rr_next, max_k)
    sp = strict_priority(queue_pkts, k)
    is_rr = scheduler_id == 0
    return jnp.where(is_rr, rr, sp), jnp.where(is_rr, nxt, rr_next)
