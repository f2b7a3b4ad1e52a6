// The simulator's tick as one C++ function per env: the "native" backend.
//
// It computes exactly what rlbm_jax/env/sim.py's `tick` computes (that JAX tick is the
// reference; tests/test_native.py compares the two), phase by phase, with real branches:
// only the flows that have work in a tick are touched.  One call runs `n_ticks` ticks
// of every env of the batch; the state lives in two flat buffers (int32 and float32)
// whose layout, like the parameters', is generated from the Python structures
// (layout.h, written by rlbm_jax/env/backends/native/__init__.py), so a field added there
// without its use here fails to compile rather than to agree.
//
// Floating-point: every float expression follows the JAX tick's operations in float32
// as XLA:CPU compiles them: an array divided by a per-env scalar becomes a multiplication
// by the scalar's reciprocal (`div_b`), and a product added within one fused loop becomes
// a fused multiply-add (`fma_x`); everything else is compiled without contraction.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "layout.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace {

constexpr int OPEN = 0, RECOVERY = 1, LOSS = 2, CWR = 3;
constexpr int CUBIC = TCP_cubic;  // (layout.h: the TCP registry)
constexpr int GO_BACK_N = C_rto_recovery_go_back_n, RTT_CUMULATIVE = C_rtt_samples_cumulative;  // (layout.h)
constexpr int REARM_CUMULATIVE = C_rto_rearm_cumulative;
constexpr int ECN_CWR_NS3 = C_ecn_cwr_ns_3_37;
// run record fields (queue.py)
constexpr int FLOW = 0, COUNT = 1, NRETX = 2, TX0 = 3, ENQ = 4, NSPUR = 5, NCE = 6, RUN_FIELDS = 7;
constexpr int MAX_E = 64;   // event slots: k + 3
constexpr int MAX_P = 16;   // classes
constexpr int MAX_S = 1024; // senders
constexpr int MAX_FLOWS = 1024;  // flow slots with per-flow queues (fq)
constexpr float INF = std::numeric_limits<float>::infinity();

inline int32_t fmod_i(int32_t a, int32_t b) { int32_t r = a % b; return r < 0 ? r + b : r; }
inline int32_t fdiv_i(int32_t a, int32_t b) { int32_t q = a / b; return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q; }
inline int32_t clip_i(int32_t x, int32_t lo, int32_t hi) { return std::min(std::max(x, lo), hi); }
inline float maxf(float a, float b) { return std::isnan(a) || std::isnan(b) ? NAN : (a > b ? a : b); }
inline float minf(float a, float b) { return std::isnan(a) || std::isnan(b) ? NAN : (a < b ? a : b); }
inline int32_t f2i(float x) { return static_cast<int32_t>(x); }
// float -> uint32 as XLA converts (saturating; NaN -> 0)
inline uint32_t f2i_sat_u(float x) {
  if (!(x > 0.0f)) return 0u;
  if (x >= 4294967295.0f) return std::numeric_limits<uint32_t>::max();
  return static_cast<uint32_t>(x);
}

// float -> int32 as XLA converts (saturating; NaN -> 0)
inline int32_t f2i_sat(float x) {
  if (std::isnan(x)) return 0;
  if (x >= 2147483647.0f) return std::numeric_limits<int32_t>::max();
  if (x <= -2147483648.0f) return std::numeric_limits<int32_t>::min();
  return static_cast<int32_t>(x);
}
// an index as JAX's indexing takes it: a negative one counts from the end (fq's class counts
// follow the flow slots' classes, and go below 0 where a slot's new flow is of another class than
// the packets its queue still holds)
inline int32_t wrap_index(int32_t i, int32_t n) { return i < 0 ? i + n : i; }
// x / y where XLA sees an array divided by a broadcast scalar: x * (1 / y)
inline float div_b(float x, float y) { return x * (1.0f / y); }
// x * y + z where XLA fuses the product into the sum
inline float fma_x(float x, float y, float z) { return std::fma(x, y, z); }

struct Dims {
  int F, P, S, R, L, K, E, LOG, M, NTAB, Q, C;  // Q, C: per-flow queues and their ring (flowqueue.py)
};

struct Row {
  int32_t i[FI_COUNT];
  float f[FF_COUNT];
};

#define RI(r, n) (r).i[FI_##n]
#define RF(r, n) (r).f[FF_##n]

// One env's state and parameters, as pointers into the flat buffers.
struct Env {
  const Dims& d;
  int32_t* si;
  float* sf;
  const int32_t* pi;
  const float* pf;
  const int64_t* so;  // state offsets, by leaf
  const int64_t* po;  // parameter offsets, by leaf

  int32_t* I(int leaf) const { return si + so[leaf]; }
  float* Fl(int leaf) const { return sf + so[leaf]; }
  int32_t Pi(int leaf, int j = 0) const { return pi[po[leaf] + j]; }
  float Pf(int leaf, int j = 0) const { return pf[po[leaf] + j]; }

  int32_t& tab_i(int field, int slot) const { return I(L_flows_ints)[field * d.F + slot]; }
  float& tab_f(int field, int slot) const { return Fl(L_flows_floats)[field * d.F + slot]; }
  Row row(int slot) const {
    Row r;
    for (int f = 0; f < FI_COUNT; ++f) r.i[f] = tab_i(f, slot);
    for (int f = 0; f < FF_COUNT; ++f) r.f[f] = tab_f(f, slot);
    return r;
  }
  void set_row(int slot, const Row& r) const {
    for (int f = 0; f < FI_COUNT; ++f) tab_i(f, slot) = r.i[f];
    for (int f = 0; f < FF_COUNT; ++f) tab_f(f, slot) = r.f[f];
  }
};

// ---- traffic ------------------------------------------------------------------------
inline float hash_uniform(uint32_t seed, uint32_t counter, uint32_t i) {
  uint32_t x = seed ^ (counter * 0x9E3779B9u);
  x = x + (i + 1u) * 0x85EBCA6Bu;
  for (int r = 0; r < 2; ++r) {
    x = x ^ (x >> 16);
    x = x * 0x7FEB352Du;
    x = x ^ (x >> 15);
    x = x * 0x846CA68Bu;
    x = x ^ (x >> 16);
  }
  return static_cast<float>(x >> 8) * (1.0f / 16777216.0f);
}

float sample_size_bytes(const Env& e, float u) {
  const int n = e.d.NTAB;
  const float* cdf = e.pf + e.po[PL_cdf_prob];
  const float* size = e.pf + e.po[PL_cdf_size_bytes];
  u = u * cdf[n - 1];
  u = maxf(u, cdf[0]);
  int cnt = 0;
  for (int j = 0; j < n; ++j) cnt += cdf[j] <= u;
  int idx = clip_i(cnt - 1, 0, n - 2);
  float c0 = cdf[idx], c1 = cdf[idx + 1], s0 = size[idx], s1 = size[idx + 1];
  float frac = c1 > c0 ? (u - c0) / maxf(c1 - c0, 1e-12f) : 0.0f;
  return maxf(fma_x(frac, s1 - s0, s0), 1.0f);
}

// ---- TCP ----------------------------------------------------------------------------
inline int32_t ticks_of(float seconds, float tick_s) { return f2i(std::ceil(div_b(seconds, tick_s))); }

inline float rto_of(const Env& e, float srtt, float rttvar) {
  float rto = srtt + maxf(e.Pf(PL_rto_granularity_s), 4.0f * rttvar);
  return minf(maxf(rto, e.Pf(PL_min_rto_s)), e.Pf(PL_max_rto_s));
}

inline int32_t unsettled(const Row& r) {
  return RI(r, outstanding) + RI(r, ghost) + RI(r, retx_out) + RI(r, lost_q) + RI(r, retx_dropped);
}

// ns-3.37 GetSsThresh: (ssthresh, CUBIC's W_max) after a loss
void loss_ssthresh(const Env& e, float cwnd, float w_max, float flight, float* ss, float* wm) {
  bool is_cubic = e.Pi(PL_tcp_id) == CUBIC;
  float beta = e.Pf(PL_cubic_beta);
  float reno = maxf(2.0f, flight / 2.0f);
  float seg = std::floor(cwnd);
  float cub = maxf(2.0f, std::floor(seg * beta));
  bool fc = e.Pi(PL_cubic_fast_convergence) != 0 && seg < w_max;
  float w_new = fc ? std::floor(seg * (1.0f + beta) / 2.0f) : seg;
  *ss = is_cubic ? cub : reno;
  *wm = is_cubic ? w_new : w_max;
}

struct CubicCnt { float cnt; int32_t epoch; float k, origin; };

CubicCnt cubic_cnt(const Env& e, float cwnd, float w_max, int32_t epoch_start, float delay_min, float cubic_k,
                   float cubic_origin, int32_t t) {
  float c = e.Pf(PL_cubic_c);
  float seg = std::floor(cwnd);
  bool new_epoch = epoch_start < 0;
  bool below = w_max > seg;
  float k_new = below ? std::cbrt(div_b(maxf(w_max - seg, 0.0f), c)) : 0.0f;
  float origin_new = below ? w_max : seg;
  CubicCnt o;
  o.epoch = new_epoch ? t : epoch_start;
  o.k = new_epoch ? k_new : cubic_k;
  o.origin = new_epoch ? origin_new : cubic_origin;
  float el = fma_x(static_cast<float>(t - o.epoch), e.Pf(PL_tick_s), delay_min) - o.k;
  float a = std::fabs(el);
  float delta = std::floor(c * (a * (a * a)));
  float target = el < 0 ? o.origin - delta : o.origin + delta;
  float cnt = target > seg ? std::floor(seg / maxf(target - seg, 1.0f)) : 100.0f * seg;
  if (w_max == 0.0f && cnt > 20.0f) cnt = 20.0f;
  o.cnt = maxf(cnt, 2.0f);
  return o;
}

struct AckIn { int32_t acked, acked_retx, n_dup, max_tx, spur; float rtt_s; int32_t ce, ce_max_tx; };

