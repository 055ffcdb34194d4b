"""The ``last_step`` graph: ``z[:, -1]`` of a fixed-length window, computing only the positions that feed it.

The streaming score needs one representation per window, the last step's. Walking the TCN backwards from that
step, each convolution only has to be evaluated where a later layer reads it: with window 201 and the paper's
dilations (1 … 1024) that is about a seventh of the full graph's conv positions, because the large dilations
reach outside the window (zero padding) and the small ones only widen a narrow cone. ``position_plan`` counts
them; ``LastStepEncoder`` evaluates each conv as a gather of its taps (a zero row stands for the padding)
followed by one matrix product, so the same weights give the full graph's value to float rounding.

Inputs ``x [B, W, C]``, ``mask [B, W]``, ``t [B, W]`` with W fixed (the card's window), output
``z_last [B, F]``; NaN and mask semantics are those of ``TRepEncoder.forward``.
"""
from __future__ import annotations

import math
import tempfile
from dataclasses import dataclass
from pathlib import Path

import onnx
import onnx_ir as ir
import torch
import torch.nn.functional as F
from onnx_ir.passes.common import RemoveUnusedNodesPass
from torch import nn

from trep_edge.training.encoder import TRepEncoder
from trep_edge.training.exporter import export_module

INPUT_NAMES = ["x", "mask", "t"]
OUTPUT_NAME = "z_last"
PAIR_OUTPUT_NAMES = ["z_unmasked", "z_masked"]


def tap_offsets(block: nn.Module, conv: nn.Conv1d) -> list[int]:
    """Offsets of the input positions output position p reads: ``p + k·d − left padding`` for k < kernel size.

    The left padding is the conv's own ("same") or the block's ``causal_pad`` for causal encoders.
    """
    d, pad = conv.dilation[0], conv.padding[0] + getattr(block, "causal_pad", 0)
    return [k * d - pad for k in range(conv.kernel_size[0])]


def _reads(positions: list[int], offsets: list[int], window: int) -> list[int]:
    """Every in-window position that some output in ``positions`` reads."""
    return sorted({p + o for p in positions for o in offsets if 0 <= p + o < window})


def _rows(*parts: list[int]) -> dict[int, int]:
    """Position → row of the concatenation of ``parts`` (a later part's row wins: masked values over unmasked)."""
    rows, start = {}, 0
    for part in parts:
        rows.update({p: start + i for i, p in enumerate(part)})
        start += len(part)
    return rows


def _tap_index(outputs: list[int], *sources: list[int], offsets: list[int], window: int) -> torch.Tensor:
    """``[len(outputs), K]`` rows into the concatenated ``sources``; out-of-window taps point at the zero row after."""
    row, pad = _rows(*sources), sum(map(len, sources))
    return torch.tensor([[row[p + o] if 0 <= p + o < window else pad for o in offsets] for p in outputs])


@dataclass(frozen=True)
class BlockPlan:
    """Where one residual block is evaluated: its input, middle and output positions (window coordinates)."""

    inputs: list[int]
    middle: list[int]
    outputs: list[int]


def position_plan(encoder: TRepEncoder, window: int) -> list[BlockPlan]:
    """Per block, the positions that feed the last step of a ``window``-step input (first block first)."""
    plans: list[BlockPlan] = []
    outputs = [window - 1]
    for block in reversed(encoder.blocks):
        middle = _reads(outputs, tap_offsets(block, block.conv2), window)
        inputs = sorted(set(_reads(middle, tap_offsets(block, block.conv1), window)) | set(outputs))
        plans.append(BlockPlan(inputs, middle, outputs))
        outputs = inputs
    return plans[::-1]


def conv_positions(encoder: TRepEncoder, window: int) -> tuple[int, int]:
    """(pruned, full) number of conv output positions per window: what the graph computes vs the full graph."""
    plans = position_plan(encoder, window)
    return sum(len(p.middle) + len(p.outputs) for p in plans), 2 * len(plans) * window


def _gelu(h: torch.Tensor) -> torch.Tensor:
    """Exact (erf) GELU, written in the operand order onnxruntime fuses into one Gelu kernel.

    ``F.gelu`` exports as ``x · (0.5 · (1 + erf(x/√2)))``, which onnxruntime leaves as five passes over the tensor.
    """
    return h * (torch.erf(h / math.sqrt(2.0)) + 1.0) * 0.5


