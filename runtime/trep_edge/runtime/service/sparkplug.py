"""Sparkplug B input (``[input] format = "sparkplug"``): topics, the payload schema, BIRTH alias tables, sessions.

Sparkplug B (Eclipse Tahu, https://sparkplug.eclipse.org) is what many plant MQTT feeds speak: topics
``spBv1.0/<group_id>/<message_type>/<edge_node_id>[/<device_id>]`` and protobuf payloads
(``org.eclipse.tahu.protobuf.Payload``). This module turns one message into numeric samples; ``runtime/trep_edge/runtime/service/payloads.py``
makes readings of them (renames, the unknown-channel policy, timestamps, stream-id checks), as for every format.

- **Stream**: ``<group_id>/<edge_node_id>/<device_id>`` for device messages, ``<group_id>/<edge_node_id>`` for node
  messages, taken from the topic itself. Subscribe with ``[mqtt] topics = ["spBv1.0/#"]`` (or a narrower filter
  such as ``spBv1.0/plant-a/#``); a template whose ``{name}`` levels spell something else than that stream id gets
  ``stream_mismatch``.
- **NBIRTH / DBIRTH** define the node's or device's metrics: name ↔ alias and datatype. They give no readings (they
  repeat current values on every (re)connect and carry bookkeeping metrics such as ``bdSeq`` and ``Node Control/*``);
  each replaces the previous table of its node or device. Two metrics with one alias are ``duplicate_key`` and drop
  the table.
- **NDATA / DDATA** give readings: a metric names its channel by ``name``, or by ``alias`` resolved from the last
  BIRTH of the same node or device; an alias without one is ``unknown_alias``. Numeric metrics (Int8..UInt64,
  Float, Double, Boolean as 0/1) are values, ``is_null`` ones missing (NaN); String, Text, UUID, DateTime, Bytes,
  File, DataSet and Template metrics are skipped, neither values nor errors (a model scores numbers; a device's
  status text is not a fault). Signed integers are read as the two's complement Sparkplug sends (``int_value`` is a
  uint32, ``long_value`` a uint64). Time: the metric's ``timestamp``, else the payload's, else the receive time
  (milliseconds since the epoch); metrics with different times become separate readings. ``is_historical`` metrics
  (store-and-forward backfill) are read like the others: the window policy refuses those older than the stream's
  scored steps as ``late``.
- **NCMD, DCMD** and **STATE** (``spBv1.0/STATE/<host_id>``) give nothing and are not errors: no readings, no
  counters besides ``trep_edge_messages_total``.
- A payload that is not a Sparkplug protobuf is ``bad_protobuf``; a topic under ``spBv1.0`` that is not of the form
  above (or of another namespace) is ``bad_topic``.

**Sessions** (what a Sparkplug host application does with the other messages; ``take`` hands the daemon what they
asked for, message by message):

- **Rebirth requests.** A message the daemon cannot fully read asks its edge node to send its BIRTHs again: an NCMD
  on ``spBv1.0/<group>/NCMD/<node>`` with the Boolean metric ``Node Control/Rebirth`` = true (payload timestamp, no
  ``seq``, QoS 0, as the spec has it), for reason ``no_birth`` (a message of a node or device whose BIRTH the
  daemon has not seen: it started after it, the node died since, or the table was forgotten), ``unknown_alias`` (an
  alias its last BIRTH did not define) or ``seq_gap``. At most one per node per ``[input]
  sparkplug_rebirth_interval`` seconds (0: never; a flood of bad data is not a flood of commands); the message
  itself is read as before (its unknown aliases rejected, never guessed).
- **Sequence numbers.** ``seq`` (0..255, wrapping) runs over one node's NBIRTH, DBIRTH, NDATA, DDATA and DDEATH; a
  message whose ``seq`` is not the last one + 1 is a gap: counted and a rebirth requested, its readings kept. There
  is no reorder timeout (the spec allows none where the broker delivers one client's messages in order across
  topics, as a single Mosquitto does): a reordering counts as a gap.
- **Deaths.** An NDEATH takes its node and all the node's devices offline, a DDEATH its device: ``take`` reports a
  ``Death`` (the daemon reports the streams ``no_data``) and their alias tables are dropped, so aliases are read
  again only after the next BIRTH (named metrics still are: a name says which channel it is). An NDEATH whose
  ``bdSeq`` differs from the one of the node's last NBIRTH is the Will of an earlier connection, delivered after
  the node came back: ignored, as the spec says. A death's payload is read for ``bdSeq`` and ``seq`` only; one that
  does not parse is still a death.

State is bounded: at most ``max_tables`` BIRTH tables and ``max_entries`` metrics in all of them; beyond either the
least recently used tables are forgotten (their DATA is ``unknown_alias`` until the next BIRTH); as many node
sessions, the least recently heard forgotten first (such a node's next message asks for a rebirth). Report by
exception is not filled in: a DATA message's absent metrics are absent from its reading, as for JSON.

protobuf is an optional extra (``pip install 'trep-edge[sparkplug]'``): importing this module never needs it, the
first decode (and ``require_protobuf``, which the config calls for this format) does.
"""
from __future__ import annotations

