"""The monitor: readings in; scored readings and alert state changes out, for every stream of one model.

``ingest`` files a reading into its stream's window (``windows.WindowStore``); ``tick`` finalises the ready steps
of all streams, scores every complete one in a single ``Engine.last_step_pair`` call (a stream with several new
steps gets one window per step) — or, when the engine selection chose the incremental ``step`` engine of a causal
model, advances each stream's ``step_engine.StepEngine`` state by every finalised step, one onnxruntime call per
round — then advances ``scoring.StreamScorer`` (adjusted score, threshold, the paper's
detector) and ``alerts.AlertTracker`` (episodes to publish) once per step, vectorised across streams. A complete
recorded series fed through it gives the scores of ``offline.raw_scores`` + ``scoring.score_series``.

Policies:

- **Unscorable steps.** A gap-filled step, or a reading with a channel missing in its prepared value, gets a NaN
  raw score and no engine row (the model masks such a step, so masked and unmasked coincide and the L1 distance is
  a meaningless 0). The scorer counts it as a point without a score; the tracker sees it as unknown.
- **Threshold.** The card's calibration (``mu + beta * sigma``) when present, else learned online per stream after
  ``min_count`` scores (``StreamScorer``).
- **Warm-up.** A stream is *warming* while it has fewer than ``warmup`` earlier finite raw scores since its last
  reset (default ``card.scoring.z``: until its adjusted score has a full history), or while its threshold is
  not known yet. ``ScoredReading.alert`` is the detector's decision whatever the warm-up (as offline); the
  tracker sees warming readings as unknown, so no episode is raised, updated or cleared during warm-up.
- **Resets** (a gap longer than ``max_gap``, a re-anchored clock, ``reset_stream``): the window, differencing
  memory, score history, online threshold statistics and detector restart. The alert tracker is kept: episode
  numbers keep counting (alert ids stay unique) and an open episode stays open until post-warm-up scores clear it.
- **Step engine state.** Every finalised step (readings, gap fills, incomplete steps) advances its stream's
  state in order; only complete steps are scored. A stream whose state is missing or stale (new, reset, restored
  from an older checkpoint, other weights) is rebuilt from its stored window before its next step — an empty
  window for a new or reset stream — which gives the windowed engine's scores exactly (receptive field ≤ window).
  The state is saved in ``state_dict`` so a restart resumes without rebuilding.
- **Model swap.** Same file (sha256) and card: everything is kept. Same inputs (channels, window, differencing,
  normalisation) but other weights: windows are kept, the score state restarts (raw scores of two models are on
  different scales, and must not share one adjusted-score history) with the new card's calibration. Other inputs:
  windows restart too (pending readings are discarded). Alert episodes are kept in every case.
"""
from __future__ import annotations

import json
import logging
import math
import time
from dataclasses import asdict, dataclass
from typing import Any, Mapping

import numpy as np

from .alerts import AlertConfig, AlertEvent, AlertTracker
from .engine import Engine
from .payloads import Reading
from .scoring import DEFAULT_MIN_COUNT, StreamScorer, raw_score
from .step_engine import StepEngine, StepGraph
from .windows import StepBatch, WindowConfig, WindowStore, contract_differences, input_contract

log = logging.getLogger(__name__)

MONITOR_COUNTERS = ("ticks", "engine_calls", "engine_rows", "scored", "detections", "alerts_raised",
                    "alerts_updated", "alerts_cleared", "streams_reset", "streams_removed", "model_swaps")  # fmt: skip


@dataclass
class ScoredReading:
    """One finalised reading of one stream and its score; NaN where not available (warming, unscorable step)."""

    stream: str
    step: int
    timestamp: float
    raw: float
    adjusted: float
    threshold: float
    warming: bool
    alert: bool  # the paper protocol's detector decision (score > threshold outside the refractory delay)
    values: dict[str, float]  # the step's raw channel values, NaN = missing
    window_start: float  # time of the window's first step (step * period)
    window_end: float  # time of the window's last step, the scored one


