"""Sensor messages → ``Reading``s: the monitor's documented input schema and its validation.

A message (an MQTT payload) is UTF-8 JSON in one of three shapes, told apart by their structure, or one plain
number when its topic names the channel (shape 4).

1. **One reading**, a JSON object with ``values``::

       {"ts": 1732200000.5, "values": {"HR": 72, "SpO2": 97, "RESP": null}}

   - ``ts``: seconds since the Unix epoch (a number), or an ISO-8601 string with a UTC offset
     (``"2024-11-21T14:40:00.5Z"``, ``"...+01:00"``). Absent or ``null``: the receive time ``now`` is used, so a
     producer without a clock still works, but its readings then carry network and queueing delay. An ISO
     string without an offset is refused (``wrong_type``): a local time taken for UTC would shift by hours.
   - ``values``: channel name → number. ``null`` means *missing* and is accepted (NaN). A channel absent from the
     message is not reported by it (another message for the same time step may carry it).
   - ``stream`` (optional): the stream id, for topics that carry none. When the topic gives a stream too, the two
     must agree (``stream_mismatch``): silently trusting either could file one bed's vitals under another.
2. **A batch**: ``{"readings": [reading, ...]}`` (a batch-level ``"stream"`` is the default of its readings), or a
   top-level array of reading objects (recognised by an element with ``values``).
3. **SenML** (RFC 8428), a top-level array of records::

       [{"bn": "urn:dev:bed12:", "bt": 1732200000, "n": "HR", "v": 72}, {"n": "SpO2", "v": 97, "t": 0}]

   - Base fields ``bn``, ``bt``, ``bv`` apply to their record and all later ones until changed (``bu``/``u``,
     units, are not checked: the model card has none). ``bver`` above 10 and any field ending in ``_``
     ("must understand") are refused, as the RFC requires.
   - Only numeric values ``v`` (plus ``bv``); ``vs``, ``vb``, ``vd`` are refused (``senml_invalid``).
   - Time = ``bt + t``; values below 2**28 are relative to ``now`` (RFC 8428 §4.5.3: 0 is "now", negative is the
     past), larger ones are absolute epoch seconds.
   - Name = ``bn + n``. Its channel is ``n`` when ``n`` is a channel name, else the name's last segment after
     ``:`` or ``/`` (``urn:dev:bed12:HR`` → ``HR``). Without a topic stream, the stream is the rest of the name
     with trailing separators removed (``urn:dev:bed12``).
   - Records of the same stream and resolved time form one reading.
4. **One number per topic**, when the topic template has a ``{channel}`` level (``plant/{machine}/{channel}``):
   the payload is the channel's value as JSON (``41.7``, ``-3``, ``null`` or ``NaN`` for missing), timestamped
   with the receive time; values of one stream that arrive within one period merge into one time step. Anything
   else is ``wrong_type`` (an object or array on such a topic is a producer using the wrong topic).

5. **InfluxDB line protocol** (``[input] format = "influx"``, what Telegraf's MQTT output and many gateways send),
   one reading per line::

       machine,line=l3,unit=press2 oil_temp=41.7,vibration=0.03 1732200000000000000

   Fields are the channels; integers (``12i``, ``12u``) and floats are values, strings and booleans are
   ``wrong_type``. The timestamp (optional: receive time) is in ``[input] influx_precision`` units (ns by default).
   The stream is the topic's, else the line's series key: measurement and tags as written (``machine,line=l3,
   unit=press2``). A line that does not parse is ``bad_line``; blank lines and ``#`` comments are skipped. The
   format is a setting, not guessed: a JSON number and a one-field line can look alike.

6. **Sparkplug B** (``[input] format = "sparkplug"``, Eclipse Tahu protobuf on ``spBv1.0/...`` topics): the stream
   is ``group_id/edge_node_id[/device_id]`` from the topic, NBIRTH/DBIRTH messages define metric aliases, each
   NDATA/DDATA gives one reading per metric timestamp (milliseconds; else the payload's, else the receive time),
   its numeric metrics the channels (booleans 0/1, nulls missing; text, bytes, datasets and templates skipped).
   Deaths, commands and STATE give nothing. A payload that is not such a protobuf is ``bad_protobuf``, a topic not
   of that form ``bad_topic``, an alias no BIRTH defined ``unknown_alias``. ``runtime/trep_edge/runtime/service/sparkplug.py`` has the rules.

Validation of every value (``values`` entries and SenML ``v``): a number is accepted; ``null`` is missing (NaN);
the non-standard JSON literal ``NaN`` is also read as missing, because that is what common float serialisers
(Python's ``json``) emit for a missing value; ``Infinity`` / ``-Infinity`` and numbers too large for a double
are ``non_finite`` (an integer literal longer than Python's 4,300-digit conversion limit too: it is a number, just
an absurd one); strings are ``wrong_type`` (``"72"`` is a producer bug to fix, not to guess at) except
spellings of non-finite numbers (``"NaN"``, ``"inf"``), which are ``non_finite``; booleans, arrays and objects are
``wrong_type``. Channels not in the model card are ``unknown_channel`` with ``unknown_channels="reject"``, or
dropped with ``"ignore"``; a reading left without any known channel is ``empty``. A channel-independent model
(``channels=None``) knows every channel a stream sends, as long as its name is 1..128 printable characters (the
rules of stream ids below); other names are unknown channels. ``rename`` (``[input] rename``) maps the names a
sensor sends to the model's channel names before any of this (``{"O2Sat": "SpO2"}``). A timestamp more than
``max_skew`` seconds from ``now`` (either way) is ``absurd_timestamp`` (milliseconds sent as seconds, a device
clock at 1970).

Stream ids, whatever their source (topic level, ``stream`` field, SenML name): 1..128 printable characters
(``str.isprintable``: no control, format (bidi overrides, zero-width), surrogate, private-use, separator or
noncharacter code points, which MQTT topic names may not carry or which spoof other ids on dashboards), without the
MQTT wildcards ``+`` and ``#``. Anything else is ``bad_stream_id`` (``wrong_type`` when not a string).

An object with the same key twice (``{"HR": 70, "HR": 120}``) is ``duplicate_key``, the whole message: JSON leaves
the meaning open and parsers disagree on which copy wins, so guessing could score a value the producer did not mean.

Rejection is per reading: a reading is accepted whole or not at all, and one bad reading does not poison its
batch. ``parse_payload_lenient`` returns the good readings and one ``PayloadError`` per rejected reading (or one for
a message that cannot be read at all); the daemon uses it, counting errors by ``kind``. ``parse_payload`` is the
all-or-nothing form: it raises the first error. Neither raises anything but ``PayloadError`` on any input bytes.
"""
from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Sequence