import functools
import math
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from trep_edge.runtime.service.payloads import PayloadError

if TYPE_CHECKING:
    from trep_edge.runtime.service.http_status import Metrics

NAMESPACE = "spBv1.0"
PROTOBUF = "google.protobuf"
"""The module the [sparkplug] extra installs (trep_edge/extras.py names the extra from it)."""
NODE_TYPES = frozenset({"NBIRTH", "NDEATH", "NDATA", "NCMD"})
DEVICE_TYPES = frozenset({"DBIRTH", "DDEATH", "DDATA", "DCMD"})
BIRTH_TYPES = frozenset({"NBIRTH", "DBIRTH"})
DATA_TYPES = frozenset({"NDATA", "DDATA"})
SEQ_MODULUS = 256
BD_SEQ = "bdSeq"
REBIRTH_METRIC = "Node Control/Rebirth"
REBIRTH_REASONS = ("no_birth", "unknown_alias", "seq_gap")
BOOLEAN = 11
MAX_TABLES = 10_000
MAX_ENTRIES = 250_000
"""Metrics held in all BIRTH tables together: some tens of MB at most."""

# Sparkplug datatypes (the Payload comment in sparkplug_b.proto): 1..4 Int8..Int64, 5..8 UInt8..UInt64, 9 Float,
# 10 Double, 11 Boolean; 12 and up (String, DateTime, Text, UUID, DataSet, Bytes, File, Template, property sets and
# arrays) are not values a model scores. 0 is Unknown: the value's protobuf field decides.
SIGNED_BITS = {1: 8, 2: 16, 3: 32, 4: 64}
NUMERIC_TYPES = frozenset(range(1, 12))
NUMERIC_FIELDS = frozenset({"int_value", "long_value", "float_value", "double_value", "boolean_value"})


@dataclass(frozen=True)
class SparkplugTopic:
    """A parsed ``spBv1.0/<group>/<type>/<node>[/<device>]`` topic."""

    group: str
    message_type: str
    node: str
    device: str | None

    @property
    def stream(self) -> str:
        """The stream id: ``group/node/device``, or ``group/node`` for node messages."""
        return self.node_stream if self.device is None else f"{self.node_stream}/{self.device}"

    @property
    def node_stream(self) -> str:
        """The edge node's stream id, ``group/node``: also the key of its session."""
        return f"{self.group}/{self.node}"


@dataclass(frozen=True)
class Sample:
    """One numeric metric of a DATA message (or the error that keeps it from being one)."""

    index: int  # the metric's position in the payload
    name: str
    value: float | int | None  # None: the metric is null (missing)
    timestamp_ms: int | None  # None: the payload has no time either (the receive time applies)
    error: PayloadError | None = None


@dataclass(frozen=True)
class Decoded:
    """What one message holds: its stream and samples for DATA messages, no stream for everything else."""

    stream: str | None
    samples: tuple[Sample, ...] = ()


@dataclass(frozen=True)
class Rebirth:
    """A rebirth request due to an edge node: publish ``payload`` on ``topic`` (QoS 0, not retained)."""

    node: str  # the node's stream id, group/node
    reason: str  # one of REBIRTH_REASONS
    topic: str
    payload: bytes


@dataclass(frozen=True)
class Death:
    """An NDEATH or DDEATH: the node's (and its devices') or the device's streams are offline."""

    stream: str
    message_type: str

    def covers(self, stream: str) -> bool:
        """Whether ``stream`` went offline with it: the node's streams include its devices'."""
        return stream == self.stream or (self.message_type == "NDEATH" and stream.startswith(self.stream + "/"))


