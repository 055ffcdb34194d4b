"""The inference engine: an onnxruntime session for a T-Rep model, its card, and the masked/unmasked pair.

Loading refuses a model whose card is missing, malformed, or disagrees with the graph, with a message that says
what differs; asking for a GPU provider that is not there falls back to CPU loudly (log and ``status``).

Engine selection. Besides the full graph (every step of the window), a model file may carry extra graphs of the
same weights, listed with their sha256 in the card's ``graphs`` (the file format: ``model_file``). Each one whose
bytes match gets a session (``Engine.graphs``) sharing the main graph's weights and, if ``CANDIDATES`` knows its name,
becomes a ``Candidate``: an object with ``pair(windows, starts)`` (the contract of ``Engine.last_step_pair``) and
``seconds_per_window``. ``select_engine`` checks every candidate's pair against the full graph's on probe windows
(random values, NaNs, a mostly missing window, the masked last step) to ``EXACT_TOLERANCE``, times the exact
ones on a batch, and routes ``last_step_pair`` through the fastest; ``model.engine`` can force one. The choice and
the reason are in ``Engine.status`` (status topic, ``trep_edge_model_info``, ``trep-edge doctor``).

The monitor's engine interface. ``Engine.scorer()`` gives the selected candidate's ``Scorer``: a stateful "score
these lanes' newly finalised steps" call (``Scorer.score``), with whatever per-lane state its engine keeps as a
``stream_state.StreamState`` (``Scorer.state``) that the monitor adds, removes, saves and restores with its lanes.
The windowed graphs (``full``, ``last_step``, ``pruned_pair``) share ``WindowedScorer``: no state, one
``pair`` call on the tick's windows. The causal ``step`` graph's ``StepScorer`` keeps each lane's convolution state
(``step_engine.StepEngine``) and advances it one round of steps at a time, rebuilding a stale state from the
stored windows (``Scorer.refresh``). Its ``StepCandidate.pair`` (whole windows from a zero state) is what
verification compares with the full graph, and its ``seconds_per_window`` times what one reading costs in
production (one step for a batch of streams with warm state). The monitor never knows which engine runs.
"""
from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import onnxruntime as ort

from trep_edge.runtime.core.model_card import ModelCard, ModelCardError, sidecar_path
from trep_edge.runtime.core.model_file import METADATA_KEY, SharedWeights, unpack
from trep_edge.runtime.core.step_engine import StepEngine, StepGraph
from trep_edge.runtime.core.stream_state import StreamState
from trep_edge.runtime.core.time_index import TimeIndex, time_index
from trep_edge.runtime.core.windows import StepBatch

log = logging.getLogger(__name__)

PROVIDERS = {
    "tensorrt": "TensorrtExecutionProvider",
    "cuda": "CUDAExecutionProvider",
    "cpu": "CPUExecutionProvider",
}
CONTRACT_INPUTS = {"x": "tensor(float)", "mask": "tensor(bool)", "t": "tensor(float)"}