from trep_edge.runtime.core.reading import Reading

if TYPE_CHECKING:
    from trep_edge.runtime.service.sparkplug import SparkplugDecoder

MALFORMED_KINDS = (
    "not_json",
    "not_object",
    "missing_field",
    "wrong_type",
    "non_finite",
    "unknown_channel",
    "absurd_timestamp",
    "too_large",
    "senml_invalid",
    "empty",
    "stream_mismatch",
    "bad_stream_id",
    "duplicate_key",
    "bad_line",
    "bad_protobuf",
    "bad_topic",
    "unknown_alias",
)
"""Every ``PayloadError.kind``, for per-kind counters."""

UNKNOWN_CHANNEL_POLICIES = ("reject", "ignore")
FORMATS = ("json", "influx", "sparkplug")
"""``[input] format``: JSON readings, batches, SenML and plain numbers; InfluxDB line protocol; or Sparkplug B."""
INFLUX_PRECISIONS = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}
_INFLUX_ESCAPE = re.compile(r"\\([,= \\])")
_INFLUX_INTEGER = re.compile(r"[+-]?\d+[iu]")
_INFLUX_BOOLEANS = frozenset({"t", "T", "true", "True", "TRUE", "f", "F", "false", "False", "FALSE"})
SENML_RELATIVE_LIMIT = 2**28
"""SenML times below this are relative to now (RFC 8428 §4.5.3)."""
SENML_VERSION = 10
MAX_STREAM_ID = 128
_NON_FINITE_WORDS = frozenset({"nan", "+nan", "-nan", "inf", "+inf", "-inf", "infinity", "+infinity", "-infinity"})
_WILDCARDS = re.compile(r"[+#]")
_SEPARATORS = re.compile(r"[:/]")


