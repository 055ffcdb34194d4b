"""The monitor: readings in; scored readings and alert state changes out, for every stream of one model.

``ingest`` files a reading into its stream's window (``windows.WindowStore``); ``tick`` finalises the ready steps
of all streams, runs the model once for all of them, and steps ``detector.Detector`` (signals, surprise, the alert
decision) and ``alerts.AlertTracker`` (episodes to publish) once per step, vectorised across streams. Offline
scoring (``offline.detect_recording``: ``trep-edge score``, the detection benchmark, promotion) feeds recordings to
this class too, so a recording scores the same offline and live.

Streams and lanes. The detector judges *lanes*, each one model window: a stream of a fixed-channel model is one lane
(named as the stream); a stream of a channel-independent model (card ``channel_mode = "independent"``) has one lane
per channel it sends, named ``stream + LANE_SEPARATOR + channel``, each scored by the shared univariate model. A
stream's score is its best lane's surprise, corrected for the number of lanes, and names the channel behind it.

Policies:

- **Engines.** The monitor scores each tick's finalised steps through ``Engine.scorer()``, the selected engine's
  ``engine.Scorer``, and does not know which engine it is: a windowed graph scores every complete step in one call,
  the incremental ``step`` engine of a causal model advances each lane's state one round at a time (and rebuilds
  a stale state from the stored window, which gives the windowed engines' scores exactly).
- **Per-stream state.** Every per-stream and per-lane array is a ``stream_state.StreamState`` listed in
  ``_holders()`` with its row space (stream or lane) and checkpoint prefix: streams and lanes are added, removed
  and saved through that list, and ``state_dict`` declares every key's rows for ``trep-edge reshard``.
- **Per-stream scaling** (card ``scaling = "stream"``): each lane's newest reading updates its
  ``preprocess.StreamScaler`` and the window is scaled with the result just before the engine call
  (``preprocess.scale_windows``), one round at a time, as offline.
- **Implausible values** (outside ``preprocess.plausible_bounds``: the card's physical ranges, or absurdly far from
  its training scale) are filed as missing, counted (``implausible_values``) and reported as a *sensor fault* of that
  channel (``SensorEvent``: raised on the first such value, cleared by the channel's next plausible value or when
  the stream is removed), so a broken sensor neither blinds the window nor raises an anomaly alert. Fault state
  is not checkpointed: after a restart a fault still present is raised again by its next value.
- **Disconnected sensors.** A reading that says its sensor is not connected (``Reading.disconnected``: the
  ``[input] disconnected`` encoding, ``payloads.mark_disconnected``) is not filed: its step is a gap, never scored,
  nothing is learned from it. A known stream reports it once as a sensor fault of no channel (``DISCONNECTED``),
  cleared by its next reading with a value, which restarts its windows and detector (its scale is kept): windows
  holding the missing stretch would look novel to the model for a window length and alert. A stream never seen
  before starts with its first value.
- **Unscorable steps.** A gap-filled step, or a reading with a channel missing in its prepared value, has no
  distance (NaN): the detector neither scores nor learns it.
- **Warm-up.** A stream is *warming* until it has ``detector.min_count`` scored readings; a warming reading never
  alerts, and the tracker sees it as unknown.
- **Resets** (a gap longer than ``max_gap``, a re-anchored clock, a sensor back from a disconnection): the lane's
  window restarts and its learned scale is kept (the sensor did not change); its detector resumes across the steps
  it missed (``Detector.resume``: what it has learnt of the sensor is kept, its warm-up starts again), or with
  ``[detector] resume`` off restarts. The stream's alert gate (warm-up, record, refractory period) resumes or
  restarts when all its lanes do; a channel of a channel-independent model restarted alone warms up on its own while
  the others keep judging the stream (a channel sent less often than ``max_gap`` restarts at each of its
  readings and is never judged, and its stream's other channels are). A stream-scaled lane idle since it started
  (``StreamScaler.idle``: its scale's warm-up ended on one repeated value) restarts its detector state at each
  reading until one moves: statistics of an idle sensor read the machine's start as an anomaly (the idle-start
  round, docs/detection.md). ``reset_stream`` (a new patient on a bed) restarts the scale too. The alert tracker
  is kept: episode numbers keep counting and an open episode stays open until post-warm-up scores clear it.
- **Bed events.** ``close_episodes`` clears open episodes on request (a new patient, a discharge); ``move_stream``
  gives one stream id's whole state to another (a patient moved to another bed) by renaming its rows in every
  holder, so the new id scores on without a warm-up.
- **Explanations** (``[alerts] explain``): a raised or updated episode carries ``explain.explain_readings`` of its
  reading (each channel's contribution, expected and seen values), computed right after the detector's step on the
  windows of this tick; a fixed-channel model adds one engine call per round that has such readings.
- **Model swap.** Same file (sha256) and card: everything is kept. Same input contract (``windows.input_contract``:
  channels, window length, differencing, forward fill, normalisation, scaling, channel mode) but another model
  (other weights, a re-export, another card): no stream warms up again. Windows, pending steps and scales are kept;
  the detector is handed over (``Detector.for_model``): its alert gate (threshold record, warm-up count,
  refractory period, hot run) and the ``deviation`` statistics describe the stream and are kept, while the model
  signals (distance, novelty: another model's outputs) are relearnt from each lane's newest ``detector.relearn``
  stored steps scored again by the new model, in engine calls of ``RELEARN_BATCH`` windows (measured in
  bench/results/swap_relearn.json). Other inputs: windows and detector restart (pending readings are discarded;
  lanes follow a changed channel mode), logged with the fields that differ. Alert episodes are kept in every case.
  A checkpoint restored with another model of the same inputs is handed over the same way.
"""
from __future__ import annotations

import json
import logging
import math
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Mapping

import numpy as np

