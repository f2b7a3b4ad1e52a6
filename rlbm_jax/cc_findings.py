"""The fifth seed's findings, each answered with the numbers of both simulators that bear on
it, from committed results only (nothing is run here):

- the benchmark's matrix in JAX (`results/cc_bench/cc_bench.json`, `scripts/cc_bench.py`),
- the learned Orca judged inside ns-3.37 beside its JAX test (`results/orca/ns3/results.json`,
  `scripts/study.py orca ns3`: the same cells and seeds in both),
- the two-flow calibration grids against ns-3.37 (`calibration/results/flows-*/results.json`,
  `calibration/flows.py`: CUBIC, NewReno and BBR with the same per-flow delays in both).

    python -m rlbm_jax.cc_findings          # writes results/cc_bench/FINDINGS.md

The seed's findings: in shallow buffers Orca's aggressiveness costs up to three orders of
magnitude more retransmissions than CUBIC; Aurora fills the buffer where CUBIC does not; and
its questions, friendliness to CUBIC by buffer size and RTT fairness.  Each table says which
simulator and which cells its numbers come from; where no committed ns-3 result covers a
question the page says so.
"""
from __future__ import annotations

import json
import math
import re
import sys
from pathlib import Path

import numpy as np

from rlbm_jax import ccbench
from rlbm_jax.ccbench import _mean

BENCH = "results/cc_bench/cc_bench.json"
ORCA_NS3 = "results/orca/ns3/results.json"
FLOWS = ("calibration/results/flows-10mbps/results.json", "calibration/results/flows-100mbps/results.json",
         "calibration/results/flows-10mbps-bbr/results.json",
         "calibration/results/flows-100mbps-bbr-partial/results.json")
# the benchmark at 10 Mbit/s with each training seed's policy of the chosen recipes (Orca's
# `runs/orca/mlp-quiet`, Aurora's `runs/aurora/mlp`), one folder per training seed
LEARNED = "results/cc_bench/learned"
OUT = "results/cc_bench/FINDINGS.md"
BUFFERS = (0.2, 1.0, 4.0)
# "up to three orders of magnitude": a ratio this large or more counts as the seed's finding
SEED_RETX_RATIO = 10.0
# "fills the buffer where CUBIC does not": Aurora's mean queue this fraction of the buffer above
# CUBIC's in its place, at every buffer size
FILL_MARGIN = 0.2


def _gmean(vals) -> float:
    v = [x for x in vals if x is not None and math.isfinite(x) and x > 0]
    return float(np.exp(np.mean(np.log(v)))) if v else float("nan")


def _f(v, d=2) -> str:
    return "n/a" if v is None or not math.isfinite(v) else f"{v:.{d}f}"


_CFG = re.compile(r"rtt=(\d+)/(\d+)ms B=([\d.]+)BDP vs (\w+)")


def orca_cells(res: dict) -> list[dict]:
    """The Orca judging's configurations: [{name, rtt (agent's, competitor's) ms, buffer_bdp,
    competitor, per policy {sim: {field: mean}}}]."""
    out = []
    for name, per in res["per_config"].items():
        m = _CFG.fullmatch(name)
        if not m:
            raise ValueError(f"{ORCA_NS3}: configuration {name!r} is not 'rtt=A/Bms B=xBDP vs TCP'")
        out.append({"name": name, "rtt": (int(m[1]), int(m[2])), "buffer_bdp": float(m[3]), "competitor": m[4],
                    "per": per})
    return out


def judged_share(c: dict, pol: str, sim: str) -> float:
    """A judged cell's goodput share of `pol`'s flow: its throughput over the two flows' (the
    study's `agent_share` and `competitor_share` are each over the link's capacity)."""
    v = c["per"][pol][sim]
    tot = v["agent_share"] + v["competitor_share"]
    return v["agent_share"] / tot if tot > 0 else float("nan")


def training_seeds(res: dict) -> int:
    """How many training seeds' policies the judging ran (its agent rows)."""
    return len({r["training_seed"] for r in res["ns3"]["rows"] if r["kind"] == "agent"})


def flows_cells(grids: list[dict]) -> dict:
    """{(pair, rate_bps, buffer_bdp, discipline): {"ours": [seed rows], "ns3": [seed rows]}} of
    the calibration grids (each seed row: util_wire, queue_mean_pkts, flows [{share,
    retx_pkts, ...}])."""
    out = {}
    for g in grids:
        for name, c in g["cells"].items():
            _, pair, rate, buf, disc = name.split("/")
            key = (pair, float(rate.replace("mbps", "")) * 1e6, float(buf.replace("bdp", "")), disc)
            out[key] = {"ours": c["ours"]["seeds"], "ns3": c["ns3"]}
    return out