class PayloadError(ValueError):
    """A message or reading that cannot be used; ``kind`` is one of ``MALFORMED_KINDS``.

    ``index`` is the position of the rejected reading (or SenML record) in its message, when there is one.
    """

    def __init__(self, kind: str, message: str, index: int | None = None) -> None:
        if kind not in MALFORMED_KINDS:
            raise ValueError(f"unknown payload error kind {kind!r}: use one of {MALFORMED_KINDS}")
        super().__init__(message if index is None else f"reading {index}: {message}")
        self.kind = kind
        self.index = index


@dataclass(frozen=True)
class _Context:
    topic_stream: str | None
    channels: frozenset[str] | None  # None: any well-formed channel name (a channel-independent model)
    now: float
    max_skew: float
    ignore_unknown: bool
    rename: Mapping[str, str]

    def knows(self, channel: str) -> bool:
        return valid_stream_id(channel) if self.channels is None else channel in self.channels

    def known_names(self) -> str:
        return "any printable name" if self.channels is None else f"the model's {sorted(self.channels)}"


def parse_payload(
    payload: bytes,
    stream: str | None,
    channels: Sequence[str] | None,
    now: float,
    max_bytes: int = 65536,
    max_skew: float = 86400.0,
    unknown_channels: str = "reject",
    rename: Mapping[str, str] | None = None,
    channel: str | None = None,
    format: str = "json",
    influx_precision: str = "ns",
    topic: str | None = None,
    sparkplug: SparkplugDecoder | None = None,
) -> list[Reading]:
    """Parse a message into readings, all or nothing: raise the first ``PayloadError`` (module docstring)."""
    readings, errors = parse_payload_lenient(payload, stream, channels, now, max_bytes, max_skew, unknown_channels,
                                             rename, channel, format, influx_precision, topic, sparkplug)  # fmt: skip
    if errors:
        raise errors[0]
    return readings


def parse_payload_lenient(
    payload: bytes,
    stream: str | None,
    channels: Sequence[str] | None,
    now: float,
    max_bytes: int = 65536,
    max_skew: float = 86400.0,
    unknown_channels: str = "reject",
    rename: Mapping[str, str] | None = None,
    channel: str | None = None,
    format: str = "json",
    influx_precision: str = "ns",
    topic: str | None = None,
    sparkplug: SparkplugDecoder | None = None,
) -> tuple[list[Reading], list[PayloadError]]:
    """Parse a message into its good readings and one ``PayloadError`` per rejected reading; never raises on data.

    ``stream`` is the stream id from the topic (None when the topic carries none), ``channels`` the model card's
    channel names (None for a channel-independent model: any well-formed name), ``now`` the receive time in epoch
    seconds, ``rename`` sent name → model channel, ``channel`` the channel a ``{channel}`` topic level names (the
    payload is then one number), ``format`` one of ``FORMATS`` with ``influx_precision`` its timestamp unit.
    Sparkplug B needs the message's ``topic`` (its stream) and the ``sparkplug`` decoder holding the aliases of
    earlier BIRTH messages (without one, a fresh decoder knows none).
    """
    if format not in FORMATS or influx_precision not in INFLUX_PRECISIONS:
        raise ValueError(f"format must be one of {FORMATS} and influx_precision one of {sorted(INFLUX_PRECISIONS)}, "
                         f"got {format!r}, {influx_precision!r}")
    if unknown_channels not in UNKNOWN_CHANNEL_POLICIES:
        raise ValueError(f"unknown_channels must be one of {UNKNOWN_CHANNEL_POLICIES}, got {unknown_channels!r}")
    if not math.isfinite(now):
        raise ValueError(f"now must be a finite epoch time in seconds, got {now}")
    known = None if channels is None else frozenset(channels)
    ctx = _Context(stream, known, float(now), float(max_skew), unknown_channels == "ignore", rename or {})
    try:
        if format == "influx":
            return _influx(_text(payload, max_bytes, "bad_line"), ctx, INFLUX_PRECISIONS[influx_precision])
        if format == "sparkplug":
            return _sparkplug(_bytes(payload, max_bytes), topic, sparkplug, ctx)
        document = _decode(payload, max_bytes)
        if stream is not None:
            _check_stream_id(stream, "topic stream")
        if channel is not None:
            return [_topic_value(document, channel, ctx)], []
        if isinstance(document, dict):
            if "readings" in document:
                items = document["readings"]
                if not isinstance(items, list):
                    raise PayloadError("wrong_type", f"'readings' must be an array, got {_json_type(items)}")
                return _reading_batch(items, document.get("stream"), ctx)
            return [_reading(document, None, ctx)], []
        if isinstance(document, list):
            if not document:
                raise PayloadError("empty", "the message is an empty array")
            if any(isinstance(item, dict) and "values" in item for item in document):
                return _reading_batch(document, None, ctx)
            return _senml(document, ctx)
        raise PayloadError("not_object", f"expected a JSON object or array, got {_json_type(document)}")
    except PayloadError as exc:
        return [], [exc]


