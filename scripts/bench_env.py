#!/usr/bin/env python
"""Entry point of `rlbm_jax.cli.bench_env` (`--help` describes it)."""
import sys

from rlbm_jax.cli.bench_env import main

if __name__ == "__main__":
    sys.exit(main())