def learned(root: Path) -> list[dict]:
    """The benchmark's learned-agent slices, one per training seed (sorted by folder)."""
    return [json.loads(f.read_text()) for f in sorted((root / LEARNED).glob("seed*/cc_bench.json"))]


def _across(vals) -> tuple[float, float]:
    """Mean and standard error across training seeds."""
    v = [x for x in vals if x is not None and math.isfinite(x)]
    if not v:
        return float("nan"), float("nan")
    return float(np.mean(v)), (float(np.std(v, ddof=1) / math.sqrt(len(v))) if len(v) > 1 else float("nan"))


def _pm(m, e, d=2, prefix="") -> str:
    return "n/a" if not math.isfinite(m) else f"{prefix}{m:.{d}f}" + (f" ± {e:.{d}f}" if math.isfinite(e) else "")


def _learned_rows(slices: list[dict], key: str, protos=("orca", "aurora")) -> list[tuple]:
    """(protocol, [(mean, se) per buffer]) of `ccbench.findings(...)[key]` across the slices."""
    fds = [ccbench.findings(b)[key] for b in slices]
    return [(p, [_across(fd[p].get(b, float("nan")) for fd in fds) for b in BUFFERS]) for p in protos
            if fds and all(p in fd for fd in fds)]


def _flow_mean(rows, k, field) -> float:
    return _mean(r["flows"][k][field] for r in rows if len(r["flows"]) > k)


def _table(rows: list[tuple]) -> list[str]:
    """A markdown table of (label, [entry per buffer]) rows."""
    return (["| protocol, simulator, cells | " + " | ".join(f"{b:g} BDP" for b in BUFFERS) + " |",
             "|---|" + "---:|" * len(BUFFERS)] + [f"| {name} | " + " | ".join(vals) + " |" for name, vals in rows])


def _ns(slices) -> str:
    return f"{len(slices)} training seed{'s' if len(slices) != 1 else ''}"


def _orca(n_train) -> str:
    return f"orca (learned{f', {n_train} training seeds' if n_train else ''})"


def shallow_retx(bench: dict, orca: list[dict], flows: dict, slices: list[dict] = (),
                 n_train: int | None = None) -> tuple[list[str], dict]:
    """Finding 1: retransmissions against CUBIC's by buffer size.  Returns the lines and the
    numbers the verdict reads (`orca_jax`, `orca_ns3`: the learned Orca's loss over CUBIC's
    in its place, per buffer, in its judged cells)."""
    fd = ccbench.findings(bench)["retx_vs_cubic"]
    rows, facts = [], {}
    for p in ("bbr", "newreno"):
        if p in fd:
            rows.append((f"{p}, JAX, the benchmark (every rate and discipline)",
                         [f"x{_f(fd[p].get(b))}" for b in BUFFERS]))
    for p, vals in _learned_rows(slices, "retx_vs_cubic"):
        rows.append((f"{p} (learned, {_ns(slices)}), JAX, the benchmark at 10 Mbit/s",
                     [_pm(m, e, prefix="x") for m, e in vals]))
    for sim, label in (("jax", "JAX"), ("ns3", "ns-3.37")):
        vals = []
        for b in BUFFERS:
            cs = [c for c in orca if c["competitor"] == "cubic" and c["buffer_bdp"] == b and c["rtt"][0] == c["rtt"][1]]
            vals.append(_gmean(c["per"]["agent"][sim]["agent_loss"] / c["per"]["cubic"][sim]["agent_loss"]
                               for c in cs if c["per"]["cubic"][sim]["agent_loss"] > 0))
        facts[f"orca_{sim}"] = vals
        rows.append((f"{_orca(n_train)}, {label}, its judged cells (retransmitted fraction over CUBIC's in its "
                     "place)", [f"x{_f(v)}" for v in vals]))
    for sim, label in (("ours", "JAX"), ("ns3", "ns-3.37")):
        vals = []
        for b in BUFFERS:
            r = [(_flow_mean(flows[k][sim], 0, "retx_pkts") + 1)
                 / (_flow_mean(flows[("cubic-cubic",) + k[1:]][sim], 0, "retx_pkts") + 1)
                 for k in flows if k[0] == "bbr-cubic" and k[2] == b and ("cubic-cubic",) + k[1:] in flows]
            vals.append(_gmean(r))
        rows.append((f"bbr, {label}, the calibration grid", [f"x{_f(v)}" for v in vals]))
    lines = ["## 1. Retransmissions in shallow buffers", "",
             "The seed: in shallow buffers Orca's aggressiveness costs up to three orders of magnitude more "
             "retransmissions than CUBIC. Each entry: the protocol's retransmissions against one CUBIC competitor "
             "over CUBIC's own against CUBIC in the same cells (geometric mean over the cells at equal base RTTs; "
             "> 1: more than CUBIC): in the benchmark, of (retransmissions + 1) per cell, as its summary takes it; in "
             "the calibration grid, of (the seeds' mean + 1); in the judged cells, of the retransmitted fraction of "
             "the flow's transmissions. The judged cells are Orca's test cells at 10 Mbit/s, drop-tail (3 test seeds, "
             "the same in both simulators); the calibration grid's are 10 and 100 Mbit/s, drop-tail and FQ-CoDel "
             "(10 seeds, 5 at 100 Mbit/s for BBR).", ""] + _table(rows)
    j, n = facts["orca_jax"][0], facts["orca_ns3"][0]
    holds = lambda v: math.isfinite(v) and v >= SEED_RETX_RATIO  # noqa: E731
    verdict = ("holds in both simulators" if holds(j) and holds(n) else
               "holds in neither simulator" if not holds(j) and not holds(n) else
               "holds in one simulator only")
    lines += ["", f"**The learned Orca at 0.2 BDP retransmits x{_f(j)} what CUBIC does in its place in JAX and "
              f"x{_f(n)} in ns-3.37: the seed's finding (x{SEED_RETX_RATIO:g} or more) {verdict}.**"]
    aur = dict(_learned_rows(slices, "retx_vs_cubic", ("aurora",))).get("aurora")
    if aur:
        m = aur[0][0]
        lines += [f"The learned Aurora at 0.2 BDP retransmits x{_f(m, 0)} CUBIC's in JAX (10 Mbit/s): "
                  + (f"the orders of magnitude the seed saw for Orca are Aurora's here (x{SEED_RETX_RATIO:g} or more)"
                     if holds(m) else f"below x{SEED_RETX_RATIO:g}, as Orca's")
                  + "; ns-3.37 has no Aurora judging to say."]
    return lines, facts


