"""The incremental engine of a causal model: per-stream convolution state, one step per reading (numpy + onnxruntime).

A causal model's file carries a ``step`` graph (``training/trep_edge/training/step_graph.py``): given a stream's new prepared step
and, per convolution, the K−1 past activations it reads (its *taps*), it returns the step's unmasked and masked
representations and the activation each convolution must remember. ``StepState`` (a ``stream_state.StreamState``)
keeps those activations in one ring buffer per convolution for every stream (row i = stream i, slot = absolute step
mod ring length), so a reading costs one position per layer whatever the window, and ``StepEngine.advance`` runs
one onnxruntime call for all streams with a new step.

Exactness. The receptive field is at most the card's window (export refuses otherwise), so after a stream's
state has been fed the steps of its window, its next representation equals the full graph's last step on the
window ending there (zeros before the window = the zero state). The state is a cache that can always be rebuilt
from the stored window (``rebuild``); it is also saved with the monitor's checkpoint so a restart resumes at once.

Public API (used by ``runtime/trep_edge/runtime/core/engine.py``'s ``StepCandidate`` and ``StepScorer``, and by
``bench/throughput.py``):

- ``StepGraph(session)``: an onnxruntime session of a step graph and its ``StepLayout``.
- ``StepEngine(graph, card, max_rows=512)``: ``add_streams(n)``, ``remove_streams(idx)``, ``invalidate(idx)``,
  ``valid [S] bool``, ``last_step [S] int64``, ``advance(idx, values, steps) -> (z_unmasked, z_masked)`` (at most
  one step per stream, each stream's next step), ``rebuild(idx, history, end_steps)`` (feed windows ``[S, H, C]``
  ending at ``end_steps`` from a zero state), ``state_bytes_per_stream``, ``state_dict()`` /
  ``load_state(state, n)``; ``state`` is the ``StepState`` itself.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np
import onnxruntime as ort

from trep_edge.runtime.core.model_card import ModelCard
from trep_edge.runtime.core.model_file import STEP_LAYOUT_KEY, step_layout
from trep_edge.runtime.core.stream_state import StreamState
from trep_edge.runtime.core.time_index import time_index


@dataclass(frozen=True)
class StepLayout:
    """Kernel size, and dilation and input width of every convolution (tap order), as the step graph states."""

    kernel_size: int
    dilations: tuple[int, ...]
    widths: tuple[int, ...]
    receptive_field: int

    @property
    def ring_lengths(self) -> tuple[int, ...]:
        """Past activations each convolution remembers: ``(K − 1)·d``."""
        return tuple((self.kernel_size - 1) * d for d in self.dilations)

    @property
    def state_bytes_per_stream(self) -> int:
        """float32 bytes of one stream's rings."""
        return 4 * sum(n * w for n, w in zip(self.ring_lengths, self.widths))

    @classmethod
    def from_session(cls, session: ort.InferenceSession) -> "StepLayout":
        """Read the layout from the graph's metadata, refusing a graph without one."""
        data = step_layout(session.get_modelmeta().custom_metadata_map)
        if data is None:
            raise ValueError(f"the step graph has no {STEP_LAYOUT_KEY!r} metadata: re-export the model with "
                             "`trep-edge export`")
        return cls(int(data["kernel_size"]), tuple(data["dilations"]), tuple(data["widths"]), int(data["receptive_field"]))