// tcp.on_acks for one event entry
void on_acks(const Env& e, Row& r, int32_t t, const AckIn& a) {
  const float tick_s = e.Pf(PL_tick_s);
  const bool is_cubic = e.Pi(PL_tcp_id) == CUBIC;
  const Row o = r;  // the row as it was (fl.* in the JAX code)
  const int32_t acked = a.acked, acked_retx = a.acked_retx, n_dup = a.n_dup, max_tx = a.max_tx;
  const float rtt_s = a.rtt_s;
  const bool has = acked > 0;
  if (!has) {  // no ACK: only the receiver's delayed-ACK flush and the window floor apply
    bool two = e.Pi(PL_delayed_ack) == 2;
    int32_t in_order = -n_dup;
    int32_t parity = fmod_i(RI(o, da_parity) + in_order, 2);
    bool flush = two && parity == 1 && ((RI(o, outstanding) + RI(o, ghost) <= 0) || a.spur > 0);
    RI(r, da_parity) = (two && !flush) ? parity : 0;
    RF(r, cwnd) = maxf(RF(o, cwnd), 1.0f);
    return;
  }

  int32_t g = std::min(acked, RI(o, ghost));
  int32_t ahead = std::min(g, RI(o, gbn_ahead));
  int32_t gbn_ahead = RI(o, gbn_ahead) - ahead;
  int32_t gbn_left = RI(o, gbn_left) - std::min(g - ahead, RI(o, gbn_left));
  int32_t ghost = RI(o, ghost) - g;
  int32_t outstanding = RI(o, outstanding) - (acked - g) - ahead;
  int32_t retx_out = RI(o, retx_out) - acked_retx;
  int32_t n_acked = RI(o, acked) + acked;

  bool cumulative = e.Pi(PL_rtt_samples_id) == RTT_CUMULATIVE;
  bool sample = has && (!cumulative || (RI(o, state) == OPEN && acked - n_dup - acked_retx > 0));
  bool first = RF(o, srtt_s) <= 0.0f;
  float rttvar = first ? rtt_s / 2.0f : fma_x(0.75f, RF(o, rttvar_s), 0.25f * std::fabs(RF(o, srtt_s) - rtt_s));
  float srtt = first ? rtt_s : fma_x(0.875f, RF(o, srtt_s), 0.125f * rtt_s);
  srtt = sample ? srtt : RF(o, srtt_s);
  rttvar = sample ? rttvar : RF(o, rttvar_s);
  bool recompute = cumulative ? (has && n_dup < acked) : has;
  float rto_s = recompute ? rto_of(e, srtt, rttvar) : RF(o, rto_s);
  float delay_min = (has && (RF(o, delay_min_s) <= 0.0f || rtt_s < RF(o, delay_min_s))) ? rtt_s : RF(o, delay_min_s);

  int32_t in_order = acked - n_dup;
  bool two = e.Pi(PL_delayed_ack) == 2;
  int32_t pairs = fdiv_i(RI(o, da_parity) + in_order, 2);
  int32_t parity = fmod_i(RI(o, da_parity) + in_order, 2);
  bool flush = two && parity == 1 && ((outstanding + ghost <= 0) || a.spur > 0);
  int32_t n_acks = two ? n_dup + pairs + (flush ? 1 : 0) : acked;
  int32_t da_parity = (two && !flush) ? parity : 0;

  // (in CWR the holes SACKs reveal are resent within PRR's window, with no second cut)
  const int32_t state_o = RI(o, state);
  bool detect = has && RI(o, undet) > 0 && max_tx >= RI(o, undet_tx) + e.Pi(PL_dupthresh) &&
                (state_o == OPEN || state_o == CWR);
  int32_t lost_q = RI(o, lost_q) + (detect ? RI(o, undet) : 0);
  outstanding = outstanding - (detect ? RI(o, undet) : 0);
  int32_t undet = detect ? 0 : RI(o, undet);

  // ECN (core.on_acks): an echoed CE mark on a packet sent since the last cut enters CWR
  const bool ecn = e.Pi(PL_ecn) != 0;
  const bool ns3_cwr = e.Pi(PL_ecn_cwr_id) == ECN_CWR_NS3;
  bool echo = ecn && has && a.ce > 0 && a.ce_max_tx >= RI(o, ecn_recover_tx);
  bool holes = (RI(o, lost_q) + RI(o, retx_out) + RI(o, retx_dropped)) > 0;
  bool moves = has && ((state_o == LOSS && holes) ? acked_retx > 0 : n_dup < acked);
  bool echo_ns3 = (RI(o, ece_pending) != 0 || echo) && ns3_cwr;
  bool cwr_ns3 = echo_ns3 && moves && state_o != CWR;
  bool enter = detect && state_o == OPEN && !cwr_ns3;
  bool enter_cwr = ns3_cwr ? cwr_ns3 : (echo && n_dup < acked && state_o == OPEN && !enter);
  bool ece_pending = echo_ns3 && !enter_cwr;
  bool cut = enter || enter_cwr;
  float ss_new, wmax_new;
  loss_ssthresh(e, RF(o, cwnd), RF(o, w_max), static_cast<float>(outstanding), &ss_new, &wmax_new);
  float ssthresh = cut ? ss_new : RF(o, ssthresh);
  float w_max = (cut && is_cubic) ? wmax_new : RF(o, w_max);
  int32_t epoch_start = cut ? -1 : RI(o, epoch_start);
  int32_t state = enter ? RECOVERY : (enter_cwr ? CWR : state_o);
  int32_t prr_delivered = cut ? 0 : RI(o, prr_delivered);
  int32_t prr_out = cut ? 0 : RI(o, prr_out);
  float recover_fs = cut ? static_cast<float>(outstanding + lost_q) : RF(o, recover_fs);
  int32_t ecn_recover_tx = ((ns3_cwr ? enter_cwr : cut) && ecn) ? RI(o, tx_next) : RI(o, ecn_recover_tx);

  // window growth in OPEN and LOSS
  bool grow = has && (state == OPEN || state == LOSS) && !enter;
  int32_t growth = (is_cubic ? acked : n_acks) - (state == OPEN ? n_dup : 0);
  growth = std::max(growth, 0);
  growth = (state == LOSS && holes) ? std::min(growth, acked_retx) : growth;
  float growth_acks = static_cast<float>(growth);
  float cwnd = RF(o, cwnd);
  float calls = static_cast<float>(std::max(n_acks - (state == OPEN ? n_dup : 0), 1));
  float per_ack = std::ceil(growth_acks / calls);
  float room = maxf(std::ceil(ssthresh - cwnd), 0.0f) + (is_cubic ? maxf(per_ack - 1.0f, 0.0f) : 0.0f);
  float ss_acks = cwnd < ssthresh ? minf(growth_acks, room) : 0.0f;
  float ca_acks = growth_acks - ss_acks;
  float cwnd_ss = cwnd + ss_acks;
  bool repaired = lost_q == 0 && retx_out == 0 && RI(o, retx_dropped) == 0;
  bool leave_rec = has && state == RECOVERY && repaired;
  bool exit_c = leave_rec && is_cubic;
  float cwnd_in = exit_c ? ssthresh : cwnd_ss;
  CubicCnt cc = cubic_cnt(e, cwnd_in, w_max, exit_c ? -1 : epoch_start, delay_min, RF(o, cubic_k_s),
                          RF(o, cubic_origin), t);
  int32_t mss_i = e.Pi(PL_mss_i);
  int32_t cwnd_bytes = std::max(f2i(std::nearbyint(cwnd_ss * static_cast<float>(mss_i))), 1);
  float inc_reno = div_b(static_cast<float>(std::max(1, (mss_i * mss_i) / cwnd_bytes)), static_cast<float>(mss_i));
  bool ca_on = grow && ca_acks > 0.0f;
  // CUBIC's IncreaseWindow in congestion avoidance (tcp._cubic_grow)
  int32_t segs = f2i(exit_c ? std::ceil(recover_fs) : ca_acks);
  float ccalls = exit_c ? 1.0f : calls;
  int32_t bank = RI(o, cwnd_cnt) + segs;
  float steps = segs > 0 ? minf(std::floor(static_cast<float>(bank) / cc.cnt), ccalls) : 0.0f;
  float cwnd_cubic = cwnd_in + steps;
  bank = bank - f2i(steps * cc.cnt);
  float cwnd_grown = is_cubic ? cwnd_cubic : fma_x(ca_acks, inc_reno, cwnd_ss);
  cwnd = grow ? cwnd_grown : cwnd;
  int32_t cwnd_cnt = (ca_on && is_cubic) ? bank : RI(o, cwnd_cnt);
  epoch_start = (ca_on && is_cubic) ? cc.epoch : epoch_start;
  float cubic_k = (ca_on && is_cubic) ? cc.k : RF(o, cubic_k_s);
  float cubic_origin = (ca_on && is_cubic) ? cc.origin : RF(o, cubic_origin);

  // HyStart (CUBIC's own: its rounds are tracked for CUBIC flows only)
  bool round_over = has && is_cubic && max_tx >= RI(o, hs_round_end_tx);
  int32_t hs_round_end = round_over ? RI(o, tx_next) : RI(o, hs_round_end_tx);
  int32_t hs_round_start = round_over ? t : RI(o, hs_round_start);
  int32_t hs_last_ack = round_over ? t : RI(o, hs_last_ack);
  float hs_curr = round_over ? INF : RF(o, hs_curr_rtt_s);
  int32_t hs_samples = round_over ? 0 : RI(o, hs_samples);
  bool hs_on = has && is_cubic && e.Pi(PL_hystart) != 0 && state == OPEN && cwnd < ssthresh &&
               cwnd >= e.Pf(PL_hystart_low_window_pkts) && RI(o, hs_found) == 0;
  bool train = hs_on && (t - hs_last_ack) <= e.Pi(PL_train_gap_ticks);
  hs_last_ack = train ? t : hs_last_ack;
  bool found_train = train && static_cast<float>(t - hs_round_start) * tick_s > delay_min;
  bool sampling = hs_on && hs_samples < e.Pi(PL_hystart_min_samples);
  hs_curr = sampling ? minf(hs_curr, rtt_s) : hs_curr;
  hs_samples = hs_samples + (sampling ? 1 : 0);
  float thresh = minf(maxf(delay_min, e.Pf(PL_hystart_delay_min_s)), e.Pf(PL_hystart_delay_max_s));
  bool found_delay = hs_on && !sampling && hs_curr > delay_min + thresh;
  bool found = found_train || found_delay;
  ssthresh = found ? cwnd : ssthresh;
  bool hs_found = RI(o, hs_found) != 0 || found;

  // PRR in RECOVERY
  bool in_rec = has && (state == RECOVERY || state == CWR);
  prr_delivered = prr_delivered + (in_rec ? acked : 0);
  float pipe = static_cast<float>(outstanding);
  float prop = std::ceil(static_cast<float>(prr_delivered) * ssthresh / maxf(recover_fs, 1.0f)) -
               static_cast<float>(prr_out);
  if (e.Pi(PL_prr_id) == C_prr_ns_3_37) {  // ns-3.37 multiplies delivered bytes by ssthresh bytes in 32 unsigned bits
    const float mss = e.Pf(PL_mss_bytes);
    uint32_t wrapped = f2i_sat_u(std::floor(static_cast<float>(prr_delivered) * mss)) *
                       f2i_sat_u(std::floor(ssthresh * mss));
    prop = std::floor(div_b(fma_x(-static_cast<float>(prr_out), mss,
                                  std::ceil(static_cast<float>(wrapped) / maxf(recover_fs * mss, 1.0f))), mss));
  }
  // the slow-start reduction bound: RFC 6937 lets every ACK send what was delivered plus a segment;
  // ns-3.37 adds the segment only on an ACK of retransmitted data in fast recovery
  bool ssrb_grows = e.Pi(PL_prr_ssrb_id) != C_prr_ssrb_ns_3_37 || (acked_retx > 0 && state == RECOVERY);
  float limit = static_cast<float>(ssrb_grows ? std::max(prr_delivered - prr_out, acked) + 1 : acked);
  float ssrb = minf(ssthresh - pipe, limit);
  float sndcnt = maxf(pipe > ssthresh ? prop : ssrb, 0.0f);
  sndcnt = cut ? maxf(sndcnt, 1.0f) : sndcnt;  // the fast retransmission (CWR: a segment) goes out
  cwnd = in_rec ? pipe + sndcnt : cwnd;

  // leaving RECOVERY / LOSS
  bool leave_loss = has && state == LOSS && repaired && ghost == 0;
  // CWR ends with the ACK of a packet sent after the cut (ns-3.37: ack > m_recover)
  bool leave_cwr = has && state == CWR && !enter_cwr && max_tx >= ecn_recover_tx;
  bool recovered = leave_rec || leave_cwr;
  cwnd = recovered ? ssthresh : cwnd;
  epoch_start = recovered ? -1 : epoch_start;
  state = (leave_rec || leave_loss || leave_cwr) ? OPEN : state;
  cwnd = exit_c ? cwnd_cubic : cwnd;
  cwnd_cnt = exit_c ? bank : cwnd_cnt;
  epoch_start = exit_c ? cc.epoch : epoch_start;
  cubic_k = exit_c ? cc.k : cubic_k;
  cubic_origin = exit_c ? cc.origin : cubic_origin;

  bool progress = has && n_dup < acked;
  // ns-3.37 restarts the timer on a cumulative advance only: after a timeout, ACKs above a hole
  // still missing are SACKs (`moves`, above)
  bool was_rec = RI(o, state) == RECOVERY;
  bool rearm = (e.Pi(PL_rto_rearm_id) == REARM_CUMULATIVE ? moves : progress) &&
               !(was_rec && RI(o, rec_partial) != 0 && !leave_rec);
  int32_t rto_deadline = rearm ? t + ticks_of(rto_s, tick_s) : RI(o, rto_deadline);
  bool rec_partial = enter ? false : (RI(o, rec_partial) != 0 || (was_rec && progress));

  RI(r, ghost) = ghost; RI(r, outstanding) = outstanding; RI(r, retx_out) = retx_out; RI(r, acked) = n_acked;
  RF(r, srtt_s) = srtt; RF(r, rttvar_s) = rttvar; RF(r, rto_s) = rto_s; RF(r, delay_min_s) = delay_min;
  RI(r, da_parity) = da_parity; RI(r, lost_q) = lost_q; RI(r, undet) = undet; RF(r, ssthresh) = ssthresh;
  RF(r, w_max) = w_max; RI(r, epoch_start) = epoch_start; RI(r, state) = state;
  RI(r, prr_delivered) = prr_delivered; RI(r, prr_out) = prr_out; RF(r, recover_fs) = recover_fs;
  RF(r, cwnd) = maxf(cwnd, 1.0f); RF(r, cubic_k_s) = cubic_k; RF(r, cubic_origin) = cubic_origin;
  RI(r, cwnd_cnt) = cwnd_cnt; RI(r, hs_round_end_tx) = hs_round_end; RI(r, hs_round_start) = hs_round_start;
  RI(r, hs_last_ack) = hs_last_ack; RF(r, hs_curr_rtt_s) = hs_curr; RI(r, hs_samples) = hs_samples;
  RI(r, hs_found) = hs_found; RI(r, rto_deadline) = rto_deadline; RI(r, rec_partial) = rec_partial;
  RI(r, gbn_left) = gbn_left; RI(r, gbn_ahead) = gbn_ahead;
  RI(r, ecn_recover_tx) = ecn_recover_tx; RI(r, ece_pending) = ece_pending;
}