@dataclass(frozen=True)
class SessionEvents:
    """What the messages decoded since the last ``take`` said of their nodes' sessions."""

    rebirths: tuple[Rebirth, ...] = ()
    deaths: tuple[Death, ...] = ()
    seq_gaps: tuple[str, ...] = ()  # the node of each gap


NO_EVENTS = SessionEvents()


@dataclass
class _Node:
    """One edge node's session as the messages showed it."""

    born: bool = False  # an NBIRTH seen since the daemon started or since the node's last NDEATH
    bd_seq: int | None = None  # its NBIRTH's bdSeq (None: it had none)
    seq: int | None = None  # the last seq it sent
    asked: float = -math.inf  # when a rebirth was last requested, on take's clock


@dataclass
class _Table:
    """One node's or device's last BIRTH: alias → (name, datatype), name → datatype."""

    aliases: dict[int, tuple[str, int]] = field(default_factory=dict)
    types: dict[str, int] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.aliases) + len(self.types)


def parse_topic(topic: str) -> SparkplugTopic | None:
    """The topic's parts; None for a STATE topic (no readings); ``bad_topic`` for anything else."""
    levels = topic.split("/")
    if len(levels) == 3 and levels[:2] == [NAMESPACE, "STATE"]:
        return None
    shape = f"{NAMESPACE}/<group_id>/<message_type>/<edge_node_id>[/<device_id>]"
    if levels[0] != NAMESPACE or len(levels) not in (4, 5) or not all(levels):
        raise PayloadError("bad_topic", f"topic {topic[:200]!r} is not a Sparkplug B topic {shape}")
    kind = levels[2]
    expected = NODE_TYPES if len(levels) == 4 else DEVICE_TYPES
    if kind not in expected:
        known = "node" if kind in NODE_TYPES else "device" if kind in DEVICE_TYPES else "no"
        raise PayloadError("bad_topic", f"topic {topic[:200]!r}: {kind[:20]!r} is {known} Sparkplug message type "
                                        f"for a topic of {len(levels)} levels ({shape})")  # fmt: skip
    return SparkplugTopic(levels[1], kind, levels[3], levels[4] if len(levels) == 5 else None)


def require_protobuf() -> None:
    """Raise ``ModuleNotFoundError`` (name ``google.protobuf``) when the [sparkplug] extra is not installed."""
    payload_class()


@functools.cache
def payload_class() -> Any:
    """The protobuf message class of a Sparkplug B ``Payload``, built in code from the published field numbers.

    Only what the daemon reads is declared; everything else is skipped by the parser as unknown fields. The
    Metric oneof's message-typed values (DataSet, Template, extension) are declared as bytes: the same wire
    format (length-delimited), read as opaque.
    """
    try:
        from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
    except ImportError:
        raise ModuleNotFoundError(f"No module named {PROTOBUF!r}", name=PROTOBUF) from None
    fd = descriptor_pb2.FieldDescriptorProto
    proto = descriptor_pb2.FileDescriptorProto(name="trep_edge/sparkplug_b.proto", package="trep_edge.sparkplug",
                                               syntax="proto2")  # fmt: skip
    payload = proto.message_type.add(name="Payload")
    metric = payload.nested_type.add(name="Metric")
    metric.oneof_decl.add(name="value")
    # sparkplug_b.proto, message Payload.Metric: name 1, alias 2, timestamp 3, datatype 4, is_historical 5,
    # is_transient 6, is_null 7 (metadata 8, properties 9: not declared); oneof value: int_value 10 (uint32),
    # long_value 11 (uint64), float_value 12, double_value 13, boolean_value 14, string_value 15, bytes_value 16,
    # dataset_value 17, template_value 18, extension_value 19.
    metric_fields = [
        ("name", 1, fd.TYPE_STRING), ("alias", 2, fd.TYPE_UINT64), ("timestamp", 3, fd.TYPE_UINT64),
        ("datatype", 4, fd.TYPE_UINT32), ("is_historical", 5, fd.TYPE_BOOL), ("is_transient", 6, fd.TYPE_BOOL),
        ("is_null", 7, fd.TYPE_BOOL),
    ]  # fmt: skip
    value_fields = [
        ("int_value", 10, fd.TYPE_UINT32), ("long_value", 11, fd.TYPE_UINT64), ("float_value", 12, fd.TYPE_FLOAT),
        ("double_value", 13, fd.TYPE_DOUBLE), ("boolean_value", 14, fd.TYPE_BOOL),
        ("string_value", 15, fd.TYPE_STRING), ("bytes_value", 16, fd.TYPE_BYTES),
        ("dataset_value", 17, fd.TYPE_BYTES), ("template_value", 18, fd.TYPE_BYTES),
        ("extension_value", 19, fd.TYPE_BYTES),
    ]  # fmt: skip
    for name, number, kind in metric_fields:
        metric.field.add(name=name, number=number, type=kind, label=fd.LABEL_OPTIONAL)
    for name, number, kind in value_fields:
        metric.field.add(name=name, number=number, type=kind, label=fd.LABEL_OPTIONAL, oneof_index=0)
    # sparkplug_b.proto, message Payload: timestamp 1, metrics 2 (repeated Metric), seq 3, uuid 4, body 5.
    payload.field.add(name="timestamp", number=1, type=fd.TYPE_UINT64, label=fd.LABEL_OPTIONAL)
    payload.field.add(name="metrics", number=2, type=fd.TYPE_MESSAGE, label=fd.LABEL_REPEATED,
                      type_name=".trep_edge.sparkplug.Payload.Metric")  # fmt: skip
    payload.field.add(name="seq", number=3, type=fd.TYPE_UINT64, label=fd.LABEL_OPTIONAL)
    payload.field.add(name="uuid", number=4, type=fd.TYPE_STRING, label=fd.LABEL_OPTIONAL)
    payload.field.add(name="body", number=5, type=fd.TYPE_BYTES, label=fd.LABEL_OPTIONAL)
    pool = descriptor_pool.DescriptorPool()  # private: no clash with generated Tahu code in the same process
    pool.Add(proto)
    descriptor = pool.FindMessageTypeByName("trep_edge.sparkplug.Payload")
    if hasattr(message_factory, "GetMessageClass"):  # protobuf >= 4.22
        return message_factory.GetMessageClass(descriptor)
    return message_factory.MessageFactory(pool).GetPrototype(descriptor)  # pragma: no cover - protobuf 4.21