def file_sha256(path: str | Path) -> str:
    """sha256 of a file's bytes (the model identity reported in alerts and status)."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def choose_providers(requested: str | list[str] = "auto") -> tuple[list[str], list[str]]:
    """Resolve provider names (auto, tensorrt, cuda, cpu) to those onnxruntime has; returns (chosen, missing)."""
    available = ort.get_available_providers()
    if requested == "auto":
        names = ["cuda", "cpu"]
    elif isinstance(requested, str):
        names = [n.strip() for n in requested.split(",") if n.strip()]
    else:
        names = list(requested)
    unknown = [n for n in names if n not in PROVIDERS]
    if unknown:
        raise ValueError(f"unknown execution provider(s) {unknown}: use auto or a list of {sorted(PROVIDERS)}")
    chosen = [PROVIDERS[n] for n in names if PROVIDERS[n] in available]
    missing = [PROVIDERS[n] for n in names if PROVIDERS[n] not in available and not (requested == "auto" and n == "cuda")]
    if PROVIDERS["cpu"] not in chosen:
        chosen.append(PROVIDERS["cpu"])
    return chosen, missing


def read_card(session: ort.InferenceSession, model_path: Path) -> ModelCard:
    """The card from the ONNX metadata; a sidecar JSON, when present, must say the same."""
    text = unpack(session.get_modelmeta().custom_metadata_map).card_text
    if text is None:
        raise ModelCardError(
            f"{model_path} has no model card (metadata key {METADATA_KEY!r}): export it with `trep-edge export`"
        )
    card = ModelCard.from_json(text, source=f"{model_path} card")
    side = sidecar_path(model_path)
    if side.is_file():
        side_card = ModelCard.from_json(side.read_text(), source=str(side))
        if side_card.to_json() != card.to_json():
            raise ModelCardError(f"{side} differs from the card inside {model_path}: re-export, or delete the stale JSON")
    return card


def check_graph(session: ort.InferenceSession, card: ModelCard, model_path: Path) -> None:
    """The graph must have the contract's inputs/outputs with the card's channel and representation sizes."""
    inputs = {i.name: i for i in session.get_inputs()}
    problems = []
    for name, dtype in CONTRACT_INPUTS.items():
        if name not in inputs:
            problems.append(f"input {name!r} missing (has {sorted(inputs)})")
        elif inputs[name].type != dtype:
            problems.append(f"input {name!r} is {inputs[name].type}, expected {dtype}")
    if "x" in inputs:
        channels = inputs["x"].shape[-1]
        if isinstance(channels, int) and channels != card.input_dims:
            problems.append(f"graph takes {channels} channels, card says {card.input_dims} ({card.channels})")
    outputs = {o.name: o for o in session.get_outputs()}
    if "z" not in outputs:
        problems.append(f"output 'z' missing (has {sorted(outputs)})")
    else:
        dims = outputs["z"].shape[-1]
        if isinstance(dims, int) and dims != card.repr_dims:
            problems.append(f"graph outputs {dims} representation dims, card says {card.repr_dims}")
    if problems:
        raise ModelCardError(f"{model_path} does not match its card: " + "; ".join(problems))


def pair_inputs(convention: TimeIndex, windows: np.ndarray, starts: np.ndarray) -> tuple[np.ndarray, ...]:
    """Graph inputs for the unmasked (rows 0..S−1) and last-step-masked (rows S..2S−1) copies of ``windows``."""
    s, w, _ = windows.shape
    x = np.ascontiguousarray(np.concatenate([windows, windows]), dtype=np.float32)
    mask = np.ones((2 * s, w), dtype=bool)
    mask[s:, -1] = False
    return x, mask, time_index(convention, np.concatenate([starts, starts]), w)


def last_step_pair(
    encode: Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray],
    convention: TimeIndex,
    windows: np.ndarray,
    starts: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """Last-step representations of ``windows [S, W, C]`` unmasked and with the last step masked.

    Both variants go through one ``encode`` call (rows 0..S−1 and S..2S−1); ``starts`` are the absolute index of
    each window's first step (used by a periodic time index).
    """
    s = len(windows)
    z = encode(*pair_inputs(convention, windows, starts))
    return z[:s, -1], z[s:, -1]


def run_chunked(
    session: ort.InferenceSession, outputs: list[str], feeds: dict[str, np.ndarray], max_rows: int
) -> list[np.ndarray]:
    """``outputs`` of ``session`` over the batch, in chunks of at most ``max_rows`` rows (bounds peak memory)."""
    rows = len(next(iter(feeds.values())))
    parts = [session.run(outputs, {k: v[i : i + max_rows] for k, v in feeds.items()})
             for i in range(0, rows, max_rows)]  # fmt: skip
    return [np.concatenate(out, axis=0) for out in zip(*parts)]


def seconds_per_window(
    pair: Callable[[np.ndarray, np.ndarray], object], windows: np.ndarray, starts: np.ndarray, repeats: int = 3
) -> float:
    """Best of ``repeats`` timed ``pair(windows, starts)`` calls after one warm-up, divided by the window count."""
    pair(windows, starts)
    best = float("inf")
    for _ in range(repeats):
        began = time.perf_counter()
        pair(windows, starts)
        best = min(best, time.perf_counter() - began)
    return best / len(windows)


@dataclass(frozen=True)
class LaneScores:
    """What one ``Scorer.score`` computed: per batch row its last-step representations (zeros where not scored)."""

    z_unmasked: np.ndarray  # [N, F] float32
    z_masked: np.ndarray  # [N, F] float32
    calls: int  # onnxruntime calls made
    rows: int  # representations computed (2 per scored step: unmasked and masked)


class Scorer:
    """The monitor's engine interface: scores lanes' newly finalised steps, keeping the per-lane state its engine
    needs in ``state`` (a ``StreamState`` the monitor adds, removes, saves and restores with its lanes; None: none).
    """

    needs_windows = True  # whether ``score`` reads the batch's windows (else only its prepared steps)
    state: StreamState | None = None

    def refresh(self, histories: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray, np.ndarray]]) -> None:
        """Before a tick finalises its steps: bring stale per-lane state up to the stored windows, read through
        ``histories(lanes) -> (windows [n, W, C], end steps [n], live [n])`` (``WindowStore.histories``)."""

    def restore(self, state: Mapping[str, Any], lanes: int) -> None:
        """Adopt ``state.state_dict()`` saved with the same model for ``lanes`` lanes (an unusable one is rebuilt)."""

    def score(self, batch: StepBatch, rounds: list[np.ndarray], windows: np.ndarray) -> LaneScores:
        """Representations of every row of ``batch``; ``rounds`` split its rows into at most one step per lane, in
        time order; ``windows`` are its complete rows' windows as the model sees them (scaled if stream-scaled)."""
        raise NotImplementedError


