"""Figures of docs/results.md: the missing-data curve and a latent heatmap around a missing segment."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from trep_edge.training.data import load_training_data
from trep_edge.training.encode import encode
from trep_edge.training.evaluation.pretrain import VARIANTS, Budget, pretrain

LABELS = {"trep": "T-Rep (ours)", "ts2vec": "TS2Vec ablation (ours)"}


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def longest_interior_gap(x: np.ndarray) -> tuple[int, int, int]:
    """(series, start, length) of the longest run of missing steps that neither starts nor ends a series."""
    best = (-1, 0, 0)
    for i, series in enumerate(np.isnan(x).any(axis=-1)):
        edges = np.diff(np.concatenate([[0], series.astype(np.int8), [0]]))
        for start, end in zip(np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)):
            if start > 0 and end < len(series) and end - start > best[2]:
                best = (i, int(start), int(end - start))
    if best[0] < 0:
        raise ValueError("no series has a missing segment inside it")
    return best


def top_variance_dims(z: np.ndarray, k: int = 15) -> np.ndarray:
    """Indices of the ``k`` representation dimensions with the highest variance over time (``z [T, F]``)."""
    return np.argsort(z.var(axis=0))[::-1][:k]


def latent_heatmap(out: str | Path, budget: Budget, data_root: str | None = None, name: str = "DodgerLoopGame") -> dict:
    """Pretrain both variants on ``UCR/<name>`` TRAIN; plot the series with the longest missing segment and the
    15 highest-variance dimensions of each model's representation of it, as the paper's figure."""
    data = load_training_data(f"UCR/{name}/{name}_TRAIN.ts", data_root)
    series, start, length = longest_interior_gap(data.x)
    plt = _pyplot()
    fig, axes = plt.subplots(1 + len(VARIANTS), 1, figsize=(10, 7), sharex=True, height_ratios=[1, 2, 2])
    axes[0].plot(data.x[series, :, 0], lw=1)
    axes[0].set_title(f"{name} TRAIN series {series}: {length} missing steps from {start}")
    info = {"series": series, "gap_start": start, "gap_length": length}
    for ax, variant in zip(axes[1:], VARIANTS):
        model = pretrain(data.x, variant, "time2vec", 128, budget)
        z = encode(model.encoder, data.x[series : series + 1], model.config.time_index)[0]
        dims = top_variance_dims(z)
        ax.imshow(z[:, dims].T, aspect="auto", cmap="viridis", interpolation="nearest")
        ax.set_ylabel(f"{LABELS[variant]}\n15 top-variance dims", fontsize=8)
        info[f"{variant}_train_seconds"] = round(model.seconds, 1)
    axes[0].axvspan(start - 0.5, start + length - 0.5, color="red", alpha=0.15)
    for ax in axes[1:]:
        for edge in (start - 0.5, start + length - 0.5):
            ax.axvline(edge, color="white", ls="--", lw=1)
    axes[-1].set_xlabel("time step")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return info


def missing_curve(rows: dict[str, dict], name: str, out: str | Path, paper: dict[float, float] | None = None) -> None:
    """Accuracy against the fraction of removed timesteps, one line per variant, from the results rows."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    for variant in VARIANTS:
        points = sorted(
            (row["fraction"], row["metrics"]["accuracy"])
            for key, row in rows.items()
            if key.startswith(f"missing/{name}@") and key.endswith(f"/{variant}")
        )
        if points:
            ax.plot(*zip(*points), marker="o", label=LABELS[variant])
    if paper:
        ax.plot(list(paper), list(paper.values()), "k*", label="T-Rep (paper)")
    ax.set_xlabel("fraction of timesteps removed (train and test)")
    ax.set_ylabel("test accuracy (TimeDim SVM)")
    ax.set_title(name)
    ax.set_ylim(0.5, 1.0)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
