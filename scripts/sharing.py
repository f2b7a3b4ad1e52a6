#!/usr/bin/env python
"""Entry point of `rlbm_jax.cli.sharing` (`--help` describes it)."""
import sys

from rlbm_jax.cli.sharing import main

if __name__ == "__main__":
    sys.exit(main())
