"""The declared studies: each module's `STUDY` (a `rlbm_jax.study.Study`) is one study of
`scripts/study.py`, named as its module."""
