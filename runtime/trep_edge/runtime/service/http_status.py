"""Observability over HTTP: Prometheus text metrics at ``/metrics``, ``/healthz`` and ``/readyz``.

``Metrics`` is a small thread-safe registry (counters, gauges, fixed-bucket histograms, optional labels) that
renders the Prometheus text exposition format; ``StatusServer`` serves it from a background thread so a scrape
never waits for the scoring loop. ``/healthz`` answers whether the process is alive and its loop is turning,
``/readyz`` whether it can do its job (model loaded, broker connected); both return 200 or 503 with a reason.
"""
from __future__ import annotations

import bisect
import math
import os
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable

# Up to 10 min: under a backlog a reading waits several bounded ticks, and a +Inf-only tail hides how long.
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0,
                   300.0, 600.0)  # fmt: skip
HTTP_IDLE_TIMEOUT = 10.0
"""Seconds a connection may stay silent before the server closes it (each open one holds a thread)."""
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048)


@dataclass
class _Family:
    name: str
    kind: str  # counter | gauge | histogram
    help: str
    buckets: tuple[float, ...] = ()
    values: dict[tuple[tuple[str, str], ...], float] = field(default_factory=dict)
    hist: dict[tuple[tuple[str, str], ...], list[float]] = field(default_factory=dict)  # bucket counts, sum, count


class Metrics:
    """Counters, gauges and histograms, declared once with their help text, rendered as Prometheus text."""

    def __init__(self) -> None:
        self._families: dict[str, _Family] = {}
        self._lock = threading.Lock()
        self.before_render: list[Callable[[Metrics], None]] = []

    def declare(self, name: str, kind: str, help: str, buckets: tuple[float, ...] = ()) -> None:
        """Register a metric family (``counter``, ``gauge`` or ``histogram`` with ``buckets``)."""
        if kind not in ("counter", "gauge", "histogram"):
            raise ValueError(f"metric kind must be counter, gauge or histogram, got {kind!r}")
        self._families[name] = _Family(name, kind, help, tuple(buckets))
        if kind == "counter":  # a sample at 0 from the start, so rate() and alerts see the first increment
            self._families[name].values[()] = 0.0

    def zero(self, name: str, label: str, values: tuple[str, ...], **fixed: str) -> None:
        """Export a labelled counter at 0 for each of ``values`` (replacing its unlabelled 0 sample), with the
        ``fixed`` labels too (e.g. the model of a per-model counter)."""
        with self._lock:
            fam = self._family(name, "counter")
            if fam.values.get((), None) == 0.0:
                del fam.values[()]
            for v in values:
                fam.values.setdefault(tuple(sorted({label: v, **fixed}.items())), 0.0)

    def _family(self, name: str, kind: str) -> _Family:
        fam = self._families.get(name)
        if fam is None or fam.kind != kind:
            raise KeyError(f"metric {name!r} is not a declared {kind}")
        return fam

    def inc(self, name: str, amount: float = 1.0, **labels: str) -> None:
        """Add to a counter."""
        key = tuple(sorted(labels.items()))
        with self._lock:
            fam = self._family(name, "counter")
            if key and fam.values.get(()) == 0.0:  # a labelled family: its unlabelled start sample goes
                del fam.values[()]
            fam.values[key] = fam.values.get(key, 0.0) + amount

    def set(self, name: str, value: float, **labels: str) -> None:
        """Set a gauge."""
        with self._lock:
            self._family(name, "gauge").values[tuple(sorted(labels.items()))] = float(value)

    def replace(self, name: str, values: dict[tuple[tuple[str, str], ...], float]) -> None:
        """Replace all series of a gauge, or of a counter kept elsewhere (e.g. the monitor's running totals)."""
        with self._lock:
            fam = self._families.get(name)
            if fam is None or fam.kind == "histogram":
                raise KeyError(f"metric {name!r} is not a declared counter or gauge")
            fam.values = dict(values)

    def observe(self, name: str, value: float, count: int = 1, **labels: str) -> None:
        """Record ``count`` observations of ``value`` in a histogram."""
        key = tuple(sorted(labels.items()))
        with self._lock:
            fam = self._family(name, "histogram")
            state = fam.hist.setdefault(key, [0.0] * (len(fam.buckets) + 3))  # buckets, +Inf, sum, count
            state[bisect.bisect_left(fam.buckets, value)] += count
            state[-2] += value * count
            state[-1] += count

    def value(self, name: str, **labels: str) -> float:
        """Current value of a counter or gauge series (0 if never set)."""
        with self._lock:
            return self._families[name].values.get(tuple(sorted(labels.items())), 0.0)

    def counts(self, name: str) -> float | dict[str, float]:
        """A counter or gauge as plain data: its value, or label value → value for a family with one label."""
        with self._lock:
            values = self._families[name].values
            if set(values) <= {()}:
                return values.get((), 0.0)
            return {",".join(v for _, v in key): value for key, value in sorted(values.items()) if key}

    def render(self) -> str:
        """The Prometheus text exposition format (version 0.0.4)."""
        for hook in self.before_render:
            hook(self)
        lines: list[str] = []
        with self._lock:
            for fam in self._families.values():
                lines.append(f"# HELP {fam.name} {fam.help}")
                lines.append(f"# TYPE {fam.name} {fam.kind}")
                if fam.kind != "histogram":
                    for key, v in sorted(fam.values.items()):
                        lines.append(f"{fam.name}{_labels(key)} {_num(v)}")
                    continue
                for key, state in sorted(fam.hist.items()):
                    running = 0.0
                    for bound, n in zip((*fam.buckets, math.inf), state):
                        running += n
                        lines.append(f"{fam.name}_bucket{_labels(key + (('le', _num(bound)),))} {_num(running)}")
                    lines.append(f"{fam.name}_sum{_labels(key)} {_num(state[-2])}")
                    lines.append(f"{fam.name}_count{_labels(key)} {_num(state[-1])}")
        return "\n".join(lines) + "\n"