from trep_edge.runtime.core.alerts import SEVERITIES, AlertConfig, AlertEvent, AlertTracker, episode_id
from trep_edge.runtime.core.detector import (
    Detector, DetectorConfig, DetectorStep, count_channels, window_deviation, window_repeats,
)
from trep_edge.runtime.core.engine import Engine, Scorer
from trep_edge.runtime.core.explain import Explanation, Subject, explain_readings
from trep_edge.runtime.core.reading import Reading
from trep_edge.runtime.core.preprocess import StreamScaler, plausible_bounds, scale_windows
from trep_edge.runtime.core.scoring import raw_score
from trep_edge.runtime.core.sharding import LANE_SEPARATOR
from trep_edge.runtime.core.stream_state import Rows, StreamState, declare, declare_holder
from trep_edge.runtime.core.windows import StepBatch, WindowConfig, WindowStore, contract_differences, input_contract

log = logging.getLogger(__name__)

RELEARN_BATCH = 2048
"""Windows per engine call when a swapped-in model scores the streams' stored steps again (bounds its memory)."""

MONITOR_COUNTERS = ("ticks", "engine_calls", "engine_rows", "scored", "detections", "alerts_raised",
                    "alerts_updated", "alerts_cleared", "streams_reset", "streams_removed", "model_swaps",
                    "implausible_values", "sensor_faults_raised", "sensor_faults_cleared", "disconnected_readings",
                    "streams_moved")  # fmt: skip
DISCONNECTED = ""
"""The channel of a stream-wide sensor fault: the stream said its sensor is not connected."""


@dataclass
class ScoredReading:
    """One finalised reading of one stream and its score; NaN where not available (warming, unscorable step)."""

    stream: str
    step: int
    timestamp: float
    raw: float  # the paper's masked-vs-unmasked distance, summed over the stream's lanes
    score: float  # the detector's score: its surprise, held below the threshold on readings it does not alert on
    surprise: float  # the detector's surprise (−log10 tail probability, corrected for the tests made)
    threshold: float
    warming: bool
    alert: bool  # the detector's decision
    channel: str  # the channel (lane) behind the score; "" for a fixed-channel model or no score
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
    score: float  # the detector's score of the reading that changed the state
    threshold: float
    channel: str
    values: dict[str, float]
    window_start: float
    window_end: float
    timestamp: float
    # Raised and updated alerts with [alerts] explain: each channel's contribution to the score (explain.py).
    explanation: Explanation | None = None
    cause: str = "anomaly"  # what raised the episode: "anomaly" | "stuck" (a channel frozen at one value) | "range"


@dataclass
class SensorEvent:
    """A sensor fault of one channel: ``raised`` by an implausible value, ``cleared`` by a plausible one (or the
    stream's removal); ``value`` is the value that changed the state (NaN on removal) and ``timestamp`` the reading's
    (the removal's clock time). Channel ``DISCONNECTED``: the stream's sensor is not connected (raised by a
    disconnected reading, cleared by a reading with a value)."""

    stream: str
    channel: str
    state: str
    value: float
    low: float  # the channel's plausible range
    high: float
    timestamp: float

    @property
    def fault(self) -> str:
        """``implausible`` (a channel's value out of range) or ``disconnected`` (the stream's sensor)."""
        return "disconnected" if self.channel == DISCONNECTED else "implausible"

    @property
    def alert_id(self) -> str:
        """The fault's id on the alerts topic: ``stream:sensor:channel`` (``stream:sensor`` for the stream's sensor)."""
        return f"{self.stream}:sensor" + (f":{self.channel}" if self.channel else "")


@dataclass
class TickResult:
    """What one ``tick`` produced, and what its engine calls cost."""

    scored: list[ScoredReading]
    alerts: list[AlertOut]
    batch_rows: int  # rows sent to the engine (2 per scored window: unmasked and masked)
    inference_seconds: float
    sensor: list[SensorEvent] = field(default_factory=list)  # sensor faults raised or cleared since the last tick
    # Per stream scored in this tick: its run of readings at or above the alert gate's bar that has not alerted
    # (yet: debounce, refractory period), as the gate holds it after the tick; 0 = none. The daemon's pending state.
    hot_runs: dict[str, int] = field(default_factory=dict)


def _span(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.3g} {unit}"
    return f"{seconds:.3g} s"


def lane_rounds(stream_of_row: np.ndarray, step: np.ndarray) -> list[np.ndarray]:
    """Split batch rows into rounds of at most one step per stream (all of that step's lanes), in time order."""
    if not len(step):
        return []
    order = np.lexsort((step, stream_of_row))
    s, k = stream_of_row[order], step[order]
    new_stream = np.r_[True, s[1:] != s[:-1]]
    group = np.cumsum(new_stream | np.r_[True, k[1:] != k[:-1]]) - 1
    first = np.maximum.accumulate(np.where(new_stream, group, 0))
    rounds = np.empty(len(step), dtype=np.int64)
    rounds[order] = group - first
    by_round = np.argsort(rounds, kind="stable")
    return np.split(by_round, np.flatnonzero(np.diff(rounds[by_round])) + 1)


class StreamRows(StreamState):
    """The monitor's own per-stream array: ``seen [S]``, arrival time of each stream's last accepted reading."""

    def _fresh(self, n: int) -> dict[str, np.ndarray]:
        return {"seen": np.full(n, np.nan)}

    def _config(self) -> dict[str, Any]:
        return {}


class LaneRows(StreamState):
    """The monitor's own per-lane array: ``stream [L]``, the stream (row) each lane belongs to."""

    def _fresh(self, n: int) -> dict[str, np.ndarray]:
        return {"stream": np.zeros(n, dtype=np.int64)}

    def _config(self) -> dict[str, Any]:
        return {}