def channel_renames(entries: Iterable[str]) -> dict[str, str]:
    """``["O2Sat=SpO2", "Resp=RESP"]`` → ``{"O2Sat": "SpO2", "Resp": "RESP"}`` (sent name → model channel)."""
    out: dict[str, str] = {}
    for entry in entries:
        old, sep, new = (part.strip() for part in entry.partition("="))
        if not sep or not old or not new:
            raise ValueError(f"rename entry {entry.strip()!r} must look like SENT_NAME=CHANNEL")
        out[old] = new
    return out


def disconnected_codes(entries: Iterable[str]) -> dict[str, float]:
    """``["HR=0", "*=null"]`` → ``{"HR": 0.0, "*": nan}``: per channel (``*`` = any other), the value its sensor sends
    when it is not connected; ``null`` says a missing value means that."""
    out: dict[str, float] = {}
    for entry in entries:
        channel, sep, code = (part.strip() for part in entry.partition("="))
        try:
            value = math.nan if code == "null" else float(code)
        except ValueError:
            value = math.inf
        if not sep or not channel or math.isinf(value):
            raise ValueError(f"disconnected entry {entry.strip()!r} must look like CHANNEL=NUMBER or CHANNEL=null "
                             "(CHANNEL * for every channel)")
        out[channel] = value
    return out


def mark_disconnected(reading: Reading, codes: Mapping[str, float]) -> Reading:
    """The reading with each value equal to its channel's disconnected code (``disconnected_codes``) filed as
    missing; ``disconnected`` when that leaves every value missing. A reading without a code stays as it is: a
    missing value alone (an hour without charted vitals) says nothing about the sensor unless ``null`` is the code."""
    if not codes:
        return reading
    values, coded = {}, False
    for channel, value in reading.values.items():
        code = codes.get(channel, codes.get("*"))
        hit = code is not None and (value == code or (code != code and value != value))
        coded |= hit
        values[channel] = math.nan if hit else value
    if not coded:
        return reading
    return Reading(reading.stream, reading.timestamp, values, all(v != v for v in values.values()))


def _bytes(payload: bytes, max_bytes: int) -> bytes:
    """The message's bytes within the size limit."""
    if isinstance(payload, str):
        payload = payload.encode("utf-8")
    if not isinstance(payload, (bytes, bytearray, memoryview)):
        raise TypeError(f"payload must be bytes, got {type(payload).__name__}")
    data = bytes(payload)
    if len(data) > max_bytes:
        raise PayloadError("too_large", f"message of {len(data)} bytes exceeds the limit of {max_bytes}")
    return data


def _text(payload: bytes, max_bytes: int, unreadable: str = "not_json") -> str:
    """The message as UTF-8 text within the size limit; bytes that are not UTF-8 are ``unreadable``."""
    data = _bytes(payload, max_bytes)
    if not data.strip():
        raise PayloadError("empty", "the message is empty")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise PayloadError(unreadable, f"the message is not UTF-8 text: {exc.reason} at byte {exc.start}") from None


def _decode(payload: bytes, max_bytes: int) -> Any:
    text = _text(payload, max_bytes)
    try:
        return json.loads(text, parse_constant=float, parse_int=_integer, object_pairs_hook=_unique_keys)
    except PayloadError:
        raise
    except RecursionError:
        raise PayloadError("not_json", "the message nests arrays/objects too deeply") from None
    except ValueError as exc:
        raise PayloadError("not_json", f"the message is not JSON: {exc}") from None


def decode_json(payload: bytes, max_bytes: int) -> Any:
    """A JSON message within the readings' limits (size, UTF-8, nesting, unique keys); PayloadError otherwise."""
    return _decode(payload, max_bytes)


