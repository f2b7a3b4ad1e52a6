"""The native backend: the whole tick as one C++ function per env, called through
`jax.ffi` once per `run` (every tick of every env of the batch in one call).

`run(state, params, num_ticks)` is a drop-in for `sim.run(state, params, num_ticks)[0]` (the JAX tick):
same state in, same state out, computed by `tick.cc` with real branches (only the flows
with work in a tick are touched) instead of XLA's every-path vector code.  The JAX tick
in `sim.py` stays the reference: `tests/test_native.py` runs both on randomised params
and compares every integer of the state exactly.

The kernel is compiled on first use with the system's C++ compiler (`c++`, or `$CXX`)
against XLA's FFI headers that ship with jaxlib, and cached under
`$RLBM_JAX_CACHE` (default `~/.cache/rlbm_jax`), keyed by the source, the layout and the
JAX version.  `available()` says whether it can be used here; where it cannot (no
compiler, a TPU or GPU array), `backends.run(..., backend="auto")` falls back to the JAX tick.

Layout: the state's leaves are flattened (`jax.tree.flatten`) into one int32 buffer
(int32, uint32 bit-cast, bool as 0/1) and one float32 buffer; the parameters the tick
reads, with the derived quantities computed exactly as the JAX tick computes them, into
another pair.  The field order is generated into `layout.h` from these Python
structures, so the C++ code names every field and cannot drift from them silently.
"""
from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import warnings
from importlib import resources
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from rlbm_jax.env import model, tcp, traffic
from rlbm_jax.env.switch import buffer, disciplines, flowqueue
from rlbm_jax.env.switch.disciplines import fq_codel, red

TARGET = "rlbm_native_run"
# the sizes the kernel's fixed arrays hold (declared in `model` as this backend's bounds)
MAX_PKTS_PER_TICK = model.BY_NAME["pkts_per_tick"].implemented("native")
MAX_CLASSES = model.BY_NAME["num_classes"].implemented("native")
MAX_SENDERS = model.BY_NAME["num_senders"].implemented("native")


class NativeUnavailable(RuntimeError):
    """The native backend cannot run here (no compiler, or the build failed)."""


# ---------------------------------------------------------------------------------------
# layout
# ---------------------------------------------------------------------------------------

def _leaf_name(path) -> str:
    return "_".join(str(getattr(k, "name", getattr(k, "key", k))) for k in path)


def _int_like(dtype) -> bool:
    return dtype != jnp.float32


def state_leaves(state):
    """[(name, leaf)] of a SimState in flatten order."""
    flat, _ = jax.tree_util.tree_flatten_with_path(state)
    return [(_leaf_name(p), x) for p, x in flat]


# the choice leaves the tick itself reads (listed by name in `param_leaves`)
_READ_CHOICES = ("policy_id", "scheduler_id", "tcp_id", "delayed_ack", "rto_recovery_id", "rtt_samples_id", "rto_rearm_id",
                 "cubic_fast_convergence", "hystart")