def friendliness(bench: dict, orca: list[dict], flows: dict, slices: list[dict] = (),
                 n_train: int | None = None) -> list[str]:
    """Friendliness to CUBIC: each protocol's goodput share against one CUBIC flow, by buffer."""
    fd = ccbench.findings(bench)["share_vs_cubic"]
    rows = [(f"{p}, JAX, the benchmark (every rate and discipline)", [_f(fd[p].get(b)) for b in BUFFERS])
            for p in ("cubic", "newreno", "bbr") if p in fd]
    rows += [(f"{p} (learned, {_ns(slices)}), JAX, the benchmark at 10 Mbit/s", [_pm(m, e) for m, e in vals])
             for p, vals in _learned_rows(slices, "share_vs_cubic")]
    for sim, label in (("jax", "JAX"), ("ns3", "ns-3.37")):
        for pol, name in (("agent", _orca(n_train)), ("cubic", "cubic in its place")):
            rows.append((f"{name}, {label}, Orca's judged cells",
                         [_f(_mean(judged_share(c, pol, sim) for c in orca if c["competitor"] == "cubic"
                                   and c["buffer_bdp"] == b and c["rtt"][0] == c["rtt"][1]))
                          for b in BUFFERS]))
    for sim, label in (("ours", "JAX"), ("ns3", "ns-3.37")):
        rows.append((f"bbr, {label}, the calibration grid",
                     [_f(_mean(_flow_mean(flows[k][sim], 0, "share") for k in flows
                               if k[0] == "bbr-cubic" and k[2] == b))
                      for b in BUFFERS]))
    return ["## 2. Friendliness to CUBIC, by buffer size", "",
            "The protocol's share of the two flows' goodput against one CUBIC flow at equal base RTTs (0.5: an even "
            "split; in the judged cells, its throughput over the two flows', from each cell's means).",
            ""] + _table(rows)