class StepGraph:
    """A step graph's session and layout; ``run`` is one call for all rows."""

    def __init__(self, session: ort.InferenceSession) -> None:
        self.session = session
        self.layout = StepLayout.from_session(session)
        self._outputs = [o.name for o in session.get_outputs()]
        self._taps = [f"tap{j}" for j in range(len(self.layout.dilations))]

    def run(self, x: np.ndarray, t: np.ndarray, taps: list[np.ndarray], max_rows: int = 512) -> list[np.ndarray]:
        """``[z_unmasked, z_masked, push_0, …]`` for ``x [S, C]``, ``t [S]`` and taps ``[S, K−1, width_j]``.

        Rows go in chunks of at most ``max_rows`` so that a chunk's activations stay in cache
        (``bench/results/causal_chunking.py`` measures the effect).
        """
        chunks = []
        for lo in range(0, max(len(x), 1), max_rows):
            feeds = {"x": x[lo : lo + max_rows], "t": t[lo : lo + max_rows]}
            feeds.update({name: tap[lo : lo + max_rows] for name, tap in zip(self._taps, taps)})
            chunks.append(self.session.run(self._outputs, feeds))
        return [np.concatenate(parts) for parts in zip(*chunks)] if len(chunks) > 1 else chunks[0]


class StepState(StreamState):
    """The step graph's per-stream state: one ring per convolution ``ring<j> [S, (K−1)·d_j, width_j]`` (slot =
    absolute step mod ring length), the step each stream's state ends at ``last_step [S]`` and ``valid [S]``."""

    def __init__(self, kernel_size: int, dilations: list[int], widths: list[int], n_streams: int = 0) -> None:
        self.kernel_size, self.dilations, self.widths = int(kernel_size), list(dilations), list(widths)
        super().__init__(n_streams)

    def _fresh(self, n: int) -> dict[str, np.ndarray]:
        rings = {f"ring{j}": np.zeros((n, (self.kernel_size - 1) * d, w), dtype=np.float32)
                 for j, (d, w) in enumerate(zip(self.dilations, self.widths))}  # fmt: skip
        return {**rings, "last_step": np.zeros(n, dtype=np.int64), "valid": np.zeros(n, dtype=bool)}

    def _config(self) -> dict[str, Any]:
        return {"kernel_size": self.kernel_size, "dilations": self.dilations, "widths": self.widths}


