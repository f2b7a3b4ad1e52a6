"""A sender at a set rate ("rate"): no congestion window, its pacer alone decides when a
segment leaves.  The rate starts at its flow group's `sender_rate_bps` and holds until a
sender agent moves it (knob `rate_gain` on its column `rate_pps`, Aurora's action,
`formulations.cc`); losses are
recovered as every sender here recovers them (fast retransmit, the RTO and go-back-N), at
the same rate.  The shape of PCC-RL's (Aurora's) sender: a rate, set every monitor interval,
and nothing that reacts to a loss by itself.

In ns-3.37's terms a congestion control with HasCongControl (as BBR): after every tick's
ACKs it sets the window (`MAX_CWND_PKTS`, never the limit) and keeps the pacing rate as it
is; GetSsThresh leaves ssthresh, and a timeout's window of 1 lasts until the next ACK.
"""
from __future__ import annotations

import jax.numpy as jnp

from rlbm_jax.env.tcp.variant import MAX_CWND_PKTS, Fields, Variant


def rate_pps(sender, params):
    """[F] the rate a rate sender of `sender`'s flow group starts at, in segments per second."""
    bps = params.of_sender(params.sender_rate_bps, params.group_sender_rate_bps, sender)
    return bps / (params.mss_bytes.astype(jnp.float32) * 8.0)


class Rate(Variant):
    def on_start(self, params, fresh):
        return {"rate_pps": rate_pps(fresh.sender, params)}

    def initial_rate_pps(self, fresh, params):
        return fresh.rate_pps

    def cong_control(self, fl, ev, params, tick_s):
        return jnp.full_like(fl.cwnd, MAX_CWND_PKTS), fl.rate_pps, {}

    def ssthresh(self, fl, flight, params):
        return fl.ssthresh, {}

    def increase_window(self, fl, segs, calls, t, params, tick_s):
        return fl.cwnd, {}


# its own column: the rate it holds (segments/s), which the knob moves and every tick's pacing rate is
VARIANT = Rate(name="rate", counts_segments=True, sets_pacing_rate=True, optional_columns=True,
               fields=Fields(floats={"rate_pps": 0.0}))