def param_leaves(params):
    """[(name, value)]: everything the tick reads from the params, derived quantities
    written as the JAX tick writes them (so that both compute the same float32)."""
    p = params
    tick_s = p.tick_s
    per_tick = p.access_rate_bps * tick_s / p.data_pkt_bits
    i32 = lambda x: jnp.asarray(x, jnp.int32)
    f32 = lambda x: jnp.asarray(x, jnp.float32)
    return [
        # int32
        ("sink_delay_ticks", i32(p.sink_delay_ticks)),
        ("ack_delay_ticks", i32(p.ack_delay_ticks)),
        ("buffer_pkts", i32(p.buffer_pkts)),
        ("class_cap_pkts", i32(p.class_cap_pkts)),
        ("policy_id", i32(p.policy_id)),
        ("scheduler_id", i32(p.scheduler_id)),
        ("tcp_id", i32(p.tcp_id)),
        ("delayed_ack", i32(p.delayed_ack)),
        ("dupthresh", i32(p.dupthresh)),
        ("rto_recovery_id", i32(p.rto_recovery_id)),
        ("rtt_samples_id", i32(p.rtt_samples_id)),
        ("rto_rearm_id", i32(p.rto_rearm_id)),
        ("cubic_fast_convergence", i32(p.cubic_fast_convergence)),
        ("hystart", i32(p.hystart)),
        ("hystart_min_samples", i32(p.hystart_min_samples)),
        ("syn_wait_ticks", jnp.ceil(p.syn_timeout_s / tick_s).astype(jnp.int32)),
        ("drain_win_ticks", jnp.maximum(jnp.round(p.base_rtt_s / tick_s).astype(jnp.int32), 1)),
        ("train_gap_ticks", jnp.maximum(1, jnp.floor(p.hystart_ack_delta_s / tick_s)).astype(jnp.int32)),
        ("mss_i", p.mss_bytes.astype(jnp.int32)),
        ("fq_quantum_bytes", i32(p.fq_quantum_bytes)),
        ("fq_pkt_bytes", i32(fq_codel.pkt_bytes(p))),
        # every declared model choice's leaf not named above (the kernel refuses a value it lacks)
        *[(c.field, i32(getattr(p, c.field))) for c in model.CHOICES if c.field not in _READ_CHOICES],
        # float32
        ("tick_s", f32(tick_s)),
        ("warmup_s", f32(p.warmup_s)),
        ("bottleneck_delay_s", f32(p.bottleneck_delay_s)),
        ("bottleneck_rate_bps", f32(p.bottleneck_rate_bps)),
        ("base_rtt_s", f32(p.base_rtt_s)),
        ("access_offset_s", f32(p.access_offset_s)),
        ("data_pkt_bits", f32(p.data_pkt_bits)),
        ("ser_s", f32(p.data_pkt_bits / p.bottleneck_rate_bps)),
        ("bdp_pkts", f32(p.bdp_pkts)),
        ("mss_bytes", f32(p.mss_bytes)),
        ("credit_per_tick", f32(per_tick)),
        ("credit_cap", f32(jnp.maximum(jnp.ceil(per_tick), 1.0))),
        ("arrival_rate_per_s", f32(traffic.arrival_rate_per_s(p))),
        ("arrival_stop_s", f32(p.arrival_stop_s)),
        ("initial_cwnd_pkts", f32(p.initial_cwnd_pkts)),
        ("min_rto_s", f32(p.min_rto_s)),
        ("max_rto_s", f32(p.max_rto_s)),
        ("rto_granularity_s", f32(p.rto_granularity_s)),
        ("cubic_beta", f32(p.cubic_beta)),
        ("cubic_c", f32(p.cubic_c)),
        ("hystart_low_window_pkts", f32(p.hystart_low_window_pkts)),
        ("hystart_delay_min_s", f32(p.hystart_delay_min_s)),
        ("hystart_delay_max_s", f32(p.hystart_delay_max_s)),
        ("alpha", f32(p.alpha)),
        ("beta", f32(p.beta)),
        ("class_threshold_bytes", f32(p.class_threshold_bytes)),
        ("cdf_size_bytes", f32(p.cdf_size_bytes)),
        ("cdf_prob", f32(p.cdf_prob)),
        # RED and ARED (switch/disciplines/red.py)
        ("red_min_th_pkts", f32(p.red_min_th_pkts)),
        ("red_max_th_pkts", f32(p.red_max_th_pkts)),
        ("red_max_p", f32(p.red_max_p)),
        ("red_weight", f32(p.red_weight)),
        ("red_link_pkts_per_s", f32(p.bottleneck_rate_bps / p.data_pkt_bits)),
        ("ared_bottom", f32(jnp.minimum(red.ARED_BOTTOM, p.data_pkt_bits * red.ARED_RTT_S / p.bottleneck_rate_bps))),
    ]


def _offsets(leaves):
    """Offset of each leaf in its buffer (ints and floats each counted from 0)."""
    off, end = [], {True: 0, False: 0}
    for _, x in leaves:
        kind = _int_like(x.dtype)
        off.append(end[kind])
        end[kind] += int(np.prod(x.shape, dtype=np.int64))
    return np.asarray(off, np.int64)


def _pack(leaves):
    ints = [(x.view(jnp.int32) if x.dtype == jnp.uint32 else x.astype(jnp.int32)).reshape(-1)
            for _, x in leaves if _int_like(x.dtype)]
    floats = [x.reshape(-1) for _, x in leaves if not _int_like(x.dtype)]
    cat = lambda xs, dt: jnp.concatenate(xs) if xs else jnp.zeros((0,), dt)
    return cat(ints, jnp.int32), cat(floats, jnp.float32)


def _unpack(template_leaves, offsets, treedef, si, sf):
    out = []
    for (_, x), o in zip(template_leaves, offsets):
        n = int(np.prod(x.shape, dtype=np.int64))
        if not _int_like(x.dtype):
            out.append(sf[o:o + n].reshape(x.shape))
            continue
        v = si[o:o + n].reshape(x.shape)
        out.append(v.view(jnp.uint32) if x.dtype == jnp.uint32 else (v > 0 if x.dtype == jnp.bool_ else v))
    return jax.tree_util.tree_unflatten(treedef, out)


