"""Learned time-embedding modules h_ψ(t) (TREP.md §2.4), each normalised onto the simplex.

Every module maps ``t: [B, T]`` to ``τ: [B, T, K]`` with ``τ = σ(h(t)) / Σ_k σ(h(t))_k``: positive and summing to
one, so the JSD pretext task can treat τ as a distribution.
"""
from __future__ import annotations

import math

import torch
from torch import nn

KINDS = ("time2vec", "mlp", "rbf", "none")


SIMPLEX_FLOOR = 1e-6


def to_simplex(h: torch.Tensor) -> torch.Tensor:
    """Map raw embeddings onto the simplex along the last axis: sigmoid, then divide by the sum.

    The sigmoid is floored at SIMPLEX_FLOOR because it saturates to exactly 0 in float32 for large |h| (an MLP
    fed t in the hundreds gets there), and a zero entry makes the JSD target NaN.
    """
    s = torch.sigmoid(h).clamp_min(SIMPLEX_FLOOR)
    return s / s.sum(dim=-1, keepdim=True)


class Time2Vec(nn.Module):
    """Time2Vec (Kazemi et al. 2019): one linear component and K-1 periodic ones, ``[ω0 t + φ0, sin(ωk t + φk)]``."""

    def __init__(self, dims: int) -> None:
        super().__init__()
        if dims < 2:
            raise ValueError(f"time2vec needs at least 2 dims (one linear, one periodic), got {dims}")
        self.omega = nn.Parameter(torch.randn(dims))
        self.phi = nn.Parameter(torch.randn(dims))

    def forward(self, t: torch.Tensor) -> torch.Tensor:
        """Return τ ``[B, T, K]`` for time indices ``t`` ``[B, T]``."""
        h = t.unsqueeze(-1) * self.omega + self.phi
        return to_simplex(torch.cat([h[..., :1], torch.sin(h[..., 1:])], dim=-1))


class MLPTimeEmbedding(nn.Module):
    """Two-layer ReLU MLP from the scalar time index: ``Linear(1, h) → ReLU → Linear(h, K)``."""

    def __init__(self, dims: int, hidden: int = 64) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(1, hidden), nn.ReLU(), nn.Linear(hidden, dims))

    def forward(self, t: torch.Tensor) -> torch.Tensor:
        """Return τ ``[B, T, K]`` for time indices ``t`` ``[B, T]``."""
        return to_simplex(self.net(t.unsqueeze(-1)))


class RBFTimeEmbedding(nn.Module):
    """K Gaussian radial basis features ``exp(-(t-μk)² / (2 sk²))`` with learned centres and widths.

    Centres start evenly spread over ``[0, time_scale]`` and widths at the spacing between them, so at
    initialisation every t in the expected range lights up about two bumps instead of none.
    """

    def __init__(self, dims: int, time_scale: float) -> None:
        super().__init__()
        if time_scale <= 0:
            raise ValueError(f"rbf time_scale must be positive, got {time_scale}")
        self.centres = nn.Parameter(torch.linspace(0.0, float(time_scale), dims))
        spacing = float(time_scale) / max(dims - 1, 1)
        self.log_width = nn.Parameter(torch.full((dims,), math.log(max(spacing, 1e-3))))

    def forward(self, t: torch.Tensor) -> torch.Tensor:
        """Return τ ``[B, T, K]`` for time indices ``t`` ``[B, T]``."""
        width = torch.exp(self.log_width)
        h = torch.exp(-((t.unsqueeze(-1) - self.centres) ** 2) / (2 * width**2))
        return to_simplex(h)


def build_time_embedding(kind: str, dims: int, time_scale: float) -> nn.Module | None:
    """Build the module named ``kind`` (one of KINDS); ``none`` gives no module (the TS2Vec ablation)."""
    if kind == "time2vec":
        return Time2Vec(dims)
    if kind == "mlp":
        return MLPTimeEmbedding(dims)
    if kind == "rbf":
        return RBFTimeEmbedding(dims, time_scale)
    if kind == "none":
        return None
    raise ValueError(f"time embedding {kind!r} is unknown: choose one of {', '.join(KINDS)}")
