"""A differentiable fluid model of the one-FIFO scenarios: long-lived flows
(`presets.long_flow_params`) and Poisson web-search flows (`scenarios.queuepilot`),
`make_params(long_flows=N, load=..., num_classes=1, tcp="newreno" | "cubic" | "dctcp",
policy="droptail" | "red" | "ared" | "pie" | "codel" | "rl-mark" | "dt" | "abm" | "static-bdp" |
"sb-naive" | "sb-sophisticated")`, and the formulations on them
(`rlbm_jax.env.fluid_env.FluidEnv`).

The packet tick (`rlbm_jax.env.sim`, run by `rlbm_jax.env.backends.run`) has no useful
gradients.  This package integrates delay-differential equations of the same scenario, so
`jax.grad` of a time-averaged metric with respect to the capacity, the buffer, RED's
thresholds and max_p, PIE's and CoDel's targets and gains, DCTCP's g, the threshold policies'
alpha, the delays or CUBIC's constants is defined.  Its time averages are checked against
the packet simulator in tests/test_fluid.py and calibration/FLUID.md.  It is the `fluid`
entry of `rlbm_jax.env.backends.BACKENDS` with `ticks=False`: it advances its own
`FluidState`, not a `SimState`, so it runs whole scenarios (`simulate.run_scenario`), never
ticks.

Equations (time t in s, windows and queues in packets, C = bottleneck rate / data packet
bits in packets/s, flow i = 1..N)
------------------------------------------------------------------------------------------
Round-trip time and sending rate (Misra, Gong, Towsley, SIGCOMM 2000, "Fluid-based analysis
of a network of AQM routers supporting TCP flows with an application to RED"):

    R_i(t)  = Tp_i + q(t) / C            Tp_i = SimParams.base_rtt_s: 2 (access + bottleneck
                                         delay) + data and ACK serialisation on both links (every
                                         sender has the same access link, so the same Tp)
    x_i(t)  = min(W_i / R_i + G_i, access rate / flows on that sender)

  G_i is the window's growth rate (below): a sender puts a window increase on the wire at
  once, on top of the ACK clock W / R (flight conservation; without it a drop-tail overflow
  lasts half as long as in the packet simulator and cuts only part of the flows).

Queue, with drops p_d and marks p_m of the AQM at enqueue (one FIFO, limit B: the buffer, or
a threshold policy's cap, below):

    dq/dt = sum_i x_i (1 - p_d) - C,    q kept in [0, B]

  discretised as a smooth projection: u = q + A (1 - p_d) - C dt (A = sum_i x_i dt),
  under = h softplus(-u / h), over = h softplus((u - B) / h), h = sharpness x min(B, BDP),
  q' = u + under - over, delivered = C dt - under, dropped = A p_d + over.  So arrived =
  delivered + dropped + change of q exactly (the totals are Kahan sums, exact to float
  rounding in float32 too), the overflow (drop-tail loss) is a smooth function of the queue
  near B, and `sharpness` (default 0.003) sets how sharp.  A wider smoothing (0.01 and up)
  drops earlier and less at the limit and no longer matches the packet simulator.

Congestion signals: each flow's drops (its share a_i / A of the overflow, plus a_i p_d) and
marks (a_i (1 - p_d) p_m) reach it one RTT R_i(t) later (a ring buffer of future steps; the
fractional delay splits each amount between two slots, so the delay is differentiable and
no signal is lost or counted twice).  With sig_i the signals arriving in a step and rec_i
the share of the flow's population in recovery:

    e_i   = (1 - rec_i) (1 - exp(-sig_i / (1 - rec_i)))       reductions starting now
    rec_i += e_i - (e_i scheduled one RTT earlier)            at most one reduction per RTT
    W_i   *= 1 - e_i (1 - beta) / (1 - rec_i (1 - beta))      the cut lands on the uncut share

  This is MGT's loss term -W/2 x (loss rate) with NewReno's one reduction per window of
  losses (fast recovery / PRR, RFC 6582 / 6937) and without compounding: a flow that gets
  one signal per overflow, as in the packet simulator, halves once.  An ECN mark (RFC 3168)
  cuts like a drop but loses nothing.  DCTCP's beta is per flow, 1 - alpha_i / 2 (below).

Window growth outside recovery, G_i = (1 - rec_i) [ss_i g_ss + (1 - ss_i) g_ca]; ss_i (1 at
the start) is the share still in slow start, ss_i *= 1 - e_i:

  NewReno (ns-3.37, d = delayed_ack): g_ss = ln(1 + 1/d) W / R (+1 per ACK), g_ca = 1 / (d R)
    (+1/cwnd per ACK), beta = 1/2 (ssthresh = flight / 2): with d = 1, MGT's
    dW/dt = 1/R - W(t) W(t-R) p(t-R) / (2 R(t-R)).
  DCTCP (ns-3.37 TcpDctcp, which grows as TcpLinuxReno, counting the segments an ACK covers, so
    delayed ACKs change nothing): g_ss = ln 2 W / R (x2 per RTT), g_ca = 1 / R (+1 per cwnd
    segments ACKed); beta_i = 1 - alpha_i / 2 (ssthresh = (1 - alpha / 2) cwnd, on an echoed
    mark and on a loss alike), with alpha_i (Alizadeh, Javanmard, Prabhakar, "Analysis of
    DCTCP: stability, convergence, and fairness", SIGMETRICS 2011, whose fluid model has
    d alpha/dt = g / R (p(t - R) - alpha), p = 1{q > K}) as ns-3 counts it: every window of
    ACKed segments moves alpha by g toward the window's marked fraction, so
        d alpha_i = g (ce_i - alpha_i ack_i) / W_i
    with ack_i the ACKs of the packets the AQM admitted and ce_i those echoing a mark, each
    reaching the sender one RTT after its packet's arrival at the queue (two more rings,
    as the signals'); with ack_i = W_i dt / R this is AJP's equation.  alpha_i = 1 at the start
    (DctcpAlphaOnInit); the cut uses alpha before the step's update (ns-3 cuts on the echo
    before PktsAcked); g = dctcp_g (1/16).  ECN is on (make_params turns it on for DCTCP).
  CUBIC (an averaged form of ns-3.37's TcpCubic, Ha, Rhee, Xu 2008; in the spirit of
    Vardoyan, Hollot, Towsley, INFOCOM 2018, arXiv 1801.02741): per flow W_max, K, tau (time
    since the epoch began);
        target = W_max + c (tau + Tp - K)^3
        g_ca   = clip((target - W) / R, 0.01 / R, W / (2 R))     (ns-3's cnt in [2, 100 cwnd])
        g_ss   = ln 2 W / R                                      (byte counting: x2 per RTT)
    and on a reduction (share e_i): W_max -> W (1 + beta) / 2 if W < W_max (fast convergence,
    a sigmoid of width 1 packet) else W, K -> cbrt((W_max - beta W) / c), tau -> 0, each
    moved by the share e_i; tau grows at 1 - rec_i; beta = cubic_beta (0.7), c = cubic_c.

AQMs (ns-3.37 RedQueueDisc, PieQueueDisc and CoDelQueueDisc, as rlbm_jax.env.switch.disciplines
red, pie and codel):
  drop-tail: p_d = p_m = 0, the overflow above.
  RED: the average (MGT's dx/dt = ln(1 - w_q) / delta (x - q), with 1 / delta the rate of
    updates: the arrivals plus, when the link idles, its packet rate, as ns-3 decays an idle
    queue's average), integrated exactly over a step:
        avg' = q + (avg - q) exp(ln(1 - w_q) (A / dt + idle C) dt)
    p_b(avg) = max_p (avg - min_th) / (max_th - min_th) on [min_th, max_th]; gentle: then
    max_p0 + (1 - max_p0) (avg - max_th) / max_th up to 2 max_th; above the top (2 max_th,
    or max_th without gentle) every arrival is dropped ("forced").  The kinks are smoothed by
    softplus and the forced region by a sigmoid, of width sharpness x (max_th - min_th).
    ns-3's "Wait" spaces early drops uniformly in [1/p_b, 2/p_b) packets, so the per-packet
    rate is p_b / 1.5; ns-3 decides nothing while fewer than 2 packets are queued (a sigmoid of
    q - 1.5, width 1/4 packet).  Early decisions drop, or with ECN mark; forced ones drop.
  RED's step marking (red_weight >= 1 and red_max_p >= 1, which the packet simulator reads as
    DCTCP's marking at K = min_th, max_th = K + 1: every arrival that finds max(max_th, 2)
    packets or more is hit, on the instantaneous queue): early = sigmoid((q - (max(max_th, 2)
    - 1/2)) / h), forced = sigmoid((q - (top - 1/2)) / h) (top = 2 max_th, gentle, or max_th),
    h the queue's width above (sharpness x min(B, BDP)); the half packet puts the step between
    the packet queue's whole numbers, as RED's 1.5 above.  The configuration reads the step
    from the params (or concrete overrides); it reads neither red_weight nor red_max_p, so a
    traced override of either is refused there (override red_max_th_pkts, the step's K + 1).
  ARED: RED with max_p moved by ns-3's rule as a rate: +min(0.01, max_p/4) per 0.5 s while
    avg > max_th - 0.4 (max_th - min_th) and max_p < 0.5, x0.9 per 0.5 s while avg < min_th
    + 0.4 (max_th - min_th) and max_p > min(0.01, 0.1 s / C); the conditions as sigmoids.
  PIE (Pan et al., "PIE: a lightweight control scheme to address the bufferbloat problem",
    IEEE HPSR 2013; RFC 8033; ns-3.37 PieQueueDisc): the probability p is a state.  ns-3 moves
    it every tupdate by scale(p) [a (qd - target) + b (qd - qd_old)]; here each update is spread
    over its tupdate as a rate (the same sum; p reacts within the period instead of at its end):
        dp/dt = scale(p) [a (qd - target) / tupdate + b dqd/dt],      qd = q / C
    qd is ns-3's sojourn of the last packet dequeued, q / C in a FIFO served at C (its lag of
    one sojourn and the half period an update holds, tried as delays, moved the mean queue of
    the cells tried, 8 and 16 flows at 0.5-2 BDP, by at most 5 %).  scale(p) = 1/2048 below p = 1e-6, x4 at
    each decade up to 1/2 below 0.1, 1 from 0.1 (each step a sigmoid of p - threshold, width
    sharpness x threshold); from p = 0.1 an update adds at most 0.02; p x 0.98 per tupdate while
    the queue is empty (q < 1/2 packet, a sigmoid of width 1/4); p kept in [0, 1] (softplus of
    width sharpness x 1e-6 at 0) and held at 0 during the burst allowance (max_burst from the
    first arrival; ns-3 re-arms it only after 100 calm updates at p = 0, which long-lived
    flows keeping the link busy do not give: it is not re-armed).  Each arrival is decided
    with probability p (ns-3 draws each packet independently), except while qd < target / 2
    and p < 0.2, or while at most 2 packets are queued (sigmoids of width sharpness x target / 2,
    sharpness x 0.2 and 1/4 packet).  With ECN a decision marks while p < mark_threshold (a
    sigmoid of width sharpness x mark_threshold), else drops.  Where p alone holds the queue
    with few CUBIC flows (8 flows, 2 BDP) the packet simulator runs a limit cycle: a few drops,
    each cutting one flow by 30 %, empty the queue to ~30 packets, p sits at 0 half the time,
    then climbs the scale's ladder while the queue overshoots to ~300; its time-mean queue is
    ~20 % below target.  The fluid flows, each cut by a sliver per drop, settle near target
    (27 % above the packet simulator there).
  CoDel (Nichols, Jacobson, "Controlling queue delay", ACM Queue 2012; RFC 8289; ns-3.37
    CoDelQueueDisc) decides on the head of the queue, whose sojourn is s = q / C.  Its state
    machine as smooth state variables of a population, d of it in the dropping state:
        above  = [s > target] [(q - 1) packet bytes >= MinBytes (1500)]      (sigmoids)
        enter  = (1 - d) above [timer + dt > interval]      leave = (1 - above) d
        d     += enter - leave
        acts   = d above sqrt(count) / interval dt + enter      (packets this step)
    timer: the not-dropping share's time above target (its part below target and the leavers
    bring 0); count and run (acts since entering) grow by above sqrt(count) / interval dt, and
    entrants bring count = 1 + [idle < 16 interval] max(last_run - 1, 0) and a run of 0
    (ns-3: count - lastcount if above 1 and the last run ended within 16 intervals, else 1);
    last_run and idle: the run the leavers brought and the time since.  A share moving brings
    its own values (means weighted by the shares), so a share that just left, its timer 0,
    does not re-enter before another interval.  The acts drop packets from the head (at most
    q, a smooth min that is 0 at 0), or with ECN mark packets leaving (at most C dt).  A
    decision on the head reaches its sender one base RTT later (the packets behind it, or the
    marked packet, leave now), not R = base + q / C as a decision at the tail, shared among
    the flows as the arrivals are.  The brackets are sigmoids of width sharpness x target,
    1/4 packet, sharpness x interval and sharpness x 16 intervals.

Shared-buffer thresholds (rlbm_jax.env.switch.buffer) with one class: a packet is admitted
while the queue it finds is below the policy's threshold, which with one queue (occupancy =
q) is a cap on q, the fixed point of q = threshold(q) (a = the class's alpha, B_s the shared
buffer, B = min(B_s, class cap)):
    sb-naive, sb-sophisticated   a B_s / sum(a) = B_s (the thesis's static split; one class
                                 takes the whole buffer: plain drop-tail at B)
    dt  (Choudhury, Hahne, ToN 1998)  threshold a (B_s - q):          cap a B_s / (1 + a)
    abm (Addanki et al. 2022)    a (B_s - q) mu / n: one queue of its priority (n = 1) and
                                 mu clamped to [1/P, 1] = [1, 1]: DT's cap
    static-bdp                   min(a BDP, B_s - q):            cap min(a BDP, B_s / 2)
  each at most B, and the FIFO's projection above runs with that cap in place of B (its width
  h = sharpness x min(cap, BDP)).  The caps are the minima of constants, so exact where one
  is below another; the packet simulator admits whole packets (floor of the threshold), the
  fluid cap is continuous.  alpha is OVERRIDABLE (one value, the class's).

Integration: explicit Euler, step dt = (smallest base RTT) / steps_per_rtt (20), in a
`lax.scan`; the rings of future signals hold the largest RTT (base + B / C, with a margin).
Each long flow i starts sending at spread x (i + 1/2) / N + base RTT + access path (the
packet simulator draws the starts uniformly in [0, spread); here the quantiles), with the
initial window, in slow start.

Short flows (load > 0): the packet simulator's Poisson schedule, drawn from the same key
(`sim.flow_schedule`: arrival time, sender, size), one slot per arrival (M slots: the
expected arrivals until min(arrival_stop_s, the run's length) + 8 standard deviations + 16;
a schedule that needs more is reported, `short_slots_full`).  A short flow is flow i > N with
the same window equations, from the initial window in slow start; it sends after its
handshake (arrival + base RTT + access path; its first step counts the part after that time,
so its FCT moves continuously), at most what it has left r_i (packets: ceil(size / MSS) at
the start), shares its sender's access link with the long flows and the sender's other open
short flows, and

    r_i' = r_i - a_i + dropped_i                (a drop is sent again at once: no timeout)

  finishes in the step where a_i = r_i, a fraction f = r_i / (x_i dt) of the step in; its last
  packet reaches the sink at

    t + f dt + q' / C + (packet bits / rate + bottleneck delay) + (dropped_i / a_i) R_i

  (the last term: the share of that last step that was dropped comes one RTT later), so
  fct = that - arrival and slowdown = fct / (base RTT + size x 8 / rate), as the packet
  simulator computes them, are differentiable (tests/test_fluid_websearch.py: within 2 % of
  central differences, with respect to the capacity and the delays).  The last step's
  retransmissions are not put on the queue (a share of a packet per flow).  What the fluid
  flows cannot show: timeouts (a loss while the window is below 4 packets, a lost
  retransmission, tail losses: the packet simulator's worst FCTs), SYN loss, slow start's
  bursts (a fluid flow in slow start grows smoothly and is cut by a share of each loss, not
  halved at its first one); calibration/FLUID.md measures the slowdowns flow by flow.
  PIE's burst allowance runs from the first arrival of any flow and is not re-armed (ns-3
  re-arms it after 100 calm updates at p = 0, which idle gaps between short flows can give).

API (shapes: N flows, L ring slots)
-----------------------------------
    cfg = configure(params, overrides=None, steps_per_rtt=20, sharpness=0.003, ...)
                      # static Config; ValueError naming anything not representable
    st  = init(params, cfg, overrides, key=None) # FluidState: w, ss, rec, wmax, kc, tau,
                                                 # dctcp_alpha [N + M]; q, avg, max_p, pie_p,
                                                 # cd_* []; sig, rec_end [L, N + M]; ack_ce,
                                                 # ack_all [L, N + M] (DCTCP; [0, N + M] else);
                                                 # r, done, fin_s, s_start, s_sender, s_size_b
                                                 # [M]; tot (key: the short flows' schedule,
                                                 # needed when M > 0)
    st  = advance(st, params, num_steps, cfg, overrides)     # num_steps static
    out = summary(params, seconds, warmup_s=None, overrides=None, config=None, **config_kw)
          # {"util_wire", "queue_mean_pkts", "drop_rate", "mark_rate", "window_mean_pkts",
          #  "rtt_mean_s", "throughput_bps", totals, "delay_clipped_s", ...}: scalars; with
          #  short flows (summary(..., key=)) also "flows_started", "flows_completed",
          #  "flows_open", "fct_mean_s", "slowdown_mean", "slowdown_p50", "short_slots_full"
    short_flows(st, values(params, cfg))         # per slot [M]: start_s, size_bytes, done,
                                                 # fct_s, slowdown

`overrides` maps names of OVERRIDABLE (bottleneck_rate_bps, buffer_pkts, red_max_p,
red_min_th_pkts, pie_target_s, codel_interval_s, dctcp_g, alpha, ...) to arrays that replace the params'
values inside the traced function, so e.g. `jax.grad(lambda b: summary(p, 10.0, overrides={"buffer_pkts": b})["queue_mean_pkts"])`
works although SimParams holds the buffer as an integer.  Inside `jit` or `vmap` over params,
build the static config outside (`configure(params)`, a stacked batch included) and pass
`config=`.  Computations run in float32, or float64 under `jax.enable_x64(True)`.

Gradients are exact derivatives of this smooth (but stiff) function: central differences
converge to them as the step shrinks (tests/test_fluid.py: within 0.2 % at a relative step of
1e-4 in float64).  Where the link idles after synchronised drop-tail cuts (8 flows, 0.5 BDP)
the function bends sharply at the default sharpness: differences with a step of 1e-3 of the
buffer are then 22 % off the gradient (the utilisation's 7 %), with 1e-5 within 1 %.  So
with CoDel's interval (16 flows, 1 BDP: its timer's sigmoid, of width sharpness x interval, is
crossed within an Euler step): 22 % off at a relative step of 1e-4, 0.1 % at 1e-5.

Where the loop oscillates (RED at half a BDP), trajectories are unstable and the exact
derivative of a time average grows with the horizon (1e2 over 8 s, 1e13 over 30 s for
max_p -> utilisation) while the function itself moves smoothly.  There pass
`grad_horizon_s` (to `summary` or `advance`): the values do not change (to float
rounding), but every `grad_horizon_s` of simulated time the dynamic state is cut from the
derivative (truncated backpropagation through time), so the derivative is a sum of each
stretch's own response and stays of the size the packet simulator shows.  With 1 s its sign
is the packet simulator's in every committed probe (calibration/FLUID.md), and its size
closer than the exact derivative's; the exact one (None, the default) is what central
differences of the fluid function check.

Refused (ValueError naming the value): long_flows = 0 with load = 0, short flows arriving
until arrival_stop_s = inf with no run length (`configure`'s horizon_s), num_classes > 1,
any policy other than droptail, sb-naive, sb-sophisticated, dt, abm, static-bdp, red,
ared, pie, codel and rl-mark (FQ-CoDel, the agent's class-threshold policy "rl"), a batch
that mixes flow counts, TCPs, policies, ECN, RED's gentle region or step marking, or CUBIC's
fast convergence.

An agent: the "rl-mark" policy CE-marks every arrival with the probability
`FluidState.mark_p` (0 at start: drop-tail), which `rlbm_jax.env.fluid_env.FluidEnv` sets
from a formulation's action every agent interval; that env turns the fluid totals into
the interval record every formulation reads, so `jax.grad` of a return reaches a policy.

Not modelled (the same equations for every value; a parameter of `IGNORES` set on purpose is
refused by simulate.py, a choice other than its default by the manifest):
retransmission timeouts (min_rto_s, max_rto_s, rto_recovery, rto_rearm), HyStart (the default, on, is
accepted: the fluid slow start ends at the first loss, which the long-run averages of
calibration/FLUID.md do not see), PRR's and ECN-CWR's packet-level variants (prr,
prr_ssrb, ecn_cwr), RTT sampling (rtt_samples), the tick's fidelity (pkts_per_tick), the
scheduler (one class), the random start times (replaced by their quantiles), the
dupthresh (losses are detected one RTT after they happen), PIE's updates at discrete instants
(a rate instead) and the re-arming of its burst allowance, CoDel's several drops in one
dequeue (a rate instead), DCTCP's alpha updated once per window of data (per ACK instead, at
the same rate), and the whole packets of the threshold policies' admission (floor of the
threshold: a continuous cap instead).
"""
from rlbm_jax.env.backends.fluid.core import (AQMS, IGNORES, OVERRIDABLE, SHARPNESS, STEPS_PER_RTT, TCPS, Config,
                                              FluidState, Totals, advance, check, configure, ignored, init, limits,
                                              red_prob, refusal, short_flows, step, steps_for, summary, values)

__all__ = ["AQMS", "IGNORES", "OVERRIDABLE", "SHARPNESS", "STEPS_PER_RTT", "TCPS", "Config", "FluidState", "Totals",
           "advance", "check", "configure", "ignored", "init", "limits", "red_prob", "refusal", "short_flows", "step",
           "steps_for", "summary", "values"]