def _labels(key: tuple[tuple[str, str], ...]) -> str:
    if not key:
        return ""
    return "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in key) + "}"


def _escape(value: str) -> str:
    """Label value escaping of the text format: backslash, newline and double quote."""
    return str(value).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _num(v: float) -> str:
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    return str(int(v)) if float(v).is_integer() and abs(v) < 1e15 else repr(float(v))


def monitor_metrics() -> Metrics:
    """The daemon's metric families."""
    m = Metrics()
    m.declare("trep_edge_messages_total", "counter", "MQTT messages received on telemetry topics")
    m.declare("trep_edge_readings_total", "counter", "readings accepted into a stream's window")
    m.declare("trep_edge_dropped_total", "counter", "messages dropped by the full intake queue (oldest of the stream)")
    m.declare("trep_edge_malformed_total", "counter", "rejected input, by kind")
    m.declare("trep_edge_rejected_total", "counter", "readings refused by the window policy (late, ...), by kind")
    m.declare("trep_edge_queue_depth", "gauge", "messages waiting between the network thread and the scoring loop")
    m.declare("trep_edge_scored_total", "counter", "readings scored")
    m.declare("trep_edge_streams_period_mismatch", "gauge", "streams whose observed sampling period is more than 2x "
              "off the model card's")
    m.declare("trep_edge_streams_refused_total", "counter", "readings of new streams refused at [windows] max_streams, "
              "by the topic template they arrived on")
    m.declare("trep_edge_streams_evicted_total", "counter", "streams closed after [monitor] evict_after seconds of "
              "silence (open episodes cleared, state forgotten)")
    m.declare("trep_edge_streams_stale", "gauge", "streams reported as no_data: silent for [monitor] stale_after "
              "seconds, not yet back")
    m.declare("trep_edge_inference_batch_rows", "histogram", "rows per onnxruntime call (2 per scored stream)",
              BATCH_BUCKETS)  # fmt: skip
    m.declare("trep_edge_inference_seconds", "histogram", "onnxruntime time per tick", LATENCY_BUCKETS)
    m.declare("trep_edge_reading_latency_seconds", "histogram",
              "arrival of a reading to its score being published (includes waiting for the tick)", LATENCY_BUCKETS)
    m.declare("trep_edge_tick_errors_total", "counter", "scoring ticks that raised (logged with a traceback)")
    m.declare("trep_edge_alerts_total", "counter", "alert state changes published, by state")
    m.declare("trep_edge_sensor_faults_total", "counter", "sensor faults (implausible values) raised and cleared")
    m.declare("trep_edge_streams", "gauge", "streams by state (warming, active)")
    m.declare("trep_edge_monitor_events_total", "counter", "the monitor's own counters (gaps, duplicates, ...)")
    m.declare("trep_edge_model_info", "gauge", "the loaded model (value 1)")
    m.declare("trep_edge_model_reloads_total", "counter", "model/config reloads, by result (ok, refused)")
    m.declare("trep_edge_mqtt_connected", "gauge", "1 while connected to the broker")
    m.declare("trep_edge_checkpoints_total", "counter", "state checkpoints written")
    m.declare("trep_edge_checkpoint_age_seconds", "gauge", "seconds since the last checkpoint")
    m.declare("trep_edge_last_tick_timestamp_seconds", "gauge", "unix time of the last scoring tick")
    m.declare("trep_edge_publish_refused_total", "counter",
              "publishes refused before sending (a topic or payload the broker would call malformed); dropped")
    m.declare("trep_edge_tick_backlog", "gauge", "readings left for the next tick by the tick budget")
    declare_process_metrics(m)
    return m


