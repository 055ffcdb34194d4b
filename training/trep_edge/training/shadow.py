"""Shadow scoring for ``trep-edge promote --shadow HOURS``: the candidate beside the installed model on live traffic.

For ``HOURS`` the shadow subscribes to the daemon's telemetry topics (``[mqtt] topics`` of the daemon's config) as a
client of its own: client id ``<[mqtt] client_id>-shadow-<pid>``, a clean session the broker forgets when it leaves,
read-only (``MqttLink(observer=True)``: no status, no Last Will, nothing published). Every message is parsed as the
daemon parses it (``payloads.parse_payload_lenient`` with the config's ``[input]`` settings, readings of streams
another shard owns skipped) and the same readings go to two ``monitor.Monitor``s built from the config's
``[windows]``, ``[alerts]`` and ``[detector]``: the installed model's and the candidate's, ticked together every
``[monitor] tick_interval``. When the daemon's checkpoint (``[state] path``) is readable both start from it, the
installed model's as a restarted daemon would and the candidate's through the hot swap's hand-over
(``Monitor.swap_engine``), so streams are scored from the first reading; otherwise they warm up as new streams do.

The comparison (``ShadowTally.report``), per model: readings (finalised steps with a reading), scored readings (not
warming), the detector's alerts and alert episodes; episode agreement (episodes of one model overlapping, in step
time, an episode of the other on the same stream); the surprise difference, candidate minus installed, on the
readings both scored (mean, and median and 95th percentile of its magnitude in ``DRIFT_RESOLUTION`` bins); the
streams seen. ``training/trep_edge/training/promote.py`` decides what blocks an install.
"""
from __future__ import annotations

import dataclasses
import logging
import math
import os
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from trep_edge.runtime.service.checkpoint import load_checkpoint
from trep_edge.runtime.service.config import MonitorConfig
from trep_edge.runtime.core.engine import Engine
from trep_edge.runtime.core.monitor import Monitor, TickResult
from trep_edge.runtime.service.mqtt_io import MqttLink, Telemetry, TelemetryQueue
from trep_edge.runtime.service.payloads import parse_payload_lenient
from trep_edge.runtime.core.sharding import Shard
from trep_edge.runtime.service.sparkplug import SparkplugDecoder

log = logging.getLogger(__name__)

ROLES = ("installed", "candidate")
DRIFT_RESOLUTION = 0.01
"""Width of the bins of |surprise difference| the percentiles are read from (memory stays bounded for long runs)."""
DRIFT_LIMIT = 50.0
"""Differences beyond this many surprise units share the last bin."""


class ShadowTally:
    """What two monitors fed the same readings produced, accumulated tick by tick."""

    def __init__(self, engines: dict[str, Engine]) -> None:
        self.engines = engines
        self.counts = {role: dict.fromkeys(("readings", "scored", "alerts"), 0) for role in engines}
        self.streams: set[str] = set()
        # Per role and stream: alert episodes as [start, end] in step time (end inf while open).
        self.episodes: dict[str, dict[str, list[list[float]]]] = {role: {} for role in engines}
        self.drift_bins = np.zeros(int(DRIFT_LIMIT / DRIFT_RESOLUTION) + 1, dtype=np.int64)
        self.drift_sum = 0.0

    def add(self, results: dict[str, TickResult]) -> None:
        """Count one tick of both monitors and pair their surprises reading by reading."""
        surprise = {}
        for role, result in results.items():
            counts = self.counts[role]
            for s in result.scored:
                counts["readings"] += 1
                self.streams.add(s.stream)
                if not s.warming and math.isfinite(s.surprise):
                    counts["scored"] += 1
                    surprise.setdefault((s.stream, s.step), {})[role] = s.surprise
                counts["alerts"] += s.alert
            for alert in result.alerts:
                spans = self.episodes[role].setdefault(alert.stream, [])
                if alert.state == "raised":
                    spans.append([alert.window_end, math.inf])
                elif not spans or math.isfinite(spans[-1][1]):
                    spans.append([-math.inf, math.inf])  # an episode open before the shadow started
                if alert.state == "cleared":
                    spans[-1][1] = alert.window_end
        pairs = [v["candidate"] - v["installed"] for v in surprise.values() if len(v) == 2]
        if pairs:
            bins = np.minimum(np.abs(pairs) / DRIFT_RESOLUTION, len(self.drift_bins) - 1).astype(np.int64)
            np.add.at(self.drift_bins, bins, 1)
            self.drift_sum += float(np.sum(pairs))

    def _drift_percentile(self, q: float) -> float | None:
        total = int(self.drift_bins.sum())
        if not total:
            return None
        return float(np.searchsorted(np.cumsum(self.drift_bins), q * total) * DRIFT_RESOLUTION)

    def _overlapping(self, role: str, other: str) -> int:
        """Episodes of ``role`` that overlap an episode of ``other`` on the same stream."""
        theirs = self.episodes[other]
        return sum(any(s <= e2 and s2 <= e for s2, e2 in theirs.get(stream, ())) for stream, spans in
                   self.episodes[role].items() for s, e in spans)  # fmt: skip

    def report(self) -> dict[str, Any]:
        """The comparison as plain data (the JSON report's ``models``, ``agreement``, ``surprise_difference``)."""
        models = {}
        for role, engine in self.engines.items():
            other = next(r for r in self.engines if r != role)
            episodes = sum(len(spans) for spans in self.episodes[role].values())
            models[role] = {"model": engine.card.name, "sha256": engine.sha256, **self.counts[role],
                            "episodes": episodes, "episodes_overlapping_other": self._overlapping(role, other)}
        paired = int(self.drift_bins.sum())
        return {
            "streams": len(self.streams),
            "models": models,
            "surprise_difference": {
                "readings": paired, "mean": self.drift_sum / paired if paired else None,
                "median_abs": self._drift_percentile(0.5), "p95_abs": self._drift_percentile(0.95),
                "resolution": DRIFT_RESOLUTION,
            },
        }  # fmt: skip