def _integer(text: str) -> int | float:
    """An integer literal; one beyond ``int``'s digit limit becomes an infinite float, refused as ``non_finite``."""
    return int(text) if len(text) <= 4000 else math.inf


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) < len(pairs):
        seen: set[str] = set()
        twice = next(key for key, _ in pairs if key in seen or seen.add(key))
        raise PayloadError("duplicate_key", f"the key {twice[:40]!r} appears twice in one object")
    return obj


def _json_type(value: Any) -> str:
    names = {dict: "an object", list: "an array", str: "a string", bool: "a boolean", type(None): "null"}
    return names.get(type(value), "a number")


def valid_stream_id(value: str) -> bool:
    """True when ``value`` is an allowed stream id (module docstring, "Stream ids")."""
    # isprintable() refuses C0/C1 controls, format characters (bidi overrides, zero-width), surrogates,
    # noncharacters (U+FDD0.., U+FFFE) and separators other than space: what MQTT topics may not carry or
    # what could spoof another id on a dashboard.
    return 0 < len(value) <= MAX_STREAM_ID and value.isprintable() and not _WILDCARDS.search(value)


def escape_stream_id(value: Any) -> str:
    """A printable ASCII rendering of a refused id, safe to log and dead-letter."""
    return ascii(value if isinstance(value, str) else str(value))[:2 * MAX_STREAM_ID]