@dataclass
class AlertOut:
    """A change of a stream's alert episode, to publish: state ``raised`` | ``updated`` | ``cleared``."""

    alert_id: str
    stream: str
    state: str
    severity: str
    score: float  # the raw score of the reading that changed the state
    adjusted: float
    threshold: float
    values: dict[str, float]
    window_start: float
    window_end: float
    timestamp: float


@dataclass
class TickResult:
    """What one ``tick`` produced, and what its single engine call cost."""

    scored: list[ScoredReading]
    alerts: list[AlertOut]
    batch_rows: int  # rows sent to the engine (2 per scored window: unmasked and masked)
    inference_seconds: float


class Monitor:
    """Streaming anomaly scoring and alerting for many streams of one model (module docstring)."""

    def __init__(
        self,
        engine: Engine,
        windows: WindowConfig = WindowConfig(),
        alerts: AlertConfig = AlertConfig(),
        warmup: int | None = None,
        min_count: int = DEFAULT_MIN_COUNT,
    ) -> None:
        if warmup is not None and warmup < 0:
            raise ValueError(f"warmup must be >= 0 readings (or None for the card's scoring.z), got {warmup}")
        self.engine = engine
        self.alert_config = alerts
        self.min_count = int(min_count)
        self._warmup_arg = warmup
        self._store = WindowStore(engine.card, windows)
        self._scorer = self._new_scorer(0)
        self._tracker = AlertTracker(alerts)
        self._scored = np.zeros(0, dtype=np.int64)  # finite raw scores since each stream's last reset
        self._counters = dict.fromkeys(MONITOR_COUNTERS, 0)
        self._steps = self._new_step_engine(engine)

    @property
    def warmup(self) -> int:
        """Earlier finite scores a stream needs before it may alert."""
        return self.engine.card.scoring.z if self._warmup_arg is None else int(self._warmup_arg)

    @property
    def window_config(self) -> WindowConfig:
        """The window settings in use."""
        return self._store.config

    def _new_scorer(self, n_streams: int) -> StreamScorer:
        card = self.engine.card
        s = card.scoring
        return StreamScorer(s.z, s.beta, s.delay, card.calibration, self.min_count, n_streams=n_streams)

    def _new_step_engine(self, engine: Engine) -> StepEngine | None:
        """Per-stream state for the ``step`` engine when the selection chose it, else None (windowed scoring)."""
        if engine.selected != "step":
            return None
        steps = StepEngine(StepGraph(engine.graphs["step"]), engine.card)
        steps.add_streams(self._store.n_streams)
        return steps

    def _grow_to_store(self) -> None:
        added = self._store.n_streams - self._scorer.n_streams
        if added:
            self._scorer.add_streams(added)
            self._tracker.add_streams(added)
            self._scored = np.concatenate([self._scored, np.zeros(added, dtype=np.int64)])
            if self._steps is not None:
                self._steps.add_streams(added)

    # readings in

    def ingest(self, reading: Reading, now: float | None = None) -> str | None:
        """File a reading; None when accepted (duplicates included, counted), else the kind of rejection.

        ``now`` is the arrival time on ``tick``'s clock (starts the ``settle`` wait); without it the next tick
        stamps the arrival. Never raises on data: see ``windows.WINDOW_REJECTIONS``.
        """
        kind = self._store.ingest(reading, now)
        self._grow_to_store()
        return kind

    def tick(self, now: float) -> TickResult:
        """Score every ready step of every stream (one engine call, or one per round with the step engine)."""
        seconds = 0.0
        if self._steps is not None:
            started = time.perf_counter()
            self._refresh_steps()
            seconds = time.perf_counter() - started
        batch = self._store.collect(now, with_windows=self._steps is None)
        self._counters["ticks"] += 1
        order = np.argsort(batch.round, kind="stable")
        rounds = np.split(order, np.flatnonzero(np.diff(batch.round[order])) + 1) if len(batch) else []
        raw = np.full(len(batch), np.nan)
        rows_sent = 0
        if self._steps is not None:
            started = time.perf_counter()
            for rows in rounds:
                raw[rows] = self._advance_steps(batch, rows)
            seconds += time.perf_counter() - started
            rows_sent = 2 * len(batch)
            self._counters["engine_calls"] += len(rounds)
            self._counters["engine_rows"] += rows_sent
        elif batch.windows.shape[0]:
            started = time.perf_counter()
            z_unmasked, z_masked = self.engine.last_step_pair(batch.windows, batch.starts)
            seconds = time.perf_counter() - started
            raw[batch.complete] = raw_score(z_unmasked, z_masked)
            rows_sent = 2 * batch.windows.shape[0]
            self._counters["engine_calls"] += 1
            self._counters["engine_rows"] += rows_sent
        scored: list[ScoredReading] = []
        alerts: list[AlertOut] = []
        # One round = at most one step per stream; a stream's later steps need the state its earlier ones left.
        for rows in rounds:
            self._step_round(batch, rows, raw[rows], scored, alerts)
        return TickResult(scored, alerts, rows_sent, seconds)

    def _refresh_steps(self) -> None:
        """Rebuild the step state of live streams whose state is stale from their stored windows."""
        assert self._steps is not None
        stale = np.flatnonzero(~self._steps.valid)
        if stale.size:
            windows, ends, live = self._store.histories(stale)
            self._steps.rebuild(stale[live], windows[live], ends[live])

    def _advance_steps(self, batch: StepBatch, rows: np.ndarray) -> np.ndarray:
        """Advance one round (at most one row per stream) through the step engine; raw scores of its rows."""
        assert self._steps is not None
        idx, steps = batch.stream_idx[rows], batch.step[rows]
        # A new or reset stream (or a state that does not end just before this step) starts from an empty window.
        fresh = batch.reset[rows] | ~self._steps.valid[idx] | (self._steps.last_step[idx] != steps - 1)
        if fresh.any():
            empty = np.full((int(fresh.sum()), self._store.window - 1, len(self._store.channels)), np.nan, np.float32)
            self._steps.rebuild(idx[fresh], empty, steps[fresh] - 1)
        z_unmasked, z_masked = self._steps.advance(idx, batch.prepared[rows], steps)
        raw = np.full(len(rows), np.nan)
        complete = batch.complete[rows]
        raw[complete] = raw_score(z_unmasked[complete], z_masked[complete])
        return raw

    def _step_round(
        self, batch: StepBatch, rows: np.ndarray, raw: np.ndarray, scored: list[ScoredReading], alerts: list[AlertOut]
    ) -> None:
        idx = batch.stream_idx[rows]
        reset = idx[batch.reset[rows]]
        if reset.size:
            self._reset_scores(reset)
        out = self._scorer.step(idx, raw)
        warming = (self._scored[idx] < self.warmup) | np.isnan(out.thresholds)
        finite = np.isfinite(raw)
        self._scored[idx] += finite
        self._counters["scored"] += int(finite.sum())
        self._counters["detections"] += int(out.alerts.sum())
        events = self._tracker.step(idx, np.where(warming, np.nan, out.adjusted), out.thresholds)

        period, w = self._store.config.period, self._store.window
        for j in np.flatnonzero(batch.reading[rows]).tolist():
            row = int(rows[j])
            step = int(batch.step[row])
            scored.append(ScoredReading(
                stream=self._store.names[int(idx[j])], step=step, timestamp=float(batch.timestamp[row]),
                raw=float(raw[j]), adjusted=float(out.adjusted[j]), threshold=float(out.thresholds[j]),
                warming=bool(warming[j]), alert=bool(out.alerts[j]), values=self._values(batch.raw[row]),
                window_start=(step - w + 1) * period, window_end=step * period,
            ))  # fmt: skip
        position = {s: j for j, s in enumerate(idx.tolist())} if events else {}
        for event in events:
            j = position[event.stream_idx]
            row = int(rows[j])
            step = int(batch.step[row])
            alerts.append(self._alert_out(event, float(raw[j]), batch.raw[row], step, float(batch.timestamp[row])))

    def _values(self, raw: np.ndarray) -> dict[str, float]:
        return dict(zip(self._store.channels, raw.tolist()))

    def _alert_out(self, event: AlertEvent, score: float, raw: np.ndarray, step: int, timestamp: float) -> AlertOut:
        self._counters[f"alerts_{event.state}"] += 1
        stream = self._store.names[event.stream_idx]
        period, w = self._store.config.period, self._store.window
        return AlertOut(
            alert_id=event.alert_id(stream), stream=stream, state=event.state, severity=event.severity,
            score=score, adjusted=event.adjusted, threshold=event.threshold, values=self._values(raw),
            window_start=(step - w + 1) * period, window_end=step * period, timestamp=timestamp,
        )  # fmt: skip

    def _reset_scores(self, idx: np.ndarray) -> None:
        self._scorer.reset_streams(idx)
        self._scored[idx] = 0

    # stream management

    def _index(self, stream: str) -> int:
        if stream not in self._store.index:
            raise KeyError(f"unknown stream {stream!r}")
        return self._store.index[stream]

    def reset_stream(self, stream: str) -> None:
        """Restart a stream's window and scores (a new patient on a bed); its alert episode numbering continues."""
        i = self._index(stream)
        self._store.request_reset(i)
        self._reset_scores(np.array([i]))
        self._counters["streams_reset"] += 1

    def remove_stream(self, stream: str, now: float | None = None) -> list[AlertOut]:
        """Forget a stream (and its pending readings); returns a ``cleared`` event for an episode it left open."""
        i = self._index(stream)
        out = []
        if self._tracker.active_[i]:
            severity = ("none", "warning", "critical")[int(self._tracker.severity_[i])]
            alert_id = f"{stream}-{int(self._tracker.episode_[i])}"
            stamp = time.time() if now is None else now
            missing = dict.fromkeys(self._store.channels, math.nan)
            out.append(AlertOut(alert_id, stream, "cleared", severity, math.nan, math.nan, math.nan, missing,
                                math.nan, math.nan, stamp))  # fmt: skip
            self._counters["alerts_cleared"] += 1
        idx = np.array([i])
        self._store.remove_stream(i)
        if self._steps is not None:
            self._steps.remove_streams(idx)
        self._scorer.remove_streams(idx)
        self._tracker.remove_streams(idx)
        self._scored = np.delete(self._scored, idx)
        self._counters["streams_removed"] += 1
        return out

    def swap_engine(self, engine: Engine) -> None:
        """Hot model swap: keep what the new model can use (module docstring), log what was reset."""
        old = self.engine
        differs = contract_differences(input_contract(old.card), input_contract(engine.card))
        same_model = not differs and engine.sha256 == old.sha256 and engine.card.to_json() == old.card.to_json()
        n = self._store.n_streams
        if differs:
            store = WindowStore(engine.card, self._store.config)
            for name in self._store.names:
                store.add_stream(name)
            store.counters = self._store.counters
            store.counters["discarded"] += sum(len(self._store.pending_steps(i)) for i in range(n))
            self._store = store
            log.warning("model swap %s -> %s: %s differ; reset the windows and scores of all %d streams",
                        old.card.name, engine.card.name, ", ".join(differs), n)  # fmt: skip
        elif not same_model:
            log.info("model swap %s -> %s: same inputs, kept the windows of all %d streams; scores restart",
                     old.card.name, engine.card.name, n)  # fmt: skip
        else:
            log.info("model swap %s: same model, kept all state of %d streams", engine.card.name, n)
        self.engine = engine
        if not same_model:
            self._scorer = self._new_scorer(n)
            self._scored[:] = 0
        if not (same_model and self._steps is not None and engine.selected == "step"):
            # Other weights (or engine): the state is rebuilt from the kept windows before the next step.
            self._steps = self._new_step_engine(engine)
        self._counters["model_swaps"] += 1

    # status

    @property
    def counters(self) -> dict[str, int]:
        """Running totals: the window store's (readings_accepted, late, duplicate, ...) and the monitor's."""
        return {**self._store.counters, **self._counters}

    @property
    def streams(self) -> dict[str, str]:
        """Each stream's status: ``warming`` or ``active`` (may alert)."""
        ready = self._scored >= self.warmup
        if self._scorer.calibration is None:
            ready &= self._scorer.online.count_ >= self._scorer.online.min_count
        return {name: "active" if ok else "warming" for name, ok in zip(self._store.names, ready.tolist())}

    # state

    def state_dict(self) -> dict[str, np.ndarray]:
        """Everything needed to resume scoring at once, as a flat dict of arrays (``np.savez``; JSON via tolist)."""
        config = {"warmup": self._warmup_arg, "min_count": self.min_count, "sha256": self.engine.sha256,
                  "card": self.engine.card.to_json(), "alerts": asdict(self.alert_config),
                  "counters": self._counters}  # fmt: skip
        state = {"monitor/config": np.array(json.dumps(config)), "monitor/scored": self._scored.copy()}
        parts = [("windows", self._store), ("scorer", self._scorer), ("tracker", self._tracker)]
        if self._steps is not None:
            parts.append(("steps", self._steps))
        for prefix, part in parts:
            state.update({f"{prefix}/{k}": v for k, v in part.state_dict().items()})
        return state

    @classmethod
    def from_state(
        cls,
        engine: Engine,
        state: Mapping[str, Any],
        windows: WindowConfig | None = None,
        alerts: AlertConfig | None = None,
    ) -> "Monitor":
        """Resume from ``state_dict()``; ValueError for a model with other inputs (channels, window, ...).

        ``windows``/``alerts`` default to the saved settings. A model with the same inputs but other weights keeps
        the windows and restarts the scores, as ``swap_engine`` does.
        """
        def part(prefix: str) -> dict[str, Any]:
            return {k[len(prefix) + 1 :]: v for k, v in state.items() if k.startswith(prefix + "/")}

        config = json.loads(str(np.asarray(state["monitor/config"])))
        store = WindowStore.from_state(engine.card, part("windows"), windows)
        alerts = alerts or AlertConfig(**config["alerts"])
        monitor = cls(engine, store.config, alerts, config["warmup"], config["min_count"])
        monitor._store = store
        monitor._tracker = AlertTracker.from_state(part("tracker"))
        monitor._tracker.config = alerts
        scored = np.asarray(state["monitor/scored"], dtype=np.int64)
        n = store.n_streams
        if scored.shape != (n,) or monitor._tracker.n_streams != n:
            raise ValueError(f"monitor state is inconsistent: {n} streams, scores for {scored.shape}, "
                             f"{monitor._tracker.n_streams} alert rows")  # fmt: skip
        monitor._steps = monitor._new_step_engine(engine)
        if config["sha256"] == engine.sha256 and config["card"] == engine.card.to_json():
            monitor._scorer = StreamScorer.from_state(part("scorer"))
            monitor._scored = scored.copy()
            if monitor._steps is not None:
                monitor._steps.load_state(part("steps"), n)
        else:
            log.info("resuming with another model (%s): kept the windows of %d streams; scores restart",
                     engine.card.name, n)  # fmt: skip
            monitor._scorer = monitor._new_scorer(n)
            monitor._scored = np.zeros(n, dtype=np.int64)
        monitor._counters.update(config["counters"])
        return monitor