// tcp.on_timeouts for one event entry; returns whether the timer fired
bool on_timeout(const Env& e, Row& r, int32_t t) {
  bool fire = RI(r, active) != 0 && unsettled(r) > 0 && t >= RI(r, rto_deadline) && t >= RI(r, data_tick);
  if (!fire) return false;
  float ss_new, wmax_new;
  loss_ssthresh(e, RF(r, cwnd), RF(r, w_max), static_cast<float>(RI(r, outstanding)), &ss_new, &wmax_new);
  if (RI(r, state) == LOSS) ss_new = RF(r, ssthresh);
  int32_t in_flight = RI(r, outstanding) - RI(r, undet) - RI(r, retx_dropped) - RI(r, gbn_ahead);
  int32_t ghost = RI(r, ghost) + in_flight;
  float rto_s = minf(RF(r, rto_s) * 2.0f, e.Pf(PL_max_rto_s));
  RF(r, ssthresh) = ss_new;
  RF(r, cwnd) = 1.0f;
  RI(r, state) = LOSS;
  RI(r, lost_q) = RI(r, lost_q) + RI(r, undet) + RI(r, retx_dropped);
  RI(r, undet) = 0;
  RI(r, retx_dropped) = 0;
  RI(r, ghost) = ghost;
  RI(r, outstanding) = 0;
  RI(r, gbn_left) = e.Pi(PL_rto_recovery_id) == GO_BACK_N ? ghost : 0;
  RI(r, gbn_ahead) = 0;
  RF(r, rto_s) = rto_s;
  RI(r, rto_deadline) = t + ticks_of(rto_s, e.Pf(PL_tick_s));
  RF(r, delay_min_s) = 0.0f;
  if (e.Pi(PL_tcp_id) == CUBIC) {  // CubicReset; HyStart starts over
    RF(r, w_max) = 0.0f;
    RI(r, epoch_start) = -1;
    RI(r, hs_found) = 0;
    RI(r, hs_round_end_tx) = RI(r, tx_next);
    RI(r, hs_samples) = 0;
    RF(r, hs_curr_rtt_s) = INF;
  }
  return true;
}

// ---- buffer policies (buffer.py) ------------------------------------------------------
void thresholds(const Env& e, int32_t occ, float* thr) {
  const int P = e.d.P;
  const int32_t B = e.Pi(PL_buffer_pkts);
  const float* alpha = e.pf + e.po[PL_alpha];
  const float* beta = e.pf + e.po[PL_beta];
  const float* drain = e.Fl(L_drain_norm);
  const float* rl_alpha = e.Fl(L_rl_alpha);
  const int32_t free_i = B - occ;
  switch (e.Pi(PL_policy_id)) {
    case C_policy_droptail:  // droptail (the AQMs' hard limit too)
    case C_policy_red:
    case C_policy_ared:
    case C_policy_fq:
      for (int c = 0; c < P; ++c) thr[c] = static_cast<float>(e.Pi(PL_class_cap_pkts, c));
      break;
    case C_policy_sb_naive:
    case C_policy_sb_sophisticated: {  // static partition
      float s = 0.0f;
      for (int c = 0; c < P; ++c) s += alpha[c];
      for (int c = 0; c < P; ++c) thr[c] = div_b(alpha[c] * static_cast<float>(B), maxf(s, 1e-9f));
      break;
    }
    case C_policy_dt:  // dynamic thresholds
      for (int c = 0; c < P; ++c) thr[c] = alpha[c] * static_cast<float>(free_i);
      break;
    case C_policy_abm: {  // ABM
      float lo = 1.0f / static_cast<float>(P);
      for (int c = 0; c < P; ++c) {
        float mu = minf(maxf(drain[c], lo), 1.0f);
        thr[c] = alpha[c] * static_cast<float>(free_i) * mu;
      }
      break;
    }
    case C_policy_rl:  // rl
      for (int c = 0; c < P; ++c) thr[c] = rl_alpha[c] * beta[c] * static_cast<float>(free_i);
      break;
    case C_policy_rl_size: {  // rl-size: drop-tail at the agent's size per class, within [1, the class cap]
      const float* size = e.Fl(L_rl_size_pkts);
      for (int c = 0; c < P; ++c) thr[c] = minf(maxf(size[c], 1.0f), static_cast<float>(e.Pi(PL_class_cap_pkts, c)));
      break;
    }
    case C_policy_static_bdp:  // static-bdp
      for (int c = 0; c < P; ++c) thr[c] = minf(alpha[c] * e.Pf(PL_bdp_pkts), static_cast<float>(free_i));
      break;
  }
  for (int c = 0; c < P; ++c) thr[c] = minf(maxf(thr[c], 0.0f), static_cast<float>(e.Pi(PL_class_cap_pkts, c)));
}

// ---- queueing disciplines (switch/disciplines): RED and ARED at enqueue ----------------
// base.Hits of one class FIFO: hit i (i < count) falls on the packet at position
// first + floor(i * spacing) of the class's arrival order
struct Hits {
  int32_t first = 0;
  float spacing = 1.0f;
  int32_t count = 0;
  bool forced = false, may_mark = false;
  float syn_p = 0.0f;
};

// base.hits_below: how many hits fall on positions < limit
inline int32_t hits_below(int32_t limit, const Hits& h) {
  float lim = static_cast<float>(limit - h.first);
  int32_t n = f2i_sat(std::ceil(lim / maxf(h.spacing, 1e-6f)));
  return lim > 0.0f ? clip_i(n, 0, h.count) : 0;
}

// the disciplines the native tick runs (layout.h: the registry's ids, and each policy's)
constexpr int AQM_NONE = D_none, AQM_RED = D_red, AQM_ARED = D_ared, AQM_FQ = D_fq;

inline int aqm_of(const Env& e) { return POLICY_AQM[e.Pi(PL_policy_id)]; }

// one RED instance's state leaves (red.RedState; ARED keeps its own)
struct RedLeaves { int avg, x, gap, max_p, idle_s, next_s; };
constexpr RedLeaves RED_LEAVES{L_aqm_red_red_avg, L_aqm_red_hit_x, L_aqm_red_hit_gap, L_aqm_red_red_max_p,
                               L_aqm_red_red_idle_s, L_aqm_red_ared_next_s};
constexpr RedLeaves ARED_LEAVES{L_aqm_ared_red_avg, L_aqm_ared_hit_x, L_aqm_ared_hit_gap, L_aqm_ared_red_max_p,
                                L_aqm_ared_red_idle_s, L_aqm_ared_ared_next_s};
// red.py's ARED constants
constexpr float ARED_INTERVAL_S = 0.5f, ARED_ALPHA = 0.01f, ARED_BETA = 0.9f, ARED_TOP = 0.5f;

// red.red_pb: RED's base probability from the average
inline float red_pb(const Env& e, float avg, float max_p) {
  const float lo = e.Pf(PL_red_min_th_pkts), hi = e.Pf(PL_red_max_th_pkts), p0 = e.Pf(PL_red_max_p);
  const bool one = e.d.P == 1;  // (XLA rounds these otherwise in one-class shapes: see red_enqueue)
  float lin = one ? (max_p * (avg - lo)) / (hi - lo) : div_b(max_p * (avg - lo), hi - lo);
  float gentle = one ? p0 + ((1.0f - p0) * (avg - hi)) / hi : fma_x((1.0f - p0) * (avg - hi), 1.0f / hi, p0);
  float pb = avg < hi ? lin : (e.Pi(PL_red_gentle) != 0 ? gentle : 1.0f);
  return minf(maxf(pb, 0.0f), 1.0f);
}

// red.Red.on_enqueue for class FIFO c: ns-3.37 RedQueueDisc::DoEnqueue's decisions on the
// tick's arr packets at a queue of q packets (u: this class's uniform)
Hits red_enqueue(const Env& e, const RedLeaves& L, bool adaptive, int c, int32_t arr, int32_t q, float u,
                 float now_s) {
  float& avg_s = e.Fl(L.avg)[c];
  float& x_s = e.Fl(L.x)[c];
  float& gap_s = e.Fl(L.gap)[c];
  float& maxp_s = e.Fl(L.max_p)[c];
  const float idle_s = e.Fl(L.idle_s)[c];
  float& next_s = e.Fl(L.next_s)[c];
  const float w = e.Pf(PL_red_weight), lo = e.Pf(PL_red_min_th_pkts), hi = e.Pf(PL_red_max_th_pkts);
  const float keep = 1.0f - w;
  bool idle = idle_s >= 0.0f && q == 0 && arr > 0;
  // XLA fuses these products and sums differently in one-class shapes ([B, 1] arrays) than
  // in several classes' ([B, P]): each form below is the one its compiled loop computes
  const bool one = e.d.P == 1;
  float since = one ? fma_x(static_cast<float>(*e.I(L_tick)), e.Pf(PL_tick_s), -idle_s) : now_s - idle_s;
  float decay = idle ? maxf(since, 0.0f) * e.Pf(PL_red_link_pkts_per_s) : 0.0f;
  float n = static_cast<float>(arr);
  float avg = avg_s;  // (no arrival: the average stands; not idle: (1 - w)^0 = 1, exactly)
  if (arr > 0) {
    float old = idle ? avg_s * std::pow(keep, decay) : avg_s;
    float pw = std::pow(keep, n);
    avg = one ? old * pw + (1.0f - pw) * static_cast<float>(q) : fma_x(1.0f - pw, static_cast<float>(q), old * pw);
  }
  // adaptive max_p
  bool adapt = adaptive && arr > 0 && now_s > next_s;
  float part = 0.4f * (hi - lo);
  bool down = adapt && avg < lo + part && maxp_s > e.Pf(PL_ared_bottom);
  bool up = adapt && !down && avg > hi - part && maxp_s < ARED_TOP;
  float max_p = down ? maxp_s * ARED_BETA : (up ? maxp_s + minf(ARED_ALPHA, maxp_s / 4.0f) : maxp_s);
  float next = (down || up) ? now_s + ARED_INTERVAL_S : next_s;
  float top = e.Pi(PL_red_gentle) != 0 ? 2.0f * hi : hi;
  bool active = avg >= lo && q > 1;
  bool forced = active && avg >= top;
  float pb = (active && !forced) ? red_pb(e, avg, max_p) : 0.0f;
  // base.hits_from_progress
  const float x = x_s, gap = gap_s, next_gap = 1.0f + u;
  float total = fma_x(pb, n, x);
  bool hit = total >= gap && pb > 0.0f && arr > 0;
  float safe = maxf(pb, 1e-12f);
  int32_t first = clip_i(f2i_sat(std::ceil((gap - x) / safe)) - 1, 0, std::max(arr - 1, 0));
  const float left = static_cast<float>(std::max(arr - first - 1, 0));
  float rest = left * pb;
  int32_t more = std::min(f2i_sat(std::floor(rest / next_gap)), arr - first - 1);
  Hits h;
  h.count = hit ? 1 + more : 0;
  float x_new = hit ? maxf(fma_x(left, pb, -(static_cast<float>(more) * next_gap)), 0.0f) : total;
  h.spacing = maxf(next_gap / safe, 1.0f);
  h.first = first;
  float gap_new = hit ? next_gap : gap;
  x_new = (!active || forced) ? 0.0f : x_new;  // ns-3 restarts its count
  // step marking (weight 1 and max_p 1: the instantaneous queue against max_th, DCTCP's K)
  bool step = w >= 1.0f && e.Pf(PL_red_max_p) >= 1.0f && arr > 0;
  if (step) {
    h.first = clip_i(f2i_sat(std::ceil(maxf(hi, 2.0f) - static_cast<float>(q))), 0, arr);
    h.count = std::max(arr - h.first, 0);
    h.spacing = 1.0f;
  }
  h.count = forced ? 0 : h.count;
  h.forced = forced;
  h.may_mark = true;
  // red.syn_chance (red_syn "count": the SYN as one more packet of the drop process)
  float lo_x = maxf(x, 1.0f);
  float hazard = x + pb > 1.0f ? (x + pb - lo_x) / maxf(2.0f - lo_x, 1e-6f) : 0.0f;
  float syn = e.Pi(PL_red_syn_id) == C_red_syn_count ? minf(maxf(hazard, 0.0f), 1.0f) : pb;
  h.syn_p = forced ? 1.0f : syn;
  avg_s = avg; x_s = x_new; gap_s = gap_new; maxp_s = max_p; next_s = next;
  return h;
}

