"""Sparkplug B input (``[input] format = "sparkplug"``): topics, the payload schema, and BIRTH alias tables.

Sparkplug B (Eclipse Tahu, https://sparkplug.eclipse.org) is what many plant MQTT feeds speak: topics
``spBv1.0/<group_id>/<message_type>/<edge_node_id>[/<device_id>]`` and protobuf payloads
(``org.eclipse.tahu.protobuf.Payload``). This module turns one message into numeric samples; ``runtime/payloads.py``
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
  BIRTH of the same node or device; an alias without one is ``unknown_alias`` (the daemon never asks a node to
  rebirth: it only listens). Numeric metrics (Int8..UInt64, Float, Double, Boolean as 0/1) are values, ``is_null``
  ones missing (NaN); String, Text, UUID, DateTime, Bytes, File, DataSet and Template metrics are skipped, neither
  values nor errors (a model scores numbers; a device's status text is not a fault). Signed integers are read as
  the two's complement Sparkplug sends (``int_value`` is a uint32, ``long_value`` a uint64). Time: the metric's
  ``timestamp``, else the payload's, else the receive time (milliseconds since the epoch); metrics with different
  times become separate readings. ``is_historical`` metrics (store-and-forward backfill) are read like the others:
  the window policy refuses those older than the stream's scored steps as ``late``.
- **NDEATH, DDEATH, NCMD, DCMD** and **STATE** (``spBv1.0/STATE/<host_id>``) give nothing and are not errors: no
  readings, no counters besides ``trep_edge_messages_total``. A dead node's tables stay until its next BIRTH
  replaces them.
- A payload that is not a Sparkplug protobuf is ``bad_protobuf``; a topic under ``spBv1.0`` that is not of the form
  above (or of another namespace) is ``bad_topic``.

State is bounded: at most ``max_tables`` BIRTH tables and ``max_entries`` metrics in all of them; beyond either the
least recently used tables are forgotten (their DATA is ``unknown_alias`` until the next BIRTH). Report by
exception is not filled in: a DATA message's absent metrics are absent from its reading, as for JSON.

protobuf is an optional extra (``pip install 'trep-edge[sparkplug]'``): importing this module never needs it, the
first decode (and ``require_protobuf``, which the config calls for this format) does.
"""
from __future__ import annotations

import functools
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from .payloads import PayloadError

NAMESPACE = "spBv1.0"
PROTOBUF = "google.protobuf"
"""The module the [sparkplug] extra installs (trep_edge/extras.py names the extra from it)."""
NODE_TYPES = frozenset({"NBIRTH", "NDEATH", "NDATA", "NCMD"})
DEVICE_TYPES = frozenset({"DBIRTH", "DDEATH", "DDATA", "DCMD"})
BIRTH_TYPES = frozenset({"NBIRTH", "DBIRTH"})
DATA_TYPES = frozenset({"NDATA", "DDATA"})
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
        parts = [self.group, self.node] + ([self.device] if self.device is not None else [])
        return "/".join(parts)


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


class SparkplugDecoder:
    """Decodes Sparkplug B messages, remembering each node's and device's last BIRTH (bounded, least recently
    used forgotten first). One per daemon: aliases of a BIRTH resolve the DATA messages after it."""

    def __init__(self, max_tables: int = MAX_TABLES, max_entries: int = MAX_ENTRIES) -> None:
        if max_tables < 1 or max_entries < 1:
            raise ValueError(f"max_tables and max_entries must be >= 1, got {max_tables}, {max_entries}")
        self.max_tables = max_tables
        self.max_entries = max_entries
        self._tables: OrderedDict[str, _Table] = OrderedDict()
        self._entries = 0

    def __len__(self) -> int:
        return len(self._tables)

    @property
    def entries(self) -> int:
        """Metrics held in all tables."""
        return self._entries

    def decode(self, topic: str, data: bytes) -> Decoded:
        """One message: samples of a DATA message, nothing for the others; raise ``PayloadError`` for a bad topic,
        a payload that is not a Sparkplug protobuf, or a BIRTH with one alias twice."""
        parsed = parse_topic(topic)
        if parsed is None or parsed.message_type not in BIRTH_TYPES | DATA_TYPES:
            return Decoded(None)
        payload = self._parse(data)
        if parsed.message_type in BIRTH_TYPES:
            self._birth(parsed.stream, payload)
            return Decoded(None)
        return Decoded(parsed.stream, tuple(self._data(parsed.stream, payload)))

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

    def _data(self, stream: str, payload: Any) -> list[Sample]:
        table = self._tables.get(stream)
        if table is not None:
            self._tables.move_to_end(stream)
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
