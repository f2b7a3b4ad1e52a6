"""PRR's send count in fast recovery (RFC 6937), exact and as ns-3.37 computes it, and its
slow-start reduction bound (`prr_ssrb`).

ns-3.37's TcpPrrRecovery::DoRecovery multiplies the bytes delivered since the recovery
began by ssthresh in bytes as two 32-bit unsigned integers; past 2^32 the product wraps
and the send count it yields falls below what was already sent, so the sender stays
silent until its flight is down to ssthresh.  `prr="ns-3.37"` reproduces that product
(calibration/REPORT.md, section 6: it is why ns-3's lone CUBIC flow under RED does not
take a second cut right after its first).  Once the flight is at or below ssthresh, RFC 6937
lets every ACK send what it delivered plus a segment; ns-3.37 (as Linux) adds the segment only
on an ACK of retransmitted data (`prr_ssrb="ns-3.37"`; REPORT section 6: with the RFC's bound a
flow whose window was cut below its flight sends two segments per duplicate ACK into the
queue it just overflowed)."""
import jax.numpy as jnp
import numpy as np
from hypothesis import given, settings, strategies as st

from rlbm_jax.env import tcp
from rlbm_jax.env.params import make_params
from rlbm_jax.env.tcp.variant import CWR, RECOVERY

MSS = 1000


def _after_acks(prr, pipe0, ssthresh, recover_fs, delivered0, out0, acked, acked_retx=None, prr_ssrb="rfc6937",
                state=RECOVERY):
    """cwnd after one tick of `acked` ACKed segments in RECOVERY, `acked_retx` of them
    retransmissions (default none: all SACKed), the rest duplicate ACKs (NewReno, a hole
    still being repaired, so the episode goes on)."""
    p = make_params(tcp="newreno", mss_bytes=MSS, prr=prr, prr_ssrb=prr_ssrb)
    n = len(pipe0)
    fl = tcp.init_flows(n)
    i32 = lambda x: jnp.asarray(x, jnp.int32)  # noqa: E731
    fl = fl.replace(state=jnp.full((n,), state, jnp.int32), outstanding=i32(pipe0),
                    ecn_recover_tx=jnp.full((n,), 20_000, jnp.int32),  # (CWR lasts past this tick's ACKs)
                    ssthresh=jnp.asarray(ssthresh, jnp.float32), cwnd=jnp.asarray(pipe0, jnp.float32),
                    recover_fs=jnp.asarray(recover_fs, jnp.float32), prr_delivered=i32(delivered0),
                    prr_out=i32(out0), srtt_s=jnp.full((n,), 0.02, jnp.float32),
                    rttvar_s=jnp.full((n,), 0.01, jnp.float32))
    a = i32(acked)
    r = jnp.zeros_like(a) if acked_retx is None else i32(acked_retx)
    fl = fl.replace(retx_out=r + 1)  # one retransmission still out after this tick's
    out = tcp.on_acks(fl, jnp.int32(1000), a, r, a - r, jnp.full_like(a, 10_000),
                      jnp.full((n,), 0.02, jnp.float32), p, p.tick_s)
    return np.asarray(out.cwnd), np.asarray(out.outstanding)


@settings(max_examples=25, deadline=None)
@given(st.lists(st.tuples(st.integers(150, 600), st.floats(0.5, 0.9), st.integers(0, 200), st.integers(1, 30)),
                min_size=8, max_size=8))