// red.Red.on_tick_end: the time a queue went empty (its average decays over the idle time)
void red_tick_end(const Env& e, const RedLeaves& L, int c, int32_t served, int32_t q_after, float now_end_s) {
  float& idle_s = e.Fl(L.idle_s)[c];
  bool still_idle = idle_s >= 0.0f && served == 0;
  idle_s = q_after == 0 ? (still_idle ? idle_s : now_end_s) : -1.0f;
}

// ---- fq: the plain fair queue over the per-flow queues (disciplines/fq.py, fq_codel.py) ---
constexpr int INACTIVE = 0, NEW_LIST = 1, OLD_LIST = 2;
constexpr int DROP_BATCH_PKTS = 64;  // fq_codel.DROP_BATCH_PKTS
constexpr int32_t I32_MAX = std::numeric_limits<int32_t>::max();

// the switch's per-flow queues (flowqueue.FlowQueues) and fq's state, as pointers
struct FlowQ {
  const Env& e;
  int Q, C;
  int32_t* runs;  // [Q, C, RUN_FIELDS]
  int32_t* head;
  int32_t* nruns;
  int32_t* pkts;
  int32_t* lst;  // fq_codel.FqState
  int32_t* pos;
  int32_t* deficit;
  float* cap;  // fq.FqCapState.cap_pkts
  explicit FlowQ(const Env& env)
      : e(env), Q(env.d.Q), C(env.d.C), runs(env.I(L_flowq_runs)), head(env.I(L_flowq_head)),
        nruns(env.I(L_flowq_nruns)), pkts(env.I(L_flowq_pkts)), lst(env.I(L_aqm_fq_sched_lst)),
        pos(env.I(L_aqm_fq_sched_pos)), deficit(env.I(L_aqm_fq_sched_deficit)), cap(env.Fl(L_aqm_fq_cap_pkts)) {}
  int32_t* run(int q, int j) const { return runs + (static_cast<int64_t>(q) * C + j) * RUN_FIELDS; }
};

// flowqueue.Drops
struct FlowDrops {
  int32_t new_[MAX_FLOWS], retx[MAX_FLOWS], first_new_tx[MAX_FLOWS];
  int32_t by_class[MAX_P];
  int32_t retx_spur = 0;
  void reset(int Q, int P) {
    for (int q = 0; q < Q; ++q) { new_[q] = 0; retx[q] = 0; first_new_tx[q] = I32_MAX; }
    for (int c = 0; c < P; ++c) by_class[c] = 0;
    retx_spur = 0;
  }
};

// fq.room: how many more packets each flow's queue admits
inline int32_t fq_room(const FlowQ& fq, int q) {
  const float hi = static_cast<float>(std::max(fq.C - 1, 1));
  int32_t cap = f2i(std::floor(minf(maxf(fq.cap[q], 1.0f), hi)));
  return std::max(cap - fq.pkts[q], 0);
}

// flowqueue.drop_head: up to n packets (at most DROP_BATCH_PKTS) from the head of queue q
void fq_drop_head(FlowQ& fq, int q, int32_t n, int cls, FlowDrops& d) {
  const int m = std::min(DROP_BATCH_PKTS, fq.C);
  int32_t before = 0, n_full = 0, dropped = 0, t_new_sum = 0, t_retx_sum = 0, t_spur_sum = 0, first_new = I32_MAX;
  for (int j = 0; j < m; ++j) {
    int32_t* r = fq.run(q, fmod_i(fq.head[q] + j, fq.C));
    int32_t count = j < fq.nruns[q] ? r[COUNT] : 0;
    int32_t take = clip_i(n - before, 0, count);
    before += count;
    if (j < fq.nruns[q] && take == count && count > 0) ++n_full;
    int32_t t_retx = std::min(r[NRETX], take);
    int32_t t_spur = std::min(r[NSPUR], take - t_retx);
    int32_t t_ce = clip_i(take - (count - r[NCE]), 0, r[NCE]);
    int32_t t_new = take - t_retx - t_spur;
    if (t_new > 0) first_new = std::min(first_new, r[TX0] + r[NRETX] + r[NSPUR]);
    if (take > 0) { r[COUNT] -= take; r[NRETX] -= t_retx; r[NSPUR] -= t_spur; r[TX0] += take; r[NCE] -= t_ce; }
    dropped += take; t_new_sum += t_new; t_retx_sum += t_retx; t_spur_sum += t_spur;
  }
  fq.head[q] = fmod_i(fq.head[q] + n_full, fq.C);
  fq.nruns[q] -= n_full;
  fq.pkts[q] -= dropped;
  // flowqueue.add_drop
  d.new_[q] += t_new_sum;
  d.retx[q] += t_retx_sum;
  d.first_new_tx[q] = std::min(d.first_new_tx[q], t_new_sum > 0 ? first_new : I32_MAX);
  d.by_class[cls] += dropped;
  d.retx_spur += t_retx_sum + t_spur_sum;
}

// fq_codel.overflow: the fattest queue drops at its head until the queues fit the limit
void fq_overflow(FlowQ& fq, int32_t limit, int32_t size, const int32_t* flow_cls, FlowDrops& d) {
  for (;;) {
    int32_t total = 0;
    for (int q = 0; q < fq.Q; ++q) total += fq.pkts[q];
    if (total <= limit) return;
    int g = 0;
    for (int q = 1; q < fq.Q; ++q)
      if (fq.pkts[q] > fq.pkts[g]) g = q;
    int32_t half = (fq.pkts[g] * size) / 2;
    int32_t batch = clip_i((half + size - 1) / size, 1, DROP_BATCH_PKTS);
    fq_drop_head(fq, g, batch, flow_cls[g], d);
  }
}

// fq_codel.select: one dequeue's walk of the new and old lists; returns the queue served (-1: none)
int fq_select(FlowQ& fq, int32_t quantum) {
  const int n = fq.Q;
  int32_t* lst = fq.lst;
  int32_t* pos = fq.pos;
  int32_t* deficit = fq.deficit;
  auto nonempty = [&](int q) { return fq.pkts[q] > 0; };
  int32_t n_old = 0, n_new = 0, first = n;
  for (int q = 0; q < n; ++q) {
    n_old += lst[q] == OLD_LIST;
    n_new += lst[q] == NEW_LIST;
    if (lst[q] == NEW_LIST && deficit[q] > 0 && nonempty(q)) first = std::min(first, pos[q]);
  }
  const bool found_new = first < n;
  int32_t m = found_new ? first : n_new;
  for (int q = 0; q < n; ++q) {
    if (lst[q] != NEW_LIST) continue;
    if (pos[q] < m) {
      if (deficit[q] <= 0) deficit[q] += quantum;
      pos[q] = n_old + pos[q];
      lst[q] = OLD_LIST;
    } else {
      pos[q] -= m;
    }
  }
  int32_t at[MAX_FLOWS + 1];
  bool remove[MAX_FLOWS], rotate[MAX_FLOWS], before[MAX_FLOWS];
  for (int pass = 0; pass < 2; ++pass) {
    n_old = 0;
    first = n;
    for (int q = 0; q < n; ++q) {
      bool old = lst[q] == OLD_LIST;
      n_old += old;
      if (old && deficit[q] > 0 && nonempty(q)) first = std::min(first, pos[q]);
    }
    m = found_new ? 0 : (first < n ? first : n_old);
    for (int i = 0; i <= n; ++i) at[i] = 0;
    for (int q = 0; q < n; ++q) {
      bool old = lst[q] == OLD_LIST;
      before[q] = old && pos[q] < m;
      remove[q] = before[q] && deficit[q] > 0;
      rotate[q] = before[q] && deficit[q] <= 0;
      if (remove[q]) at[std::min(std::max(pos[q], 0), n)] += 1;  // (_removed_before: positions < n)
    }
    // removed queues at smaller positions (an exclusive prefix sum over positions)
    int32_t excl[MAX_FLOWS];
    int32_t run_sum = 0;
    for (int i = 0; i < n; ++i) { excl[i] = run_sum; run_sum += at[i]; }
    for (int q = 0; q < n; ++q) {
      bool old = lst[q] == OLD_LIST;
      int32_t gone = excl[clip_i(pos[q], 0, n - 1)];
      if (rotate[q]) {
        pos[q] = n_old - m + pos[q] - gone;
        deficit[q] += quantum;
      } else if (old && !before[q]) {
        pos[q] -= m;
      }
      if (remove[q]) lst[q] = INACTIVE;
    }
  }
  for (int q = 0; q < n; ++q) {
    bool front = pos[q] == 0;
    bool cand = found_new ? (lst[q] == NEW_LIST && front)
                          : (lst[q] == OLD_LIST && front && deficit[q] > 0 && nonempty(q));
    if (cand) return q;
  }
  return -1;
}

// ---- metrics: the completion log and the interval record ------------------------------
struct Completion { float size_b, cls, fct, slow, start_s; };

void log_completions(const Env& e, const Completion* rec, const bool* done, int n_rec) {
  const int L = e.d.LOG, M = e.d.M, P = e.d.P;
  float* log = e.Fl(L_metrics_log);
  int32_t& log_count = *e.I(L_metrics_log_count);
  float* flows = e.Fl(L_interval_flows);
  int32_t& flows_logged = *e.I(L_interval_flows_logged);
  int32_t n = 0;
  float smax[MAX_P], lsum[MAX_P];
  int32_t ndone[MAX_P];
  for (int c = 0; c < P; ++c) { smax[c] = 0.0f; lsum[c] = 0.0f; ndone[c] = 0; }
  for (int i = 0; i < n_rec; ++i) {
    if (!done[i]) continue;
    int32_t pos = log_count + n;
    if (pos >= 0 && pos < L) {
      float* dst = log + static_cast<int64_t>(pos) * 5;
      dst[0] = rec[i].size_b; dst[1] = rec[i].cls; dst[2] = rec[i].fct; dst[3] = rec[i].slow; dst[4] = rec[i].start_s;
    }
    int32_t ipos = flows_logged + n;
    if (ipos >= 0 && ipos < M) {
      float* dst = flows + static_cast<int64_t>(ipos) * 3;
      dst[0] = rec[i].size_b; dst[1] = rec[i].cls; dst[2] = rec[i].slow;
    }
    int c = f2i(rec[i].cls);
    if (c >= 0 && c < P) {
      ndone[c] += 1;
      smax[c] = maxf(smax[c], rec[i].slow);
      lsum[c] += std::log(maxf(rec[i].slow, 1.0f));
    }
    ++n;
  }
  if (n == 0) return;
  int32_t written = std::min(n, std::max(L - log_count, 0));
  log_count += written;
  *e.I(L_metrics_log_overflow) += n - written;
  *e.I(L_metrics_flows_completed) += n;
  for (int c = 0; c < P; ++c) {
    e.I(L_interval_flows_done)[c] += ndone[c];
    e.Fl(L_interval_slowdown_max)[c] = maxf(e.Fl(L_interval_slowdown_max)[c], smax[c]);
    e.Fl(L_interval_log_slowdown_sum)[c] += lsum[c];
  }
  int32_t iv_written = std::min(n, std::max(M - flows_logged, 0));
  flows_logged += iv_written;
  *e.I(L_interval_flows_overflow) += n - iv_written;
}

