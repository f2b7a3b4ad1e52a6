"""LFQ's cap network as an ONNX graph: input `obs` float32 [batch, 66] (the raw observation
of `LFQ-v0`, scaled inside the graph), output `cap` float32 [batch, 1], the cap in packets
clipped to the action's range.  MatMul/Add/LeakyRelu nodes; the metadata (`rlbm.` keys)
names the formulation, the observation's layout and what the output sets."""
from __future__ import annotations

from pathlib import Path

import jax.numpy as jnp
import numpy as np

from rlbm_jax import jsonio
from rlbm_jax.env import formulations
from rlbm_jax.env.formulations import lfq as lfqf
from rlbm_jax.lfq import study as S
from rlbm_jax.onnx_policy import save_model


def to_onnx(params, out_path, *, formulation: str = "LFQ-v0") -> Path:
    from onnx import TensorProto, helper

    form = formulations.get(formulation)
    p = params["params"]
    layers = sorted(p, key=lambda k: int(k.split("_")[-1]))
    inits, nodes = [], []

    def const(name, value):
        inits.append(helper.make_tensor(name, TensorProto.FLOAT, np.shape(value),
                                        np.asarray(value, np.float32).ravel().tolist()))
        return name

    x = "obs"
    nodes.append(helper.make_node("Mul", [x, const("inv_scale", 1.0 / S.OBS_SCALE)], ["x0"], name="scale"))
    x = "x0"
    for i, name in enumerate(layers):
        w, b = np.asarray(p[name]["kernel"]), np.asarray(p[name]["bias"])
        nodes.append(helper.make_node("MatMul", [x, const(f"w{i}", w)], [f"m{i}"], name=f"mul{i}"))
        nodes.append(helper.make_node("Add", [f"m{i}", const(f"b{i}", b)], [f"z{i}"], name=f"add{i}"))
        x = f"z{i}"
        if i < len(layers) - 1:
            nodes.append(helper.make_node("LeakyRelu", [x], [f"h{i}"], name=f"act{i}", alpha=0.01))
            x = f"h{i}"
    nodes.append(helper.make_node("Mul", [x, const("out_scale", np.float32(S.OUT_SCALE))], ["raw_cap"], name="unit"))
    nodes.append(helper.make_node("Clip", ["raw_cap", const("lo", np.float32(lfqf.CAP_RANGE_PKTS[0])),
                                           const("hi", np.float32(lfqf.CAP_RANGE_PKTS[1]))], ["cap"], name="clip"))
    d = len(S.OBS_SCALE)
    graph = helper.make_graph(nodes, "lfq_cap", [helper.make_tensor_value_info("obs", TensorProto.FLOAT, ["batch", d])],
                              [helper.make_tensor_value_info("cap", TensorProto.FLOAT, ["batch", 1])], inits)
    props = {"format": "rlbm-lfq-1", "obs_dim": d, "act_dim": 1, "formulation": form.id,
             "obs_layout": jsonio.dumps(list(form.obs_layout(1))), "action": form.action.text,
             "ticks_per_step": lfqf.LFQ_TICKS_PER_STEP, "pkts_per_tick": lfqf.LFQ_PKTS_PER_TICK}
    return save_model(graph, props, out_path)


def check(path, params, obs) -> float:
    """Largest |ONNX cap - JAX cap| (packets) over obs [N, 66]."""
    import onnxruntime as ort
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    got = sess.run(["cap"], {"obs": np.asarray(obs, np.float32)})[0][:, 0]
    want = np.clip(np.asarray(S.CapNet().apply(params, jnp.asarray(obs))), *lfqf.CAP_RANGE_PKTS)
    return float(np.max(np.abs(got - want)))


def formulation_of(alpha: float) -> str:
    """The formulation id of a network trained with the reward's queue price `alpha`."""
    return "LFQ-a10-v0" if float(alpha) == 10.0 else "LFQ-v0"


def export_run(run, seeds, formulation: str = "LFQ-v0") -> list:
    """policy_seed<s>.onnx for each of `seeds` of a train run (its trained_seed<s>.msgpack),
    each checked against the JAX network on 256 observations drawn over twice each signal's
    scale. Returns [(seed, path, largest difference in packets)]."""
    run = Path(run)
    out = []
    for seed in seeds:
        params = S.load_params(run / f"trained_seed{seed}.msgpack")
        path = to_onnx(params, run / f"policy_seed{seed}.onnx", formulation=formulation)
        rng = np.random.default_rng(seed)
        probe = rng.uniform(0.0, 1.0, (256, len(S.OBS_SCALE))) * S.OBS_SCALE * 2.0  # inputs over twice each scale
        out.append((seed, path, check(path, params, probe)))
    return out
