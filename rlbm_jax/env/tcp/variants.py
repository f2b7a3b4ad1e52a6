"""The TCP registry: a variant's position here is its `tcp_id` (`params.tcp_id`)."""
from rlbm_jax.env.tcp import cubic, dctcp, newreno

VARIANTS = (newreno.VARIANT, cubic.VARIANT, dctcp.VARIANT)
TCP_NAMES = tuple(v.name for v in VARIANTS)
NEWRENO, CUBIC, DCTCP = (TCP_NAMES.index(n) for n in ("newreno", "cubic", "dctcp"))


def by_name(name: str):
    """The registered variant called `name` (ValueError naming the choices otherwise)."""
    if name not in TCP_NAMES:
        raise ValueError(f"unknown tcp {name!r}; registered: {', '.join(TCP_NAMES)}")
    return VARIANTS[TCP_NAMES.index(name)]