// ---- the tick, phase by phase ---------------------------------------------------------------
struct Tick {
  const Env& e;
  const Dims& d;
  int32_t t;
  float now_s;
  bool warm;
  uint32_t seed;
  float u[3];
  // sink
  int32_t n_sink = 0, n_spur_sink = 0;
  float sink_bytes = 0.0f;
  // events
  int32_t idx[MAX_E];
  bool empty[MAX_E];
  Row fl[MAX_E];
  int32_t deferred = 0;
  int32_t ack_rows[MAX_E * RUN_FIELDS];
  bool fired[MAX_E];
  float credit[MAX_S];
  int32_t budget[MAX_S];
  bool due = false, free_ok = false;
  int32_t slot = 0;
  // buffer
  int32_t q_before[MAX_P];
  int32_t occ = 0;
  float thr[MAX_P];
  // new flow
  bool is_new[MAX_E];
  bool start = false;
  int32_t new_cls = 0;
  float next_arrival = 0.0f;
  // sending
  int32_t n_retx[MAX_E], n_spur[MAX_E], n_new[MAX_E], send[MAX_E], adm[MAX_E], adm_retx[MAX_E], adm_spur[MAX_E];
  int32_t arr_c[MAX_P], adm_c[MAX_P], drops_c[MAX_P], marks_c[MAX_P];
  int aqm = AQM_NONE;
  Hits hits[MAX_P];
  int32_t dep_retx_drops = 0;  // retransmissions and spurious copies dropped from the queues (fq)
  bool syn_lost = false;
  int32_t served[MAX_P];
  int32_t n_deq = 0;

  Tick(const Env& env) : e(env), d(env.d) {}

  void begin() {
    t = *e.I(L_tick);
    now_s = static_cast<float>(t) * e.Pf(PL_tick_s);
    warm = now_s >= e.Pf(PL_warmup_s);
    seed = static_cast<uint32_t>(*e.I(L_seed));
    aqm = aqm_of(e);
  }

  const int32_t* wire_row(int32_t tick_no) const {
    return e.I(L_wire) + static_cast<int64_t>(fmod_i(tick_no, d.L)) * d.K * RUN_FIELDS;
  }

  // 1. packets that left sink_delay_ticks ago reach the sink
  void deliver() {
    const int K = d.K, F = d.F;
    int32_t sink_tick = t - e.Pi(PL_sink_delay_ticks);
    if (sink_tick < 0) return;
    const int32_t* rows = wire_row(sink_tick);
    int32_t* delivered = e.I(L_delivered);
    int32_t* done_sink = e.I(L_done_sink);
    for (int i = 0; i < K; ++i) {
      const int32_t* r = rows + i * RUN_FIELDS;
      int32_t real = r[COUNT] - r[NSPUR];
      if (real > 0 && r[FLOW] >= 0 && r[FLOW] < F) delivered[r[FLOW]] += real;
      n_sink += r[COUNT];
      n_spur_sink += r[NSPUR];
    }
    Completion rec[MAX_E];
    bool done[MAX_E];
    float short_b = 0.0f;
    const float arrive_s = fma_x(static_cast<float>(sink_tick + 1), e.Pf(PL_tick_s), e.Pf(PL_bottleneck_delay_s));
    for (int i = 0; i < K; ++i) {
      const int32_t* r = rows + i * RUN_FIELDS;
      done[i] = false;
      bool has = r[COUNT] - r[NSPUR] > 0;
      if (!has) continue;
      bool last = true;
      for (int j = i + 1; j < K; ++j) {
        const int32_t* rj = rows + j * RUN_FIELDS;
        if (rj[FLOW] == r[FLOW] && rj[COUNT] - rj[NSPUR] > 0) { last = false; break; }
      }
      int g = std::min(r[FLOW], F - 1);
      done[i] = last && e.tab_i(FI_active, g) != 0 && done_sink[g] == 0 && delivered[g] >= e.tab_i(FI_size_pkts, g);
      if (!done[i]) continue;
      float size_b = e.tab_f(FF_size_bytes, g), start_s = e.tab_f(FF_start_s, g);
      float fct = arrive_s - start_s;
      float ideal = fma_x(size_b * 8.0f, 1.0f / e.Pf(PL_bottleneck_rate_bps), e.Pf(PL_base_rtt_s));
      rec[i] = {size_b, static_cast<float>(e.tab_i(FI_cls, g)), fct, fct / ideal, start_s};
      short_b += fma_x(static_cast<float>(e.tab_i(FI_size_pkts, g)), e.Pf(PL_mss_bytes), -size_b);
    }
    for (int i = 0; i < K; ++i)
      if (done[i]) done_sink[std::min(rows[i * RUN_FIELDS + FLOW], F - 1)] = 1;
    log_completions(e, rec, done, K);
    sink_bytes = fma_x(static_cast<float>(n_sink - n_spur_sink), e.Pf(PL_mss_bytes), -short_b);
  }

  // 2. the event flows; ACKs of packets that left ack_delay_ticks ago reach their senders
  void select_events() {
    const int K = d.K, F = d.F, S = d.S, E = d.E;
    const int32_t ack_delay = e.Pi(PL_ack_delay_ticks);
    if (t >= ack_delay) std::memcpy(ack_rows, wire_row(t - ack_delay), sizeof(int32_t) * K * RUN_FIELDS);
    else std::memset(ack_rows, 0, sizeof(int32_t) * K * RUN_FIELDS);
    const float next_s = *e.Fl(L_next_arrival_s);
    due = next_s <= fma_x(static_cast<float>(t), e.Pf(PL_tick_s), e.Pf(PL_tick_s)) && next_s < e.Pf(PL_arrival_stop_s);
    slot = 0;
    for (int j = 0; j < F; ++j)
      if (e.tab_i(FI_active, j) == 0) { slot = j; break; }
    free_ok = e.tab_i(FI_active, slot) == 0;
    const float* ac = e.Fl(L_access_credit);
    for (int s = 0; s < S; ++s) {
      credit[s] = minf(ac[s] + e.Pf(PL_credit_per_tick), e.Pf(PL_credit_cap));
      budget[s] = f2i(std::floor(credit[s]));
    }
    const int32_t new_slot = (due && free_ok) ? slot : F;
    // the flows named by ACK records (first record of each flow), then the new flow
    for (int i = 0; i < K; ++i) {
      const int32_t* r = ack_rows + i * RUN_FIELDS;
      bool has = r[COUNT] > 0;
      bool earlier = false;
      for (int j = 0; j < i && has; ++j)
        if (ack_rows[j * RUN_FIELDS + FLOW] == r[FLOW] && ack_rows[j * RUN_FIELDS + COUNT] > 0) { earlier = true; break; }
      idx[i] = (has && !earlier) ? r[FLOW] : F;
    }
    idx[K] = new_slot;
    // then flows whose timer is due or whose window and access link let them send, from a
    // starting slot that rotates every tick
    const int n_pick = E - K - 1;
    int picked = 0;
    deferred = 0;
    const int32_t start_slot = fmod_i(t, F);
    for (int o = 0; o < F; ++o) {
      int j = start_slot + o;
      if (j >= F) j -= F;
      if (e.tab_i(FI_active, j) == 0 || t < e.tab_i(FI_data_tick, j)) continue;
      bool must = j == new_slot;
      for (int i = 0; i < K && !must; ++i) must = idx[i] == j;
      if (must) continue;
      int32_t uns = e.tab_i(FI_outstanding, j) + e.tab_i(FI_ghost, j) + e.tab_i(FI_retx_out, j) +
                    e.tab_i(FI_lost_q, j) + e.tab_i(FI_retx_dropped, j);
      bool timer = uns > 0 && t >= e.tab_i(FI_rto_deadline, j);
      bool can_send = false;
      if (!timer) {
        bool window = f2i(std::floor(e.tab_f(FF_cwnd, j))) > e.tab_i(FI_outstanding, j);
        bool data = e.tab_i(FI_lost_q, j) > 0 || e.tab_i(FI_gbn_left, j) > 0 ||
                    e.tab_i(FI_next_new, j) < e.tab_i(FI_size_pkts, j);
        int32_t snd = e.tab_i(FI_sender, j);
        can_send = window && data && budget[snd] >= 1;
      }
      if (!(timer || can_send)) continue;
      if (picked < n_pick) idx[K + 1 + picked++] = j;
      else ++deferred;
    }
    for (int p = picked; p < n_pick; ++p) idx[K + 1 + p] = F;
    for (int k = 0; k < E; ++k) {
      empty[k] = idx[k] >= F;  // an empty entry changes nothing and is never written back
      if (!empty[k]) fl[k] = e.row(idx[k]);
    }
  }

  void acks() {
    const int K = d.K, E = d.E;
    const float tick_s = e.Pf(PL_tick_s);
    int32_t dup_e[MAX_E], real[MAX_E], tx_last[MAX_E];
    for (int i = 0; i < K; ++i) {
      const int32_t* r = ack_rows + i * RUN_FIELDS;
      real[i] = r[COUNT] - r[NSPUR];
      int32_t new_e = real[i] - r[NRETX];
      tx_last[i] = r[TX0] + (new_e > 0 ? r[COUNT] : r[NRETX]) - 1;
      int32_t undet_tx = 0, holes = 0, in_rec = 0;
      for (int k = 0; k < E; ++k) {
        if (!(r[FLOW] == idx[k] && r[COUNT] > 0)) continue;
        undet_tx += RI(fl[k], undet_tx);
        holes += RI(fl[k], undet) > 0;
        in_rec += RI(fl[k], state) == RECOVERY;
      }
      dup_e[i] = in_rec > 0 ? new_e : (holes > 0 ? clip_i(tx_last[i] - undet_tx, 0, new_e) : 0);
    }
    for (int k = 0; k < E; ++k) {
      if (empty[k]) continue;
      AckIn a{0, 0, 0, -1, 0, 0.0f, 0, -1};
      int32_t last_enq = -1;
      for (int i = 0; i < K; ++i) {
        const int32_t* r = ack_rows + i * RUN_FIELDS;
        if (!(r[FLOW] == idx[k] && r[COUNT] > 0)) continue;
        a.acked += real[i];
        a.acked_retx += r[NRETX];
        a.n_dup += dup_e[i];
        a.spur += r[NSPUR];
        a.ce += r[NCE];
        if (r[NCE] > 0) a.ce_max_tx = std::max(a.ce_max_tx, tx_last[i]);
        if (real[i] > 0) {
          a.max_tx = std::max(a.max_tx, tx_last[i]);
          last_enq = std::max(last_enq, r[ENQ]);
        }
      }
      a.rtt_s = static_cast<float>(t - last_enq) * tick_s;
      on_acks(e, fl[k], t, a);
      if (RI(fl[k], active) != 0 && RI(fl[k], acked) >= RI(fl[k], size_pkts)) RI(fl[k], active) = 0;
    }
  }

