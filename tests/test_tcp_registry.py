"""The TCP registry (`rlbm_jax.env.tcp`): every variant in its own module behind one
interface, the shared sender in `core`.  Checked here: the registry is what every
consumer reads (ids, the flow table's columns, params, the native refusal); a run of one
variant never writes another's columns; and a new variant is one module plus one line
in `variants.py`: added so to a copy of the package, it runs, reacts to losses as its
module says, and leaves the runs of the registered variants bit for bit unchanged."""
import json
import textwrap
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlbm_jax.env import backends, metrics as mx, model, sim, tcp
from rlbm_jax.env.backends import native
from rlbm_jax.env.params import make_params, stack_params
from rlbm_jax.scenarios import long_flow_params
from tests.conftest import copy_package, run_in_copy


ROOT = Path(__file__).resolve().parents[1]
TICKS = 60000  # 4.8 s at 100 Mbit/s (80 us ticks)


def test_the_registry_is_what_params_the_table_and_native_read():
    assert tcp.TCP_NAMES == tuple(v.name for v in tcp.VARIANTS) == ("newreno", "cubic", "dctcp", "bbr", "rate")
    cols = set(tcp.INT_FIELDS) | set(tcp.FLOAT_FIELDS)
    assert len(cols) == len(tcp.INT_FIELDS) + len(tcp.FLOAT_FIELDS)  # no column twice
    assert set(tcp.FlowState.__dataclass_fields__) == cols
    for i, v in enumerate(tcp.VARIANTS):
        assert set(v.fields.names()) <= cols
        assert set(v.fields.bools) <= set(tcp.BOOL_FIELDS) and set(v.fields.floats) <= set(tcp.FLOAT_FIELDS)
        p = make_params(tcp=v.name)
        assert int(p.tcp_id) == i and tcp.by_name(v.name) is v
        assert bool(p.ecn) == v.ecn_always  # DCTCP turns ECN on by itself
        assert bool(p.needs_jax_tick) == (not v.native) == (f"tcp={v.name}" in model.missing("native", p))
    # optional columns (BBR's, and the shared ones a model choice asks for: rtt_clock's echo,
    # sack_credit's bank) come last: a table without them is a prefix of the full one
    opt = ([n for v in tcp.VARIANTS if v.optional_columns for n in v.fields.names()]
           + [n for _, cols in tcp.flows.OPTIONAL_SHARED for n in cols])
    assert {"echo_enq", "sack_bank"} <= set(opt)
    assert opt and set(opt) == set(tcp.INT_FIELDS[len(tcp.BASE_INT_FIELDS):] + tcp.FLOAT_FIELDS[len(tcp.BASE_FLOAT_FIELDS):])
    assert tcp.INT_FIELDS[:len(tcp.BASE_INT_FIELDS)] == tcp.BASE_INT_FIELDS
    assert tcp.FLOAT_FIELDS[:len(tcp.BASE_FLOAT_FIELDS)] == tcp.BASE_FLOAT_FIELDS
    with pytest.raises(ValueError, match="registered: newreno, cubic, dctcp, bbr, rate"):
        tcp.by_name("vegas")
    with pytest.raises(ValueError, match="tcp"):
        make_params(tcp="vegas")
    # the native refusal names the variants the registry marks as not native
    p = make_params(tcp="newreno").replace(tcp_id=jnp.asarray(tcp.DCTCP, jnp.int32))
    with pytest.raises(ValueError, match="the native backend does not implement tcp=dctcp"):
        native.check_params(p)
    assert "TCP_cubic" in native.layout_header() and "TCP_NATIVE[] = {true, true, false, false, false}" in native.layout_header()


def test_a_run_writes_only_its_own_variants_columns():
    """NewReno, CUBIC, DCTCP, BBR and the rate sender batched in one vmap over 16 long flows
    into a 0.25-BDP buffer (RED marking for DCTCP; the rate senders at 10 Mbit/s each, 1.6x the
    link): each run's own columns move, the others' stay at their initial values in every slot."""
    configs = [long_flow_params(16, 0.25, tcp="newreno"), long_flow_params(16, 0.25, tcp="cubic"),
               long_flow_params(16, 0.25, tcp="dctcp", policy="red", red_min_th_pkts=5.0,
                                red_max_th_pkts=15.0), long_flow_params(16, 0.25, tcp="bbr"),
               long_flow_params(16, 0.25, tcp="rate", sender_rate_bps=10e6)]
    stacked = stack_params(configs)
    keys = jax.random.split(jax.random.PRNGKey(3), len(configs))
    state = jax.jit(jax.vmap(lambda k, p: backends.run(sim.init(k, p), p, TICKS, backend="jax")[0]))(keys, stacked)
    fresh = tcp.init_flows(configs[0].num_flow_slots)
    for i, v in enumerate(tcp.VARIANTS):
        fl = tcp.unpack(jax.tree.map(lambda x: x[i], state.flows))
        assert int(jnp.sum(state.metrics.drop_total[i]) + jnp.sum(state.metrics.mark_total[i])) > 0, v.name
        for other in tcp.VARIANTS:
            if other is v:
                continue
            for name in other.fields.names():
                np.testing.assert_array_equal(np.asarray(getattr(fl, name)), np.asarray(getattr(fresh, name)),
                                              err_msg=f"{v.name} run wrote {other.name}'s column {name}")
    cub = tcp.unpack(jax.tree.map(lambda x: x[tcp.CUBIC], state.flows))
    assert float(jnp.max(cub.w_max)) > 0 and int(jnp.max(cub.epoch_start)) > 0
    dct = tcp.unpack(jax.tree.map(lambda x: x[tcp.DCTCP], state.flows))
    alpha = np.asarray(dct.dctcp_alpha)
    assert np.all((alpha > 0) & (alpha < 1))  # moved from 1 towards the marked fraction
    bb = tcp.unpack(jax.tree.map(lambda x: x[tcp.BBR], state.flows))
    assert int(jnp.min(bb.bbr_round)) > 10 and bool(jnp.all(bb.bbr_filled))
    rt = tcp.unpack(jax.tree.map(lambda x: x[tcp.RATE], state.flows))
    np.testing.assert_allclose(np.asarray(rt.rate_pps), 10e6 / (8 * float(configs[-1].mss_bytes)), rtol=1e-6)


