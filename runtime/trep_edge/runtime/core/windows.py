"""Per-stream sliding windows of prepared model input: time steps, merging, gaps, late readings and resets.

The store turns readings that arrive in any order, split over several messages, with holes, into the windows
the model scores, prepared exactly as ``offline.prepare`` prepares a recorded series (the same ``difference`` and
``Normalisation`` code on the same float64 values), so a stream and its recording give the same model input.

Policies (``WindowConfig`` holds the knobs):

- **Time steps.** A reading belongs to step ``k = floor(timestamp / period + 0.5)``, an absolute index, so a
  periodic time index sees a meaningful phase; the window ending at step k starts at ``k - W + 1``.
- **Merging.** Readings of the same step merge channel by channel. A second value for a channel replaces the
  first (the later wins) and the reading is counted as a ``duplicate``; a missing value (NaN) never replaces a
  received one. Channels a stream never sends stay NaN.
- **Pending steps.** A step waits until it is *ready*: ``settle`` seconds after its first reading arrived
  (waiting for other channels of the same step), or as soon as a step more than ``late_tolerance`` steps newer
  has arrived (a newer reading shows the older step is complete; ``late_tolerance`` > 0 keeps a reorder buffer
  for producers that interleave steps). Ready steps are finalised in time order by ``collect``.
- **Late readings.** A reading for a step at or before the stream's last finalised step is dropped and counted
  as ``late``: finalised steps have been scored and published, and history is not rewritten. A stream whose
  readings are late ``reanchor_after`` times in a row has had its clock set back (a device reboot, an NTP jump);
  it is reset to follow the new clock (``reanchors``) instead of dropping everything until its old time.
- **Jumps ahead.** A reading more than ``max_gap`` steps ahead of everything its stream has sent (a clock slip, a
  time-zone error) is set aside as ``ahead`` instead of resetting the stream, whose next readings on its own clock
  then go on as before. Only when ``jump_confirm`` readings in a row arrive that far ahead (a stream back from a
  long silence, a clock corrected for good) is the jump accepted and the stream follows it.
- **Gaps.** Between two finalised steps up to ``max_gap`` missing steps are filled with NaN (the model sees them
  as missing; they are not readings and are not scored). A longer gap resets the stream: its window and
  differencing memory start from NaN again, as at a new stream (``resets``), and the next row is flagged with the
  steps it skipped (``StepBatch.skipped``) so the monitor resumes its score state across them (``Detector.resume``).
  ``ingest(..., reset=True)`` restarts a stream the same way at that reading's step (a sensor back from a
  disconnection), whatever is still pending before it.
- **Preparation.** Differencing ``card.differencing`` times uses the stream's last raw values (NaN after a gap or
  reset, as at the start of a recording), then ``card.normalisation`` applies. A step whose prepared value has a
  NaN channel is *incomplete*: the model masks such a step, so its masked/unmasked score would be a meaningless 0.

Storage is ``WindowRows``, a ``stream_state.StreamState``: one float32 array ``[S, W, C]`` of prepared windows
(oldest step first), ``[S, d, C]`` of raw differencing memory (float64, as the carried forward-fill values: a
meter's total near 1e7 keeps its 0.1 steps) and a few ``[S]`` arrays for all streams, grown by doubling as streams
appear; per-step Python work is bookkeeping.
"""
from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from typing import Any, Mapping

import numpy as np

from trep_edge.runtime.core.model_card import ModelCard
from trep_edge.runtime.core.reading import Reading
from trep_edge.runtime.core.preprocess import Normalisation, difference, forward_fill
from trep_edge.runtime.core.stream_state import Rows, StreamState

WINDOW_REJECTIONS = ("late", "ahead", "empty", "non_finite", "absurd_timestamp", "too_many_streams", "wrong_type")
"""Kinds ``WindowStore.ingest`` (and ``Monitor.ingest``) return for a reading it drops."""


def step_index(timestamp: float, period: float) -> int:
    """The absolute step of a timestamp in seconds since the epoch: the nearest multiple of ``period`` (module
    docstring, "Time steps"); training counts a periodic model's phase from it too (``training/data.py``)."""
    return int(math.floor(timestamp / period + 0.5))


