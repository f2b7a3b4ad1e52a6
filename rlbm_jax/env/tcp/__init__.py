"""TCP senders as in ns-3.37, vectorised over flow slots: the shared sender (`core`: loss
detection, recovery, RTO, ECN response) and the congestion controls registered in
`variants` (NewReno, CUBIC with HyStart, DCTCP, BBR), each in its own module.  See `variant`
for what a variant supplies and how a new one is added."""
from rlbm_jax.env.tcp import pacing
from rlbm_jax.env.tcp.core import (GO_BACK_N, RTT_CLOCK_NS3, RTT_CUMULATIVE, RTT_EVERY_ACK, SACK_ONLY, AckView,
                                   ect_syns, loss_ssthresh, on_acks, on_queue_drop, on_queue_drops, on_sent, on_timeouts,
                                   start_flow, wanted)
from rlbm_jax.env.tcp.flows import (BASE_FLOAT_FIELDS, BASE_INT_FIELDS, BIG_PKTS, BOOL_FIELDS, FLOAT_FIELDS,
                                    INT_FIELDS, FlowState, FlowTable, column, init_flows, pack, unpack, unsettled,
                                    wide, widths, with_column)
from rlbm_jax.env.tcp.variant import CWR, LOSS, MAX_CWND_PKTS, OPEN, RECOVERY, Fields, Variant, chosen
from rlbm_jax.env.tcp.variants import BBR, CUBIC, DCTCP, NEWRENO, RATE, TCP_NAMES, VARIANTS, by_name

__all__ = [
    "AckView", "BASE_FLOAT_FIELDS", "BASE_INT_FIELDS", "BBR", "BIG_PKTS", "pacing", "BOOL_FIELDS", "CUBIC", "CWR", "DCTCP", "FLOAT_FIELDS", "Fields", "FlowState", "FlowTable",
    "GO_BACK_N", "INT_FIELDS", "LOSS", "MAX_CWND_PKTS", "NEWRENO", "OPEN", "RATE", "RECOVERY", "RTT_CLOCK_NS3", "RTT_CUMULATIVE", "RTT_EVERY_ACK", "SACK_ONLY",
    "TCP_NAMES", "VARIANTS", "Variant", "by_name", "chosen", "column", "ect_syns", "init_flows", "loss_ssthresh", "on_acks",
    "on_queue_drop", "on_queue_drops", "on_sent", "on_timeouts", "pack", "start_flow", "unpack", "unsettled", "wanted", "wide", "widths", "with_column",
]
