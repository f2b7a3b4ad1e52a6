"""ABS (Adaptive Buffer Sizing) studied on Env 2 with a capacity trace: `study` (training mix,
baselines, evaluation) and `ns3` (the exported agent judged inside ns-3.37)."""
