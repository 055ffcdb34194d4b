"""The monitor daemon's settings: typed dataclasses, one per component, loaded from TOML.

Precedence, lowest first: the defaults below, the TOML file, environment variables
``TREP_EDGE_<SECTION>_<FIELD>`` (e.g. ``TREP_EDGE_MQTT_HOST``), then command-line flags ``--<section>-<field>``
(e.g. ``--mqtt-host``). Environment and flag values are strings converted to the field's type (lists are
comma-separated, booleans ``true/false/1/0/yes/no``).

Secrets never come from the TOML file or a flag (files get committed and flags show in ``ps``): the broker
password comes from ``TREP_EDGE_MQTT_PASSWORD`` or the file named by ``[mqtt] password_file``, the client key's
passphrase from ``TREP_EDGE_MQTT_KEY_PASSWORD`` or ``[mqtt] key_password_file``.

Every field is documented once, in its ``doc`` metadata (or, for the windows, alerts, detector and fhir tables, which
belong to their own modules, in the class docstring); ``--help`` and ``deploy/monitor.toml`` repeat that text.

Routes (``[[routes]]``, the TOML file only: no environment variable or flag) send the readings of some topics to
another model than ``[model]``'s; each route may override, field by field, that model's ``[model]`` settings (as
keys of the route) and its ``[windows]``, ``[detector]``, ``[alerts]`` and ``[input]`` tables (as sub-tables,
``[routes.detector]``). ``MonitorConfig.models`` lists every model with the settings it runs with.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import re
import sys
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from trep_edge.runtime.core.alerts import AlertConfig
from trep_edge.runtime.core.detector import DetectorConfig
from trep_edge.runtime.core.engine import ENGINE_CHOICES
from trep_edge.runtime.service.fhir import FhirConfig
from trep_edge.runtime.service.payloads import FORMATS, INFLUX_PRECISIONS, channel_renames, disconnected_codes
from trep_edge.runtime.core.sharding import Shard
from trep_edge.runtime.core.windows import WindowConfig

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

ENV_PREFIX = "TREP_EDGE_"
SECRET_KEYS = {("mqtt", "password"): "TREP_EDGE_MQTT_PASSWORD", ("mqtt", "key_password"): "TREP_EDGE_MQTT_KEY_PASSWORD"}
"""Secrets and the only environment variables they may come from (besides their ``*_file`` fields)."""


class ConfigError(ValueError):
    """A setting that is unknown, of the wrong type, or not allowed where it was given."""


def _doc(text: str, default: Any = dataclasses.MISSING, factory: Any = dataclasses.MISSING) -> Any:
    """A dataclass field with its one-line documentation attached."""
    if factory is not dataclasses.MISSING:
        return field(default_factory=factory, metadata={"doc": text})
    return field(default=default, metadata={"doc": text})


@dataclass
class MqttConfig:
    """Broker connection, subscriptions and session ([mqtt])."""

    host: str = _doc("broker host name or address", "127.0.0.1")
    port: int = _doc("broker port (1883 plain, 8883 usually TLS)", 1883)
    protocol: str = _doc("MQTT protocol version: 5 or 3.1.1", "5")
    client_id: str = _doc("stable client id: the broker keeps this id's session while the daemon is away",
                          "trep-edge-monitor")  # fmt: skip
    keepalive: int = _doc("seconds between keepalive pings; the broker publishes the Last Will after 1.5x", 30)
    session_expiry: int = _doc("MQTT 5: seconds the broker keeps the session and queues QoS 1 telemetry while "
                               "the daemon is disconnected (3.1.1: until the broker's persistent_client_expiration)",
                               86400)  # fmt: skip
    topics: list[str] = _doc("telemetry topic templates; each {name} matches one topic level and the matched "
                             "levels, joined by '/', are the stream id (MQTT wildcards + and # are allowed too; "
                             "with no {name} the payload must name its stream; a {channel} level names the "
                             "channel instead and its topics carry one plain number each)",
                             factory=lambda: ["sensors/{stream}/telemetry"])  # fmt: skip
    qos: int = _doc("subscription QoS: 1 so a broker blip or daemon restart loses no telemetry", 1)
    username: str = _doc("user name ('' = anonymous)", "")
    password_file: str = _doc("file holding the broker password (else $TREP_EDGE_MQTT_PASSWORD)", "")
    tls: bool = _doc("connect with TLS", False)
    ca_file: str = _doc("CA certificate(s) to verify the broker ('' = the system store)", "")
    cert_file: str = _doc("client certificate, for brokers that require one", "")
    key_file: str = _doc("client private key", "")
    key_password_file: str = _doc("file holding the client key's passphrase (else $TREP_EDGE_MQTT_KEY_PASSWORD)", "")
    reconnect_min: float = _doc("first reconnect delay in seconds; doubles per failed attempt, with jitter", 0.5)
    reconnect_max: float = _doc("longest reconnect delay in seconds", 30.0)
    queue_size: int = _doc("messages held between the network thread and the scoring loop; when full, the "
                           "oldest message of the same stream is dropped (and counted)", 20000)  # fmt: skip

    def __post_init__(self) -> None:
        if self.protocol not in ("5", "3.1.1"):
            raise ConfigError(f"mqtt.protocol must be '5' or '3.1.1', got {self.protocol!r}")
        if self.qos not in (0, 1, 2):
            raise ConfigError(f"mqtt.qos must be 0, 1 or 2, got {self.qos}")
        if not self.topics:
            raise ConfigError("mqtt.topics must list at least one topic template")
        if not 0 < self.reconnect_min <= self.reconnect_max:
            raise ConfigError(f"need 0 < mqtt.reconnect_min <= mqtt.reconnect_max, got {self.reconnect_min}, "
                              f"{self.reconnect_max}")  # fmt: skip
        if self.queue_size < 1:
            raise ConfigError(f"mqtt.queue_size must be >= 1, got {self.queue_size}")
        if bool(self.cert_file) != bool(self.key_file):
            raise ConfigError("mqtt.cert_file and mqtt.key_file go together: give both or neither")

    def password(self, env: Mapping[str, str] | None = None) -> str | None:
        """The broker password from its file or the environment (None when neither is set)."""
        return _secret(self.password_file, "mqtt.password_file", SECRET_KEYS[("mqtt", "password")], env)

    def key_password(self, env: Mapping[str, str] | None = None) -> str | None:
        """The client key's passphrase from its file or the environment (None when neither is set)."""
        return _secret(self.key_password_file, "mqtt.key_password_file", SECRET_KEYS[("mqtt", "key_password")], env)


