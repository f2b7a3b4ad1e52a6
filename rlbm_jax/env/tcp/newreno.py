"""NewReno as ns-3.37's TcpNewReno: slow start +1 segment per ACK; congestion avoidance
max(1, floor(MSS^2 / cwnd)) whole bytes per ACK (a little under 1/cwnd segments); after a
loss or an echoed mark ssthresh = max(2, flight / 2)."""
from __future__ import annotations

import jax.numpy as jnp

from rlbm_jax.env.tcp.variant import Variant


class NewReno(Variant):
    def ssthresh(self, fl, flight, params):
        return jnp.maximum(2.0, flight / 2.0), {}

    def increase_window(self, fl, segs, calls, t, params, tick_s):
        # ns-3.37 works in integer bytes (its cwnd is a byte count, so cwnd * MSS is whole
        # here): integer division keeps it exact, and vmapped and single runs agree bit for bit
        mss_i = params.mss_bytes.astype(jnp.int32)
        cwnd_bytes = jnp.maximum(jnp.round(fl.cwnd * mss_i.astype(jnp.float32)).astype(jnp.int32), 1)
        inc = jnp.maximum(1, (mss_i * mss_i) // cwnd_bytes).astype(jnp.float32) / mss_i.astype(jnp.float32)
        return fl.cwnd + segs.astype(jnp.float32) * inc, {}


VARIANT = NewReno(name="newreno", native=True)