def layout_header() -> str:
    """layout.h: enums naming every state leaf, flow-table field and parameter leaf."""
    from rlbm_jax.env import sim
    from rlbm_jax.env.params import make_params

    p = make_params(num_classes=2)
    state = jax.eval_shape(lambda: sim.init(jax.random.PRNGKey(0), p))
    s_names = [n for n, _ in state_leaves(state)]
    p_names = [n for n, _ in param_leaves(p)]
    enum = lambda prefix, names: ("enum {\n" + "".join(f"  {prefix}{n},\n" for n in names)
                                  + f"  {prefix}COUNT\n}};\n")
    return ("// generated by rlbm_jax/env/backends/native/__init__.py: do not edit\n#pragma once\n"
            + enum("L_", s_names) + enum("PL_", p_names)
            + enum("FI_", tcp.BASE_INT_FIELDS) + enum("FF_", tcp.BASE_FLOAT_FIELDS)  # (native runs no optional variant)
            + enum("TCP_", tcp.TCP_NAMES)  # the TCP registry's ids, and which of them tick.cc implements
            + "constexpr bool TCP_NATIVE[] = {" + ", ".join("true" if v.native else "false" for v in tcp.VARIANTS)
            + "};\n" + choice_tables() + discipline_tables())


def _c_name(value) -> str:
    return "".join(ch if ch.isalnum() else "_" for ch in str(value).lower())


def discipline_tables() -> str:
    """The discipline registry's ids for layout.h (`D_red`, `D_fq`) and each policy's discipline
    (`POLICY_AQM[policy code]`, `buffer.Policy.aqm`), so the kernel keeps no copy of either."""
    ids = "".join(f"  D_{d.key} = {i},\n" for i, d in enumerate(disciplines.DISCIPLINES))
    of = [disciplines.index(buffer.discipline(name).name) for name in model.BY_NAME["policy"].values()]
    return "enum {\n" + ids + "};\nconstexpr int POLICY_AQM[] = {" + ", ".join(map(str, of)) + "};\n"


def choice_tables() -> str:
    """Every declared model choice for layout.h: an enum of its values' leaf codes
    (`C_prr_ns_3_37`), and a table the kernel checks every env's choice leaves against,
    refusing any value this backend does not implement (`model.Param.backends`)."""
    out, rows = [], []
    for c in model.CHOICES:
        vals = c.values()
        codes = [int(v) for v in vals] if c.keeps_value else list(range(len(vals)))
        ok = c.implemented("native")
        out.append("enum {\n" + "".join(f"  C_{c.name}_{_c_name(v)} = {k},\n" for v, k in zip(vals, codes)) + "};\n")
        out.append(f"constexpr int32_t CODES_{c.name}[] = {{{', '.join(map(str, codes))}}};\n")
        out.append(f"constexpr bool NATIVE_{c.name}[] = {{{', '.join('true' if v in ok else 'false' for v in vals)}}};\n")
        rows.append(f'  {{PL_{c.field}, {len(vals)}, CODES_{c.name}, NATIVE_{c.name}, "{c.name}"}},\n')
    return ("".join(out) + "struct ChoiceCheck { int leaf; int n; const int32_t* codes; const bool* native; "
            "const char* name; };\nconstexpr ChoiceCheck CHOICE_CHECKS[] = {\n" + "".join(rows) + "};\n")


# ---------------------------------------------------------------------------------------
# build and registration
# ---------------------------------------------------------------------------------------

_lock = threading.Lock()
_registered = False
_error: str | None = None


def cache_dir() -> Path:
    return Path(os.environ.get("RLBM_JAX_CACHE", Path.home() / ".cache" / "rlbm_jax")) / "native"


def _compiler() -> str | None:
    for c in (os.environ.get("CXX"), "c++", "g++", "clang++"):
        if c and shutil.which(c):
            return c
    return None


def build(verbose: bool = False) -> Path:
    """Compile tick.cc into a shared library (cached); returns its path."""
    cxx = _compiler()
    if cxx is None:
        raise NativeUnavailable("no C++ compiler found (set CXX, or install g++)")
    src = resources.files("rlbm_jax.env.backends.native").joinpath("tick.cc").read_text()
    header = layout_header()
    flags = ["-O3", "-std=c++17", "-shared", "-fPIC", "-pthread", "-ffp-contract=off", "-fno-fast-math"]
    key = hashlib.sha256("\0".join([src, header, jax.__version__, cxx, *flags]).encode()).hexdigest()[:16]
    out = cache_dir() / key / "rlbm_native.so"
    if out.exists():
        return out
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=out.parent) as tmp:
            tmp = Path(tmp)
            (tmp / "layout.h").write_text(header)
            (tmp / "tick.cc").write_text(src)
            cmd = [cxx, *flags, f"-I{jax.ffi.include_dir()}", f"-I{tmp}", str(tmp / "tick.cc"), "-o",
                   str(tmp / "lib.so")]
            print(f"rlbm_jax: compiling the native tick into {out.parent} (once)", file=sys.stderr, flush=True)
            if verbose:
                print(" ".join(cmd), file=sys.stderr)
            res = subprocess.run(cmd, capture_output=True, text=True)
            if res.returncode != 0:
                raise NativeUnavailable(f"compiling the native tick failed:\n{res.stderr[-4000:]}")
            os.replace(tmp / "lib.so", out)  # atomic: concurrent builds agree
    except OSError as e:
        raise NativeUnavailable(f"cannot build the native tick in {out.parent} ({e}); set RLBM_JAX_CACHE to a "
                                "writable folder") from e
    return out


