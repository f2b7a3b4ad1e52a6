"""The declared model (`rlbm_jax.env.model`) and the backends behind it: every parameter
declared once and honoured everywhere it is named, every model choice run by a backend that
equals the reference or refused by that backend with its name, and the command-line flags
reaching the params they name.  The enumerations read the declaration, so a new choice or
parameter is covered without editing this file."""
import json
import math
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlbm_jax import scenarios
from rlbm_jax import cli
from rlbm_jax.cli import simulate as sim_cli, train as train_cli
from rlbm_jax.env import backends, model, sim, tcp, traffic
from rlbm_jax.env.backends import native
from rlbm_jax.env.params import (SimParams, choices_of, config_record, make_params, rederive, stack_params,
                                 unrecorded_choices)
from rlbm_jax.simulate import with_policy
from tests.conftest import copy_package, other_value, run_in_copy

pytestmark = pytest.mark.quick  # the whole file is in the quick tier

ROOT = Path(__file__).resolve().parents[1]
TICKS = 4000

# a small, busy configuration every choice is tried on (short flows at a high load, two
# long flows, a buffer that overflows)
BASE = dict(num_senders=4, num_classes=2, num_flow_slots=12, queue_capacity_pkts=60, delay_line_ticks=80,
            completion_log_size=64, buffer_per_class_pkts=[20, 30], load=1.1, long_flows=2, min_rto_s=0.01,
            class_threshold_bytes=5e4)


# the context a backend with limits beyond its choices (`Backend.limits`) claims its values in
SCENARIO_BASE = {"fluid": dict(num_classes=1, long_flows=4, load=0.0, policy="red", tcp="newreno")}


def _with(name, value, base=None) -> dict:
    """BASE (or `base`) with one choice set; a value that needs company gets it (a
    marking-only policy needs ECN senders)."""
    kw = {**(BASE if base is None else base), name: value}
    if name == "policy" and value == "rl-mark":
        kw["ecn"] = True
    return kw


def _text(v):
    return str(v).lower() if isinstance(v, bool) else str(v)


def test_every_make_params_field_is_declared_once():
    p = make_params()
    fields = set(SimParams.__dataclass_fields__)
    declared = {q.field for q in model.PARAMS if q.field} | {q.group_leaf for q in model.PER_GROUP}
    # every leaf and static field is set by exactly one declared parameter (a per-group one sets
    # its first group's and its groups' leaves), bar the tables' (the flow sizes', the capacity
    # schedule's: `model.TABLE_LEAVES`) and the static record of choices
    assert fields - declared == {*(f for leaves in model.TABLE_LEAVES.values() for f in leaves), "model_choices"}
    assert declared <= fields
    assert len({q.name for q in model.PARAMS}) == len(model.PARAMS)
    assert len({q.option for q in model.PARAMS}) == len(model.PARAMS)
    for q in model.PARAMS:
        assert q.group in model.GROUPS and q.kind in model.KINDS and q.doc
        assert q.static == (q.field in p.__dataclass_fields__ and not
                            p.__dataclass_fields__[q.field].metadata.get("pytree_node", True))
        if q.default is not None:
            q.check(q.default)  # the declared default is allowed
        else:
            assert q.derived, f"{q.name}: a derived default says how it is derived"
    assert p.model_choices == tuple((c.name, c.default) for c in model.CHOICES)
    with pytest.raises(ValueError, match="unknown parameter 'lod'; did you mean 'load'"):
        make_params(lod=0.5)


@pytest.mark.parametrize("name", [q.name for q in model.PARAMS if q.kind in ("float", "int")])
def test_bad_numbers_are_refused_by_name(name):
    """inf, nan and out-of-range values of every numeric parameter fail with its name."""
    q = model.BY_NAME[name]
    bad = [math.nan, "x"] + ([] if q.allow_inf else [math.inf])
    if q.lo is not None:
        bad.append(q.lo - 1 if not q.lo_open else q.lo)
    if q.hi is not None:
        bad.append(q.hi + 1 if not q.hi_open else q.hi)
    if q.kind == "int":
        bad.append(1.5)
    for v in bad:
        with pytest.raises(ValueError, match=name):
            make_params(**{**BASE, name: v})