  // 3. retransmission timeouts
  void timeouts() {
    for (int k = 0; k < d.E; ++k) fired[k] = !empty[k] && on_timeout(e, fl[k], t);
  }

  // 4. the buffer as this tick's arrivals find it, and at most one new flow
  void arrivals() {
    const int P = d.P, E = d.E;
    const int32_t* qp = e.I(L_queue_pkts);
    occ = 0;
    for (int c = 0; c < P; ++c) { q_before[c] = qp[c]; occ += qp[c]; }
    thresholds(e, occ, thr);

    const float rate = e.Pf(PL_arrival_rate_per_s);
    for (int k = 0; k < E; ++k) {
      is_new[k] = !empty[k] && idx[k] == slot && due && free_ok;
      start = start || is_new[k];
    }
    const float t_arr = *e.Fl(L_next_arrival_s);
    next_arrival = t_arr;
    if (!due) return;
    // an arrival draws from the arrival count, so every tick size sees the same flows
    const uint32_t ctr = static_cast<uint32_t>(*e.I(L_metrics_flows_started) + *e.I(L_metrics_flows_refused));
    for (int i = 0; i < 3; ++i) u[i] = hash_uniform(seed, ctr, i);
    float size_b = sample_size_bytes(e, u[1]);
    int32_t sender = std::min(f2i(u[2] * static_cast<float>(d.S)), d.S - 1);
    float gap = rate > 0.0f ? -std::log(maxf(1.0f - u[0], 1e-12f)) / maxf(rate, 1e-30f) : INF;
    int32_t n_above = 0;
    for (int c = 0; c < P - 1; ++c) n_above += size_b > e.Pf(PL_class_threshold_bytes, c);
    new_cls = std::min(n_above, P - 1);
    if (start) {
      // (fq: a new flow's SYN is its new queue's one packet, served first: `syn_skips_queue`)
      float qdelay = aqm == AQM_FQ ? 0.0f
                                   : static_cast<float>(q_before[new_cls]) * e.Pf(PL_data_pkt_bits) /
                                         e.Pf(PL_bottleneck_rate_bps);
      float hs_rtt = e.Pf(PL_base_rtt_s) + qdelay;
      Row fresh;
      std::memset(&fresh, 0, sizeof(fresh));
      RI(fresh, active) = 1;
      RI(fresh, sender) = sender;
      RI(fresh, cls) = new_cls;
      RI(fresh, size_pkts) = f2i(std::ceil(size_b / e.Pf(PL_mss_bytes)));
      RF(fresh, size_bytes) = size_b;
      RF(fresh, start_s) = t_arr;
      RI(fresh, data_tick) = f2i(std::ceil((t_arr + hs_rtt + e.Pf(PL_access_offset_s)) / e.Pf(PL_tick_s)));
      RF(fresh, cwnd) = e.Pf(PL_initial_cwnd_pkts);
      RF(fresh, ssthresh) = 1e9f;
      RF(fresh, srtt_s) = hs_rtt;
      RF(fresh, rttvar_s) = hs_rtt / 2.0f;
      RF(fresh, rto_s) = rto_of(e, hs_rtt, hs_rtt / 2.0f);
      RI(fresh, epoch_start) = -1;
      RF(fresh, hs_curr_rtt_s) = INF;
      for (int k = 0; k < E; ++k)
        if (is_new[k]) fl[k] = fresh;
      e.I(L_delivered)[slot] = 0;
      e.I(L_done_sink)[slot] = 0;
    }
    bool advance = start || !free_ok;
    next_arrival = advance ? t_arr + gap : t_arr;
    *e.I(L_metrics_flows_started) += start;
    *e.I(L_metrics_flows_refused) += !free_ok;
  }

  void count_events() {
    int32_t nfired = 0;
    for (int k = 0; k < d.E; ++k) nfired += fired[k];
    *e.I(L_metrics_rto_total) += nfired;
    *e.I(L_metrics_events_deferred) += deferred;
  }

  // 5. senders transmit what cwnd and the access link allow
  void transmit() {
    const int E = d.E, S = d.S;
    int32_t want[MAX_E];
    for (int k = 0; k < E; ++k) {
      if (empty[k]) { n_retx[k] = n_spur[k] = n_new[k] = want[k] = send[k] = 0; continue; }
      const Row& r = fl[k];
      bool ready = RI(r, active) != 0 && t >= RI(r, data_tick);
      int32_t allow = ready ? std::max(f2i(std::floor(RF(r, cwnd))) - RI(r, outstanding), 0) : 0;
      n_retx[k] = std::min(allow, RI(r, lost_q));
      n_spur[k] = std::min(allow - n_retx[k], RI(r, gbn_left));
      n_new[k] = clip_i(allow - n_retx[k] - n_spur[k], 0, std::max(RI(r, size_pkts) - RI(r, next_new), 0));
      want[k] = n_retx[k] + n_spur[k] + n_new[k];
    }
    int32_t used[MAX_S];
    for (int s = 0; s < S; ++s) used[s] = 0;
    for (int k = 0; k < E; ++k) {
      if (empty[k]) continue;
      const Row& r = fl[k];
      int32_t snd = RI(r, sender);
      bool act = RI(r, active) != 0;
      int32_t ahead = act ? used[snd] : 0;
      send[k] = clip_i(budget[snd] - ahead, 0, want[k]);
      if (act) used[snd] += want[k];
      n_retx[k] = std::min(n_retx[k], send[k]);
      n_spur[k] = std::min(n_spur[k], send[k] - n_retx[k]);
      n_new[k] = send[k] - n_retx[k] - n_spur[k];
    }
    int32_t sent_by[MAX_S];
    for (int s = 0; s < S; ++s) sent_by[s] = 0;
    for (int k = 0; k < E; ++k)
      if (!empty[k] && RI(fl[k], active) != 0) sent_by[RI(fl[k], sender)] += send[k];
    float* ac = e.Fl(L_access_credit);
    for (int s = 0; s < S; ++s) ac[s] = credit[s] - static_cast<float>(sent_by[s]);
  }

  // 6. buffer admission, the FIFOs' tails, the senders' bookkeeping, the SYN
  void admit() {
    const int E = d.E, P = d.P, R = d.R, F = d.F;
    for (int c = 0; c < P; ++c) arr_c[c] = 0;
    for (int k = 0; k < E; ++k) {
      int c = empty[k] ? -1 : RI(fl[k], cls);
      if (c >= 0 && c < P) arr_c[c] += send[k];
    }
    // this tick's senders reach the switch in a random cyclic order
    const float u_order = hash_uniform(seed ^ 0x5BD1E995u, static_cast<uint32_t>(t), 0);
    const int offset = std::min(f2i(u_order * static_cast<float>(E)), E - 1);
    // the discipline's decisions on the arrivals (sim._aqm_at_enqueue), placed at each flow's
    // packets in its class's arrival order; with ECN every data packet is ECT and a hit marks it
    int32_t offered[MAX_E], aqm_mark[MAX_E], off_c[MAX_P], cum_a[MAX_P];
    for (int c = 0; c < P; ++c) off_c[c] = 0;
    for (int k = 0; k < E; ++k) { offered[k] = send[k]; aqm_mark[k] = 0; }
    if (aqm == AQM_RED || aqm == AQM_ARED) {
      const RedLeaves& L = aqm == AQM_ARED ? ARED_LEAVES : RED_LEAVES;
      for (int c = 0; c < P; ++c)
        hits[c] = red_enqueue(e, L, aqm == AQM_ARED, c, arr_c[c], q_before[c],
                              hash_uniform(seed ^ 0x3C6EF372u, static_cast<uint32_t>(t), c), now_s);
      const bool ecn = e.Pi(PL_ecn) != 0;
      for (int c = 0; c < P; ++c) cum_a[c] = 0;
      for (int o = 0; o < E; ++o) {
        int k = o + offset;
        if (k >= E) k -= E;
        int c = empty[k] ? -1 : RI(fl[k], cls);
        if (c < 0 || c >= P) continue;
        const Hits& h = hits[c];
        int32_t before = cum_a[c];
        cum_a[c] += send[k];
        int32_t decided = hits_below(before + send[k], h) - hits_below(before, h);
        int32_t marks = (ecn && h.may_mark) ? decided : 0;
        int32_t drops = h.forced ? send[k] : decided - marks;
        aqm_mark[k] = h.forced ? 0 : marks;
        offered[k] = send[k] - drops;
      }
    }
    for (int k = 0; k < E; ++k) {
      int c = empty[k] ? -1 : RI(fl[k], cls);
      if (c >= 0 && c < P) off_c[c] += offered[k];
    }
    if (aqm == AQM_FQ) {
      admit_fq(offset);
    } else {
      admit_fifo(offered, aqm_mark, off_c, offset);
    }
    book_sent();
  }

  // fq (sim._enqueue_arrivals with a discipline that owns departure): every packet is taken, each
  // flow's queue admits up to its room (entries naming one slot in entry order) and the rest drop
  // at the tail; the runs join their flows' queues, and an inactive queue the new list's tail
  void admit_fq(int offset) {
    const int E = d.E, P = d.P;
    FlowQ fq(e);
    int32_t room[MAX_E];
    for (int k = 0; k < E; ++k) room[k] = (!empty[k] && idx[k] < fq.Q) ? fq_room(fq, idx[k]) : 0;
    for (int c = 0; c < P; ++c) { adm_c[c] = 0; marks_c[c] = 0; }
    for (int k = 0; k < E; ++k) {
      int32_t ahead = 0;
      for (int j = 0; j < k; ++j)
        if (idx[j] == idx[k]) ahead += send[j];
      adm[k] = clip_i(room[k] - ahead, 0, send[k]);
      int c = empty[k] ? -1 : RI(fl[k], cls);
      if (c >= 0 && c < P) adm_c[c] += adm[k];
      adm_retx[k] = std::min(n_retx[k], adm[k]);
      adm_spur[k] = std::min(n_spur[k], adm[k] - adm_retx[k]);
    }
    int32_t* qpk = e.I(L_queue_pkts);
    for (int c = 0; c < P; ++c) qpk[c] += adm_c[c];  // the class counts hold their flows' totals
    // fq_codel.activate: in this tick's senders' order, from the lists as the tick found them
    bool joins[MAX_E];
    int32_t n_new = 0;
    for (int q = 0; q < fq.Q; ++q) n_new += fq.lst[q] == NEW_LIST;
    for (int k = 0; k < E; ++k) {
      bool has = adm[k] > 0 && idx[k] < fq.Q;
      bool dup = false;
      for (int j = 0; j < k && has; ++j) dup = dup || (adm[j] > 0 && idx[j] == idx[k]);
      joins[k] = has && !dup && fq.lst[idx[k]] == INACTIVE;
    }
    const int32_t quantum = e.Pi(PL_fq_quantum_bytes);
    int32_t join_pos[MAX_E];
    for (int k = 0; k < E; ++k) {
      int32_t ahead = 0, ok = fmod_i(k - offset, E);
      for (int j = 0; j < E; ++j) ahead += joins[j] && fmod_i(j - offset, E) < ok;
      join_pos[k] = n_new + ahead;
    }
    for (int k = 0; k < E; ++k) {
      if (!joins[k]) continue;
      fq.lst[idx[k]] = NEW_LIST;
      fq.pos[idx[k]] = join_pos[k];
      fq.deficit[idx[k]] = quantum;
    }
    // flowqueue.enqueue, in entry order
    for (int k = 0; k < E; ++k) {
      if (!(adm[k] > 0 && idx[k] < fq.Q)) continue;
      const int q = idx[k];
      int32_t* rec = fq.run(q, fmod_i(fq.head[q] + fq.nruns[q], fq.C));
      rec[FLOW] = idx[k]; rec[COUNT] = adm[k]; rec[NRETX] = adm_retx[k]; rec[TX0] = RI(fl[k], tx_next);
      rec[ENQ] = t; rec[NSPUR] = adm_spur[k]; rec[NCE] = 0;
      fq.nruns[q] += 1;
      fq.pkts[q] += adm[k];
    }
  }