@dataclass(frozen=True)
class WindowConfig:
    """How readings become regular steps (one ``[windows]`` TOML table).

    Attributes:
        period: seconds per step, the streams' sampling period.
        max_gap: missing steps filled with NaN between two readings; a longer gap resets the stream.
        late_tolerance: reorder buffer, in steps: only a reading more than this many steps newer finalises a
            pending step before its ``settle`` wait ends; readings for finalised steps are always dropped as late.
        settle: seconds a step waits after its first reading for other channels of the same step.
        reanchor_after: consecutive late readings after which a stream is reset to follow its new clock; 0 = never.
        jump_confirm: consecutive readings more than ``max_gap`` steps ahead of a stream after which it follows
            them; until then they are set aside (``ahead``); 1 = follow at once.
        max_streams: streams kept at most; readings of further new streams are refused (``too_many_streams``).
    """

    period: float = 1.0
    max_gap: int = 30
    late_tolerance: int = 0
    settle: float = 0.0
    reanchor_after: int = 120
    jump_confirm: int = 3
    max_streams: int = 5_000  # what 2 GiB holds with either shipped model (docs/operations.md, Memory)

    def __post_init__(self) -> None:
        if not (math.isfinite(self.period) and self.period > 0):
            raise ValueError(f"period must be a positive number of seconds, got {self.period}")
        if self.max_gap < 0:
            raise ValueError(f"max_gap must be >= 0 steps, got {self.max_gap}")
        if self.late_tolerance < 0:
            raise ValueError(f"late_tolerance must be >= 0 steps, got {self.late_tolerance}")
        if not (math.isfinite(self.settle) and self.settle >= 0):
            raise ValueError(f"settle must be >= 0 seconds, got {self.settle}")
        if self.reanchor_after < 0:
            raise ValueError(f"reanchor_after must be >= 0 readings (0 = never), got {self.reanchor_after}")
        if self.jump_confirm < 1:
            raise ValueError(f"jump_confirm must be >= 1 readings (1 = follow a jump at once), got {self.jump_confirm}")
        if self.max_streams < 1:
            raise ValueError(f"max_streams must be >= 1, got {self.max_streams}")


def input_contract(card: ModelCard) -> dict[str, Any]:
    """What a model's windows depend on: channels, window length, differencing, normalisation (its ``counts`` only
    when the card has them, so a contract saved before cards had them still matches) and scaling."""
    return {
        "channels": list(card.channels),
        "window": card.window,
        "differencing": card.differencing,
        "forward_fill": card.forward_fill,
        "normalisation": {k: [float(v) for v in card.normalisation[k]] for k in ("mean", "std", "counts")
                          if k in card.normalisation},
        "scaling": card.scaling,
        "channel_mode": card.channel_mode,
    }