def _text(value: Any, what: str) -> str:
    """A proto2 string field: the pure-Python and upb backends hand invalid UTF-8 back as bytes."""
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            raise PayloadError("bad_protobuf", f"{what} is not UTF-8") from None
    return value


def _number(metric: Any, kind: str, datatype: int) -> float | int:
    """A numeric metric's value, signed integers decoded from their two's complement."""
    value = getattr(metric, kind)
    if kind == "boolean_value":
        return 1 if value else 0
    bits = SIGNED_BITS.get(datatype)
    if bits is None or kind not in ("int_value", "long_value"):
        return value
    wire = 32 if kind == "int_value" else 64
    if value >= 1 << (wire - 1):  # sign-extended to the field's width (Tahu's Java and C clients)
        return value - (1 << wire)
    if bits < wire and value >= 1 << (bits - 1):  # two's complement of the type's own width (some encoders)
        return value - (1 << bits)
    return value


def rebirth_payload(timestamp_ms: int) -> bytes:
    """An NCMD payload asking for a rebirth: ``Node Control/Rebirth`` = true (Boolean), stamped, without ``seq``."""
    payload = payload_class()(timestamp=timestamp_ms)
    payload.metrics.add(name=REBIRTH_METRIC, datatype=BOOLEAN, boolean_value=True, timestamp=timestamp_ms)
    return payload.SerializeToString()


def declare_sparkplug_metrics(metrics: Metrics) -> None:
    """Register the session counters on the daemon's registry (at 0, so an alert on rate() sees the first)."""
    metrics.declare("trep_edge_sparkplug_rebirth_requests_total", "counter",
                    "Sparkplug NCMD rebirth requests sent to edge nodes, by reason")  # fmt: skip
    metrics.zero("trep_edge_sparkplug_rebirth_requests_total", "reason", REBIRTH_REASONS)
    metrics.declare("trep_edge_sparkplug_seq_gaps_total", "counter",
                    "Sparkplug messages whose seq was not their edge node's last one + 1")  # fmt: skip


def _bd_seq(payload: Any) -> int | None:
    """The payload's ``bdSeq`` metric (NBIRTH, NDEATH), None without one."""
    for metric in payload.metrics:
        if metric.HasField("name") and metric.name == BD_SEQ and metric.WhichOneof("value") in NUMERIC_FIELDS:
            return int(getattr(metric, metric.WhichOneof("value")))
    return None


