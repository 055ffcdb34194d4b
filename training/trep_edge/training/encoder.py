"""The T-Rep encoder (TREP.md §2): projection, masking, time-embedding concat, dilated residual TCN.

``forward(x, mask, t)`` takes the keep-mask as a tensor so one exported ONNX graph serves both the unmasked
and the last-step-masked windows of the streaming score.

``causal=True`` (docs/causal.md) pads every convolution on the left only, so step t sees steps ≤ t, and uses a
dilation schedule whose receptive field fits the scoring window: a stream's representation can then be carried
forward one step at a time (``step_graph.py``) and still equal the windowed graph's last step exactly.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from trep_edge.training.time_embedding import build_time_embedding


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
    causal: bool = False
    dilations: tuple[int, ...] | None = None
    """Dilation of each of the ``depth + 1`` blocks; None = ``2**i`` (the paper)."""

    def block_dilations(self) -> tuple[int, ...]:
        """The dilation of every block, final block included."""
        if self.dilations is None:
            return tuple(2**i for i in range(self.depth + 1))
        if len(self.dilations) != self.depth + 1 or min(self.dilations) < 1:
            raise ValueError(f"dilations must list depth + 1 = {self.depth + 1} positive integers, got {self.dilations}")
        return tuple(int(d) for d in self.dilations)


def receptive_field(dilations: tuple[int, ...] | list[int], kernel_size: int = 3) -> int:
    """Steps one output step depends on: two convolutions per block, each reaching back ``(k − 1)·d`` steps."""
    return 1 + 2 * (kernel_size - 1) * sum(dilations)


def bounded_dilations(blocks: int, max_receptive_field: int, kernel_size: int = 3) -> tuple[int, ...]:
    """Dilations doubling from 1 and restarting at 1 whenever doubling would push the receptive field past the bound.

    Each block takes the largest next dilation of the cycle that still leaves dilation 1 for every later block;
    11 blocks within 201 steps give 1,2,4,8,16,1,2,4,8,1,2 (receptive field 197).
    """
    budget = (max_receptive_field - 1) // (2 * (kernel_size - 1))
    if budget < blocks:
        smallest = receptive_field([1] * blocks, kernel_size)
        raise ValueError(f"{blocks} causal blocks need a receptive field of at least {smallest} steps; "
                         f"max_receptive_field is {max_receptive_field}: raise it or lower depth")  # fmt: skip
    out: list[int] = []
    for i in range(blocks):
        nxt = 2 * out[-1] if out else 1
        later = blocks - i - 1
        out.append(nxt if sum(out) + nxt + later <= budget else 1)
    return tuple(out)


class DilatedBlock(nn.Module):
    """``GELU → Conv(d) → GELU → Conv(d)`` plus the residual; "same" padding, or left-only padding when causal."""

    def __init__(self, in_ch: int, out_ch: int, kernel_size: int, dilation: int, final: bool, causal: bool = False) -> None:
        super().__init__()
        self.causal_pad = (kernel_size - 1) * dilation if causal else 0
        padding = 0 if causal else (kernel_size - 1) * dilation // 2
        self.conv1 = nn.Conv1d(in_ch, out_ch, kernel_size, padding=padding, dilation=dilation)
        self.conv2 = nn.Conv1d(out_ch, out_ch, kernel_size, padding=padding, dilation=dilation)
        self.residual = nn.Conv1d(in_ch, out_ch, 1) if in_ch != out_ch or final else None

    def _conv(self, conv: nn.Conv1d, h: torch.Tensor) -> torch.Tensor:
        a = F.gelu(h)
        # Zeros on the left are the same "nothing before the window" the streaming state starts from.
        return conv(F.pad(a, (self.causal_pad, 0)) if self.causal_pad else a)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        """Apply the block to ``h`` ``[B, C, T]``."""
        skip = h if self.residual is None else self.residual(h)
        return self._conv(self.conv2, self._conv(self.conv1, h)) + skip


class TRepEncoder(nn.Module):
    """Maps ``x [B,T,C]`` (NaN = missing), keep-mask ``[B,T]`` and time index ``t [B,T]`` to ``z [B,T,F]``."""

    def __init__(self, cfg: EncoderConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.projection = nn.Linear(cfg.input_dims, cfg.hidden_dims)
        self.time_embedding = build_time_embedding(cfg.time_embedding, cfg.time_embedding_dims, cfg.time_scale)
        te_dims = 0 if self.time_embedding is None else cfg.time_embedding_dims
        widths = [cfg.hidden_dims + te_dims] + [cfg.hidden_dims] * cfg.depth + [cfg.repr_dims]
        dilations = cfg.block_dilations()
        self.blocks = nn.Sequential(
            *[
                DilatedBlock(widths[i], widths[i + 1], cfg.kernel_size, dilations[i], i == cfg.depth, cfg.causal)
                for i in range(cfg.depth + 1)
            ]
        )
        self.repr_dropout = nn.Dropout(cfg.repr_dropout)

    def embed_time(self, t: torch.Tensor) -> torch.Tensor | None:
        """τ for time indices ``t`` ``[B,T]`` (None without a time-embedding module)."""
        return None if self.time_embedding is None else self.time_embedding(t)

    def input_stage(self, x: torch.Tensor, mask: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        """The first block's input ``[..., H + te]`` for steps ``x [..., C]``, keep-mask and time index ``[...]``.

        The projection of ``x`` (NaN read as 0) is zeroed, bias included, where the step is masked or any channel
        is NaN; τ(t) is concatenated. Every graph variant starts here (``pruned_graph.py``, ``step_graph.py``).
        """
        nan = torch.isnan(x)
        keep = mask & ~nan.any(dim=-1)
        # torch.where builds a new tensor: the caller's NaNs stay where they were.
        u = self.projection(torch.where(nan, torch.zeros_like(x), x)) * keep.unsqueeze(-1).to(x.dtype)
        tau = self.embed_time(t)
        return u if tau is None else torch.cat([u, tau.to(u.dtype)], dim=-1)

    def forward(self, x: torch.Tensor, mask: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        """Encode ``x [B, T, C]`` (``input_stage``, then the blocks)."""
        h = self.blocks(self.input_stage(x, mask, t).transpose(1, 2)).transpose(1, 2)
        return self.repr_dropout(h)
