"""Deployable policies as ONNX models, and the checks that refuse a mismatched one.

`to_onnx` turns a policy directory (`rlbm_jax.policy` format) into one ONNX graph,
with observation normalisation and clipping inside it, so a consumer feeds raw
observations; the batch dimension is dynamic.

An "mlp" policy: input `obs` float32 [batch, obs_dim], output `action` float32
[batch, act_dim], the deterministic action (the action map inside the graph).

An "lstm" policy (recurrent, discrete action): one step per call, its state carried
by the caller (zeros at an episode's first observation, `h_out`/`c_out` fed back as
`h_in`/`c_in` at the next call).  Inputs `obs` float32 [batch, obs_dim], `h_in` and
`c_in` float32 [batch, lstm_size]; outputs `action` int64 [batch] (argmax of the
logits: an index into the formulation's choices), `h_out`, `c_out` float32
[batch, lstm_size] and `logits` float32 [batch, num_actions].  The cell is written
out of MatMul/Add/Sigmoid/Tanh/Mul nodes, one MatMul pair per gate, by the
equations in `rlbm_jax.policy`'s docstring (flax's OptimizedLSTMCell, gates i, f, g, o).

The model's metadata (`metadata_props`) says what the graph expects and what its
output means, under keys prefixed `rlbm.`: `format`, `network` ("lstm"; an MLP graph
has none, as before recurrent policies, and a file without it is "mlp"), `obs_dim`, `act_dim` (1 for a discrete action),
`formulation` (the env id the policy was trained on), `obs_layout` (JSON list of the
observation's entry names, the formulation's), `action` (what the output sets),
`action_map` ("argmax" for a discrete policy), `num_classes`, `agent_interval_s`,
`flows_scale` and `env` (the JSON the trainer recorded: scenario ranges, PPO config);
an "lstm" model adds `lstm_size`, `num_actions` and, when the policy records them,
`action_values` (JSON list: what each action index means).

The graph is written with the `onnx` package's helpers: an MLP is a handful of
MatMul/Add/Tanh nodes.  (jax2onnx pins orbax-checkpoint below 0.11.37, which this
package's checkpoints do not accept.)
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from rlbm_jax import jsonio
from rlbm_jax.env import formulations
from rlbm_jax.policy import BDP_LOG2_RANGE, POW2_LOG2_RANGE, bdp_columns, check_layout, read_policy

FORMAT = "rlbm-onnx-policy-v1"
OPSET = 17


def _require_onnx():
    try:
        import onnx  # noqa: F401
    except ImportError as e:  # pragma: no cover - depends on the install
        raise RuntimeError("ONNX export needs the 'export' extra: pip install -e '.[export]'") from e


def _discrete_choices(space):
    """n of a gymnax Discrete space, None for any other space."""
    from gymnax.environments import spaces

    return int(space.n) if isinstance(space, spaces.Discrete) else None


def to_onnx(policy_dir, out_path, *, agent_interval_s: float | None = None, flows_scale: float = 10.0):
    """Write the policy in `policy_dir` as an ONNX model at `out_path`; returns the path."""
    _require_onnx()
    from onnx import TensorProto, helper, numpy_helper

    weights, meta = read_policy(policy_dir)
    network = meta["network"]
    obs_dim, act_dim = int(meta["obs_dim"]), int(meta["act_dim"])
    if not meta.get("formulation") or meta.get("num_classes") is None:
        raise ValueError(f"export: {policy_dir} names no formulation and class count; it drives no RLBM env")
    form = formulations.get(meta["formulation"])
    num_classes = int(meta["num_classes"])
    check_layout(form.obs_layout(num_classes), meta["obs_layout"], f"export: formulation {form.id}")
    choices = _discrete_choices(form.action_space(num_classes))
    if network == "lstm" and choices != meta["num_actions"]:
        raise ValueError(f"export: {policy_dir} chooses among {meta['num_actions']} actions; formulation {form.id}'s "
                         f"action space is {form.action_space(num_classes)}")
    if network == "mlp" and choices is not None:
        raise ValueError(f"export: {policy_dir} is a continuous MLP policy; formulation {form.id}'s action is "
                         f"discrete ({choices} choices)")
    scenario = (meta.get("env") or {}).get("scenario", {})
    if agent_interval_s is None:
        agent_interval_s = float(scenario.get("agent_interval_s", 0.1))

    inits, nodes = [], []

    def const(name, value):
        inits.append(numpy_helper.from_array(np.asarray(value, np.float32), name))
        return name

    def node(op, inputs, name, **attrs):
        nodes.append(helper.make_node(op, inputs, [name], name=name, **attrs))
        return name

    def activation(x, name):
        return node("Tanh", [x], f"tanh{name}") if meta["activation"] == "tanh" else node("Relu", [x], f"relu{name}")

    def dense_tower(x, layers, prefix):
        for i, (w, b) in enumerate(layers):
            x = node("MatMul", [x, const(f"{prefix}w{i}", w)], f"{prefix}dense{i}_mul")
            x = node("Add", [x, const(f"{prefix}b{i}", b)], f"{prefix}dense{i}")
            if i < len(layers) - 1:
                x = activation(x, f"{prefix}{i}")
        return x

    std = np.maximum(np.asarray(meta["obs_std"], np.float32), np.float32(1e-8))
    x = node("Sub", ["obs", const("obs_mean", meta["obs_mean"])], "centred")
    x = node("Div", [x, const("obs_std", std)], "normalised")
    if meta.get("obs_clip") is not None:
        c = float(meta["obs_clip"])
        x = node("Clip", [x, const("clip_lo", -c), const("clip_hi", c)], "clipped")
    props = {}
    if network == "lstm":
        H, n = int(meta["lstm_size"]), int(meta["num_actions"])
        e = activation(node("Add", [node("MatMul", [x, const("embed_w", weights.embed[0])], "embed_mul"),
                                    const("embed_b", weights.embed[1])], "embed"), "_embed")
        gate = {}
        for k, g in enumerate("ifgo"):  # flax: (h @ W_h + b) + x @ W_x, per gate
            cols = slice(k * H, (k + 1) * H)
            zh = node("Add", [node("MatMul", ["h_in", const(f"lstm_wh_{g}", weights.wh[:, cols])], f"lstm_h{g}_mul"),
                              const(f"lstm_b_{g}", weights.b[cols])], f"lstm_h{g}")
            z = node("Add", [zh, node("MatMul", [e, const(f"lstm_wx_{g}", weights.wx[:, cols])], f"lstm_x{g}")],
                     f"lstm_z{g}")
            gate[g] = node("Tanh" if g == "g" else "Sigmoid", [z], f"gate_{g}")
        fc = node("Mul", [gate["f"], "c_in"], "lstm_fc")
        c_new = node("Add", [fc, node("Mul", [gate["i"], gate["g"]], "lstm_ig")], "lstm_c")
        h_new = node("Mul", [gate["o"], node("Tanh", [c_new], "lstm_tanh_c")], "lstm_h")
        logits = dense_tower(h_new, weights.actor, "actor_")
        nodes.append(helper.make_node("ArgMax", [logits], ["action"], name="action", axis=1, keepdims=0))
        for src, dst in ((h_new, "h_out"), (c_new, "c_out"), (logits, "logits")):
            nodes.append(helper.make_node("Identity", [src], [dst], name=dst))
        state = lambda name: helper.make_tensor_value_info(name, TensorProto.FLOAT, ["batch", H])
        inputs = [helper.make_tensor_value_info("obs", TensorProto.FLOAT, ["batch", obs_dim]), state("h_in"),
                  state("c_in")]
        outputs = [helper.make_tensor_value_info("action", TensorProto.INT64, ["batch"]), state("h_out"),
                   state("c_out"), helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", n])]
        props.update(network=network, lstm_size=H, num_actions=n)  # an MLP graph has no rlbm.network
        if meta.get("action_values") is not None:
            props["action_values"] = jsonio.dumps([float(v) for v in meta["action_values"]])
    else:
        x = dense_tower(x, weights, "")
        x = _action_map_nodes(x, meta, const, node)
        nodes.append(helper.make_node("Identity", [x], ["action"], name="action"))
        inputs = [helper.make_tensor_value_info("obs", TensorProto.FLOAT, ["batch", obs_dim])]
        outputs = [helper.make_tensor_value_info("action", TensorProto.FLOAT, ["batch", act_dim])]

    graph = helper.make_graph(nodes, "rlbm_policy", inputs, outputs, inits)
    props = {"format": FORMAT, "obs_dim": obs_dim, "act_dim": act_dim, "num_classes": num_classes,
             "formulation": form.id, "obs_layout": jsonio.dumps(meta["obs_layout"]),
             "action": form.action.text, "action_map": meta["action_map"],
             "agent_interval_s": float(agent_interval_s), "flows_scale": float(flows_scale),
             "env": jsonio.dumps(meta.get("env") or {}), **props}
    return save_model(graph, props, out_path)


def save_model(graph, props: dict, out_path) -> Path:
    """The ONNX model of `graph` at this project's opset, its metadata `props` under `rlbm.`
    keys, checked and written to out_path (its folder made)."""
    import onnx
    from onnx import helper

    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="rlbm_jax")
    model.ir_version = min(model.ir_version, 9)  # readable by onnxruntime releases of the last two years
    helper.set_model_props(model, {f"rlbm.{k}": str(v) for k, v in props.items()})
    onnx.checker.check_model(model, full_check=True)
    out_path = Path(out_path)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(out_path))
    return out_path


def _action_map_nodes(x, meta, const, node):
    """Nodes of an MLP policy's action map, from the network output x to the action."""
    obs_dim, act_dim = int(meta["obs_dim"]), int(meta["act_dim"])
    amap = meta["action_map"]
    if amap == "tanh01":  # (tanh(x) + 1) / 2
        t = node("Tanh", [x], "out_tanh")
        return node("Mul", [node("Add", [t, const("one", 1.0)], "out_shift"), const("half", 0.5)], "action_raw")
    if amap == "clip01":
        return node("Clip", [x, const("zero", 0.0), const("one", 1.0)], "action_raw")
    if amap == "none":  # the mean itself (the env bounds it)
        return node("Identity", [x], "action_raw")
    if amap in ("pow2", "bdp"):
        lo, hi = POW2_LOG2_RANGE if amap == "pow2" else BDP_LOG2_RANGE
        c = node("Clip", [x, const("log2_lo", lo), const("log2_hi", hi)], "out_clip")
        x = node("Exp", [node("Mul", [c, const("ln2", math.log(2.0))], "out_log")], "out_pow2")  # 2 ** clip(x)
        if amap == "pow2":
            return x
        # bdp: alpha = clip(2 ** clip(x) / (beta * free * B/BDP), 0, 1), columns picked by MatMul
        beta_cols, free_col, bb_col = bdp_columns(meta["obs_layout"], act_dim)
        pick = np.zeros((obs_dim, act_dim), np.float32)
        pick[beta_cols, range(act_dim)] = 1.0
        one_col = lambda j: np.eye(obs_dim, 1, -j, dtype=np.float32)  # [obs_dim, 1] selecting column j
        beta = node("MatMul", ["obs", const("pick_beta", pick)], "obs_beta")
        free = node("MatMul", ["obs", const("pick_free", one_col(free_col))], "obs_free")
        bb = node("MatMul", ["obs", const("pick_bb", one_col(bb_col))], "obs_bb")
        room = node("Mul", [beta, node("Mul", [free, bb], "room_total")], "room_bdp")
        room = node("Clip", [room, const("room_lo", 1e-6), const("room_hi", np.inf)], "room_safe")
        return node("Clip", [node("Div", [x, room], "alpha_raw"), const("zero", 0.0), const("one", 1.0)],
                    "action_raw")
    # exp2: 2 ** (4 * (tanh(x) - 1)) = exp(4 ln2 * (tanh(x) - 1))
    t = node("Tanh", [x], "out_tanh")
    y = node("Mul", [node("Sub", [t, const("one", 1.0)], "out_shift"), const("four_ln2", 4.0 * math.log(2.0))],
             "out_log")
    return node("Exp", [y], "action_raw")