  void admit_fifo(const int32_t* offered, const int32_t* aqm_mark, const int32_t* off_c, int offset) {
    const int E = d.E, P = d.P, R = d.R, F = d.F;
    int32_t cum_a[MAX_P], cum_r[MAX_P];
    // each class admits what the discipline let through up to its threshold, within the shared buffer
    const int32_t free_b = e.Pi(PL_buffer_pkts) - occ;
    int32_t before_c = 0;
    for (int c = 0; c < P; ++c) {
      int32_t room = std::max(f2i(std::floor(thr[c])) - q_before[c], 0);
      int32_t want = std::min(off_c[c], room);
      adm_c[c] = clip_i(free_b - before_c, 0, want);
      before_c += want;
    }
    for (int c = 0; c < P; ++c) { cum_a[c] = 0; cum_r[c] = 0; marks_c[c] = 0; }
    int32_t* qi = e.I(L_queue_runs);
    int32_t* head = e.I(L_queue_head);
    int32_t* nruns = e.I(L_queue_nruns);
    int32_t* qpk = e.I(L_queue_pkts);
    int32_t new_runs[MAX_P], new_pkts[MAX_P];
    for (int c = 0; c < P; ++c) { new_runs[c] = 0; new_pkts[c] = 0; }
    for (int o = 0; o < E; ++o) {
      int k = o + offset;
      if (k >= E) k -= E;
      int c = empty[k] ? -1 : RI(fl[k], cls);
      bool in = c >= 0 && c < P;
      int32_t before = in ? cum_a[c] : 0;
      int32_t rank = in ? cum_r[c] : 0;
      adm[k] = in ? clip_i(adm_c[c] - before, 0, offered[k]) : 0;
      if (in) { cum_a[c] += offered[k]; cum_r[c] += adm[k] > 0; }
      adm_retx[k] = std::min(n_retx[k], adm[k]);
      adm_spur[k] = std::min(n_spur[k], adm[k] - adm_retx[k]);
      const int32_t nce = std::min(aqm_mark[k], adm[k]);
      if (in) marks_c[c] += nce;
      if (adm[k] > 0) {
        int32_t pos = fmod_i(head[c] + nruns[c] + rank, R);
        int32_t* rec = qi + (static_cast<int64_t>(c) * R + pos) * RUN_FIELDS;
        rec[FLOW] = std::min(idx[k], F - 1);
        rec[COUNT] = adm[k];
        rec[NRETX] = adm_retx[k];
        rec[TX0] = RI(fl[k], tx_next);
        rec[ENQ] = t;
        rec[NSPUR] = adm_spur[k];
        rec[NCE] = nce;
        new_runs[c] += 1;
        new_pkts[c] += adm[k];
      }
    }
    for (int c = 0; c < P; ++c) { nruns[c] += new_runs[c]; qpk[c] += new_pkts[c]; }
  }

  // tcp.on_sent, the admission drops and the new flow's SYN; the rows go back to the table
  void book_sent() {
    const int E = d.E, P = d.P;
    const float tick_s = e.Pf(PL_tick_s);
    for (int k = 0; k < E; ++k) {  // tcp.on_sent
      if (empty[k]) continue;
      Row& r = fl[k];
      int32_t sent = n_retx[k] + n_spur[k] + n_new[k];
      int32_t drop_retx = std::max(n_retx[k] - adm[k], 0);
      int32_t adm_new = std::max(adm[k] - n_retx[k] - n_spur[k], 0);
      int32_t drop_new = n_new[k] - adm_new;
      bool idle = unsettled(r) == 0;
      int32_t first_drop = RI(r, tx_next) + n_retx[k] + n_spur[k] + adm_new;
      if (drop_new > 0 && RI(r, undet) == 0) RI(r, undet_tx) = first_drop;
      if (idle && sent > 0) RI(r, rto_deadline) = t + ticks_of(RF(r, rto_s), tick_s);
      RI(r, outstanding) += sent;
      RI(r, lost_q) -= n_retx[k];
      RI(r, retx_out) += n_retx[k] - drop_retx;
      RI(r, retx_dropped) += drop_retx;
      RI(r, undet) += drop_new;
      RI(r, next_new) += n_new[k];
      RI(r, tx_next) += sent;
      if (RI(r, state) == RECOVERY || RI(r, state) == CWR) RI(r, prr_out) += sent;
      RI(r, gbn_left) -= n_spur[k];
      RI(r, gbn_ahead) += n_spur[k];
    }
    for (int c = 0; c < P; ++c) drops_c[c] = arr_c[c] - adm_c[c];
    // a new flow's SYN takes a random place among this tick's packets of its class (fq takes
    // every arrival: its SYN is never lost)
    if (start && aqm != AQM_FQ) {
      float u_syn = hash_uniform(seed ^ 0x27D4EB2Fu, static_cast<uint32_t>(t), 0);
      int c = new_cls;
      int32_t ahead = std::min(f2i(u_syn * static_cast<float>(arr_c[c] + 1)), arr_c[c]);
      int32_t found = std::min(ahead, adm_c[c]);
      syn_lost = ahead > adm_c[c] || q_before[c] + found >= f2i(std::floor(thr[c])) ||
                 occ + found >= e.Pi(PL_buffer_pkts);
      // an enqueue discipline drops it with its current chance (a SYN is not ECT: never marked)
      syn_lost = syn_lost || hash_uniform(seed ^ 0x27D4EB2Fu, static_cast<uint32_t>(t), 1) < hits[c].syn_p;
      if (syn_lost)
        for (int k = 0; k < E; ++k)
          if (is_new[k]) RI(fl[k], data_tick) += e.Pi(PL_syn_wait_ticks);
    }
    *e.I(L_metrics_syn_drops) += syn_lost;
    for (int k = 0; k < E; ++k)
      if (!empty[k]) e.set_row(idx[k], fl[k]);
  }

  // 7 (fq, sim._owned_depart). The shared buffer's overflow drops from the fattest flow, then the
  // k dequeues of deficit round robin over the flows' queues; the senders book the drops
  void depart_fq() {
    const int P = d.P, K = d.K;
    FlowQ fq(e);
    int32_t flow_cls[MAX_FLOWS];
    for (int q = 0; q < fq.Q; ++q) flow_cls[q] = e.tab_i(FI_cls, q);
    FlowDrops dr;
    dr.reset(fq.Q, P);
    const int32_t size = e.Pi(PL_fq_pkt_bytes);
    fq_overflow(fq, e.Pi(PL_buffer_pkts), size, flow_cls, dr);
    int32_t* out = e.I(L_wire) + static_cast<int64_t>(fmod_i(t, d.L)) * K * RUN_FIELDS;
    std::memset(out, 0, sizeof(int32_t) * K * RUN_FIELDS);
    for (int c = 0; c < P; ++c) served[c] = 0;
    const int32_t quantum = e.Pi(PL_fq_quantum_bytes);
    for (int j = 0; j < K; ++j) {
      int f = fq_select(fq, quantum);
      if (f < 0) continue;
      // flowqueue.pop: the head packet of queue f
      const int32_t h = fq.head[f];
      int32_t* run = fq.run(f, h);
      const int32_t is_retx = run[NRETX] > 0, is_spur = !is_retx && run[NSPUR] > 0, is_ce = run[NCE] >= run[COUNT];
      int32_t* o = out + j * RUN_FIELDS;
      o[FLOW] = run[FLOW]; o[COUNT] = 1; o[NRETX] = is_retx; o[TX0] = run[TX0]; o[ENQ] = run[ENQ];
      o[NSPUR] = is_spur; o[NCE] = is_ce;
      const bool emptied = run[COUNT] <= 1;
      run[COUNT] -= 1; run[NRETX] -= is_retx; run[TX0] += 1; run[NSPUR] -= is_spur; run[NCE] -= is_ce;
      if (emptied) { fq.head[f] = fmod_i(h + 1, fq.C); fq.nruns[f] -= 1; }
      fq.pkts[f] -= 1;
      fq.deficit[f] -= size;
      served[flow_cls[f]] += 1;
    }
    // tcp.on_queue_drops: the senders learn of the packets dropped from their queues
    for (int q = 0; q < fq.Q && q < d.F; ++q) {
      if (e.tab_i(FI_active, q) == 0) continue;
      if (dr.new_[q] > 0) {
        int32_t& undet_tx = e.tab_i(FI_undet_tx, q);
        undet_tx = e.tab_i(FI_undet, q) > 0 ? std::min(undet_tx, dr.first_new_tx[q]) : dr.first_new_tx[q];
        e.tab_i(FI_undet, q) += dr.new_[q];
      }
      e.tab_i(FI_retx_out, q) -= dr.retx[q];
      e.tab_i(FI_retx_dropped, q) += dr.retx[q];
    }
    int32_t* qp = e.I(L_queue_pkts);
    n_deq = 0;
    for (int c = 0; c < P; ++c) {
      qp[c] -= dr.by_class[c] + served[c];
      drops_c[c] += dr.by_class[c];  // (with the admission's: the tick's drops)
      n_deq += served[c];
    }
    dep_retx_drops = dr.retx_spur;
  }

  // 7. the scheduler picks up to k packets; they leave the FIFOs for the delay line
  void depart() {
    if (aqm == AQM_FQ) {
      depart_fq();
      return;
    }
    const int P = d.P, K = d.K, R = d.R;
    int32_t* qp = e.I(L_queue_pkts);
    int32_t& rr_next = *e.I(L_rr_next);
    if (e.Pi(PL_scheduler_id) == 0) {  // per-packet round robin
      int32_t rounds = 0, qmax = 0;
      for (int c = 0; c < P; ++c) qmax = std::max(qmax, qp[c]);
      for (int l = 0; l <= K; ++l) {
        int32_t at = 0;
        for (int c = 0; c < P; ++c) at += std::min(qp[c], l);
        if (at <= K) rounds = std::max(rounds, l);
      }
      rounds = std::min(rounds, qmax);
      int32_t left = K;
      for (int c = 0; c < P; ++c) left -= std::min(qp[c], rounds);
      int32_t last_extra = -1, last_base = -1;
      bool any_extra = false;
      for (int c = 0; c < P; ++c) {
        int32_t base = std::min(qp[c], rounds);
        int32_t cyc = fmod_i(c - rr_next, P);
        bool eligible = qp[c] > rounds;
        int32_t order_rank = 0;
        for (int c2 = 0; c2 < P; ++c2)
          if (qp[c2] > rounds && fmod_i(c2 - rr_next, P) < cyc) ++order_rank;
        bool extra = eligible && order_rank < left;
        served[c] = base + extra;
        if (extra) { any_extra = true; last_extra = std::max(last_extra, cyc); }
        if (base == rounds && rounds > 0) last_base = std::max(last_base, cyc);
      }
      int32_t last = any_extra ? last_extra : last_base;
      if (last >= 0) rr_next = fmod_i(rr_next + last + 1, P);
    } else {  // strict priority
      int32_t before = 0;
      for (int c = 0; c < P; ++c) {
        served[c] = clip_i(K - before, 0, qp[c]);
        before += qp[c];
      }
    }
    int32_t* runs = e.I(L_queue_runs);
    int32_t* head = e.I(L_queue_head);
    int32_t* nruns = e.I(L_queue_nruns);
    int32_t* out = e.I(L_wire) + static_cast<int64_t>(fmod_i(t, d.L)) * K * RUN_FIELDS;
    std::memset(out, 0, sizeof(int32_t) * K * RUN_FIELDS);
    int n_out = 0;
    n_deq = 0;
    for (int c = 0; c < P; ++c) {
      int32_t left = served[c], n_full = 0, taken = 0;
      for (int j = 0; j < K && j < nruns[c] && left > 0; ++j) {
        int32_t* rec = runs + (static_cast<int64_t>(c) * R + fmod_i(head[c] + j, R)) * RUN_FIELDS;
        int32_t cnt = rec[COUNT];
        if (cnt <= 0) continue;
        int32_t take = std::min(left, cnt);
        int32_t t_retx = std::min(rec[NRETX], take);
        int32_t t_spur = std::min(rec[NSPUR], take - t_retx);
        int32_t t_ce = clip_i(take - (cnt - rec[NCE]), 0, rec[NCE]);  // the CE marks are a run's last packets
        if (n_out < K) {
          int32_t* o = out + n_out * RUN_FIELDS;
          o[FLOW] = rec[FLOW]; o[COUNT] = take; o[NRETX] = t_retx; o[TX0] = rec[TX0]; o[ENQ] = rec[ENQ];
          o[NSPUR] = t_spur; o[NCE] = t_ce;
          ++n_out;
        }
        if (take == cnt) {
          ++n_full;
        } else {
          rec[COUNT] -= take; rec[NRETX] -= t_retx; rec[NSPUR] -= t_spur; rec[TX0] += take; rec[NCE] -= t_ce;
        }
        left -= take;
        taken += take;
      }
      head[c] = fmod_i(head[c] + n_full, R);
      nruns[c] -= n_full;
      qp[c] -= taken;
      n_deq += served[c];
    }
    if (aqm == AQM_RED || aqm == AQM_ARED) {  // the discipline sees the queues as the tick leaves them
      const float now_end = P == 1 ? now_s + e.Pf(PL_tick_s)  // (as XLA rounds it in each shape)
                                   : fma_x(static_cast<float>(t), e.Pf(PL_tick_s), e.Pf(PL_tick_s));
      for (int c = 0; c < P; ++c) red_tick_end(e, aqm == AQM_ARED ? ARED_LEAVES : RED_LEAVES, c, served[c], qp[c], now_end);
    }
  }

