"""Incast: query-response traffic, the partition-aggregate pattern of a data-centre switch.

Queries arrive as a Poisson process of `incast_query_rate_per_s` (until `arrival_stop_s`).
Each asks `incast_fan_in` distinct senders (consecutive, from a uniformly drawn first one)
for a response of `incast_response_bytes`, all at the query's time: the fan-in's
responses together are the burst that lands on the shared buffer.  A response is a flow
like any other (its class by its size, its handshake, its slot), timed from its query: its
FCT counts from the query's time.

The tick starts at most one flow, so a query's responses start on consecutive ticks, ahead
of any web-search arrival due then (which waits and keeps its own arrival time); their
first data leaves a handshake (a base RTT) after the query, so the responses of a fan-in
below the base RTT in ticks send their first windows in the same tick.  A query that falls
while the previous one's responses are still starting waits for them (its time kept).  A
response that finds every flow slot busy is refused and counted (`refused`, and in the
run's `flows_refused`).  Off (`incast_fan_in` 0, static) the tick compiles none of this.

Randomness comes from the run's seed through its own hash stream, so turning incast on
leaves the web-search arrivals' draws as they were.
"""
from __future__ import annotations

import jax.numpy as jnp
from flax import struct

from rlbm_jax.env import traffic

_STREAM = 0x2545F491  # the query stream's hash salt (the arrivals' is the bare seed)


@struct.dataclass
class IncastState:
    pending: jnp.ndarray  # [] int32 the current query's responses not yet started
    query_s: jnp.ndarray  # [] float32 the current query's time (its responses' start time)
    next_query_s: jnp.ndarray  # [] float32 the next query's time
    sender: jnp.ndarray  # [] int32 the next response's sender
    queries: jnp.ndarray  # [] int32 queries taken so far
    responses: jnp.ndarray  # [] int32 responses started
    refused: jnp.ndarray  # [] int32 responses refused (every flow slot busy)


def enabled(params) -> bool:
    """Whether the run has incast traffic (static)."""
    return params.incast_fan_in > 0


def _draw(seed, i, rate):
    """Query i's gap to the next query (s) and its first sender's uniform."""
    u = traffic.hash_uniform(seed ^ jnp.uint32(_STREAM), i, 2)
    return traffic.gap_from_uniform_s(u[0], rate), u[1]


def init(seed, params) -> IncastState | None:
    """The incast state of a run starting at t = 0 (None without incast)."""
    if not enabled(params):
        return None
    gap, _ = _draw(seed, jnp.zeros((), jnp.int32), params.incast_query_rate_per_s)
    z = jnp.zeros((), jnp.int32)
    return IncastState(pending=z, query_s=jnp.zeros((), jnp.float32), next_query_s=gap.astype(jnp.float32),
                       sender=z, queries=z, responses=z, refused=z)


def take_query(inc: IncastState, seed, now_s, tick_s, params):
    """The state after taking a query that falls in this tick while none is pending, and
    whether a response is due now: (state, due [] bool)."""
    S = params.num_senders
    fall = ((inc.next_query_s <= now_s + tick_s) & (inc.next_query_s < params.arrival_stop_s)
            & (inc.pending == 0))
    gap, u = _draw(seed, inc.queries + 1, params.incast_query_rate_per_s)
    first = jnp.minimum((u * S).astype(jnp.int32), S - 1)
    inc = inc.replace(
        pending=jnp.where(fall, params.incast_fan_in, inc.pending),
        query_s=jnp.where(fall, inc.next_query_s, inc.query_s),
        next_query_s=jnp.where(fall, inc.next_query_s + gap, inc.next_query_s).astype(jnp.float32),
        sender=jnp.where(fall, first, inc.sender),
        queries=inc.queries + fall.astype(jnp.int32))
    return inc, inc.pending > 0


def after_start(inc: IncastState, due, started, params) -> IncastState:
    """The state after this tick's response (due: one was; started: it took a slot, else it
    was refused): one fewer pending, the next sender in turn."""
    d = due.astype(jnp.int32)
    return inc.replace(pending=inc.pending - d, sender=(inc.sender + d) % params.num_senders,
                       responses=inc.responses + (due & started).astype(jnp.int32),
                       refused=inc.refused + (due & ~started).astype(jnp.int32))


def report(inc: IncastState | None) -> dict:
    """The run's incast counters (empty without incast): queries taken, responses started
    and refused, responses of taken queries still waiting to start."""
    if inc is None:
        return {}
    return {"incast_queries": inc.queries, "incast_responses": inc.responses, "incast_refused": inc.refused,
            "incast_pending": inc.pending}
