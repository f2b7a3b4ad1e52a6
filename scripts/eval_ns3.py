#!/usr/bin/env python
"""Entry point of `rlbm_jax.cli.eval_ns3` (`--help` describes it)."""
import sys

from rlbm_jax.cli.eval_ns3 import main

if __name__ == "__main__":
    sys.exit(main())