def rtt_fairness(bench: dict, orca: list[dict], flows: dict, slices: list[dict] = ()) -> list[str]:
    """RTT fairness: the short-RTT flow's share against a long-RTT one."""
    fd = ccbench.findings(bench)["rtt_ratio"]
    lr = [(p, _across(ccbench.findings(b)["rtt_ratio"].get(p, float("nan")) for b in slices))
          for p in ("orca", "aurora")] if slices else []
    lines = ["## 3. RTT fairness", "",
             "Two copies of a protocol at unequal base RTTs, 10 ms against 200 ms: the short copy's goodput over the "
             "long one's (JAX, the benchmark; mean over buffers, rates and disciplines): "
             + ", ".join(f"{p} {_f(fd[p])}" for p in ("cubic", "newreno", "bbr") if p in fd)
             + ("; learned, at 10 Mbit/s: " + ", ".join(f"{p} {_pm(m, e)}" for p, (m, e) in lr) if lr else "") + ".",
             "", "Against ns-3.37 (the calibration grid: two CUBIC flows, 20 ms against 60 ms, at 10 and 100 Mbit/s, "
             "10 seeds; the 20 ms flow's share, JAX / ns-3.37):", "",
             "| discipline | " + " | ".join(f"{b:g} BDP" for b in BUFFERS) + " |", "|---|" + "---:|" * len(BUFFERS)]
    for disc in sorted({k[3] for k in flows if k[0] == "cubic-rtt"}):
        cells = []
        for b in BUFFERS:
            ks = [k for k in flows if k[0] == "cubic-rtt" and k[2] == b and k[3] == disc]
            cells.append(" / ".join(_f(_mean(_flow_mean(flows[k][s], 0, "share") for k in ks))
                                    for s in ("ours", "ns3")))
        lines.append(f"| {disc} | " + " | ".join(cells) + " |")
    lines += ["", "The learned Orca against one CUBIC flow at unequal base RTTs (its judged cells: the agent's "
              "throughput over the two flows', JAX / ns-3.37; CUBIC in the agent's place beside it):", "",
              "| agent's RTT | " + " | ".join(f"{b:g} BDP" for b in BUFFERS) + " |", "|---|" + "---:|" * len(BUFFERS)]
    for rtt in ((10, 200), (200, 10)):
        cells = []
        for b in BUFFERS:
            cs = [c for c in orca if c["competitor"] == "cubic" and c["rtt"] == rtt and c["buffer_bdp"] == b]
            g = lambda pol, s: _mean(judged_share(c, pol, s) for c in cs)  # noqa: E731
            cells.append(f"{_f(g('agent', 'jax'))} / {_f(g('agent', 'ns3'))} (cubic {_f(g('cubic', 'jax'))} / "
                         f"{_f(g('cubic', 'ns3'))})")
        lines.append(f"| {rtt[0]} ms against {rtt[1]} ms | " + " | ".join(cells) + " |")
    return lines


def _queue_fraction(bench: dict, p: str, b: float) -> float:
    """Mean queue over the buffer of protocol p against one CUBIC flow at equal base RTTs
    (drop-tail and CoDel)."""
    cs = [r for r in ccbench.select(bench["cells"], protocol=p, buffer_bdp=b) if r["flows"][1] == "cubic"
          and r["rtt_s"][0] == r["rtt_s"][1] and r["aqm"] != "fq-codel"]
    return _mean(r["queue_mean_pkts"]["mean"] / max(_buffer_pkts(r), 1) for r in cs)


def aurora_buffer(bench: dict, slices: list[dict] = ()) -> list[str]:
    """Finding 2: Aurora fills the buffer where CUBIC does not (JAX only)."""
    rows = [(f"{p}, JAX, the benchmark (every rate)", [_f(_queue_fraction(bench, p, b)) for b in BUFFERS])
            for p in ("cubic", "bbr")]
    verdict = []
    if slices:
        # CUBIC's rows are the same runs in every slice (no policy drives them): one value
        rows.append(("cubic, JAX, the benchmark at 10 Mbit/s", [_f(_queue_fraction(slices[0], "cubic", b))
                                                                for b in BUFFERS]))
        for p in ("aurora", "orca"):
            rows.append((f"{p} (learned, {_ns(slices)}), JAX, the benchmark at 10 Mbit/s",
                         [_pm(*_across(_queue_fraction(s, p, b) for s in slices)) for b in BUFFERS]))
        a = [_across(_queue_fraction(s, "aurora", b) for s in slices)[0] for b in BUFFERS]
        c = [_queue_fraction(slices[0], "cubic", b) for b in BUFFERS]
        fills = all(x >= y + FILL_MARGIN for x, y in zip(a, c))
        verdict = ["", f"**The learned Aurora holds the queue at {', '.join(_f(x) for x in a)} of the buffer (0.2, 1, "
                   f"4 BDP) against CUBIC's {', '.join(_f(x) for x in c)} in CUBIC's place: the seed's finding "
                   f"{'holds' if fills else 'does not hold'} in JAX (it holds where Aurora's queue is at least "
                   f"{FILL_MARGIN:g} of the buffer above CUBIC's at every size); ns-3.37 cannot say here.**"]
    return ["## 4. Aurora fills the buffer", "",
            "The seed: Aurora fills the buffer where CUBIC does not. The mean queue as a fraction of the buffer, "
            "each protocol against one CUBIC flow at equal base RTTs, drop-tail and CoDel (FQ-CoDel's queue is per "
            "flow):", ""] + _table(rows) + verdict + [
            "", "No committed ns-3.37 judging of Aurora: a rate sender that floods its buffer makes each ns-3 run take "
            "minutes (docs/BENCHMARKS.md, \"Judging a sender study inside ns-3.37\"), so this finding is JAX's alone."]


