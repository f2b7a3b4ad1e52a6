"""The discipline registry (`rlbm_jax.env.switch.disciplines`): every queueing discipline in its
own module behind one protocol.  Checked here: the registry is what the buffer policies,
the params, the knobs and the state read; the tick names no discipline (it reaches them
through the registry's hooks and flags) and the native kernel names no discipline's state;
and a new discipline is one module plus one line in `registry.py` and a policy naming it:
added so to a copy of the package, it acts as its module says, `auto` runs it on the jax
backend and the native backend refuses it by name, and the registered disciplines' runs
are unchanged by the addition, bit for bit."""
import ast
import re
import textwrap
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlbm_jax import scenarios
from rlbm_jax.env import backends, metrics as mx, sim
from rlbm_jax.env.switch import buffer, disciplines
from rlbm_jax.env.params import make_params, stack_params


ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.quick
def test_the_registry_is_what_policies_params_knobs_and_the_state_read():
    names = disciplines.names()
    assert names == ("none", "red", "ared", "pie", "codel", "mark", "fq-codel", "fq")
    assert len({d.key for d in disciplines.DISCIPLINES}) == len(names)
    with pytest.raises(ValueError, match="registered: none, red"):
        disciplines.by_name("sfq")
    with pytest.raises(ValueError, match="unknown aqm 'sfq'"):
        buffer.register_policy("sfq-policy", lambda v, p: v.queue_pkts, aqm_name="sfq")
    for policy in buffer.POLICY_NAMES:
        d = buffer.discipline(policy)
        p = make_params(num_classes=1, policy=policy, ecn=True)
        assert int(buffer.aqm_id(p)) == names.index(d.name) == disciplines.index(d.name)
        assert buffer.needs_flow_queues(policy) == d.owns_departure == (p.flow_queue_capacity_pkts > 0)
        if d.needs_ecn:
            with pytest.raises(ValueError, match="ecn"):
                make_params(num_classes=1, policy=policy, ecn=False)
    # the state holds every discipline's own state, as its `init` builds it
    p = make_params(num_classes=2, policy="fq-codel")
    s = sim.init(jax.random.PRNGKey(0), p)
    assert tuple(s.aqm.keys()) == tuple(d.key for d in disciplines.DISCIPLINES)
    for d in disciplines.DISCIPLINES:
        got, want = jax.tree.map(np.asarray, s.aqm[d.key]), jax.tree.map(np.asarray, d.init(p))
        assert jax.tree.structure(got) == jax.tree.structure(want)
        assert all(np.array_equal(a, b) for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want)))
    # the knobs of the disciplines are the tick's, and land in their own state
    assert sim.KNOBS["mark_prob"] == "aqm.mark.mark_p"
    s2 = sim.apply_knobs(s, {"mark_prob": 0.25})
    np.testing.assert_array_equal(np.asarray(s2.aqm.mark.mark_p), [0.25, 0.25])
    assert s2.aqm.red is s.aqm.red
    with pytest.raises(AttributeError, match="no discipline"):
        s.aqm.replace(sfq=())


def _identifiers(tree):
    """Every name (of a variable, function, class, argument or keyword), attribute, imported
    module and string constant of a module's code (not its docstrings)."""
    docs = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)}
    for node in ast.walk(tree):
        if id(node) in docs:
            continue
        if isinstance(node, ast.Name):
            yield node.id
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            yield node.name
        elif isinstance(node, (ast.arg, ast.keyword)) and node.arg:
            yield node.arg
        elif isinstance(node, ast.Attribute):
            yield node.attr
        elif isinstance(node, ast.alias):
            yield node.name.split(".")[-1]
            if node.asname:
                yield node.asname
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            yield node.value


