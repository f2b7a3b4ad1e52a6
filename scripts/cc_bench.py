#!/usr/bin/env python
"""Entry point of `rlbm_jax.cli.cc_bench` (`--help` describes it)."""
import os
import sys

os.environ.setdefault("RLBM_JAX_HOST_DEVICES", "auto")  # envs over every core: rlbm_jax.devices

from rlbm_jax.cli.cc_bench import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