@dataclass
class TopicsConfig:
    """Where the daemon publishes, and the control topics it reads ([topics]); {stream} is the stream id,
    {client_id} the MQTT client id."""

    alerts: str = _doc("alert changes (raised/updated/cleared: status firing/resolved; stream no_data/ok; sensor "
                       "faults), QoS 1, not retained",
                       "trep-edge/alerts/{stream}")  # fmt: skip
    state: str = _doc("current alert state of each stream, QoS 1, retained", "trep-edge/state/{stream}")
    scores: str = _doc("every scored reading ('' = off); for dashboards and tests, not for alarms", "")
    scores_qos: int = _doc("QoS of the scores topic", 0)
    dead_letter: str = _doc("samples of rejected input, with the reason", "trep-edge/dead-letter")
    status: str = _doc("daemon status, retained: online (with model and sha256) or offline (Last Will)",
                       "trep-edge/status/{client_id}")  # fmt: skip
    commands: str = _doc("read: operator commands (ack an episode, silence or unsilence a stream), JSON; grant "
                         "write access to operator accounts only ('' = off)", "trep-edge/commands")  # fmt: skip
    bed_events: str = _doc("read: bed events (admit, discharge, transfer), JSON, e.g. from an ADT integration; "
                           "grant write access to that account only ('' = off)", "trep-edge/beds")  # fmt: skip
    replies: str = _doc("one reply per command or bed event: accepted or refused, and why; QoS 1, not retained",
                        "trep-edge/replies/{client_id}")  # fmt: skip

    def __post_init__(self) -> None:
        for name in ("commands", "bed_events"):
            levels = getattr(self, name).replace("{client_id}", "x").split("/")
            wild = [k for k, level in enumerate(levels) if any(ch in level for ch in "+#{}")]
            if any(levels[k] not in ("+", "#") or levels[k] == "#" and k != len(levels) - 1 for k in wild):
                raise ConfigError(f"topics.{name} {getattr(self, name)!r} is no topic filter: + and # stand for "
                                  "whole levels, # only last, and {client_id} is the only placeholder")