def contract_differences(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """Names of the ``input_contract`` fields that differ between two models."""
    keys = ("channels", "window", "differencing", "forward_fill", "normalisation", "scaling", "channel_mode")
    return [key for key in keys if old.get(key) != new.get(key)]


@dataclass(frozen=True)
class StepBatch:
    """The steps one ``collect`` finalised: one row per step (readings and gap fills), per stream in time order.

    ``windows`` and ``starts`` hold only the complete rows (``complete``), in row order.
    """

    stream_idx: np.ndarray  # [N] int64
    step: np.ndarray  # [N] int64, absolute step index
    timestamp: np.ndarray  # [N] float64, the step's first reading's timestamp; NaN for a gap fill
    raw: np.ndarray  # [N, C] float64, values as received (NaN = missing)
    reading: np.ndarray  # [N] bool, False for a gap fill
    reset: np.ndarray  # [N] bool, the stream was reset just before this step
    round: np.ndarray  # [N] int64, the row's position among its stream's rows in this batch
    complete: np.ndarray  # [N] bool, a reading whose prepared step has every channel
    prepared: np.ndarray  # [N, C] float32, each row's prepared (model input) values, NaN = missing
    windows: np.ndarray  # [R, W, C] float32, the window ending at each complete row (empty if not asked for)
    starts: np.ndarray  # [R] int64, absolute step index of each window's first step
    skipped: np.ndarray  # [N] int64, steps missed just before a reset row since the stream's last step (0 elsewhere)

    def __len__(self) -> int:
        return int(self.step.shape[0])


@dataclass
class _Pending:
    values: np.ndarray  # [C] float64
    timestamp: float
    arrival: float  # NaN until the next collect stamps it, when ingest was given no clock
    reset: bool = False  # the stream restarts at this step


class WindowRows(StreamState):
    """The window store's per-stream arrays (row i = stream i): prepared windows ``buf [S, W, C]`` (oldest step
    first), raw differencing memory ``mem [S, d, C]``, forward-fill carry-over (each channel's last observed raw
    value ``fill`` and its age in steps ``fill_age``), the last finalised step and whether the stream has started
    or waits for a reset, the late and ahead runs, and the observed sampling period (newest reading time
    ``seen_at``, mean log10 interval ``interval_log``, intervals seen ``intervals``)."""

    def __init__(self, channels: int, window: int, order: int, n_streams: int = 0) -> None:
        self.channels, self.window, self.order = int(channels), int(window), int(order)
        super().__init__(n_streams)

    def _fresh(self, n: int) -> dict[str, np.ndarray]:
        c = self.channels
        return {
            "buf": np.full((n, self.window, c), np.nan, dtype=np.float32),
            "mem": np.full((n, self.order, c), np.nan, dtype=np.float64),
            "fill": np.full((n, c), np.nan, dtype=np.float64),
            "fill_age": np.zeros((n, c), dtype=np.float64),
            "last": np.zeros(n, dtype=np.int64),
            "started": np.zeros(n, dtype=bool),
            "needs_reset": np.zeros(n, dtype=bool),
            "late_run": np.zeros(n, dtype=np.int64),
            "ahead_run": np.zeros(n, dtype=np.int64),
            "seen_at": np.full(n, np.nan),
            "interval_log": np.zeros(n),
            "intervals": np.zeros(n, dtype=np.int64),
        }

    def _config(self) -> dict[str, Any]:
        return {"channels": self.channels, "window": self.window, "order": self.order}


class WindowStore:
    """Windows of every stream of one model (module docstring); stream i is row i of every array."""

    COUNTERS = ("readings_accepted", "late", "ahead", "duplicate", "gap_filled_steps", "resets", "reanchors",
                "discarded", "unknown_channel", "empty", "non_finite", "absurd_timestamp", "too_many_streams",
                "wrong_type", "steps", "incomplete")  # fmt: skip

    def __init__(self, card: ModelCard, config: WindowConfig = WindowConfig()) -> None:
        self.config = config
        self.card = card
        self.channels = list(card.channels)
        self.window = int(card.window)
        self.order = int(card.differencing)
        self.normalisation = Normalisation.from_dict(card.normalisation)
        self._column = {name: i for i, name in enumerate(self.channels)}
        self.names: list[str] = []
        self.index: dict[str, int] = {}
        self.counters = dict.fromkeys(self.COUNTERS, 0)
        self._pending: list[dict[int, _Pending]] = []
        self._rows = WindowRows(len(self.channels), self.window, self.order)

    # storage

    @property
    def rows(self) -> "WindowRows":
        """The per-stream arrays (``stream_state.StreamState``), for the monitor's state and its layout."""
        return self._rows

    @property
    def n_streams(self) -> int:
        """Number of streams."""
        return len(self.names)

    def add_stream(self, name: str) -> int:
        """Register a new stream (fresh, NaN window) and return its index."""
        if name in self.index:
            raise ValueError(f"stream {name!r} already exists")
        i = int(self._rows.add_streams(1)[0])
        self.names.append(name)
        self.index[name] = i
        self._pending.append({})
        return i

    def remove_streams(self, idx: np.ndarray) -> None:
        """Forget streams ``idx`` in one pass; later streams move down (``np.delete`` numbering)."""
        idx = np.unique(np.asarray(idx, dtype=np.int64))
        self._rows.remove_streams(idx)
        keep = np.ones(len(self.names), dtype=bool)
        keep[idx] = False
        self.counters["discarded"] += sum(len(p) for p, k in zip(self._pending, keep) if not k)
        self._pending = [p for p, k in zip(self._pending, keep) if k]
        self.names = [name for name, k in zip(self.names, keep) if k]
        self.index = {name: i for i, name in enumerate(self.names)}

    def rename_stream(self, i: int, name: str) -> None:
        """Give stream ``i`` another name, keeping its state (a stream that moved to another id)."""
        if name in self.index:
            raise ValueError(f"stream {name!r} already exists")
        del self.index[self.names[i]]
        self.names[i] = name
        self.index[name] = i

    def request_reset(self, i: int) -> None:
        """Reset stream ``i`` before its next step (window, differencing memory; the monitor its scores)."""
        self._rows.started[i] = False
        self._rows.needs_reset[i] = True
        self._rows.late_run[i] = 0
        self._rows.ahead_run[i] = 0

    def window_of(self, i: int) -> np.ndarray:
        """A copy of stream ``i``'s current prepared window ``[W, C]`` (oldest step first)."""
        return self._rows.buf[i].copy()

    def histories(self, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Streams' current windows ``[S, W, C]``, the step each ends at, and whether it holds a live stream
        (started and not waiting for a reset; otherwise the next step starts from an empty window)."""
        live = self._rows.started[idx] & ~self._rows.needs_reset[idx]
        return self._rows.buf[idx].copy(), self._rows.last[idx].copy(), live

    def pending_steps(self, i: int) -> list[int]:
        """Steps of stream ``i`` received but not finalised yet, in time order."""
        return sorted(self._pending[i])

    # readings

    def step_of(self, timestamp: float) -> int:
        """The absolute step index of a timestamp (``step_index``)."""
        return step_index(timestamp, self.config.period)

    def ingest(self, reading: Reading, now: float | None = None, reset: bool = False) -> str | None:
        """Add a reading to its step; None when accepted (merged, possibly as a duplicate), else why it was dropped.

        ``now`` is the arrival time on the clock later given to ``collect`` (it starts the ``settle`` wait);
        without it, the next ``collect`` stamps the step's arrival. ``reset``: the stream restarts at this step.
        """
        try:
            known = [(self._column[name], float(v)) for name, v in reading.values.items() if name in self._column]
            timestamp = float(reading.timestamp)
        except (TypeError, ValueError, AttributeError):
            return self._reject("wrong_type")
        if not isinstance(reading.stream, str) or not reading.stream:
            return self._reject("wrong_type")
        self.counters["unknown_channel"] += len(reading.values) - len(known)
        if not known:
            return self._reject("empty")
        if any(math.isinf(v) for _, v in known):
            return self._reject("non_finite")
        if not (math.isfinite(timestamp) and abs(timestamp) / self.config.period < 2**62):
            return self._reject("absurd_timestamp")
        i = self.index.get(reading.stream)
        if i is None:
            if self.n_streams >= self.config.max_streams:
                return self._reject("too_many_streams")
            i = self.add_stream(reading.stream)
        k = self.step_of(timestamp)
        if self._rows.started[i] and k <= self._rows.last[i]:
            self._rows.late_run[i] += 1
            if not self.config.reanchor_after or self._rows.late_run[i] < self.config.reanchor_after:
                return self._reject("late")
            self.counters["reanchors"] += 1
            self.counters["discarded"] += len(self._pending[i])
            self._pending[i].clear()
            self.request_reset(i)
        self._rows.late_run[i] = 0
        newest = max(self._pending[i], default=int(self._rows.last[i]) if self._rows.started[i] else None)
        if newest is not None and k - newest > self.config.max_gap + 1:
            self._rows.ahead_run[i] += 1
            if self._rows.ahead_run[i] < self.config.jump_confirm:
                return self._reject("ahead")
        self._rows.ahead_run[i] = 0
        pending = self._pending[i].get(k)
        if pending is None:
            pending = _Pending(np.full(len(self.channels), np.nan), timestamp,
                               math.nan if now is None else float(now))  # fmt: skip
            self._pending[i][k] = pending
        pending.reset |= reset
        duplicate = False
        for col, value in known:
            if math.isnan(value):
                continue
            duplicate |= not math.isnan(pending.values[col])
            pending.values[col] = value
        self.counters["duplicate"] += duplicate
        self.counters["readings_accepted"] += 1
        self._observe_interval(i, timestamp)
        return None

    def _observe_interval(self, i: int, timestamp: float) -> None:
        """Learn the stream's sampling interval from its reading times. Readings within ``settle`` of the newest are
        one step's channels sent apart, not a sampling interval; the mean is of log intervals (a gap or a burst
        moves it by a factor, not by its length) over about the last 20."""
        gap = timestamp - self._rows.seen_at[i]
        if not gap <= 0:  # the first reading (NaN) or a newer one
            self._rows.seen_at[i] = timestamp
        if gap > max(self.config.settle, 1e-9):
            n = min(int(self._rows.intervals[i]) + 1, 20)
            self._rows.interval_log[i] += (math.log10(gap) - self._rows.interval_log[i]) / n
            self._rows.intervals[i] += 1

    def observed_periods(self, min_intervals: int = 8) -> np.ndarray:
        """Each stream's observed sampling period in seconds (``[S]``; NaN before ``min_intervals`` intervals)."""
        n = self.n_streams
        return np.where(self._rows.intervals[:n] >= min_intervals, 10.0 ** self._rows.interval_log[:n], np.nan)

    def _reject(self, kind: str) -> str:
        self.counters[kind] += 1
        return kind

    # finalising steps

    def _ready(self, pending: dict[int, _Pending], now: float) -> list[int]:
        """The steps to finalise now: the longest time-ordered prefix of ready steps."""
        steps = sorted(pending)
        for step in steps:
            if math.isnan(pending[step].arrival):
                pending[step].arrival = now
        newest, cfg = steps[-1], self.config
        ready = []
        for step in steps:
            if now < pending[step].arrival + cfg.settle and newest <= step + cfg.late_tolerance:
                break
            ready.append(step)
        return ready

    def collect(self, now: float, with_windows: bool = True) -> StepBatch:
        """Finalise every ready step of every stream and return their rows and the windows to score.

        ``with_windows=False`` leaves ``windows`` empty: the incremental step engine reads ``prepared`` only, and
        gathering a W-step window per scored row would be most of its tick's memory traffic.
        """
        nan_row = np.full(len(self.channels), np.nan)
        fields = ("stream", "step", "timestamp", "raw", "reading", "reset", "skipped", "round", "seg")
        rows: dict[str, list] = {k: [] for k in fields}
        seg_stream: list[int] = []
        seg_from_buf: list[bool] = []

        def add_row(
            i: int, step: int, timestamp: float, raw: np.ndarray, reading: bool, reset: bool, n: int, skipped: int = 0
        ) -> None:  # fmt: skip
            for key, value in zip(rows, (i, step, timestamp, raw, reading, reset, skipped, n, len(seg_stream) - 1)):
                rows[key].append(value)

        for i, pending in enumerate(self._pending):
            if not pending:
                continue
            ready = self._ready(pending, now)
            if not ready:
                continue
            reset = bool(self._rows.needs_reset[i])
            prev = int(self._rows.last[i]) if self._rows.started[i] else None
            seg_stream.append(i)
            seg_from_buf.append(not reset)
            n = 0
            for step in ready:
                entry = pending.pop(step)
                if entry.reset or prev is not None and step - prev - 1 > self.config.max_gap:
                    self.counters["resets"] += 1
                    if n:
                        seg_stream.append(i)
                        seg_from_buf.append(False)
                    else:
                        seg_from_buf[-1] = False
                    reset = True
                elif prev is not None:
                    for gap in range(prev + 1, step):
                        add_row(i, gap, math.nan, nan_row, False, False, n)
                        n += 1
                    self.counters["gap_filled_steps"] += step - prev - 1
                # A clock set back (re-anchored) skipped no steps of its own.
                skipped = max(step - prev - 1, 0) if reset and prev is not None else 0
                add_row(i, step, entry.timestamp, entry.values, True, reset, n, skipped)
                n, reset, prev = n + 1, False, step
            self._rows.last[i] = prev
            self._rows.started[i] = True
            self._rows.needs_reset[i] = False

        if not seg_stream:
            return self._empty_batch()
        batch = self._prepare(rows, np.array(seg_stream, dtype=np.int64), np.array(seg_from_buf, dtype=bool),
                              with_windows)  # fmt: skip
        self.counters["steps"] += int(batch.reading.sum())
        self.counters["incomplete"] += int((batch.reading & ~batch.complete).sum())
        return batch

    def _prepare(
        self, rows: dict[str, list], seg_stream: np.ndarray, seg_from_buf: np.ndarray, with_windows: bool
    ) -> StepBatch:
        """Difference, normalise and window the new rows of all streams at once (segments of consecutive rows)."""
        w, d = self.window, self.order
        seg = np.array(rows["seg"], dtype=np.int64)
        seg_len = np.bincount(seg, minlength=seg_stream.size)
        seg_first_row = np.concatenate([[0], np.cumsum(seg_len)[:-1]])
        in_seg = np.arange(seg.size) - seg_first_row[seg]
        raw = np.stack(rows["raw"])

        # Each segment is [its prefix, its new rows] in one long array, so one difference() and one fancy index
        # serve every stream; a segment's rows only ever look back into their own segment.
        def layout(prefix: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
            lengths = prefix + seg_len
            offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]])
            return offsets, offsets[seg] + prefix + in_seg, offsets + lengths

        filled = self._forward_fill(raw, seg, seg_len, seg_stream, seg_from_buf)
        raw_off, raw_pos, raw_end = layout(d)
        ext_raw = np.full((int(raw_end[-1]), raw.shape[1]), np.nan, dtype=np.float64)
        ext_raw[(raw_off[:, None] + np.arange(d))[seg_from_buf]] = self._rows.mem[seg_stream[seg_from_buf]]
        ext_raw[raw_pos] = filled
        prepared = self.normalisation.apply(difference(ext_raw, d)[raw_pos])

        prep_off, prep_pos, prep_end = layout(w)
        ext = np.full((int(prep_end[-1]), raw.shape[1]), np.nan, dtype=np.float32)
        ext[(prep_off[:, None] + np.arange(w))[seg_from_buf]] = self._rows.buf[seg_stream[seg_from_buf]]
        ext[prep_pos] = prepared

        reading = np.array(rows["reading"], dtype=bool)
        complete = reading & ~np.isnan(prepared).any(axis=1)
        step = np.array(rows["step"], dtype=np.int64)
        at = prep_pos[complete] if with_windows else prep_pos[:0]
        windows = ext[at[:, None] + np.arange(1 - w, 1)]

        # A stream's last segment holds its newest W prepared and d raw rows: its state for the next collect.
        last = np.flatnonzero(np.append(seg_stream[1:] != seg_stream[:-1], True))
        self._rows.buf[seg_stream[last]] = ext[prep_end[last][:, None] - w + np.arange(w)]
        self._rows.mem[seg_stream[last]] = ext_raw[raw_end[last][:, None] - d + np.arange(d)]
        return StepBatch(
            stream_idx=np.array(rows["stream"], dtype=np.int64),
            step=step,
            timestamp=np.array(rows["timestamp"], dtype=np.float64),
            raw=raw,
            reading=reading,
            reset=np.array(rows["reset"], dtype=bool),
            round=np.array(rows["round"], dtype=np.int64),
            complete=complete,
            prepared=prepared,
            windows=windows,
            starts=step[complete] - (w - 1),
            skipped=np.array(rows["skipped"], dtype=np.int64),
        )

    def _forward_fill(
        self, raw: np.ndarray, seg: np.ndarray, seg_len: np.ndarray, seg_stream: np.ndarray, seg_from_buf: np.ndarray
    ) -> np.ndarray:
        """Carry values over missing steps (card.forward_fill), all segments in one call, updating the carry-over."""
        limit = int(self.card.forward_fill)
        if limit == 0:
            return raw
        # One barrier row per segment in front of its rows holds the stream's carry-over (none after a reset).
        offsets = np.concatenate([[0], np.cumsum(seg_len + 1)[:-1]])
        pos = offsets[seg] + 1 + (np.arange(seg.size) - np.concatenate([[0], np.cumsum(seg_len)[:-1]])[seg])
        ext = np.full((int(offsets[-1] + seg_len[-1] + 1), raw.shape[1]), np.nan, dtype=np.float64)
        age = np.zeros(ext.shape, dtype=np.float64)
        carry = seg_stream[seg_from_buf]
        ext[offsets[seg_from_buf]] = self._rows.fill[carry]
        age[offsets[seg_from_buf]] = self._rows.fill_age[carry]
        ext[pos] = raw
        barrier = np.zeros(len(ext), dtype=bool)
        barrier[offsets] = True
        out, carried, carried_age = forward_fill(ext, limit, barrier, age)
        last = np.flatnonzero(np.append(seg_stream[1:] != seg_stream[:-1], True))
        end = offsets[last] + seg_len[last]
        self._rows.fill[seg_stream[last]] = carried[end]
        self._rows.fill_age[seg_stream[last]] = carried_age[end]
        return out[pos]

    def _empty_batch(self) -> StepBatch:
        c, w = len(self.channels), self.window
        none = np.zeros(0, dtype=np.int64)
        return StepBatch(none, none, np.zeros(0), np.zeros((0, c)), none.astype(bool), none.astype(bool), none,
                         none.astype(bool), np.zeros((0, c), dtype=np.float32), np.zeros((0, w, c), dtype=np.float32),
                         none, none)  # fmt: skip

    # state

    def state_dict(self) -> dict[str, np.ndarray]:
        """Plain arrays (``np.savez``-able; JSON after ``.tolist()``), pending steps included."""
        pend = [(i, k, p) for i, steps in enumerate(self._pending) for k, p in sorted(steps.items())]
        config = {"window_config": asdict(self.config), "contract": input_contract(self.card),
                  "names": self.names, "counters": self.counters}  # fmt: skip
        state = {"config": np.array(json.dumps(config))}
        state.update({k: v for k, v in self._rows.state_dict().items() if k != "config"})
        state["pending_stream"] = np.array([i for i, _, _ in pend], dtype=np.int64)
        state["pending_step"] = np.array([k for _, k, _ in pend], dtype=np.int64)
        state["pending_values"] = np.array([p.values for _, _, p in pend]).reshape(len(pend), len(self.channels))
        state["pending_timestamp"] = np.array([p.timestamp for _, _, p in pend], dtype=np.float64)
        state["pending_arrival"] = np.array([p.arrival for _, _, p in pend], dtype=np.float64)
        state["pending_reset"] = np.array([p.reset for _, _, p in pend], dtype=bool)
        return state

    def declare(self, prefix: str, space: str) -> dict[str, Rows]:
        """The rows of ``state_dict()`` stored under ``prefix/``, one stream of this store per entry of ``space``:
        its config lists the names, the pending steps are a table of entries pointing at their stream."""
        pending = f"{prefix}/pending"
        rows = {f"{prefix}/{k}": Rows(space) for k in self._rows.fields}
        rows.update({f"{prefix}/pending_{k}": Rows(pending) for k in ("step", "values", "timestamp", "arrival",
                                                                       "reset")})  # fmt: skip
        return {**rows, f"{prefix}/config": Rows(names=space), f"{prefix}/pending_stream": Rows(pending, refers=space)}

    @classmethod
    def from_state(cls, card: ModelCard, state: Mapping[str, Any], config: WindowConfig | None = None) -> "WindowStore":
        """Rebuild from ``state_dict()``; refuses a state of a model with other inputs or another step period."""
        saved = json.loads(str(np.asarray(state["config"])))
        differs = contract_differences(saved["contract"], input_contract(card))
        if differs:
            raise ValueError(f"window state was saved for a model with other {', '.join(differs)}: start fresh")
        saved_config = WindowConfig(**saved["window_config"])
        config = config or saved_config
        if config.period != saved_config.period:
            raise ValueError(f"window state was saved with period {saved_config.period} s, not {config.period} s")
        store = cls(card, config)
        for name in saved["names"]:
            store.add_stream(name)
        rows = {k: v for k, v in state.items() if k in store._rows.fields}
        if rows:  # a field newer than the state starts fresh (StreamState.from_state)
            store._rows = WindowRows.from_state({**rows, "config": np.array(json.dumps(store._rows._config()))})
        if store._rows.n_streams != store.n_streams:
            raise ValueError(f"window state has {store._rows.n_streams} rows for {store.n_streams} named streams")
        store.counters.update(saved["counters"])
        values = np.asarray(state["pending_values"], dtype=np.float64).reshape(-1, len(store.channels))
        resets = np.asarray(state.get("pending_reset", np.zeros(len(values), dtype=bool)), dtype=bool).tolist()
        for i, k, v, ts, arrival, reset in zip(np.asarray(state["pending_stream"]).tolist(),
                                               np.asarray(state["pending_step"]).tolist(), values,
                                               np.asarray(state["pending_timestamp"], dtype=np.float64).tolist(),
                                               np.asarray(state["pending_arrival"], dtype=np.float64).tolist(),
                                               resets):  # fmt: skip
            store._pending[int(i)][int(k)] = _Pending(v.copy(), float(ts), float(arrival), bool(reset))
        return store
