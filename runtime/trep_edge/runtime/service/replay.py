"""A sensor simulator: publish a recorded dataset to MQTT as JSON readings, at real or accelerated rate.

Datasets (loaded with ``trep_edge.datasets``, numpy only): a UCR-anomaly ``.txt`` (one stream, channel
``value``, with its labelled anomaly), an ETT-style ``.csv`` (one stream, its columns as channels), or a
PhysioNet 2019 ``.tar.gz`` (one stream per patient, named ``bed001``, ``bed002``, ...; hourly rows replayed as
readings, the sepsis label as labels). ``trep-edge score`` reads the same files through ``load_series``, so an
offline score and a replay through the daemon see the same numbers.

Every reading is ``{"ts": t0 + i * period, "values": {channel: value or null}}`` (runtime/trep_edge/runtime/service/payloads.py), published
with QoS 1 on the topic template with the stream id filled in. Timestamps are synthetic: reading ``i`` is
``period`` seconds after reading ``i-1`` whatever the replay speed, so the monitor sees a regular stream. At
``rate = 1/period`` (the default) they track the wall clock; faster replays run ahead of it, which the monitor
accepts up to ``[input] max_skew``.
"""
from __future__ import annotations

import json
import logging
import math
import re
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion

from trep_edge.datasets.ett import load_csv
from trep_edge.datasets.physionet import VITALS, iter_patients
from trep_edge.datasets.table import column_positions
from trep_edge.datasets.ucr_anomaly import load_ucr_anomaly

from trep_edge.runtime.service.payloads import channel_renames

log = logging.getLogger(__name__)

FORMATS = ".txt (UCR anomaly), .csv (sensor CSV: trep-edge train --help), .tar.gz (PhysioNet 2019, one bed per patient)"


@dataclass
class RecordedSeries:
    """One stream of a dataset: values ``[T, C]`` (NaN = missing) named by ``channels``, labels ``[T]`` if known, and
    the rows' times in seconds since the epoch ``[T]`` where the file has a timestamp column (a CSV's first)."""

    stream: str
    channels: list[str]
    values: np.ndarray
    labels: np.ndarray | None = None
    timestamps: np.ndarray | None = None


def parse_rename(text: str | None) -> dict[str, str]:
    """``"O2Sat=SpO2,Resp=RESP"`` → ``{"O2Sat": "SpO2", "Resp": "RESP"}`` (dataset column → model channel)."""
    return channel_renames(part for part in (text or "").split(",") if part.strip())


def load_series(
    path: str | Path,
    channels: list[str] | None = None,
    rename: dict[str, str] | None = None,
    max_series: int | None = None,
    stream: str | None = None,
) -> list[RecordedSeries]:
    """Load a dataset file as streams; ``channels`` picks dataset columns (before ``rename``)."""
    path = Path(path)
    name = path.name
    if name.endswith(".txt"):
        s = load_ucr_anomaly(path)
        found = [RecordedSeries(stream or f"ucr{s.id:03d}", ["value"], s.values.reshape(-1, 1), s.labels)]
    elif name.endswith(".csv"):
        s = load_csv(path, only=channels or None)
        seconds = None if s.timestamps is None else s.timestamps.astype("datetime64[ms]").astype(np.int64) / 1000.0
        found = [RecordedSeries(stream or re.sub(r"[^\w.-]", "_", s.name), s.channels, s.values, s.labels, seconds)]
    elif name.endswith(".tar.gz"):
        found = []
        for k, patient in enumerate(iter_patients(path, limit=max_series), start=1):
            names = channels or VITALS
            values = patient.values[:, column_positions(patient.columns, names, path)]
            found.append(RecordedSeries(f"{stream or 'bed'}{k:03d}", list(names), values, patient.sepsis.copy()))
    else:
        raise ValueError(f"{path}: unknown dataset format; replay reads {FORMATS}")
    if max_series is not None:
        found = found[:max_series]
    for series in found:
        series.channels = [(rename or {}).get(c, c) for c in series.channels]
        twice = sorted({c for c in series.channels if series.channels.count(c) > 1})
        if twice:  # one of the columns would silently stand for both
            raise ValueError(f"{path}: after --rename, columns share the name(s) {twice} ({series.channels}); "
                             "rename each column to a name of its own, or pick one with --channels")
    return found


def reading_payload(ts: float, channels: list[str], row: np.ndarray) -> bytes:
    """One reading as the monitor's JSON (a NaN value is sent as null: missing)."""
    values = {c: (None if math.isnan(v) else float(v)) for c, v in zip(channels, row.tolist())}
    return json.dumps({"ts": round(ts, 6), "values": values}).encode()


