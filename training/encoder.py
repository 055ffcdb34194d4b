"""The T-Rep encoder (TREP.md §2): projection, masking, time-embedding concat, dilated residual TCN.

``forward(x, mask, t)`` takes the keep-mask as a tensor so one exported ONNX graph serves both the unmasked
and the last-step-masked windows of the streaming score.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from .time_embedding import build_time_embedding


@dataclass
class EncoderConfig:
    """Architecture of the encoder; stored in checkpoints and (in part) in the model card."""

    input_dims: int
    repr_dims: int = 128
    hidden_dims: int = 128
    depth: int = 10
    kernel_size: int = 3
    time_embedding: str = "time2vec"
    time_embedding_dims: int = 32
    time_scale: float = 800.0
    repr_dropout: float = 0.1


class DilatedBlock(nn.Module):
    """``GELU → Conv(d) → GELU → Conv(d)`` plus the residual, with "same" padding (non-causal)."""

    def __init__(self, in_ch: int, out_ch: int, kernel_size: int, dilation: int, final: bool) -> None:
        super().__init__()
        padding = (kernel_size - 1) * dilation // 2
        self.conv1 = nn.Conv1d(in_ch, out_ch, kernel_size, padding=padding, dilation=dilation)
        self.conv2 = nn.Conv1d(out_ch, out_ch, kernel_size, padding=padding, dilation=dilation)
        self.residual = nn.Conv1d(in_ch, out_ch, 1) if in_ch != out_ch or final else None

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        """Apply the block to ``h`` ``[B, C, T]``."""
        skip = h if self.residual is None else self.residual(h)
        h = self.conv1(F.gelu(h))
        h = self.conv2(F.gelu(h))
        return h + skip


class TRepEncoder(nn.Module):
    """Maps ``x [B,T,C]`` (NaN = missing), keep-mask ``[B,T]`` and time index ``t [B,T]`` to ``z [B,T,F]``."""

    def __init__(self, cfg: EncoderConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.projection = nn.Linear(cfg.input_dims, cfg.hidden_dims)
        self.time_embedding = build_time_embedding(cfg.time_embedding, cfg.time_embedding_dims, cfg.time_scale)
        te_dims = 0 if self.time_embedding is None else cfg.time_embedding_dims
        widths = [cfg.hidden_dims + te_dims] + [cfg.hidden_dims] * cfg.depth + [cfg.repr_dims]
        self.blocks = nn.Sequential(
            *[
                DilatedBlock(widths[i], widths[i + 1], cfg.kernel_size, 2**i, final=i == cfg.depth)
                for i in range(cfg.depth + 1)
            ]
        )
        self.repr_dropout = nn.Dropout(cfg.repr_dropout)

    def embed_time(self, t: torch.Tensor) -> torch.Tensor | None:
        """τ for time indices ``t`` ``[B,T]`` (None without a time-embedding module)."""
        return None if self.time_embedding is None else self.time_embedding(t)

    def forward(self, x: torch.Tensor, mask: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        """Encode; a step is zeroed after projection (bias included) if masked or if any channel is NaN."""
        missing = torch.isnan(x).any(dim=-1)
        # torch.where builds a new tensor: the caller's NaNs stay where they were.
        u = self.projection(torch.where(torch.isnan(x), torch.zeros_like(x), x))
        keep = mask & ~missing
        u = u * keep.unsqueeze(-1).to(u.dtype)
        tau = self.embed_time(t)
        if tau is not None:
            u = torch.cat([u, tau.to(u.dtype)], dim=-1)
        h = self.blocks(u.transpose(1, 2)).transpose(1, 2)
        return self.repr_dropout(h)