def _register() -> None:
    global _registered, _error
    with _lock:
        if _registered:
            return
        if _error is not None:
            raise NativeUnavailable(_error)
        try:
            if not hasattr(jax, "ffi"):
                raise NativeUnavailable(f"JAX {jax.__version__} has no jax.ffi (the native tick needs JAX >= 0.4.35)")
            lib = ctypes.cdll.LoadLibrary(str(build()))
            jax.ffi.register_ffi_target(TARGET, jax.ffi.pycapsule(lib.RlbmNativeRun), platform="cpu")
        except OSError as e:  # the library would not load
            _error = f"loading the native tick failed: {e}"
            raise NativeUnavailable(_error) from e
        except NativeUnavailable as e:
            _error = str(e)
            raise
        _registered = True


def available(warn: bool = False) -> bool:
    """Whether the native backend can run here (builds it on first call); with `warn`, say
    why not, once."""
    global _warned
    if jax.default_backend() != "cpu":
        return False
    try:
        _register()
        return True
    except NativeUnavailable as e:
        if warn and not _warned:
            _warned = True
            warnings.warn(f"the native backend is unavailable, the JAX tick runs instead: {e}", stacklevel=3)
        return False


_warned = False


def supports(params) -> bool:
    """Whether the native tick implements what `params` ask for (`check_params` says why not)."""
    try:
        check_params(params)
    except ValueError:
        return False
    return True


def _concrete(x) -> bool:
    try:
        np.asarray(x)
        return True
    except Exception:
        return False


THREADS_VAR = "RLBM_JAX_NATIVE_THREADS"


def threads() -> int:
    """Threads one native call spreads its batch over: `$RLBM_JAX_NATIVE_THREADS` ('auto' or
    a number), else one per core this process may use.  Envs are independent, so results
    never depend on it."""
    text = os.environ.get(THREADS_VAR, "").strip().lower()
    if text in ("", "auto"):
        return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1))
    if not text.isdigit() or int(text) < 1:
        raise ValueError(f"{THREADS_VAR} must be 'auto' or a positive whole number, got {text!r}")
    return int(text)


def check_params(params) -> None:
    """Refuse, naming each value, what the native tick does not implement: the params' static
    record of model choices against the model's manifest (`model.missing`), and where the
    leaves are concrete, the choices they hold (a leaf edited by hand).  The kernel checks
    the leaves once more itself."""
    from rlbm_jax.env.params import choices_of

    record = params.model_choices
    if all(_concrete(getattr(params, c.field)) for c in model.CHOICES):
        record = model.merge_choices(record, choices_of(params))
    why = model.refusal("native", params.replace(model_choices=record))
    if why:
        raise ValueError(why)


def run(state, params, num_ticks: int):
    """`num_ticks` ticks of the native tick: what `sim.run(state, params, num_ticks)[0]`
    returns.  Works under `jit` and `vmap` (a batch is one call)."""
    if jax.default_backend() != "cpu":
        raise NativeUnavailable(f"the native tick runs on the CPU, and JAX's default backend is "
                                f"{jax.default_backend()}: use backend='jax' (or 'auto')")
    _register()
    check_params(params)
    if num_ticks == 0:
        return state
    s_leaves = state_leaves(state)
    _, treedef = jax.tree_util.tree_flatten(state)
    p_leaves = param_leaves(params)
    s_off = _offsets(s_leaves)
    p_off = _offsets(p_leaves)
    si, sf = _pack(s_leaves)
    pi, pf = _pack(p_leaves)
    dims = np.asarray([params.num_flow_slots, params.num_classes, params.num_senders, params.queue_capacity_pkts,
                       params.delay_line_ticks, params.pkts_per_tick, params.event_slots,
                       params.completion_log_size, params.interval_log_size, params.cdf_size_bytes.shape[-1],
                       flowqueue.num_queues(params), max(params.flow_queue_capacity_pkts, 1)],
                      np.int64)
    call = jax.ffi.ffi_call(TARGET, (jax.ShapeDtypeStruct(si.shape, jnp.int32),
                                     jax.ShapeDtypeStruct(sf.shape, jnp.float32)),
                            vmap_method="broadcast_all", input_output_aliases={0: 0, 1: 1})
    si, sf = call(si, sf, pi, pf, n_ticks=np.int64(num_ticks), threads=np.int64(threads()), dims=dims,
                  s_off=s_off, p_off=p_off)
    return _unpack(s_leaves, s_off, treedef, si, sf)