def _conv_at(conv: nn.Conv1d, index: torch.Tensor, *sources: torch.Tensor) -> torch.Tensor:
    """The conv's output at the rows ``index`` selects from the concatenated ``sources [B, P, C]`` + a zero row."""
    h = F.pad(torch.cat(sources, dim=1) if len(sources) > 1 else sources[0], (0, 0, 0, 1))
    b, rows, k = h.shape[0], index.shape[0], index.shape[1]
    # Taps as one 2-D matrix [B·rows, K·C]: a single Gemm with the bias instead of a batched MatMul plus an Add.
    taps = h.index_select(1, index.reshape(-1)).reshape(-1, k * h.shape[-1])
    # Conv weight [out, in, K] laid out as [out, K·in] to match the taps' (k, channel) order.
    weight = conv.weight.permute(0, 2, 1).reshape(conv.out_channels, -1)
    return F.linear(taps, weight, conv.bias).reshape(b, rows, conv.out_channels)


class LastStepEncoder(nn.Module):
    """``TRepEncoder`` restricted to the last step of a fixed window; shares the encoder's weights."""

    def __init__(self, encoder: TRepEncoder, window: int) -> None:
        super().__init__()
        if window < 1:
            raise ValueError(f"window must be a positive number of steps, got {window}")
        self.encoder = encoder
        self.window = window
        plans = position_plan(encoder, window)
        self.register_buffer("input_positions", torch.tensor(plans[0].inputs))
        for i, (block, plan) in enumerate(zip(encoder.blocks, plans)):
            taps1, taps2 = tap_offsets(block, block.conv1), tap_offsets(block, block.conv2)
            self.register_buffer(f"conv1_{i}", _tap_index(plan.middle, plan.inputs, offsets=taps1, window=window))
            self.register_buffer(f"conv2_{i}", _tap_index(plan.outputs, plan.middle, offsets=taps2, window=window))
            self.register_buffer(f"skip_{i}", torch.tensor([_rows(plan.inputs)[p] for p in plan.outputs]))

    def block_inputs(self, x: torch.Tensor, mask: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        """The encoder's input stage at the planned positions."""
        x, mask, t = (v.index_select(1, self.input_positions) for v in (x, mask, t))
        return self.encoder.input_stage(x, mask, t)

    def forward(self, x: torch.Tensor, mask: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        """``z_last [B, F]`` for ``x [B, W, C]``, ``mask [B, W]``, ``t [B, W]``."""
        self._check_window(x)
        h = self.block_inputs(x, mask, t)
        for i, block in enumerate(self.encoder.blocks):
            h = self.block(i, block, h)[0]
        return h[:, 0]

    def _check_window(self, x: torch.Tensor) -> None:
        if x.shape[1] != self.window:
            raise ValueError(f"this graph is built for windows of {self.window} steps, got {x.shape[1]}")

    def block(self, i: int, block: nn.Module, h: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """Block ``i`` at its planned positions: its output, and the GELU'd conv inputs (reused by the pair)."""
        g = _gelu(h)
        middle = _gelu(_conv_at(block.conv1, getattr(self, f"conv1_{i}"), g))
        out = _conv_at(block.conv2, getattr(self, f"conv2_{i}"), middle) + _skip(block, getattr(self, f"skip_{i}"), h)
        return out, g, middle


def _skip(block: nn.Module, index: torch.Tensor, *sources: torch.Tensor) -> torch.Tensor:
    """The block's residual branch at the rows ``index`` selects from the concatenated ``sources``."""
    h = (torch.cat(sources, dim=1) if len(sources) > 1 else sources[0]).index_select(1, index)
    return h if block.residual is None else F.linear(h, block.residual.weight[:, :, 0], block.residual.bias)


def masked_plan(encoder: TRepEncoder, window: int) -> list[BlockPlan]:
    """Per block, the planned positions whose value changes when the last step is masked (first block first).

    Masking changes the input at the last step only; a conv output changes where one of its taps changed. At window
    201 and the paper's depth that is 43 of the 616 planned conv positions: the masked twin costs 7 % extra.
    """
    changed, plans = [window - 1], []
    for block, plan in zip(encoder.blocks, position_plan(encoder, window)):
        o1, o2 = tap_offsets(block, block.conv1), tap_offsets(block, block.conv2)
        middle = [q for q in plan.middle if any(q + o in changed for o in o1)]
        outputs = [q for q in plan.outputs if q in changed or any(q + o in middle for o in o2)]
        plans.append(BlockPlan(changed, middle, outputs))
        changed = outputs
    return plans


class PrunedPairEncoder(LastStepEncoder):
    """Both last-step representations of a window, unmasked and with its last step masked, sharing the rest.

    Inputs as ``LastStepEncoder`` (``mask`` is the unmasked variant's keep-mask); outputs ``z_unmasked [B, F]``,
    ``z_masked [B, F]``. The masked twin recomputes only the positions ``masked_plan`` lists and reads every other
    tap from the unmasked pass, so a window is sent and encoded once instead of twice.
    """

    def __init__(self, encoder: TRepEncoder, window: int) -> None:
        super().__init__(encoder, window)
        te = encoder.cfg.time_embedding_dims if encoder.time_embedding is not None else 0
        # The masked last step's first-block input: projection zeroed, τ kept (as TRepEncoder.forward does).
        self.register_buffer("masked_scale", torch.cat([torch.zeros(encoder.cfg.hidden_dims), torch.ones(te)]))
        for i, (block, plan, twin) in enumerate(zip(encoder.blocks, position_plan(encoder, window),
                                                    masked_plan(encoder, window))):  # fmt: skip
            taps1, taps2 = tap_offsets(block, block.conv1), tap_offsets(block, block.conv2)
            index1 = _tap_index(twin.middle, plan.inputs, twin.inputs, offsets=taps1, window=window)
            index2 = _tap_index(twin.outputs, plan.middle, twin.middle, offsets=taps2, window=window)
            self.register_buffer(f"twin_conv1_{i}", index1)
            self.register_buffer(f"twin_conv2_{i}", index2)
            self.register_buffer(f"twin_skip_{i}", torch.tensor([_rows(plan.inputs, twin.inputs)[p] for p in twin.outputs]))

    def forward(self, x: torch.Tensor, mask: torch.Tensor, t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(z_unmasked, z_masked)``, each ``[B, F]``, for ``x [B, W, C]``, ``mask [B, W]``, ``t [B, W]``."""
        self._check_window(x)
        h = self.block_inputs(x, mask, t)
        twin = h[:, -1:] * self.masked_scale  # the last planned position is the window's last step
        for i, block in enumerate(self.encoder.blocks):
            out, g, middle = self.block(i, block, h)
            twin_middle = _gelu(_conv_at(block.conv1, getattr(self, f"twin_conv1_{i}"), g, _gelu(twin)))
            twin = (_conv_at(block.conv2, getattr(self, f"twin_conv2_{i}"), middle, twin_middle)
                    + _skip(block, getattr(self, f"twin_skip_{i}"), h, twin))  # fmt: skip
            h = out
        return h[:, 0], twin[:, 0]


def last_step_graph(encoder: TRepEncoder, window: int, built: dict[str, bytes] | None = None) -> bytes:
    """ONNX bytes of ``LastStepEncoder(encoder, window)`` (dynamic batch only): the pruned pair graph's unmasked half.

    ``PrunedPairEncoder.forward`` computes ``z_unmasked`` with ``LastStepEncoder``'s ops on the same weights, so the
    pair graph (``built["pruned_pair"]`` when already exported) without ``z_masked`` and the nodes only it reads is
    this graph. Cutting it out replaces a second dynamo export (12.9 of 76.7 s for a per-stream benchmark model,
    bench/results/export_time_before.md).
    """
    pair = (built or {}).get("pruned_pair") or pruned_pair_graph(encoder, window)
    model = ir.from_proto(onnx.load_from_string(pair))
    unmasked, masked = model.graph.outputs
    model.graph.outputs.remove(masked)
    unmasked.name = OUTPUT_NAME
    RemoveUnusedNodesPass()(model)  # and the twin's initializers
    proto = ir.to_proto(model)
    onnx.checker.check_model(proto, full_check=True)
    return proto.SerializeToString()


def pruned_pair_graph(encoder: TRepEncoder, window: int, built: dict[str, bytes] | None = None) -> bytes:
    """ONNX bytes of ``PrunedPairEncoder(encoder, window)`` (outputs ``z_unmasked``, ``z_masked``); ``built`` is
    unused (the ``export.GRAPH_BUILDERS`` signature)."""
    return _export(PrunedPairEncoder(encoder.eval().cpu(), window), PAIR_OUTPUT_NAMES)


def _export(module: LastStepEncoder, outputs: list[str]) -> bytes:
    module = module.eval()
    window, c = module.window, module.encoder.cfg.input_dims
    steps = torch.arange(float(window)).repeat(2, 1)
    example = (torch.randn(2, window, c), torch.ones(2, window, dtype=torch.bool), steps)
    batch = torch.export.Dim("batch")
    dynamic = {name: {0: batch} for name in INPUT_NAMES}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "graph.onnx"
        export_module(module, example, path, INPUT_NAMES, outputs, dynamic, keep_weights=True)
        return path.read_bytes()