@dataclass
class ModelConfig:
    """The ONNX model ([model])."""

    path: str = _doc("model file (its card must be inside it, and beside it as NAME.card.json if present)",
                     "models/icu-vitals.onnx")  # fmt: skip
    providers: str = _doc("onnxruntime execution providers: auto, or a comma list of tensorrt, cuda, cpu", "auto")
    threads: int = _doc("onnxruntime intra-op threads (0 = onnxruntime's default)", 0)
    engine: str = _doc("how the last-step pair is computed: auto (the fastest engine the model carries that "
                       "matches its full graph to 1e-5), or force full, last_step, pruned_pair or step (refused "
                       "if the model lacks it)", "auto")  # fmt: skip
    watch: bool = _doc("reload when the model file changes (mtime or sha256), as on SIGHUP", True)
    watch_interval: float = _doc("seconds between checks of the model file", 2.0)

    def __post_init__(self) -> None:
        if self.engine not in ENGINE_CHOICES:
            raise ConfigError(f"model.engine must be one of {', '.join(ENGINE_CHOICES)}, got {self.engine!r}")


@dataclass
class MonitorSettings:
    """The scoring loop ([monitor])."""

    tick_interval: float = _doc("seconds between scoring ticks; each tick scores every stream with new readings "
                                "in one onnxruntime call", 1.0)  # fmt: skip
    shard: str = _doc("this daemon's shard i/N of a scaled-out deployment: it scores the streams with "
                      "crc32(stream id) mod N == i and skips the others (runtime/trep_edge/runtime/core/sharding.py); 0/1 = all", "0/1")
    tick_max_messages: int = _doc("tick budget: at most this many queued messages are taken in per tick; the rest "
                                  "wait in the queue for the next, so health, checkpoints and metrics keep their "
                                  "cadence under any backlog", 2000)  # fmt: skip
    tick_budget_ms: float = _doc("tick budget in time: the messages taken in per tick are cut so that intake plus "
                                 "scoring stay near this many milliseconds (measured on the last ticks)",
                                 500.0)  # fmt: skip
    evict_after: float = _doc("seconds without an accepted reading after which a stream is closed: an open alert "
                              "episode is cleared, its state leaves memory and the checkpoint (a stream that comes "
                              "back warms up again); 0 = never", 86400.0)  # fmt: skip
    stale_after: float = _doc("seconds without an accepted reading after which a stream is reported once as "
                              "no_data (alerts and retained state topics; its next accepted reading reports ok); "
                              "more than [windows] period and less than evict_after; 0 = off", 0.0)  # fmt: skip

    def __post_init__(self) -> None:
        if self.evict_after < 0:
            raise ConfigError(f"monitor.evict_after must be >= 0 seconds (0 = never), got {self.evict_after}")
        if not self.stale_after >= 0:
            raise ConfigError(f"monitor.stale_after must be >= 0 seconds (0 = off), got {self.stale_after}")
        if self.stale_after and self.evict_after and self.stale_after >= self.evict_after:
            raise ConfigError(f"monitor.stale_after ({self.stale_after:g} s) must be less than monitor.evict_after "
                              f"({self.evict_after:g} s): a silent stream is reported as no_data before it is "
                              "closed; lower stale_after, raise evict_after, or set stale_after = 0 (off)")
        if self.tick_interval <= 0:
            raise ConfigError(f"monitor.tick_interval must be > 0 seconds, got {self.tick_interval}")
        if self.tick_max_messages < 1 or self.tick_budget_ms <= 0:
            raise ConfigError(f"monitor.tick_max_messages must be >= 1 and monitor.tick_budget_ms > 0, got "
                              f"{self.tick_max_messages} and {self.tick_budget_ms}")  # fmt: skip
        try:
            Shard.parse(self.shard)
        except ValueError as exc:
            raise ConfigError(f"monitor.shard: {exc}") from None