@pytest.mark.quick
def test_the_tick_names_no_discipline_and_the_native_kernel_only_those_it_runs():
    """sim.py reaches the disciplines through the registry alone: no identifier, module or
    string of it has a discipline's name as a word (comments aside; the protocol's and the
    metrics' field names are the tick's own); tick.cc names the state leaves only of the
    disciplines whose policies the native backend claims (and the per-flow queues only
    where one of them owns departure), and carries every other's as flat buffers."""
    words = {"fq", "fqcodel"}
    for d in disciplines.DISCIPLINES[1:]:
        words |= {d.key, *d.key.split("_")}
    own = set(disciplines.Hits._fields) | set(mx.Metrics.__dataclass_fields__) | set(mx.Interval.__dataclass_fields__)
    found = sorted({w for w in _identifiers(ast.parse((ROOT / "rlbm_jax/env/sim.py").read_text())) if w not in own
                    and set(re.split(r"[^a-z0-9]+", w.lower())) & words})
    assert found == [], f"sim.py names disciplines: {found}"
    tick_cc = (ROOT / "rlbm_jax/env/backends/native/tick.cc").read_text()
    runs = {buffer.discipline(p) for p in buffer.native_policies()}
    keys = {d.key for d in runs if d.name != "none"}
    named = set(re.findall(r"\bL_aqm_([a-z]+(?:_codel)?)_", tick_cc))
    assert named and named <= keys, (named, keys)
    assert not re.findall(r"\bL_flowq_\w+", tick_cc) or any(d.owns_departure for d in runs)


@pytest.mark.quick
def test_flags_leave_the_flow_queue_code_out_without_flow_queues():
    p = make_params(policy="red")
    assert p.flow_queue_capacity_pkts == 0 and disciplines.owners(p) == []
    for name in ("owns_departure", "takes_every_arrival", "syn_skips_queue", "caps_flows"):
        assert disciplines.flag(p, buffer.aqm_id(p), name) is False
    q = make_params(policy="fq-codel", num_classes=1)
    assert [d.name for _, d in disciplines.owners(q)] == ["fq-codel", "fq"]  # both run on the per-flow queues
    assert not bool(disciplines.flag(q, buffer.aqm_id(q), "caps_flows"))
    assert bool(disciplines.flag(q, buffer.aqm_id(q), "owns_departure"))
    r = q.replace(policy_id=jnp.asarray(buffer.POLICY_NAMES.index("codel"), jnp.int32))
    assert not bool(disciplines.flag(r, buffer.aqm_id(r), "owns_departure"))


@pytest.mark.quick
def test_a_batch_without_a_discipline_or_a_policy_traces_none_of_their_code(monkeypatch):
    """The tick compiles the policies a batch's record allows (`buffer.used_policies`) and, when
    none of them runs a discipline, no discipline hook: here every other policy's thresholds
    and every discipline's hooks raise when traced, and a batch of drop-tail and DT runs still
    traces; a batch that holds RED traces the whole registry (its bits are those of the
    committed results, `buffer.chosen_discipline`)."""
    batch = stack_params([make_params(policy="droptail"), make_params(policy="dt")])
    ids = buffer.used_policies(batch)
    assert [buffer.POLICY_NAMES[i] for i in ids] == ["droptail", "dt"]
    assert buffer.chosen_discipline(batch).among == (disciplines.index("none"),)
    assert buffer.used_policies(batch.replace(model_choices=())) is None  # no record: every policy

    def boom(*_):
        raise AssertionError("traced")

    monkeypatch.setattr(buffer, "_REGISTRY", [pol if i in ids else pol._replace(thresholds=boom)
                                              for i, pol in enumerate(buffer._REGISTRY)])
    for d in disciplines.DISCIPLINES[1:]:  # (each discipline's own hooks; "none" keeps the base's)
        for hook in ("on_enqueue", "on_dequeue", "on_tick_end"):
            if hook in type(d).__dict__:
                monkeypatch.setattr(type(d), hook, boom)
    state = jax.vmap(sim.init)(jax.random.split(jax.random.PRNGKey(0), 2), batch)
    jax.eval_shape(jax.vmap(sim.tick), state, batch)  # traces: nothing it holds was called
    red = stack_params([make_params(policy="droptail"), make_params(policy="red")])
    assert buffer.chosen_discipline(red).among is None
    with pytest.raises(AssertionError, match="traced"):
        jax.eval_shape(jax.vmap(sim.tick), jax.vmap(sim.init)(jax.random.split(jax.random.PRNGKey(0), 2), red), red)


