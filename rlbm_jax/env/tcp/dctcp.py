"""DCTCP as ns-3.37's TcpDctcp: Linux Reno's growth (per segment ACKed: +1 in slow start,
+1 per window of segments in congestion avoidance), ECN on with every packet ECT (SYNs
too), and on an echoed mark or a loss ssthresh = (1 - alpha / 2) cwnd in whole bytes,
where alpha, starting at 1 (DctcpAlphaOnInit), moves by g = `params.dctcp_g` (1/16)
towards the fraction of segments ACKed with an echo over each window of data."""
from __future__ import annotations

import jax.numpy as jnp

from rlbm_jax.env.tcp.variant import Fields, Variant


class Dctcp(Variant):
    def on_start(self, params, fresh):
        return {"dctcp_alpha": 1.0}

    def ssthresh(self, fl, flight, params):
        ss = jnp.floor((1.0 - fl.dctcp_alpha / 2.0) * fl.cwnd * params.mss_bytes) / params.mss_bytes
        return jnp.maximum(ss, 1.0), {}

    def increase_window(self, fl, segs, calls, t, params, tick_s):
        # TcpLinuxReno: +1 segment per floor(cwnd) segments ACKed, several per ACK
        w = jnp.maximum(jnp.floor(fl.cwnd), 1.0)
        bank = fl.cwnd_cnt + segs
        steps = jnp.floor(bank.astype(jnp.float32) / w)
        return fl.cwnd + steps, {"cwnd_cnt": bank - (steps * w).astype(jnp.int32)}

    def pkts_acked(self, fl, ack, params, tick_s):
        # alpha, after this tick's cut (ns-3 cuts on the echo before PktsAcked): the
        # segments ACKed and those ACKed with an echo add up until the ACK of the data sent
        # before the window began; then alpha += g (fraction - alpha) and a window starts
        on = ack.has
        first = fl.dctcp_next_tx == 0
        acked, ce = fl.dctcp_acked + ack.acked, fl.dctcp_ce + ack.ce
        end = on & ~first & (ack.max_tx >= fl.dctcp_next_tx - 1)
        frac = ce.astype(jnp.float32) / jnp.maximum(acked, 1).astype(jnp.float32)
        alpha = jnp.where(end, (1.0 - params.dctcp_g) * fl.dctcp_alpha + params.dctcp_g * frac, fl.dctcp_alpha)
        return fl.ssthresh, {
            "dctcp_alpha": alpha,
            "dctcp_acked": jnp.where(on, jnp.where(end, 0, acked), fl.dctcp_acked),
            "dctcp_ce": jnp.where(on, jnp.where(end, 0, ce), fl.dctcp_ce),
            "dctcp_next_tx": jnp.where(on & (first | end), fl.tx_next, fl.dctcp_next_tx),
        }


VARIANT = Dctcp(
    name="dctcp", counts_segments=True, ecn_always=True,
    fields=Fields(
        floats={"dctcp_alpha": 0.0},  # estimated fraction of marked segments
        ints={"dctcp_acked": 0,  # segments ACKed in the current observation window
              "dctcp_ce": 0,  # ... of which ACKed with an echoed mark
              "dctcp_next_tx": 0},  # the window ends when this id is ACKed (0: not started)
    ),
)
