// rlbm_scenario.cc -- ns-3.37 reference scenario of the rlbm_jax simulator.
//
// Topology: S senders, each on its own point-to-point access link to one switch;
// the switch reaches one sink over a point-to-point bottleneck link.  Data flows
// go sender -> switch -> sink, ACKs return sink -> switch -> sender.  The switch's
// bottleneck port holds the shared buffer (RlbmBufferQueueDisc: one FIFO per
// class, per-class admission thresholds of the chosen policy, a round-robin or
// strict-priority scheduler; with --policy=rl-mark one droptail FIFO whose marker
// CE-marks each admitted ECT packet with an agent's probability) or, with
// --policy=red, ared, pie, codel or fq-codel,
// ns-3's own queue disc of that AQM, optionally marking with ECN (one class); both
// are counted alike (PortMeter).  Every other port is lossless FIFO.
//
// Traffic: Poisson flow arrivals (sender uniform, size drawn from a piecewise-
// linear CDF) plus optional long-lived flows.  Every flow is its own TCP socket;
// a flow's class follows from its size, and it connects to sink port 10000 + class
// so that the buffer can classify its data packets.
//
// Agent: with --agent_interval_s the run is cut into agent intervals; at each
// boundary the scenario closes the interval's record, the raw statistics of
// rlbm_jax's `metrics.Interval` (per class data arrivals, drops, CE marks, departures, queue
// at the end and its time integral; distinct data at the sink; timeouts; lost SYNs;
// the flows finished with their sizes, classes and slowdowns; the open flows' log
// slowdown at both ends), and writes it to --intervals_out.  It computes no
// observation or reward: rlbm_jax's formulations compute both from this record.  With
// --policy=rl --agent=stdio it writes the record as one line on stdout and blocks
// until one line of knobs arrives on stdin (a policy process driven in lock-step):
// class c then admits while its queue is below class_alpha_c * beta_c * (B - Q),
// capped by its FIFO.  With --policy=rl-mark the knob line is "mark_prob=p": from then
// on every admitted ECT packet is CE-marked with probability p (its own random stream),
// non-ECT packets are untouched; --mark_prob sets p before the first answer (or for the
// whole run without an agent).  With --policy=rl-size the knob line is
// "buffer_size_pkts=n" (one value, or one per class): class c admits while its queue is
// below floor(n) clipped to [1, its FIFO cap], checked at each arrival (packets queued above
// a lowered limit stay and leave as served; no QueueDisc::SetMaxSize, which aborts below the
// occupancy); until the first answer (or without an agent) the limit is the FIFO cap.
// With --agent_flows=A the first A long flows are a sender agent's: each record adds their rows
// (agent_counts: transmissions, retransmissions, distinct segments at the sink over the interval;
// agent_state: cwnd, sRTT, least RTT sample, pacing rate, sRTT at the start), and with
// --agent=stdio the knob line is "cwnd_gain=g" (their windows times g, Orca) or, where they run
// --tcp=rate (a sender at a set pacing rate, --sender_rate_bps), "rate_gain=g" (Aurora).
// Every record also carries capacity_pkts: the data packets the bottleneck could send in
// the interval, the integral of its rate (constant, or --capacity_in's schedule) over the
// interval divided by a data packet's bits.
//
// Capacity: with --capacity_in (a CSV of time_s,rate_bps rows, rlbm_jax's capacity
// schedule) the bottleneck device's DataRate is set to each row's rate at its time
// (PointToPointNetDevice::SetDataRate; a packet already on the wire keeps the rate it
// started at), the last rate holding for ever or, where a last row gives a time and no
// rate ("60,"), the table repeating from that time on.  bottleneck_rate_bps stays the
// peak (every rate is at most it; the ACK direction, BDP and slowdowns use it), and
// util_wire is then the bits sent over the bits the schedule offered in the measured
// window (its integral), as rlbm_jax reports it; capacity_mean_bps is that mean.
//
// Output: one JSON object with the same report fields as rlbm_jax's
// `metrics.summarize`, optionally a per-flow CSV and a cwnd trace.  Rates, drop
// counts and queue statistics cover [warmup_s, seconds]; FCT statistics cover
// flows started at or after warmup_s; flows_started, flows_completed and
// rto_count count from t = 0 (long flows are started but never complete).
//
// Run with --help for the parameters.  Bad parameters exit with status 2.  ns-3
// defaults that no option sets can still be changed through attribute paths,
// e.g. --ns3::TcpSocket::DelAckTimeout=5ms (ns-3 default 200 ms).

#include "ns3/applications-module.h"
#include "ns3/core-module.h"
#include "ns3/internet-module.h"
#include "ns3/network-module.h"
#include "ns3/point-to-point-module.h"
#include "ns3/traffic-control-module.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <limits>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

using namespace ns3;

namespace rlbm {

constexpr uint32_t kDataHeaderBytes = 54; // TCP with timestamps (32) + IPv4 (20) + PPP (2)
constexpr uint32_t kAckBytes = 54;        // pure ACK on the wire
constexpr uint16_t kBasePort = 10000;     // class c flows connect to port kBasePort + c
constexpr uint32_t kSocketBufferBytes = 64u << 20; // so that buffers never cap the window
constexpr uint32_t kDataRetries = 100;
constexpr uint32_t kWriteChunkBytes = 1u << 20; // largest single write into a socket
constexpr const char* kLosslessQueue = "100000p";

// ---------------------------------------------------------------------------
// parameters
// ---------------------------------------------------------------------------

[[noreturn]] void BadParameter(const std::string& name, const std::string& why) {
    std::cerr << "rlbm_scenario: invalid parameter --" << name << ": " << why << std::endl;
    std::exit(2);
}

std::string Trim(const std::string& s) {
    const auto b = s.find_first_not_of(" \t\r\n");
    if (b == std::string::npos) return "";
    return s.substr(b, s.find_last_not_of(" \t\r\n") - b + 1);
}

/// A number (no NaN; "inf" is accepted and rejected later where it matters).
double ToDouble(const std::string& name, const std::string& text) {
    const std::string t = Trim(text);
    char* end = nullptr;
    const double v = t.empty() ? 0.0 : std::strtod(t.c_str(), &end);
    if (t.empty() || end != t.c_str() + t.size() || std::isnan(v)) {
        BadParameter(name, "not a number: '" + text + "'");
    }
    return v;
}

double ToFinite(const std::string& name, const std::string& text, double lo, bool loOpen) {
    const double v = ToDouble(name, text);
    if (!std::isfinite(v) || v < lo || (loOpen && v == lo)) {
        std::ostringstream why;
        why << "must be a finite number " << (loOpen ? "> " : ">= ") << lo << ", got " << text;
        BadParameter(name, why.str());
    }
    return v;
}

int64_t ToInt(const std::string& name, const std::string& text, int64_t lo, int64_t hi) {
    const double v = ToDouble(name, text);
    if (!std::isfinite(v) || v != std::floor(v) || v < double(lo) || v > double(hi)) {
        std::ostringstream why;
        why << "must be an integer in [" << lo << ", " << hi << "], got '" << text << "'";
        BadParameter(name, why.str());
    }
    return int64_t(v);
}

bool ToBool(const std::string& name, const std::string& text) {
    std::string t = Trim(text);
    if (t.empty()) {
        return true; // a bare --flag
    }
    std::transform(t.begin(), t.end(), t.begin(), [](unsigned char c) { return std::tolower(c); });
    if (t == "1" || t == "true" || t == "yes" || t == "on") return true;
    if (t == "0" || t == "false" || t == "no" || t == "off") return false;
    BadParameter(name, "must be 0/1 (or true/false), got '" + text + "'");
}

std::vector<std::string> SplitList(const std::string& text) {
    std::vector<std::string> out;
    if (Trim(text).empty()) return out;
    std::string item;
    std::istringstream is(text);
    while (std::getline(is, item, ',')) {
        out.push_back(Trim(item));
    }
    if (text.back() == ',') out.emplace_back();
    return out;
}

std::string OneOf(const std::string& name, const std::string& text, const std::vector<std::string>& choices) {
    for (const auto& c : choices) {
        if (text == c) return c;
    }
    std::string list;
    for (const auto& c : choices) {
        list += (list.empty() ? "" : ", ") + c;
    }
    BadParameter(name, "unknown value '" + text + "'; choose one of " + list);
}

/// Default alphas of each buffer policy (extended with the last value to P classes).
const std::map<std::string, std::vector<double>> kPolicyAlpha = {
    {"droptail", {1.0}},
    {"sb-naive", {1.0, 1.0}},
    {"sb-sophisticated", {8.0, 1.0}},
    {"dt", {1.0, 1.0}},
    {"abm", {1.0, 1.0}},
    {"rl", {1.0}}, // the agent's action before its first decision (RLBMEnv's reset state)
    {"rl-mark", {1.0}}, // droptail limits; the agent sets the marking probability
    {"rl-size", {1.0}}, // drop-tail at a limit the agent sets (the FIFO cap until it does)
    {"red", {1.0}}, // ns-3's AQM queue discs: one class, no alphas
    {"ared", {1.0}},
    {"pie", {1.0}},
    {"codel", {1.0}},
    {"fq-codel", {1.0}},
};

/// The policies that install one of ns-3's own queue discs instead of the shared buffer.
bool IsAqm(const std::string& policy) {
    return policy == "red" || policy == "ared" || policy == "pie" || policy == "codel" || policy == "fq-codel";
}

struct Params {
    // topology
    uint32_t numSenders;
    double accessRateBps, accessDelayS, bottleneckRateBps, bottleneckDelayS;
    // flow groups: sender s is in group s % flowGroups, with its own access delay and TCP
    // (accessDelayS and tcp are the first group's)
    uint32_t flowGroups = 1;
    std::vector<double> groupAccessDelayS;
    std::vector<std::string> groupTcp;
    std::vector<bool> groupPacing;            // TcpSocketState::EnablePacing of the group's senders
    std::vector<double> groupMaxPacingRateBps; // TcpSocketState::MaxPacingRate of the group's senders
    std::vector<double> groupSenderRateBps;    // tcp rate: the payload rate the group's senders start at
    std::vector<double> groupLongFlowStartS;   // the group's long flows start this long after t = 0
    // buffer
    uint32_t numClasses;
    std::vector<uint32_t> classCapPkts;
    uint32_t bufferPkts;
    std::string policy;
    std::vector<double> alpha;
    std::vector<double> beta; // rl: threshold = alpha * beta * free buffer
    std::string scheduler;
    std::vector<double> classThresholdBytes;
    double markProb; // rl-mark: probability of CE-marking an admitted ECT packet (until the agent's answer)
    // ns-3's AQM queue discs (policy red, ared, pie, codel, fq-codel) and ECN
    bool ecn;
    double redMinThPkts, redMaxThPkts, redMaxP, redWeight;
    bool redGentle;
    double pieTargetS, pieTupdateS, pieA, pieB, pieMaxBurstS, pieMarkThreshold;
    double codelTargetS, codelIntervalS;
    uint32_t fqFlows, fqQuantumBytes;
    // TCP
    std::string tcp;
    uint32_t mssBytes, initialCwndPkts;
    double minRtoS, rtoGranularityS, synTimeoutS;
    uint32_t delayedAck, dupthresh;
    double cubicBeta, cubicC;
    double dctcpG;
    double pacingSsRatio, pacingCaRatio; // TcpSocketState::PacingSsRatio / PacingCaRatio, as fractions
    bool paceInitialWindow;
    double bbrHighGain, bbrRttWindowS, bbrProbeRttS; // TcpBbr::HighGain, RttWindowLength, ProbeRttDuration
    uint32_t bbrBwWindowRounds;                      // TcpBbr::BwWindowLength
    bool cubicFastConvergence, hystart;
    uint32_t hystartLowWindowPkts, hystartMinSamples;
    double hystartAckDeltaS, hystartDelayMinS, hystartDelayMaxS;
    uint32_t ssAckCapSegs; // ablation: most segments one ACK adds in slow start (0 = ns-3 as is)
    // traffic
    std::string arrival;
    double load, arrivalStopS;
    std::string cdf;
    std::string flowsIn;  // a fixed flow schedule instead of Poisson arrivals
    // the bottleneck's capacity schedule (--capacity_in): segment starts, rates, period
    std::string capacityIn;
    std::vector<double> capTimesS, capRatesBps;
    double capPeriodS = std::numeric_limits<double>::infinity();
    uint32_t longFlows;
    double longFlowStartSpreadS;
    // run
    double seconds, warmupS;
    uint64_t seed;
    std::string out, flowsOut, cwndOut, rtoOut;
    double traceIntervalS;
    // agent
    std::string agent;     // "" or "stdio"
    double agentIntervalS; // 0 = no per-interval observations and reward
    uint32_t agentFlows;   // long flows 0..A-1 a sender agent drives (their rows in the record; cwnd_gain)
    std::string intervalsOut;

    double DataPktBits() const { return (mssBytes + kDataHeaderBytes) * 8.0; }

    /// The bits the bottleneck offers over [t0, t1]: the capacity schedule's integral, or
    /// bottleneck_rate_bps x (t1 - t0) without one.
    double OfferedBits(double t0, double t1) const {
        if (capTimesS.empty()) return bottleneckRateBps * (t1 - t0);
        auto upto = [&](double t) {
            const size_t n = capTimesS.size();
            const bool repeats = std::isfinite(capPeriodS);
            double whole = 0, periods = 0;
            if (repeats) {
                for (size_t i = 0; i < n; ++i) {
                    const double end = i + 1 < n ? capTimesS[i + 1] : capPeriodS;
                    whole += capRatesBps[i] * (end - capTimesS[i]);
                }
                periods = std::floor(t / capPeriodS);
                t -= periods * capPeriodS;
            }
            double bits = periods * whole;
            for (size_t i = 0; i < n; ++i) {
                const double end = i + 1 < n ? capTimesS[i + 1] : (repeats ? capPeriodS : t);
                bits += capRatesBps[i] * std::max(0.0, std::min(end, t) - capTimesS[i]);
            }
            return bits;
        };
        return upto(t1) - upto(t0);
    }

    /// Propagation + serialisation RTT of an empty path (data one way, ACK back).
    double BaseRttS() const {
        const double a = kAckBytes * 8.0;
        return 2.0 * (accessDelayS + bottleneckDelayS) + DataPktBits() / accessRateBps +
               DataPktBits() / bottleneckRateBps + a / accessRateBps + a / bottleneckRateBps;
    }

    uint32_t GroupOf(uint32_t sender) const { return sender % flowGroups; }

    /// A flow group's empty-path RTT: BaseRttS with its access delay.
    double GroupBaseRttS(uint32_t g) const { return BaseRttS() + 2.0 * (groupAccessDelayS[g] - accessDelayS); }

    /// Flow class: the number of class thresholds the size exceeds.
    uint32_t ClassOf(double sizeBytes) const {
        uint32_t c = 0;
        for (double t : classThresholdBytes) {
            c += sizeBytes > t ? 1 : 0;
        }
        return c;
    }
};

/// One command-line option, kept as text until validation.
struct Option {
    std::string name, value, help;

    bool Set(std::string v) {
        value = std::move(v);
        return true;
    }
};

class Options {
  public:
    void Add(const std::string& name, const std::string& def, const std::string& help) {
        m_list.push_back(std::make_unique<Option>(Option{name, def, help}));
    }

    const std::string& operator[](const std::string& name) const {
        for (const auto& o : m_list) {
            if (o->name == name) return o->value;
        }
        NS_FATAL_ERROR("unregistered option " << name);
    }

    bool Known(const std::string& name) const {
        return std::any_of(m_list.begin(), m_list.end(), [&](const auto& o) { return o->name == name; });
    }

    void Register(CommandLine& cmd) {
        for (auto& o : m_list) {
            cmd.AddValue(o->name, o->help, MakeCallback(&Option::Set, o.get()), o->value);
        }
    }