def _check_stream_id(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise PayloadError("wrong_type", f"{what} must be a string, got {_json_type(value)}")
    if not valid_stream_id(value):
        raise PayloadError(
            "bad_stream_id",
            f"{what} {escape_stream_id(value[:MAX_STREAM_ID + 1])} must be 1..{MAX_STREAM_ID} printable characters "
            "without + or # (no control, format, bidi, zero-width, surrogate or noncharacter code points)",
        )
    return value


def _resolve_stream(ctx: _Context, payload_stream: Any) -> str:
    if payload_stream is not None:
        _check_stream_id(payload_stream, "'stream'")
    if ctx.topic_stream is not None:
        if payload_stream is not None and payload_stream != ctx.topic_stream:
            raise PayloadError(
                "stream_mismatch", f"'stream' {payload_stream!r} differs from the topic's stream {ctx.topic_stream!r}"
            )
        return ctx.topic_stream
    if payload_stream is None:
        raise PayloadError("missing_field", "no stream: the topic names none and the reading has no 'stream'")
    return payload_stream


def _finite(value: Any, what: str) -> float:
    """A JSON number as a finite float (timestamps and SenML times)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise PayloadError("wrong_type", f"{what} must be a number, got {_json_type(value)}")
    try:
        out = float(value)
    except OverflowError:
        out = math.inf
    if not math.isfinite(out):
        raise PayloadError("non_finite", f"{what} must be finite, got {value}")
    return out


def _value(value: Any, what: str) -> float:
    """A reading value: a finite float, or NaN for missing (``null`` or the ``NaN`` literal)."""
    if value is None:
        return math.nan
    if isinstance(value, str):
        if value.strip().lower() in _NON_FINITE_WORDS:
            raise PayloadError("non_finite", f"{what} is the string {value!r}: send a number, or null for missing")
        raise PayloadError("wrong_type", f"{what} must be a number or null, got the string {value[:40]!r}")
    if isinstance(value, float) and math.isnan(value):
        return math.nan
    return _finite(value, what)


def _check_skew(ts: float, ctx: _Context) -> float:
    if abs(ts - ctx.now) > ctx.max_skew:
        hint = " (milliseconds sent as seconds?)" if ts > 100 * max(ctx.now, 1.0) else ""
        raise PayloadError(
            "absurd_timestamp",
            f"timestamp {ts} is {ts - ctx.now:+.0f} s from now ({ctx.now}), beyond the allowed {ctx.max_skew} s{hint}",
        )
    return ts


def _timestamp(value: Any, ctx: _Context) -> float:
    if value is None:
        return ctx.now
    if isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value.strip())
        except ValueError:
            raise PayloadError("wrong_type", f"'ts' {value[:40]!r} is not an ISO-8601 time") from None
        if parsed.tzinfo is None:
            raise PayloadError("wrong_type", f"'ts' {value[:40]!r} has no UTC offset: append Z or +hh:mm")
        try:
            ts = parsed.timestamp()
        except (OverflowError, OSError, ValueError):
            raise PayloadError("absurd_timestamp", f"'ts' {value[:40]!r} is out of range") from None
    else:
        ts = _finite(value, "'ts'")
    return _check_skew(ts, ctx)


def _known_values(values: dict[str, float], unknown: list[str], ctx: _Context) -> dict[str, float]:
    """The reading's known channels, or the error its unknown or missing channels deserve."""
    if unknown and not ctx.ignore_unknown:
        names = ", ".join(repr(n[:40]) for n in unknown[:5])
        raise PayloadError("unknown_channel", f"channel(s) {names} not in {ctx.known_names()}")
    if not values:
        dropped = f" (ignored unknown channels {unknown[:5]})" if unknown else ""
        raise PayloadError("empty", f"the reading has no value of a known channel{dropped}")
    return values


def _reading(obj: Any, default_stream: Any, ctx: _Context) -> Reading:
    if not isinstance(obj, dict):
        raise PayloadError("not_object", f"a reading must be a JSON object, got {_json_type(obj)}")
    if "values" not in obj:
        raise PayloadError("missing_field", "a reading needs 'values' (an object of channel: number)")
    stream = _resolve_stream(ctx, obj.get("stream", default_stream))
    raw = obj["values"]
    if not isinstance(raw, dict):
        raise PayloadError("wrong_type", f"'values' must be an object of channel: number, got {_json_type(raw)}")
    values = _channel_values(raw.items(), ctx, lambda value, name: _value(value, f"values[{name!r}]"))
    return Reading(stream, _timestamp(obj.get("ts"), ctx), values)


def _channel_values(
    pairs: Iterable[tuple[str, Any]], ctx: _Context, parse: Callable[[Any, str], float]
) -> dict[str, float]:
    """Sent (name, raw value) pairs → the reading's values: names renamed, known ones parsed, unknown ones refused
    or dropped by the policy."""
    values: dict[str, float] = {}
    unknown: list[str] = []
    for name, raw in pairs:
        name = ctx.rename.get(name, name)
        if ctx.knows(name):
            values[name] = parse(raw, name)
        else:
            unknown.append(name)
    return _known_values(values, unknown, ctx)


def _topic_value(document: Any, channel: str, ctx: _Context) -> Reading:
    """Shape 4: one plain number on a topic that names its channel."""
    if isinstance(document, (dict, list)):
        raise PayloadError("wrong_type", f"a {{channel}} topic carries one number, got {_json_type(document)}")
    value = _value(document, f"channel {channel[:40]!r}")
    name = ctx.rename.get(channel, channel)
    known = ctx.knows(name)
    values = _known_values({name: value} if known else {}, [] if known else [name], ctx)
    return Reading(_resolve_stream(ctx, None), ctx.now, values)


def _reading_batch(items: list, default_stream: Any, ctx: _Context) -> tuple[list[Reading], list[PayloadError]]:
    if not items:
        raise PayloadError("empty", "the batch has no readings")
    readings, errors = [], []
    for i, item in enumerate(items):
        try:
            readings.append(_reading(item, default_stream, ctx))
        except PayloadError as exc:
            errors.append(PayloadError(exc.kind, str(exc), i))
    return readings, errors


def _senml_channel(name: str, relative: str, ctx: _Context) -> tuple[str, str]:
    """(channel, stream prefix) of a SenML record; the channel may be unknown."""
    if relative and ctx.channels is not None and relative in ctx.channels:
        channel = relative
    else:
        channel = _SEPARATORS.split(name)[-1]
    return channel, name[: len(name) - len(channel)].rstrip(":/")


def _senml(records: list, ctx: _Context) -> tuple[list[Reading], list[PayloadError]]:
    base_name, base_time, base_value = "", 0.0, 0.0
    groups: dict[tuple[str, float], dict[str, float]] = {}
    failed: dict[tuple[str, float], PayloadError] = {}
    errors: list[PayloadError] = []
    for i, record in enumerate(records):
        try:
            if not isinstance(record, dict):
                raise PayloadError("senml_invalid", f"a SenML record must be an object, got {_json_type(record)}")
            must = [k for k in record if isinstance(k, str) and k.endswith("_")]
            if must:
                raise PayloadError("senml_invalid", f"must-understand field(s) {must[:3]} are not supported")
            if "bver" in record:
                version = record["bver"]
                if isinstance(version, bool) or not isinstance(version, int) or not 0 < version <= SENML_VERSION:
                    raise PayloadError("senml_invalid", f"bver {version!r} is not a version up to {SENML_VERSION}")
            if "bn" in record:
                if not isinstance(record["bn"], str):
                    raise PayloadError("senml_invalid", f"bn must be a string, got {_json_type(record['bn'])}")
                base_name = record["bn"]
            if "bt" in record:
                base_time = _finite(record["bt"], "bt")
            if "bv" in record:
                base_value = _finite(record["bv"], "bv")
        except PayloadError as exc:
            # Base fields apply to every later record, so none of them can be read correctly either.
            errors.append(PayloadError(exc.kind, f"{exc} (rest of the SenML pack skipped)", i))
            break
        if "n" not in record and "v" not in record and not {"vs", "vb", "vd", "s"} & record.keys():
            continue  # a record of base fields only
        try:
            relative = record.get("n", "")
            if not isinstance(relative, str):
                raise PayloadError("senml_invalid", f"n must be a string, got {_json_type(relative)}")
            name = base_name + relative
            if not name:
                raise PayloadError("senml_invalid", "the record has no name (bn + n is empty)")
            if {"vs", "vb", "vd"} & record.keys():
                raise PayloadError("senml_invalid", f"{name!r}: only numeric values (v) are supported, not vs/vb/vd")
            if "v" not in record:
                raise PayloadError("senml_invalid", f"{name!r} has no numeric value v")
            value = _value(record["v"], f"{name!r} v")
            resolved = base_time + _finite(record.get("t", 0.0), "t")
            timestamp = ctx.now + resolved if resolved < SENML_RELATIVE_LIMIT else resolved
            channel, prefix = _senml_channel(name, relative, ctx)
            channel = ctx.rename.get(channel, channel)
            stream = ctx.topic_stream if ctx.topic_stream is not None else prefix
            if not stream:
                raise PayloadError("missing_field", f"no stream: the topic names none and {name!r} has no prefix")
            _check_stream_id(stream, "SenML stream")
        except PayloadError as exc:
            errors.append(PayloadError(exc.kind, str(exc), i))
            continue
        key = (stream, timestamp)
        values = groups.setdefault(key, {})
        try:
            _check_skew(timestamp, ctx)
            if not ctx.knows(channel) and not ctx.ignore_unknown:
                raise PayloadError("unknown_channel",
                                   f"{name!r} maps to channel {channel!r}, not in {ctx.known_names()}")
        except PayloadError as exc:
            failed.setdefault(key, PayloadError(exc.kind, str(exc), i))
            continue
        if ctx.knows(channel):
            total = base_value + value
            if math.isinf(total):
                failed.setdefault(key, PayloadError("non_finite", f"{name!r}: bv + v overflows", i))
                continue
            values[channel] = total
    readings = []
    for key, values in groups.items():
        if key in failed:
            errors.append(failed[key])
        elif not values:
            errors.append(PayloadError("empty", f"no record of a known channel at time {key[1]} (stream {key[0]!r})"))
        else:
            readings.append(Reading(key[0], key[1], values))
    return readings, errors


def _influx_split(text: str, sep: str, limit: int = -1) -> list[str]:
    """Split line-protocol text on ``sep`` outside backslash escapes and double-quoted strings."""
    parts, start, quoted, i = [], 0, False, 0
    while i < len(text):
        ch = text[i]
        if ch == "\\":
            i += 2
            continue
        if ch == '"':
            quoted = not quoted
        elif ch == sep and not quoted and (limit < 0 or len(parts) < limit):
            parts.append(text[start:i])
            start = i + 1
        i += 1
    return parts + [text[start:]]


def _influx_pair(text: str, what: str) -> tuple[str, str]:
    parts = _influx_split(text, "=", 1)
    if len(parts) != 2 or not parts[0] or not parts[1]:
        raise PayloadError("bad_line", f"{what} {text[:40]!r} is not key=value")
    return _INFLUX_ESCAPE.sub(r"\1", parts[0]), parts[1]


def _influx_value(text: str, what: str) -> float:
    if text.startswith('"') or text in _INFLUX_BOOLEANS:
        kind = "string" if text.startswith('"') else "boolean"
        raise PayloadError("wrong_type", f"{what} is a {kind}: only numbers are readings")
    if _INFLUX_INTEGER.fullmatch(text):
        text = text[:-1]
    try:
        value = float(text)
    except ValueError:
        raise PayloadError("bad_line", f"{what} {text[:40]!r} is not a line-protocol number") from None
    if not math.isfinite(value):
        raise PayloadError("non_finite", f"{what} must be finite, got {text[:40]}")
    return value


def _influx_line(line: str, ctx: _Context, unit: float) -> Reading:
    sections = _influx_split(line, " ")
    sections = [part for part in sections if part]  # runs of spaces separate sections too
    if len(sections) not in (2, 3):
        raise PayloadError("bad_line", "a line is 'measurement[,tag=value...] field=value[,...] [timestamp]'")
    series, fields = sections[0], sections[1]
    if ctx.topic_stream is None:
        # The series key as written (measurement and tags) names the stream, as it names the series in InfluxDB.
        stream = _resolve_stream(ctx, series)
    else:
        stream = ctx.topic_stream
    pairs = (_influx_pair(field, "field") for field in _influx_split(fields, ","))  # in order: the first fault wins
    values = _channel_values(pairs, ctx, lambda raw, name: _influx_value(raw, f"field {name[:40]!r}"))
    if len(sections) == 2:
        return Reading(stream, ctx.now, values)
    if not re.fullmatch(r"-?\d{1,19}", sections[2]):
        raise PayloadError("bad_line", f"timestamp {sections[2][:40]!r} must be an integer")
    return Reading(stream, _check_skew(int(sections[2]) * unit, ctx), values)


def _influx(text: str, ctx: _Context, unit: float) -> tuple[list[Reading], list[PayloadError]]:
    """Shape 5: one reading per line of InfluxDB line protocol; a bad line rejects itself only."""
    lines = [(i, line.strip()) for i, line in enumerate(text.splitlines())]
    lines = [(i, line) for i, line in lines if line and not line.startswith("#")]
    if not lines:
        raise PayloadError("empty", "the message holds no line")
    readings, errors = [], []
    for i, line in lines:
        try:
            readings.append(_influx_line(line, ctx, unit))
        except PayloadError as exc:
            errors.append(PayloadError(exc.kind, str(exc), i))
    return readings, errors


def _sparkplug(data: bytes, topic: str | None, decoder: SparkplugDecoder | None,
               ctx: _Context) -> tuple[list[Reading], list[PayloadError]]:  # fmt: skip
    """Shape 6: a Sparkplug B message; one reading per metric timestamp, a bad one rejecting itself only."""
    if topic is None:
        raise ValueError("format 'sparkplug' needs the message's topic: it names the stream")
    if decoder is None:  # the decoder holds the session's aliases: one per input, never made here per message
        raise ValueError("format 'sparkplug' needs a SparkplugDecoder (trep_edge.runtime.service.sparkplug)")
    decoded = decoder.decode(topic, data)
    if decoded.stream is None:  # BIRTH, DEATH, commands, STATE: no readings
        return [], []
    stream = _resolve_stream(ctx, decoded.stream)
    groups: dict[int | None, list] = {}
    for sample in decoded.samples:
        groups.setdefault(sample.timestamp_ms, []).append(sample)
    readings, errors = [], []
    for ms, samples in sorted(groups.items(), key=lambda group: ctx.now if group[0] is None else group[0] / 1000):
        try:
            failed = next((s.error for s in samples if s.error is not None), None)
            if failed is not None:
                raise failed
            seen: set[str] = set()
            twice = next((s.name for s in samples if s.name in seen or seen.add(s.name)), None)
            if twice is not None:
                raise PayloadError("duplicate_key", f"metric {twice[:40]!r} appears twice at time {ms} ms")
            timestamp = ctx.now if ms is None else _check_skew(ms / 1000, ctx)
            values = _channel_values(((s.name, s.value) for s in samples), ctx,
                                     lambda value, name: _value(value, f"metric {name[:40]!r}"))  # fmt: skip
            readings.append(Reading(stream, timestamp, values))
        except PayloadError as exc:
            errors.append(PayloadError(exc.kind, str(exc), samples[0].index))
    return readings, errors
