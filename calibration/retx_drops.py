"""Which of our retransmissions the bottleneck drops, by the sender's state when it sent them.

ns-3.37 reports only how many retransmissions reached the switch and how many it dropped
(`retx_arrivals`, `retx_drops`, from the scenario's per-flow highest sequence).  This
looks inside our tick (`sim.tick_phases`) over a calibration cell's measured window and
splits what our senders resend:

- by the sender's state when it sent them: OPEN, RECOVERY (fast recovery), LOSS (after a
  timeout; go-back-N resends of packets that were still in flight are listed apart), CWR;
- in fast recovery, by how many retransmissions the flow sent in one tick, and how much
  room the buffer had at the tick's start.

Only drops at enqueue (the buffer's limit, an enqueue AQM) are split; drops by a dequeue
AQM (CoDel) are counted in total.  It is what found that RFC 6937's reduction bound sends
two retransmissions per duplicate ACK into a full queue where ns-3.37 sends one
(`prr_ssrb`, calibration/REPORT.md section 6):

    python calibration/retx_drops.py --cells 'aqm/pie/noecn/cubic/websearch' --set policy=droptail \\
        --set hystart=false
    python calibration/retx_drops.py --cells 'aqm/pie/noecn/cubic/websearch' --set policy=droptail \\
        --set hystart=false --prr-ssrb ns-3.37
"""
from __future__ import annotations

import argparse
import dataclasses
import re
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import run as cal  # noqa: E402  (calibration/run.py: grids, cells, --set)

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from rlbm_jax.cli import add_model_args, model_kw  # noqa: E402
from rlbm_jax.env import sim  # noqa: E402
from rlbm_jax.env.params import make_params, pad_params, stack_params  # noqa: E402
from rlbm_jax.env.tcp.variant import CWR, LOSS, OPEN, RECOVERY  # noqa: E402
from rlbm_jax.ns3.harness import seed_kw  # noqa: E402

STATES = (("OPEN", OPEN), ("RECOVERY", RECOVERY), ("LOSS", LOSS), ("CWR", CWR))
BURST = 4  # retransmissions per flow and tick: 1, 2, 3, 4 or more
ROOM = 4  # free buffer places at the tick's start: 0, 1, 2, 3 or more


def _counts(ph: sim.Phases, state: sim.SimState, params) -> dict:
    """One tick's counts (ungated; the caller gates them by the warm-up)."""
    st = ph.arr.flows.state  # [E] each event flow's state when it sends
    tx, adm = ph.tx, ph.adm
    retx_drop = tx.retx_pkts - adm.retx_admitted_pkts
    spur_drop = tx.spur_pkts - adm.spur_admitted_pkts
    by_state = jnp.stack([jnp.stack([jnp.sum(jnp.where(st == code, x, 0)) for x in
                                     (tx.retx_pkts, retx_drop, tx.spur_pkts, spur_drop)])
                          for _, code in STATES])  # [4 states, 4]
    rec = (st == RECOVERY) & (tx.retx_pkts > 0)
    b = jnp.minimum(tx.retx_pkts, BURST) - 1
    burst = jnp.zeros((BURST, 3), jnp.int32)
    burst = burst.at[b, 0].add(rec.astype(jnp.int32)).at[b, 1].add(jnp.where(rec, tx.retx_pkts, 0))
    burst = burst.at[b, 2].add(jnp.where(rec, retx_drop, 0))
    free = jnp.minimum(jnp.maximum(params.buffer_pkts - jnp.sum(state.queue.pkts), 0), ROOM)
    room = jnp.zeros((ROOM + 1, 2), jnp.int32)
    room = room.at[free, 0].add(jnp.sum(jnp.where(rec, tx.retx_pkts, 0)))
    room = room.at[free, 1].add(jnp.sum(jnp.where(rec, retx_drop, 0)))
    return {"by_state": by_state, "burst": burst, "room": room, "dequeue_drops": ph.dep.retx_drops_pkts}