class WindowedScorer(Scorer):
    """A windowed graph's scorer: no state, the tick's complete windows in one ``pair`` call."""

    def __init__(self, pair: Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]], dims: int) -> None:
        self.pair, self.dims = pair, int(dims)

    def score(self, batch: StepBatch, rounds: list[np.ndarray], windows: np.ndarray) -> LaneScores:
        """See ``Scorer.score``."""
        z_unmasked = np.zeros((len(batch), self.dims), dtype=np.float32)
        z_masked = np.zeros_like(z_unmasked)
        if not windows.shape[0]:
            return LaneScores(z_unmasked, z_masked, 0, 0)
        complete = np.flatnonzero(batch.complete)
        z_unmasked[complete], z_masked[complete] = self.pair(windows, batch.starts)
        return LaneScores(z_unmasked, z_masked, 1, 2 * len(complete))


class StepScorer(Scorer):
    """The step graph's scorer: each lane's convolution state, advanced by one round of steps per onnxruntime call.

    A lane that is new, reset, or whose state does not end just before its next step starts from an empty window; a
    stale state (restored from another model, other weights) is rebuilt from the stored window by ``refresh``,
    which gives the windowed engines' scores exactly.
    """

    needs_windows = False

    def __init__(self, steps: StepEngine) -> None:
        self.steps = steps

    @property
    def state(self) -> StreamState:  # type: ignore[override]
        """The lanes' ``step_engine.StepState``."""
        return self.steps.state

    def refresh(self, histories: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray, np.ndarray]]) -> None:
        """See ``Scorer.refresh``."""
        stale = np.flatnonzero(~self.steps.valid)
        if stale.size:
            windows, ends, live = histories(stale)
            self.steps.rebuild(stale[live], windows[live], ends[live])

    def restore(self, state: Mapping[str, Any], lanes: int) -> None:
        """See ``Scorer.restore``."""
        self.steps.load_state(state, lanes)

    def score(self, batch: StepBatch, rounds: list[np.ndarray], windows: np.ndarray) -> LaneScores:
        """See ``Scorer.score``; ``windows`` are not read."""
        card = self.steps.card
        z_unmasked = np.zeros((len(batch), card.repr_dims), dtype=np.float32)
        z_masked = np.zeros_like(z_unmasked)
        for rows in rounds:
            idx, steps = batch.stream_idx[rows], batch.step[rows]
            fresh = batch.reset[rows] | ~self.steps.valid[idx] | (self.steps.last_step[idx] != steps - 1)
            if fresh.any():
                empty = np.full((int(fresh.sum()), card.window - 1, card.input_dims), np.nan, np.float32)
                self.steps.rebuild(idx[fresh], empty, steps[fresh] - 1)
            z_unmasked[rows], z_masked[rows] = self.steps.advance(idx, batch.prepared[rows], steps)
        return LaneScores(z_unmasked, z_masked, len(rounds), 2 * len(batch))


