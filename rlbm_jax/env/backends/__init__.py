"""Backends: the declared model (`model`) run by different engines behind one contract.

A backend advances a batch of `SimState`s by n ticks of the model `SimParams` describe and
returns the same state the reference would.  `jax` (`sim.tick` in a `lax.scan`) is the
reference and implements every declared value; `native` (`rlbm_jax.env.backends.native`, the same
tick in C++) implements what `model.PARAMS` lists for it.  Which values a backend
implements is declared once, in the model, and read here:

    run(state, params, n, backend="auto")   # the fastest available backend that implements
                                            # everything the params ask for
    run(state, params, n, backend="native") # refused, naming each value it lacks

`auto` (the default, or `$RLBM_JAX_BACKEND`, or a script's `--backend`) takes the first
backend of `AUTO_ORDER` that is available here (a compiler, a CPU) and implements the run;
a per-tick trace needs the jax backend.  A new backend is a `Backend` in `BACKENDS` and
its entries in the model's `backends` fields; whatever it does not declare, it refuses.

`fluid` (`rlbm_jax.env.backends.fluid`) is another model of the same scenarios, not
another engine of the tick: delay-differential equations of the long-lived flows, with
gradients.  It implements what the model lists for it and its own `limits` (no short
flows), runs whole scenarios (`simulate.run_scenario`, `scripts/simulate.py --backend
fluid`) and only when named: `auto` never takes it, and `run` (ticks) refuses it.
"""
from __future__ import annotations

import dataclasses
import os
from typing import Callable

from rlbm_jax.env import model, sim
from rlbm_jax.env.params import SimParams

BACKEND_VAR = "RLBM_JAX_BACKEND"


@dataclasses.dataclass(frozen=True)
class Backend:
    """One engine of the model.

    name       as `--backend` and `model.Param.backends` name it
    run        fn(state, params, num_ticks) -> state (a tick engine), or None
    available  fn(warn) -> whether it can run here (warn: say why not, once)
    traces     it can hand a per-tick trace back (`trace_fn`)
    ticks      it advances the packet model's `SimState` tick by tick (`run`); False: it
               runs whole scenarios with a state of its own (the fluid model:
               `simulate.run_scenario` asks it for the report), and `run` refuses it
    limits     fn(params) -> ["load=0.7 (why)", ...]: what it cannot run that the
               manifest's choices and sizes do not say (values of continuous parameters)
    """

    name: str
    run: Callable | None
    available: Callable
    traces: bool = False
    ticks: bool = True
    limits: Callable | None = None

    def missing(self, params: SimParams) -> list[str]:
        """What `params` ask for that this backend does not implement (empty: it runs them)."""
        return model.missing(self.name, params) + (self.limits(params) if self.limits else [])


def _jax_run(state, params, num_ticks):
    return sim.run(state, params, num_ticks)[0]


def _native_run(state, params, num_ticks):
    from rlbm_jax.env.backends import native

    return native.run(state, params, num_ticks)


def _native_available(warn: bool = False) -> bool:
    from rlbm_jax.env.backends import native

    return native.available(warn=warn)


def _fluid_limits(params):
    from rlbm_jax.env.backends import fluid

    return fluid.limits(params)


BACKENDS: dict[str, Backend] = {
    "jax": Backend("jax", _jax_run, lambda warn=False: True, traces=True),
    "native": Backend("native", _native_run, _native_available),
    # a different model (delay-differential equations of the long-flow scenarios): run only
    # when named, never by auto
    "fluid": Backend("fluid", None, lambda warn=False: True, ticks=False, limits=_fluid_limits),
}
AUTO_ORDER = ("native", "jax")  # fastest first, on a CPU (the same tick)
NAMES = ("auto", *BACKENDS)

_default: str | None = None


def _checked(name: str, where: str = "backend") -> str:
    if name not in NAMES:
        raise ValueError(f"unknown {where} {name!r}; choose one of {', '.join(NAMES)}")
    return name


def set_default(name: str) -> None:
    """The backend `run` uses when none is named, in this process ("auto", "jax", "native")."""
    global _default
    _default = _checked(name)


def default() -> str:
    """`set_default`'s choice, else `$RLBM_JAX_BACKEND`, else "auto"."""
    return _checked(_default or os.environ.get(BACKEND_VAR, "").strip() or "auto", f"{BACKEND_VAR} value")


def refusal(name: str, params: SimParams) -> str | None:
    """Why backend `name` will not run `params` (None: it will), naming each value it lacks."""
    return model.refusal(name, params, BACKENDS[name].missing(params) if name in BACKENDS else None)


def resolve(backend: str | None, params: SimParams, trace: bool = False, ticks: bool = False) -> str:
    """The backend that runs `params`: the one named (ValueError if it does not implement
    what they ask for, cannot trace, or with `ticks` does not advance the packet tick), or
    for "auto" the first of `AUTO_ORDER` that is available here and implements them (the
    reference always does)."""
    name = default() if backend is None else _checked(backend)
    if name != "auto":
        if (ticks or trace) and not BACKENDS[name].ticks:
            raise ValueError(f"the {name} backend runs whole scenarios with a state of its own, not the packet "
                             "tick: use it through simulate.run_scenario (scripts/simulate.py --backend "
                             f"{name}) or its own module (rlbm_jax.env.backends.{name})")
        if trace and not BACKENDS[name].traces:
            raise ValueError(f"the {name} backend runs whole stretches of ticks: a per-tick trace_fn needs "
                             "backend='jax'")
        why = refusal(name, params)
        if why:
            raise ValueError(why)
        return name
    for cand in AUTO_ORDER:
        b = BACKENDS[cand]
        if (b.traces or not trace) and not b.missing(params) and b.available(warn=True):
            return cand
    return model.REFERENCE_BACKEND


def run(state, params: SimParams, num_ticks: int, trace_fn=None, backend: str | None = None):
    """Advance `num_ticks` ticks (static) on `backend` (default `default()`): (state, trace),
    the trace being `trace_fn(state)` after every tick, stacked (jax backend only), or None.
    Every backend gives the reference's integer state and its float state within a few
    float32 roundings for params passed in as arguments (tests/test_native.py,
    tests/test_model.py)."""
    name = resolve(backend, params, trace=trace_fn is not None, ticks=True)
    if name == model.REFERENCE_BACKEND:
        return sim.run(state, params, num_ticks, trace_fn=trace_fn)
    return BACKENDS[name].run(state, params, num_ticks), None