def measure(cell: cal.Cell, seeds: list[int]) -> dict:
    """The counts over the cell's measured window, summed over `seeds`, and our metrics'
    own retransmission totals (a check: the split adds up to them)."""
    ps = pad_params([make_params(**seed_kw(cell, s)) for s in seeds])
    batch = stack_params(ps)
    keys = jnp.stack([jax.random.PRNGKey(int(s)) for s in seeds])
    n_ticks = sim.ticks_for(cell.seconds, ps[0])

    def one(key, p):
        s0 = sim.init(key, p)
        zero = jax.tree.map(jnp.zeros_like, jax.eval_shape(lambda: _counts(sim.tick_phases(s0, p)[1], s0, p)))

        def body(carry, _):
            s, acc = carry
            s2, ph = sim.tick_phases(s, p)
            warm = (ph.clk.now_s >= p.warmup_s).astype(jnp.int32)
            acc = jax.tree.map(lambda a, x: a + warm * x, acc, _counts(ph, s, p))
            return (s2, acc), None

        (s, acc), _ = jax.lax.scan(body, (s0, zero), None, length=n_ticks)
        return acc, s.metrics.retx_arrive_warm, s.metrics.retx_drop_warm

    acc, arrive, drop = jax.jit(jax.vmap(one))(keys, batch)
    out = {k: np.asarray(v).sum(axis=0) for k, v in acc.items()}
    out["retx_arrivals"], out["retx_drops"] = int(np.sum(arrive)), int(np.sum(drop))
    return out


def report(name: str, c: dict) -> str:
    lines = [f"== {name}", f"retransmissions at the switch {c['retx_arrivals']}, dropped {c['retx_drops']}"
             f" (at a dequeue AQM: {int(c['dequeue_drops'])})", "",
             "| sender's state | retransmissions | dropped | go-back-N resends | dropped |", "|---|---:|---:|---:|---:|"]
    for (label, _), row in zip(STATES, c["by_state"]):
        lines.append(f"| {label} | " + " | ".join(str(int(x)) for x in row) + " |")
    lines += ["", "fast recovery, retransmissions one flow sent in one tick:", "",
              "| per tick | flow-ticks | retransmissions | dropped |", "|---|---:|---:|---:|"]
    for i, row in enumerate(c["burst"]):
        lines.append(f"| {i + 1}{'+' if i + 1 == BURST else ''} | " + " | ".join(str(int(x)) for x in row) + " |")
    lines += ["", "fast recovery, by the buffer's free places at the tick's start:", "",
              "| free places | retransmissions | dropped |", "|---|---:|---:|"]
    for i, row in enumerate(c["room"]):
        lines.append(f"| {i}{'+' if i == ROOM else ''} | " + " | ".join(str(int(x)) for x in row) + " |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--grid", default="aqm", choices=list(cal.GRIDS))
    ap.add_argument("--cells", required=True, help="regular expression over the grid's cell names")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--first-seed", type=int, default=1)
    ap.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                    help="a make_params argument for every chosen cell (as calibration/run.py's --set)")
    add_model_args(ap)
    args = ap.parse_args(argv)
    if args.seeds < 1:
        ap.error("--seeds must be >= 1")
    try:
        pattern = re.compile(args.cells)
    except re.error as e:
        ap.error(f"--cells: {e}")
    cells = [c for c in cal.grid(args.grid) if pattern.search(c.name)]
    if not cells:
        ap.error(f"--cells {args.cells!r} matches none of grid {args.grid!r}'s cells")
    extra = {**cal.parse_sets(args.set, ap), **model_kw(args)}
    seeds = list(range(args.first_seed, args.first_seed + args.seeds))
    for c in cells:
        c = dataclasses.replace(c, kw={**c.kw, **extra})
        counts = measure(c, seeds)
        split = int(np.sum(counts["by_state"][:, [1, 3]])) + int(counts["dequeue_drops"])
        if split != counts["retx_drops"]:  # every dropped resend is in exactly one row
            raise SystemExit(f"{c.name}: the split counts {split} dropped resends, the metrics {counts['retx_drops']}")
        print(report(f"{c.name}, seeds {seeds[0]}..{seeds[-1]}" + (f", {extra}" if extra else ""), counts))
        print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