def shadow_monitors(
    config: MonitorConfig, installed: Engine, candidate: Engine
) -> tuple[dict[str, Monitor], str | None]:
    """The two monitors, warm from the daemon's checkpoint when it is readable; and the checkpoint used (or None)."""
    path = config.state.path
    settings = (config.windows, config.alerts, config.detector)
    if path and Path(path).is_file():
        try:
            state, _ = load_checkpoint(path)
            monitors = {role: Monitor.from_state(installed, state, *settings) for role in ROLES}
            monitors["candidate"].swap_engine(candidate)
            return monitors, path
        except Exception as exc:  # an unusable checkpoint costs the warm start, not the shadow
            log.warning("shadow: could not start from the checkpoint %s (%s); streams warm up", path, exc)
    return {"installed": Monitor(installed, *settings), "candidate": Monitor(candidate, *settings)}, None


def _feed(monitors: dict[str, Monitor], items: list[Telemetry], config: MonitorConfig, shard: Shard,
          sparkplug: SparkplugDecoder) -> int:  # fmt: skip
    """Parse each message as the daemon does, per model (its channels), and ingest its readings; return the
    messages read."""
    cfg, renames, now = config.input, config.input.renames, time.time()
    for item in items:
        if not item.matched:
            continue
        for monitor in monitors.values():
            card = monitor.engine.card
            channels = None if card.channel_mode == "independent" else card.channels
            readings, _ = parse_payload_lenient(item.payload, item.stream, channels, now, cfg.max_bytes, cfg.max_skew,
                                                cfg.unknown_channels, renames, item.channel, cfg.format,
                                                cfg.influx_precision, item.topic, sparkplug)  # fmt: skip
            for reading in readings:
                if shard.owns(reading.stream):
                    monitor.ingest(reading, now)
    return len(items)


def check_hours(hours: float) -> None:
    """Refuse a shadow duration that is not a positive number of hours."""
    if not (math.isfinite(hours) and hours > 0):
        raise ValueError(f"--shadow {hours}: give the hours to score live traffic for, a positive number")


def shadow_score(config: MonitorConfig, installed: Engine, candidate: Engine, hours: float) -> dict[str, Any]:
    """Score live telemetry with both models for ``hours`` (module docstring); the comparison as plain data."""
    check_hours(hours)
    monitors, warm_from = shadow_monitors(config, installed, candidate)
    tally = ShadowTally({role: monitors[role].engine for role in ROLES})
    mqtt = dataclasses.replace(config.mqtt, client_id=f"{config.mqtt.client_id}-shadow-{os.getpid()}")
    queue = TelemetryQueue(config.mqtt.queue_size)
    link = MqttLink(mqtt, queue, "", {}, observer=True)
    shard, sparkplug, tick = Shard.parse(config.monitor.shard), SparkplugDecoder(), config.monitor.tick_interval
    started_at, started = datetime.now(timezone.utc), time.monotonic()
    deadline, next_tick, messages, announced = started + hours * 3600.0, started + tick, 0, False
    link.start()
    try:
        while (now := time.monotonic()) < deadline:
            queue.wait(max(0.0, min(0.1, next_tick - now, deadline - now)))
            if link.subscribed and not announced:
                announced = True
                log.info("shadow: subscribed to %s as %s for %g h", link.config.topics, mqtt.client_id, hours)
            messages += _feed(monitors, queue.drain(), config, shard, sparkplug)
            if time.monotonic() >= next_tick:
                tally.add({role: m.tick(time.time()) for role, m in monitors.items()})
                next_tick += tick
    finally:
        link.stop()
    messages += _feed(monitors, queue.drain(), config, shard, sparkplug)
    # Steps still waiting for their settle time are finalised now: every reading received is counted.
    end = time.time() + config.windows.settle + tick
    tally.add({role: m.tick(end) for role, m in monitors.items()})
    return {"started_at": started_at.isoformat().replace("+00:00", "Z"), "hours": hours,
            "seconds": time.monotonic() - started, "client_id": mqtt.client_id, "topics": list(config.mqtt.topics),
            "warm_start": warm_from, "messages": messages, **tally.report()}  # fmt: skip


def summary(report: dict[str, Any]) -> str:
    """A few lines for people: what was seen, each model's counts, how far the surprises drifted."""
    lines = [f"shadow scoring {report['hours']:g} h from {report['started_at']} on {', '.join(report['topics'])}: "
             f"{report['messages']} messages, {report['streams']} streams"
             + (f", warm from {report['warm_start']}" if report["warm_start"] else ", cold start (streams warm up)"),
             f"{'':10} {'model':24} {'readings':>9} {'scored':>9} {'alerts':>7} {'episodes':>9} {'overlap':>8}"]
    for role, m in report["models"].items():
        lines.append(f"{role:10} {m['model'][:24]:24} {m['readings']:>9} {m['scored']:>9} {m['alerts']:>7} "
                     f"{m['episodes']:>9} {m['episodes_overlapping_other']:>8}")  # fmt: skip
    drift = report["surprise_difference"]
    if drift["readings"]:
        lines.append(f"surprise, candidate - installed, on {drift['readings']} readings both scored: mean "
                     f"{drift['mean']:+.3g}; |difference| median {drift['median_abs']:.2f}, 95th percentile "
                     f"{drift['p95_abs']:.2f}")  # fmt: skip
    else:
        lines.append("no reading was scored by both models (none arrived, or every stream was warming up)")
    return "\n".join(lines) + "\n"
