"""The model file format: one ONNX file holding the main graph, the card and the extra graphs (docs/model-contract.md).

The only module that reads or writes the file's metadata keys:

- ``METADATA_KEY`` (``trep_edge.card``): the card's JSON (``model_card.ModelCard``), also written beside the file.
- ``GRAPH_KEY_PREFIX`` + name (``trep_edge.graph.last_step``, ...): an extra graph, base64 ONNX, listed with the
  sha256 of those bytes in the card's ``graphs``.
- ``STEP_LAYOUT_KEY`` (``trep_edge.step_layout``): inside the ``step`` graph, its convolution layout (JSON).

**Shared weights.** An extra graph is built from the same weights as the main graph. ``share_weights`` (at export)
replaces each of its initializers whose type, shape and bytes equal one of the main graph's (at least
``MIN_SHARED_BYTES``) by a reference: the tensor keeps its name, type and shape, its data is marked external at
``SHARED_LOCATION`` with the main initializer's name and sha256. The file thus stores every weight once. At load,
``SharedWeights`` takes the main graph's initializers as arrays once; ``restore`` fills an extra graph's references
from them (refusing a reference to a weight the main graph lacks or whose bytes changed), and ``options`` hands
all of them to every session through ``SessionOptions.add_initializer``, which onnxruntime uses instead of
deserialising its own copy: one copy of the weights in memory, whatever the number of sessions. (Layouts that
onnxruntime derives at load, such as a folded transpose or a pre-packed matrix, stay per session.)

The runtime has no ``onnx`` package: the few ONNX messages read here are declared in code (field numbers of
onnx.proto) and parsed with protobuf, which onnxruntime depends on; every other field passes through unchanged.
"""
from __future__ import annotations

import base64
import functools
import hashlib
import json
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnxruntime as ort

from trep_edge.runtime.core.model_card import ModelCardError

METADATA_KEY = "trep_edge.card"
"""The card's key."""
GRAPH_KEY_PREFIX = "trep_edge.graph."
STEP_LAYOUT_KEY = "trep_edge.step_layout"
SHARED_LOCATION = "trep_edge.main_graph"
"""The external-data location of a weight stored in the main graph (``initializer``: its name there)."""
MIN_SHARED_BYTES = 1024
"""Smaller initializers (shape constants, indices) stay in their graph: sharing them would save nothing."""
EXTERNAL = 1
"""onnx.proto ``TensorProto.DataLocation.EXTERNAL``."""
DTYPES = {1: np.float32, 2: np.uint8, 3: np.int8, 5: np.int16, 6: np.int32, 7: np.int64, 10: np.float16, 11: np.float64}
"""onnx.proto ``TensorProto.DataType`` → numpy, for the types a weight can have."""


@functools.cache
def _messages() -> dict[str, Any]:
    """Message classes for the parts of onnx.proto read here: Model (graph 7, metadata_props 14), Graph (initializer 5),
    Tensor (dims 1, data_type 2, name 8, raw_data 9, external_data 13, data_location 14), StringStringEntry."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    fd = descriptor_pb2.FieldDescriptorProto
    proto = descriptor_pb2.FileDescriptorProto(name="trep_edge/onnx_subset.proto", package="trep_edge.onnx",
                                               syntax="proto2")  # fmt: skip
    layout = {
        "Entry": [("key", 1, fd.TYPE_STRING, ""), ("value", 2, fd.TYPE_STRING, "")],
        "Tensor": [("dims", 1, fd.TYPE_INT64, "*"), ("data_type", 2, fd.TYPE_INT32, ""),
                   ("name", 8, fd.TYPE_STRING, ""), ("raw_data", 9, fd.TYPE_BYTES, ""),
                   ("external_data", 13, fd.TYPE_MESSAGE, "*Entry"), ("data_location", 14, fd.TYPE_INT32, "")],
        "Graph": [("initializer", 5, fd.TYPE_MESSAGE, "*Tensor")],
        "Model": [("graph", 7, fd.TYPE_MESSAGE, "Graph"), ("metadata_props", 14, fd.TYPE_MESSAGE, "*Entry")],
    }  # fmt: skip
    for message, fields in layout.items():
        spec = proto.message_type.add(name=message)
        for name, number, kind, ref in fields:
            label = fd.LABEL_REPEATED if ref.startswith("*") else fd.LABEL_OPTIONAL
            type_name = f".trep_edge.onnx.{ref.lstrip('*')}" if kind == fd.TYPE_MESSAGE else None
            spec.field.add(name=name, number=number, type=kind, label=label, type_name=type_name)
    pool = descriptor_pool.DescriptorPool()  # private: no clash with the onnx package's classes in a training process
    pool.Add(proto)
    return {m: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"trep_edge.onnx.{m}")) for m in layout}


def _parse(data: bytes) -> Any:
    model = _messages()["Model"]()
    model.ParseFromString(data)
    return model


def metadata(data: bytes) -> dict[str, str]:
    """The ``metadata_props`` of serialised ONNX ``data``."""
    return {p.key: p.value for p in _parse(data).metadata_props}


def _with_metadata(data: bytes, entries: dict[str, str]) -> bytes:
    model = _parse(data)
    del model.metadata_props[:]
    for key, value in entries.items():
        model.metadata_props.add(key=key, value=value)
    return model.SerializeToString()


@dataclass
class Unpacked:
    """What a model file holds besides its main graph: the card's text and the stored extra graphs."""

    card_text: str | None
    graphs: dict[str, bytes]


