"""Deployable policies as ONNX models, and the checks that refuse a mismatched one.

`to_onnx` turns a policy directory (`rlbm_jax.policy` format) into one ONNX graph:
input `obs` float32 [batch, obs_dim] (batch dynamic), output `action` float32
[batch, act_dim], the deterministic action.  Observation normalisation and clipping
and the action map are inside the graph, so a consumer feeds raw observations.

The model's metadata (`metadata_props`) says what the graph expects and what its
output means, under keys prefixed `rlbm.`: `format`, `obs_dim`, `act_dim`,
`formulation` (the env id the policy was trained on), `obs_layout` (JSON list of the
observation's entry names, the formulation's), `action` (what the output sets),
`action_map`, `num_classes`, `agent_interval_s`, `flows_scale` and `env` (the JSON
the trainer recorded: scenario ranges, PPO config).

The graph is written with the `onnx` package's helpers: an MLP is a handful of
MatMul/Add/Tanh nodes.  (jax2onnx pins orbax-checkpoint below 0.11.37, which this
package's checkpoints do not accept.)
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import jax.numpy as jnp
import numpy as np

from rlbm_jax.env import formulations
from rlbm_jax.policy import BDP_LOG2_RANGE, POW2_LOG2_RANGE, bdp_columns, check_layout, read_policy

FORMAT = "rlbm-onnx-policy-v1"
OPSET = 17


def _require_onnx():
    try:
        import onnx  # noqa: F401
    except ImportError as e:  # pragma: no cover - depends on the install
        raise RuntimeError("ONNX export needs the 'export' extra: pip install -e '.[export]'") from e


def to_onnx(policy_dir, out_path, *, agent_interval_s: float | None = None, flows_scale: float = 10.0):
    """Write the policy in `policy_dir` as an ONNX model at `out_path`; returns the path."""
    _require_onnx()
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    layers, meta = read_policy(policy_dir)
    obs_dim, act_dim = int(meta["obs_dim"]), int(meta["act_dim"])
    if not meta.get("formulation") or meta.get("num_classes") is None:
        raise ValueError(f"export: {policy_dir} names no formulation and class count; it drives no RLBM env")
    form = formulations.get(meta["formulation"])
    num_classes = int(meta["num_classes"])
    check_layout(form.obs_layout(num_classes), meta["obs_layout"], f"export: formulation {form.id}")
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

    std = np.maximum(np.asarray(meta["obs_std"], np.float32), np.float32(1e-8))
    x = node("Sub", ["obs", const("obs_mean", meta["obs_mean"])], "centred")
    x = node("Div", [x, const("obs_std", std)], "normalised")
    if meta.get("obs_clip") is not None:
        c = float(meta["obs_clip"])
        x = node("Clip", [x, const("clip_lo", -c), const("clip_hi", c)], "clipped")
    for i, (w, b) in enumerate(layers):
        x = node("MatMul", [x, const(f"w{i}", w)], f"dense{i}_mul")
        x = node("Add", [x, const(f"b{i}", b)], f"dense{i}")
        if i < len(layers) - 1:
            x = node("Tanh", [x], f"tanh{i}") if meta["activation"] == "tanh" else node("Relu", [x], f"relu{i}")
    amap = meta["action_map"]
    if amap == "tanh01":  # (tanh(x) + 1) / 2
        t = node("Tanh", [x], "out_tanh")
        x = node("Mul", [node("Add", [t, const("one", 1.0)], "out_shift"), const("half", 0.5)], "action_raw")
    elif amap == "clip01":
        x = node("Clip", [x, const("zero", 0.0), const("one", 1.0)], "action_raw")
    elif amap in ("pow2", "bdp"):
        lo, hi = POW2_LOG2_RANGE if amap == "pow2" else BDP_LOG2_RANGE
        c = node("Clip", [x, const("log2_lo", lo), const("log2_hi", hi)], "out_clip")
        x = node("Exp", [node("Mul", [c, const("ln2", math.log(2.0))], "out_log")], "out_pow2")  # 2 ** clip(x)
        if amap == "bdp":  # alpha = clip(2 ** clip(x) / (beta * free * B/BDP), 0, 1), columns picked by MatMul
            beta_cols, free_col, bb_col = bdp_columns(meta["obs_layout"], act_dim)
            pick = np.zeros((obs_dim, act_dim), np.float32)
            pick[beta_cols, range(act_dim)] = 1.0
            one_col = lambda j: np.eye(obs_dim, 1, -j, dtype=np.float32)  # [obs_dim, 1] selecting column j
            beta = node("MatMul", ["obs", const("pick_beta", pick)], "obs_beta")
            free = node("MatMul", ["obs", const("pick_free", one_col(free_col))], "obs_free")
            bb = node("MatMul", ["obs", const("pick_bb", one_col(bb_col))], "obs_bb")
            room = node("Mul", [beta, node("Mul", [free, bb], "room_total")], "room_bdp")
            room = node("Clip", [room, const("room_lo", 1e-6), const("room_hi", np.inf)], "room_safe")
            x = node("Clip", [node("Div", [x, room], "alpha_raw"), const("zero", 0.0), const("one", 1.0)],
                     "action_raw")
    else:  # exp2: 2 ** (4 * (tanh(x) - 1)) = exp(4 ln2 * (tanh(x) - 1))
        t = node("Tanh", [x], "out_tanh")
        y = node("Mul", [node("Sub", [t, const("one", 1.0)], "out_shift"), const("four_ln2", 4.0 * math.log(2.0))],
                 "out_log")
        x = node("Exp", [y], "action_raw")
    nodes.append(helper.make_node("Identity", [x], ["action"], name="action"))

    graph = helper.make_graph(
        nodes, "rlbm_policy",
        [helper.make_tensor_value_info("obs", TensorProto.FLOAT, ["batch", obs_dim])],
        [helper.make_tensor_value_info("action", TensorProto.FLOAT, ["batch", act_dim])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="rlbm_jax")
    model.ir_version = min(model.ir_version, 9)  # readable by onnxruntime releases of the last two years
    props = {"format": FORMAT, "obs_dim": obs_dim, "act_dim": act_dim, "num_classes": num_classes,
             "formulation": form.id, "obs_layout": json.dumps(meta["obs_layout"]), "action": form.action.text,
             "action_map": amap,
             "agent_interval_s": float(agent_interval_s), "flows_scale": float(flows_scale),
             "env": json.dumps(meta.get("env") or {})}
    helper.set_model_props(model, {f"rlbm.{k}": str(v) for k, v in props.items()})
    onnx.checker.check_model(model, full_check=True)
    out_path = Path(out_path)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(out_path))
    return out_path


def load_checked(path, *, num_classes: int | None = None, agent_interval_s: float | None = None,
                 formulation: str | None = None):
    """Open an exported policy with onnxruntime after checking it against what the
    caller will feed it; returns (fn(obs [n, obs_dim]) -> action [n, act_dim], metadata).
    Raises ValueError, naming the mismatch, for a file that is not an ONNX model, lacks
    or contradicts the rlbm metadata (its layout must be its formulation's), or whose
    input/output widths, class count, agent interval or formulation do not match."""
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
    missing = [k for k in ("obs_dim", "act_dim", "num_classes", "formulation", "obs_layout", "action_map",
                           "agent_interval_s", "flows_scale") if k not in props]
    if missing:
        raise ValueError(f"policy {path}: metadata lacks {', '.join('rlbm.' + k for k in missing)}")
    try:
        meta = dict(props, obs_dim=int(props["obs_dim"]), act_dim=int(props["act_dim"]),
                    num_classes=int(props["num_classes"]), agent_interval_s=float(props["agent_interval_s"]),
                    flows_scale=float(props["flows_scale"]), obs_layout=json.loads(props["obs_layout"]),
                    env=json.loads(props.get("env", "{}")))
    except (ValueError, TypeError) as e:
        raise ValueError(f"policy {path}: malformed rlbm metadata ({e})") from None
    P = meta["num_classes"]
    try:
        form = formulations.get(meta["formulation"])
    except ValueError as e:
        raise ValueError(f"policy {path}: {e}") from None
    if (meta["obs_layout"] != list(form.obs_layout(P)) or meta["obs_dim"] != len(meta["obs_layout"])
            or meta["act_dim"] != int(np.prod(form.action_space(P).shape))):
        raise ValueError(f"policy {path}: metadata describes obs_dim {meta['obs_dim']}, act_dim {meta['act_dim']} "
                         f"and layout {meta['obs_layout']}, not formulation {form.id}'s for {P} classes")
    if formulation is not None and formulation != form.id:
        raise ValueError(f"policy {path}: trained on formulation {form.id}, the scenario uses {formulation}")
    ins, outs = model.graph.input, model.graph.output
    if len(ins) != 1 or len(outs) != 1:
        raise ValueError(f"policy {path}: expects one input and one output, has {len(ins)} and {len(outs)}")
    width_in = ins[0].type.tensor_type.shape.dim[-1].dim_value
    width_out = outs[0].type.tensor_type.shape.dim[-1].dim_value
    if width_in != meta["obs_dim"] or width_out != meta["act_dim"]:
        raise ValueError(f"policy {path}: graph takes width {width_in} and gives {width_out}; its metadata "
                         f"says {meta['obs_dim']} and {meta['act_dim']}")
    if num_classes is not None and P != num_classes:
        raise ValueError(f"policy {path}: trained for {P} classes, the scenario has {num_classes} "
                         f"(observation width {meta['obs_dim']}, expected {len(form.obs_layout(num_classes))})")
    if agent_interval_s is not None and not math.isclose(meta["agent_interval_s"], agent_interval_s, rel_tol=1e-6):
        raise ValueError(f"policy {path}: trained with an agent interval of {meta['agent_interval_s']} s, "
                         f"the scenario uses {agent_interval_s} s")
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    name_in = session.get_inputs()[0].name

    def fn(obs):
        obs = np.asarray(obs, np.float32)
        if obs.ndim != 2 or obs.shape[1] != meta["obs_dim"]:
            raise ValueError(f"policy {path}: observations must be [n, {meta['obs_dim']}], got {obs.shape}")
        return session.run(None, {name_in: obs})[0]

    return fn, meta


# the ops `to_onnx` writes, as jnp functions of their inputs
_JNP_OPS = {
    "Sub": jnp.subtract, "Div": jnp.divide, "Mul": jnp.multiply, "Add": jnp.add, "MatMul": jnp.matmul,
    "Tanh": jnp.tanh, "Relu": lambda a: jnp.maximum(a, 0.0), "Exp": jnp.exp, "Identity": lambda a: a,
    "Clip": jnp.clip,
}


def jax_policy(path, **checks):
    """The exported graph as a jittable JAX function fn(obs [..., obs_dim]) -> action,
    evaluated node by node from the file, so that the JAX env runs the very artefact
    that ns-3 judges.  `checks` go to `load_checked`, which refuses a mismatched file
    first.  Returns (fn, metadata)."""
    import onnx
    from onnx import numpy_helper

    _, meta = load_checked(path, **checks)
    graph = onnx.load(str(path)).graph
    unknown = sorted({n.op_type for n in graph.node} - set(_JNP_OPS))
    if unknown:
        raise ValueError(f"policy {path}: ops {unknown} are not part of the exported policy format")
    consts = {t.name: jnp.asarray(numpy_helper.to_array(t)) for t in graph.initializer}
    nodes = [(n.op_type, list(n.input), n.output[0]) for n in graph.node]
    name_in, name_out = graph.input[0].name, graph.output[0].name

    def fn(obs):
        values = dict(consts)
        values[name_in] = jnp.asarray(obs, jnp.float32)
        for op, ins, out in nodes:
            values[out] = _JNP_OPS[op](*(values[i] for i in ins))
        return values[name_out]

    return fn, meta