  private:
    std::vector<std::unique_ptr<Option>> m_list; // stable addresses for the callbacks
};

Options DeclareOptions() {
    Options o;
    o.Add("num_senders", "10", "number of sender hosts");
    o.Add("access_rate_bps", "100e6", "rate of each sender's access link (bit/s)");
    o.Add("flow_groups", "1", "sender groups (sender s is in group s mod flow_groups), each with its own access "
                              "delay and TCP: access_delay_s and tcp take one value or one per group");
    o.Add("access_delay_s", "0.0001", "one-way propagation delay of an access link (s): one value, or a comma "
                                      "list of one per flow group");
    o.Add("bottleneck_rate_bps", "10e6", "switch -> sink link rate (bit/s)");
    o.Add("bottleneck_delay_s", "0.01", "switch -> sink one-way propagation delay (s)");
    o.Add("num_classes", "2", "number of traffic classes (FIFOs) at the bottleneck");
    o.Add("class_cap_pkts", "100", "FIFO cap per class (packets): one value or one per class");
    o.Add("buffer_pkts", "0", "shared buffer size B in packets (0 = sum of the class caps)");
    o.Add("policy", "sb-naive",
          "buffer policy: droptail, sb-naive, sb-sophisticated, dt, abm, rl, rl-mark (droptail limits, every "
          "admitted ECT packet CE-marked with probability mark_prob; needs ecn), rl-size (drop-tail at the limit "
          "an agent sets, buffer_size_pkts); or one of ns-3's own queue discs "
          "(one class, MaxSize = buffer_pkts): red, ared (RED with adaptive max_p), pie, codel, fq-codel");
    o.Add("mark_prob", "0", "rl-mark: marking probability in [0, 1] before the agent's first answer (without an "
                            "agent: for the whole run)");
    o.Add("alpha", "", "policy weights, comma list (empty = the policy's defaults)");
    o.Add("beta", "1", "rl: per-class weights beta_c of the threshold alpha_c * beta_c * (B - Q)");
    o.Add("scheduler", "rr", "rr (per-packet round robin) or strict (class 0 first)");
    o.Add("class_threshold_bytes", "2000000",
          "flow-size thresholds between classes (num_classes-1 values, or one for all)");
    o.Add("ecn", "0", "classic ECN (0/1): TCP sockets negotiate it and the AQM queue disc marks ECT packets "
                      "instead of dropping them where ns-3 marks");
    o.Add("red_min_th_pkts", "5", "red, ared: minimum threshold of the average queue (packets)");
    o.Add("red_max_th_pkts", "15", "red, ared: maximum threshold of the average queue (packets)");
    o.Add("red_max_p", "0.02", "red, ared: drop probability at the maximum threshold (ns-3 LInterm = 1/max_p; "
                               "ared: its initial value)");
    o.Add("red_weight", "0.002", "red, ared: weight of the average queue's moving average (ns-3 QW)");
    o.Add("red_gentle", "1", "red, ared: gentle RED, the probability rises to 1 at twice the maximum threshold");
    o.Add("pie_target_s", "0.015", "pie: target queue delay (QueueDelayReference, s)");
    o.Add("pie_tupdate_s", "0.015", "pie: period of the drop probability update (s)");
    o.Add("pie_a", "0.125", "pie: alpha, weight of the delay's distance to the target");
    o.Add("pie_b", "1.25", "pie: beta, weight of the delay's change");
    o.Add("pie_max_burst_s", "0.15", "pie: burst allowance (s)");
    o.Add("pie_mark_threshold", "0.1", "pie: drop probability above which ECT packets are dropped, not marked");
    o.Add("codel_target_s", "0.005", "codel, fq-codel: target sojourn time (s)");
    o.Add("codel_interval_s", "0.1", "codel, fq-codel: interval (s)");
    o.Add("fq_flows", "1024", "fq-codel: number of flow queues");
    o.Add("fq_quantum_bytes", "0", "fq-codel: deficit round-robin quantum (bytes; 0 = the device MTU)");
    o.Add("tcp", "cubic", "congestion control: cubic, newreno, dctcp (ECN on) or bbr (TcpBbr, paced): one, or a "
                          "comma list of one per flow group");
    o.Add("pacing", "off", "sender pacing: off or ns-3.37 (TcpSocketState::EnablePacing): one, or a comma list "
                           "of one per flow group");
    o.Add("max_pacing_rate_bps", "4e9", "pacing: the highest pacing rate (TcpSocketState::MaxPacingRate, bit/s): "
                                        "one, or a comma list of one per flow group");
    o.Add("sender_rate_bps", "1e6", "tcp rate: the payload rate a rate sender starts at and holds until a sender "
                                    "agent moves it (rate_gain; bit/s): one, or one per flow group");
    o.Add("pacing_ss_ratio", "2", "pacing: rate / (cwnd / sRTT) while cwnd < ssthresh / 2 (PacingSsRatio / 100)");
    o.Add("pacing_ca_ratio", "1.2", "pacing: rate / (cwnd / sRTT) otherwise (PacingCaRatio / 100)");
    o.Add("pace_initial_window", "0", "pacing: pace the initial window too (TcpSocketState::PaceInitialWindow)");
    o.Add("mss_bytes", "1000", "TCP payload bytes per segment");
    o.Add("initial_cwnd_pkts", "10", "initial congestion window (segments)");
    o.Add("min_rto_s", "0.01", "minimum retransmission timeout (s)");
    o.Add("syn_timeout_s", "3", "SYN retransmission timeout (TcpSocket::ConnTimeout, s)");
    o.Add("rto_granularity_s", "0.001", "clock granularity term of the RTO (s)");
    o.Add("delayed_ack", "1", "segments per ACK (1 or 2)");
    o.Add("dupthresh", "3", "duplicate ACKs that declare a loss");
    o.Add("cubic_beta", "0.7", "CUBIC multiplicative decrease factor");
    o.Add("bbr_high_gain", "2.89", "BBR: STARTUP's pacing and window gain (TcpBbr::HighGain)");
    o.Add("bbr_bw_window_rounds", "10", "BBR: rounds of the delivery rate's max filter (TcpBbr::BwWindowLength)");
    o.Add("bbr_rtt_window_s", "10", "BBR: the min RTT's expiry (TcpBbr::RttWindowLength, s)");
    o.Add("bbr_probe_rtt_s", "0.2", "BBR: least time in PROBE_RTT (TcpBbr::ProbeRttDuration, s)");
    o.Add("dctcp_g", "0.0625", "DCTCP: weight of a window's marked fraction in alpha (TcpDctcp::DctcpShiftG)");
    o.Add("cubic_c", "0.4", "CUBIC scaling constant");
    o.Add("cubic_fast_convergence", "1", "CUBIC fast convergence (0/1)");
    o.Add("hystart", "1", "CUBIC HyStart (0/1)");
    o.Add("ss_ack_cap_segs", "0",
          "ablation, not a model parameter: cap the segments one ACK credits in slow start "
          "(ns-3.37 CUBIC credits every segment a cumulative ACK covers; 0 = unchanged)");
    o.Add("hystart_low_window_pkts", "16", "cwnd below which HyStart is off (segments)");
    o.Add("hystart_min_samples", "8", "RTT samples per HyStart round");
    o.Add("hystart_ack_delta_s", "0.002", "HyStart ACK-train spacing (s)");
    o.Add("hystart_delay_min_s", "0.004", "HyStart minimum delay threshold (s)");
    o.Add("hystart_delay_max_s", "1.0", "HyStart maximum delay threshold (s)");
    o.Add("arrival", "load", "arrival rate: load (load*C/(8E[size])) or thesis-code (5*load*S)");
    o.Add("load", "0.7", "offered load as a fraction of the bottleneck rate");
    o.Add("arrival_stop_s", "45", "no new flows at or after this time (s)");
    o.Add("cdf", "", "flow-size CSV (size_bytes,cdf rows); needed when load > 0");
    o.Add("flows_in", "", "CSV start_s,sender,size_bytes: start exactly these flows instead of "
                          "drawing Poisson arrivals (the same workload as another simulator)");
    o.Add("capacity_in", "", "CSV time_s,rate_bps: the bottleneck's rate from each row's time on (the first row "
                             "at 0, rates in (0, bottleneck_rate_bps]); a last row 'time,' with no rate makes the "
                             "table repeat from that time (rlbm_jax's capacity schedule)");
    o.Add("long_flows", "0", "number of long-lived flows; flow k starts on sender k mod num_senders");
    o.Add("long_flow_start_spread_s", "0", "long flows start uniformly in [0, spread) (s)");
    o.Add("long_flow_start_s", "0", "the long flows of a flow group start this long after t = 0, then within the "
                                    "spread (s): one, or a comma list of one per flow group");
    o.Add("seconds", "60", "simulated time (s)");
    o.Add("warmup_s", "0", "start of the measured window (s)");
    o.Add("seed", "1", "run number of the random streams (RngSeedManager::SetRun)");
    o.Add("out", "-", "JSON report path ('-' = stdout)");
    o.Add("flows_out", "", "per-flow CSV of completed flows (optional)");
    o.Add("cwnd_out", "", "cwnd/ssthresh trace CSV of the first long (else first) flow");
    o.Add("rto_out", "", "CSV of every retransmission timeout: time, the flow's start and size, whether it is "
                        "long-lived, cwnd, ssthresh, last RTT and congestion state");
    o.Add("trace_interval_s", "0.01", "sampling period of the cwnd trace (s)");
    o.Add("agent_interval_s", "0",
          "agent interval (s): the interval record (rlbm_jax metrics.Interval) at every k * agent_interval_s "
          "(0 = off)");
    o.Add("agent", "", "rl, rl-mark, rl-size: 'stdio' = record lines out on stdout, knob lines in on stdin (rl: "
                       "class_alpha=a0,a1,...; rl-mark: mark_prob=p; rl-size: buffer_size_pkts=n; with "
                       "agent_flows: cwnd_gain=g or one per agent flow), in lock-step");
    o.Add("agent_flows", "0", "long flows 0..A-1 a sender agent drives: the interval record lists their packets, "
                              "window and RTTs (agent_counts, agent_state), and with --agent=stdio the answer "
                              "cwnd_gain multiplies their windows (Orca)");
    o.Add("intervals_out", "", "per-interval CSV: the interval record and the alphas in effect (rl-mark: and the "
                               "marking probability)");
    return o;
}

/// Reject unknown options and stray arguments with status 2 (ns-3's CommandLine
/// would exit 1 on them).  ns-3's own options and attribute paths pass through.
void CheckArgumentNames(int argc, char* argv[], const Options& opts) {
    static const std::vector<std::string> builtin = {"h", "help", "PrintHelp", "PrintGlobals",
                                                     "PrintGroups", "PrintGroup", "PrintTypeIds",
                                                     "PrintAttributes", "PrintVersion", "version"};
    for (int i = 1; i < argc; ++i) {
        std::string arg = argv[i];
        if (arg.empty() || arg[0] != '-') {
            std::cerr << "rlbm_scenario: unexpected argument '" << arg << "' (options are --name=value)"
                      << std::endl;
            std::exit(2);
        }
        const size_t start = arg.find_first_not_of('-');
        const std::string body = start == std::string::npos ? "" : arg.substr(start);
        const std::string name = body.substr(0, body.find('='));
        if (opts.Known(name) || name.find("::") != std::string::npos ||
            std::find(builtin.begin(), builtin.end(), name) != builtin.end()) {
            continue;
        }
        std::cerr << "rlbm_scenario: unknown option --" << name << " (see --help)" << std::endl;
        std::exit(2);
    }
}

/// Reads --capacity_in (rlbm_jax capacity.Schedule.to_csv: a header, `#` comments and blank
/// lines skipped; rows time_s,rate_bps; a last row with a time and no rate is the period).
void ReadCapacity(Params& c) {
    const std::string& path = c.capacityIn;
    std::ifstream in(path);
    if (!in) BadParameter("capacity_in", "cannot read file '" + path + "'");
    std::string line;
    int lineNo = 0;
    auto where = [&]() { return path + " line " + std::to_string(lineNo) + ": "; };
    while (std::getline(in, line)) {
        ++lineNo;
        line = Trim(line.substr(0, line.find('#')));
        if (line.empty()) continue;
        if (c.capTimesS.empty() && !(std::isdigit(static_cast<unsigned char>(line[0])) || line[0] == '.')) {
            continue; // the header
        }
        if (std::isfinite(c.capPeriodS)) BadParameter("capacity_in", where() + "a row after the end row");
        const auto comma = line.find(',');
        if (comma == std::string::npos) BadParameter("capacity_in", where() + "expected 'time_s,rate_bps'");
        const double t = ToFinite("capacity_in", line.substr(0, comma), 0, false);
        const std::string rate = Trim(line.substr(comma + 1));
        if (rate.empty()) {
            if (c.capTimesS.empty() || !(t > c.capTimesS.back())) {
                BadParameter("capacity_in", where() + "the end row's time must come after the last start");
            }
            c.capPeriodS = t;
            continue;
        }
        const double r = ToFinite("capacity_in", rate, 0, true);
        if (r > c.bottleneckRateBps * (1 + 1e-9)) {
            BadParameter("capacity_in", where() + "rate " + rate + " exceeds bottleneck_rate_bps (the peak)");
        }
        if (c.capTimesS.empty() ? t != 0 : !(t > c.capTimesS.back())) {
            BadParameter("capacity_in", where() + "the first row must start at 0 and times must increase");
        }
        c.capTimesS.push_back(t);
        c.capRatesBps.push_back(r);
    }
    if (c.capTimesS.empty()) BadParameter("capacity_in", "no time_s,rate_bps rows in " + path);
}

Params ParseCommandLine(int argc, char* argv[]) {
    Options o = DeclareOptions();
    CheckArgumentNames(argc, argv, o);
    CommandLine cmd(__FILE__);
    cmd.Usage("ns-3.37 reference scenario of the rlbm_jax congested-buffer simulator.\n"
              "Prints one JSON report; invalid parameters exit with status 2.");
    o.Register(cmd);
    cmd.Parse(argc, argv);

    Params c;
    c.numSenders = ToInt("num_senders", o["num_senders"], 1, 16000);
    c.accessRateBps = ToFinite("access_rate_bps", o["access_rate_bps"], 0, true);
    c.flowGroups = ToInt("flow_groups", o["flow_groups"], 1, c.numSenders);
    auto perGroup = [&](const std::string& name) {
        auto v = SplitList(o[name]);
        if (v.size() == 1) v.assign(c.flowGroups, v[0]);
        if (v.size() != c.flowGroups) {
            BadParameter(name, "need one value or flow_groups (" + std::to_string(c.flowGroups) + ") values");
        }
        return v;
    };
    for (const auto& d : perGroup("access_delay_s")) {
        c.groupAccessDelayS.push_back(ToFinite("access_delay_s", d, 0, false));
    }
    c.accessDelayS = c.groupAccessDelayS[0];
    c.bottleneckRateBps = ToFinite("bottleneck_rate_bps", o["bottleneck_rate_bps"], 0, true);
    c.bottleneckDelayS = ToFinite("bottleneck_delay_s", o["bottleneck_delay_s"], 0, false);

    c.numClasses = ToInt("num_classes", o["num_classes"], 1, 1000);
    const auto caps = SplitList(o["class_cap_pkts"]);
    if (caps.size() != 1 && caps.size() != c.numClasses) {
        BadParameter("class_cap_pkts", "need one value or num_classes (" +
                                           std::to_string(c.numClasses) + ") values");
    }
    for (uint32_t k = 0; k < c.numClasses; ++k) {
        c.classCapPkts.push_back(ToInt("class_cap_pkts", caps[caps.size() == 1 ? 0 : k], 1, 1000000));
    }
    c.bufferPkts = ToInt("buffer_pkts", o["buffer_pkts"], 0, 100000000);
    if (c.bufferPkts == 0) {
        for (uint32_t cap : c.classCapPkts) {
            c.bufferPkts += cap;
        }
    }
    c.policy = OneOf("policy", o["policy"], {"droptail", "sb-naive", "sb-sophisticated", "dt", "abm", "rl", "rl-mark",
                                             "rl-size", "red", "ared", "pie", "codel", "fq-codel"});
    c.markProb = ToFinite("mark_prob", o["mark_prob"], 0, false);
    if (c.markProb > 1) BadParameter("mark_prob", "must be a probability in [0, 1], got " + o["mark_prob"]);
    if (IsAqm(c.policy) && c.numClasses != 1) {
        BadParameter("num_classes", "must be 1 with --policy=" + c.policy + " (one queue disc, no classes), got " +
                                        std::to_string(c.numClasses));
    }
    std::vector<double> alpha;
    for (const auto& a : SplitList(o["alpha"])) {
        alpha.push_back(ToFinite("alpha", a, 0, false));
    }
    if (alpha.empty()) {
        alpha = kPolicyAlpha.at(c.policy);
    } else if (alpha.size() != 1 && alpha.size() != c.numClasses) {
        BadParameter("alpha", "need one value or num_classes (" + std::to_string(c.numClasses) + ") values");
    }
    for (uint32_t k = 0; k < c.numClasses; ++k) {
        c.alpha.push_back(alpha[std::min<size_t>(k, alpha.size() - 1)]);
    }
    const auto beta = SplitList(o["beta"]);
    if (beta.size() != 1 && beta.size() != c.numClasses) {
        BadParameter("beta", "need one value or num_classes (" + std::to_string(c.numClasses) + ") values");
    }
    for (uint32_t k = 0; k < c.numClasses; ++k) {
        c.beta.push_back(ToFinite("beta", beta[beta.size() == 1 ? 0 : k], 0, false));
    }
    c.scheduler = OneOf("scheduler", o["scheduler"], {"rr", "strict"});
    const auto thr = SplitList(o["class_threshold_bytes"]);
    if (c.numClasses > 1 && thr.size() != 1 && thr.size() != c.numClasses - 1) {
        BadParameter("class_threshold_bytes", "need num_classes-1 (" + std::to_string(c.numClasses - 1) +
                                                  ") values, or one for all");
    }
    for (uint32_t k = 0; k + 1 < c.numClasses; ++k) {
        c.classThresholdBytes.push_back(
            ToFinite("class_threshold_bytes", thr[thr.size() == 1 ? 0 : k], 0, false));
    }

    auto probability = [&](const std::string& name) {
        const double p = ToFinite(name, o[name], 0, true);
        if (p > 1) BadParameter(name, "must be a probability in (0, 1], got " + o[name]);
        return p;
    };
    c.ecn = ToBool("ecn", o["ecn"]);
    c.redMinThPkts = ToFinite("red_min_th_pkts", o["red_min_th_pkts"], 0, true);
    c.redMaxThPkts = ToFinite("red_max_th_pkts", o["red_max_th_pkts"], 0, true);
    if (c.redMaxThPkts <= c.redMinThPkts) {
        BadParameter("red_max_th_pkts", "must be larger than red_min_th_pkts (" + o["red_min_th_pkts"] + "), got " +
                                            o["red_max_th_pkts"]);
    }
    c.redMaxP = probability("red_max_p");
    c.redWeight = probability("red_weight");
    c.redGentle = ToBool("red_gentle", o["red_gentle"]);
    c.pieTargetS = ToFinite("pie_target_s", o["pie_target_s"], 0, true);
    c.pieTupdateS = ToFinite("pie_tupdate_s", o["pie_tupdate_s"], 0, true);
    c.pieA = ToFinite("pie_a", o["pie_a"], 0, true);
    c.pieB = ToFinite("pie_b", o["pie_b"], 0, true);
    c.pieMaxBurstS = ToFinite("pie_max_burst_s", o["pie_max_burst_s"], 0, true);
    c.pieMarkThreshold = probability("pie_mark_threshold");
    c.codelTargetS = ToFinite("codel_target_s", o["codel_target_s"], 0, true);
    c.codelIntervalS = ToFinite("codel_interval_s", o["codel_interval_s"], 0, true);
    c.fqFlows = ToInt("fq_flows", o["fq_flows"], 1, 1000000);
    c.fqQuantumBytes = ToInt("fq_quantum_bytes", o["fq_quantum_bytes"], 0, 100000000);

    for (const auto& t : perGroup("tcp")) {
        c.groupTcp.push_back(OneOf("tcp", t, {"cubic", "newreno", "dctcp", "bbr", "rate"}));
        if ((c.groupTcp.back() == "dctcp") != (c.groupTcp[0] == "dctcp")) {
            BadParameter("tcp", "dctcp turns ECN on for the whole run here: give every flow group dctcp, or none");
        }
    }
    c.tcp = c.groupTcp[0];
    for (const auto& v : perGroup("pacing")) c.groupPacing.push_back(OneOf("pacing", v, {"off", "ns-3.37"}) != "off");
    for (const auto& v : perGroup("max_pacing_rate_bps")) {
        c.groupMaxPacingRateBps.push_back(ToFinite("max_pacing_rate_bps", v, 0, true));
    }
    for (const auto& v : perGroup("sender_rate_bps")) {
        c.groupSenderRateBps.push_back(ToFinite("sender_rate_bps", v, 0, true));
    }
    for (const auto& v : perGroup("long_flow_start_s")) {
        c.groupLongFlowStartS.push_back(ToFinite("long_flow_start_s", v, 0, false));
    }
    c.pacingSsRatio = ToFinite("pacing_ss_ratio", o["pacing_ss_ratio"], 0, true);
    c.pacingCaRatio = ToFinite("pacing_ca_ratio", o["pacing_ca_ratio"], 0, true);
    c.paceInitialWindow = ToBool("pace_initial_window", o["pace_initial_window"]);
    c.bbrHighGain = ToFinite("bbr_high_gain", o["bbr_high_gain"], 0, true);
    if (c.bbrHighGain <= 1) BadParameter("bbr_high_gain", "must be above 1, got " + o["bbr_high_gain"]);
    c.bbrBwWindowRounds = ToInt("bbr_bw_window_rounds", o["bbr_bw_window_rounds"], 1, 1000000);
    c.bbrRttWindowS = ToFinite("bbr_rtt_window_s", o["bbr_rtt_window_s"], 0, true);
    c.bbrProbeRttS = ToFinite("bbr_probe_rtt_s", o["bbr_probe_rtt_s"], 0, true);
    if (c.tcp == "dctcp") c.ecn = true; // TcpDctcp turns ECN on itself; the disc must mark
    if (c.policy == "rl-mark" && !c.ecn) {
        BadParameter("ecn", "--policy=rl-mark only marks (it never drops below the limit): it needs --ecn=1");
    }
    c.mssBytes = ToInt("mss_bytes", o["mss_bytes"], 1, 65000);
    c.initialCwndPkts = ToInt("initial_cwnd_pkts", o["initial_cwnd_pkts"], 1, 1000000);
    c.minRtoS = ToFinite("min_rto_s", o["min_rto_s"], 0, true);
    c.synTimeoutS = ToFinite("syn_timeout_s", o["syn_timeout_s"], 0, true);
    c.rtoGranularityS = ToFinite("rto_granularity_s", o["rto_granularity_s"], 0, false);
    c.delayedAck = ToInt("delayed_ack", o["delayed_ack"], 1, 2);
    c.dupthresh = ToInt("dupthresh", o["dupthresh"], 1, 1000);
    c.cubicBeta = ToFinite("cubic_beta", o["cubic_beta"], 0, true);
    c.dctcpG = ToFinite("dctcp_g", o["dctcp_g"], 0, true);
    if (c.dctcpG > 1) BadParameter("dctcp_g", "must be in (0, 1], got " + o["dctcp_g"]);
    if (c.cubicBeta >= 1) BadParameter("cubic_beta", "must be in (0, 1), got " + o["cubic_beta"]);
    c.cubicC = ToFinite("cubic_c", o["cubic_c"], 0, true);
    c.cubicFastConvergence = ToBool("cubic_fast_convergence", o["cubic_fast_convergence"]);
    c.hystart = ToBool("hystart", o["hystart"]);
    c.ssAckCapSegs = ToInt("ss_ack_cap_segs", o["ss_ack_cap_segs"], 0, 1000000);
    c.hystartLowWindowPkts = ToInt("hystart_low_window_pkts", o["hystart_low_window_pkts"], 0, 1000000);
    c.hystartMinSamples = ToInt("hystart_min_samples", o["hystart_min_samples"], 1, 255);
    c.hystartAckDeltaS = ToFinite("hystart_ack_delta_s", o["hystart_ack_delta_s"], 0, false);
    c.hystartDelayMinS = ToFinite("hystart_delay_min_s", o["hystart_delay_min_s"], 0, false);
    c.hystartDelayMaxS = ToFinite("hystart_delay_max_s", o["hystart_delay_max_s"], 0, false);
    if (c.hystartDelayMaxS < c.hystartDelayMinS) {
        BadParameter("hystart_delay_max_s", "must be >= hystart_delay_min_s");
    }

    c.arrival = OneOf("arrival", o["arrival"], {"load", "thesis-code"});
    c.load = ToFinite("load", o["load"], 0, false);
    c.arrivalStopS = ToDouble("arrival_stop_s", o["arrival_stop_s"]);
    if (c.arrivalStopS < 0) BadParameter("arrival_stop_s", "must be >= 0, got " + o["arrival_stop_s"]);
    c.cdf = Trim(o["cdf"]);
    c.flowsIn = Trim(o["flows_in"]);
    if (c.load > 0 && c.cdf.empty() && c.flowsIn.empty()) {
        BadParameter("cdf", "a flow-size CSV is required when load > 0");
    }
    c.capacityIn = Trim(o["capacity_in"]);
    if (!c.capacityIn.empty()) ReadCapacity(c);
    c.longFlows = ToInt("long_flows", o["long_flows"], 0, 16000);
    c.longFlowStartSpreadS = ToFinite("long_flow_start_spread_s", o["long_flow_start_spread_s"], 0, false);

    c.seconds = ToFinite("seconds", o["seconds"], 0, true);
    c.warmupS = ToFinite("warmup_s", o["warmup_s"], 0, false);
    if (c.warmupS >= c.seconds) BadParameter("warmup_s", "must be smaller than seconds");
    c.seed = ToInt("seed", o["seed"], 0, int64_t(1) << 52);
    c.out = Trim(o["out"]);
    if (c.out.empty()) BadParameter("out", "empty path (use '-' for stdout)");
    c.flowsOut = Trim(o["flows_out"]);
    c.cwndOut = Trim(o["cwnd_out"]);
    c.rtoOut = Trim(o["rto_out"]);
    c.traceIntervalS = ToFinite("trace_interval_s", o["trace_interval_s"], 0, true);
    c.agentIntervalS = ToFinite("agent_interval_s", o["agent_interval_s"], 0, false);
    if (c.agentIntervalS > c.seconds) BadParameter("agent_interval_s", "must not exceed seconds");
    c.agent = OneOf("agent", Trim(o["agent"]), {"", "stdio"});
    c.intervalsOut = Trim(o["intervals_out"]);
    c.agentFlows = ToInt("agent_flows", o["agent_flows"], 0, c.longFlows);
    if (c.agentFlows > 0 && c.agentIntervalS == 0) {
        BadParameter("agent_flows", "the agent flows' rows are interval records: add --agent_interval_s");
    }
    for (uint32_t k = 0; k < c.agentFlows; ++k) {
        if ((c.groupTcp[c.GroupOf(k % c.numSenders)] == "rate") != (c.groupTcp[c.GroupOf(0)] == "rate")) {
            BadParameter("agent_flows", "the agent flows are all rate senders (knob rate_gain) or none (cwnd_gain)");
        }
    }
    if (c.policy == "rl" && c.agent.empty()) {
        BadParameter("policy", "rl takes its alphas from an agent: add --agent=stdio and --agent_interval_s");
    }
    if (!c.agent.empty()) {
        const bool switchAgent = c.policy == "rl" || c.policy == "rl-mark" || c.policy == "rl-size";
        if (!switchAgent && c.agentFlows == 0) {
            BadParameter("agent", "an agent sets the knobs of --policy=rl (thresholds), rl-mark (marking) or "
                                  "rl-size (the drop-tail limit), or the windows of --agent_flows (a sender agent)");
        }
        if (switchAgent && c.agentFlows > 0) {
            BadParameter("agent_flows", "one agent per run: a sender agent (agent_flows) with --policy=" + c.policy +
                                            " would answer for both; give one of them");
        }
        if (c.agentIntervalS == 0) BadParameter("agent_interval_s", "the agent needs a positive interval");
        if (c.out == "-") BadParameter("out", "stdout carries the agent's observations: give a report path");
    }
    if (!c.intervalsOut.empty() && c.agentIntervalS == 0) {
        BadParameter("intervals_out", "needs --agent_interval_s > 0");
    }
    return c;
}

// ---------------------------------------------------------------------------
// flow sizes
// ---------------------------------------------------------------------------

/// Piecewise-linear flow-size distribution read from `size_bytes,cdf` rows.
class SizeDistribution {
  public:
    static SizeDistribution Load(const std::string& path) {
        std::ifstream in(path);
        if (!in) BadParameter("cdf", "cannot read file '" + path + "'");
        SizeDistribution d;
        std::string line;
        for (int lineNo = 1; std::getline(in, line); ++lineNo) {
            line = Trim(line.substr(0, line.find('#')));
            if (line.empty()) continue;
            const auto f = SplitList(line);
            char* e1 = nullptr;
            char* e2 = nullptr;
            const double s = f.size() == 2 ? std::strtod(f[0].c_str(), &e1) : 0;
            const double p = f.size() == 2 ? std::strtod(f[1].c_str(), &e2) : 0;
            const bool numeric = f.size() == 2 && !f[0].empty() && !f[1].empty() && *e1 == '\0' &&
                                 *e2 == '\0' && std::isfinite(s) && std::isfinite(p);
            if (!numeric) {
                if (d.m_size.empty()) {
                    continue; // header line
                }
                BadParameter("cdf", path + " line " + std::to_string(lineNo) + ": expected 'size_bytes,cdf'");
            }
            d.m_size.push_back(s);
            d.m_cdf.push_back(p);
        }
        const size_t n = d.m_size.size();
        if (n < 2) BadParameter("cdf", path + ": need at least two (size_bytes, cdf) rows");
        for (size_t i = 0; i < n; ++i) {
            if (d.m_size[i] < 0 || (i > 0 && d.m_size[i] < d.m_size[i - 1])) {
                BadParameter("cdf", path + ": size_bytes must be non-negative and non-decreasing");
            }
            if (i > 0 && d.m_cdf[i] < d.m_cdf[i - 1]) {
                BadParameter("cdf", path + ": the cdf column must be non-decreasing");
            }
        }
        if (d.m_cdf[0] < 0 || std::fabs(d.m_cdf[n - 1] - 1.0) > 1e-6) {
            BadParameter("cdf", path + ": the cdf column must start >= 0 and end at 1");
        }
        return d;
    }