LSTM_INPUTS = ("obs", "h_in", "c_in")
LSTM_OUTPUTS = ("action", "h_out", "c_out", "logits")


def _dims(value_info):
    return [d.dim_value if d.HasField("dim_value") else d.dim_param for d in value_info.type.tensor_type.shape.dim]


class OnnxRecurrentPolicy:
    """An exported "lstm" policy run by onnxruntime, one step per call, its state in the
    caller's hands: `policy(obs [n, obs_dim], h [n, H], c [n, H]) -> (action int64 [n],
    h_out, c_out, logits [n, num_actions])`; `initial_state(n)` gives zero (h, c)."""

    def __init__(self, session, meta, path):
        self.session, self.meta, self.path = session, meta, path
        self.obs_dim, self.lstm_size, self.num_actions = meta["obs_dim"], meta["lstm_size"], meta["num_actions"]

    def initial_state(self, n: int):
        z = np.zeros((n, self.lstm_size), np.float32)
        return z, z.copy()

    def __call__(self, obs, h, c):
        obs, h, c = (np.asarray(a, np.float32) for a in (obs, h, c))
        D, H = self.obs_dim, self.lstm_size
        if obs.ndim != 2 or obs.shape[1] != D:
            raise ValueError(f"policy {self.path}: observations must be [n, {D}], got {obs.shape}")
        if h.shape != (obs.shape[0], H) or c.shape != (obs.shape[0], H):
            raise ValueError(f"policy {self.path}: state h_in and c_in must be [n, {H}] = [{obs.shape[0]}, {H}], "
                             f"got {h.shape} and {c.shape}")
        return tuple(self.session.run(list(LSTM_OUTPUTS), {"obs": obs, "h_in": h, "c_in": c}))


