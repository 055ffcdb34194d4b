"""The step graph of a causal encoder: one new step per stream in, its representation and the state to keep out.

A causal convolution with kernel K and dilation d at step k reads its input at ``k − (K−1)d, …, k − d`` and ``k``.
The runtime keeps, per stream and per convolution, the last ``(K−1)d`` inputs of that convolution (its post-GELU
activations) in a ring buffer (``runtime/trep_edge/runtime/core/step_engine.py``); the graph takes the K−1 *taps* it needs from each
ring and returns the new step's activation to push. Taking the taps instead of whole queues makes a reading cost
one position per layer, however far back the dilations reach (whole queues through the graph would move the
entire state, ~100 kB per stream at paper size, three times per reading).

Inputs: ``x [S, C]`` prepared values of the new step (NaN = missing), ``t [S]`` its time index, and per
convolution j (two per block, in order) ``tap{j} [S, K−1, width_j]`` (oldest first; zeros = the zero padding
before the window). Outputs: ``z_unmasked [S, F]``, ``z_masked [S, F]`` (the step with its reading masked, history
unmasked: the pair the streaming score compares) and ``push{j} [S, width_j]`` (the unmasked activation).
The layout (kernel, dilation and width of every convolution) is stored in the graph's metadata
(``model_file.with_step_layout``). With the receptive field ≤ the card's window, feeding a window's steps through this graph gives
the windowed graph's last-step output exactly (docs/causal.md).
"""
from __future__ import annotations

import logging
import tempfile
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from trep_edge.runtime.core.model_file import with_step_layout

from trep_edge.training.encoder import DilatedBlock, TRepEncoder, receptive_field
from trep_edge.training.exporter import export_module

log = logging.getLogger(__name__)


def _history_weight(conv: nn.Conv1d) -> torch.Tensor:
    """``[out, (K−1)·in]`` weight of the K−1 past taps, matching taps flattened as ``[S, K−1, in]``."""
    past = conv.weight[:, :, :-1]
    return past.permute(0, 2, 1).reshape(conv.out_channels, -1)


class StepEncoder(nn.Module):
    """A causal ``TRepEncoder`` advanced by one step; the past enters only through the taps."""

    def __init__(self, encoder: TRepEncoder) -> None:
        super().__init__()
        if not encoder.cfg.causal:
            raise ValueError("only a causal encoder (TrainConfig.causal) has a step graph; this one pads on both sides")
        self.encoder = encoder.eval()
        self.convs = [conv for block in encoder.blocks for conv in (block.conv1, block.conv2)]

    def layout(self) -> dict:
        """Kernel, dilations and input widths of the convolutions, in tap order, plus the receptive field."""
        dilations = [int(conv.dilation[0]) for conv in self.convs]
        kernel = int(self.encoder.cfg.kernel_size)
        return {
            "kernel_size": kernel,
            "dilations": dilations,
            "widths": [int(conv.in_channels) for conv in self.convs],
            "receptive_field": receptive_field(dilations[::2], kernel),
        }

    def _conv(self, conv: nn.Conv1d, a: torch.Tensor, taps: torch.Tensor) -> torch.Tensor:
        """The convolution's output at the new step for ``a [2S, in]`` (unmasked rows, then masked)."""
        s = taps.shape[0]
        # The past is the same for both variants: its share of the sum is computed once.
        past = F.linear(taps.reshape(s, -1), _history_weight(conv), conv.bias)
        return F.linear(a, conv.weight[:, :, -1]) + past.repeat(2, 1)

    def _block(self, block: DilatedBlock, h: torch.Tensor, taps: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
        s = taps[0].shape[0]
        skip = h if block.residual is None else F.linear(h, block.residual.weight[:, :, 0], block.residual.bias)
        a1 = F.gelu(h)
        c1 = self._conv(block.conv1, a1, taps[0])
        a2 = F.gelu(c1)
        c2 = self._conv(block.conv2, a2, taps[1])
        return c2 + skip, a1[:s], a2[:s]

    def forward(self, x: torch.Tensor, t: torch.Tensor, *taps: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """``(z_unmasked, z_masked, push_0, …)`` for the new step (module docstring)."""
        # Rows 0..S−1: the new step; rows S..2S−1: the same step with its reading masked.
        keep = torch.cat([torch.ones_like(t, dtype=torch.bool), torch.zeros_like(t, dtype=torch.bool)])
        h, pushes = self.encoder.input_stage(x.repeat(2, 1), keep, t.repeat(2)), []
        for i, block in enumerate(self.encoder.blocks):
            h, p1, p2 = self._block(block, h, taps[2 * i : 2 * i + 2])
            pushes += [p1, p2]
        s = x.shape[0]
        return (h[:s], h[s:], *pushes)


def example_inputs(step: StepEncoder, streams: int = 2) -> tuple[torch.Tensor, ...]:
    """Inputs of the right shapes for ``streams`` streams (zero taps)."""
    layout = step.layout()
    k = layout["kernel_size"]
    taps = [torch.zeros(streams, k - 1, w) for w in layout["widths"]]
    return (torch.randn(streams, step.encoder.cfg.input_dims), torch.arange(float(streams)), *taps)


def export_step_graph(encoder: TRepEncoder, path: Path) -> dict:
    """Write the step graph of a causal encoder (dynamic number of streams) with its layout; return the layout."""
    step = StepEncoder(encoder.eval().cpu())
    example = example_inputs(step)
    n_taps = len(example) - 2
    streams = torch.export.Dim("streams", min=1)
    dynamic = {"x": {0: streams}, "t": {0: streams}, "taps": tuple({0: streams} for _ in range(n_taps))}
    with torch.no_grad():
        export_module(step, example, path, ["x", "t"] + [f"tap{j}" for j in range(n_taps)],
                      ["z_unmasked", "z_masked"] + [f"push{j}" for j in range(n_taps)], dynamic,
                      keep_weights=True)  # fmt: skip
    layout = step.layout()
    path.write_bytes(with_step_layout(path.read_bytes(), layout))
    return layout


def step_graph(encoder: TRepEncoder, window: int, built: dict[str, bytes] | None = None) -> bytes | None:
    """ONNX bytes of the step graph, or None when the encoder is not causal or reaches back further than ``window``
    (the step engine would then not equal the windowed score; the daemon keeps the windowed engines). ``built`` is
    unused (the ``export.GRAPH_BUILDERS`` signature)."""
    if not encoder.cfg.causal:
        return None
    reach = receptive_field(encoder.cfg.block_dilations(), encoder.cfg.kernel_size)
    if reach > window:
        log.warning("no step graph: the causal receptive field (%d steps) exceeds the window (%d); export with "
                    "--window %d or more", reach, window, reach)  # fmt: skip
        return None
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "step.onnx"
        export_step_graph(encoder, path)
        return path.read_bytes()