    bool Empty() const { return m_size.empty(); }

    /// Mean of the piecewise-linear distribution.
    double MeanBytes() const {
        double m = 0;
        for (size_t i = 0; i + 1 < m_size.size(); ++i) {
            m += 0.5 * (m_size[i] + m_size[i + 1]) * (m_cdf[i + 1] - m_cdf[i]);
        }
        return m;
    }

    /// Inverse-CDF draw for u in [0, 1): linear inside the segment, at least 1 byte.
    uint64_t Sample(double u) const {
        const size_t n = m_cdf.size();
        u = std::max(u * m_cdf[n - 1], m_cdf[0]);
        size_t le = 0; // number of cdf points <= u
        while (le < n && m_cdf[le] <= u) {
            ++le;
        }
        const size_t i = std::min<size_t>(le == 0 ? 0 : le - 1, n - 2);
        const double c0 = m_cdf[i];
        const double c1 = m_cdf[i + 1];
        const double frac = c1 > c0 ? (u - c0) / (c1 - c0) : 0.0;
        const double size = m_size[i] + frac * (m_size[i + 1] - m_size[i]);
        return std::max<uint64_t>(1, uint64_t(std::llround(std::max(size, 1.0))));
    }

  private:
    std::vector<double> m_size, m_cdf;
};

// ---------------------------------------------------------------------------
// TCP congestion control that counts retransmission timeouts
// ---------------------------------------------------------------------------

/// Retransmission timeouts of all sockets (ns-3 raises CA_EVENT_LOSS only in ReTxTimeout).
uint64_t g_rtoCount = 0;
/// --rto_out: every timeout as (time, flow index); the flow of a congestion-ops object.
bool g_recordRtos = false;
struct RtoEvent {
    double timeS;
    int64_t flow;
    double cwndSegs, ssthreshSegs, lastRttS;
    uint32_t state;
};
std::vector<RtoEvent> g_rtoEvents;
std::unordered_map<const void*, int64_t> g_flowOfOps;
/// Ablation (--ss_ack_cap_segs): most segments one ACK credits in slow start, 0 = no cap.
uint32_t g_ssAckCapSegs = 0;

/// `Base` (TcpCubic, TcpNewReno, TcpDctcp or TcpBbr) unchanged, except that every RTO is counted (and the
/// --ss_ack_cap_segs ablation, off by default).
template <class Base>
class RtoCountingCongestionOps : public Base {
  public:
    static TypeId GetTypeId() {
        static const std::string name = "ns3::RlbmRtoCounting" + Base::GetTypeId().GetName().substr(5);
        static TypeId tid = TypeId(name)
                                .SetParent<Base>()
                                .SetGroupName("Internet")
                                .template AddConstructor<RtoCountingCongestionOps<Base>>();
        return tid;
    }

    void CwndEvent(Ptr<TcpSocketState> tcb, const TcpSocketState::TcpCAEvent_t event) override {
        if (event == TcpSocketState::CA_EVENT_LOSS) {
            ++g_rtoCount;
            if (g_recordRtos) {
                auto it = g_flowOfOps.find(this);
                const double mss = tcb->m_segmentSize;
                g_rtoEvents.push_back({Simulator::Now().GetSeconds(), it == g_flowOfOps.end() ? -1 : it->second,
                                       tcb->m_cWnd / mss, tcb->m_ssThresh / mss, tcb->m_lastRtt.Get().GetSeconds(),
                                       uint32_t(tcb->m_congState.Get())});
            }
        }
        Base::CwndEvent(tcb, event);
    }

    void IncreaseWindow(Ptr<TcpSocketState> tcb, uint32_t segmentsAcked) override {
        if (g_ssAckCapSegs > 0 && tcb->m_cWnd < tcb->m_ssThresh) {
            segmentsAcked = std::min(segmentsAcked, g_ssAckCapSegs);
        }
        Base::IncreaseWindow(tcb, segmentsAcked);
    }

    Ptr<TcpCongestionOps> Fork() override { return CopyObject<RtoCountingCongestionOps<Base>>(this); }
};

/// A socket's congestion state (`TcpSocketBase::m_tcb`, protected in ns-3.37): where a sender
/// agent sets its flow's window, as Orca sets the kernel's.
struct TcbOf : public TcpSocketBase {
    static Ptr<TcpSocketState> Get(Ptr<Socket> socket) {
        Ptr<TcpSocketBase> base = DynamicCast<TcpSocketBase>(socket);
        NS_ABORT_MSG_IF(!base, "an agent flow's socket is not a TcpSocketBase");
        return (*base).*(&TcbOf::m_tcb);
    }
};

/// A sender at a set rate (rlbm_jax tcp "rate", `tcp/rate.py`: Aurora's sender): no window of its
/// own (after every ACK the window is 2^21 segments, as TcpBbr sets its own with HasCongControl),
/// its pacing rate held at RateBps (payload bits/s) until a sender agent scales it (rate_gain,
/// within 1 to 1e7 segments a second); GetSsThresh leaves ssthresh as it is, and a timeout's window
/// of one segment lasts until the next ACK.  Losses are recovered by the socket as for every TCP,
/// at the same rate.  Pacing is on whatever --pacing says (as ns-3.37's TcpBbr needs it).
class TcpRateSender : public TcpCongestionOps {
  public:
    static TypeId GetTypeId() {
        static TypeId tid =
            TypeId("ns3::RlbmRateSender")
                .SetParent<TcpCongestionOps>()
                .SetGroupName("Internet")
                .AddConstructor<TcpRateSender>()
                .AddAttribute("RateBps", "the payload rate it starts at (bit/s)", DoubleValue(1e6),
                              MakeDoubleAccessor(&TcpRateSender::m_rateBps), MakeDoubleChecker<double>(0))
                .AddAttribute("SegmentBytes", "its segment's payload (bytes)", UintegerValue(1448),
                              MakeUintegerAccessor(&TcpRateSender::m_segmentBytes),
                              MakeUintegerChecker<uint32_t>(1));
        return tid;
    }

    std::string GetName() const override { return "RlbmRateSender"; }

    void Init(Ptr<TcpSocketState> tcb) override {
        tcb->m_pacing = true;
        m_tcb = PeekPointer(tcb);
        Pace();
    }

    uint32_t GetSsThresh(Ptr<const TcpSocketState> tcb, uint32_t) override { return tcb->m_ssThresh; }

    void IncreaseWindow(Ptr<TcpSocketState>, uint32_t) override {}

    bool HasCongControl() const override { return true; }

    void CongControl(Ptr<TcpSocketState> tcb, const TcpRateOps::TcpRateConnection&,
                     const TcpRateOps::TcpRateSample&) override {
        tcb->m_cWnd = uint32_t((1u << 21) * double(m_segmentBytes));
        Pace();
    }

    /// A sender agent's rate_gain: the rate times `gain`, within [1, 1e7] segments a second.
    void Scale(double gain) {
        const double seg = 8.0 * m_segmentBytes;
        m_rateBps = std::clamp(m_rateBps * gain, seg, 1e7 * seg);
        Pace();
    }

    Ptr<TcpCongestionOps> Fork() override { return CopyObject<TcpRateSender>(this); }

  private:
    void Pace() {
        if (m_tcb != nullptr) m_tcb->m_pacingRate = DataRate(uint64_t(std::llround(m_rateBps)));
    }

    double m_rateBps = 1e6;
    uint32_t m_segmentBytes = 1448;
    TcpSocketState* m_tcb = nullptr; // the socket's, which outlives its congestion control
};

/// ns-3's RTT estimator (RttMeanDeviation, the socket's default, unchanged) that also keeps the
/// smallest raw RTT sample: ns-3's own m_minRtt is the least of the smoothed estimates, while
/// a sender agent's record (rlbm_jax `metrics.AGENT_STATE` min_rtt_s, Orca's min RTT) holds the
/// least sample.
class SampleKeepingRtt : public RttMeanDeviation {
  public:
    void Measurement(Time m) override {
        if (m.IsStrictlyPositive()) minSampleS = std::min(minSampleS, m.GetSeconds());
        RttMeanDeviation::Measurement(m);
    }