def load_checked(path, *, num_classes: int | None = None, agent_interval_s: float | None = None,
                 formulation: str | None = None):
    """Open an exported policy with onnxruntime after checking it against what the
    caller will feed it; returns (fn, metadata): for an "mlp" model fn(obs [n, obs_dim])
    -> action [n, act_dim], for an "lstm" model an `OnnxRecurrentPolicy`.
    Raises ValueError, naming the mismatch, for a file that is not an ONNX model, lacks
    or contradicts the rlbm metadata (its layout must be its formulation's, a discrete
    policy's choices its formulation's), or whose inputs/outputs, class count, agent
    interval or formulation do not match."""
    _require_onnx()
    import onnx
    import onnxruntime as ort

    path = Path(path)
    if not path.is_file():
        raise ValueError(f"policy {path}: no such file")
    try:
        model = onnx.load(str(path))
        onnx.checker.check_model(model)
    except Exception as e:  # onnx raises DecodeError / ValidationError, among others
        raise ValueError(f"policy {path}: not a valid ONNX model ({type(e).__name__}: {e})") from None
    props = {p.key[len("rlbm."):]: p.value for p in model.metadata_props if p.key.startswith("rlbm.")}
    if props.get("format") != FORMAT:
        raise ValueError(f"policy {path}: metadata rlbm.format is {props.get('format')!r}, expected {FORMAT!r}")
    network = props.get("network", "mlp")  # files written before recurrent policies have no rlbm.network
    if network not in ("mlp", "lstm"):
        raise ValueError(f"policy {path}: metadata rlbm.network is {network!r}, expected 'mlp' or 'lstm'")
    need = ["obs_dim", "act_dim", "num_classes", "formulation", "obs_layout", "action_map", "agent_interval_s",
            "flows_scale"] + (["lstm_size", "num_actions"] if network == "lstm" else [])
    missing = [k for k in need if k not in props]
    if missing:
        raise ValueError(f"policy {path}: metadata lacks {', '.join('rlbm.' + k for k in missing)}")
    try:
        meta = dict(props, network=network, obs_dim=int(props["obs_dim"]), act_dim=int(props["act_dim"]),
                    num_classes=int(props["num_classes"]), agent_interval_s=float(props["agent_interval_s"]),
                    flows_scale=float(props["flows_scale"]), obs_layout=json.loads(props["obs_layout"]),
                    env=json.loads(props.get("env", "{}")))
        if network == "lstm":
            values = json.loads(props["action_values"]) if "action_values" in props else None
            meta.update(lstm_size=int(props["lstm_size"]), num_actions=int(props["num_actions"]),
                        action_values=None if values is None else [float(v) for v in values])
    except (ValueError, TypeError) as e:
        raise ValueError(f"policy {path}: malformed rlbm metadata ({e})") from None
    P = meta["num_classes"]
    try:
        form = formulations.get(meta["formulation"])
    except ValueError as e:
        raise ValueError(f"policy {path}: {e}") from None
    space = form.action_space(P)
    if (meta["obs_layout"] != list(form.obs_layout(P)) or meta["obs_dim"] != len(meta["obs_layout"])
            or meta["act_dim"] != int(np.prod(space.shape))):
        raise ValueError(f"policy {path}: metadata describes obs_dim {meta['obs_dim']}, act_dim {meta['act_dim']} "
                         f"and layout {meta['obs_layout']}, not formulation {form.id}'s for {P} classes")
    choices = _discrete_choices(space)
    if network == "lstm" and (choices != meta["num_actions"] or meta["act_dim"] != 1):
        raise ValueError(f"policy {path}: metadata describes a discrete policy of {meta['num_actions']} actions, "
                         f"formulation {form.id}'s action space for {P} classes is {space}")
    if network == "mlp" and choices is not None:
        raise ValueError(f"policy {path}: a continuous (mlp) policy; formulation {form.id}'s action is discrete "
                         f"({choices} choices)")
    if network == "lstm" and meta["action_values"] is not None and len(meta["action_values"]) != choices:
        raise ValueError(f"policy {path}: rlbm.action_values has {len(meta['action_values'])} entries for "
                         f"{choices} actions")
    if formulation is not None and formulation != form.id:
        raise ValueError(f"policy {path}: trained on formulation {form.id}, the scenario uses {formulation}")
    ins, outs = model.graph.input, model.graph.output
    if network == "mlp":
        if len(ins) != 1 or len(outs) != 1:
            raise ValueError(f"policy {path}: expects one input and one output, has {len(ins)} and {len(outs)}")
        width_in = ins[0].type.tensor_type.shape.dim[-1].dim_value
        width_out = outs[0].type.tensor_type.shape.dim[-1].dim_value
        if width_in != meta["obs_dim"] or width_out != meta["act_dim"]:
            raise ValueError(f"policy {path}: graph takes width {width_in} and gives {width_out}; its metadata "
                             f"says {meta['obs_dim']} and {meta['act_dim']}")
    else:
        names_in, names_out = tuple(i.name for i in ins), tuple(o.name for o in outs)
        if names_in != LSTM_INPUTS or names_out != LSTM_OUTPUTS:
            raise ValueError(f"policy {path}: an lstm policy's graph takes {list(LSTM_INPUTS)} and gives "
                             f"{list(LSTM_OUTPUTS)}; this one takes {list(names_in)} and gives {list(names_out)}")
        H, n = meta["lstm_size"], meta["num_actions"]
        want = {"obs": [meta["obs_dim"]], "h_in": [H], "c_in": [H], "action": [], "h_out": [H], "c_out": [H],
                "logits": [n]}
        got = {v.name: _dims(v)[1:] for v in list(ins) + list(outs)}
        if got != want or outs[0].type.tensor_type.elem_type != onnx.TensorProto.INT64:
            raise ValueError(f"policy {path}: graph widths {got} (action int64 [batch] expected); its metadata "
                             f"says {want}")
    if num_classes is not None and P != num_classes:
        raise ValueError(f"policy {path}: trained for {P} classes, the scenario has {num_classes} "
                         f"(observation width {meta['obs_dim']}, expected {len(form.obs_layout(num_classes))})")
    if agent_interval_s is not None and not math.isclose(meta["agent_interval_s"], agent_interval_s, rel_tol=1e-6):
        raise ValueError(f"policy {path}: trained with an agent interval of {meta['agent_interval_s']} s, "
                         f"the scenario uses {agent_interval_s} s")
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    if network == "lstm":
        return OnnxRecurrentPolicy(session, meta, path), meta
    name_in = session.get_inputs()[0].name

    def fn(obs):
        obs = np.asarray(obs, np.float32)
        if obs.ndim != 2 or obs.shape[1] != meta["obs_dim"]:
            raise ValueError(f"policy {path}: observations must be [n, {meta['obs_dim']}], got {obs.shape}")
        return session.run(None, {name_in: obs})[0]

    return fn, meta


