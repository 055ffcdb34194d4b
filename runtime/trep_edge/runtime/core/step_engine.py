"""The incremental engine of a causal model: per-stream convolution state, one step per reading (numpy + onnxruntime).

A causal model's file carries a ``step`` graph (``training/trep_edge/training/step_graph.py``): given a stream's new prepared step
and, per convolution, the K−1 past activations it reads (its *taps*), it returns the step's unmasked and masked
representations and the activation each convolution must remember. ``StepState`` keeps those activations in one
ring buffer per convolution for every stream (row i = stream i, slot = absolute step mod ring length), so a
reading costs one position per layer whatever the window, and ``StepEngine.advance`` runs one onnxruntime call for
all streams with a new step.

Exactness. The receptive field is at most the card's window (export refuses otherwise), so after a stream's
state has been fed the steps of its window, its next representation equals the full graph's last step on the
window ending there (zeros before the window = the zero state). The state is a cache that can always be rebuilt
from the stored window (``rebuild``); it is also saved with the monitor's checkpoint so a restart resumes at once.

Public API (used by ``runtime/trep_edge/runtime/core/monitor.py``, ``runtime/trep_edge/runtime/core/engine.py`` and ``bench/throughput.py``):

- ``StepGraph(session)``: an onnxruntime session of a step graph and its ``StepLayout``.
- ``StepEngine(graph, card, max_rows=512)``: ``add_streams(n)``, ``remove_streams(idx)``, ``invalidate(idx)``,
  ``valid [S] bool``, ``last_step [S] int64``, ``advance(idx, values, steps) -> (z_unmasked, z_masked)`` (at most
  one step per stream, each stream's next step), ``rebuild(idx, history, end_steps)`` (feed windows ``[S, H, C]``
  ending at ``end_steps`` from a zero state), ``state_bytes_per_stream``, ``state_dict()`` /
  ``load_state(state)``.
- ``StepCandidate(session, engine)``: the ``step`` entry of ``engine.CANDIDATES`` (window → last-step pair, for
  verification against the full graph; ``seconds_per_window`` times one warm step per stream).
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np
import onnxruntime as ort

from trep_edge.runtime.core.model_card import ModelCard
from trep_edge.runtime.core.model_file import STEP_LAYOUT_KEY, step_layout
from trep_edge.runtime.core.time_index import parse_time_index, time_index


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


class StepEngine:
    """Per-stream state of a causal model and the step graph that advances it (module docstring)."""

    def __init__(self, graph: StepGraph, card: ModelCard, max_rows: int = 512) -> None:
        conv = parse_time_index(card.time_index)
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
        self.rings = [np.zeros((0, n, w), dtype=np.float32) for n, w in zip(self.layout.ring_lengths, self.layout.widths)]
        self.last_step = np.zeros(0, dtype=np.int64)
        self.valid = np.zeros(0, dtype=bool)

    @property
    def n_streams(self) -> int:
        """Number of streams (rows)."""
        return int(self.last_step.shape[0])

    @property
    def state_bytes_per_stream(self) -> int:
        """float32 bytes of one stream's state."""
        return self.layout.state_bytes_per_stream

    # streams

    def add_streams(self, n: int) -> None:
        """Append ``n`` streams without state (``valid`` False: rebuild before advancing)."""
        self.rings = [np.concatenate([r, np.zeros((n, *r.shape[1:]), dtype=np.float32)]) for r in self.rings]
        self.last_step = np.concatenate([self.last_step, np.zeros(n, dtype=np.int64)])
        self.valid = np.concatenate([self.valid, np.zeros(n, dtype=bool)])

    def remove_streams(self, idx: np.ndarray) -> None:
        """Drop streams; later streams move down (``np.delete`` numbering)."""
        self.rings = [np.delete(r, idx, axis=0) for r in self.rings]
        self.last_step = np.delete(self.last_step, idx)
        self.valid = np.delete(self.valid, idx)

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
        """The rings, last steps and validity, as flat arrays (``np.savez``-able)."""
        state = {f"ring{j}": r.copy() for j, r in enumerate(self.rings)}
        state.update(last_step=self.last_step.copy(), valid=self.valid.copy(),
                     layout=np.array(json.dumps(self._layout_dict())))  # fmt: skip
        return state

    def _layout_dict(self) -> dict[str, Any]:
        lay = self.layout
        return {"kernel_size": lay.kernel_size, "dilations": list(lay.dilations), "widths": list(lay.widths)}

    def load_state(self, state: Mapping[str, Any], n_streams: int) -> None:
        """Restore ``state_dict()`` output for ``n_streams`` streams; a state of another layout leaves them stale."""
        self.rings = [np.zeros((n_streams, *r.shape[1:]), dtype=np.float32) for r in self.rings]
        self.last_step = np.zeros(n_streams, dtype=np.int64)
        self.valid = np.zeros(n_streams, dtype=bool)
        if "layout" not in state or json.loads(str(np.asarray(state["layout"]))) != self._layout_dict():
            return
        rings = [np.asarray(state[f"ring{j}"], dtype=np.float32) for j in range(len(self.rings))]
        if any(r.shape != mine.shape for r, mine in zip(rings, self.rings)) or len(state["valid"]) != n_streams:
            return
        self.rings = [r.copy() for r in rings]
        self.last_step = np.asarray(state["last_step"], dtype=np.int64).copy()
        self.valid = np.asarray(state["valid"], dtype=bool).copy()