def test_prr_send_count_matches_rfc6937_and_ns3_37_arithmetic(cases):
    pipe0 = np.array([c[0] for c in cases])
    ssthresh = np.floor(pipe0 * np.array([c[1] for c in cases]))
    recover_fs = pipe0 + 1
    delivered0 = np.array([c[2] for c in cases])
    acked = np.array([c[3] for c in cases])
    # what was sent so far: the exact count up to delivered0 (the sender kept to it)
    out0 = np.ceil(delivered0 * ssthresh / recover_fs).astype(int)
    pipe = pipe0 - acked
    proportional = pipe > ssthresh  # (the other branch, SSRB, is the same in both)
    d = delivered0 + acked

    cwnd, left = _after_acks("exact", pipe0, ssthresh, recover_fs, delivered0, out0, acked)
    assert np.array_equal(left, pipe)
    exact = np.maximum(np.ceil(d * ssthresh / recover_fs) - out0, 0)
    assert np.array_equal(cwnd[proportional], (pipe + exact)[proportional])

    cwnd3, _ = _after_acks("ns-3.37", pipe0, ssthresh, recover_fs, delivered0, out0, acked)
    wrapped = [(int(di) * MSS * int(si) * MSS) % 2**32 for di, si in zip(d, ssthresh)]  # uint32 product
    ns3_bytes = np.array([-(-w // (int(r) * MSS)) for w, r in zip(wrapped, recover_fs)]) - out0 * MSS
    ns3 = np.maximum(np.floor(ns3_bytes / MSS), 0)
    # float32 rounding of the wrapped product may move the byte count by one part in 2^24
    assert np.all(np.abs(cwnd3 - (pipe + ns3))[proportional] <= 1)
    small = d * MSS * ssthresh * MSS < 2**32  # no wrap: both agree, but for ns-3's byte rounding
    assert np.all(np.abs(cwnd3 - cwnd)[proportional & small] <= 1)


def test_ns3_prr_silences_a_large_window_after_a_dozen_acks():
    """The case the calibration met: ssthresh 331 of a 471-packet flight (1,000-byte
    segments); from 13 delivered, 13,000 x 331,000 bytes passes 2^32 and the sender stops,
    where exact PRR keeps sending 0.7 segment per segment delivered."""
    n = 6
    delivered0 = np.array([0, 5, 9, 13, 40, 100])
    out0 = np.ceil(delivered0 * 331 / 471).astype(int)
    pipe0 = np.full(n, 471) - delivered0
    args = (pipe0, np.full(n, 331.0), np.full(n, 471.0), delivered0, out0, np.full(n, 3))
    cwnd, left = _after_acks("exact", *args)
    cwnd3, _ = _after_acks("ns-3.37", *args)
    sent_exact, sent_ns3 = cwnd - left, cwnd3 - left
    assert np.all(sent_exact >= 2)  # 3 delivered: 2-3 sent (0.7 per segment delivered)
    # below the wrap: within the segment ns-3 loses to its byte arithmetic (it sends whole
    # segments of a byte count that rounds up to the byte, not to the segment)
    assert np.all(sent_ns3[:3] >= 1) and np.all(np.abs(sent_ns3[:3] - sent_exact[:3]) <= 1)
    assert np.all(sent_ns3[3:] == 0)  # past it: silent


@settings(max_examples=25, deadline=None)
@given(st.lists(st.tuples(st.integers(20, 400), st.floats(1.05, 2.0), st.integers(0, 200), st.integers(0, 30),
                          st.integers(1, 30), st.integers(0, 3)), min_size=8, max_size=8))
def test_ssrb_adds_its_segment_only_on_an_ack_of_retransmitted_data_as_ns3_37(cases):
    """Flight at or below ssthresh (a window cut below what is in flight, as after an
    overflow that lost half a slow-start round): RFC 6937 sends min(ssthresh - pipe,
    max(delivered - out, acked) + 1) on every ACK; ns-3.37 sends min(ssthresh - pipe, acked)
    on duplicate ACKs and the RFC's count on an ACK of a retransmission."""
    pipe0 = np.array([c[0] for c in cases])
    acked = np.minimum(np.array([c[4] for c in cases]), pipe0 - 10)
    pipe = pipe0 - acked
    ssthresh = np.floor(pipe * np.array([c[1] for c in cases]))  # above the flight: the SSRB branch
    delivered0 = np.array([c[2] for c in cases])
    out0 = np.maximum(delivered0 - np.array([c[3] for c in cases]), 0)  # delivered - out >= 0
    retx = np.minimum(np.array([c[5] for c in cases]), acked)
    recover_fs = pipe0 * 2
    args = (pipe0, ssthresh, recover_fs, delivered0, out0, acked)
    d = delivered0 + acked
    rfc = np.minimum(ssthresh - pipe, np.maximum(d - out0, acked) + 1)
    for r in (np.zeros_like(retx), retx):
        cwnd, left = _after_acks("exact", *args, acked_retx=r)
        assert np.array_equal(left, pipe)
        assert np.array_equal(cwnd - left, rfc)  # the RFC: the segment on every ACK
        cwnd3, _ = _after_acks("exact", *args, acked_retx=r, prr_ssrb="ns-3.37")
        ns3 = np.where(r > 0, rfc, np.minimum(ssthresh - pipe, acked))
        assert np.array_equal(cwnd3 - left, ns3)


def test_ssrb_ns3_refills_a_halved_window_one_for_one_on_duplicate_acks():
    """The case the calibration met: a slow-start round that overflowed the buffer lost
    every other segment, so the flight (100) is below ssthresh (140).  On a tick of 4
    duplicate ACKs RFC 6937 sends 5, ns-3.37 sends 4 (the queue stays where it was);
    on an ACK of a retransmission both send delivered + 1, but for ns-3.37 in CWR."""
    one = lambda v: np.array([v])  # noqa: E731
    args = (one(104), one(140.0), one(200.0), one(10), one(10), one(4))
    cwnd, left = _after_acks("exact", *args)
    cwnd3, _ = _after_acks("exact", *args, prr_ssrb="ns-3.37")
    assert (cwnd - left).tolist() == [5.0] and (cwnd3 - left).tolist() == [4.0]
    cwnd, left = _after_acks("exact", *args, acked_retx=one(1))
    cwnd3, _ = _after_acks("exact", *args, acked_retx=one(1), prr_ssrb="ns-3.37")
    assert (cwnd - left).tolist() == [5.0] and (cwnd3 - left).tolist() == [5.0]
    # in CWR ns-3.37 never sets m_isRetransDataAcked: a resent hole's ACK sends what it delivered
    cwnd, left = _after_acks("exact", *args, acked_retx=one(1), state=CWR)
    cwnd3, _ = _after_acks("exact", *args, acked_retx=one(1), prr_ssrb="ns-3.37", state=CWR)
    assert (cwnd - left).tolist() == [5.0] and (cwnd3 - left).tolist() == [4.0]
