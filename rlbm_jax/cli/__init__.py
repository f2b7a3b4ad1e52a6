"""Command-line entry points: `scripts/<name>.py` runs `rlbm_jax.cli.<name>.main`.

Shared here: the help format (every option shows its default) and the translation of
errors that name a library field (`buffer_per_class_pkts`, `PPOConfig.num_envs`) into the
option a user typed (`--buffer-pkts`, `--num-envs`).
"""
from __future__ import annotations

import argparse
import re
import sys


class HelpFormatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """The module docstring as written, and "(default: X)" after every option's help."""


def parser(doc: str, prog: str | None = None) -> argparse.ArgumentParser:
    return argparse.ArgumentParser(description=doc, formatter_class=HelpFormatter, prog=prog)


def flag_of(ap: argparse.ArgumentParser) -> dict:
    """{dest: its first long option} of every option of `ap`."""
    out = {}
    for action in ap._actions:
        longs = [o for o in action.option_strings if o.startswith("--")]
        if longs and action.dest not in out:
            out[action.dest] = longs[0]
    return out


def name_flags(message: str, fields: dict) -> str:
    """`message` with each library field name in `fields` ({field: "--flag"}) replaced by
    its option: the error a user can act on.  A name with an underscore (or written
    `PPOConfig.name`) is replaced wherever it stands; a plain word ("load") only where it
    is the subject of the complaint ("load must ...", "load range ..."), so that prose
    ("nothing to resume") is left alone."""
    for field in sorted(fields, key=len, reverse=True):
        flag = fields[field]
        name = rf"(?<![\w.-])(?:PPOConfig\.)?{re.escape(field)}(?![\w-])"
        message = re.sub(rf"(?<![\w-])PPOConfig\.{re.escape(field)}(?![\w-])", flag, message)
        if "_" in field:
            message = re.sub(name, flag, message)
        else:
            message = re.sub(name + r"(?=\s+(?:must|range|has)\b)", flag, message)
    return message


# the simulator's TCP-model choices (rlbm_jax.env.params), as flags of the scripts that
# build the thesis scenario; unset, a flag keeps the simulator's default (ns-3.37's)
MODEL_FLAGS = ("rto_recovery", "rtt_samples", "prr", "prr_ssrb", "ecn_cwr")


def add_model_args(ap) -> None:
    """--rto-recovery, --rtt-samples, --prr, --prr-ssrb, --ecn-cwr (`model_kw` reads them back)."""
    from rlbm_jax.env import params as P

    g = ap.add_argument_group("TCP model (unset: the simulator's default, which follows ns-3.37)")
    g.add_argument("--rto-recovery", choices=list(P.RTO_RECOVERY_NAMES), default=None,
                   help="after a timeout resend everything not yet ACKed or SACKed (go-back-n) or only the losses "
                        "(sack)")
    g.add_argument("--rtt-samples", choices=list(P.RTT_SAMPLES_NAMES), default=None,
                   help="RTT samples from cumulative ACKs of data sent once (cumulative) or every ACK (every-ack)")
    g.add_argument("--prr", choices=list(P.PRR_NAMES), default=None,
                   help="PRR's send count in fast recovery and CWR: exact (RFC 6937), or as ns-3.37 computes it, "
                        "whose 32-bit product wraps for windows above ~65 kB and silences the sender until its "
                        "flight falls to ssthresh (ns-3.37)")
    g.add_argument("--prr-ssrb", choices=list(P.PRR_SSRB_NAMES), default=None,
                   help="PRR once the flight is at or below ssthresh: every ACK sends what it delivered plus one "
                        "segment (rfc6937), or the extra segment only on an ACK of retransmitted data (ns-3.37, "
                        "as Linux)")
    g.add_argument("--ecn-cwr", choices=list(P.ECN_CWR_NAMES), default=None,
                   help="with ECN, which states an echoed CE mark cuts the window from: OPEN only (open), or every "
                        "state but CWR, so that an echo during fast recovery or after a timeout cuts again and the "
                        "receiver echoes across a loss's cut (ns-3.37)")


def model_kw(a, complete: bool = False) -> dict:
    """The TCP-model flags that were given, as make_params keyword arguments; with
    `complete`, every choice, the simulator's default where a flag is unset."""
    import inspect

    from rlbm_jax.env.params import make_params

    out = {k: getattr(a, k) for k in MODEL_FLAGS if getattr(a, k, None) is not None}
    if complete:
        defaults = inspect.signature(make_params).parameters
        out = {k: out.get(k, defaults[k].default) for k in MODEL_FLAGS}
    return out


def add_backend_arg(ap) -> None:
    """--backend: which tick runs the simulator (`apply_backend` sets it)."""
    from rlbm_jax.env import sim

    ap.add_argument("--backend", choices=list(sim.BACKENDS), default=None,
                    help="the simulator's tick: native (C++, compiled on first use), jax (the reference), or auto "
                         "(native where it can run); unset: $RLBM_JAX_BACKEND, else auto")


def apply_backend(a) -> str:
    """Make --backend the simulator's default for this process; returns the backend in force."""
    from rlbm_jax.env import sim

    if getattr(a, "backend", None):
        sim.set_default_backend(a.backend)
    return sim.default_backend()


def fail(prog: str, message: str, code: int = 2) -> int:
    print(f"{prog}: error: {message}", file=sys.stderr)
    return code