def test_every_choice_value_runs_or_is_refused_by_name():
    """For every declared choice and value, on every backend: the backend claims it (then
    the equivalence test below runs it) or `backends.resolve` refuses it naming
    `name=value`, and so does the native kernel itself when the Python check is skipped."""
    claimed = 0
    for c in model.CHOICES:
        for v in c.values():
            p = make_params(**_with(c.name, v))
            assert (c.name, v) in p.model_choices
            for b in backends.BACKENDS:
                if v in c.implemented(b):
                    if b in SCENARIO_BASE:  # a backend of a narrower scenario: its own context
                        p = make_params(**_with(c.name, v, SCENARIO_BASE[b]))
                    assert backends.resolve(b, p) == b
                    claimed += 1
                    continue
                with pytest.raises(ValueError, match=f"the {b} backend does not implement .*{c.name}={_text(v)}"):
                    backends.resolve(b, p)
                assert backends.resolve("auto", p) != b
    assert claimed > len(model.CHOICES)


def _split(state):
    leaves = native.state_leaves(state)
    return ({n: np.asarray(x) for n, x in leaves if x.dtype != jnp.float32},
            {n: np.asarray(x) for n, x in leaves if x.dtype == jnp.float32})


# two configurations every claimed choice is run in, built so that each value changes the
# reference's run in at least one of them (so that the comparison tests it): long flows
# against a shared buffer smaller than the class caps, and many short flows at a high load
# over two classes (flows above 50 kB in class 1)
SMALL_FLOWS = traffic.SizeTable(np.array([1e3, 2e4, 2e5]), np.array([0.0, 0.6, 1.0]), "small")
COMMON = dict(num_senders=4, num_classes=2, num_flow_slots=12, queue_capacity_pkts=150, delay_line_ticks=80,
              completion_log_size=64, buffer_pkts=120, min_rto_s=0.01, class_threshold_bytes=5e4)
CONTEXTS = (dict(COMMON, load=1.1, long_flows=3, buffer_per_class_pkts=[60, 150]),
            dict(COMMON, cdf=SMALL_FLOWS, load=1.2, long_flows=2, buffer_per_class_pkts=[150, 60]))
# values a backend may claim although no configuration it accepts can tell them apart
# (each row changes one choice from its context, whose senders are not ECN and whose policy is no AQM)
VACUOUS = {("native", "ecn_cwr"): "only ECN senders read it",
           ("native", "red_gentle"): "only RED reads it",
           ("native", "red_syn"): "only RED reads it"}


