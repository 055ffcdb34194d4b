"""Pretext-task heads G1 (JSD prediction) and G2 (time-embedding-conditioned forecasting)."""
from __future__ import annotations

from torch import nn


class PretextHeads(nn.Module):
    """G1: ``F → h → 1``; G2: ``F + K → h → F`` with a linear output (representations can be negative)."""

    def __init__(self, repr_dims: int, te_dims: int, hidden: int = 128) -> None:
        super().__init__()
        self.divergence = nn.Sequential(nn.Linear(repr_dims, hidden), nn.ReLU(), nn.Linear(hidden, 1))
        self.forecast = nn.Sequential(
            nn.Linear(repr_dims + te_dims, hidden), nn.ReLU(), nn.Linear(hidden, repr_dims)
        )