@dataclass
class InputConfig:
    """Payload checks and bad-input handling ([input])."""

    max_bytes: int = _doc("largest accepted payload in bytes", 65536)
    max_skew: float = _doc("readings whose timestamp is further than this many seconds from the daemon's clock "
                           "are rejected as absurd", 86400.0)  # fmt: skip
    unknown_channels: str = _doc("a channel the model does not know: reject the reading, or ignore the channel",
                                 "reject")  # fmt: skip
    rename: list[str] = _doc("channel renames SENT=CHANNEL, applied before channels are checked: a sensor's name for "
                             "a value -> the model's channel name (e.g. [\"O2Sat=SpO2\", \"Resp=RESP\"])",
                             factory=list)  # fmt: skip
    format: str = _doc("payload format: json (readings, batches, SenML, plain numbers), influx (InfluxDB line "
                       "protocol, e.g. Telegraf's MQTT output) or sparkplug (Sparkplug B protobuf on spBv1.0/# "
                       "topics; needs the [sparkplug] extra)", "json")  # fmt: skip
    influx_precision: str = _doc("unit of line-protocol timestamps: ns, us, ms or s", "ns")
    sparkplug_rebirth_interval: float = _doc("Sparkplug B: ask an edge node to send its BIRTHs again (NCMD Node "
                                             "Control/Rebirth) when its data cannot be read (a BIRTH or alias not "
                                             "seen, a seq gap), at most once per this many seconds per node; 0 = "
                                             "never (listen only)", 30.0)  # fmt: skip
    disconnected: list[str] = _doc("values a sensor sends when it is not connected, CHANNEL=NUMBER or CHANNEL=null "
                                   "(* = every channel; e.g. [\"*=0\"] for MIMIC-II numerics, [\"*=null\"] for "
                                   "a feed that sends nulls when a probe is off): such values are missing, and a "
                                   "reading left without any value reports its stream as disconnected and is not "
                                   "scored; empty = none", factory=list)  # fmt: skip
    log_interval: float = _doc("seconds between log lines about one kind of bad input", 10.0)
    dead_letter_interval: float = _doc("seconds between dead-letter samples of one kind of bad input", 1.0)

    def __post_init__(self) -> None:
        if self.unknown_channels not in ("reject", "ignore"):
            raise ConfigError(f"input.unknown_channels must be 'reject' or 'ignore', got {self.unknown_channels!r}")
        if self.format not in FORMATS:
            raise ConfigError(f"input.format must be one of {list(FORMATS)}, got {self.format!r}")
        if self.format == "sparkplug":
            from trep_edge.runtime.service.sparkplug import require_protobuf

            require_protobuf()  # without the [sparkplug] extra: ModuleNotFoundError, one line naming it (cli)
        if not 0 <= self.sparkplug_rebirth_interval < math.inf:
            raise ConfigError(f"input.sparkplug_rebirth_interval must be >= 0 seconds (0 = never ask for a rebirth), "
                              f"got {self.sparkplug_rebirth_interval}")  # fmt: skip
        if self.influx_precision not in INFLUX_PRECISIONS:
            raise ConfigError(f"input.influx_precision must be one of {list(INFLUX_PRECISIONS)}, "
                              f"got {self.influx_precision!r}")
        try:
            channel_renames(self.rename)
        except ValueError as exc:
            raise ConfigError(f"input.rename: {exc}") from None
        try:
            disconnected_codes(self.disconnected)
        except ValueError as exc:
            raise ConfigError(f"input.disconnected: {exc}") from None

    @property
    def renames(self) -> dict[str, str]:
        """``rename`` as a mapping, sent name → model channel."""
        return channel_renames(self.rename)

    @property
    def disconnected_codes(self) -> dict[str, float]:
        """``disconnected`` as a mapping, channel (or ``*``) → code (NaN = null)."""
        return disconnected_codes(self.disconnected)


