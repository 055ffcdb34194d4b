"""The daemon's periodic passes over silent streams: report them ``no_data`` (``[monitor] stale_after``), and close
them (``[monitor] evict_after``: open episodes cleared, state forgotten)."""
from __future__ import annotations

import logging
import time

from trep_edge.runtime.service.daemon_metrics import stream_gauges
from trep_edge.runtime.service.outbox import Outbox
from trep_edge.runtime.service.routing import Routes

log = logging.getLogger(__name__)


def evict_silent(routes: Routes, outbox: Outbox, after: float) -> None:
    """Close the streams silent for ``after`` seconds: clear their open episodes, forget their state."""
    now = time.time()
    for unit in routes.units:
        silent = unit.monitor.silent(now, after)
        if not silent:
            continue
        for alert in unit.monitor.remove_streams(silent):
            outbox.alert(unit, alert)
        unit.lifecycle.forget(silent)
        routes.forget(silent)
        outbox.stale_gauge(unit)
        stream_gauges(outbox.metrics, routes.units)  # before the counter: a scraper that sees the eviction sees them
        outbox.metrics.inc("trep_edge_streams_evicted_total", len(silent))
        log.info("closed %d stream(s) silent for %.0f s (e.g. %s)", len(silent), after, silent[0])


def mark_stale(routes: Routes, outbox: Outbox, after: float) -> None:
    """Report the streams silent for ``after`` seconds as ``no_data``, once per silence."""
    now = time.time()
    for unit in routes.units:
        changes = unit.lifecycle.silent(unit.monitor.silent(now, after), now, after)
        for change in changes:
            outbox.status(unit, change)
        if changes:
            outbox.stale_gauge(unit)
            log.info("%d stream(s) silent for %.0f s: no_data (e.g. %s); %d stale in all", len(changes), after,
                     changes[0].stream, len(unit.lifecycle.stale))  # fmt: skip
