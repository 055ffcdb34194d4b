"""Helpers of the shard tests: spiked UCR streams with their offline reference, and N shard daemons on one broker.

Each shard publishes its scores and alerts under its own topic level (``trep-edge/scores/shard1/<stream>``), so a
subscriber can tell which shard scored what.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
from broker import Broker, Collector, DaemonProcess, daemon_tables

from trep_edge.local_broker import free_port
from trep_edge.runtime.core.engine import load_engine
from trep_edge.runtime.service.replay import RecordedSeries
from trep_edge.runtime.service.score_file import FileScores, score_recording

TOPIC = "sensors/{stream}/telemetry"
WINDOW = 64  # the univariate fixture model's window


def spiked_streams(values: np.ndarray, count: int, length: int, spikes: list[int]) -> list[RecordedSeries]:
    """``count`` streams cut from one real series at different offsets, +200 for 3 steps at each of ``spikes``."""
    out = []
    for k in range(count):
        x = values[1200 + 97 * k : 1200 + 97 * k + length].copy()
        for s in spikes:
            x[s + k : s + k + 3] += 200.0
        out.append(RecordedSeries(f"bed{k:02d}", ["value"], x.reshape(-1, 1)))
    return out


def references(model: Path, series: list[RecordedSeries]) -> dict[str, FileScores]:
    """``trep-edge score``'s results for each stream: what one undisturbed daemon publishes (the e2e test)."""
    engine = load_engine(model, "cpu")
    return {s.stream: score_recording(engine, s) for s in series}


def shard_daemon(broker: Broker, model: Path, folder: Path, shard: str, **sections: dict) -> DaemonProcess:
    """A daemon for shard ``i/N`` publishing under ``shard<i>/``, its state and log in ``folder``."""
    i = shard.split("/")[0]
    tables = daemon_tables(broker, model, folder, **sections)
    tables["monitor"]["shard"] = shard
    tables["topics"].update(scores=f"trep-edge/scores/shard{i}/{{stream}}",
                            alerts=f"trep-edge/alerts/shard{i}/{{stream}}")
    tables["http"]["port"] = free_port()
    return DaemonProcess(folder, tables)


@dataclass
class Published:
    """One score or alert a collector received, with the shard that published it and its step from the start."""

    shard: int
    stream: str
    step: int
    body: dict


def received(collector: Collector, kind: str, t0: float) -> list[Published]:
    """Scores (``kind="scores"``) or alerts received, in arrival order; steps counted from ``t0``."""
    out = []
    for m in collector.select(f"trep-edge/{kind}/"):
        _, _, shard, stream = m.topic.split("/")
        body = m.json()
        at = body["step"] if kind == "scores" else round(body["window_end"])
        out.append(Published(int(shard.removeprefix("shard")), stream, at - int(t0), body))
    return out


def events(alerts: list[Published], stream: str) -> list[tuple[int, str, str, str, str]]:
    """A stream's alert changes as ``trep-edge score`` lists them: (step, state, severity, alert_id, cause)."""
    return [(a.step, a.body["state"], a.body["severity"], a.body["alert_id"], a.body["cause"])
            for a in alerts if a.stream == stream]  # fmt: skip


def assert_scores_match(scores: list[Published], reference: FileScores) -> None:
    """Every published score of a stream equals the offline one of its step (tolerances of the e2e test)."""
    steps = [p.step for p in scores]
    got = np.array([[np.nan if p.body[k] is None else p.body[k] for k in ("raw", "score")] for p in scores])
    np.testing.assert_allclose(got[:, 0], reference.raw[steps], rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(got[:, 1], reference.score[steps], rtol=1e-3, atol=1e-5)
    assert [p.body["warming"] for p in scores] == reference.warming[steps].tolist()
    assert [p.body["alert"] for p in scores] == reference.alerts[steps].tolist()