@dataclass
class StateConfig:
    """Checkpoints of the per-stream state ([state])."""

    path: str = _doc("checkpoint file, restored at start ('' = no checkpoints: restarts warm up again)",
                     "state/monitor-state.npz")  # fmt: skip
    checkpoint_interval: float = _doc("seconds between checkpoints (also written on SIGTERM); a SIGKILL loses at "
                                      "most this much scoring history", 10.0)  # fmt: skip

    def __post_init__(self) -> None:
        # A folder would fail every write, each only logged: the daemon would run and never checkpoint.
        if self.path and Path(self.path).is_dir():
            raise ConfigError(f"state.path {self.path} is a folder; name the checkpoint file in it, e.g. "
                              f"{Path(self.path) / 'monitor-state.npz'}")
        if not self.checkpoint_interval > 0:
            raise ConfigError(f"state.checkpoint_interval must be a positive number of seconds, got "
                              f"{self.checkpoint_interval}")


@dataclass
class HttpConfig:
    """Prometheus metrics and health endpoints ([http])."""

    host: str = _doc("address to listen on; keep it loopback unless a firewall protects the port", "127.0.0.1")
    port: int = _doc("port for /metrics, /healthz and /readyz (0 = no HTTP server)", 9108)


@dataclass
class ArchiveConfig:
    """Telemetry archive for retraining ([archive]): accepted readings as gzip CSV parts, one folder per UTC day."""

    enabled: bool = _doc("record every accepted reading (after parsing, before scoring); see docs/retraining.md",
                         False)  # fmt: skip
    path: str = _doc("archive folder (DAY/part-NNNN.csv.gz and DAY/alerts.jsonl); `trep-edge train` reads it",
                     "archive")  # fmt: skip
    max_part_bytes: int = _doc("start a new part once the open one holds this many compressed bytes", 16 * 2**20)
    max_part_seconds: float = _doc("start a new part once the open one is this many seconds old", 3600.0)
    flush_seconds: float = _doc("seconds between flushes of the open part: what a crash can lose at most", 5.0)
    max_total_bytes: int = _doc("delete the oldest parts while the archive is larger (0 = no limit)", 10 * 2**30)
    max_age_days: float = _doc("delete parts older than this many days (0 = keep them)", 30.0)
    queue_size: int = _doc("readings waiting for the archive thread; when full, readings are counted as "
                           "trep_edge_archive_dropped_total and not archived (scoring never waits)", 100000)  # fmt: skip

    def __post_init__(self) -> None:
        if self.max_part_bytes < 1 or self.max_part_seconds <= 0 or self.flush_seconds <= 0:
            raise ConfigError("archive.max_part_bytes, max_part_seconds and flush_seconds must be > 0")
        if self.max_total_bytes < 0 or self.max_age_days < 0:
            raise ConfigError("archive.max_total_bytes and max_age_days must be >= 0 (0 = no limit)")
        if self.queue_size < 1:
            raise ConfigError(f"archive.queue_size must be >= 1, got {self.queue_size}")


ROUTE_SECTIONS = ("windows", "detector", "alerts", "input")
"""The tables a route may override for its model (as sub-tables ``[routes.windows]``, ...)."""
_MODEL_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


def model_name(path: str) -> str:
    """A model's default name in metrics, status and checkpoints: its file name without ``.onnx``."""
    return Path(path).name.removesuffix(".onnx")


