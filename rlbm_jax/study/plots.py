"""Figures every study draws alike."""
from __future__ import annotations

from pathlib import Path

import numpy as np


def overall_bars(overall: dict, policies: list, panels, path: Path) -> None:
    """One bar panel per (field, title, scale) of `panels`: each policy's mean of `field` in
    `overall` ({policy: {field: (mean, s.e.)}}) with its standard error, the first policy (the
    agent) in red."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(panels), figsize=(4 * len(panels), 3.6))
    for ax, (k, title, scale) in zip(np.atleast_1d(axes), panels):
        m = [overall[p][k][0] * scale for p in policies]
        e = [np.nan_to_num(overall[p][k][1]) * scale for p in policies]
        ax.bar(range(len(policies)), m, yerr=e, color=["C3"] + ["C0"] * (len(policies) - 1), capsize=3)
        ax.set_xticks(range(len(policies)), policies, rotation=30, ha="right", fontsize=8)
        ax.set_title(title)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