def test_every_claimed_choice_equals_the_reference():
    """Every (choice, value) a backend other than the reference claims, in each context, run
    on it and on the jax reference in one batch: integer state identical, float state within
    float32 roundings (as tests/test_native.py).  Each claimed value other than the default
    changes the reference's run in some context, unless it is declared vacuous there."""
    for b in backends.BACKENDS:
        if b == model.REFERENCE_BACKEND or not backends.BACKENDS[b].ticks:
            continue  # another model, not the tick (fluid: its agreement is tests/test_fluid_agreement.py's)
        assert backends.BACKENDS[b].available(), f"backend {b} is not available here"
        rows = [(c.name, v) for c in model.CHOICES for v in c.values() if v in c.implemented(b)]
        configs = [make_params(**{**ctx, n: v}) for ctx in CONTEXTS for n, v in rows]
        stacked = stack_params(configs)
        keys = jnp.broadcast_to(jax.random.PRNGKey(7), (len(configs), 2))
        init = jax.vmap(sim.init)(keys, stacked)
        ref = jax.jit(jax.vmap(lambda s, p: backends.run(s, p, TICKS, backend="jax")[0]))(init, stacked)
        got = jax.jit(jax.vmap(lambda s, p: backends.run(s, p, TICKS, backend=b)[0]))(init, stacked)
        ri, rf = _split(ref)
        gi, gf = _split(got)
        assert all(int(d) > 0 for d in np.asarray(ref.metrics.drop_total).reshape(len(configs), -1).sum(-1))
        for name in ri:
            bad = [rows[i % len(rows)] for i in range(len(configs)) if not np.array_equal(gi[name][i], ri[name][i])]
            assert not bad, f"{b}: integer leaf {name} differs from the reference for {bad}"
        for name in rf:
            np.testing.assert_allclose(gf[name], rf[name], rtol=2e-4, atol=1e-6, equal_nan=True,
                                       err_msg=f"{b}: float leaf {name}")
        # each claimed value is exercised: its row differs from its context's default row
        default_row = {c.name: rows.index((c.name, c.default)) for c in model.CHOICES}
        for j, (n, v) in enumerate(rows):
            if v == model.BY_NAME[n].default or (b, n) in VACUOUS:
                continue
            moved = [any(not np.array_equal(ri[x][k * len(rows) + j], ri[x][k * len(rows) + default_row[n]])
                         for x in ri) for k in range(len(CONTEXTS))]
            assert any(moved), f"{n}={v} changes nothing in any context: the comparison does not test it"

@pytest.mark.quick
def test_params_whose_leaves_outrun_their_record_are_refused():
    """A choice leaf edited by hand to a value the record lacks would run without that
    value's code (the tick compiles the TCP variants the record names): the tick refuses
    it, naming the choice, until `rederive` records it."""
    q = make_params(**scenarios.kw("lfq"))  # NewReno
    r = q.replace(tcp_id=jnp.asarray(tcp.CUBIC, jnp.int32))
    assert unrecorded_choices(r) == [("tcp", "cubic")]
    with pytest.raises(ValueError, match="tcp='cubic'.*rederive"):
        sim.run(sim.init(jax.random.PRNGKey(0), r), r, 1)
    assert unrecorded_choices(rederive(r)) == [] and unrecorded_choices(q) == []
    sim.run(sim.init(jax.random.PRNGKey(0), rederive(r)), rederive(r), 1)


def test_the_native_kernel_refuses_an_undeclared_value_itself(monkeypatch):
    """A choice leaf edited by hand past every Python check still stops in the kernel."""
    assert native.available(), "the native backend builds wherever the suite runs (a C++ compiler)"
    p = make_params(**BASE).replace(long_flow_syn_id=jnp.int32(1))  # the record still says base-rtt
    with pytest.raises(ValueError, match="long_flow_syn=queue"):
        native.check_params(p)  # the concrete leaf is read back
    monkeypatch.setattr(native, "check_params", lambda params: None)
    state = sim.init(jax.random.PRNGKey(0), p)
    with pytest.raises(Exception, match="model choice long_flow_syn has a value the native tick does not implement"):
        jax.block_until_ready(native.run(state, p, 10))


def test_derived_fields_follow_a_policy_switch():
    """`with_policy` re-derives the record of choices: baselines scored beside an agent that
    runs ns-3.37's RTT clock keep it, and so are refused by the native tick."""
    p = with_policy(make_params(rtt_clock="ns-3.37", prr="ns-3.37", policy="rl"), "sb-naive")
    assert p.needs_jax_tick and not native.supports(p)
    assert {("rtt_clock", "ns-3.37"), ("prr", "ns-3.37"), ("policy", "sb-naive")} <= set(p.model_choices)
    assert ("policy", "rl") not in p.model_choices and choices_of(p) == p.model_choices
    assert with_policy(make_params(), "fq-codel").flow_queue_capacity_pkts == 201
    assert backends.resolve("auto", with_policy(make_params(), "pie")) == "jax"
    assert backends.resolve("auto", with_policy(make_params(), "red")) == "native"