@dataclass
class RouteConfig:
    """A ``[[routes]]`` entry: topics whose readings another model scores, and that model's own settings."""

    match: list[str] = _doc("MQTT topic filters (+ and # wildcards, or a template of mqtt.topics) whose readings this "
                            "route's model scores; routes are tried in order and the first match wins, topics no "
                            "route matches go to [model]", factory=list)  # fmt: skip
    model: str = _doc("model file of this route", "")
    name: str = _doc("the model's name in metrics, status and checkpoints ('' = the file name without .onnx)", "")
    settings: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Overrides by table (``model`` holds the route's model keys and its file as ``path``), as given in the TOML."""

    @property
    def model_name(self) -> str:
        """The name of the route's model."""
        return self.name or model_name(self.model)


@dataclass
class ModelSettings:
    """One model of the daemon: its name, the topic filters routed to it (none: the default model, every other
    topic) and the whole configuration it runs with (the daemon's, with its route's overrides)."""

    name: str
    match: tuple[str, ...]
    config: "MonitorConfig"


@dataclass
class MonitorConfig:
    """All settings of ``trep-edge run``."""

    mqtt: MqttConfig = field(default_factory=MqttConfig)
    topics: TopicsConfig = field(default_factory=TopicsConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    windows: WindowConfig = field(default_factory=WindowConfig)
    alerts: AlertConfig = field(default_factory=AlertConfig)
    detector: DetectorConfig = field(default_factory=DetectorConfig)
    monitor: MonitorSettings = field(default_factory=MonitorSettings)
    input: InputConfig = field(default_factory=InputConfig)
    state: StateConfig = field(default_factory=StateConfig)
    http: HttpConfig = field(default_factory=HttpConfig)
    archive: ArchiveConfig = field(default_factory=ArchiveConfig)
    fhir: FhirConfig = field(default_factory=FhirConfig)
    routes: list[RouteConfig] = field(default_factory=list)
    source: str = ""

    def to_dict(self) -> dict[str, Any]:
        """The settings as plain data, one table per section (no secrets: they are not fields); ``routes`` only
        when there are some, so that a configuration without routes keeps its revision."""
        tables: dict[str, Any] = {name: dataclasses.asdict(getattr(self, name)) for name in section_names()}
        if self.routes:
            tables["routes"] = [dataclasses.asdict(route) for route in self.routes]
        return tables

    def models(self) -> list[ModelSettings]:
        """Every model with its settings: the routes' in their order, then ``[model]`` (the default, last)."""
        out = [ModelSettings(r.model_name, tuple(r.match), self._routed(r)) for r in self.routes]
        return out + [ModelSettings(model_name(self.model.path), (), self)]

    def _routed(self, route: RouteConfig) -> "MonitorConfig":
        """This configuration with a route's model file and overrides applied, and no routes."""
        sections = {s: dataclasses.replace(getattr(self, s), **route.settings.get(s, {}))
                    for s in ("model", *ROUTE_SECTIONS)}  # fmt: skip
        return dataclasses.replace(self, **sections, routes=[])

    @property
    def revision(self) -> str:
        """Short sha256 of the effective settings: alerts and status name the configuration they came from."""
        text = json.dumps(self.to_dict(), sort_keys=True, default=str)
        return hashlib.sha256(text.encode()).hexdigest()[:12]


def section_names() -> list[str]:
    """The TOML tables, in documentation order (not ``[[routes]]``, an array of tables of its own)."""
    return [f.name for f in dataclasses.fields(MonitorConfig) if f.name not in ("routes", "source")]


def section_class(section: str) -> type:
    """The dataclass of a TOML table."""
    return typing.get_type_hints(MonitorConfig)[section]


def field_types(cls: type) -> dict[str, Any]:
    """Field name -> resolved type annotation of a config dataclass."""
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls) if f.init}


def field_doc(cls: type, name: str) -> str:
    """The one-line documentation of a field: its ``doc`` metadata, else its line in the class docstring."""
    for f in dataclasses.fields(cls):
        if f.name == name and "doc" in f.metadata:
            return f.metadata["doc"]
    match = re.search(rf"^\s*{re.escape(name)}:\s*(.+?)(?=^\s*\w+:|\Z)", cls.__doc__ or "", re.M | re.S)
    return " ".join(match[1].split()) if match else ""


def convert(text: str, kind: Any, where: str) -> Any:
    """Convert an environment or flag string to a field's type (``int``, ``float``, ``bool``, ``str``, lists)."""
    origin = typing.get_origin(kind)
    if origin in (typing.Union, types.UnionType):
        options = [k for k in typing.get_args(kind) if k is not type(None)]
        if text.strip().lower() in ("", "none", "null"):
            return None
        return convert(text, options[0], where)
    if origin in (list, tuple):
        item = typing.get_args(kind)[0]
        return origin(convert(part.strip(), item, where) for part in text.split(",") if part.strip())
    try:
        if kind is bool:
            lowered = text.strip().lower()
            if lowered in ("1", "true", "yes", "on"):
                return True
            if lowered in ("0", "false", "no", "off"):
                return False
            raise ValueError(text)
        if kind is float and text.strip().lower() in ("inf", "infinity"):
            return float("inf")
        return kind(text.strip()) if kind in (int, float) else kind(text)
    except ValueError:
        raise ConfigError(f"{where}: {text!r} is not a valid {getattr(kind, '__name__', kind)}") from None