class SparkplugDecoder:
    """Decodes Sparkplug B messages, remembering each node's and device's last BIRTH and each node's session (bounded,
    least recently used forgotten first). One per daemon: aliases of a BIRTH resolve the DATA messages after it, and
    ``take`` after each message hands over the deaths, gaps and rebirth requests it brought."""

    def __init__(self, max_tables: int = MAX_TABLES, max_entries: int = MAX_ENTRIES) -> None:
        if max_tables < 1 or max_entries < 1:
            raise ValueError(f"max_tables and max_entries must be >= 1, got {max_tables}, {max_entries}")
        self.max_tables = max_tables
        self.max_entries = max_entries
        self._tables: OrderedDict[str, _Table] = OrderedDict()
        self._entries = 0
        self._nodes: OrderedDict[str, _Node] = OrderedDict()
        self._wanted: dict[str, str] = {}  # node → why it should rebirth, until the next take
        self._deaths: list[Death] = []
        self._gaps: list[str] = []

    def __len__(self) -> int:
        return len(self._tables)

    @property
    def entries(self) -> int:
        """Metrics held in all tables."""
        return self._entries

    def decode(self, topic: str, data: bytes) -> Decoded:
        """One message: samples of a DATA message, nothing for the others; raise ``PayloadError`` for a bad topic,
        a payload that is not a Sparkplug protobuf, or a BIRTH with one alias twice. What it says of its node's
        session (a death, a gap, a rebirth to ask for) waits for ``take``."""
        parsed = parse_topic(topic)
        if parsed is None or parsed.message_type in ("NCMD", "DCMD"):
            return Decoded(None)
        if parsed.message_type in ("NDEATH", "DDEATH"):
            self._death(parsed, self._parse_death(data))
            return Decoded(None)
        payload = self._parse(data)
        self._session(parsed, payload)
        if parsed.message_type in BIRTH_TYPES:
            self._birth(parsed.stream, payload)
            return Decoded(None)
        return Decoded(parsed.stream, tuple(self._data(parsed, payload)))

    def take(self, now: float, interval: float) -> SessionEvents:
        """The session events of the messages decoded since the last call, with the rebirth requests due: at most
        one per node per ``interval`` seconds of ``now``'s clock (a monotonic one), none when ``interval`` is 0."""
        if not (self._wanted or self._deaths or self._gaps):
            return NO_EVENTS
        rebirths = []
        for key, reason in self._wanted.items():
            node = self._nodes.get(key)
            if interval > 0 and node is not None and now - node.asked >= interval:
                node.asked = now
                group, name = key.split("/", 1)  # topic levels: neither holds a "/"
                rebirths.append(Rebirth(key, reason, f"{NAMESPACE}/{group}/NCMD/{name}",
                                        rebirth_payload(int(time.time() * 1000))))  # fmt: skip
        events = SessionEvents(tuple(rebirths), tuple(self._deaths), tuple(self._gaps))
        self._wanted.clear()
        self._deaths.clear()
        self._gaps.clear()
        return events

    def _node(self, parsed: SparkplugTopic) -> tuple[str, _Node]:
        key = parsed.node_stream
        node = self._nodes.get(key)
        if node is None:
            node = self._nodes[key] = _Node()
            if len(self._nodes) > self.max_tables:
                self._nodes.popitem(last=False)
        else:
            self._nodes.move_to_end(key)
        return key, node

    def _want(self, node: str, reason: str) -> None:
        self._wanted.setdefault(node, reason)

    def _session(self, parsed: SparkplugTopic, payload: Any) -> None:
        """Follow the node's ``seq`` and BIRTHs: a gap or a message of an unborn node wants a rebirth."""
        key, node = self._node(parsed)
        seq = payload.seq % SEQ_MODULUS if payload.HasField("seq") else None
        if parsed.message_type == "NBIRTH":
            node.born, node.bd_seq, node.seq = True, _bd_seq(payload), seq
            return
        if not node.born:
            self._want(key, "no_birth")
        elif seq is not None and node.seq is not None and seq != (node.seq + 1) % SEQ_MODULUS:
            self._gaps.append(key)
            self._want(key, "seq_gap")
        if seq is not None:
            node.seq = seq

    def _parse_death(self, data: bytes) -> Any:
        """A death's payload, None when it does not parse: the topic alone says who died."""
        try:
            return self._parse(data)
        except PayloadError:
            return None

    def _death(self, parsed: SparkplugTopic, payload: Any) -> None:
        """Drop the dead node's (and its devices') or device's tables and report it, unless it is a late Will."""
        if parsed.message_type == "DDEATH":
            if payload is not None:
                self._session(parsed, payload)
            self._forget(parsed.stream)
            self._deaths.append(Death(parsed.stream, "DDEATH"))
            return
        key, node = self._node(parsed)
        bd_seq = _bd_seq(payload) if payload is not None else None
        if node.born and None not in (bd_seq, node.bd_seq) and bd_seq != node.bd_seq:
            return  # the Will of an earlier connection, delivered after the node's new NBIRTH
        node.born, node.seq = False, None
        death = Death(key, "NDEATH")
        for stream in [s for s in self._tables if death.covers(s)]:
            self._forget(stream)
        self._deaths.append(death)

    @staticmethod
    def _parse(data: bytes) -> Any:
        message = payload_class()()
        try:
            message.ParseFromString(data)
        except Exception as exc:  # DecodeError, RecursionError, ...: any of them means "not this schema"
            raise PayloadError("bad_protobuf", f"the payload is not a Sparkplug B protobuf: {exc}") from None
        if data and not message.ListFields():
            raise PayloadError("bad_protobuf", "the payload is protobuf-shaped but holds no Sparkplug B field")
        return message

    def _birth(self, stream: str, payload: Any) -> None:
        table = _Table()
        for i, metric in enumerate(payload.metrics):
            if not metric.HasField("name"):
                continue  # a BIRTH metric must be named; one without a name defines nothing
            name = _text(metric.name, f"metric {i}'s name")
            datatype = metric.datatype
            table.types[name] = datatype
            if metric.HasField("alias"):
                known = table.aliases.get(metric.alias)
                if known is not None and known[0] != name:
                    self._forget(stream)
                    raise PayloadError("duplicate_key", f"BIRTH of {stream!r} gives alias {metric.alias} to both "
                                                        f"{known[0][:40]!r} and {name[:40]!r}")  # fmt: skip
                table.aliases[metric.alias] = (name, datatype)
        self._forget(stream)
        self._tables[stream] = table
        self._entries += len(table)
        while len(self._tables) > 1 and (len(self._tables) > self.max_tables or self._entries > self.max_entries):
            self._entries -= len(self._tables.popitem(last=False)[1])

    def _forget(self, stream: str) -> None:
        old = self._tables.pop(stream, None)
        if old is not None:
            self._entries -= len(old)

    def _data(self, parsed: SparkplugTopic, payload: Any) -> list[Sample]:
        stream = parsed.stream
        table = self._tables.get(stream)
        if table is not None:
            self._tables.move_to_end(stream)
        else:  # a device's DBIRTH (or the node's NBIRTH) not seen: its aliases are unknown until a rebirth
            self._want(parsed.node_stream, "no_birth")
        default_ms = payload.timestamp if payload.HasField("timestamp") else None
        samples = []
        for i, metric in enumerate(payload.metrics):
            ms = metric.timestamp if metric.HasField("timestamp") else default_ms
            if metric.HasField("name"):
                name = _text(metric.name, f"metric {i}'s name")
                datatype = metric.datatype or (table.types.get(name, 0) if table else 0)
            elif metric.HasField("alias"):
                entry = table.aliases.get(metric.alias) if table else None
                if entry is None:
                    why = "no BIRTH seen for it" if table is None else "not in its last BIRTH"
                    error = PayloadError("unknown_alias", f"metric alias {metric.alias} of {stream!r}: {why} (a "
                                                          "BIRTH defines aliases; DATA before it cannot be read)")
                    samples.append(Sample(i, "", None, ms, error))
                    self._want(parsed.node_stream, "unknown_alias")
                    continue
                name, datatype = entry[0], metric.datatype or entry[1]
            else:
                samples.append(Sample(i, "", None, ms, PayloadError("missing_field", "a metric has no name or alias")))
                continue
            kind = metric.WhichOneof("value")
            if datatype not in NUMERIC_TYPES and (datatype or kind not in NUMERIC_FIELDS):
                continue  # text, bytes, datasets, templates, and nulls of unknown type: not a value to score
            if metric.is_null or kind is None:
                samples.append(Sample(i, name, None, ms))
            elif kind in NUMERIC_FIELDS:
                samples.append(Sample(i, name, _number(metric, kind, datatype), ms))
            else:
                error = PayloadError("wrong_type", f"metric {name[:40]!r} of numeric datatype {datatype} carries a "
                                                   f"{kind}")  # fmt: skip
                samples.append(Sample(i, name, None, ms, error))
        return samples