  // 8. metrics, the interval record, the drain rate
  void record() {
    const int P = d.P, E = d.E, R = d.R, K = d.K;
    const int32_t* qlen = e.I(L_queue_pkts);
    int32_t occ_after = 0;
    for (int c = 0; c < P; ++c) occ_after += qlen[c];
    int32_t ahead = qlen[0];
    if (e.Pi(PL_scheduler_id) == 0)
      for (int c = 1; c < P; ++c) ahead += std::min(qlen[c], qlen[0] + 1);
    const float probe = fma_x(static_cast<float>(ahead), e.Pf(PL_ser_s), e.Pf(PL_base_rtt_s));
    const int32_t w = warm ? 1 : 0;
    int32_t s_rtx = 0, s_spur = 0, s_rtx_drop = 0, s_send = 0, s_drop = 0, nfired = 0;
    for (int k = 0; k < E; ++k) {
      s_rtx += n_retx[k] + n_spur[k];
      s_spur += n_spur[k];
      s_rtx_drop += n_retx[k] + n_spur[k] - adm_retx[k] - adm_spur[k];
      s_send += send[k];
      nfired += fired[k];
    }
    for (int c = 0; c < P; ++c) s_drop += drops_c[c];
    *e.I(L_metrics_retx_tx_total) += s_rtx;
    *e.I(L_metrics_spur_tx_total) += s_spur;
    *e.I(L_metrics_spur_sink_total) += n_spur_sink;
    *e.I(L_metrics_retx_arrive_warm) += w * s_rtx;
    *e.I(L_metrics_retx_drop_warm) += w * (s_rtx_drop + dep_retx_drops);
    *e.I(L_metrics_tx_total) += s_send;
    *e.I(L_metrics_drop_total) += s_drop;
    int32_t s_mark = 0;
    for (int c = 0; c < P; ++c) s_mark += marks_c[c];
    *e.I(L_metrics_mark_total) += s_mark;
    *e.I(L_metrics_deq_total) += n_deq;
    *e.I(L_metrics_sink_total) += n_sink;
    *e.I(L_metrics_deq_warm) += w * n_deq;
    *e.I(L_metrics_sink_warm) += w * (n_sink - n_spur_sink);
    *e.I(L_metrics_ticks_warm) += w;
    const float wf = static_cast<float>(w);
    for (int c = 0; c < P; ++c) {
      e.I(L_metrics_arrive_warm)[c] += w * arr_c[c];
      e.I(L_metrics_drop_warm)[c] += w * drops_c[c];
      e.I(L_metrics_mark_warm)[c] += w * marks_c[c];
      e.Fl(L_metrics_queue_sum)[c] = fma_x(wf, static_cast<float>(qlen[c]), e.Fl(L_metrics_queue_sum)[c]);
      e.I(L_metrics_queue_hist)[c * (R + 1) + wrap_index(std::min(qlen[c], R), R + 1)] += w;
    }
    e.I(L_metrics_occ_hist)[wrap_index(std::min(occ_after, P * R), P * R + 1)] += w;
    *e.Fl(L_metrics_probe_rtt_sum_s) = fma_x(wf, probe, *e.Fl(L_metrics_probe_rtt_sum_s));
    *e.Fl(L_metrics_probe_rtt_max_s) = maxf(*e.Fl(L_metrics_probe_rtt_max_s), warm ? probe : 0.0f);
    const float tick_s = e.Pf(PL_tick_s);
    for (int c = 0; c < P; ++c) {
      e.I(L_interval_arrivals_pkts)[c] += arr_c[c];
      e.I(L_interval_drops_pkts)[c] += drops_c[c];
      e.I(L_interval_marks_pkts)[c] += marks_c[c];
      e.I(L_interval_dequeues_pkts)[c] += served[c];
      e.Fl(L_interval_queue_pkt_s)[c] = fma_x(static_cast<float>(qlen[c]), tick_s, e.Fl(L_interval_queue_pkt_s)[c]);
      e.I(L_interval_queue_min_pkts)[c] = std::min(e.I(L_interval_queue_min_pkts)[c], qlen[c]);
    }
    *e.I(L_interval_sink_pkts) += n_sink - n_spur_sink;
    *e.Fl(L_interval_sink_bytes) += sink_bytes;
    *e.I(L_interval_rto_count) += nfired;
    *e.I(L_interval_syn_drops) += syn_lost;
    *e.Fl(L_interval_capacity_pkts) += static_cast<float>(K);  // no capacity schedule here: K a tick
    // drain rate per class, refreshed once per base RTT
    const int32_t win = e.Pi(PL_drain_win_ticks);
    int32_t* dwin = e.I(L_drain_window);
    int32_t& dstart = *e.I(L_drain_window_start);
    bool roll = (t + 1 - dstart) >= win;
    for (int c = 0; c < P; ++c) {
      int32_t v = dwin[c] + served[c];
      if (roll) {
        e.Fl(L_drain_norm)[c] = div_b(static_cast<float>(v), static_cast<float>(win * K));
        dwin[c] = 0;
      } else {
        dwin[c] = v;
      }
    }
    if (roll) dstart = t + 1;
    for (int c = 0; c < P; ++c) e.Fl(L_thresholds)[c] = thr[c];
    *e.Fl(L_next_arrival_s) = next_arrival;
    *e.I(L_tick) = t + 1;
  }

  void run() {
    begin();
    deliver();
    select_events();
    acks();
    timeouts();
    arrivals();
    count_events();
    transmit();
    admit();
    depart();
    record();
  }
};

ffi::Error RunImpl(ffi::Buffer<ffi::S32> si_in, ffi::Buffer<ffi::F32> sf_in, ffi::Buffer<ffi::S32> pi,
                   ffi::Buffer<ffi::F32> pf, ffi::ResultBuffer<ffi::S32> si_out, ffi::ResultBuffer<ffi::F32> sf_out,
                   int64_t n_ticks, int64_t threads, ffi::Span<const int64_t> dims,
                   ffi::Span<const int64_t> s_off, ffi::Span<const int64_t> p_off) {
  if (dims.size() != 12) return ffi::Error::InvalidArgument("rlbm native: dims must have 12 entries");
  if (static_cast<int64_t>(s_off.size()) != L_COUNT || static_cast<int64_t>(p_off.size()) != PL_COUNT)
    return ffi::Error::InvalidArgument("rlbm native: layout does not match the compiled kernel; rebuild it");
  Dims d{static_cast<int>(dims[0]), static_cast<int>(dims[1]), static_cast<int>(dims[2]), static_cast<int>(dims[3]),
         static_cast<int>(dims[4]), static_cast<int>(dims[5]), static_cast<int>(dims[6]), static_cast<int>(dims[7]),
         static_cast<int>(dims[8]), static_cast<int>(dims[9]), static_cast<int>(dims[10]),
         static_cast<int>(dims[11])};
  if (d.E > MAX_E || d.P > MAX_P || d.S > MAX_S || d.E != d.K + 3 || d.Q > MAX_FLOWS)
    return ffi::Error::InvalidArgument("rlbm native: pkts_per_tick <= 61, at most 16 classes, 1024 senders and "
                                       "1024 flow slots with per-flow queues");
  const int64_t ni = si_in.dimensions().back(), nf = sf_in.dimensions().back();
  const int64_t npi = pi.dimensions().back(), npf = pf.dimensions().back();
  const int64_t batch = ni ? static_cast<int64_t>(si_in.element_count()) / ni : 0;
  if (nf && static_cast<int64_t>(sf_in.element_count()) / nf != batch)
    return ffi::Error::InvalidArgument("rlbm native: state buffers disagree on the batch");
  const int64_t pbatch = npi ? static_cast<int64_t>(pi.element_count()) / npi : 0;
  if (pbatch != batch) return ffi::Error::InvalidArgument("rlbm native: params and state disagree on the batch");
  int32_t* so_i = si_out->typed_data();
  float* so_f = sf_out->typed_data();
  if (so_i != si_in.typed_data()) std::memcpy(so_i, si_in.typed_data(), sizeof(int32_t) * si_in.element_count());
  if (so_f != sf_in.typed_data()) std::memcpy(so_f, sf_in.typed_data(), sizeof(float) * sf_in.element_count());
  const int32_t* pid_all = pi.typed_data();
  // every model choice of every env against the values this kernel implements (layout.h,
  // generated from the model's manifest): a value it lacks is refused, never run as another
  for (int64_t b = 0; b < batch; ++b) {
    for (const ChoiceCheck& ch : CHOICE_CHECKS) {
      const int32_t v = pid_all[b * npi + p_off[ch.leaf]];
      int k = 0;
      while (k < ch.n && ch.codes[k] != v) ++k;
      if (k == ch.n || !ch.native[k]) {
        return ffi::Error::InvalidArgument(std::string("rlbm native: model choice ") + ch.name +
                                           " has a value the native tick does not implement");
      }
    }
  }
  // envs are independent: contiguous shares of the batch run on their own threads
  auto work = [&](int64_t lo, int64_t hi) {
    for (int64_t b = lo; b < hi; ++b) {
      Env env{d, so_i + b * ni, so_f + b * nf, pi.typed_data() + b * npi, pf.typed_data() + b * npf,
              s_off.begin(), p_off.begin()};
      for (int64_t n = 0; n < n_ticks; ++n) {
        Tick tk(env);
        tk.run();
      }
    }
  };
  const int64_t nthreads = std::max<int64_t>(1, std::min<int64_t>(threads, batch));
  if (nthreads == 1) {
    work(0, batch);
  } else {
    std::vector<std::thread> pool;
    for (int64_t i = 0; i < nthreads; ++i)
      pool.emplace_back(work, batch * i / nthreads, batch * (i + 1) / nthreads);
    for (auto& th : pool) th.join();
  }
  return ffi::Error::Success();
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(RlbmNativeRun, RunImpl,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::Buffer<ffi::S32>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Arg<ffi::Buffer<ffi::S32>>()
                                  .Arg<ffi::Buffer<ffi::F32>>()
                                  .Ret<ffi::Buffer<ffi::S32>>()
                                  .Ret<ffi::Buffer<ffi::F32>>()
                                  .Attr<int64_t>("n_ticks")
                                  .Attr<int64_t>("threads")
                                  .Attr<ffi::Span<const int64_t>>("dims")
                                  .Attr<ffi::Span<const int64_t>>("s_off")
                                  .Attr<ffi::Span<const int64_t>>("p_off"));