    double minSampleS = std::numeric_limits<double>::infinity();
};

// ---------------------------------------------------------------------------
// the bottleneck port: its measurements, the shared buffer, ns-3's AQM queue discs
// ---------------------------------------------------------------------------

/// Measurements of the bottleneck port over the measured window.
struct BufferStats {
    std::vector<uint64_t> arrivals, drops, dequeues; // [P] enqueue attempts, drops, dequeues
    std::vector<uint64_t> dataArrivals, marks;       // [P] data segments offered, data segments CE-marked
    uint64_t retxArrivals = 0; // data segments that repeat bytes already seen at this buffer
    uint64_t retxDrops = 0;    // ... of which dropped
    uint64_t synDrops = 0;     // SYNs dropped since t = 0 (each connection then waits syn_timeout_s)
    std::vector<double> occupancyTime;               // [B+1] seconds at each total occupancy
    std::vector<std::vector<double>> classTime;      // [P][cap_c+1] seconds at each class length
    std::vector<double> classPktSeconds;             // [P] time integral of each class length
    double measuredS = 0;
};

/// The port's part of an agent interval's record (rlbm_jax `metrics.Interval`), since
/// the last `TakeInterval`: data segments (payload > 0) per class, the time integral of
/// each class's length, and dropped SYNs.
struct IntervalCounts {
    std::vector<uint64_t> arrivals, drops, marks, dequeues; // [P] data segments
    std::vector<double> queuePktS;                          // [P] integral of the class length (packet s)
    std::vector<uint32_t> queueMin;                         // [P] smallest class length (the start's included)
    uint64_t synDrops = 0;
};

/// The fields of a TCP segment the port reads; `tcp` is false for anything else.
struct Segment {
    bool tcp = false;
    uint64_t flow = 0;     // source address and port
    uint16_t dstPort = 0;
    uint32_t seq = 0;
    uint32_t payload = 0;  // bytes after the TCP header (0: pure ACK, SYN or FIN)
    bool syn = false, ack = false;
};

Segment ParseSegment(Ptr<const QueueDiscItem> item) {
    Segment s;
    Ptr<const Ipv4QueueDiscItem> ip = DynamicCast<const Ipv4QueueDiscItem>(item);
    if (!ip || ip->GetHeader().GetProtocol() != 6 /* TCP */) return s;
    Ptr<const Packet> segment = ip->GetPacket();
    uint8_t hdr[14];
    if (segment->GetSize() < 20 || segment->CopyData(hdr, sizeof(hdr)) != sizeof(hdr)) return s;
    const uint32_t headerBytes = uint32_t(hdr[12] >> 4) * 4;
    s.tcp = true;
    s.flow = (uint64_t(ip->GetHeader().GetSource().Get()) << 16) | ((uint32_t(hdr[0]) << 8) | hdr[1]);
    s.dstPort = uint16_t((uint32_t(hdr[2]) << 8) | hdr[3]);
    s.seq = (uint32_t(hdr[4]) << 24) | (uint32_t(hdr[5]) << 16) | (uint32_t(hdr[6]) << 8) | hdr[7];
    s.payload = segment->GetSize() > headerBytes ? segment->GetSize() - headerBytes : 0;
    s.syn = (hdr[13] & 0x02) != 0;
    s.ack = (hdr[13] & 0x10) != 0;
    return s;
}

/// The counters of the bottleneck port: arrivals, drops, marks and dequeues per class,
/// the class lengths and their time integrals, retransmissions and lost SYNs, over the
/// measured window and per agent interval.  The queue disc that holds the packets
/// reports each event: RlbmBufferQueueDisc as it admits and serves, AqmPortMonitor from
/// the traces of an ns-3 queue disc.
class PortMeter {
  public:
    struct Config {
        uint32_t numClasses = 0;
        std::vector<uint32_t> histPkts; // [P] largest class length of the class histograms
        uint32_t bufferPkts = 0;        // largest total occupancy
        bool countIntervals = false;    // count the interval's dequeues (they parse every packet)
        double warmupS = 0;             // measured window [warmupS, endS]
        double endS = 0;
    };

    void Configure(const Config& cfg) {
        m_cfg = cfg;
        const uint32_t p = cfg.numClasses;
        m_len.assign(p, 0);
        m_stats.arrivals.assign(p, 0);
        m_stats.drops.assign(p, 0);
        m_stats.dequeues.assign(p, 0);
        m_stats.dataArrivals.assign(p, 0);
        m_stats.marks.assign(p, 0);
        m_stats.occupancyTime.assign(cfg.bufferPkts + 1, 0.0);
        m_stats.classPktSeconds.assign(p, 0.0);
        ResetInterval();
        m_stats.classTime.clear();
        for (uint32_t c = 0; c < p; ++c) {
            m_stats.classTime.emplace_back(cfg.histPkts[c] + 1, 0.0);
        }
    }

    /// Every segment of a flow toward the sink (SYN and FIN included) takes the flow's
    /// class, its destination port - kBasePort; anything else is class 0.
    uint32_t Classify(const Segment& s) const {
        if (!s.tcp || s.dstPort < kBasePort || s.dstPort >= kBasePort + m_cfg.numClasses) return 0;
        return s.dstPort - kBasePort;
    }

    /// A packet of class c offered to the port; returns whether it is a retransmission.
    bool Arrive(const Segment& seg, uint32_t c) {
        const bool measuring = Measuring();
        if (measuring) ++m_stats.arrivals[c];
        if (measuring && seg.payload > 0) ++m_stats.dataArrivals[c];
        if (seg.payload > 0) ++m_interval.arrivals[c];
        const bool retx = IsRetransmission(seg);
        if (measuring && retx) ++m_stats.retxArrivals;
        return retx;
    }

    /// A packet of class c dropped (before it entered the queue, or after it left it).
    void Drop(const Segment& seg, uint32_t c, bool retx) {
        const bool measuring = Measuring();
        if (measuring) ++m_stats.drops[c];
        if (measuring && retx) ++m_stats.retxDrops;
        if (seg.payload > 0) ++m_interval.drops[c];
        if (seg.syn && !seg.ack) {
            ++m_interval.synDrops;
            ++m_stats.synDrops;
        }
    }

    /// A packet of class c CE-marked instead of dropped; data segments are counted.
    void Mark(const Segment& seg, uint32_t c) {
        if (seg.payload == 0) return;
        if (Measuring()) ++m_stats.marks[c];
        ++m_interval.marks[c];
    }

    /// A packet joins class c's queue.
    void Enter(uint32_t c) {
        AccountOccupancy(Simulator::Now().GetSeconds());
        AccountInterval(Simulator::Now().GetSeconds());
        ++m_len[c];
        ++m_total;
    }

    /// A packet leaves class c's queue (sent, or dropped after it left).
    void Leave(uint32_t c) {
        AccountOccupancy(Simulator::Now().GetSeconds());
        AccountInterval(Simulator::Now().GetSeconds());
        --m_len[c];
        --m_total;
        if (c < m_interval.queueMin.size()) m_interval.queueMin[c] = std::min(m_interval.queueMin[c], m_len[c]);
    }

    /// A packet of class c handed to the link; `undo` takes the count back (a packet that
    /// left the queue and was dropped after all).
    void Served(Ptr<const QueueDiscItem> item, uint32_t c, bool undo = false) {
        const bool measuring = Measuring();
        const bool data = m_cfg.countIntervals && ParseSegment(item).payload > 0;
        if (undo) {
            if (measuring) --m_stats.dequeues[c];
            if (data) --m_interval.dequeues[c];
            return;
        }
        if (measuring) ++m_stats.dequeues[c];
        if (data) ++m_interval.dequeues[c];
    }

    /// Close the occupancy integrals at the end of the measured window.
    void Finish() { AccountOccupancy(m_cfg.endS); }

    const BufferStats& GetStats() const { return m_stats; }

    /// The counters since the last call, up to now, which restarts them.
    IntervalCounts TakeInterval() {
        AccountInterval(Simulator::Now().GetSeconds());
        IntervalCounts out = m_interval;
        ResetInterval();
        return out;
    }

    const std::vector<uint32_t>& ClassLengths() const { return m_len; }
    uint32_t Occupancy() const { return m_total; }

  private:
    bool Measuring() const { return Simulator::Now().GetSeconds() >= m_cfg.warmupS; }

    /// Whether a TCP data segment repeats bytes that already reached this buffer (a
    /// retransmission, needed or spurious); records the highest byte seen per flow.
    bool IsRetransmission(const Segment& s) {
        if (!s.tcp || s.payload == 0) return false;
        const uint32_t end = s.seq + s.payload;
        auto [it, fresh] = m_highestEnd.emplace(s.flow, end);
        if (fresh) return false;
        if (int32_t(end - it->second) <= 0) return true;
        it->second = end;
        return false;
    }

    /// Add the time since the last change, clipped to the measured window, to the integrals.
    void AccountOccupancy(double now) {
        const double from = std::max(m_lastChangeS, m_cfg.warmupS);
        const double to = std::min(now, m_cfg.endS);
        if (to > from) {
            const double dt = to - from;
            m_stats.occupancyTime[std::min<size_t>(m_total, m_stats.occupancyTime.size() - 1)] += dt;
            for (uint32_t c = 0; c < m_cfg.numClasses; ++c) {
                auto& hist = m_stats.classTime[c];
                hist[std::min<size_t>(m_len[c], hist.size() - 1)] += dt;
                m_stats.classPktSeconds[c] += m_len[c] * dt;
            }
            m_stats.measuredS += dt;
        }
        m_lastChangeS = std::max(m_lastChangeS, now);
    }

    /// Add each class length times the time since the last change to the interval's integral.
    void AccountInterval(double now) {
        const double dt = now - m_ivLastChangeS;
        if (dt > 0) {
            for (uint32_t c = 0; c < m_cfg.numClasses; ++c) m_interval.queuePktS[c] += m_len[c] * dt;
        }
        m_ivLastChangeS = std::max(m_ivLastChangeS, now);
    }

    void ResetInterval() {
        const uint32_t p = m_cfg.numClasses;
        m_interval.arrivals.assign(p, 0);
        m_interval.drops.assign(p, 0);
        m_interval.marks.assign(p, 0);
        m_interval.dequeues.assign(p, 0);
        m_interval.queuePktS.assign(p, 0.0);
        m_interval.queueMin.assign(m_len.begin(), m_len.end());
        m_interval.queueMin.resize(p, 0);
        m_interval.synDrops = 0;
    }

    Config m_cfg;
    std::vector<uint32_t> m_len; // packets per class
    uint32_t m_total = 0;        // packets at the port
    std::unordered_map<uint64_t, uint32_t> m_highestEnd; // per flow: highest sequence end seen
    double m_lastChangeS = 0;
    double m_ivLastChangeS = 0;
    BufferStats m_stats;
    IntervalCounts m_interval;
};

enum class Policy {
    DropTail,
    StaticBuffer, // sb-naive and sb-sophisticated: alpha_c * B / sum(alpha)
    DynamicThresholds,
    Abm,
    Rl, // alpha_c * beta_c * (B - Q), alpha set by an agent every interval
    RlSize, // drop-tail at floor(size_c), size set by an agent, clipped to [1, the FIFO cap]
};

struct BufferConfig {
    uint32_t numClasses = 0;
    std::vector<uint32_t> capPkts;
    uint32_t bufferPkts = 0;
    Policy policy = Policy::DropTail;
    std::vector<double> alpha;
    std::vector<double> beta;
    bool strictPriority = false;
    bool countIntervals = false;   // keep the per-interval counters of the agent's observation
    bool marker = false;           // rl-mark: CE-mark admitted ECT packets with probability markProb
    double markProb = 0;
    double windowS = 0;            // drain-rate window (one base RTT)
    double windowCapacityPkts = 0; // data packets the link sends in one window
    double warmupS = 0;            // measured window [warmupS, endS]
    double endS = 0;
};

/// One DropTail FIFO per class behind per-class admission thresholds, served by
/// per-packet round robin or strict priority.  Class = TCP destination port - 10000
/// for every segment of a flow (SYN and FIN included); any other packet is class 0.
class RlbmBufferQueueDisc : public QueueDisc {
  public:
    static TypeId GetTypeId() {
        static TypeId tid = TypeId("ns3::RlbmBufferQueueDisc")
                                .SetParent<QueueDisc>()
                                .SetGroupName("TrafficControl")
                                .AddConstructor<RlbmBufferQueueDisc>();
        return tid;
    }

    RlbmBufferQueueDisc() : QueueDisc(QueueDiscSizePolicy::NO_LIMITS) {}

    /// Set the buffer model; call once, before the simulation starts.
    void Configure(const BufferConfig& cfg) {
        m_cfg = cfg;
        const uint32_t p = cfg.numClasses;
        m_lastServed = p - 1;
        m_drainNorm.assign(p, 1.0);
        m_windowDeq.assign(p, 0);
        PortMeter::Config mc;
        mc.numClasses = p;
        mc.histPkts = cfg.capPkts;
        mc.bufferPkts = cfg.bufferPkts;
        mc.countIntervals = cfg.countIntervals;
        mc.warmupS = cfg.warmupS;
        mc.endS = cfg.endS;
        m_meter.Configure(mc);
        if (cfg.policy == Policy::Abm) ScheduleDrainWindow(); // only ABM reads drain rates
        if (cfg.marker) {
            m_markU = CreateObject<UniformRandomVariable>();
            m_markU->SetStream(6); // after the traffic's 1-4 and the AQM discs' 5: depends only on the seed
        }
    }

    PortMeter& Meter() { return m_meter; }

    /// The agent's per-class alphas (rl), applied from the next arriving packet on.
    void SetAlpha(const std::vector<double>& alpha) { m_cfg.alpha = alpha; }
    const std::vector<double>& GetAlpha() const { return m_cfg.alpha; }

    /// The agent's drop-tail limit per class (rl-size), applied from the next arriving packet on.
    void SetSize(const std::vector<double>& size) { m_size = size; }
    const std::vector<double>& GetSize() const { return m_size; }

    /// The marker's probability (rl-mark), applied from the next arriving packet on.
    void SetMarkProb(double p) { m_cfg.markProb = p; }
    double GetMarkProb() const { return m_cfg.markProb; }

  protected:
    void DoDispose() override {
        m_windowEvent.Cancel();
        QueueDisc::DoDispose();
    }

  private:
    bool DoEnqueue(Ptr<QueueDiscItem> item) override {
        const Segment seg = ParseSegment(item);
        const uint32_t c = m_meter.Classify(seg);
        const bool retx = m_meter.Arrive(seg, c);
        const bool admit = double(m_meter.ClassLengths()[c]) < std::floor(Threshold(c)) &&
                           m_meter.Occupancy() < m_cfg.bufferPkts;
        if (admit && m_cfg.marker) MaybeMark(item, seg, c);
        if (!admit || !GetInternalQueue(c)->Enqueue(item)) {
            m_meter.Drop(seg, c, retx);
            if (!admit) DropBeforeEnqueue(item, "class threshold or shared buffer exceeded");
            return false;
        }
        m_meter.Enter(c);
        return true;
    }

    /// rl-mark: CE-mark an admitted ECT packet with probability markProb (one uniform per
    /// ECT packet while 0 < p < 1); a non-ECT packet is left as it is.
    void MaybeMark(Ptr<QueueDiscItem> item, const Segment& seg, uint32_t c) {
        Ptr<Ipv4QueueDiscItem> ip = DynamicCast<Ipv4QueueDiscItem>(item);
        if (!ip || ip->GetHeader().GetEcn() == Ipv4Header::ECN_NotECT) return;
        const double p = m_cfg.markProb;
        const bool hit = p >= 1.0 || (p > 0.0 && m_markU->GetValue(0.0, 1.0) < p);
        if (hit && Mark(item, "rl-mark")) m_meter.Mark(seg, c);
    }

    Ptr<QueueDiscItem> DoDequeue() override {
        if (m_meter.Occupancy() == 0) return nullptr;
        const uint32_t p = m_cfg.numClasses;
        const auto& len = m_meter.ClassLengths();
        uint32_t c = 0;
        for (uint32_t k = 0; k < p; ++k) {
            c = m_cfg.strictPriority ? k : (m_lastServed + 1 + k) % p;
            if (len[c] > 0) break;
        }
        Ptr<QueueDiscItem> item = GetInternalQueue(c)->Dequeue();
        m_meter.Leave(c);
        m_lastServed = c;
        ++m_windowDeq[c];
        m_meter.Served(item, c);
        return item;
    }

    bool CheckConfig() override {
        if (m_cfg.numClasses == 0 || GetNQueueDiscClasses() > 0 || GetNPacketFilters() > 0) {
            return false; // not configured, or misused with classes/filters
        }
        if (GetNInternalQueues() == 0) {
            for (uint32_t c = 0; c < m_cfg.numClasses; ++c) {
                // limits are enforced by DoEnqueue; the FIFO itself never drops
                AddInternalQueue(CreateObjectWithAttributes<DropTailQueue<QueueDiscItem>>(
                    "MaxSize", QueueSizeValue(QueueSize(QueueSizeUnit::PACKETS, 1u << 30))));
            }
        }
        return GetNInternalQueues() == m_cfg.numClasses;
    }

    void InitializeParams() override {}

    /// Admission threshold of class c for the current occupancy, capped by the class FIFO.
    double Threshold(uint32_t c) const {
        const double b = m_cfg.bufferPkts;
        const double free = b - double(m_meter.Occupancy());
        double thr = 0;
        switch (m_cfg.policy) {
        case Policy::DropTail:
            thr = m_cfg.capPkts[c];
            break;
        case Policy::StaticBuffer: {
            double sum = 0;
            for (double a : m_cfg.alpha) {
                sum += a;
            }
            thr = m_cfg.alpha[c] * b / std::max(sum, 1e-9);
            break;
        }
        case Policy::DynamicThresholds:
            thr = m_cfg.alpha[c] * free;
            break;
        case Policy::Abm:
            thr = m_cfg.alpha[c] * free *
                  std::clamp(m_drainNorm[c], 1.0 / m_cfg.numClasses, 1.0);
            break;
        case Policy::Rl:
            thr = m_cfg.alpha[c] * m_cfg.beta[c] * free;
            break;
        case Policy::RlSize:
            thr = c < m_size.size() ? std::max(m_size[c], 1.0) : double(m_cfg.capPkts[c]);
            break;
        }
        return std::min(std::max(thr, 0.0), double(m_cfg.capPkts[c]));
    }

