"""The daemon's own Prometheus series beyond ``http_status.monitor_metrics``: declared at start (every rejection
kind exported at 0), the per-model gauges refreshed each tick, the model info, the period-mismatch check, and the
counters the status topic carries for an integrator limited to MQTT (the same numbers as ``/metrics``).

With ``[[routes]]`` every per-model series carries a ``model`` label (``ModelUnit.labels``).
"""
from __future__ import annotations

import logging
from typing import Any, Sequence

from trep_edge.runtime.core.sharding import Shard
from trep_edge.runtime.core.windows import WINDOW_REJECTIONS
from trep_edge.runtime.service.archive import declare_archive_metrics
from trep_edge.runtime.service.control_topics import CONTROL_KINDS, declare_control_metrics
from trep_edge.runtime.service.http_status import Metrics
from trep_edge.runtime.service.intake import INTERNAL_KIND, OTHER_SHARD_METRIC, TOPIC_KIND
from trep_edge.runtime.service.payloads import MALFORMED_KINDS
from trep_edge.runtime.service.routing import OTHER_MODEL_KIND, ModelUnit
from trep_edge.runtime.service.sparkplug import declare_sparkplug_metrics

log = logging.getLogger(__name__)

STATUS_COUNTERS = ("messages", "readings", "scored", "dropped", "malformed", "rejected", "alerts", "publish_refused",
                   "tick_errors", "checkpoints", "model_reloads", "sparkplug_rebirth_requests",
                   "sparkplug_seq_gaps")  # fmt: skip
"""The ``trep_edge_NAME_total`` counters the status topic carries."""


def declare_daemon_metrics(metrics: Metrics, shard: Shard, units: Sequence[ModelUnit]) -> None:
    """The daemon's series beyond the monitor's, each kind and state exported at 0 from the start."""
    routed = len(units) > 1
    metrics.declare(OTHER_SHARD_METRIC, "counter", "messages skipped: their stream belongs to another shard")
    metrics.declare("trep_edge_shard_info", "gauge", "this daemon's shard i/N ([monitor] shard)")
    metrics.set("trep_edge_shard_info", 1.0, shard=str(shard.index), shards=str(shard.count))
    declare_archive_metrics(metrics)
    declare_sparkplug_metrics(metrics)
    declare_control_metrics(metrics)
    # Every kind exported at 0 from the start: an alert rule on rate() sees the first bad message.
    metrics.zero("trep_edge_malformed_total", "kind", (*MALFORMED_KINDS, TOPIC_KIND, INTERNAL_KIND, *CONTROL_KINDS))
    rejections = tuple(k for k in WINDOW_REJECTIONS if k not in MALFORMED_KINDS)
    metrics.zero("trep_edge_rejected_total", "kind", rejections + (OTHER_MODEL_KIND,) * routed)
    metrics.zero("trep_edge_model_reloads_total", "result", ("ok", "refused"))
    for unit in units:
        metrics.zero("trep_edge_alerts_total", "state", ("raised", "updated", "cleared"), **unit.labels)


def publish_model_info(metrics: Metrics, units: Sequence[ModelUnit]) -> None:
    """``trep_edge_model_info``: one series per running model (engine, card name, providers, sha256)."""
    series = {}
    for unit in units:
        running = unit.engine.status
        labels = {"engine": running["engine"], "model": running["model"], "providers": ",".join(running["providers"]),
                  "sha256": running["sha256"]}  # fmt: skip
        if len(units) > 1:  # the model label names the model as every per-model series does; card: the card's name
            labels.update(card=running["model"], **unit.labels)
        series[tuple(sorted(labels.items()))] = 1.0
    metrics.replace("trep_edge_model_info", series)


def stream_gauges(metrics: Metrics, units: Sequence[ModelUnit]) -> None:
    """Each model's streams by state and its monitor's event counters."""
    events: dict[tuple[tuple[str, str], ...], float] = {}
    for unit in units:
        states = list(unit.monitor.streams.values())
        for state in ("active", "warming"):
            metrics.set("trep_edge_streams", states.count(state), state=state, **unit.labels)
        for event, count in unit.monitor.counters.items():
            events[tuple(sorted({"event": event, **unit.labels}.items()))] = float(count)
    metrics.replace("trep_edge_monitor_events_total", events)


def period_check(metrics: Metrics, unit: ModelUnit) -> dict[str, Any]:
    """Streams sampled at another period than the model learned (more than 2x off): metric, status and a log
    line whenever their number grows. Such a stream's window spans another stretch of time than the model's."""
    off = unit.monitor.period_mismatches()
    card = unit.engine.card
    metrics.set("trep_edge_streams_period_mismatch", len(off), **unit.labels)
    if len(off) > unit.period_mismatches:
        name, seen = next(iter(off.items()))
        log.warning("%d stream(s) send at another period than model %s was trained on (%g s): e.g. %s every "
                    "%.3g s; their windows span another stretch of time than the model learned (set [windows] "
                    "period and route them to a model of their period)", len(off), card.name, card.period, name,
                    seen)  # fmt: skip
    unit.period_mismatches = len(off)
    return {"streams": len(off), "model_period": card.period, "examples": dict(list(off.items())[:5])}


def status_counters(metrics: Metrics, units: Sequence[ModelUnit], queue_depth: int, backlog: int) -> dict[str, Any]:
    """The counters an integrator limited to MQTT sees on the status topic (the same as /metrics)."""
    counts: dict[str, Any] = {n: metrics.counts(f"trep_edge_{n}_total") for n in STATUS_COUNTERS}
    counts["queue_depth"] = queue_depth
    counts["tick_backlog"] = backlog
    counts["streams"] = metrics.counts("trep_edge_streams")
    events: dict[str, int] = {}
    for unit in units:  # every model's together; the models' own are on /metrics
        for event, count in unit.monitor.counters.items():
            events[event] = events.get(event, 0) + count
    counts["monitor_events"] = events
    return counts
