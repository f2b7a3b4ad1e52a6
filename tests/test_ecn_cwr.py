"""Which states an echoed CE mark cuts the window from (`ecn_cwr`).

RFC 3168 reduces the window once per window of data for losses and marks together; the
default ("open") enters CWR from OPEN only.  ns-3.37's TcpSocketBase::ReceivedAck enters
CWR on any ACK that moves the cumulative ACK and carries ECE, in every state but CWR: an
echo during fast recovery or after a timeout cuts again from the current window and ends
that recovery, and the receiver keeps echoing across a loss's cut (only a CWR-flagged
packet stops it).  `ecn_cwr="ns-3.37"` does the same (calibration/REPORT.md, section 6:
it is why ns-3 carries less than ours under RED with ECN)."""
import jax.numpy as jnp
import numpy as np
import pytest

from rlbm_jax.env import tcp
from rlbm_jax.env.params import make_params
from rlbm_jax.env.tcp.variant import CWR, LOSS, OPEN, RECOVERY

# one row per flow slot: state, cwnd, ssthresh, pipe, ecn_recover_tx, lost/retx holes, and
# one tick's ACKs: acked, of which duplicates, of which retransmissions, CE-marked, highest
# id ACKed, highest CE-marked id ACKed
#   name            state     cwnd ss  pipe rec_tx retx acked dup retx ce max_tx ce_tx
ROWS = [
    ("rec-echo",    RECOVERY, 90, 56, 70, 0,   2,   3,    2,  1,   1,  520,   515),
    ("rec-no-move", RECOVERY, 90, 56, 70, 0,   1,   2,    2,  0,   1,  520,   515),
    ("loss-retx",   LOSS,     6,  30, 4,  0,   2,   2,    0,  1,   1,  520,   515),
    ("loss-sack",   LOSS,     6,  30, 4,  0,   1,   2,    0,  0,   1,  520,   515),
    ("cwr",         CWR,      80, 56, 70, 590, 0,   3,    0,  0,   1,  520,   515),
    ("open-echo",   OPEN,     80, 1e9, 70, 0,  0,   3,    0,  0,   1,  520,   515),
]
NAMES = [r[0] for r in ROWS]


def _flows(rows):
    n = len(rows)
    col = lambda j, dt=jnp.int32: jnp.asarray([r[j] for r in rows], dt)  # noqa: E731
    fl = tcp.init_flows(n)
    return fl.replace(active=jnp.ones((n,), bool), state=col(1), cwnd=col(2, jnp.float32),
                      ssthresh=col(3, jnp.float32), outstanding=col(4), ecn_recover_tx=col(5),
                      retx_out=col(6), tx_next=jnp.full((n,), 600, jnp.int32), next_new=jnp.full((n,), 600, jnp.int32),
                      w_max=col(2, jnp.float32), srtt_s=jnp.full((n,), 0.02, jnp.float32),
                      rttvar_s=jnp.full((n,), 0.01, jnp.float32), recover_fs=col(4, jnp.float32),
                      rto_deadline=jnp.full((n,), 10**6, jnp.int32))


def _tick(fl, rows, p, t=1000):
    col = lambda j: jnp.asarray([r[j] for r in rows], jnp.int32)  # noqa: E731
    acked, dup, retx, ce, max_tx, ce_tx = (col(j) for j in range(7, 13))
    return tcp.on_acks(fl, jnp.int32(t), acked, retx, dup, max_tx, jnp.full(acked.shape, 0.02, jnp.float32),
                       p, p.tick_s, ce_acked=ce, ce_max_tx=ce_tx)


@pytest.mark.parametrize("mode", ["open", "ns-3.37"])
def test_which_states_an_echo_cuts_from(mode):
    p = make_params(tcp="cubic", ecn=True, ecn_cwr=mode)
    fl = _flows(ROWS)
    out = _tick(fl, ROWS, p)
    state = dict(zip(NAMES, np.asarray(out.state)))
    ss = dict(zip(NAMES, np.asarray(out.ssthresh)))
    # both: an echo in OPEN cuts (CUBIC: 0.7 of the window); CWR lasts until the ACK of
    # its first packet, and a mark sent before it is the same event
    assert state["open-echo"] == CWR and ss["open-echo"] == 56
    assert state["cwr"] == CWR and ss["cwr"] == 56
    if mode == "open":
        # fast recovery and LOSS go on, their ssthresh untouched
        assert state["rec-echo"] == RECOVERY and ss["rec-echo"] == 56
        assert state["loss-retx"] == LOSS and ss["loss-retx"] == 30
        assert not np.asarray(out.ece_pending).any()
    else:
        # an ACK that moves the cumulative ACK and echoes a mark ends fast recovery with a
        # second cut from the current window (CUBIC: 0.7 x 90)
        assert state["rec-echo"] == CWR and ss["rec-echo"] == 63
        # after a timeout only a retransmission moves the cumulative ACK over the hole
        assert state["loss-retx"] == CWR and ss["loss-retx"] == 4  # floor(6 x 0.7)
        assert state["loss-sack"] == LOSS and ss["loss-sack"] == 30
        # CWR starts at the next packet to send: the echo of a later mark is a new event
        assert np.asarray(out.ecn_recover_tx)[NAMES.index("rec-echo")] == 600
        # duplicate ACKs carry the echo too; it waits for the ACK that moves
        pending = dict(zip(NAMES, np.asarray(out.ece_pending)))
        assert pending["rec-no-move"] and pending["loss-sack"] and not pending["rec-echo"]
        assert state["rec-no-move"] == RECOVERY


def test_a_pending_echo_cuts_at_the_next_cumulative_ack():
    """ns-3.37: a mark SACKed during fast recovery is echoed on every later ACK, and the
    first that moves the cumulative ACK (the hole's retransmission arriving), even without a
    mark of its own, enters CWR; by default the recovery ends as usual."""
    row = ROWS[NAMES.index("rec-no-move")]
    later = (*row[:7], 1, 0, 1, 0, 521, -1)  # the retransmission's ACK, no CE of its own
    for mode, want in (("open", RECOVERY), ("ns-3.37", CWR)):
        p = make_params(tcp="newreno", ecn=True, ecn_cwr=mode)
        fl = _tick(_flows([row]), [row], p)
        fl = fl.replace(retx_out=jnp.asarray([2], jnp.int32))  # another hole still to repair
        fl = _tick(fl, [later], p, t=1001)
        assert int(fl.state[0]) == want, mode


def test_a_loss_cut_keeps_the_echo_in_ns3_mode():
    """A loss found in OPEN cuts; by default the echo of a mark sent before that cut is the
    same congestion event (ecn_recover_tx moves to the cut), in ns-3.37 it is not (the
    receiver stops echoing only at a CWR-flagged packet), and a mark echoed on the same
    tick's cumulative ACK takes the loss's place (ns-3.37 reads ECE before the duplicate ACKs)."""
    row = ("open-loss", OPEN, 80, 1e9, 70, 0, 0, 4, 3, 0, 0, 520, -1)
    marked = (*row[:10], 1, 520, 515)
    for mode in ("open", "ns-3.37"):
        p = make_params(tcp="cubic", ecn=True, ecn_cwr=mode)
        fl = _flows([row, marked]).replace(undet=jnp.asarray([1, 1], jnp.int32),
                                          undet_tx=jnp.asarray([510, 510], jnp.int32))
        out = _tick(fl, [row, marked], p)
        assert int(out.state[0]) == RECOVERY
        assert int(out.ecn_recover_tx[0]) == (600 if mode == "open" else 0)
        assert int(out.state[1]) == (RECOVERY if mode == "open" else CWR)