def topic_for(template: str, stream: str) -> str:
    """Fill the template's single ``{name}`` placeholder with the stream id."""
    names = re.findall(r"\{(\w+)\}", template)
    if len(names) != 1:
        raise ValueError(f"topic template {template!r} must have exactly one {{name}} placeholder for the stream id")
    return template.replace("{" + names[0] + "}", stream)


@dataclass
class ReplayStats:
    """What a replay did."""

    published: int
    streams: int
    steps: int
    seconds: float
    unconfirmed: int  # QoS 1 publishes without a PUBACK when the replay ended


class Publisher:
    """A small paho client for the simulator: connects, reconnects quickly, tracks unacknowledged publishes."""

    def __init__(self, host: str, port: int, client_id: str = "", username: str = "", password: str | None = None,
                 ca_file: str = "", cert_file: str = "", key_file: str = "") -> None:  # fmt: skip
        self.client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=client_id, protocol=mqtt.MQTTv5)
        if username:
            self.client.username_pw_set(username, password)
        if ca_file or cert_file:
            self.client.tls_set(ca_certs=ca_file or None, certfile=cert_file or None, keyfile=key_file or None)
        self.client.max_inflight_messages_set(1000)
        self.client.reconnect_delay_set(0.2, 2.0)
        self._connected = threading.Event()
        self.client.on_connect = lambda c, u, f, rc, p: self._connected.set() if not rc.is_failure else None
        self.client.on_disconnect = lambda c, u, f, rc, p: self._connected.clear()
        # Acknowledgements are counted in on_publish: a message published while disconnected is queued and sent
        # after reconnecting, but its MQTTMessageInfo reports the failed first attempt forever.
        self.client.on_publish = self._on_publish
        self._lock = threading.Lock()
        self.sent = 0
        self.acknowledged = 0
        self.client.connect_async(host, port, keepalive=30)
        self.client.loop_start()

    def wait_connected(self, timeout: float = 10.0) -> None:
        """Block until the first connection is up."""
        if not self._connected.wait(timeout):
            self.close()
            raise ConnectionError(f"replay could not connect to the broker within {timeout} s")

    def _on_publish(self, client, userdata, mid, reason_code, properties) -> None:
        with self._lock:
            self.acknowledged += 1

    def publish(self, topic: str, payload: bytes, qos: int = 1) -> None:
        """Publish; while disconnected paho queues QoS ≥ 1 messages and sends them after reconnecting."""
        with self._lock:
            self.sent += 1
        self.client.publish(topic, payload, qos=qos)

    def flush(self, timeout: float = 30.0) -> int:
        """Wait for outstanding acknowledgements; return how many are still missing after ``timeout``."""
        deadline = time.monotonic() + timeout
        while self.sent > self.acknowledged and time.monotonic() < deadline:
            time.sleep(0.01)
        return self.sent - self.acknowledged

    def close(self) -> None:
        """Disconnect and stop the network thread."""
        self.client.disconnect()
        self.client.loop_stop()


def step_range(series: list[RecordedSeries], start: int = 0, limit: int | None = None) -> range:
    """The steps a replay sends: ``start`` up to ``start + limit``, within the longest series."""
    length = max(len(s.values) for s in series)
    return range(start, length if limit is None else min(length, start + limit))


def replay(
    series: list[RecordedSeries],
    publisher: Publisher,
    topic: str,
    rate: float = 1.0,
    period: float = 1.0,
    t0: float | None = None,
    start: int = 0,
    limit: int | None = None,
    qos: int = 1,
    stop: threading.Event | None = None,
    on_step: Callable[[int], None] | None = None,
) -> ReplayStats:
    """Publish step ``start..start+limit`` of every series; ``rate`` readings/s per stream (0 = as fast as possible).

    Streams are staggered evenly within each step so 200 beds at 1 Hz are 200 messages spread over the second,
    not a burst. Reading ``i`` carries timestamp ``t0 + i * period`` (``t0`` defaults to now).
    """
    if rate < 0 or period <= 0:
        raise ValueError(f"rate must be >= 0 readings/s and period > 0 s, got rate={rate}, period={period}")
    if not series:
        raise ValueError("nothing to replay: the dataset has no series")
    topics = [topic_for(topic, s.stream) for s in series]
    end = step_range(series, start, limit).stop
    t0 = time.time() if t0 is None else t0
    began = time.monotonic()
    published = 0
    interval = 1.0 / rate if rate else 0.0
    for step in range(start, end):
        if stop is not None and stop.is_set():
            break
        for k, (s, name) in enumerate(zip(series, topics)):
            if step >= len(s.values):
                continue
            if interval:
                due = began + (step - start + k / len(series)) * interval
                delay = due - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
            publisher.publish(name, reading_payload(t0 + step * period, s.channels, s.values[step]), qos)
            published += 1
        if on_step is not None:
            on_step(step)
    unconfirmed = publisher.flush()
    return ReplayStats(published, len(series), end - start, time.monotonic() - began, unconfirmed)