    /// ABM drain rates: dequeues of the last window over the window's capacity.
    void EndDrainWindow() {
        for (uint32_t c = 0; c < m_cfg.numClasses; ++c) {
            m_drainNorm[c] = m_windowDeq[c] / m_cfg.windowCapacityPkts;
            m_windowDeq[c] = 0;
        }
        ScheduleDrainWindow();
    }

    void ScheduleDrainWindow() {
        m_windowEvent =
            Simulator::Schedule(Seconds(m_cfg.windowS), &RlbmBufferQueueDisc::EndDrainWindow, this);
    }

    BufferConfig m_cfg;
    PortMeter m_meter;
    uint32_t m_lastServed = 0;
    std::vector<double> m_drainNorm;
    std::vector<uint64_t> m_windowDeq;
    EventId m_windowEvent;
    Ptr<UniformRandomVariable> m_markU; // rl-mark's draws
    std::vector<double> m_size;         // rl-size: the agent's limits (empty: the FIFO caps)
};

NS_OBJECT_ENSURE_REGISTERED(RlbmBufferQueueDisc);

/// Counts the packets of one of ns-3's own queue discs (RED, PIE, CoDel, FQ-CoDel) with
/// the same PortMeter as RlbmBufferQueueDisc, from the disc's traces.  An arrival is
/// either enqueued or dropped before enqueue; a packet leaves through the Dequeue trace,
/// including one that the disc then drops after dequeue (CoDel's drops, FQ-CoDel's
/// overflow drops from its fattest flow), whose dequeue is taken back.
class AqmPortMonitor {
  public:
    AqmPortMonitor(Ptr<QueueDisc> disc, const PortMeter::Config& cfg) {
        m_meter.Configure(cfg);
        disc->TraceConnectWithoutContext("Enqueue", MakeCallback(&AqmPortMonitor::OnEnqueue, this));
        disc->TraceConnectWithoutContext("DropBeforeEnqueue",
                                         MakeCallback(&AqmPortMonitor::OnDropBeforeEnqueue, this));
        disc->TraceConnectWithoutContext("Dequeue", MakeCallback(&AqmPortMonitor::OnDequeue, this));
        disc->TraceConnectWithoutContext("DropAfterDequeue",
                                         MakeCallback(&AqmPortMonitor::OnDropAfterDequeue, this));
        disc->TraceConnectWithoutContext("Mark", MakeCallback(&AqmPortMonitor::OnMark, this));
    }

    PortMeter& Meter() { return m_meter; }

  private:
    void OnEnqueue(Ptr<const QueueDiscItem> item) {
        const Segment seg = ParseSegment(item);
        const uint32_t c = m_meter.Classify(seg);
        if (m_meter.Arrive(seg, c)) m_retxQueued.insert(PeekPointer(item));
        m_meter.Enter(c);
    }

    void OnDropBeforeEnqueue(Ptr<const QueueDiscItem> item, const char*) {
        const Segment seg = ParseSegment(item);
        const uint32_t c = m_meter.Classify(seg);
        m_meter.Drop(seg, c, m_meter.Arrive(seg, c));
    }

    void OnDequeue(Ptr<const QueueDiscItem> item) {
        const uint32_t c = m_meter.Classify(ParseSegment(item));
        m_meter.Leave(c);
        m_meter.Served(item, c);
        m_lastOut = PeekPointer(item);
        m_lastOutRetx = m_retxQueued.erase(m_lastOut) > 0;
    }

    void OnDropAfterDequeue(Ptr<const QueueDiscItem> item, const char*) {
        const Segment seg = ParseSegment(item);
        const uint32_t c = m_meter.Classify(seg);
        bool retx = false;
        if (PeekPointer(item) == m_lastOut) {
            m_meter.Served(item, c, true);
            retx = m_lastOutRetx;
        } else { // left without the Dequeue trace
            m_meter.Leave(c);
            retx = m_retxQueued.erase(PeekPointer(item)) > 0;
        }
        m_lastOut = nullptr;
        m_meter.Drop(seg, c, retx);
    }

    void OnMark(Ptr<const QueueDiscItem> item, const char*) {
        const Segment seg = ParseSegment(item);
        m_meter.Mark(seg, m_meter.Classify(seg));
    }

    PortMeter m_meter;
    std::unordered_set<const QueueDiscItem*> m_retxQueued; // retransmissions in the queue
    const QueueDiscItem* m_lastOut = nullptr;              // the packet of the last Dequeue trace
    bool m_lastOutRetx = false;
};

// ---------------------------------------------------------------------------
// flows
// ---------------------------------------------------------------------------

/// One TCP flow: a socket on its sender that writes `sizeBytes` (or forever) and closes.
struct Flow {
    uint32_t sender = 0;
    uint32_t cls = 0;
    uint64_t sizeBytes = 0; // unused for long flows
    bool isLong = false;
    double startS = 0;
    uint64_t written = 0;
    uint64_t received = 0;
    bool connected = false;
    bool closed = false;
    bool failed = false;
    bool completed = false;
    Ptr<Socket> socket;
    // a long flow's own record (`long_flows` of the report): its latest cwnd and RTT (the
    // socket's RTT trace, ns-3's m_lastRtt), its data segments sent and of them
    // retransmissions (bytes at or below the highest sent), and the window's samples
    uint32_t longIndex = 0; // k of long flow k (sender k mod num_senders)
    uint32_t cwndBytes = 0;
    double rttS = 0, minRttS = std::numeric_limits<double>::infinity();
    uint64_t txSegs = 0, retxSegs = 0;
    SequenceNumber32 highTx{0};
    bool sentAny = false;
    uint64_t receivedAtWarmup = 0, retxAtWarmup = 0;
    bool warm = false;
    double cwndSum = 0, rttSum = 0;
    uint64_t samples = 0;
    // a sender agent's flow (long flow k < agent_flows): its RTT estimator (raw samples kept),
    // its distinct data segments at the sink, and its counters and sRTT when the interval began
    Ptr<SampleKeepingRtt> rttEstimator;
    uint64_t deliveredSegs = 0;
    uint64_t ivTx0 = 0, ivRetx0 = 0, ivDelivered0 = 0;
    double ivSrtt0 = 0;

    void OnCwnd(uint32_t, uint32_t now) { cwndBytes = now; }

    void OnRtt(Time, Time now) {
        rttS = now.GetSeconds();
        if (rttS > 0) minRttS = std::min(minRttS, rttS);
    }

    void OnTx(Ptr<const Packet> p, const TcpHeader& h, Ptr<const TcpSocketBase>) {
        const uint32_t n = p->GetSize();
        if (n == 0) return;
        const SequenceNumber32 end = h.GetSequenceNumber() + n;
        ++txSegs;
        if (sentAny && end <= highTx) {
            ++retxSegs;
        } else {
            highTx = end;
            sentAny = true;
        }
    }

    void OnConnected(Ptr<Socket>) {
        connected = true;
        Fill();
    }

    void OnConnectFailed(Ptr<Socket>) { failed = true; }

    void OnSendSpace(Ptr<Socket>, uint32_t) {
        if (connected) Fill();
    }

    /// Write as much of the flow as the send buffer takes; close after the last byte.
    void Fill() {
        while (!closed) {
            const uint64_t left = isLong ? kWriteChunkBytes : sizeBytes - written;
            const uint64_t want = std::min<uint64_t>(kWriteChunkBytes, left);
            if (want == 0) {
                socket->Close();
                closed = true;
                break;
            }
            const uint32_t n = std::min<uint64_t>(want, socket->GetTxAvailable());
            const int sent = n > 0 ? socket->Send(Create<Packet>(n)) : -1;
            if (sent <= 0) break;
            written += sent;
        }
    }
};

struct Completion {
    uint64_t sizeBytes;
    uint32_t cls;
    double fctS, slowdown, startS;
};

/// Quantile by linear interpolation between order statistics (numpy's default).
double Quantile(std::vector<double> x, double q) {
    if (x.empty()) return std::numeric_limits<double>::quiet_NaN();
    std::sort(x.begin(), x.end());
    const double pos = q * double(x.size() - 1);
    const size_t lo = size_t(std::floor(pos));
    const size_t hi = std::min(lo + 1, x.size() - 1);
    return x[lo] + (x[hi] - x[lo]) * (pos - double(lo));
}

/// Time-weighted quantile of a histogram: smallest n with cumulative time >= q of the total.
double HistQuantile(const std::vector<double>& hist, double q) {
    double total = 0;
    for (double h : hist) {
        total += h;
    }
    double cum = 0;
    for (size_t n = 0; n < hist.size(); ++n) {
        cum += hist[n];
        if (cum >= q * total * (1 - 1e-12)) return double(n);
    }
    return double(hist.size() - 1);
}

// ---------------------------------------------------------------------------
// JSON output
// ---------------------------------------------------------------------------

std::string JsonNum(double v) {
    if (!std::isfinite(v)) return "null";
    std::ostringstream os;
    os.precision(12);
    os << v;
    return os.str();
}

std::string JsonStr(const std::string& s) {
    std::string out = "\"";
    for (char ch : s) {
        if (ch == '"' || ch == '\\') {
            out += '\\';
            out += ch;
        } else if (static_cast<unsigned char>(ch) < 0x20) {
            char buf[8];
            std::snprintf(buf, sizeof(buf), "\\u%04x", ch);
            out += buf;
        } else {
            out += ch;
        }
    }
    return out + "\"";
}

template <class T>
std::string JsonArr(const std::vector<T>& v) {
    std::string out = "[";
    for (size_t i = 0; i < v.size(); ++i) {
        out += (i ? ", " : "") + JsonNum(double(v[i]));
    }
    return out + "]";
}

std::string JsonStrArr(const std::vector<std::string>& v) {
    std::string out = "[";
    for (size_t i = 0; i < v.size(); ++i) {
        out += (i ? ", " : "") + JsonStr(v[i]);
    }
    return out + "]";
}

/// The run's pacing as the config records it: "off" / "ns-3.37", or one per flow group.
std::string PacingJson(const Params& c) {
    std::vector<std::string> v;
    for (bool on : c.groupPacing) v.push_back(on ? "ns-3.37" : "off");
    return c.flowGroups > 1 ? JsonStrArr(v) : JsonStr(v[0]);
}

/// An object whose members keep their insertion order.
class JsonObject {
  public:
    JsonObject& Raw(const std::string& key, const std::string& json) {
        m_items.emplace_back(key, json);
        return *this;
    }

    JsonObject& Num(const std::string& key, double v) { return Raw(key, JsonNum(v)); }

    JsonObject& Str(const std::string& key, const std::string& v) { return Raw(key, JsonStr(v)); }

    std::string Dump(const std::string& indent = "  ") const {
        std::string out = "{";
        for (size_t i = 0; i < m_items.size(); ++i) {
            out += (i ? ",\n" : "\n") + indent + JsonStr(m_items[i].first) + ": " + m_items[i].second;
        }
        return out + "\n" + indent.substr(2) + "}";
    }

  private:
    std::vector<std::pair<std::string, std::string>> m_items;
};

// ---------------------------------------------------------------------------
// the scenario
// ---------------------------------------------------------------------------

/// The congestion control (counting its RTOs) of a `tcp` name.
TypeId CongestionOpsOf(const std::string& tcp) {
    return tcp == "cubic"   ? RtoCountingCongestionOps<TcpCubic>::GetTypeId()
           : tcp == "dctcp" ? RtoCountingCongestionOps<TcpDctcp>::GetTypeId()
           : tcp == "bbr"   ? RtoCountingCongestionOps<TcpBbr>::GetTypeId()
           : tcp == "rate"  ? RtoCountingCongestionOps<TcpRateSender>::GetTypeId()
                            : RtoCountingCongestionOps<TcpNewReno>::GetTypeId();
}

class Scenario {
  public:
    Scenario(const Params& cfg, SizeDistribution sizes) : m_cfg(cfg), m_sizes(std::move(sizes)) {}

    void Build() {
        BuildTopology();
        BuildTraffic();
        if (m_cfg.agentIntervalS > 0) Simulator::ScheduleNow(&Scenario::OnAgentBoundary, this, 0u);
    }

    /// Run the simulation; returns the wall-clock seconds of Simulator::Run.
    double Run() {
        Simulator::Stop(Seconds(m_cfg.seconds));
        const auto t0 = std::chrono::steady_clock::now();
        Simulator::Run();
        const std::chrono::duration<double> wall = std::chrono::steady_clock::now() - t0;
        m_meter->Finish();
        FinishIntervals();
        return wall.count();
    }

    std::string Report(double wallS) const;
    void WriteFlows(std::ostream& os) const;
    void WriteRtos(std::ostream& os) const;

    void SetCwndTrace(std::ostream* os) { m_cwndOs = os; }
    void SetIntervalsOut(std::ostream* os);

  private:
    void BuildTopology();
    void InstallPort(Ptr<NetDevice> port);
    void ScheduleCapacity(Ptr<PointToPointNetDevice> port);
    void BuildTraffic();
    void ScheduleNextArrival();
    void ScheduleFlowsFromFile();
    void OnArrival();
    void StartFlow(uint32_t sender, uint64_t sizeBytes, bool isLong, uint32_t longIndex);
    void OnSinkRx(Ptr<const Packet> packet, const Address& from);
    void OnBottleneckTx(Ptr<const Packet> packet);
    void OnCwnd(uint32_t, uint32_t cwnd) { m_traceCwnd = cwnd; }
    void OnSsthresh(uint32_t, uint32_t ssthresh) { m_traceSsthresh = ssthresh; }
    void SampleCwnd();
    void SampleLongFlows();
    std::string LongFlowsJson(double measured) const;
    JsonObject ConfigJson() const;
    // agent intervals
    using Record = std::vector<std::pair<std::string, std::string>>;
    void OnSinkDeliver(const Ipv4Header& ip, Ptr<const Packet> segment, uint32_t iface);
    void OnAgentBoundary(uint32_t k);
    std::vector<double> OpenLogSlowdown() const;
    Record CloseInterval(uint32_t k);
    std::vector<double> AskAgent(uint32_t k, const Record& rec) const;
    void AgentRows(Record& rec);
    void ScaleAgentFlows(const std::vector<double>& gain);
    void FinishIntervals();

    bool Measuring() const { return Simulator::Now().GetSeconds() >= m_cfg.warmupS; }

    static uint64_t FlowKey(Ipv4Address addr, uint16_t port) { return (uint64_t(addr.Get()) << 16) | port; }

    const Params m_cfg;
    const SizeDistribution m_sizes;
    NodeContainer m_senders;
    std::vector<Ipv4Address> m_senderAddr;
    Ipv4Address m_sinkAddr;
    Ptr<RlbmBufferQueueDisc> m_buffer;     // the shared buffer, or
    std::unique_ptr<AqmPortMonitor> m_aqm; // the counts of ns-3's AQM queue disc in its place
    PortMeter* m_meter = nullptr;          // the port's counters, of either
    Ptr<ExponentialRandomVariable> m_gap;
    Ptr<UniformRandomVariable> m_sizeU, m_senderU, m_longStartU;
    double m_meanGapS = 0;

    std::vector<std::unique_ptr<Flow>> m_flows;
    std::unordered_map<uint64_t, size_t> m_byKey; // (sender address, port) -> flow of an open flow
    std::vector<Completion> m_completions;
    uint64_t m_wireBytes = 0;    // bytes sent on the bottleneck, measured window
    uint64_t m_payloadBytes = 0; // bytes delivered to the sink, measured window

    std::ostream* m_cwndOs = nullptr;
    const Flow* m_traceFlow = nullptr;
    uint32_t m_traceCwnd = 0;
    uint32_t m_traceSsthresh = std::numeric_limits<uint32_t>::max();