class Candidate:
    """One way to compute the last-step pair; ``select_engine`` verifies and times candidates.

    Subclasses implement ``pair`` (the contract of ``Engine.last_step_pair``); ``seconds_per_window`` times it,
    and a stateful engine overrides it with what one reading costs in production. ``scorer`` is what the monitor
    runs: the windowed ``pair`` unless the engine keeps per-lane state.
    """

    name = ""
    engine: "Engine"

    def pair(self, windows: np.ndarray, starts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Last-step representations of ``windows [S, W, C]``, unmasked and with the last step masked."""
        raise NotImplementedError

    def seconds_per_window(self, windows: np.ndarray, starts: np.ndarray, repeats: int = 3) -> float:
        """Best of ``repeats`` timed ``pair`` calls (after one warm-up), per window."""
        return seconds_per_window(self.pair, windows, starts, repeats)

    def scorer(self) -> Scorer:
        """A fresh scorer of this engine for the monitor (no lanes yet)."""
        return WindowedScorer(self.pair, self.engine.card.repr_dims)


class FullGraph(Candidate):
    """The contract's graph: every step of both window copies, of which the last is kept (the reference)."""

    name = "full"

    def __init__(self, engine: "Engine") -> None:
        self.engine = engine

    def pair(self, windows: np.ndarray, starts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """See ``Candidate.pair``."""
        return last_step_pair(self.engine.encode, self.engine.convention, windows, starts)


class LastStepGraph(Candidate):
    """The embedded ``last_step`` graph: only the conv positions that feed the last step (fixed window)."""

    name = "last_step"

    def __init__(self, session: ort.InferenceSession, engine: "Engine") -> None:
        self.engine = engine  # the session is engine.graphs["last_step"]

    def pair(self, windows: np.ndarray, starts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """See ``Candidate.pair``."""
        x, mask, t = pair_inputs(self.engine.convention, windows, starts)
        session = self.engine.graphs[self.name]
        z = run_chunked(session, ["z_last"], {"x": x, "mask": mask, "t": t}, self.engine.max_rows)[0]
        return z[: len(windows)], z[len(windows) :]


class PrunedPairGraph(Candidate):
    """The embedded ``pruned_pair`` graph: each window once, both last-step representations out.

    The masked twin recomputes only the positions the masked step reaches and shares the rest with the unmasked
    pass (training/trep_edge/training/pruned_graph.py), so a reading costs little more than one pruned window.
    """

    name = "pruned_pair"

    def __init__(self, session: ort.InferenceSession, engine: "Engine") -> None:
        self.engine = engine  # the session is engine.graphs["pruned_pair"]

    def pair(self, windows: np.ndarray, starts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """See ``Candidate.pair``."""
        s, w, _ = windows.shape
        feeds = {"x": np.ascontiguousarray(windows, dtype=np.float32), "mask": np.ones((s, w), dtype=bool),
                 "t": time_index(self.engine.convention, starts, w)}  # fmt: skip
        zu, zm = run_chunked(self.engine.graphs[self.name], ["z_unmasked", "z_masked"], feeds, self.engine.max_rows)
        return zu, zm


class StepCandidate(Candidate):
    """The embedded ``step`` graph of a causal model: per-lane convolution state, one step per reading."""

    name = "step"

    def __init__(self, session: ort.InferenceSession, engine: "Engine") -> None:
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

    def scorer(self) -> Scorer:
        """A ``StepScorer``; refused for a stream-scaled model, whose state would hold inputs scaled with outdated
        statistics."""
        if self.engine.card.scaling == "stream":
            raise ValueError("a stream-scaled model cannot run the incremental step engine (its state would hold "
                             "inputs scaled with outdated statistics): set model.engine to pruned_pair or full")
        return StepScorer(self._fresh(0))


CANDIDATES: dict[str, Callable[[ort.InferenceSession, "Engine"], Candidate]] = {
    "last_step": LastStepGraph,
    "pruned_pair": PrunedPairGraph,
    "step": StepCandidate,
}
"""Embedded graph name → the candidate that runs it."""
ENGINE_CHOICES = ("auto", "full", "last_step", "pruned_pair", "step")
EXACT_TOLERANCE = 1e-5


@dataclass
class Engine:
    """A loaded model: session, card, identity, the providers actually in use, and the chosen pair engine."""

    path: Path
    session: ort.InferenceSession
    card: ModelCard
    sha256: str
    providers: list[str]
    fallback: str | None = None
    max_rows: int = 1024
    graphs: dict[str, ort.InferenceSession] = field(default_factory=dict)
    selected: str = "full"
    selection_reason: str = "the full graph (no selection run)"
    candidates: dict[str, str] = field(default_factory=dict)
    weights: SharedWeights | None = field(default=None, repr=False)
    """The weights every session of this model uses (onnxruntime does not copy them): kept alive with the sessions."""
    convention: TimeIndex = field(init=False, repr=False)
    _chosen: Candidate = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.convention = self.card.convention()
        self._chosen = FullGraph(self)

    @property
    def status(self) -> dict:
        """What is running, for the status topic, metrics and ``trep-edge doctor``."""
        return {
            "model": self.card.name,
            "path": str(self.path),
            "sha256": self.sha256,
            "providers": self.providers,
            "provider_fallback": self.fallback,
            "engine": self.selected,
            "engine_reason": self.selection_reason,
            "engine_candidates": self.candidates,
        }

    def encode(self, x: np.ndarray, mask: np.ndarray, t: np.ndarray) -> np.ndarray:
        """Run the full graph on ``[B, T, C]`` in chunks of at most ``max_rows`` rows."""
        return run_chunked(self.session, ["z"], {"x": x, "mask": mask, "t": t}, self.max_rows)[0]

    def last_step_pair(self, windows: np.ndarray, starts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Last-step representations of ``windows [S, W, C]`` unmasked and masked, by the selected engine."""
        return self._chosen.pair(windows, starts)

    def scorer(self) -> Scorer:
        """A fresh scorer of the selected engine, for a monitor (module docstring)."""
        return self._chosen.scorer()

    def use(self, candidate: Candidate, reason: str) -> None:
        """Route ``last_step_pair`` through ``candidate`` (called by ``select_engine``)."""
        self._chosen, self.selected, self.selection_reason = candidate, candidate.name, reason


def probe_windows(card: ModelCard, count: int = 8, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Random windows with scattered NaNs, one mostly missing, and random start indices: the verification input."""
    rng = np.random.default_rng(seed)
    windows = rng.normal(size=(count, card.window, card.input_dims)).astype(np.float32)
    windows[rng.random(windows.shape) < 0.05] = np.nan
    windows[0, :-1] = np.nan
    return windows, rng.integers(0, 10_000, size=count)


def select_engine(engine: Engine, mode: str = "auto", timing_windows: int = 16) -> None:
    """Verify every candidate against the full graph, time the exact ones, and use the fastest (or ``mode``).

    A candidate whose pair differs from the full graph's by more than EXACT_TOLERANCE is not used (warning, and
    ``engine.candidates`` says why). ``mode`` other than auto forces one engine and refuses (ValueError) when the
    model does not carry it or it is not exact.
    """
    if mode not in ENGINE_CHOICES:
        raise ValueError(f"engine {mode!r} is unknown: choose one of {', '.join(ENGINE_CHOICES)}")
    full = FullGraph(engine)
    windows, starts = probe_windows(engine.card)
    reference = full.pair(windows, starts)
    exact: list[Candidate] = [full]
    for name, session in engine.graphs.items():
        if name not in CANDIDATES:
            continue
        try:  # an embedded graph that cannot even run must not stop the model from loading on the full graph
            candidate = CANDIDATES[name](session, engine)
            diff = max(float(np.max(np.abs(a - b))) for a, b in zip(candidate.pair(windows, starts), reference))
        except Exception as exc:  # onnxruntime and candidate set-up errors alike: reported, never fatal
            diff, why = float("nan"), f"refused: it fails on the probe windows ({exc})"
        else:
            why = f"refused: max |Δz| {diff:.1e} > {EXACT_TOLERANCE:g} vs the full graph"
        if diff <= EXACT_TOLERANCE:
            exact.append(candidate)
            engine.candidates[name] = f"exact (max |Δz| {diff:.1e} vs the full graph)"
        else:
            engine.candidates[name] = why
            log.warning("ENGINE %s NOT USED for %s: %s", name, engine.path, why)
    engine.candidates = {"full": "the reference", **engine.candidates}
    if mode != "auto":
        forced = next((c for c in exact if c.name == mode), None)
        if forced is None:
            why = engine.candidates.get(mode, f"the model carries no {mode!r} graph (it has: "
                                              f"{', '.join(engine.card.graphs) or 'none'})")  # fmt: skip
            raise ValueError(f"model.engine = {mode} cannot be used with {engine.path}: {why}; re-export the model "
                             "with `trep-edge export`, or set model.engine = auto")  # fmt: skip
        engine.use(forced, f"forced by model.engine = {mode}")
        return
    if len(exact) == 1:
        none = "" if engine.graphs else " (no extra graphs)"
        engine.use(full, f"the only exact engine for this model{none}")
        return
    timing = np.repeat(windows, -(-timing_windows // len(windows)), axis=0)[:timing_windows]
    timing_starts = np.resize(starts, timing_windows)
    cost = {c.name: c.seconds_per_window(timing, timing_starts) for c in exact}
    best = min(exact, key=lambda c: cost[c.name])
    for c in exact:
        engine.candidates[c.name] += f", {1000 * cost[c.name]:.3g} ms/window"
    others = ", ".join(f"{c.name} {1000 * cost[c.name]:.3g}" for c in exact if c is not best)
    engine.use(best, f"fastest exact engine: {best.name} {1000 * cost[best.name]:.3g} ms/window (vs {others})")


def _graph_sessions(
    stored: dict[str, bytes], weights: SharedWeights, card: ModelCard, path: Path, options: ort.SessionOptions,
    providers: list[str],
) -> tuple[dict[str, ort.InferenceSession], dict[str, str]]:
    """Sessions for the embedded graphs whose bytes match the card; the others with why they were skipped.

    A graph whose shared weights are missing or damaged is not skipped: the file is refused (``SharedWeights.restore``).
    """
    sessions, skipped = {}, {}
    for name, info in card.graphs.items():
        blob = stored.get(name)
        if blob is None:
            skipped[name] = "listed in the card but not embedded in the model file"
        elif info.get("window", card.window) != card.window:
            skipped[name] = f"built for window {info.get('window')}, the card's window is {card.window}"
        elif hashlib.sha256(blob).hexdigest() != info["sha256"]:
            skipped[name] = "its bytes do not match the sha256 in the card"
        else:
            graph = weights.restore(name, blob)
            try:
                sessions[name] = ort.InferenceSession(graph, sess_options=options, providers=providers)
            except Exception as exc:  # onnxruntime's own exception types: report, fall back to the others
                skipped[name] = f"onnxruntime cannot load it ({exc})"
    for name, why in skipped.items():
        log.warning("ENGINE %s NOT USED for %s: %s", name, path, why)
    return sessions, {name: f"refused: {why}" for name, why in skipped.items()}


def load_engine(
    path: str | Path, providers: str | list[str] = "auto", threads: int = 0, engine: str = "auto"
) -> Engine:
    """Load and check a model file and select its pair engine; raise ModelCardError / ValueError with what to fix."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"model file {path} does not exist")
    chosen, missing = choose_providers(providers)
    fallback = None
    if missing:
        fallback = f"requested {missing} not available in this onnxruntime; running on {chosen}"
        log.warning("EXECUTION PROVIDER FALLBACK: %s", fallback)
    options = ort.SessionOptions()
    # Idle intra-op threads sleep instead of spinning: on a small edge box the spin took CPU from the monitor's own
    # Python (windows, detector, MQTT) and from other processes, for no measurable gain (docs/performance.md).
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    if threads:
        options.intra_op_num_threads = threads
    data = path.read_bytes()
    try:
        weights = SharedWeights(data, str(path))
        session = ort.InferenceSession(data, sess_options=weights.options(options), providers=chosen)
    except Exception as exc:  # onnxruntime and protobuf raise their own exception types for unreadable graphs
        raise ModelCardError(f"{path} is not a loadable ONNX model: {exc}") from exc
    actual = session.get_providers()
    if actual[0] != chosen[0]:
        fallback = f"{chosen[0]} failed to initialise; running on {actual}"
        log.warning("EXECUTION PROVIDER FALLBACK: %s", fallback)
    card = read_card(session, path)
    check_graph(session, card, path)
    stored = unpack(session.get_modelmeta().custom_metadata_map).graphs
    graphs, refused = _graph_sessions(stored, weights, card, path, options, chosen)
    loaded = Engine(path, session, card, hashlib.sha256(data).hexdigest(), actual, fallback, graphs=graphs,
                    candidates=refused, weights=weights)  # fmt: skip
    select_engine(loaded, engine)
    return loaded