# the ops `to_onnx` writes, as jnp functions of their inputs (and attributes)
_JNP_OPS = {
    "Sub": jnp.subtract, "Div": jnp.divide, "Mul": jnp.multiply, "Add": jnp.add, "MatMul": jnp.matmul,
    "Tanh": jnp.tanh, "Relu": lambda a: jnp.maximum(a, 0.0), "Exp": jnp.exp, "Identity": lambda a: a,
    "Clip": jnp.clip, "Sigmoid": jax.nn.sigmoid,
    "ArgMax": lambda a, axis=0, keepdims=1: jnp.argmax(a, axis=axis, keepdims=bool(keepdims)),
}


def jax_policy(path, **checks):
    """The exported graph as a jittable JAX function, evaluated node by node from the
    file, so that the JAX env runs the very artefact that ns-3 judges.  For an "mlp"
    model fn(obs [..., obs_dim]) -> action; for an "lstm" model fn(obs [n, obs_dim],
    h [n, H], c [n, H]) -> (action [n] (int32), h_out, c_out, logits), the graph's
    outputs in order.  `checks` go to `load_checked`, which refuses a mismatched file
    first.  Returns (fn, metadata)."""
    import onnx
    from onnx import helper, numpy_helper

    _, meta = load_checked(path, **checks)
    graph = onnx.load(str(path)).graph
    unknown = sorted({n.op_type for n in graph.node} - set(_JNP_OPS))
    if unknown:
        raise ValueError(f"policy {path}: ops {unknown} are not part of the exported policy format")
    consts = {t.name: jnp.asarray(numpy_helper.to_array(t)) for t in graph.initializer}
    nodes = [(n.op_type, list(n.input), n.output[0], {a.name: helper.get_attribute_value(a) for a in n.attribute})
             for n in graph.node]
    names_in, names_out = [i.name for i in graph.input], [o.name for o in graph.output]

    def fn(*inputs):
        if len(inputs) != len(names_in):
            raise ValueError(f"policy {path}: the graph takes {names_in}, got {len(inputs)} arrays")
        values = dict(consts)
        values.update({n: jnp.asarray(x, jnp.float32) for n, x in zip(names_in, inputs)})
        for op, ins, out, attrs in nodes:
            values[out] = _JNP_OPS[op](*(values[i] for i in ins), **attrs)
        outs = tuple(values[n] for n in names_out)
        return outs[0] if len(outs) == 1 else outs

    return fn, meta
