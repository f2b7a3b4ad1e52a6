"""The TCP registry: a variant's position here is its `tcp_id` (`params.tcp_id`)."""
from rlbm_jax.env.tcp import bbr, cubic, dctcp, newreno, rate

VARIANTS = (newreno.VARIANT, cubic.VARIANT, dctcp.VARIANT, bbr.VARIANT, rate.VARIANT)
TCP_NAMES = tuple(v.name for v in VARIANTS)
NEWRENO, CUBIC, DCTCP, BBR, RATE = (TCP_NAMES.index(n) for n in ("newreno", "cubic", "dctcp", "bbr", "rate"))


def by_name(name: str):
    """The registered variant called `name` (ValueError naming the choices otherwise)."""
    if name not in TCP_NAMES:
        raise ValueError(f"unknown tcp {name!r}; registered: {', '.join(TCP_NAMES)}")
    return VARIANTS[TCP_NAMES.index(name)]