def unpack(meta: dict[str, str]) -> Unpacked:
    """The card text (None if absent) and the extra graphs' stored bytes from a model's metadata map."""
    graphs = {key[len(GRAPH_KEY_PREFIX) :]: base64.b64decode(value)
              for key, value in meta.items() if key.startswith(GRAPH_KEY_PREFIX)}  # fmt: skip
    return Unpacked(meta.get(METADATA_KEY), graphs)


def pack(data: bytes, card_text: str, graphs: dict[str, bytes]) -> bytes:
    """The main graph ``data`` with exactly this card and these stored extra graphs as its metadata."""
    entries = {METADATA_KEY: card_text}
    entries.update({GRAPH_KEY_PREFIX + name: base64.b64encode(blob).decode() for name, blob in sorted(graphs.items())})
    return _with_metadata(data, entries)


def with_step_layout(graph: bytes, layout: dict) -> bytes:
    """A step graph carrying its convolution layout (``STEP_LAYOUT_KEY``)."""
    return _with_metadata(graph, {**metadata(graph), STEP_LAYOUT_KEY: json.dumps(layout, sort_keys=True)})


def step_layout(meta: dict[str, str]) -> dict | None:
    """The layout a step graph's metadata map states, or None."""
    text = meta.get(STEP_LAYOUT_KEY)
    return None if text is None else json.loads(text)


def _shareable(tensor: Any) -> bool:
    return tensor.data_type in DTYPES and len(tensor.raw_data) >= MIN_SHARED_BYTES


def share_weights(main: bytes, graph: bytes) -> bytes:
    """``graph`` with every initializer equal to one of ``main``'s (type, shape, bytes) stored as a reference to it."""
    by_content = {(t.data_type, tuple(t.dims), t.raw_data): t.name
                  for t in _parse(main).graph.initializer if _shareable(t)}  # fmt: skip
    model = _parse(graph)
    for tensor in model.graph.initializer:
        source = by_content.get((tensor.data_type, tuple(tensor.dims), tensor.raw_data)) if _shareable(tensor) else None
        if source is None:
            continue
        digest = hashlib.sha256(tensor.raw_data).hexdigest()
        tensor.ClearField("raw_data")
        tensor.data_location = EXTERNAL
        for key, value in (("location", SHARED_LOCATION), ("initializer", source), ("sha256", digest)):
            tensor.external_data.add(key=key, value=value)
    return model.SerializeToString()


class SharedWeights:
    """The main graph's initializers, once, for every session of one model file (module docstring)."""

    def __init__(self, main: bytes, source: str) -> None:
        self.source = source
        self.arrays: dict[str, np.ndarray] = {}
        for tensor in _parse(main).graph.initializer:
            if _shareable(tensor):
                # A view of the parsed bytes: the only copy, kept alive by the array and so by this object.
                array = np.frombuffer(tensor.raw_data, dtype=DTYPES[tensor.data_type]).reshape(tuple(tensor.dims))
                self.arrays[tensor.name] = array
        self._values = {name: ort.OrtValue.ortvalue_from_numpy(a) for name, a in self.arrays.items()}
        self._digests: dict[str, str] = {}

    def options(self, options: ort.SessionOptions) -> ort.SessionOptions:
        """``options`` with every shared weight added (onnxruntime uses those of a session's names, not a copy)."""
        for name, value in self._values.items():
            options.add_initializer(name, value)
        return options

    def restore(self, name: str, graph: bytes) -> bytes:
        """The stored extra graph ``name`` with its references filled from the main graph, as onnxruntime loads it.

        A reference to a weight the main graph lacks, or whose bytes are not those the graph was built with, means
        a damaged file: ModelCardError.
        """
        model = _parse(graph)
        for tensor in model.graph.initializer:
            ref = {e.key: e.value for e in tensor.external_data}
            if tensor.data_location != EXTERNAL or ref.get("location") != SHARED_LOCATION:
                continue
            array = self.arrays.get(ref.get("initializer", ""))
            if array is None or array.shape != tuple(tensor.dims) or DTYPES.get(tensor.data_type) != array.dtype:
                raise ModelCardError(f"{self.source}: graph {name!r} shares weight {ref.get('initializer')!r}, which "
                                     "the main graph does not hold with its type and shape: the file is damaged; "
                                     "re-export it with `trep-edge export` or reinstall it")  # fmt: skip
            if self._digest(ref["initializer"]) != ref.get("sha256"):
                raise ModelCardError(f"{self.source}: weight {ref['initializer']!r} of the main graph is not the one "
                                     f"graph {name!r} was built with (sha256 differs): the file is damaged; re-export "
                                     "it with `trep-edge export` or reinstall it")  # fmt: skip
            del tensor.external_data[:]
            tensor.ClearField("data_location")
            tensor.raw_data = array.tobytes()
        return model.SerializeToString()

    def _digest(self, name: str) -> str:
        if name not in self._digests:
            self._digests[name] = hashlib.sha256(self.arrays[name].tobytes()).hexdigest()
        return self._digests[name]