# Scalable TCP as ns-3.37's TcpScalable: +1 segment per min(cwnd, 50) segments ACKed in
# congestion avoidance, ssthresh = max(2, (1 - 0.125) cwnd) after a loss.
SCALABLE = '''
"""Scalable TCP (ns-3.37 TcpScalable)."""
import jax.numpy as jnp

from rlbm_jax.env.tcp.variant import Fields, Variant


class Scalable(Variant):
    def ssthresh(self, fl, flight, params):
        return jnp.maximum(2.0, jnp.floor(fl.cwnd * 0.875)), {}

    def increase_window(self, fl, segs, calls, t, params, tick_s):
        w = jnp.minimum(jnp.maximum(jnp.floor(fl.cwnd), 1.0), 50.0)
        bank = fl.scalable_ack_cnt + segs
        steps = jnp.floor(bank.astype(jnp.float32) / w)
        return fl.cwnd + steps, {"scalable_ack_cnt": bank - (steps * w).astype(jnp.int32)}


VARIANT = Scalable(name="scalable", counts_segments=True, fields=Fields(ints={"scalable_ack_cnt": 0}))
'''

RUN = '''
import json, sys
import jax, jax.numpy as jnp, numpy as np
from rlbm_jax.env import backends, metrics as mx, sim, tcp
from rlbm_jax.env.params import make_params
from rlbm_jax.scenarios import long_flow_params
out = {"names": list(tcp.TCP_NAMES)}
for name in ("newreno", "scalable"):
    p = long_flow_params(1, 0.25, tcp=name)
    s = jax.jit(lambda k: backends.run(sim.init(k, p), p, %d, backend="auto")[0])(jax.random.PRNGKey(1))
    fl = tcp.unpack(s.flows)
    out[name] = {"util": float(mx.summarize(s.metrics, p)["util_wire"]), "drops": int(jnp.sum(s.metrics.drop_total)),
                 "cwnd": np.asarray(fl.cwnd).tolist(), "ack_cnt": np.asarray(fl.scalable_ack_cnt).tolist(),
                 "ssthresh": np.asarray(fl.ssthresh).tolist(), "needs_jax": bool(p.needs_jax_tick)}
print(json.dumps(out))
''' % TICKS


def test_a_new_variant_is_one_module_and_one_line(tmp_path):
    pkg = copy_package(tmp_path)
    (pkg / "env" / "tcp" / "scalable.py").write_text(SCALABLE)
    reg = pkg / "env" / "tcp" / "variants.py"
    text = reg.read_text()
    assert "VARIANTS = (newreno.VARIANT, cubic.VARIANT, dctcp.VARIANT, bbr.VARIANT, rate.VARIANT)" in text
    reg.write_text(text + "\nfrom rlbm_jax.env.tcp import scalable  # noqa: E402\n"
                   "VARIANTS = VARIANTS + (scalable.VARIANT,)\nTCP_NAMES = tuple(v.name for v in VARIANTS)\n")
    out = json.loads(run_in_copy(tmp_path, textwrap.dedent(RUN)).strip().splitlines()[-1])
    assert out["names"] == ["newreno", "cubic", "dctcp", "bbr", "rate", "scalable"]
    sc, nr = out["scalable"], out["newreno"]
    assert sc["needs_jax"] and sc["drops"] > 0
    # its own counter stays below the segments one increment takes, min(cwnd, 50)
    assert all(0 <= c < min(w, 50) for c, w in zip(sc["ack_cnt"], sc["cwnd"]))
    assert all(c == 0 for c in nr["ack_cnt"])  # NewReno never writes it
    # one flow into a 0.25-BDP buffer: cut to 0.875 x (1.25 BDP) > BDP, Scalable keeps the
    # link busy after its first loss (slow start's losses aside); NewReno's cut to half the flight (0.625 BDP) idles
    # the link for about 190 round trips of +1 segment each
    assert sc["util"] > nr["util"] + 0.1, (sc["util"], nr["util"])  # 0.91 against 0.79
    # the registered variants' runs are unchanged by the addition, bit for bit
    p = long_flow_params(1, 0.25, tcp="newreno")
    s = jax.jit(lambda k: backends.run(sim.init(k, p), p, TICKS, backend="auto")[0])(jax.random.PRNGKey(1))
    assert np.asarray(tcp.unpack(s.flows).cwnd).tolist() == nr["cwnd"]
    assert int(jnp.sum(s.metrics.drop_total)) == nr["drops"]
    assert float(mx.summarize(s.metrics, p)["util_wire"]) == nr["util"]
