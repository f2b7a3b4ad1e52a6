#!/usr/bin/env python
"""Entry point of `rlbm_jax.cli.simulate` (`--help` describes it)."""
import sys

from rlbm_jax.cli.simulate import main

if __name__ == "__main__":
    sys.exit(main())