def _argv(q, v):
    if q.kind == "bool":
        return [q.option if v else "--no-" + q.option[2:]]
    return [q.option, *([str(x) for x in v] if isinstance(v, list) else [str(v)])]


def test_every_simulate_flag_reaches_its_param_and_the_config():
    """Each option of simulate.py that names a declared parameter, given a value other than
    the scenario's, changes the built params and is recorded in the output's config."""
    ap = sim_cli.build_parser()
    dests = {a.dest for a in ap._actions}
    needs = {"agent_flows": ["--long-flows", "2"]}  # (what a value other than the default needs beside it)
    # (what it needs beside it that the base run may not have: incast's fan-in and query rate come together)
    together = {"incast_fan_in": ["--incast-query-rate-per-s", "2"], "incast_query_rate_per_s": ["--incast-fan-in", "1"]}
    covered = 0
    for q in model.PARAMS:
        if q.name in sim_cli.SCENARIO_ONLY:
            continue
        assert q.name in dests, f"simulate.py has no option for {q.name}"
        base, _ = sim_cli.params_from_args(ap.parse_args(["--scenario", "thesis", *needs.get(q.name, [])]))
        base_leaves = jax.tree.leaves(base)
        v = other_value(q)
        a = ap.parse_args(["--scenario", "thesis", *needs.get(q.name, []), *together.get(q.name, []), *_argv(q, v)])
        p, kw = sim_cli.params_from_args(a)
        want = v[0] if isinstance(v, list) and len(v) == 1 else v
        assert kw[q.name] == want, q.name
        changed = (jax.tree.structure(p) != jax.tree.structure(base)
                   or any(np.shape(x) != np.shape(y) or not np.array_equal(x, y)
                          for x, y in zip(jax.tree.leaves(p), base_leaves)))
        assert changed, f"{q.option} {v} left the params unchanged"
        rec = config_record(kw, p)
        assert set(rec) == set(model.NAMES)
        got = rec[q.name]
        assert got == model.json_value(want) or (isinstance(got, list) and got[:len(np.atleast_1d(want))]
                                                 == list(np.atleast_1d(want))), (q.name, got, want)
        covered += 1
    assert covered == len(model.PARAMS) - len(sim_cli.SCENARIO_ONLY)


def test_train_model_flags_reach_the_env():
    """train.py's TCP-model options reach the env it trains on, and its config records them."""
    ap = train_cli.build_parser()
    for name in cli.MODEL_FLAGS:
        q = model.BY_NAME[name]
        v = other_value(q)
        cfg, env_cfg = train_cli.config_from_args(ap.parse_args(["--num-envs", "4", *_argv(q, v)]))
        assert env_cfg[name] == v
        _, params = train_cli.make_env(env_cfg)
        assert (name, v) in choices_of(params.env.sim)


def test_the_model_table_lists_every_parameter():
    table = model.table_markdown()
    for q in model.PARAMS:
        assert f"`{q.name}`" in table


def test_every_parameter_is_an_option_whose_help_prints():
    """Each declaration is an option of a script's parser and its help text renders (argparse
    formats help with %: a stray percent sign in a doc line breaks --help of every script)."""
    import argparse

    from rlbm_jax.cli import add_param_args

    ap = argparse.ArgumentParser()
    add_param_args(ap)
    text = ap.format_help()
    for q in model.PARAMS:
        assert q.option in text, q.name