def _buffer_pkts(row) -> float:
    """The buffer (packets) of a benchmark row's run."""
    key = ((row["flows"][0], row["rtt_s"][0]), (row["flows"][1], row["rtt_s"][1]), row["buffer_bdp"],
           row["rate_bps"], row["aqm"])
    return float(ccbench.run_kw(key)["buffer_per_class_pkts"])


def _seed_roles(slices: list[dict]) -> str:
    """Whether the learned slices' simulator seeds are held out from the agents' studies (a
    line for the page)."""
    from rlbm_jax.study import get

    seeds = sorted({s for b in slices for s in b["seeds"]})
    owned = {n: [s for s in seeds if s in get(n).seeds.train] for n in ("orca", "aurora")}
    if not any(owned.values()):
        return f"- The learned slices ran simulator seeds {seeds}, outside the agents' studies' training seeds."
    return (f"- The learned slices ran simulator seeds {seeds}, which lie in the agents' studies' training range "
            f"(orca: {owned['orca']}, aurora: {owned['aurora']}): they describe what the policies do, not a held-out "
            "test. The held-out verdicts are the studies' (results/orca, results/aurora, on test seeds no run had "
            "used) and Orca's judged cells here (the study's test seeds, in both simulators).")


def render(root: Path | str = ".") -> str:
    """The findings page from the committed results under `root`."""
    root = Path(root)
    bench = json.loads((root / BENCH).read_text())
    judged = json.loads((root / ORCA_NS3).read_text())
    orca, n_train = orca_cells(judged), training_seeds(judged)
    flows = flows_cells([json.loads((root / f).read_text()) for f in FLOWS])
    slices = learned(root)
    pols = sorted({(s["config"]["policies"]["orca"], s["config"]["policies"]["aurora"]) for s in slices})
    head = ["# The seed's findings, in JAX and in ns-3.37", "",
            f"`python -m rlbm_jax.cc_findings`, from committed results only: the benchmark's matrix ({BENCH}; "
            f"{len(bench['cells'])} cells x {len(bench['seeds'])} seeds; the baselines' rows), its 10 Mbit/s "
            f"slice with each learned policy ({LEARNED}/seed*: "
            + ("; ".join(f"orca {o}, aurora {a}" for o, a in pols) if pols else "none committed")
            + f"), the learned Orca judged inside ns-3.37 beside its JAX test ({ORCA_NS3}) and the two-flow "
            "calibration grids (" + ", ".join(FLOWS) + "). Learned rows: mean ± standard error across training "
            "seeds.", ""]
    r1, _ = shallow_retx(bench, orca, flows, slices, n_train)
    body = (r1 + [""] + friendliness(bench, orca, flows, slices, n_train) + [""]
            + rtt_fairness(bench, orca, flows, slices)
            + [""] + aurora_buffer(bench, slices))
    tail = ["", "## Where the model cannot say", "", _seed_roles(slices),
            "- Retransmissions: the calibration grids agree on them in few cells (calibration/REPORT.md, section 7): "
            "ns-3.37's CUBIC holds a deeper standing queue and retransmits about twice as often as ours, and BBR "
            "differs most (ns-3.37's TcpBbr yields to CUBIC where ours takes most of the link); a retransmission "
            "ratio here is a direction, not a measurement to a factor of two.",
            "- The learned agents were trained at 10 Mbit/s (Orca) and 300 packets/s (Aurora); the learned rows are "
            "the benchmark's 10 Mbit/s slice, in JAX only; inside ns-3.37 only Orca's judged cells.",
            "- Aurora has no committed ns-3.37 judging (section 4)."]
    return "\n".join(head + body + tail) + "\n"


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    root = Path(argv[0]) if argv else Path(".")
    text = render(root)
    (root / OUT).write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