    // the current agent interval's record (rlbm_jax metrics.Interval), beside the port's part
    uint64_t m_ivSinkPkts = 0;    // distinct data segments that reached the sink
    uint64_t m_ivSinkBytes = 0;   // their payload bytes
    std::unordered_map<uint64_t, std::unordered_set<uint32_t>> m_sinkSeen; // per flow: sequence numbers
    std::vector<Completion> m_ivDone; // flows whose last byte reached the sink
    uint64_t m_ivRtoStart = 0;    // g_rtoCount when the interval began
    std::vector<double> m_ivOpenStart; // [P] the open flows' log slowdown when it began
    double m_ivStartS = 0;             // when the interval began (its capacity_pkts integrates from here)
    uint32_t m_intervalsClosed = 0;
    std::ostream* m_intervalsOs = nullptr;
    std::vector<Flow*> m_agentFlows = std::vector<Flow*>(m_cfg.agentFlows, nullptr); // long flow k < A, once started
};

void Scenario::BuildTopology() {
    const Params& c = m_cfg;
    m_senders.Create(c.numSenders);
    Ptr<Node> sw = CreateObject<Node>();
    Ptr<Node> sink = CreateObject<Node>();
    // IP MTU large enough for a full segment (MSS + TCP 32 + IP 20): no fragmentation
    const uint32_t mtu = std::max<uint32_t>(1500, c.mssBytes + kDataHeaderBytes - 2);

    PointToPointHelper access;
    access.SetDeviceAttribute("DataRate", DataRateValue(DataRate(uint64_t(std::llround(c.accessRateBps)))));
    access.SetDeviceAttribute("Mtu", UintegerValue(mtu));
    access.SetChannelAttribute("Delay", TimeValue(Seconds(c.accessDelayS)));
    access.SetQueue("ns3::DropTailQueue<Packet>", "MaxSize", StringValue(kLosslessQueue));
    std::vector<NetDeviceContainer> accessDevs;
    for (uint32_t i = 0; i < c.numSenders; ++i) {
        access.SetChannelAttribute("Delay", TimeValue(Seconds(c.groupAccessDelayS[c.GroupOf(i)])));
        accessDevs.push_back(access.Install(m_senders.Get(i), sw));
    }

    PointToPointHelper bottleneck;
    bottleneck.SetDeviceAttribute("DataRate",
                                  DataRateValue(DataRate(uint64_t(std::llround(c.bottleneckRateBps)))));
    bottleneck.SetDeviceAttribute("Mtu", UintegerValue(mtu));
    bottleneck.SetChannelAttribute("Delay", TimeValue(Seconds(c.bottleneckDelayS)));
    bottleneck.SetQueue("ns3::DropTailQueue<Packet>", "MaxSize", StringValue(kLosslessQueue));
    NetDeviceContainer bnDevs = bottleneck.Install(sw, sink);
    // The switch port's device queue holds one packet: the buffer lives in the queue disc.
    Ptr<PointToPointNetDevice> bnPort = DynamicCast<PointToPointNetDevice>(bnDevs.Get(0));
    bnPort->GetQueue()->SetMaxSize(QueueSize("1p"));

    InternetStackHelper stack;
    stack.InstallAll();
    // each sender's sockets take its flow group's congestion control
    for (uint32_t i = 0; i < c.numSenders; ++i) {
        m_senders.Get(i)->GetObject<TcpL4Protocol>()->SetAttribute(
            "SocketType", TypeIdValue(CongestionOpsOf(c.groupTcp[c.GroupOf(i)])));
    }

    // Queue discs go in before addresses are assigned, else Assign() installs FqCoDel.
    InstallPort(bnPort);

    TrafficControlHelper fifoTc;
    fifoTc.SetRootQueueDisc("ns3::FifoQueueDisc", "MaxSize", StringValue(kLosslessQueue));
    fifoTc.Install(bnDevs.Get(1));
    for (const auto& d : accessDevs) {
        fifoTc.Install(d);
    }

    Ipv4AddressHelper addr("10.0.0.0", "255.255.255.252");
    for (uint32_t i = 0; i < c.numSenders; ++i) {
        m_senderAddr.push_back(addr.Assign(accessDevs[i]).GetAddress(0));
        addr.NewNetwork();
    }
    m_sinkAddr = addr.Assign(bnDevs).GetAddress(1);
    Ipv4GlobalRoutingHelper::PopulateRoutingTables();

    for (uint32_t k = 0; k < c.numClasses; ++k) {
        PacketSinkHelper sinkHelper("ns3::TcpSocketFactory",
                                    InetSocketAddress(Ipv4Address::GetAny(), kBasePort + k));
        Ptr<Application> app = sinkHelper.Install(sink).Get(0);
        app->SetStartTime(Seconds(0));
        app->TraceConnectWithoutContext("Rx", MakeCallback(&Scenario::OnSinkRx, this));
    }
    if (c.agentIntervalS > 0) {
        sink->GetObject<Ipv4L3Protocol>()->TraceConnectWithoutContext(
            "LocalDeliver", MakeCallback(&Scenario::OnSinkDeliver, this));
    }
    bnPort->TraceConnectWithoutContext("PhyTxEnd", MakeCallback(&Scenario::OnBottleneckTx, this));
    ScheduleCapacity(bnPort);
}

/// The capacity schedule on the switch -> sink device: each row's rate from its time on,
/// every period where it repeats (the row at 0 applies before the run starts).
void Scenario::ScheduleCapacity(Ptr<PointToPointNetDevice> port) {
    const Params& c = m_cfg;
    if (c.capTimesS.empty()) return;
    const bool repeats = std::isfinite(c.capPeriodS);
    for (uint64_t n = 0;; ++n) {
        const double base = repeats ? double(n) * c.capPeriodS : 0.0;
        if (base >= c.seconds || (!repeats && n > 0)) break;
        for (size_t i = 0; i < c.capTimesS.size(); ++i) {
            const double t = base + c.capTimesS[i];
            if (t >= c.seconds) break;
            const DataRate rate(uint64_t(std::llround(c.capRatesBps[i])));
            if (t == 0) {
                port->SetDataRate(rate);
            } else {
                Simulator::Schedule(Seconds(t), &PointToPointNetDevice::SetDataRate, port, rate);
            }
        }
    }
}

/// The bottleneck port's queue disc: the shared buffer, or the policy's ns-3 AQM queue disc
/// (MaxSize = buffer_pkts packets) with ns-3's defaults for what no option sets.
void Scenario::InstallPort(Ptr<NetDevice> port) {
    const Params& c = m_cfg;
    TrafficControlHelper tc;
    if (!IsAqm(c.policy)) {
        tc.SetRootQueueDisc("ns3::RlbmBufferQueueDisc");
        m_buffer = DynamicCast<RlbmBufferQueueDisc>(tc.Install(port).Get(0));
        BufferConfig bc;
        bc.numClasses = c.numClasses;
        bc.capPkts = c.classCapPkts;
        bc.bufferPkts = c.bufferPkts;
        bc.policy = c.policy == "droptail" || c.policy == "rl-mark" ? Policy::DropTail
                    : c.policy == "rl-size" ? Policy::RlSize
                    : c.policy == "dt"     ? Policy::DynamicThresholds
                    : c.policy == "abm"    ? Policy::Abm
                    : c.policy == "rl"     ? Policy::Rl
                                           : Policy::StaticBuffer;
        bc.alpha = c.alpha;
        bc.beta = c.beta;
        bc.marker = c.policy == "rl-mark";
        bc.markProb = c.markProb;
        bc.countIntervals = c.agentIntervalS > 0;
        bc.strictPriority = c.scheduler == "strict";
        bc.windowS = c.BaseRttS();
        bc.windowCapacityPkts = c.BaseRttS() * c.bottleneckRateBps / c.DataPktBits();
        bc.warmupS = c.warmupS;
        bc.endS = c.seconds;
        m_buffer->Configure(bc);
        m_meter = &m_buffer->Meter();
        return;
    }

    const std::string type = c.policy == "red" || c.policy == "ared" ? "ns3::RedQueueDisc"
                             : c.policy == "pie"                     ? "ns3::PieQueueDisc"
                             : c.policy == "codel"                   ? "ns3::CoDelQueueDisc"
                                                                     : "ns3::FqCoDelQueueDisc";
    tc.SetRootQueueDisc(type);
    Ptr<QueueDisc> disc = tc.Install(port).Get(0);
    // the attributes take effect when the disc is initialised, as the simulation starts
    disc->SetAttribute("MaxSize", QueueSizeValue(QueueSize(QueueSizeUnit::PACKETS, c.bufferPkts)));
    disc->SetAttribute("UseEcn", BooleanValue(c.ecn));
    const uint32_t wirePktBytes = c.mssBytes + kDataHeaderBytes; // a full data packet on the wire
    auto nanoseconds = [](double s) { return std::to_string(std::llround(s * 1e9)) + "ns"; };
    if (c.policy == "red" || c.policy == "ared") {
        // explicit thresholds and weight: ns-3's ARED attribute would replace them by its
        // automatic ones, so ared is RED with AdaptMaxP (Interval, Top, Bottom, Alpha, Beta
        // at ns-3's defaults)
        disc->SetAttribute("MinTh", DoubleValue(c.redMinThPkts));
        disc->SetAttribute("MaxTh", DoubleValue(c.redMaxThPkts));
        disc->SetAttribute("LInterm", DoubleValue(1.0 / c.redMaxP));
        disc->SetAttribute("QW", DoubleValue(c.redWeight));
        disc->SetAttribute("Gentle", BooleanValue(c.redGentle));
        disc->SetAttribute("AdaptMaxP", BooleanValue(c.policy == "ared"));
        disc->SetAttribute("LinkBandwidth",
                           DataRateValue(DataRate(uint64_t(std::llround(c.bottleneckRateBps)))));
        disc->SetAttribute("LinkDelay", TimeValue(Seconds(c.bottleneckDelayS)));
        disc->SetAttribute("MeanPktSize", UintegerValue(wirePktBytes));
        DynamicCast<RedQueueDisc>(disc)->AssignStreams(5);
    } else if (c.policy == "pie") {
        disc->SetAttribute("QueueDelayReference", TimeValue(Seconds(c.pieTargetS)));
        disc->SetAttribute("Tupdate", TimeValue(Seconds(c.pieTupdateS)));
        disc->SetAttribute("A", DoubleValue(c.pieA));
        disc->SetAttribute("B", DoubleValue(c.pieB));
        disc->SetAttribute("MaxBurstAllowance", TimeValue(Seconds(c.pieMaxBurstS)));
        disc->SetAttribute("MarkEcnThreshold", DoubleValue(c.pieMarkThreshold));
        disc->SetAttribute("MeanPktSize", UintegerValue(wirePktBytes));
        DynamicCast<PieQueueDisc>(disc)->AssignStreams(5);
    } else if (c.policy == "codel") {
        disc->SetAttribute("Target", TimeValue(Seconds(c.codelTargetS)));
        disc->SetAttribute("Interval", TimeValue(Seconds(c.codelIntervalS)));
    } else {
        // FqCoDel passes Target and Interval to its CoDel queues as text
        disc->SetAttribute("Target", StringValue(nanoseconds(c.codelTargetS)));
        disc->SetAttribute("Interval", StringValue(nanoseconds(c.codelIntervalS)));
        disc->SetAttribute("Flows", UintegerValue(c.fqFlows));
        // no attribute in ns-3.37: unset (0), CheckConfig takes the device's MTU
        if (c.fqQuantumBytes > 0) DynamicCast<FqCoDelQueueDisc>(disc)->SetQuantum(c.fqQuantumBytes);
    }
    PortMeter::Config mc;
    mc.numClasses = 1;
    mc.histPkts = {c.bufferPkts};
    mc.bufferPkts = c.bufferPkts;
    mc.countIntervals = c.agentIntervalS > 0;
    mc.warmupS = c.warmupS;
    mc.endS = c.seconds;
    m_aqm = std::make_unique<AqmPortMonitor>(disc, mc);
    m_meter = &m_aqm->Meter();
}

void Scenario::BuildTraffic() {
    const Params& c = m_cfg;
    // Fixed stream numbers: every draw depends only on the seed (run number).
    m_gap = CreateObject<ExponentialRandomVariable>();
    m_sizeU = CreateObject<UniformRandomVariable>();
    m_senderU = CreateObject<UniformRandomVariable>();
    m_longStartU = CreateObject<UniformRandomVariable>();
    m_gap->SetStream(1);
    m_sizeU->SetStream(2);
    m_senderU->SetStream(3);
    m_longStartU->SetStream(4);

    for (uint32_t k = 0; k < c.longFlows; ++k) {
        const double t = (c.longFlowStartSpreadS > 0 ? m_longStartU->GetValue(0, c.longFlowStartSpreadS) : 0.0)
                         + c.groupLongFlowStartS[c.GroupOf(k % c.numSenders)];
        Simulator::Schedule(Seconds(t), &Scenario::StartFlow, this, k % c.numSenders, uint64_t(0), true, k);
    }
    if (c.longFlows > 0) Simulator::ScheduleNow(&Scenario::SampleLongFlows, this);

    if (!c.flowsIn.empty()) {
        ScheduleFlowsFromFile();
        return;
    }
    const double rate = c.arrival == "load" ? c.load * c.bottleneckRateBps / (8.0 * m_sizes.MeanBytes())
                                            : 5.0 * c.load * c.numSenders;
    if (rate > 0 && std::isfinite(rate)) {
        m_meanGapS = 1.0 / rate;
        ScheduleNextArrival();
    }
}

/// Flows from `--flows_in` (header `start_s,sender,size_bytes`), started at their
/// times; those at or after min(arrival_stop_s, seconds) are skipped.
void Scenario::ScheduleFlowsFromFile() {
    std::ifstream in(m_cfg.flowsIn);
    if (!in) BadParameter("flows_in", "cannot read file '" + m_cfg.flowsIn + "'");
    std::string line;
    int lineNo = 0;
    while (std::getline(in, line)) {
        ++lineNo;
        line = Trim(line);
        if (line.empty() || line[0] == '#' || line.rfind("start_s", 0) == 0) continue;
        std::istringstream row(line);
        std::string a, b, d;
        if (!std::getline(row, a, ',') || !std::getline(row, b, ',') || !std::getline(row, d, ',')) {
            BadParameter("flows_in", m_cfg.flowsIn + " line " + std::to_string(lineNo) +
                                         ": expected 'start_s,sender,size_bytes'");
        }
        const double t = ToFinite("flows_in", a, 0, false);
        const int64_t sender = ToInt("flows_in", b, 0, int64_t(m_cfg.numSenders) - 1);
        const double size = ToFinite("flows_in", d, 0, true);
        if (t >= std::min(m_cfg.arrivalStopS, m_cfg.seconds)) continue;
        const uint64_t bytes = std::max<uint64_t>(1, uint64_t(std::llround(size)));
        Simulator::Schedule(Seconds(t), &Scenario::StartFlow, this, uint32_t(sender), bytes, false, 0u);
    }
}

void Scenario::ScheduleNextArrival() {
    const double gap = m_gap->GetValue(m_meanGapS, 0);
    const double t = Simulator::Now().GetSeconds() + gap;
    if (t < std::min(m_cfg.arrivalStopS, m_cfg.seconds)) {
        Simulator::Schedule(Seconds(gap), &Scenario::OnArrival, this);
    }
}

void Scenario::OnArrival() {
    const uint32_t sender = m_senderU->GetInteger(0, m_cfg.numSenders - 1);
    const uint64_t size = m_sizes.Sample(m_sizeU->GetValue(0.0, 1.0));
    StartFlow(sender, size, false, 0);
    ScheduleNextArrival();
}

void Scenario::StartFlow(uint32_t sender, uint64_t sizeBytes, bool isLong, uint32_t longIndex) {
    auto flow = std::make_unique<Flow>();
    flow->sender = sender;
    flow->longIndex = longIndex;
    flow->sizeBytes = sizeBytes;
    flow->isLong = isLong;
    flow->cls = isLong ? m_cfg.numClasses - 1 : m_cfg.ClassOf(double(sizeBytes));
    flow->startS = Simulator::Now().GetSeconds();

    // the socket's TcpSocketState takes the attribute defaults when it is made: its group's pacing
    const uint32_t g = m_cfg.GroupOf(sender);
    Config::SetDefault("ns3::TcpSocketState::EnablePacing", BooleanValue(m_cfg.groupPacing[g]));
    if (m_cfg.groupTcp[g] == "rate") { // (a rate sender's congestion control takes its rate when it is made)
        Config::SetDefault("ns3::RlbmRateSender::RateBps", DoubleValue(m_cfg.groupSenderRateBps[g]));
        Config::SetDefault("ns3::RlbmRateSender::SegmentBytes", UintegerValue(m_cfg.mssBytes));
    }
    Config::SetDefault("ns3::TcpSocketState::MaxPacingRate",
                       DataRateValue(DataRate(uint64_t(std::llround(m_cfg.groupMaxPacingRateBps[g])))));
    Ptr<Socket> s = Socket::CreateSocket(m_senders.Get(sender), TcpSocketFactory::GetTypeId());
    flow->socket = s;
    s->Bind();
    Address local;
    s->GetSockName(local);
    // a port is unique among open sockets of a node; a stale entry belongs to a dead flow
    m_byKey[FlowKey(m_senderAddr[sender], InetSocketAddress::ConvertFrom(local).GetPort())] = m_flows.size();
    if (g_recordRtos) {
        PointerValue ops;
        s->GetAttribute("CongestionOps", ops);
        g_flowOfOps[PeekPointer(ops.Get<TcpCongestionOps>())] = int64_t(m_flows.size());
    }
    s->SetConnectCallback(MakeCallback(&Flow::OnConnected, flow.get()),
                          MakeCallback(&Flow::OnConnectFailed, flow.get()));
    s->SetSendCallback(MakeCallback(&Flow::OnSendSpace, flow.get()));

    if (isLong && longIndex < m_cfg.agentFlows) {
        flow->rttEstimator = CreateObject<SampleKeepingRtt>();
        DynamicCast<TcpSocketBase>(s)->SetRtt(flow->rttEstimator);
        m_agentFlows[longIndex] = flow.get();
    }
    if (isLong) {
        Flow* f = flow.get();
        f->cwndBytes = m_cfg.initialCwndPkts * m_cfg.mssBytes;
        s->TraceConnectWithoutContext("CongestionWindow", MakeCallback(&Flow::OnCwnd, f));
        s->TraceConnectWithoutContext("RTT", MakeCallback(&Flow::OnRtt, f));
        s->TraceConnectWithoutContext("Tx", MakeCallback(&Flow::OnTx, f));
    }
    if (m_cwndOs && !m_traceFlow && (isLong || m_cfg.longFlows == 0)) {
        m_traceFlow = flow.get();
        m_traceCwnd = m_cfg.initialCwndPkts * m_cfg.mssBytes;
        s->TraceConnectWithoutContext("CongestionWindow", MakeCallback(&Scenario::OnCwnd, this));
        s->TraceConnectWithoutContext("SlowStartThreshold", MakeCallback(&Scenario::OnSsthresh, this));
        *m_cwndOs << "time_s,cwnd_pkts,ssthresh_pkts\n";
        // samples on the grid k * trace_interval_s, from the flow's start on
        const double next = std::ceil(flow->startS / m_cfg.traceIntervalS) * m_cfg.traceIntervalS;
        Simulator::Schedule(Seconds(std::max(next - flow->startS, 0.0)), &Scenario::SampleCwnd, this);
    }

    s->Connect(InetSocketAddress(m_sinkAddr, kBasePort + flow->cls));
    m_flows.push_back(std::move(flow));
}

void Scenario::OnSinkRx(Ptr<const Packet> packet, const Address& from) {
    const uint32_t n = packet->GetSize();
    if (Measuring()) m_payloadBytes += n;
    if (!InetSocketAddress::IsMatchingType(from)) return;
    const InetSocketAddress a = InetSocketAddress::ConvertFrom(from);
    auto it = m_byKey.find(FlowKey(a.GetIpv4(), a.GetPort()));
    if (it == m_byKey.end()) return;
    Flow& f = *m_flows[it->second];
    f.received += n;
    if (!f.isLong && f.received >= f.sizeBytes) {
        f.completed = true;
        const double fct = Simulator::Now().GetSeconds() - f.startS;
        const double ideal = m_cfg.GroupBaseRttS(m_cfg.GroupOf(f.sender)) + double(f.sizeBytes) * 8.0 / m_cfg.bottleneckRateBps;
        m_completions.push_back({f.sizeBytes, f.cls, fct, fct / ideal, f.startS});
        m_byKey.erase(it);
        m_ivDone.push_back(m_completions.back());
    }
}

void Scenario::OnBottleneckTx(Ptr<const Packet> packet) {
    if (Measuring()) m_wireBytes += packet->GetSize();
}

void Scenario::SampleCwnd() {
    const double mss = m_cfg.mssBytes;
    *m_cwndOs << Simulator::Now().GetSeconds() << "," << m_traceCwnd / mss << "," << m_traceSsthresh / mss
              << "\n";
    const double next = Simulator::Now().GetSeconds() + m_cfg.traceIntervalS;
    if (!m_traceFlow->completed && !m_traceFlow->failed && next <= m_cfg.seconds + 1e-12) {
        Simulator::Schedule(Seconds(m_cfg.traceIntervalS), &Scenario::SampleCwnd, this);
    }
}

/// Every trace_interval_s: each long flow's cwnd and RTT into the window's sums; at the
/// first sample of the window, its received bytes and retransmissions so far.
void Scenario::SampleLongFlows() {
    if (Measuring()) {
        for (const auto& f : m_flows) {
            if (!f->isLong) continue;
            if (!f->warm) {
                f->warm = true;
                f->receivedAtWarmup = f->received;
                f->retxAtWarmup = f->retxSegs;
                continue; // the window's first sample opens it
            }
            f->cwndSum += double(f->cwndBytes) / m_cfg.mssBytes;
            f->rttSum += f->rttS;
            ++f->samples;
        }
    }
    if (Simulator::Now().GetSeconds() + m_cfg.traceIntervalS <= m_cfg.seconds + 1e-12) {
        Simulator::Schedule(Seconds(m_cfg.traceIntervalS), &Scenario::SampleLongFlows, this);
    }
}

/// The report's `long_flows`: per long flow (in k order) its group and TCP, goodput and
/// retransmissions from the window's first sample, and the mean cwnd and RTT of its samples.
std::string Scenario::LongFlowsJson(double measured) const {
    std::vector<const Flow*> longs;
    for (const auto& f : m_flows) {
        if (f->isLong) longs.push_back(f.get());
    }
    std::sort(longs.begin(), longs.end(), [](const Flow* a, const Flow* b) { return a->longIndex < b->longIndex; });
    std::string out = "[";
    for (size_t i = 0; i < longs.size(); ++i) {
        const Flow& f = *longs[i];
        const uint32_t g = m_cfg.GroupOf(f.sender);
        const double n = std::max<double>(f.samples, 1);
        JsonObject o;
        o.Num("flow", f.longIndex)
            .Num("sender", f.sender)
            .Num("group", g)
            .Str("tcp", m_cfg.groupTcp[g])
            .Num("base_rtt_s", m_cfg.GroupBaseRttS(g))
            .Num("goodput_bps", double(f.received - f.receivedAtWarmup) * 8.0 / measured)
            .Num("retx_pkts", double(f.retxSegs - f.retxAtWarmup))
            .Num("cwnd_mean_pkts", f.cwndSum / n)
            .Num("srtt_mean_s", f.rttSum / n)
            .Num("min_rtt_s", std::isfinite(f.minRttS) ? f.minRttS : std::numeric_limits<double>::quiet_NaN())
            .Num("samples", double(f.samples));
        out += (i ? ", " : "") + o.Dump("      ");
    }
    return out + "]";
}

void Scenario::OnSinkDeliver(const Ipv4Header& ip, Ptr<const Packet> segment, uint32_t) {
    if (ip.GetProtocol() != 6 /* TCP */) return;
    TcpHeader tcp;
    segment->PeekHeader(tcp);
    if (segment->GetSize() <= tcp.GetSerializedSize()) return; // no data
    // distinct data only, as RLBMEnv's throughput: a resent segment that already arrived
    // (ns-3.37 resends the window after a timeout) does not count again
    auto& seen = m_sinkSeen[FlowKey(ip.GetSource(), tcp.GetSourcePort())];
    if (seen.insert(tcp.GetSequenceNumber().GetValue()).second) {
        ++m_ivSinkPkts;
        m_ivSinkBytes += segment->GetSize() - tcp.GetSerializedSize();
        if (m_cfg.agentFlows > 0) {
            auto it = m_byKey.find(FlowKey(ip.GetSource(), tcp.GetSourcePort()));
            if (it != m_byKey.end()) {
                Flow& f = *m_flows[it->second];
                if (f.isLong && f.longIndex < m_cfg.agentFlows) ++f.deliveredSegs;
            }
        }
    }
}

/// The per-class fields that open the record (rlbm_jax metrics.INTERVAL_FIELDS, in its order,
/// less flows_logged and flows_overflow, which the reader derives from `flows`): per-class
/// values are written "v0,v1,...", `flows` as "size:class:slowdown;...".
static const char* const kPerClassFields[] = {"arrivals_pkts",  "drops_pkts",     "marks_pkts",
                                              "dequeues_pkts", "queue_end_pkts", "queue_pkt_s",
                                              "queue_min_pkts"};

void Scenario::SetIntervalsOut(std::ostream* os) {
    m_intervalsOs = os;
    // the same fields as the lock-step line, one column per class
    *os << "interval,t_end_s";
    auto perClass = [&](const char* name) {
        for (uint32_t c = 0; c < m_cfg.numClasses; ++c) *os << "," << name << "_c" << c;
    };
    for (const char* name : kPerClassFields) perClass(name);
    *os << ",sink_pkts,sink_bytes,rto_count,syn_drops,capacity_pkts";
    for (const char* name : {"flows_done", "slowdown_max", "log_slowdown_sum", "open_log_slowdown_start",
                             "open_log_slowdown_end"}) {
        perClass(name);
    }
    *os << ",flows";
    if (m_cfg.agentFlows > 0) {
        for (uint32_t i = 0; i < 3 * m_cfg.agentFlows; ++i) *os << ",agent_counts_c" << i;
        for (uint32_t i = 0; i < 5 * m_cfg.agentFlows; ++i) *os << ",agent_state_c" << i;
    }
    perClass("class_alpha");
    if (m_cfg.policy == "rl-mark") *os << ",mark_prob";
    if (m_cfg.policy == "rl-size") perClass("buffer_size_pkts");
    *os << "\n";
}

/// [P] sum over open flows (started, last byte not yet at the sink, not long-lived) of
/// log(max(age, ideal) / ideal): the log slowdown each would have if it finished now.
std::vector<double> Scenario::OpenLogSlowdown() const {
    const double now = Simulator::Now().GetSeconds();
    std::vector<double> out(m_cfg.numClasses, 0.0);
    for (const auto& f : m_flows) {
        if (f->isLong || f->completed) continue;
        const double ideal =
            m_cfg.GroupBaseRttS(m_cfg.GroupOf(f->sender)) + double(f->sizeBytes) * 8.0 / m_cfg.bottleneckRateBps;
        out[f->cls] += std::log(std::max(now - f->startS, ideal) / ideal);
    }
    return out;
}

namespace {
template <class T>
std::string JoinValues(const std::vector<T>& v) {
    std::ostringstream os;
    os.precision(17);
    for (size_t i = 0; i < v.size(); ++i) os << (i ? "," : "") << v[i];
    return os.str();
}
} // namespace

/// Close interval k (or, for k = -1, the empty record before the first): its record,
/// logged to --intervals_out, and a new interval begun.
Scenario::Record Scenario::CloseInterval(uint32_t k) {
    const uint32_t p = m_cfg.numClasses;
    const IntervalCounts iv = m_meter->TakeInterval();
    const std::vector<double> openEnd = OpenLogSlowdown();
    std::vector<uint64_t> done(p, 0);
    std::vector<double> slowMax(p, 0.0), logSum(p, 0.0);
    std::ostringstream flows;
    flows.precision(17);
    for (size_t i = 0; i < m_ivDone.size(); ++i) {
        const Completion& r = m_ivDone[i];
        ++done[r.cls];
        slowMax[r.cls] = std::max(slowMax[r.cls], r.slowdown);
        logSum[r.cls] += std::log(std::max(r.slowdown, 1.0));
        flows << (i ? ";" : "") << r.sizeBytes << ":" << r.cls << ":" << r.slowdown;
    }
    std::vector<uint32_t> queueEnd(m_meter->ClassLengths());
    Record rec = {{"arrivals_pkts", JoinValues(iv.arrivals)},
                  {"drops_pkts", JoinValues(iv.drops)},
                  {"marks_pkts", JoinValues(iv.marks)},
                  {"dequeues_pkts", JoinValues(iv.dequeues)},
                  {"queue_end_pkts", JoinValues(queueEnd)},
                  {"queue_pkt_s", JoinValues(iv.queuePktS)},
                  {"queue_min_pkts", JoinValues(iv.queueMin)},
                  {"sink_pkts", std::to_string(m_ivSinkPkts)},
                  {"sink_bytes", std::to_string(m_ivSinkBytes)},
                  {"rto_count", std::to_string(g_rtoCount - m_ivRtoStart)},
                  {"syn_drops", std::to_string(iv.synDrops)},
                  {"capacity_pkts", JoinValues(std::vector<double>{
                                        m_cfg.OfferedBits(m_ivStartS, Simulator::Now().GetSeconds()) /
                                        m_cfg.DataPktBits()})},
                  {"flows_done", JoinValues(done)},
                  {"slowdown_max", JoinValues(slowMax)},
                  {"log_slowdown_sum", JoinValues(logSum)},
                  {"open_log_slowdown_start", JoinValues(m_ivOpenStart.empty() ? openEnd : m_ivOpenStart)},
                  {"open_log_slowdown_end", JoinValues(openEnd)},
                  {"flows", flows.str()}};
    if (m_cfg.agentFlows > 0) AgentRows(rec);
    const bool first = m_ivOpenStart.empty(); // the empty record before interval 0
    if (!first) {
        ++m_intervalsClosed;
        if (m_intervalsOs) {
            std::ostream& os = *m_intervalsOs;
            os << k << "," << Simulator::Now().GetSeconds();
            for (const auto& [name, value] : rec) os << "," << value; // per-class values: one column each
            for (double a : m_buffer ? m_buffer->GetAlpha() : m_cfg.alpha) os << "," << a;
            if (m_cfg.policy == "rl-mark") os << "," << m_buffer->GetMarkProb();
            if (m_cfg.policy == "rl-size") {
                const auto& size = m_buffer->GetSize();
                for (uint32_t c = 0; c < p; ++c) {
                    os << "," << (c < size.size() ? std::min(std::max(std::floor(size[c]), 1.0),
                                                             double(m_cfg.classCapPkts[c]))
                                                  : double(m_cfg.classCapPkts[c]));
                }
            }
            os << "\n";
        }
    }
    m_ivSinkPkts = 0;
    m_ivSinkBytes = 0;
    m_ivDone.clear();
    m_ivRtoStart = g_rtoCount;
    m_ivOpenStart = openEnd;
    m_ivStartS = Simulator::Now().GetSeconds();
    return rec;
}

/// Boundary k (time k * agent_interval_s): close interval k - 1 (k = 0: the empty
/// record an episode starts from), let the agent set the knobs from its record,
/// schedule boundary k + 1 if it falls inside the run.
void Scenario::OnAgentBoundary(uint32_t k) {
    const Record rec = CloseInterval(k == 0 ? 0 : k - 1);
    if (m_cfg.agent == "stdio") {
        const std::vector<double> knob = AskAgent(k, rec);
        if (m_cfg.agentFlows > 0) {
            ScaleAgentFlows(knob);
        } else if (m_cfg.policy == "rl-mark") {
            m_buffer->SetMarkProb(knob[0]);
        } else if (m_cfg.policy == "rl-size") {
            std::vector<double> size(m_cfg.numClasses);
            for (uint32_t c = 0; c < m_cfg.numClasses; ++c) size[c] = knob[knob.size() == 1 ? 0 : c];
            m_buffer->SetSize(size);
        } else {
            m_buffer->SetAlpha(knob);
        }
    }
    const double next = (k + 1) * m_cfg.agentIntervalS;
    if (next < m_cfg.seconds - 1e-9) {
        Simulator::Schedule(Seconds(next) - Simulator::Now(), &Scenario::OnAgentBoundary, this, k + 1);
    }
}

/// One lock-step exchange: "rec K name=value ..." out, one line "class_alpha=a0,a1,..."
/// (rl) or "mark_prob=p" (rl-mark) in, the values clipped to [0, 1].  A closed pipe or
/// a malformed line ends the run with status 3.
std::vector<double> Scenario::AskAgent(uint32_t k, const Record& rec) const {
    std::ostringstream line;
    line << "rec " << k;
    for (const auto& [name, value] : rec) line << " " << name << "=" << value;
    std::cout << line.str() << "\n" << std::flush;
    std::string reply;
    if (!std::getline(std::cin, reply)) {
        std::cerr << "rlbm_scenario: the agent closed its pipe before answering interval " << k << std::endl;
        std::exit(3);
    }
    const bool sender = m_cfg.agentFlows > 0;
    const bool marker = !sender && m_cfg.policy == "rl-mark";
    const bool sizer = !sender && m_cfg.policy == "rl-size";
    const bool rates = sender && m_cfg.groupTcp[m_cfg.GroupOf(0)] == "rate";
    const std::string knobName = rates ? "rate_gain" : "cwnd_gain";
    const std::string key = sender ? knobName + "=" : marker ? "mark_prob=" : sizer ? "buffer_size_pkts=" : "class_alpha=";
    const size_t want = sender ? m_cfg.agentFlows : marker ? 1 : m_cfg.numClasses;
    std::vector<double> alpha;
    bool ok = reply.rfind(key, 0) == 0 && reply.find(' ') == std::string::npos;
    if (ok) {
        std::istringstream in(reply.substr(key.size()));
        std::string tok;
        while (ok && std::getline(in, tok, ',')) {
            char* end = nullptr;
            const double a = std::strtod(tok.c_str(), &end);
            ok = !tok.empty() && end == tok.c_str() + tok.size() && std::isfinite(a);
            alpha.push_back(a);
        }
    }
    if (!ok || (alpha.size() != want && !((sizer || sender) && alpha.size() == 1))) {
        std::cerr << "rlbm_scenario: interval " << k << ": the agent answered '" << reply << "'; expected "
                  << (sender ? knobName + "= and 1 or " + std::to_string(m_cfg.agentFlows) + " finite gains"
                      : marker ? std::string("mark_prob= and one finite probability")
                      : sizer ? "buffer_size_pkts= and 1 or " + std::to_string(m_cfg.numClasses) + " finite sizes"
                              : "class_alpha= and " + std::to_string(m_cfg.numClasses) + " finite alphas")
                  << std::endl;
        std::exit(3);
    }
    if (sizer) {  // floor(n) packets, clipped to [1, the FIFO cap] where the limit is read (Threshold)
        for (double& x : alpha) x = std::floor(std::max(x, 1.0));
        return alpha;
    }
    if (sender) {
        for (double x : alpha) {
            if (!(x > 0)) {
                std::cerr << "rlbm_scenario: interval " << k << ": " << knobName << " must be positive, got '" << reply
                          << "'" << std::endl;
                std::exit(3);
            }
        }
        return alpha;
    }
    for (double& x : alpha) x = std::clamp(x, 0.0, 1.0);
    return alpha;
}

/// The agent flows' rows of the record (rlbm_jax `metrics.AGENT_COUNTS` and `AGENT_STATE`, flow
/// by flow, "v0,v1,..."): over the interval, transmissions (retransmissions included), of them
/// retransmissions, distinct data segments at the sink; at its end, cwnd (segments), sRTT (ns-3's
/// estimate), the least RTT sample, the pacing rate (segments/s; 0 unpaced) and the sRTT when it
/// began.  A flow not yet started has zeros.  The next interval's counters start here.
void Scenario::AgentRows(Record& rec) {
    std::vector<double> counts, state;
    for (Flow* f : m_agentFlows) {
        if (f == nullptr) {
            counts.insert(counts.end(), 3, 0.0);
            state.insert(state.end(), 5, 0.0);
            continue;
        }
        Ptr<TcpSocketState> tcb = TcbOf::Get(f->socket);
        const double mss = m_cfg.mssBytes;
        const double srtt = f->rttS; // ns-3's m_lastRtt: the smoothed estimate after each sample
        const double minSample = f->rttEstimator->minSampleS;
        const double pacing = tcb->m_pacing ? double(tcb->m_pacingRate.Get().GetBitRate()) / (8.0 * mss) : 0.0;
        counts.push_back(double(f->txSegs - f->ivTx0));
        counts.push_back(double(f->retxSegs - f->ivRetx0));
        counts.push_back(double(f->deliveredSegs - f->ivDelivered0));
        state.push_back(double(tcb->m_cWnd.Get()) / mss);
        state.push_back(srtt);
        state.push_back(std::isfinite(minSample) ? minSample : 0.0);
        state.push_back(pacing);
        state.push_back(f->ivSrtt0);
        f->ivTx0 = f->txSegs;
        f->ivRetx0 = f->retxSegs;
        f->ivDelivered0 = f->deliveredSegs;
        f->ivSrtt0 = srtt;
    }
    rec.emplace_back("agent_counts", JoinValues(counts));
    rec.emplace_back("agent_state", JoinValues(state));
}

/// A sender agent's answer: each agent flow's window times its gain (one gain: every flow's),
/// within [1 segment, 2^21 segments] (rlbm_jax `sim.MAX_CWND_PKTS`), and its congestion control
/// goes on from the new window (cwnd_gain); a rate sender's rate times it (rate_gain).  A gain of
/// exactly 1 leaves the flow as it is.
void Scenario::ScaleAgentFlows(const std::vector<double>& gain) {
    for (uint32_t a = 0; a < m_agentFlows.size(); ++a) {
        const double g = gain[gain.size() == 1 ? 0 : a];
        Flow* f = m_agentFlows[a];
        if (f == nullptr || g == 1.0) continue;
        PointerValue ops;
        f->socket->GetAttribute("CongestionOps", ops);
        if (Ptr<TcpRateSender> rate = DynamicCast<TcpRateSender>(ops.Get<TcpCongestionOps>())) {
            rate->Scale(g); // rate_gain: a rate sender's rate
            continue;
        }
        Ptr<TcpSocketState> tcb = TcbOf::Get(f->socket);
        const double mss = m_cfg.mssBytes;
        const double w = std::clamp(std::round(double(tcb->m_cWnd.Get()) * g), mss, double(1u << 21) * mss);
        tcb->m_cWnd = uint32_t(w);
    }
}

/// Close the last full interval, whose boundary coincides with the end of the run.
void Scenario::FinishIntervals() {
    if (m_cfg.agentIntervalS <= 0) return;
    const auto full = uint32_t(std::floor(m_cfg.seconds / m_cfg.agentIntervalS + 1e-6));
    while (m_intervalsClosed < full) CloseInterval(m_intervalsClosed);
}

JsonObject Scenario::ConfigJson() const {
    const Params& c = m_cfg;
    JsonObject o;
    o.Num("num_senders", c.numSenders)
        .Num("access_rate_bps", c.accessRateBps)
        .Raw("access_delay_s", c.flowGroups > 1 ? JsonArr(c.groupAccessDelayS) : JsonNum(c.accessDelayS))
        .Num("flow_groups", c.flowGroups)
        .Num("bottleneck_rate_bps", c.bottleneckRateBps)
        .Num("bottleneck_delay_s", c.bottleneckDelayS)
        .Num("num_classes", c.numClasses)
        .Raw("class_cap_pkts", JsonArr(c.classCapPkts))
        .Num("buffer_pkts", c.bufferPkts)
        .Str("policy", c.policy)
        .Raw("alpha", JsonArr(c.alpha))
        .Raw("beta", JsonArr(c.beta))
        .Str("scheduler", c.scheduler)
        .Num("mark_prob", c.markProb)
        .Raw("class_threshold_bytes", JsonArr(c.classThresholdBytes))
        .Raw("ecn", c.ecn ? "true" : "false")
        .Num("red_min_th_pkts", c.redMinThPkts)
        .Num("red_max_th_pkts", c.redMaxThPkts)
        .Num("red_max_p", c.redMaxP)
        .Num("red_weight", c.redWeight)
        .Raw("red_gentle", c.redGentle ? "true" : "false")
        .Num("pie_target_s", c.pieTargetS)
        .Num("pie_tupdate_s", c.pieTupdateS)
        .Num("pie_a", c.pieA)
        .Num("pie_b", c.pieB)
        .Num("pie_max_burst_s", c.pieMaxBurstS)
        .Num("pie_mark_threshold", c.pieMarkThreshold)
        .Num("codel_target_s", c.codelTargetS)
        .Num("codel_interval_s", c.codelIntervalS)
        .Num("fq_flows", c.fqFlows)
        .Num("fq_quantum_bytes", c.fqQuantumBytes)
        .Raw("tcp", c.flowGroups > 1 ? JsonStrArr(c.groupTcp) : JsonStr(c.tcp))
        .Raw("pacing", PacingJson(c))
        .Raw("max_pacing_rate_bps", c.flowGroups > 1 ? JsonArr(c.groupMaxPacingRateBps)
                                                      : JsonNum(c.groupMaxPacingRateBps[0]))
        .Num("pacing_ss_ratio", c.pacingSsRatio)
        .Num("pacing_ca_ratio", c.pacingCaRatio)
        .Raw("pace_initial_window", c.paceInitialWindow ? "true" : "false")
        .Num("bbr_high_gain", c.bbrHighGain)
        .Num("bbr_bw_window_rounds", c.bbrBwWindowRounds)
        .Num("bbr_rtt_window_s", c.bbrRttWindowS)
        .Num("bbr_probe_rtt_s", c.bbrProbeRttS)
        .Num("mss_bytes", c.mssBytes)
        .Num("initial_cwnd_pkts", c.initialCwndPkts)
        .Num("min_rto_s", c.minRtoS)
        .Num("syn_timeout_s", c.synTimeoutS)
        .Num("rto_granularity_s", c.rtoGranularityS)
        .Num("delayed_ack", c.delayedAck)
        .Num("dupthresh", c.dupthresh)
        .Num("cubic_beta", c.cubicBeta)
        .Num("dctcp_g", c.dctcpG)
        .Num("cubic_c", c.cubicC)
        .Raw("cubic_fast_convergence", c.cubicFastConvergence ? "true" : "false")
        .Raw("hystart", c.hystart ? "true" : "false")
        .Num("ss_ack_cap_segs", c.ssAckCapSegs)
        .Num("hystart_low_window_pkts", c.hystartLowWindowPkts)
        .Num("hystart_min_samples", c.hystartMinSamples)
        .Num("hystart_ack_delta_s", c.hystartAckDeltaS)
        .Num("hystart_delay_min_s", c.hystartDelayMinS)
        .Num("hystart_delay_max_s", c.hystartDelayMaxS)
        .Str("arrival", c.arrival)
        .Num("load", c.load)
        .Raw("arrival_stop_s", std::isfinite(c.arrivalStopS) ? JsonNum(c.arrivalStopS) : "\"inf\"")
        .Str("cdf", c.cdf)
        .Str("flows_in", c.flowsIn)
        .Str("capacity_in", c.capacityIn)
        .Num("capacity_rows", double(c.capTimesS.size()))
        .Raw("capacity_period_s", std::isfinite(c.capPeriodS) ? JsonNum(c.capPeriodS) : "\"inf\"")
        .Num("long_flows", c.longFlows)
        .Num("long_flow_start_spread_s", c.longFlowStartSpreadS)
        .Raw("long_flow_start_s", c.flowGroups > 1 ? JsonArr(c.groupLongFlowStartS) : JsonNum(c.groupLongFlowStartS[0]))
        .Num("seconds", c.seconds)
        .Num("warmup_s", c.warmupS)
        .Num("seed", double(c.seed))
        .Str("out", c.out)
        .Str("flows_out", c.flowsOut)
        .Str("cwnd_out", c.cwndOut)
        .Str("rto_out", c.rtoOut)
        .Num("trace_interval_s", c.traceIntervalS)
        .Num("agent_interval_s", c.agentIntervalS)
        .Str("agent", c.agent)
        .Str("intervals_out", c.intervalsOut)
        .Num("base_rtt_s", c.BaseRttS())
        .Num("bdp_pkts", c.bottleneckRateBps * c.BaseRttS() / c.DataPktBits())
        .Num("mean_flow_size_bytes", m_sizes.Empty() ? std::nan("") : m_sizes.MeanBytes())
        .Num("arrival_rate_per_s", m_meanGapS > 0 ? 1.0 / m_meanGapS : 0.0);
    if (c.agentFlows > 0) o.Num("agent_flows", c.agentFlows); // (absent without: earlier reports unchanged)
    return o;
}

std::string Scenario::Report(double wallS) const {
    const Params& c = m_cfg;
    const BufferStats& st = m_meter->GetStats();
    const double measured = c.seconds - c.warmupS;
    const double histTotal = std::max(st.measuredS, 1e-300);

    uint64_t arrivals = 0;
    uint64_t drops = 0;
    uint64_t dataArrivals = 0;
    uint64_t marks = 0;
    double queueMean = 0;
    for (uint32_t k = 0; k < c.numClasses; ++k) {
        arrivals += st.arrivals[k];
        drops += st.drops[k];
        dataArrivals += st.dataArrivals[k];
        marks += st.marks[k];
        queueMean += st.classPktSeconds[k] / histTotal;
    }
    std::vector<double> fct;
    std::vector<double> slowdown;
    for (const auto& r : m_completions) {
        if (r.startS >= c.warmupS) {
            fct.push_back(r.fctS);
            slowdown.push_back(r.slowdown);
        }
    }
    double fctMean = std::numeric_limits<double>::quiet_NaN();
    if (!fct.empty()) {
        fctMean = 0;
        for (double f : fct) {
            fctMean += f / double(fct.size());
        }
    }
    uint64_t failed = 0;
    for (const auto& f : m_flows) {
        failed += f->failed ? 1 : 0;
    }
    auto fractions = [&](const std::vector<double>& h) {
        std::vector<double> out;
        for (double t : h) {
            out.push_back(t / histTotal);
        }
        return JsonArr(out);
    };

    JsonObject o;
    // under a capacity schedule: over the bits it offered in the window (its integral)
    const double offeredBits = c.OfferedBits(c.warmupS, c.seconds);
    o.Num("util_wire", c.capTimesS.empty() ? double(m_wireBytes) / (c.bottleneckRateBps / 8.0 * measured)
                                           : double(m_wireBytes) * 8.0 / std::max(offeredBits, 1e-300))
        .Num("goodput_bps", double(m_payloadBytes) * 8.0 / measured)
        .Num("drop_rate", arrivals ? double(drops) / double(arrivals) : 0.0)
        .Num("mark_rate", dataArrivals ? double(marks) / double(dataArrivals) : 0.0)
        .Num("queue_mean_pkts", queueMean)
        .Num("queue_p99_pkts", HistQuantile(st.occupancyTime, 0.99))
        .Num("fct_mean_s", fctMean)
        .Num("fct_p99_s", Quantile(fct, 0.99))
        .Num("slowdown_p50", Quantile(slowdown, 0.50))
        .Num("slowdown_p99", Quantile(slowdown, 0.99))
        .Num("flows_started", double(m_flows.size()))
        .Num("flows_completed", double(m_completions.size()))
        .Num("flows_unfinished", double(m_flows.size() - m_completions.size()))
        .Num("flows_refused", 0) // every arrival gets a socket (rlbm_jax refuses when its slots are full)
        .Num("flows_failed", double(failed))
        .Num("rto_count", double(g_rtoCount))
        .Num("retx_arrivals", double(st.retxArrivals))
        .Num("retx_drops", double(st.retxDrops))
        .Num("syn_drops", double(st.synDrops))
        .Num("measured_s", measured)
        .Num("agent_intervals", m_intervalsClosed);
    if (!c.capTimesS.empty()) o.Num("capacity_mean_bps", offeredBits / measured);
    if (c.longFlows > 0) o.Raw("long_flows", LongFlowsJson(measured));
    for (uint32_t k = 0; k < c.numClasses; ++k) {
        const std::string s = std::to_string(k);
        o.Num("queue_mean_pkts_c" + s, st.classPktSeconds[k] / histTotal)
            .Num("queue_p99_pkts_c" + s, HistQuantile(st.classTime[k], 0.99))
            .Num("arrivals_c" + s, double(st.arrivals[k]))
            .Num("drops_c" + s, double(st.drops[k]))
            .Num("marks_c" + s, double(st.marks[k]));
    }
    o.Raw("queue_hist", fractions(st.occupancyTime));
    for (uint32_t k = 0; k < c.numClasses; ++k) {
        o.Raw("queue_hist_c" + std::to_string(k), fractions(st.classTime[k]));
    }
    o.Num("wall_s", wallS).Num("sim_seconds", c.seconds).Raw("config", ConfigJson().Dump("    "));
    return o.Dump();
}

void Scenario::WriteRtos(std::ostream& os) const {
    os.precision(12);
    os << "time_s,flow_start_s,size_bytes,long,cwnd_pkts,ssthresh_pkts,last_rtt_s,cong_state\n";
    for (const auto& e : g_rtoEvents) {
        if (e.flow < 0) continue;
        const Flow& f = *m_flows[size_t(e.flow)];
        os << e.timeS << "," << f.startS << "," << f.sizeBytes << "," << int(f.isLong) << "," << e.cwndSegs << ","
           << e.ssthreshSegs << "," << e.lastRttS << "," << e.state << "\n";
    }
}

void Scenario::WriteFlows(std::ostream& os) const {
    os.precision(12);
    os << "size_bytes,cls,fct_s,slowdown,start_s\n";
    for (const auto& r : m_completions) {
        os << r.sizeBytes << "," << r.cls << "," << r.fctS << "," << r.slowdown << "," << r.startS << "\n";
    }
}

/// ns-3 defaults that the scenario overrides.
void SetDefaults(const Params& c) {
    const TypeId cc = CongestionOpsOf(c.tcp);
    Config::SetDefault("ns3::TcpDctcp::DctcpShiftG", DoubleValue(c.dctcpG));
    Config::SetDefault("ns3::TcpL4Protocol::SocketType", TypeIdValue(cc));
    g_ssAckCapSegs = c.ssAckCapSegs;
    Config::SetDefault("ns3::TcpSocket::SegmentSize", UintegerValue(c.mssBytes));
    Config::SetDefault("ns3::TcpSocketState::PacingSsRatio", UintegerValue(uint32_t(std::lround(c.pacingSsRatio * 100))));
    Config::SetDefault("ns3::TcpSocketState::PacingCaRatio", UintegerValue(uint32_t(std::lround(c.pacingCaRatio * 100))));
    Config::SetDefault("ns3::TcpSocketState::PaceInitialWindow", BooleanValue(c.paceInitialWindow));
    Config::SetDefault("ns3::TcpBbr::HighGain", DoubleValue(c.bbrHighGain));
    Config::SetDefault("ns3::TcpBbr::BwWindowLength", UintegerValue(c.bbrBwWindowRounds));
    Config::SetDefault("ns3::TcpBbr::RttWindowLength", TimeValue(Seconds(c.bbrRttWindowS)));
    Config::SetDefault("ns3::TcpBbr::ProbeRttDuration", TimeValue(Seconds(c.bbrProbeRttS)));
    Config::SetDefault("ns3::TcpSocket::InitialCwnd", UintegerValue(c.initialCwndPkts));
    Config::SetDefault("ns3::TcpSocket::DelAckCount", UintegerValue(c.delayedAck));
    Config::SetDefault("ns3::TcpSocket::SndBufSize", UintegerValue(kSocketBufferBytes));
    Config::SetDefault("ns3::TcpSocket::RcvBufSize", UintegerValue(kSocketBufferBytes));
    Config::SetDefault("ns3::TcpSocket::DataRetries", UintegerValue(kDataRetries));
    Config::SetDefault("ns3::TcpSocketBase::MinRto", TimeValue(Seconds(c.minRtoS)));
    Config::SetDefault("ns3::TcpSocket::ConnTimeout", TimeValue(Seconds(c.synTimeoutS)));
    Config::SetDefault("ns3::TcpSocketBase::ClockGranularity", TimeValue(Seconds(c.rtoGranularityS)));
    Config::SetDefault("ns3::TcpSocketBase::Sack", BooleanValue(true));
    Config::SetDefault("ns3::TcpSocketBase::Timestamp", BooleanValue(true));
    Config::SetDefault("ns3::TcpSocketBase::ReTxThreshold", UintegerValue(c.dupthresh));
    if (c.ecn) Config::SetDefault("ns3::TcpSocketBase::UseEcn", EnumValue(TcpSocketState::On));
    Config::SetDefault("ns3::TcpCubic::Beta", DoubleValue(c.cubicBeta));
    Config::SetDefault("ns3::TcpCubic::C", DoubleValue(c.cubicC));
    Config::SetDefault("ns3::TcpCubic::FastConvergence", BooleanValue(c.cubicFastConvergence));
    Config::SetDefault("ns3::TcpCubic::HyStart", BooleanValue(c.hystart));
    Config::SetDefault("ns3::TcpCubic::HyStartLowWindow", UintegerValue(c.hystartLowWindowPkts));
    Config::SetDefault("ns3::TcpCubic::HyStartMinSamples", UintegerValue(c.hystartMinSamples));
    Config::SetDefault("ns3::TcpCubic::HyStartAckDelta", TimeValue(Seconds(c.hystartAckDeltaS)));
    Config::SetDefault("ns3::TcpCubic::HyStartDelayMin", TimeValue(Seconds(c.hystartDelayMinS)));
    Config::SetDefault("ns3::TcpCubic::HyStartDelayMax", TimeValue(Seconds(c.hystartDelayMaxS)));
}

/// Open an output file now, so that a bad path fails before the run (status 2).
std::unique_ptr<std::ofstream> OpenOutput(const std::string& param, const std::string& path) {
    if (path.empty() || path == "-") return nullptr;
    auto os = std::make_unique<std::ofstream>(path);
    if (!*os) BadParameter(param, "cannot write '" + path + "'");
    return os;
}

} // namespace rlbm