@pytest.mark.quick
def test_a_batch_whose_every_run_owns_departure_traces_no_class_fifo_departure(monkeypatch):
    """Where the record says every run's discipline owns departure (FQ-CoDel, fq), the tick
    takes that discipline's departure alone: the class FIFOs' departure (whose result a
    select would discard, and which kept the whole per-flow queues in a select every tick)
    raises when traced and a FQ-CoDel batch and a fq batch still trace; a batch that mixes
    FQ-CoDel with drop-tail traces both and selects per run."""
    def boom(*_):
        raise AssertionError("traced")

    monkeypatch.setattr(sim, "_aqm_at_dequeue", boom)
    kw = dict(num_senders=2, num_flow_slots=4, load=0.0, long_flows=2, num_classes=1)
    for policy in ("fq-codel", "fq"):
        batch = stack_params([make_params(**kw, policy=policy)] * 2)
        assert buffer.used_disciplines(batch) == (disciplines.index(policy),)
        state = jax.vmap(sim.init)(jax.random.split(jax.random.PRNGKey(0), 2), batch)
        jax.eval_shape(jax.vmap(sim.tick), state, batch)
    mixed = stack_params([make_params(**kw, policy="fq-codel"), make_params(**kw, policy="droptail")])
    assert buffer.used_disciplines(mixed) == (disciplines.index("none"), disciplines.index("fq-codel"))
    with pytest.raises(AssertionError, match="traced"):
        jax.eval_shape(jax.vmap(sim.tick), jax.vmap(sim.init)(jax.random.split(jax.random.PRNGKey(0), 2), mixed),
                       mixed)


# Taildrop-half: while a class FIFO holds at least half its cap at the tick's start, every
# other arrival (the first, the third, ...) is dropped early; it counts what it dropped.
TAILDROP_HALF = '''
"""Taildrop-half: while a class FIFO holds at least half its cap at the tick's start, every
other arrival (the first, the third, ...) is dropped early."""
import dataclasses

import jax.numpy as jnp
from flax import struct

from rlbm_jax.env.switch.disciplines.base import Discipline, Hits


@struct.dataclass
class HalfState:
    dropped_pkts: jnp.ndarray  # [P] int32 arrivals it dropped


@dataclasses.dataclass(frozen=True)
class TaildropHalf(Discipline):
    def init(self, params):
        return HalfState(dropped_pkts=jnp.zeros((params.num_classes,), jnp.int32))

    def on_enqueue(self, s, arr_c, q_pkts, u, now_s, params):
        count = jnp.where(2 * q_pkts >= params.class_cap_pkts, (arr_c + 1) // 2, 0)
        hits = Hits(first=jnp.zeros_like(arr_c), spacing=jnp.full(arr_c.shape, 2.0, jnp.float32), count=count,
                    forced=jnp.zeros(arr_c.shape, bool), may_mark=jnp.zeros(arr_c.shape, bool),
                    syn_p=jnp.zeros(arr_c.shape, jnp.float32))
        return s.replace(dropped_pkts=s.dropped_pkts + count), hits


DISCIPLINE = TaildropHalf(name="taildrop-half")
'''

TICKS = 6000  # 1 s at 100 Mbit/s, two packets a tick
REGISTERED = ("red", "pie", "codel", "fq-codel", "rl-mark")


def _registered_runs():
    """The registered disciplines (ECN on) in one vmapped batch: the final states."""
    ps = [scenarios.params("long", long_flows=4, policy=pol, ecn=True, pkts_per_tick=2) for pol in REGISTERED]
    keys = jax.random.split(jax.random.PRNGKey(5), len(ps))
    run = jax.vmap(lambda k, p: backends.run(sim.apply_knobs(sim.init(k, p), {"mark_prob": 0.05}), p, TICKS,
                                             backend="jax")[0])
    return jax.jit(run)(keys, stack_params(ps))


def _leaves(state) -> dict:
    return {jax.tree_util.keystr(path): np.asarray(x) for path, x in jax.tree_util.tree_flatten_with_path(state)[0]}