def _check_value(value: Any, kind: Any, where: str) -> Any:
    """Check a TOML value against a field's type; ints are accepted for floats."""
    origin = typing.get_origin(kind)
    if origin in (typing.Union, types.UnionType):
        options = [k for k in typing.get_args(kind) if k is not type(None)]
        return None if value is None else _check_value(value, options[0], where)
    if origin in (list, tuple):
        item = typing.get_args(kind)[0]
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{where} must be a list, got {value!r}")
        return origin(_check_value(v, item, where) for v in value)
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if kind is int and isinstance(value, bool) or not isinstance(value, kind):
        raise ConfigError(f"{where} must be {getattr(kind, '__name__', kind)}, got {value!r}")
    return value


def _secret(path: str, file_key: str, env_var: str, env: Mapping[str, str] | None) -> str | None:
    env = os.environ if env is None else env
    if path:
        try:
            return Path(path).read_text().rstrip("\r\n")
        except OSError as exc:
            raise ConfigError(f"cannot read {file_key} {path}: {exc}") from exc
    return env.get(env_var)


def env_overrides(env: Mapping[str, str]) -> dict[tuple[str, str], str]:
    """``TREP_EDGE_<SECTION>_<FIELD>`` variables for known sections; unknown fields there are errors."""
    out: dict[tuple[str, str], str] = {}
    for section in section_names():
        prefix = f"{ENV_PREFIX}{section.upper()}_"
        names = field_types(section_class(section))
        for key, value in env.items():
            if not key.startswith(prefix):
                continue
            name = key[len(prefix) :].lower()
            if (section, name) in SECRET_KEYS:
                continue
            if name not in names:
                raise ConfigError(f"environment variable {key}: [{section}] has no field {name!r} "
                                  f"(fields: {', '.join(names)})")  # fmt: skip
            out[(section, name)] = value
    return out


def load_config(
    path: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
    flags: Mapping[tuple[str, str], str] | None = None,
) -> MonitorConfig:
    """Defaults, then the TOML file, then the environment, then flags; raise ConfigError naming the bad setting."""
    env = os.environ if env is None else env
    tables: dict[str, dict[str, Any]] = {s: {} for s in section_names()}
    if path is not None:
        try:
            data = tomllib.loads(Path(path).read_text())
        except FileNotFoundError:
            raise FileNotFoundError(f"config file {path} does not exist") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"config file {path} is not valid TOML: {exc}") from exc
        for section, table in data.items():
            if section == "routes":
                continue  # parsed below, once the tables it overrides are complete
            if section not in tables or not isinstance(table, dict):
                raise ConfigError(f"{path}: unknown table [{section}] (tables: {', '.join(section_names())})")
            names = field_types(section_class(section))
            for name, value in table.items():
                if (section, name) in SECRET_KEYS:
                    raise ConfigError(f"{path}: [{section}] {name} is a secret and must not be in the config file: "
                                      f"use {name}_file or ${SECRET_KEYS[(section, name)]}")  # fmt: skip
                if name not in names:
                    raise ConfigError(f"{path}: [{section}] has no field {name!r} (fields: {', '.join(names)})")
                tables[section][name] = _check_value(value, names[name], f"{path}: [{section}] {name}")
    for origin, strings in (("environment", env_overrides(env)), ("flag", dict(flags or {}))):
        for (section, name), text in strings.items():
            names = field_types(section_class(section))
            if name not in names:
                raise ConfigError(f"{origin}: [{section}] has no field {name!r}")
            tables[section][name] = convert(text, names[name], f"{origin} {section}.{name}")
    sections = {}
    for section, values in tables.items():
        try:
            sections[section] = section_class(section)(**values)
        except ConfigError:
            raise
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"[{section}]: {exc}") from exc
    config = MonitorConfig(**sections, source=str(path or ""))
    if path is not None and "routes" in data:
        config.routes = _parse_routes(data["routes"], f"{path}: [[routes]]")
        _check_models(config, f"{path}: [[routes]]")
    return config


