"""The model file format (runtime/trep_edge/runtime/core/model_file.py): pack/unpack, weights stored and loaded once."""
from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from trep_edge.runtime.core.engine import load_engine, pair_inputs, probe_windows
from trep_edge.runtime.core.model_card import ModelCardError, sidecar_path
from trep_edge.runtime.core.model_file import (GRAPH_KEY_PREFIX, METADATA_KEY, MIN_SHARED_BYTES, SHARED_LOCATION,
                                               metadata, pack, unpack)  # fmt: skip

SHIPPED = Path(__file__).resolve().parents[2] / "models" / "icu-vitals.onnx"


def _copy(model, folder):
    dst = folder / model.name
    shutil.copy(model, dst)
    shutil.copy(sidecar_path(model), sidecar_path(dst))
    return dst


def test_pack_and_unpack_round_trip_and_leave_the_main_graph_as_it_was(univariate_model):
    data = univariate_model.read_bytes()
    packed = pack(data, '{"card": 1}', {"b": b"\x00\x01two", "a": b"one"})
    assert set(metadata(packed)) == {METADATA_KEY, GRAPH_KEY_PREFIX + "a", GRAPH_KEY_PREFIX + "b"}
    back = unpack(metadata(packed))
    assert back.card_text == '{"card": 1}' and back.graphs == {"a": b"one", "b": b"\x00\x01two"}
    assert unpack(metadata(pack(packed, "{}", {}))).graphs == {}  # packing again replaces, never appends
    engine = load_engine(univariate_model, "cpu", engine="full")
    feeds = dict(zip(("x", "mask", "t"), pair_inputs(engine.convention, *probe_windows(engine.card))))
    before = ort.InferenceSession(data).run(["z"], feeds)[0]
    after = ort.InferenceSession(packed).run(["z"], feeds)[0]
    assert np.array_equal(before, after)


def test_extra_graphs_store_no_weight_of_their_own(univariate_model):
    data = univariate_model.read_bytes()
    stored = unpack(metadata(data)).graphs
    assert set(stored) == {"last_step", "pruned_pair"}
    main = {t.name: t for t in onnx.load_from_string(data).graph.initializer}
    for name, blob in stored.items():
        graph = onnx.load_from_string(blob)
        refs = [t for t in graph.graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL]
        own = [t.name for t in graph.graph.initializer if t.data_location != onnx.TensorProto.EXTERNAL
               and len(t.raw_data) >= MIN_SHARED_BYTES and t.data_type == onnx.TensorProto.FLOAT]  # fmt: skip
        assert refs and not own, (name, own)
        for t in refs:
            entry = {e.key: e.value for e in t.external_data}
            assert entry["location"] == SHARED_LOCATION and entry["initializer"] in main


def test_the_shipped_model_is_at_most_a_fifth_larger_than_its_full_graph():
    data = SHIPPED.read_bytes()
    assert set(unpack(metadata(data)).graphs) == {"last_step", "pruned_pair"}
    assert len(data) <= 1.2 * len(pack(data, metadata(data)[METADATA_KEY], {}))


def test_a_damaged_shared_weight_refuses_the_file_with_what_to_do(univariate_model, tmp_path):
    path = _copy(univariate_model, tmp_path)
    model = onnx.load(str(path))
    weight = next(t for t in model.graph.initializer if t.name == "blocks.0.conv1.weight")
    values = onnx.numpy_helper.to_array(weight).copy()
    values.flat[0] += 1.0
    weight.raw_data = values.tobytes()
    onnx.save(model, str(path))
    with pytest.raises(ModelCardError, match=r"weight 'blocks.0.conv1.weight' of the main graph is not the one graph "
                                             r"'\w+' was built with \(sha256 differs\): the file is damaged"):
        load_engine(path, "cpu")


def test_a_reference_to_a_weight_the_main_graph_lacks_refuses_the_file(univariate_model, tmp_path):
    from trep_edge.training.export import graph_entry, write_card

    path = _copy(univariate_model, tmp_path)
    card = load_engine(path, "cpu", engine="full").card
    graph = onnx.load_from_string(unpack(metadata(path.read_bytes())).graphs["last_step"])
    ref = next(t for t in graph.graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL)
    next(e for e in ref.external_data if e.key == "initializer").value = "blocks.99.conv1.weight"
    blob = graph.SerializeToString()
    write_card(path, replace(card, graphs={"last_step": graph_entry(blob, card.window)}), {"last_step": blob})
    with pytest.raises(ModelCardError, match="graph 'last_step' shares weight 'blocks.99.conv1.weight', which the "
                                             "main graph does not hold"):
        load_engine(path, "cpu")