RUN = '''
import sys
import jax, jax.numpy as jnp, numpy as np
from rlbm_jax import scenarios
from rlbm_jax.env import backends, metrics as mx, sim
from rlbm_jax.env.switch import buffer, disciplines
sys.path.insert(0, %(tests)r)
from test_disciplines import TICKS, _leaves, _registered_runs

buffer.register_policy("halfdrop", lambda view, p: p.class_cap_pkts.astype(jnp.float32), (1.0,),
                       aqm_name="taildrop-half")
out = {"names": np.asarray(disciplines.names())}
p = scenarios.params("long", long_flows=4, policy="halfdrop", pkts_per_tick=2)
out["auto"] = np.asarray(backends.resolve("auto", p))
try:
    backends.resolve("native", p)
    out["native"] = np.asarray("ran")
except ValueError as e:
    out["native"] = np.asarray(str(e))
# the hook through the registry's dispatch: 5 arrivals at half the cap, and one packet below it
cap = int(p.class_cap_pkts[0])
d_id = disciplines.index("taildrop-half")
states = disciplines.init(p)
for q in (cap // 2 + cap %% 2, cap // 2 + cap %% 2 - 1):
    st, h = disciplines.on_enqueue(states, d_id, jnp.asarray([5]), jnp.asarray([q]), jnp.asarray([0.5]), 0.0, p)
    pos = [int(h.first[0]) + int(np.floor(i * float(h.spacing[0]))) for i in range(int(h.count[0]))]
    out[f"hook_{q}"] = np.asarray(pos + [-1])
    out[f"hook_state_{q}"] = np.asarray(st.taildrop_half.dropped_pkts)
trace = lambda s: (s.metrics.drop_total, jnp.sum(s.aqm.taildrop_half.dropped_pkts), s.queue.pkts[0])
s, (drops, own, q) = jax.jit(lambda k: backends.run(sim.init(k, p), p, TICKS, trace_fn=trace, backend="auto"))(
    jax.random.PRNGKey(1))
out.update(drops=np.asarray(drops), own=np.asarray(own), queue=np.asarray(q), cap=np.asarray(cap))
for k, v in _leaves(_registered_runs()).items():
    out["registered" + k] = v
np.savez(sys.argv[1], **out)
'''


def test_a_new_discipline_is_one_module_and_one_line(tmp_path):
    from tests.conftest import copy_package, run_in_copy  # (here: the run below imports this module alone)

    pkg = copy_package(tmp_path)
    (pkg / "env" / "switch" / "disciplines" / "taildrop_half.py").write_text(TAILDROP_HALF)
    reg = pkg / "env" / "switch" / "disciplines" / "registry.py"
    text = reg.read_text()
    assert "\nDISCIPLINES = (" in text
    reg.write_text(text + "\nfrom rlbm_jax.env.switch.disciplines import taildrop_half  # noqa: E402\n"
                   "DISCIPLINES = DISCIPLINES + (taildrop_half.DISCIPLINE,)\n")
    out_file = tmp_path / "out.npz"
    run_in_copy(tmp_path, textwrap.dedent(RUN % {"tests": str(ROOT / "tests")}), out_file, timeout=1500)
    out = dict(np.load(out_file))
    assert out["names"].tolist() == list(disciplines.names()) + ["taildrop-half"]
    # auto runs it on the reference; the native backend refuses it by the policy's name
    assert str(out["auto"]) == "jax"
    assert "the native backend does not implement policy=halfdrop" in str(out["native"])
    # the hook through the registry: at half the cap it hits positions 0, 2, 4 of 5 arrivals
    # and counts them in its own state; one packet below, nothing
    cap = int(out["cap"])
    at, below = cap // 2 + cap % 2, cap // 2 + cap % 2 - 1
    assert out[f"hook_{at}"].tolist() == [0, 2, 4, -1] and out[f"hook_state_{at}"].tolist() == [3]
    assert out[f"hook_{below}"].tolist() == [-1] and out[f"hook_state_{below}"].tolist() == [0]
    # in a run: it drops, only in ticks that start at half the cap or above, every one of
    # its drops is a drop of the switch, and it holds the queue near half the cap, so that
    # the cap never drops
    own, drops, q = np.diff(out["own"], prepend=0), np.diff(out["drops"], prepend=0), out["queue"]
    assert own.sum() > 50, own.sum()
    start_q = np.concatenate([[0], q[:-1]])
    assert (2 * start_q[own > 0] >= cap).all()
    assert (drops >= own).all()
    assert q.max() < cap and drops.sum() == own.sum()
    # the registered disciplines' runs are unchanged by the addition, bit for bit (the new
    # discipline's own state aside)
    here = _leaves(_registered_runs())
    there = {k[len("registered"):]: v for k, v in out.items() if k.startswith("registered")}
    assert set(there) - set(here) == {k for k in there if k.startswith(".aqm.taildrop_half")} != set()
    for k, v in here.items():
        assert v.dtype == there[k].dtype and v.tobytes() == there[k].tobytes(), k
    assert (here[".metrics.mark_total"] + here[".metrics.drop_total"] > 0).all()  # each of them acted