int main(int argc, char* argv[]) {
    using namespace rlbm;
    const Params cfg = ParseCommandLine(argc, argv);
    SizeDistribution sizes = cfg.cdf.empty() ? SizeDistribution() : SizeDistribution::Load(cfg.cdf);
    if (cfg.load > 0 && cfg.arrival == "load" && !(sizes.MeanBytes() > 0)) {
        BadParameter("cdf", "the mean flow size must be positive");
    }
    auto jsonOs = OpenOutput("out", cfg.out);
    auto flowsOs = OpenOutput("flows_out", cfg.flowsOut);
    auto cwndOs = OpenOutput("cwnd_out", cfg.cwndOut);
    auto rtoOs = OpenOutput("rto_out", cfg.rtoOut);
    g_recordRtos = rtoOs != nullptr;
    auto intervalsOs = OpenOutput("intervals_out", cfg.intervalsOut);

    RngSeedManager::SetSeed(1);
    RngSeedManager::SetRun(cfg.seed);
    SetDefaults(cfg);

    Scenario scenario(cfg, std::move(sizes));
    if (cwndOs) {
        cwndOs->precision(10);
        scenario.SetCwndTrace(cwndOs.get());
    }
    if (intervalsOs) {
        intervalsOs->precision(17); // the observation exactly as the agent got it
        scenario.SetIntervalsOut(intervalsOs.get());
    }
    scenario.Build();
    const double wallS = scenario.Run();

    const std::string report = scenario.Report(wallS) + "\n";
    if (jsonOs) {
        *jsonOs << report;
    } else {
        std::cout << report << std::flush;
    }
    if (flowsOs) scenario.WriteFlows(*flowsOs);
    if (rtoOs) scenario.WriteRtos(*rtoOs);
    Simulator::Destroy();
    bool ok = true;
    for (auto* os : {jsonOs.get(), flowsOs.get(), cwndOs.get(), intervalsOs.get(), rtoOs.get()}) {
        if (os && !(os->flush())) ok = false;
    }
    if (!ok) {
        std::cerr << "rlbm_scenario: failed to write an output file" << std::endl;
        return 1;
    }
    return 0;
}
