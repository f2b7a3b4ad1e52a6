#!/usr/bin/env python
"""Entry point of `rlbm_jax.cli.bench_lfq` (`--help` describes it)."""
import sys

from rlbm_jax.cli.bench_lfq import main

if __name__ == "__main__":
    sys.exit(main())
