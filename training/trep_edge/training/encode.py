"""Batched inference with a trained encoder: whole series, and the streaming sliding-window protocol."""
from __future__ import annotations

import numpy as np
import torch

from trep_edge.runtime.core.time_index import TimeIndex, parse_time_index, time_index

from trep_edge.training.encoder import TRepEncoder


@torch.no_grad()
def encode(
    encoder: TRepEncoder,
    x: np.ndarray,
    convention: TimeIndex | str = "relative",
    batch_size: int = 64,
    start: int = 0,
) -> np.ndarray:
    """Per-timestep representations ``[N, T, F]`` of whole series ``x [N, T, C]`` (nothing masked but NaNs)."""
    conv = parse_time_index(convention) if isinstance(convention, str) else convention
    encoder.eval()
    device = next(encoder.parameters()).device
    n, length, _ = x.shape
    out = []
    for lo in range(0, n, batch_size):
        xb = torch.as_tensor(x[lo : lo + batch_size], dtype=torch.float32, device=device)
        mask = torch.ones(xb.shape[:2], dtype=torch.bool, device=device)
        t = torch.as_tensor(time_index(conv, np.full(len(xb), start), length), device=device)
        out.append(encoder(xb, mask, t).float().cpu().numpy())
    return np.concatenate(out, axis=0)
