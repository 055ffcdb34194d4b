"""What the daemon publishes, one builder per message (docs/alerts.md): the alert, sensor-fault and stream-status
messages of the alerts and state topics, the optional scores, the dead-letter samples and the retained status.

Pure functions of what they describe: the daemon decides when to publish (``outbox``, ``intake``), these say what
each message holds. Every message carries a ``schema_version``; JSON has no NaN, so missing numbers are null.
"""
from __future__ import annotations

import math
import time
from typing import Any, Sequence

from trep_edge.runtime.core.alerts import STATUS_OF_STATE, StreamStatus
from trep_edge.runtime.core.engine import Engine
from trep_edge.runtime.core.monitor import AlertOut, ScoredReading, SensorEvent
from trep_edge.runtime.core.sharding import Shard
from trep_edge.runtime.service.config import MonitorConfig
from trep_edge.runtime.service.mqtt_io import Telemetry
from trep_edge.runtime.service.routing import ModelUnit

ALERT_SCHEMA_VERSION = 1
SCORE_SCHEMA_VERSION = 1
DEAD_LETTER_SCHEMA_VERSION = 1
DEAD_LETTER_SAMPLE_BYTES = 2048


def finite_or_none(value: float) -> float | None:
    """JSON has no NaN: missing or undefined numbers are published as null."""
    return None if value is None or not math.isfinite(value) else float(value)


def fill_topic(template: str, stream: str = "", client_id: str = "") -> str:
    """A topic from a ``[topics]`` template (``{stream}``, ``{client_id}``)."""
    return template.replace("{stream}", stream).replace("{client_id}", client_id)


def model_field(engine: Engine) -> dict[str, str]:
    """The ``model`` of a published message: the model that scored it."""
    return {"name": engine.card.name, "sha256": engine.sha256}


def _envelope(kind: str, engine: Engine, revision: str, fields: dict[str, Any]) -> dict[str, Any]:
    """A message of the alerts and state topics: ``fields`` between the version and kind and what every such message
    carries (the model, the config revision, advisory, when it was published)."""
    return {"schema_version": ALERT_SCHEMA_VERSION, "kind": kind, **fields, "model": model_field(engine),
            "config_revision": revision, "advisory": True, "published_at": time.time()}  # fmt: skip


def alert_message(alert: AlertOut, engine: Engine, revision: str) -> dict[str, Any]:
    """The versioned alert JSON (docs/alerts.md), published on state changes and retained as the current state."""
    return _envelope("anomaly", engine, revision, {
        "alert_id": alert.alert_id,
        "stream": alert.stream,
        "state": alert.state,
        "status": STATUS_OF_STATE[alert.state],
        "active": alert.state != "cleared",
        "severity": alert.severity,
        "cause": alert.cause,
        "score": finite_or_none(alert.score),
        "threshold": finite_or_none(alert.threshold),
        "channel": alert.channel or None,
        "values": {k: finite_or_none(v) for k, v in alert.values.items()},
        "timestamp": finite_or_none(alert.timestamp),
        "window_start": finite_or_none(alert.window_start),
        "window_end": finite_or_none(alert.window_end),
        "explanation": None if alert.explanation is None else alert.explanation.to_dict(),
    })  # fmt: skip


def sensor_message(event: SensorEvent, engine: Engine, revision: str) -> dict[str, Any]:
    """A sensor fault (docs/alerts.md): a channel sent a value outside its plausible range, or the stream said its
    sensor is disconnected; or it recovered."""
    return _envelope("sensor", engine, revision, {
        "alert_id": event.alert_id,
        "stream": event.stream,
        "channel": event.channel or None,
        "fault": event.fault,
        "state": event.state,
        "status": STATUS_OF_STATE[event.state],
        "active": event.state == "raised",
        "value": finite_or_none(event.value),
        "plausible": [finite_or_none(event.low), finite_or_none(event.high)],
        "timestamp": finite_or_none(event.timestamp),
    })  # fmt: skip


def stream_message(change: StreamStatus, engine: Engine, revision: str) -> dict[str, Any]:
    """A stream's lifecycle status (docs/alerts.md): ``ok``, ``pending`` or ``no_data``, with its open episode's id."""
    return _envelope("stream", engine, revision, {
        "stream": change.stream,
        "status": change.status,
        "reason": change.reason,
        "active": change.open_alert is not None,
        "open_alert": change.open_alert,
        **{k: finite_or_none(v) if isinstance(v, float) else v for k, v in change.details.items()},
        "timestamp": finite_or_none(change.timestamp),
    })  # fmt: skip


def score_message(s: ScoredReading, engine: Engine) -> dict[str, Any]:
    """One scored reading (by ``engine``'s model), for the optional scores topic."""
    return {
        "schema_version": SCORE_SCHEMA_VERSION,
        "stream": s.stream,
        "step": s.step,
        "timestamp": finite_or_none(s.timestamp),
        "raw": finite_or_none(s.raw),
        "score": finite_or_none(s.score),
        "surprise": finite_or_none(s.surprise),
        "threshold": finite_or_none(s.threshold),
        "channel": s.channel or None,
        "warming": s.warming,
        "alert": s.alert,
        "values": {k: finite_or_none(v) for k, v in s.values.items()},
        "model": model_field(engine),
    }


def dead_letter_message(kind: str, error: str, item: Telemetry) -> dict[str, Any]:
    """A sample of rejected input for the dead-letter topic: why, where from, and its first bytes as text."""
    return {"schema_version": DEAD_LETTER_SCHEMA_VERSION, "kind": kind, "error": error, "topic": item.topic,
            "stream": item.stream, "received": item.received,
            "payload": item.payload[:DEAD_LETTER_SAMPLE_BYTES].decode("utf-8", errors="replace"),
            "truncated": len(item.payload) > DEAD_LETTER_SAMPLE_BYTES}  # fmt: skip


def status_message(config: MonitorConfig, shard: Shard, started_at: float, units: Sequence[ModelUnit],
                   model_error: str | None) -> dict[str, Any]:  # fmt: skip
    """The retained status (docs/alerts.md "Status"): the default model's (the last unit's) engine as
    ``Engine.status`` reports it, without its file path, and every model's summary."""
    running = units[-1].engine.status
    return {
        "state": "online",
        "client_id": config.mqtt.client_id,
        "model": running["model"],
        "model_sha256": running["sha256"],
        **{key: running[key] for key in ("providers", "provider_fallback", "engine", "engine_reason")},
        "model_error": model_error,
        "models": models_status(units),
        "config_revision": config.revision,
        "shard": str(shard),
        "started_at": started_at,
        "advisory": True,
    }


def models_status(units: Sequence[ModelUnit]) -> list[dict[str, Any]]:
    """Each model on the status topic: name, card, routes, engine, last refused reload and its streams by state."""
    out = []
    for unit in units:
        running, states = unit.engine.status, list(unit.monitor.streams.values())
        out.append({"name": unit.name, "model": running["model"], "model_sha256": running["sha256"],
                    "match": [t.template for t in unit.match] or None,
                    "engine": running["engine"], "model_error": unit.error,
                    "streams": {state: states.count(state) for state in ("active", "warming")}})  # fmt: skip
    return out