_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def declare_process_metrics(m: Metrics, start_time: float | None = None) -> None:
    """Declare the standard ``process_*`` metrics (Linux /proc), sampled at every render."""
    m.declare("process_resident_memory_bytes", "gauge", "resident set size in bytes")
    m.declare("process_cpu_seconds_total", "counter", "user + system CPU time in seconds")
    m.declare("process_open_fds", "gauge", "open file descriptors")
    m.declare("process_threads", "gauge", "OS threads of the process")
    m.declare("process_start_time_seconds", "gauge", "unix time the process started")
    m.set("process_start_time_seconds", time.time() if start_time is None else start_time)
    m.before_render.append(_sample_process)


def _sample_process(m: Metrics) -> None:
    times = os.times()
    m.replace("process_cpu_seconds_total", {(): times.user + times.system})
    m.set("process_threads", threading.active_count())
    try:  # /proc is Linux-only; elsewhere these two are simply not sampled
        with open("/proc/self/statm") as f:
            m.set("process_resident_memory_bytes", int(f.read().split()[1]) * _PAGE)
        m.set("process_open_fds", len(os.listdir("/proc/self/fd")))
        with open("/proc/self/status") as f:
            threads = next((line.split()[1] for line in f if line.startswith("Threads:")), None)
        if threads is not None:
            m.set("process_threads", int(threads))
    except OSError:
        pass


Probe = Callable[[], "tuple[bool, str]"]


class StatusServer:
    """``/metrics``, ``/healthz`` and ``/readyz`` on ``host:port``, served from a daemon thread."""

    def __init__(self, host: str, port: int, metrics: Metrics, health: Probe, ready: Probe) -> None:
        outer = self

        class Handler(BaseHTTPRequestHandler):
            timeout = HTTP_IDLE_TIMEOUT  # socket timeout: an idle or trickling client is closed, freeing its thread

            def do_GET(self) -> None:  # noqa: N802 - the http.server API
                if self.path == "/metrics":
                    outer._send(self, 200, metrics.render(), "text/plain; version=0.0.4; charset=utf-8")
                elif self.path in ("/healthz", "/readyz"):
                    ok, reason = (health if self.path == "/healthz" else ready)()
                    # A healthy probe may still say why it is degraded (e.g. a backlog): 200 with the reason.
                    outer._send(self, 200 if ok else 503, (reason or "ok") + "\n", "text/plain")
                else:
                    outer._send(self, 404, "try /metrics, /healthz or /readyz\n", "text/plain")

            def log_message(self, *args) -> None:
                pass  # scrapes every few seconds would drown the daemon's log

        self._server = ThreadingHTTPServer((host, port), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="http-status", daemon=True)

    @staticmethod
    def _send(handler: BaseHTTPRequestHandler, code: int, body: str, ctype: str) -> None:
        data = body.encode()
        handler.send_response(code)
        handler.send_header("Content-Type", ctype)
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        handler.wfile.write(data)

    @property
    def port(self) -> int:
        """The bound port."""
        return self._server.server_address[1]

    def start(self) -> None:
        """Serve in the background."""
        self._thread.start()

    def close(self) -> None:
        """Stop serving and release the port."""
        self._server.shutdown()
        self._server.server_close()