class StepCandidate:
    """The ``step`` engine for ``runtime.engine.select_engine``: same ``name``/``pair``/``seconds_per_window``
    as ``engine.Candidate`` (not a subclass, so this module does not import ``engine``)."""

    name = "step"

    def __init__(self, session: ort.InferenceSession, engine: Any) -> None:
        self.engine = engine
        self.graph = StepGraph(session)

    def _fresh(self, n: int) -> StepEngine:
        steps = StepEngine(self.graph, self.engine.card)
        steps.add_streams(n)
        return steps

    def pair(self, windows: np.ndarray, starts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Last-step pair of ``windows [S, W, C]``: state rebuilt from the first W−1 steps, then one step.

        Consecutive sliding windows of one series (offline scoring, calibration) are swept instead: one rebuild,
        then one step per window, the same numbers for a fraction of the work.
        """
        s, w, _ = windows.shape
        ends = np.asarray(starts, dtype=np.int64) + w - 1
        if s > 1 and np.all(np.diff(ends) == 1) and np.array_equal(windows[1:, :-1], windows[:-1, 1:], equal_nan=True):
            return self._sweep(windows, ends)
        idx = np.arange(s)
        steps = self._fresh(s)
        steps.rebuild(idx, windows[:, :-1], ends - 1)
        return steps.advance(idx, windows[:, -1], ends)

    def _sweep(self, windows: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        steps, one = self._fresh(1), np.zeros(1, dtype=np.int64)
        steps.rebuild(one, windows[:1, :-1], ends[:1] - 1)
        pairs = [steps.advance(one, windows[i : i + 1, -1], ends[i : i + 1]) for i in range(len(windows))]
        return np.concatenate([u for u, _ in pairs]), np.concatenate([m for _, m in pairs])

    def seconds_per_window(self, windows: np.ndarray, starts: np.ndarray, repeats: int = 3) -> float:
        """What one reading costs in production: best of ``repeats`` warm steps of all rows, per row."""
        s, w, _ = windows.shape
        idx = np.arange(s)
        steps = self._fresh(s)
        ends = np.asarray(starts, dtype=np.int64) + w - 1
        steps.rebuild(idx, windows[:, :-1], ends - 1)
        best = float("inf")
        for r in range(repeats + 1):
            began = time.perf_counter()
            steps.advance(idx, windows[:, -1], ends + r)
            best = min(best, time.perf_counter() - began) if r else best
        return best / s