def _parse_routes(entries: Any, where: str) -> list[RouteConfig]:
    """The ``[[routes]]`` array: keys checked and typed, overrides kept by table (applied by ``MonitorConfig``)."""
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise ConfigError(f"{where} must be an array of tables: write each route as [[routes]] with match and model")
    model_keys = {k: v for k, v in field_types(ModelConfig).items() if k != "path"}
    routes = []
    for number, entry in enumerate(entries, 1):
        here = f"{where} {number}"
        entry = dict(entry)
        match = entry.pop("match", None)
        match = [match] if isinstance(match, str) else match
        if not match or not isinstance(match, list) or not all(isinstance(m, str) and m for m in match):
            raise ConfigError(f"{here}: match must be a topic filter or a list of them, e.g. match = \"icu/+/vitals\"")
        model = entry.pop("model", None)
        if not isinstance(model, str) or not model:
            raise ConfigError(f"{here}: model must name the route's model file, e.g. "
                              "model = \"models/icu-vitals.onnx\"")
        if not Path(model).is_file():
            raise ConfigError(f"{here}: model file {model} does not exist (a path relative to the daemon's working "
                              "directory, like [model] path)")  # fmt: skip
        name = _check_value(entry.pop("name", ""), str, f"{here} name")
        settings: dict[str, dict[str, Any]] = {"model": {"path": model}}
        for key, value in entry.items():
            if key in model_keys:
                settings["model"][key] = _check_value(value, model_keys[key], f"{here} {key}")
            elif key in ROUTE_SECTIONS and isinstance(value, dict):
                names = field_types(section_class(key))
                for k, v in value.items():
                    if k not in names:
                        raise ConfigError(f"{here}: [routes.{key}] has no field {k!r} (fields: {', '.join(names)})")
                settings[key] = {k: _check_value(v, names[k], f"{here} [routes.{key}] {k}") for k, v in value.items()}
            else:
                raise ConfigError(f"{here}: unknown key {key!r}; a route takes match, model, name, the [model] keys "
                                  f"{', '.join(model_keys)} and the tables {', '.join(ROUTE_SECTIONS)} "
                                  "(e.g. [routes.detector])")  # fmt: skip
        routes.append(RouteConfig(list(match), model, name, settings))
    return routes


def _check_models(config: MonitorConfig, where: str) -> None:
    """Each route's settings are valid, and every model has a name of its own (metrics, status, checkpoints)."""
    seen: dict[str, str] = {}
    for number, route in enumerate(config.routes, 1):
        try:
            config._routed(route)
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"{where} {number}: {exc}") from None
    labels = [f"{where} {i}" for i in range(1, len(config.routes) + 1)] + ["[model]"]
    for label, model in zip(labels, config.models()):
        if not _MODEL_NAME.match(model.name):
            raise ConfigError(f"{label}: model name {model.name!r} must be letters, digits, '.', '_' or '-': set "
                              "the route's name")
        if model.name in seen:
            raise ConfigError(f"{seen[model.name]} and {label} both name their model {model.name!r}: give the "
                              "route a name of its own (name = \"...\")")  # fmt: skip
        seen[model.name] = label


def flag_name(section: str, name: str) -> str:
    """The command-line flag of a field: ``--<section>-<field>`` with dashes."""
    return f"--{section}-{name.replace('_', '-')}"


def add_config_flags(parser: Any) -> None:
    """Add one string-valued flag per field to an argparse parser, grouped by table (secrets have none)."""
    for section in section_names():
        cls = section_class(section)
        group = parser.add_argument_group(f"[{section}]", (cls.__doc__ or "").strip().splitlines()[0])
        for name, kind in field_types(cls).items():
            # argparse %-formats help text: a docstring's "10 %" would break --help and every parse that renders it
            group.add_argument(flag_name(section, name), dest=f"cfg__{section}__{name}", metavar="VALUE",
                               default=None, help=field_doc(cls, name).replace("%", "%%"))  # fmt: skip


def flag_overrides(args: Any) -> dict[tuple[str, str], str]:
    """The config flags given on a parsed command line, as (section, field) -> string."""
    out = {}
    for key, value in vars(args).items():
        if key.startswith("cfg__") and value is not None:
            _, section, name = key.split("__", 2)
            out[(section, name)] = value
    return out