class StepEngine:
    """Per-stream state of a causal model and the step graph that advances it (module docstring)."""

    def __init__(self, graph: StepGraph, card: ModelCard, max_rows: int = 512) -> None:
        conv = card.convention()
        if conv.kind == "relative" and card.time_embedding != "none":
            raise ValueError(f"model {card.name} uses a relative time index: its time embedding moves with the window, "
                             "so no per-stream state can be carried (export a causal model with periodic:P)")  # fmt: skip
        if graph.layout.receptive_field > card.window:
            raise ValueError(f"the step graph reaches back {graph.layout.receptive_field} steps, more than the "
                             f"window ({card.window}): it would not equal the windowed score; re-export with a "
                             "larger --window")  # fmt: skip
        self.graph = graph
        self.card = card
        self.max_rows = int(max_rows)
        self.convention = conv
        self.layout = graph.layout
        self._k = self.layout.kernel_size
        self.state = StepState(self.layout.kernel_size, list(self.layout.dilations), list(self.layout.widths))

    @property
    def rings(self) -> list[np.ndarray]:
        """Each convolution's ring ``[S, (K−1)·d, width]``."""
        return [getattr(self.state, f"ring{j}") for j in range(len(self.layout.dilations))]

    @property
    def last_step(self) -> np.ndarray:
        """``[S]`` the step each stream's state ends at."""
        return self.state.last_step

    @property
    def valid(self) -> np.ndarray:
        """``[S]`` whether each stream's state is usable (else rebuild it before its next step)."""
        return self.state.valid

    @property
    def n_streams(self) -> int:
        """Number of streams (rows)."""
        return self.state.n_streams

    @property
    def state_bytes_per_stream(self) -> int:
        """float32 bytes of one stream's state."""
        return self.layout.state_bytes_per_stream

    # streams

    def add_streams(self, n: int) -> None:
        """Append ``n`` streams without state (``valid`` False: rebuild before advancing)."""
        self.state.add_streams(n)

    def remove_streams(self, idx: np.ndarray) -> None:
        """Drop streams; later streams move down (``np.delete`` numbering)."""
        self.state.remove_streams(np.asarray(idx, dtype=np.int64))

    def invalidate(self, idx: np.ndarray | slice) -> None:
        """Mark streams' state stale (reset, other weights): they must be rebuilt before their next step."""
        self.valid[idx] = False

    # stepping

    def _step(self, idx: np.ndarray, values: np.ndarray, steps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        k = self._k
        back = np.arange(k - 1, 0, -1, dtype=np.int64)  # taps at step − (K−1)d, …, step − d
        taps = []
        for ring, d in zip(self.rings, self.layout.dilations):
            slots = (steps[:, None] - back * d) % ring.shape[1]
            taps.append(ring[idx[:, None], slots])
        t = time_index(self.convention, steps, 1)[:, 0]
        out = self.graph.run(np.ascontiguousarray(values, dtype=np.float32), t, taps, self.max_rows)
        for ring, push in zip(self.rings, out[2:]):
            ring[idx, steps % ring.shape[1]] = push
        self.last_step[idx] = steps
        return out[0], out[1]

    def advance(self, idx: np.ndarray, values: np.ndarray, steps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Feed each stream of ``idx`` (distinct) its next step: prepared ``values [S, C]`` at absolute ``steps``.

        Returns the step's representations unmasked and with its reading masked (``[S, F]`` each). Every stream
        must have a valid state ending at ``step − 1`` (else ValueError: rebuild it first).
        """
        idx = np.asarray(idx, dtype=np.int64)
        steps = np.asarray(steps, dtype=np.int64)
        bad = ~self.valid[idx] | (self.last_step[idx] != steps - 1)
        if bad.any():
            raise ValueError(f"streams {idx[bad].tolist()} have no state ending at the step before their new one: "
                             "rebuild them from their windows first")  # fmt: skip
        return self._step(idx, values, steps)

    def rebuild(self, idx: np.ndarray, history: np.ndarray, end_steps: np.ndarray) -> None:
        """Set streams' state to that of feeding ``history [S, H, C]`` (steps ending at ``end_steps``) from zero.

        Only the last ``receptive_field − 1`` steps can reach a later output, so only those are fed. All-NaN
        histories (a new or reset stream) depend on nothing but their end step: each distinct one is fed once.
        """
        idx = np.asarray(idx, dtype=np.int64)
        end_steps = np.asarray(end_steps, dtype=np.int64)
        if not idx.size:
            return
        keep = min(history.shape[1], self.layout.receptive_field - 1)
        history = history[:, history.shape[1] - keep :]
        empty = np.isnan(history).all(axis=(1, 2))
        ends, first, inverse = np.unique(end_steps[empty], return_index=True, return_inverse=True)
        feed = np.concatenate([np.flatnonzero(~empty), np.flatnonzero(empty)[first]])
        for ring in self.rings:
            ring[idx[feed]] = 0
        for j in range(keep):
            self._step(idx[feed], history[feed, j], end_steps[feed] - keep + 1 + j)
        # Same end step → same slots: copy the one fed stream's rings to the others.
        source = idx[np.flatnonzero(empty)[first]][inverse]
        for ring in self.rings:
            ring[idx[empty]] = ring[source]
        self.last_step[idx] = end_steps
        self.valid[idx] = True

    # state

    def state_dict(self) -> dict[str, np.ndarray]:
        """The rings, last steps and validity, as flat arrays (``np.savez``-able); ``config`` holds the layout."""
        return self.state.state_dict()

    def load_state(self, state: Mapping[str, Any], n_streams: int) -> None:
        """Restore ``state_dict()`` output for ``n_streams`` streams; a state of another layout leaves them stale."""
        fresh = StepState(self.layout.kernel_size, list(self.layout.dilations), list(self.layout.widths), n_streams)
        try:
            saved = StepState.from_state(state)
        except (KeyError, ValueError):  # no step state saved, or rings of other shapes: rebuilt from the windows
            saved = None
        layout = (fresh.kernel_size, fresh.dilations, fresh.widths)
        same = saved is not None and (saved.kernel_size, saved.dilations, saved.widths) == layout
        self.state = saved if same and saved.n_streams == n_streams else fresh
