#!/usr/bin/env python
"""Entry point of `rlbm_jax.cli.train_apg` (`--help` describes it)."""
import sys

from rlbm_jax.cli.train_apg import main

if __name__ == "__main__":
    sys.exit(main())