class Monitor:
    """Streaming anomaly scoring and alerting for many streams of one model (module docstring)."""

    def __init__(
        self,
        engine: Engine,
        windows: WindowConfig = WindowConfig(),
        alerts: AlertConfig = AlertConfig(),
        detector: DetectorConfig = DetectorConfig(),
    ) -> None:
        self.engine = engine
        self.alert_config = alerts
        self.detector_config = detector
        self._store = WindowStore(engine.card, windows)
        self._names: list[str] = []
        self._index: dict[str, int] = {}
        self._stream_rows = StreamRows()
        self._lane_rows = LaneRows()
        self._scaler = self._new_scaler(0)
        self._detector = self._new_detector(0, 0)
        self._tracker = AlertTracker(alerts)
        self._counters = dict.fromkeys(MONITOR_COUNTERS, 0)
        self._scorer = self._new_scorer(engine, 0)
        self._bounds = self._new_bounds(engine)
        self._check_period(engine)
        self._faults: dict[str, set[str]] = {}  # stream -> channels with an open sensor fault
        self._sensor: list[SensorEvent] = []  # sensor fault changes for the next tick's result

    @property
    def independent(self) -> bool:
        """Whether every channel of a stream is its own lane (a channel-independent model)."""
        return self.engine.card.channel_mode == "independent"

    @property
    def window_config(self) -> WindowConfig:
        """The window settings in use."""
        return self._store.config

    def _new_detector(self, streams: int, lanes: int) -> Detector:
        card = self.engine.card
        detector = Detector(self.detector_config.for_scaling(card.scaling), card.repr_dims, card.detector_prior,
                            self._lane_channels)  # fmt: skip
        detector.add(streams, lanes)
        return detector

    @property
    def _lane_channels(self) -> int:
        """Channels of one lane's window."""
        return 1 if self.independent else self.engine.card.input_dims

    def _new_scaler(self, lanes: int) -> StreamScaler | None:
        if self.engine.card.scaling != "stream":
            return None
        c = self.detector_config
        return StreamScaler(c.scale_warmup, c.scale_adapt, n_streams=lanes * self.engine.card.input_dims)

    @staticmethod
    def _new_scorer(engine: Engine, lanes: int) -> Scorer:
        """The selected engine's scorer with fresh state for ``lanes`` lanes."""
        scorer = engine.scorer()
        if scorer.state is not None:
            scorer.state.add_streams(lanes)
        return scorer

    def _holders(self) -> list[tuple[str, StreamState, str, int]]:
        """Every per-stream and per-lane state but the window store's (which adds its lanes as readings arrive):
        (checkpoint prefix, holder, space ``stream`` or ``lane``, rows per entry). Adding, removing and saving
        streams and lanes goes through this list, so a new holder is one line here."""
        holders: list[tuple[str, StreamState, str, int]] = [
            ("monitor/streams", self._stream_rows, "stream", 1), ("monitor/lanes", self._lane_rows, "lane", 1),
            *((f"detector/{name}", part, space, 1) for name, part, space in self._detector.parts()),
            ("tracker", self._tracker, "stream", 1),
        ]  # fmt: skip
        if self._scaler is not None:
            holders.append(("scaler", self._scaler, "lane", self.engine.card.input_dims))
        if self._scorer.state is not None:
            holders.append(("steps", self._scorer.state, "lane", 1))
        return holders

    def _check_period(self, engine: Engine) -> None:
        """Warn when the model learned steps of another length than this monitor makes: its window would then span
        another stretch of time than it was trained on (49 s instead of 49 h), which no score can show."""
        period, card = self._store.config.period, engine.card
        if card.period and not math.isclose(card.period, period, rel_tol=1e-6):
            log.warning("model %s was trained on readings every %g s, but [windows] period is %g s: its %d-step window "
                        "spans %s instead; set period = %g (ignore this for a replay faster than real time)",
                        card.name, card.period, period, card.window, _span(card.window * period), card.period)  # fmt: skip

    # readings in

    @staticmethod
    def _new_bounds(engine: Engine) -> dict[str, tuple[float, float]]:
        low, high = plausible_bounds(engine.card)
        return {name: (float(low[c]), float(high[c])) for c, name in enumerate(engine.card.channels)}

    def _implausible(self, reading: Reading) -> dict[str, float]:
        """The reading's values outside their channel's plausible range, ±inf included (a CSV cell ``inf`` is a
        broken sensor's reading, not a missing one; the MQTT intake refuses non-finite values before this)."""
        if not isinstance(reading.values, dict):
            return {}
        bad = {}
        for channel, value in reading.values.items():
            bounds = self._bounds_of(channel)
            if bounds is not None and isinstance(value, (int, float)) and not math.isnan(value) \
                    and not bounds[0] <= value <= bounds[1]:  # fmt: skip
                bad[channel] = float(value)
        return bad

    def _track_faults(self, reading: Reading, bad: dict[str, float]) -> None:
        """Raise a sensor fault for each newly implausible channel of an accepted reading, clear recovered ones."""
        faults = self._faults.get(reading.stream, set())
        self._counters["implausible_values"] += len(bad)
        for channel, value in reading.values.items():
            if (channel in bad) == (channel in faults) or (channel not in bad and not value == value):
                continue  # no change; a missing value (NaN) says nothing about the sensor
            if channel in bad:
                faults.add(channel)
                self._sensor_event(reading.stream, channel, "raised", bad[channel], reading.timestamp)
            else:
                faults.discard(channel)
                self._sensor_event(reading.stream, channel, "cleared", float(value), reading.timestamp)
        if DISCONNECTED in faults and any(v == v for v in reading.values.values()):
            faults.discard(DISCONNECTED)
            self._sensor_event(reading.stream, DISCONNECTED, "cleared", math.nan, reading.timestamp)
        if faults:
            self._faults[reading.stream] = faults
        else:
            self._faults.pop(reading.stream, None)

    def _bounds_of(self, channel: str) -> tuple[float, float] | None:
        """A channel's plausible range; None for a channel the model does not know."""
        return self._bounds[self.engine.card.channels[0]] if self.independent else self._bounds.get(channel)

    def _sensor_event(self, stream: str, channel: str, state: str, value: float, stamp: float) -> None:
        low, high = (channel != DISCONNECTED and self._bounds_of(channel)) or (math.nan, math.nan)
        self._sensor.append(SensorEvent(stream, channel, state, value, low, high, stamp))
        self._counters[f"sensor_faults_{state}"] += 1

    def _lanes(self, reading: Reading) -> list[Reading]:
        if not self.independent or not isinstance(reading.values, dict):
            return [reading]
        name = self.engine.card.channels[0]
        return [Reading(f"{reading.stream}{LANE_SEPARATOR}{channel}", reading.timestamp, {name: value})
                for channel, value in reading.values.items()] or [reading]  # fmt: skip

    def _register_lane(self, lane: str, stream: str) -> None:
        """Give a lane the store just added its rows in every holder, and its stream too if it is new."""
        new_stream = stream not in self._index
        if new_stream:
            self._index[stream] = len(self._names)
            self._names.append(stream)
        for _, holder, space, per in self._holders():
            if space == "lane" or new_stream:
                holder.add_streams(per)
        self._lane_rows.stream[-1] = self._index[stream]

    def ingest(self, reading: Reading, now: float | None = None) -> str | None:
        """File a reading; None when accepted (duplicates included, counted), else the kind of rejection.

        ``now`` is the arrival time on ``tick``'s clock (starts the ``settle`` wait); without it the next tick
        stamps the arrival. Never raises on data: see ``windows.WINDOW_REJECTIONS``. A reading of a
        channel-independent model is accepted when any of its channels is. A disconnected reading is accepted and
        not filed (module docstring).
        """
        if reading.disconnected:
            return self._disconnected(reading, now)
        bad = self._implausible(reading)
        if bad:
            reading = Reading(reading.stream, reading.timestamp,
                              {k: math.nan if k in bad else v for k, v in reading.values.items()})  # fmt: skip
        # The sensor is back from a disconnection: the stream starts afresh at this reading.
        back = DISCONNECTED in self._faults.get(reading.stream, ()) and any(v == v for v in reading.values.values())
        kinds = []
        for lane in self._lanes(reading):
            before = self._store.n_streams
            kinds.append(self._store.ingest(lane, now, reset=back))
            if self._store.n_streams > before:
                self._register_lane(lane.stream, reading.stream)
        if None not in kinds:
            return kinds[0]
        stamp = time.time() if now is None else now
        self._stream_rows.seen[self._index[reading.stream]] = stamp
        if bad or reading.stream in self._faults:
            self._track_faults(reading, bad)
        return None

    def _disconnected(self, reading: Reading, now: float | None) -> None:
        """A known stream is alive and says its sensor is off: report that once (a new stream waits for a value)."""
        self._counters["disconnected_readings"] += 1
        i = self._index.get(reading.stream)
        if i is None:
            return None
        stamp = time.time() if now is None else now
        self._stream_rows.seen[i] = stamp
        faults = self._faults.setdefault(reading.stream, set())
        if DISCONNECTED not in faults:
            faults.add(DISCONNECTED)
            self._sensor_event(reading.stream, DISCONNECTED, "raised", math.nan, reading.timestamp)
        return None

    def period_mismatches(self, factor: float = 2.0) -> dict[str, float]:
        """Streams whose observed sampling period differs from the model card's by more than ``factor`` (either
        way), with that period in seconds; none when the card declares no period (a model for any period)."""
        period = self.engine.card.period
        if not period:
            return {}
        observed = self._store.observed_periods()
        with np.errstate(invalid="ignore"):
            off = np.flatnonzero((observed > factor * period) | (observed < period / factor))
        streams = self._lane_rows.stream[off] if self.independent else off
        return {self._names[int(i)]: float(observed[lane]) for i, lane in zip(streams, off)}

    def silent(self, now: float, after: float) -> list[str]:
        """Streams whose last accepted reading arrived more than ``after`` seconds before ``now``."""
        return [self._names[i] for i in np.flatnonzero(now - self._stream_rows.seen > after).tolist()]

    def tick(self, now: float) -> TickResult:
        """Score every ready step of every stream through the selected engine's scorer."""
        started = time.perf_counter()
        self._scorer.refresh(self._store.histories)
        seconds = time.perf_counter() - started
        # The deviation signal and explanations read each scored step's window, whatever the engine needs.
        with_windows = self._scorer.needs_windows or "deviation" in self.detector_config.signals \
            or self.detector_config.stuck > 0 or self.detector_config.stop > 0 or self.alert_config.explain  # fmt: skip
        batch = self._store.collect(now, with_windows=with_windows)
        self._counters["ticks"] += 1
        rounds = lane_rounds(self._lane_rows.stream[batch.stream_idx], batch.step)
        deviation = np.full((len(batch), 2, self._lane_channels), np.nan)
        repeat = np.full((len(batch), self._lane_channels), np.nan)
        inputs = batch.windows  # the windows the model saw, one per complete row (scaled for stream-scaled models)
        # Rows whose lane's detector restarts (a scale that learns anew, or a store reset without ``resume``), and
        # rows whose lane resumes across the gap its store reset after (``Detector.resume``).
        resumed = batch.reset if self.detector_config.resume else np.zeros(len(batch), dtype=bool)
        restart = batch.reset & ~resumed
        started = time.perf_counter()
        if batch.windows.shape[0]:
            inputs, idle = self._scaled_windows(batch, rounds, np.flatnonzero(batch.complete))
            restart, resumed = restart | idle, resumed & ~idle
            # Both before the stream scaling, which clips and moves the level: a level far beyond what the scale has
            # learnt would repeat the clip, and a constant window's scale floor (1 % of its level) would follow it.
            tied = count_channels(self._store.normalisation.counts, self._lane_channels)
            deviation[batch.complete] = window_deviation(batch.windows, self.detector_config.deviation_window, tied)
            repeat[batch.complete] = window_repeats(batch.windows)
        out = self._scorer.score(batch, rounds, inputs)
        raw = np.where(batch.complete, raw_score(out.z_unmasked, out.z_masked), np.nan)
        z, rows_sent = out.z_unmasked, out.rows
        self._counters["engine_calls"] += out.calls
        seconds += time.perf_counter() - started
        self._counters["engine_rows"] += rows_sent
        scored: list[ScoredReading] = []
        alerts: list[AlertOut] = []
        # One round = at most one step per stream; a stream's later steps need the state its earlier ones left.
        window_of = np.cumsum(batch.complete) - 1 if len(inputs) else np.full(len(batch), -1)
        window_of[~batch.complete] = -1
        for rows in rounds:
            self._step_round(batch, rows, restart[rows], resumed[rows], raw[rows], z[rows], deviation[rows],
                             repeat[rows], (inputs, window_of), scored, alerts)  # fmt: skip
        sensor, self._sensor = self._sensor, []
        gate, rows = self._detector.gate, {s.stream: self._index[s.stream] for s in scored}
        at = np.fromiter(rows.values(), dtype=np.int64, count=len(rows))
        hot_runs = dict(zip(rows, np.where(gate.alerted_[at], 0, gate.hot_[at]).tolist()))
        return TickResult(scored, alerts, rows_sent, seconds, sensor, hot_runs)

    def _whole(self, hit: np.ndarray) -> np.ndarray:
        """Per stream, whether the lanes ``hit`` (their streams' rows) are all of its lanes."""
        n = len(self._names)
        return np.bincount(hit, minlength=n) == np.bincount(self._lane_rows.stream, minlength=n)

    def _scaled_windows(
        self, batch: StepBatch, rounds: list[np.ndarray], complete: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
        """The batch's windows, each scaled by its lane's statistics up to its step (stream-scaled models), and the
        rows whose lane's scale warm-up starts again, every channel still idle (``StreamScaler.idle``): the detector
        restarts such a lane, whose statistics of an idle sensor say nothing of the machine once it runs."""
        idle = np.zeros(len(batch), dtype=bool)
        if self._scaler is None:
            return batch.windows, idle
        windows = np.array(batch.windows, dtype=np.float32)
        position = np.full(len(batch), -1)
        position[complete] = np.arange(len(complete))
        c = self.engine.card.input_dims
        for rows in rounds:
            kept = rows[position[rows] >= 0]  # the round's complete rows
            if kept.size:
                pos = position[kept]
                scaler_rows = (batch.stream_idx[kept][:, None] * c + np.arange(c)).ravel()
                windows[pos] = scale_windows(self._scaler, scaler_rows, windows[pos])
                idle[kept] = self._scaler.idle(scaler_rows).reshape(-1, c).all(axis=1)
        return windows, idle

    def _step_round(
        self,
        batch: StepBatch,
        rows: np.ndarray,
        reset: np.ndarray,
        resumed: np.ndarray,
        raw: np.ndarray,
        z: np.ndarray,
        deviation: np.ndarray,
        repeat: np.ndarray,
        inputs: tuple[np.ndarray, np.ndarray],
        scored: list[ScoredReading],
        alerts: list[AlertOut],
    ) -> None:
        lanes = batch.stream_idx[rows]
        streams, lane_of = np.unique(self._lane_rows.stream[lanes], return_inverse=True)
        # The alert gate restarts (or resumes) with a stream's last lane: a channel restarted alone warms up on its own.
        if reset.any():
            hit = self._lane_rows.stream[lanes[reset]]
            self._detector.reset(np.unique(hit[self._whole(hit)[hit]]), lanes[reset])
        if resumed.any():
            hit = self._lane_rows.stream[lanes[resumed]]
            whole, position = np.unique(hit, return_inverse=True)
            kept = self._whole(hit)[whole]
            at = np.where(kept[position], np.cumsum(kept)[position] - 1, -1)  # each lane's stream among whole[kept]
            self._detector.resume(whole[kept], lanes[resumed], at, batch.skipped[rows][resumed])
        # Each row's prepared reading: the value its window ends on (NaN = missing), for the seasonal record.
        out = self._detector.step(streams, lanes, lane_of, raw, z, deviation, repeat, batch.prepared[rows])
        self._counters["scored"] += int(np.isfinite(out.score).sum())
        self._counters["detections"] += int(out.alert.sum())
        threshold = self.detector_config.threshold
        # Episodes follow the surprise (severity, clear), and open on the detector's alerts only.
        events = self._tracker.step(streams, np.where(out.warming, np.nan, out.surprise), threshold, out.alert,
                                    out.stuck, out.ranged)  # fmt: skip

        is_reading = np.zeros(len(streams), dtype=bool)
        np.logical_or.at(is_reading, lane_of, batch.reading[rows])
        stream_raw = np.zeros(len(streams))
        np.add.at(stream_raw, lane_of, raw)
        period, w = self._store.config.period, self._store.window
        first_row = np.zeros(len(streams), dtype=np.int64)
        first_row[lane_of[::-1]] = rows[::-1]
        values = [dict() for _ in streams] if self.independent else None
        if values is not None:
            for j, row in zip(lane_of.tolist(), rows.tolist()):
                values[j][self._channel(int(batch.stream_idx[row]))] = float(batch.raw[row, 0])
        for j in np.flatnonzero(is_reading).tolist():
            row = int(first_row[j])
            step = int(batch.step[row])
            timestamps = batch.timestamp[rows[lane_of == j]]
            scored.append(ScoredReading(
                stream=self._names[int(streams[j])], step=step, timestamp=float(np.nanmin(timestamps)),
                raw=float(stream_raw[j]), score=float(out.score[j]), surprise=float(out.surprise[j]),
                threshold=threshold,
                warming=bool(out.warming[j]), alert=bool(out.alert[j]), channel=self._channel(int(out.lane[j])),
                values=values[j] if values is not None else self._values(batch.raw[row]),
                window_start=(step - w + 1) * period, window_end=step * period,
            ))  # fmt: skip
        position = {s: j for j, s in enumerate(streams.tolist())} if events else {}
        explained = self._explain(batch, rows, lane_of, out, inputs,
                                  [position[e.stream_idx] for e in events if e.state != "cleared"])  # fmt: skip
        for event in events:
            j = position[event.stream_idx]
            row = int(first_row[j])
            step = int(batch.step[row])
            stamp = float(np.nanmin(batch.timestamp[rows[lane_of == j]])) if is_reading[j] else math.nan
            vals = values[j] if values is not None else self._values(batch.raw[row])
            alerts.append(self._alert_out(event, self._channel(int(out.lane[j])), vals, step, stamp,
                                          explained.get(j)))  # fmt: skip

    def _explain(
        self,
        batch: StepBatch,
        rows: np.ndarray,
        lane_of: np.ndarray,
        out: DetectorStep,
        inputs: tuple[np.ndarray, np.ndarray],
        positions: list[int],
    ) -> dict[int, Explanation]:
        """Explanations of the round's streams at ``positions`` (those raising or escalating an episode)."""
        if not positions or not self.alert_config.explain:
            return {}
        windows, window_of = inputs
        nan_window = np.full(windows.shape[1:], np.nan, dtype=np.float32)
        subjects = []
        for j in positions:
            mine = rows[lane_of == j]
            lanes = batch.stream_idx[mine]
            at = window_of[mine]
            # The windows before per-stream scaling: expected values are read back through the card's normalisation.
            prepared = np.stack([batch.windows[k] if k >= 0 else nan_window for k in at.tolist()])
            if self.independent:
                subjects.append(Subject(tuple(self._channel(int(lane)) for lane in lanes), lanes, prepared,
                                        batch.raw[mine, 0], out.lane_score[lane_of == j]))  # fmt: skip
            else:
                subjects.append(Subject(tuple(self._store.channels), lanes, prepared, batch.raw[mine[0]],
                                        out.lane_score[lane_of == j], windows[at], int(batch.starts[at[0]]),
                                        out.deviation[lane_of == j]))  # fmt: skip
        return dict(zip(positions, explain_readings(self.engine, self._detector, subjects,
                                                    self.detector_config.threshold)))  # fmt: skip

    def _channel(self, lane: int) -> str:
        """The channel a lane scores: its name after the separator (channel-independent models), else ""."""
        if lane < 0 or not self.independent:
            return ""
        return self._store.names[lane].split(LANE_SEPARATOR, 1)[1]

    def _values(self, raw: np.ndarray) -> dict[str, float]:
        return dict(zip(self._store.channels, raw.tolist()))

    def _alert_out(
        self, event: AlertEvent, channel: str, values: dict[str, float], step: int, stamp: float,
        explanation: Explanation | None = None,
    ) -> AlertOut:
        self._counters[f"alerts_{event.state}"] += 1
        stream = self._names[event.stream_idx]
        period, w = self._store.config.period, self._store.window
        return AlertOut(
            alert_id=event.alert_id(stream), stream=stream, state=event.state, severity=event.severity,
            score=event.score, threshold=event.threshold, channel=channel, values=values,
            window_start=(step - w + 1) * period, window_end=step * period, timestamp=stamp, explanation=explanation,
            cause=event.cause,
        )  # fmt: skip

    # stream management

    def _stream_lanes(self, stream: str) -> tuple[int, np.ndarray]:
        if stream not in self._index:
            raise KeyError(f"unknown stream {stream!r}")
        i = self._index[stream]
        return i, np.flatnonzero(self._lane_rows.stream == i)

    def _scaler_rows(self, lanes: np.ndarray) -> np.ndarray:
        c = self.engine.card.input_dims
        return (lanes[:, None] * c + np.arange(c)).ravel()

    def reset_stream(self, stream: str) -> None:
        """Restart a stream's windows, scales and detector (a new patient on a bed); episode numbering continues."""
        i, lanes = self._stream_lanes(stream)
        for lane in lanes.tolist():
            self._store.request_reset(lane)
        self._detector.reset(np.array([i]), lanes)
        if self._scaler is not None:
            self._scaler.reset_streams(self._scaler_rows(lanes))
        self._counters["streams_reset"] += 1

    def remove_stream(self, stream: str, now: float | None = None) -> list[AlertOut]:
        """Forget a stream (and its pending readings); returns a ``cleared`` event for an episode it left open."""
        return self.remove_streams([stream], now)

    def remove_streams(self, streams: list[str], now: float | None = None) -> list[AlertOut]:
        """Forget streams in one pass over the per-stream state (an eviction sweep may close thousands); returns a
        ``cleared`` event for each episode they left open, and queues the clearing of their sensor faults."""
        stamp = time.time() if now is None else now
        for stream in streams:
            self._stream_lanes(stream)  # unknown names are refused before anything changes
        idx = np.array(sorted({self._index[s] for s in streams}), dtype=np.int64)
        lanes = np.flatnonzero(np.isin(self._lane_rows.stream, idx))
        out = self._close(idx, stamp)
        for i in idx.tolist():
            for channel in sorted(self._faults.pop(self._names[i], ())):
                self._sensor_event(self._names[i], channel, "cleared", math.nan, stamp)
        self._store.remove_streams(lanes)
        for _, holder, space, per in self._holders():
            rows = idx if space == "stream" else lanes
            holder.remove_streams((rows[:, None] * per + np.arange(per)).ravel())
        self._lane_rows.stream[:] -= np.searchsorted(idx, self._lane_rows.stream)  # renumber past removed streams
        removed = set(idx.tolist())
        self._names = [name for i, name in enumerate(self._names) if i not in removed]
        self._index = {name: i for i, name in enumerate(self._names)}
        self._counters["streams_removed"] += len(idx)
        return out

    def close_episodes(self, streams: list[str], now: float | None = None) -> list[AlertOut]:
        """Clear the open episodes of ``streams`` on request (a new patient, a discharge): a ``cleared`` event each;
        their next alert opens a new episode. Unknown names are refused before anything changes."""
        idx = np.array(sorted({self._stream_lanes(s)[0] for s in streams}), dtype=np.int64)
        return self._close(idx, time.time() if now is None else now)

    def _close(self, idx: np.ndarray, stamp: float) -> list[AlertOut]:
        out = []
        missing = dict.fromkeys(self._store.channels, math.nan)
        for i in idx[self._tracker.active_[idx]].tolist():
            stream, severity = self._names[i], SEVERITIES[int(self._tracker.severity_[i])]
            out.append(AlertOut(episode_id(stream, self._tracker.episode_[i]), stream, "cleared", severity, math.nan,
                                math.nan, "", dict(missing), math.nan, math.nan, stamp))  # fmt: skip
            self._counters["alerts_cleared"] += 1
        self._tracker.close(idx)
        return out

    def move_stream(self, old: str, new: str, now: float | None = None) -> list[AlertOut]:
        """Give stream ``old``'s state to the id ``new`` (a patient moved to another bed): its windows with their
        pending readings, scales, detector and step-engine state and arrival time, so ``new`` scores on without a
        warm-up; ``old`` is gone. An episode's id names its stream, so the open episodes of both are cleared;
        ``new``'s own state, if any, is removed first; ``new``'s episode numbers continue above both ids'. Sensor
        faults belong to the old id's sensors: they are cleared with it. Returns the ``cleared`` events."""
        if old == new:
            raise ValueError(f"cannot move stream {old!r} onto itself")
        self._stream_lanes(old)
        stamp = time.time() if now is None else now
        out, episodes = [], 0
        if new in self._index:
            episodes = int(self._tracker.episode_[self._index[new]])
            out += self.remove_streams([new], stamp)
        i, lanes = self._stream_lanes(old)
        out += self._close(np.array([i]), stamp)
        for channel in sorted(self._faults.pop(old, ())):
            self._sensor_event(old, channel, "cleared", math.nan, stamp)
        for lane in lanes.tolist():  # a channel-independent model's lanes are named stream + separator + channel
            self._store.rename_stream(lane, new + self._store.names[lane][len(old):])
        self._names[i] = new
        del self._index[old]
        self._index[new] = i
        self._tracker.episode_[i] = max(episodes, int(self._tracker.episode_[i]))
        self._counters["streams_moved"] += 1
        return out

    def swap_engine(self, engine: Engine) -> None:
        """Hot model swap: keep what the new model can use (module docstring), log what was reset."""
        old = self.engine
        differs = contract_differences(input_contract(old.card), input_contract(engine.card))
        same_model = not differs and engine.sha256 == old.sha256 and engine.card.to_json() == old.card.to_json()
        lanes = self._store.n_streams
        if differs:
            store = WindowStore(engine.card, self._store.config)
            if engine.card.channel_mode != old.card.channel_mode:
                # Lanes follow the new mode: one per stream, or one per channel as its readings come.
                fixed = engine.card.channel_mode != "independent"
                self._lane_rows = LaneRows(len(self._names) if fixed else 0)
                self._lane_rows.stream[:] = np.arange(self._lane_rows.n_streams)
                names = self._names if fixed else []
            else:
                names = self._store.names
            for name in names:
                store.add_stream(name)
            store.counters = self._store.counters
            store.counters["discarded"] += sum(len(self._store.pending_steps(i)) for i in range(lanes))
            self._store, lanes = store, store.n_streams
            log.warning("model swap %s -> %s: %s differ; reset the windows and scores of all %d streams",
                        old.card.name, engine.card.name, ", ".join(differs), len(self._names))  # fmt: skip
        elif same_model:
            log.info("model swap %s: same model, kept all state of %d streams", engine.card.name, len(self._names))
        self.engine = engine
        self._bounds = self._new_bounds(engine)
        self._check_period(engine)
        if differs:
            self._scaler = self._new_scaler(lanes)
            self._detector = self._new_detector(len(self._names), lanes)
        elif not same_model:
            started = time.perf_counter()
            relearnt = self._relearn_detector()
            log.info("model swap %s -> %s: same inputs, kept the windows, scales and alert state of all %d streams; "
                     "relearnt the model signals of %d lanes from their stored steps in %.2f s", old.card.name,
                     engine.card.name, len(self._names), relearnt, time.perf_counter() - started)  # fmt: skip
        if not (same_model and engine.selected == old.selected):
            # Other weights (or engine): an engine's state is rebuilt from the kept windows before the next step.
            self._scorer = self._new_scorer(engine, lanes)
        self._counters["model_swaps"] += 1

    def _relearn_detector(self) -> int:
        """Hand the detector over to the model just swapped in, which has the same inputs (``Detector.for_model``):
        the newest ``detector.relearn`` stored steps of every live lane are scored again by the new model, each as
        the last step of its window (NaN before the stored steps, as at a stream's start), in engine calls of at most
        ``RELEARN_BATCH`` windows, and the detector relearns its model signals from them. Returns the lanes
        relearnt."""
        engine, store, w = self.engine, self._store, self._store.window
        self._detector = self._detector.for_model(engine.card.repr_dims, engine.card.detector_prior)
        history, ends, live = store.histories(np.arange(store.n_streams))
        lanes, r = np.flatnonzero(live), min(self.detector_config.relearn, w)
        per_call = max(1, RELEARN_BATCH // max(r, 1))  # lanes per engine call
        for first in range(0, len(lanes) if r else 0, per_call):
            chunk = lanes[first : first + per_call]
            steps = history[chunk]
            padded = np.concatenate([np.full((len(chunk), w - 1, steps.shape[2]), np.nan, np.float32), steps], 1)
            lane, k = np.nonzero(~np.isnan(steps[:, w - r :]).any(axis=2))  # scorable: every prepared channel
            if not lane.size:
                continue
            row = k + w - r  # the stored step that ends the window
            windows = padded[lane[:, None], row[:, None] + np.arange(w)]
            if self._scaler is not None:
                windows = scale_windows(self._scaler, self._scaler_rows(chunk[lane]), windows, learn=False)
            z_unmasked, z_masked = engine.last_step_pair(windows, ends[chunk][lane] - 2 * (w - 1) + row)
            distance = np.full((len(chunk), r), np.nan)
            z = np.zeros((len(chunk), r, engine.card.repr_dims), dtype=np.float32)
            distance[lane, k], z[lane, k] = raw_score(z_unmasked, z_masked), z_unmasked
            self._detector.relearn(chunk, distance, z)
        return len(lanes) if r else 0

    # status

    @property
    def counters(self) -> dict[str, int]:
        """Running totals: the window store's (readings_accepted, late, duplicate, ...) and the monitor's."""
        return {**self._store.counters, **self._counters}

    def has_stream(self, name: str) -> bool:
        """Whether ``name`` is one of the streams."""
        return name in self._index

    @property
    def streams(self) -> dict[str, str]:
        """Each stream's status: ``warming`` or ``active`` (may alert)."""
        # The gate's own count: a card prior shortens the warm-up below detector.min_count.
        ready = self._detector.gate.scored_ >= self._detector.gate.min_count
        return {name: "active" if ok else "warming" for name, ok in zip(self._names, ready.tolist())}

    # state

    def state_dict(self) -> dict[str, np.ndarray]:
        """Everything needed to resume scoring at once, as a flat dict of arrays (``np.savez``; JSON via tolist),
        with the rows of every key declared (``stream_state.LAYOUT_KEY``) for ``trep-edge reshard``."""
        config = {"detector": self.detector_config.to_dict(), "sha256": self.engine.sha256,
                  "card": self.engine.card.to_json(), "alerts": asdict(self.alert_config), "names": self._names,
                  "counters": self._counters}  # fmt: skip
        state = {"monitor/config": np.array(json.dumps(config))}
        rows = {"monitor/config": Rows(names="stream")}
        state.update({f"windows/{k}": v for k, v in self._store.state_dict().items()})
        rows.update(self._store.declare("windows", "lane"))
        for prefix, holder, space, per in self._holders():
            if holder is self._stream_rows:
                continue  # arrival times are not saved: silence is counted from the restore
            part = holder.state_dict()
            state.update({f"{prefix}/{k}": v for k, v in part.items()})
            rows.update(declare_holder(prefix, part, space, per))
        rows["monitor/lanes/stream"] = Rows("lane", refers="stream")
        declare(state, rows)
        return state

    @classmethod
    def from_state(
        cls,
        engine: Engine,
        state: Mapping[str, Any],
        windows: WindowConfig | None = None,
        alerts: AlertConfig | None = None,
        detector: DetectorConfig | None = None,
    ) -> "Monitor":
        """Resume from ``state_dict()``; ValueError for a model with other inputs (channels, window, ...).

        ``windows``/``alerts``/``detector`` default to the saved settings. A model with the same inputs but other
        weights keeps everything but the model signals, which it relearns, as ``swap_engine`` does; other detector
        settings keep the windows and scales and restart the detector.
        """
        config = json.loads(str(np.asarray(state["monitor/config"])))
        store = WindowStore.from_state(engine.card, _part(state, "windows"), windows)
        saved_detector = DetectorConfig.from_dict(config["detector"])
        monitor = cls(engine, store.config, alerts or AlertConfig(**config["alerts"]), detector or saved_detector)
        monitor._restore(store, config, saved_detector, state)
        return monitor

    def _restore(self, store: WindowStore, config: dict[str, Any], saved_detector: DetectorConfig,
                 state: Mapping[str, Any]) -> None:  # fmt: skip
        """Adopt a saved state (``from_state``)."""
        engine = self.engine
        self._store = store
        self._names = list(config["names"])
        self._index = {name: i for i, name in enumerate(self._names)}
        lanes, streams = store.n_streams, len(self._names)
        self._lane_rows = LaneRows.from_state(_part(state, "monitor/lanes"))
        self._stream_rows = StreamRows(streams)
        self._stream_rows.seen[:] = time.time()  # silence is counted from the restore
        self._tracker = AlertTracker.from_state(_part(state, "tracker"))
        self._tracker.config = self.alert_config
        if self._lane_rows.n_streams != lanes or self._tracker.n_streams != streams:
            raise ValueError(f"monitor state is inconsistent: {lanes} lanes mapped by {self._lane_rows.n_streams}, "
                             f"{streams} streams, {self._tracker.n_streams} alert rows")  # fmt: skip
        if self._scaler is not None:
            # The saved scales under the settings in force (scale_warmup, scale_adapt), not those saved with them.
            saved = _part(state, "scaler")
            self._scaler = self._new_scaler(lanes).with_arrays(saved) if saved else self._new_scaler(lanes)
        self._scorer = self._new_scorer(engine, lanes)
        same_model = config["sha256"] == engine.sha256 and config["card"] == engine.card.to_json()
        self._detector = self._new_detector(streams, lanes)
        if self.detector_config != saved_detector:
            log.info("resuming with other detector settings: kept the windows of %d streams; scores restart", streams)
        elif same_model:
            self._detector.load_state(_part(state, "detector"))
            self._scorer.restore(_part(state, "steps"), lanes)
        else:  # the state of another model with the same inputs: handed over as by a hot swap
            self._detector.load_state(_part(state, "detector"))
            relearnt = self._relearn_detector()
            log.info("resuming with another model (%s): kept the windows, scales and alert state of %d streams; "
                     "relearnt the model signals of %d lanes", engine.card.name, streams, relearnt)  # fmt: skip
        self._counters.update(config["counters"])


def _part(state: Mapping[str, Any], prefix: str) -> dict[str, Any]:
    """The keys of ``state`` under ``prefix/``, without it."""
    return {k[len(prefix) + 1 :]: v for k, v in state.items() if k.startswith(prefix + "/")}