TOY_PARAM = '''    Param("toy_rate", "traffic", "choice", "single", "a toy: flows arrive at twice the rate (double)",
          choices=("single", "double")),
'''
TOY_RUN = '''
import json
import jax, numpy as np
from rlbm_jax.cli import simulate as cli
from rlbm_jax.env import backends, model, sim
from rlbm_jax.env.params import config_record, make_params
kw = dict(num_senders=4, num_classes=1, num_flow_slots=32, buffer_per_class_pkts=40, load=2.0, arrival="thesis-code",
          completion_log_size=64)
off, on = make_params(**kw), make_params(**kw, toy_rate="double")
out = {"missing": model.missing("native", on), "auto": backends.resolve("auto", on)}
try:
    backends.resolve("native", on)
except ValueError as e:
    out["refusal"] = str(e)
key = jax.random.PRNGKey(3)
run = lambda p, b: jax.jit(lambda k: backends.run(sim.init(k, p), p, 4000, backend=b)[0])(key)
s_off, s_on, s_nat = run(off, "jax"), run(on, "jax"), run(off, "native")
out["started"] = [int(s.metrics.flows_started + s.metrics.flows_refused) for s in (s_off, s_on)]
out["native_equal"] = all(np.array_equal(np.asarray(a), np.asarray(b)) for a, b in
                          zip(jax.tree.leaves(s_off), jax.tree.leaves(s_nat)) if np.asarray(a).dtype != np.float32)
a = cli.build_parser().parse_args(["--scenario", "thesis", "--toy-rate", "double"])
p, kw2 = cli.params_from_args(a)
out["flag"] = [kw2.get("toy_rate"), config_record(kw2, p)["toy_rate"]]
print(json.dumps(out))
'''


def test_a_new_choice_is_its_declaration_and_its_physics(tmp_path):
    """A two-valued choice added to a copy of the package, as a user would add one: its
    declaration (`model.PARAMS` and its SimParams leaf) and its physics (the arrival rate).
    Without touching anything else it is a flag of simulate.py, recorded in the config,
    runs on the reference, is refused by name on the native backend (auto avoids it), and
    the native backend still equals the reference on the default value."""
    pkg = copy_package(tmp_path)
    m = pkg / "env" / "model.py"
    text = m.read_text()
    anchor = "    # ---- measurement ---"
    assert anchor in text
    m.write_text(text.replace(anchor, TOY_PARAM + anchor, 1))
    pp = pkg / "env" / "params.py"
    text = pp.read_text()
    anchor = "    load: jnp.ndarray  #"
    assert anchor in text
    pp.write_text(text.replace(anchor, "    toy_rate_id: jnp.ndarray  # [] index into model's toy_rate values\n" + anchor, 1))
    tr = pkg / "env" / "traffic.py"
    text = tr.read_text()
    anchor = "    return jnp.where(params.arrival_id == 0, by_load, thesis_code)"
    assert anchor in text
    tr.write_text(text.replace(anchor, anchor.replace("return ", "return (1.0 + params.toy_rate_id) * "), 1))
    out = json.loads(run_in_copy(tmp_path, TOY_RUN).strip().splitlines()[-1])
    assert out["missing"] == ["toy_rate=double"] and out["auto"] == "jax"
    assert "the native backend does not implement toy_rate=double" in out["refusal"]
    assert out["started"][1] > 1.5 * out["started"][0] > 0
    assert out["native_equal"]
    assert out["flag"] == ["double", "double"]


def test_the_ns3_scenario_takes_every_declared_option():
    """Every declared parameter the ns-3 scenario shares (`Param.ns3_option`) is one of its
    declared options, and `ns3.ns3_args` passes it under that name; a modelling parameter it
    has no option for is refused at a value other than the default, never dropped."""
    from rlbm_jax.ns3 import harness as ns3

    src = ns3.SOURCE.read_text()
    options = set(__import__("re").findall(r'o\.Add\("([a-z_0-9]+)"', src))
    assert len(options) > 40
    shared = {q.ns3_option for q in model.PARAMS if q.ns3_option}
    assert shared <= options, sorted(shared - options)
    cell = ns3.Cell("t", "thesis", scenarios.thesis(load=0.3, buffer_per_class_pkts=[40, 60]), seconds=1.0)
    args = ns3.ns3_args(cell, 1)
    assert "--class_cap_pkts=40,60" in args and "--load=0.3" in args
    with pytest.raises(ValueError, match="no option for max_rto_s"):
        ns3.ns3_args(ns3.Cell("t", "thesis", scenarios.thesis(max_rto_s=5.0), seconds=1.0), 1)
