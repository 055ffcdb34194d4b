"""ONNX export: contract, card, parity, refusal of bad model files."""
import json
from pathlib import Path

import numpy as np
import onnx
import pytest

from trep_edge.runtime.core.engine import choose_providers, load_engine
from trep_edge.runtime.core.model_card import ModelCard, ModelCardError, sidecar_path
from trep_edge.runtime.core.model_file import METADATA_KEY
from trep_edge.runtime.core.preprocess import Normalisation


def test_graph_has_the_contract_and_a_current_opset(univariate_model):
    model = onnx.load(str(univariate_model))
    onnx.checker.check_model(model, full_check=True)
    assert {i.name for i in model.graph.input} == {"x", "mask", "t"}
    assert [o.name for o in model.graph.output] == ["z"]
    assert max(o.version for o in model.opset_import if o.domain in ("", "ai.onnx")) >= 18
    x = next(i for i in model.graph.input if i.name == "x")
    dims = x.type.tensor_type.shape.dim
    assert dims[0].dim_param and dims[1].dim_param and dims[2].dim_value == 1


def test_card_is_identical_in_metadata_and_sidecar(univariate_model):
    model = onnx.load(str(univariate_model))
    meta = {p.key: p.value for p in model.metadata_props}
    assert meta[METADATA_KEY] == sidecar_path(univariate_model).read_text()
    card = json.loads(meta[METADATA_KEY])
    for field in ("schema_version", "channels", "normalisation", "time_index", "time_embedding", "window",
                  "repr_dims", "scoring", "calibration", "training", "versions", "weights_sha256"):
        assert field in card, field
    assert card["calibration"]["sigma"] > 0 and card["calibration"]["n"] > 100
    assert len(card["weights_sha256"]) == 64


def test_parity_torch_vs_onnxruntime_within_1e4_and_identical_alerts(univariate_model, ucr_series):
    import torch

    from trep_edge.runtime.core.offline import prepare
    from trep_edge.training.encoder import EncoderConfig, TRepEncoder
    from trep_edge.runtime.core.model_card import Scoring
    from trep_edge.training.export import build_card, export_encoder, parity_check, weights_sha256

    engine = load_engine(univariate_model, "cpu")
    # An encoder of the fixture's architecture, exported fresh so the torch side of the comparison is at hand.
    cfg = engine.card.training["config"]
    encoder = TRepEncoder(EncoderConfig(input_dims=1, repr_dims=cfg["repr_dims"], hidden_dims=cfg["hidden_dims"],
                                        depth=cfg["depth"], time_embedding=cfg["time_embedding"],
                                        time_embedding_dims=cfg["time_embedding_dims"],
                                        time_scale=float(cfg["max_train_length"])))
    torch.manual_seed(1)
    card = build_card("p", encoder, {"channels": ["value"], "normalisation": engine.card.normalisation,
                                     "differencing": 0}, cfg, 64, Scoring(), 0)
    real = prepare(engine, ucr_series.values[:1500, None])
    fresh = export_encoder(encoder, card, univariate_model.parent / "parity.onnx", [real[:600]], 600)
    assert fresh.card.weights_sha256 == weights_sha256(encoder)
    report = parity_check(encoder, fresh, real[:800], lengths=(2, 5, 64, 1000), batches=(1, 4))
    assert report.cases == 2 * 4 * 2
    assert report.max_abs_diff <= 1e-4
    assert report.alerts_identical is True


def test_exports_in_one_process_share_torchs_registry_and_leave_torch_as_it_was():
    from torch.onnx._internal.exporter import _registration

    from trep_edge.training.exporter import OPSET, _one_registry

    before = _registration.ONNXRegistry.__dict__["from_torchlib"]
    with _one_registry():
        first = _registration.ONNXRegistry.from_torchlib(opset_version=OPSET)
    with _one_registry():  # torch.onnx.export asks through an instance
        assert _registration.ONNXRegistry().from_torchlib(opset_version=OPSET) is first
    assert _registration.ONNXRegistry.__dict__["from_torchlib"] is before


def _rewrite_card(src, dst, mutate):
    model = onnx.load(str(src))
    meta = {p.key: p.value for p in model.metadata_props}
    card = json.loads(meta[METADATA_KEY])
    text = mutate(card)
    del model.metadata_props[:]
    if text is not None:
        entry = model.metadata_props.add()
        entry.key, entry.value = METADATA_KEY, text
    onnx.save(model, str(dst))
    return dst


def test_model_without_card_is_refused(univariate_model, tmp_path):
    bad = _rewrite_card(univariate_model, tmp_path / "nocard.onnx", lambda c: None)
    with pytest.raises(ModelCardError, match="has no model card"):
        load_engine(bad, "cpu")


def test_malformed_card_is_refused(univariate_model, tmp_path):
    bad = _rewrite_card(univariate_model, tmp_path / "bad.onnx", lambda c: "{not json")
    with pytest.raises(ModelCardError, match="not valid JSON"):
        load_engine(bad, "cpu")


def test_card_that_disagrees_with_the_graph_says_what_differs(univariate_model, tmp_path):
    def two_channels(card):
        card.update(channels=["a", "b"], input_dims=2, normalisation={"mean": [0, 0], "std": [1, 1]})
        return json.dumps(card)

    bad = _rewrite_card(univariate_model, tmp_path / "chan.onnx", two_channels)
    with pytest.raises(ModelCardError, match="graph takes 1 channels, card says 2"):
        load_engine(bad, "cpu")

    def dims(card):
        card["repr_dims"] = 999
        return json.dumps(card)

    bad = _rewrite_card(univariate_model, tmp_path / "dims.onnx", dims)
    with pytest.raises(ModelCardError, match="outputs 16 representation dims, card says 999"):
        load_engine(bad, "cpu")


def test_stale_sidecar_is_refused(univariate_model, tmp_path):
    model = tmp_path / "m.onnx"
    model.write_bytes(univariate_model.read_bytes())
    card = json.loads(sidecar_path(univariate_model).read_text())
    card["scoring"]["beta"] = 9.0
    sidecar_path(model).write_text(json.dumps(card))
    with pytest.raises(ModelCardError, match="differs from the card inside"):
        load_engine(model, "cpu")


def test_card_validation_names_the_field():
    with pytest.raises(ModelCardError, match="time index 'hourly'"):
        ModelCard("m", ["a"], {"mean": [0], "std": [1]}, 0, "hourly", "time2vec", 10, 8, 1).validate()
    with pytest.raises(ModelCardError, match="std values must be positive"):
        ModelCard("m", ["a"], {"mean": [0], "std": [0]}, 0, "relative", "time2vec", 10, 8, 1).validate()


@pytest.mark.parametrize("ranges, problem", [({"b": [0, 1]}, "ranges.b names no channel"),
                                             ({"a": [1, 0]}, "finite low < high"), ({"a": [0]}, "finite low < high"),
                                             ({"a": [0, float("inf")]}, "finite low < high")])  # fmt: skip
def test_card_ranges_name_card_channels_with_finite_bounds(ranges, problem):
    card = ModelCard("m", ["a"], {"mean": [0], "std": [1]}, 0, "relative", "time2vec", 10, 8, 1)
    assert "ranges" not in card.to_json()  # absent at its default: older cards keep their text
    card.ranges = {"a": [0, 1]}
    assert ModelCard.from_json(card.to_json()).ranges == {"a": [0, 1]}
    card.ranges = ranges
    with pytest.raises(ModelCardError, match=problem):
        card.validate()


@pytest.mark.parametrize("rows", [-1, 2.5, "150", True])
def test_card_detector_prior_rows_are_a_whole_number_of_training_rows(rows):
    card = ModelCard("m", ["a"], {"mean": [0], "std": [1]}, 0, "relative", "time2vec", 10, 8, 1)
    card.detector_prior = {"signals": ["distance"], "mean": [0.0], "var": [1.0], "n": 10, "rows": 150}
    card.validate()
    card.detector_prior["rows"] = rows
    with pytest.raises(ModelCardError, match="detector_prior rows must be a whole number"):
        card.validate()


def test_the_prior_names_its_training_rows_only_for_one_series_trained_from_its_first_row():
    from trep_edge.training.commands.export import _trained_rows

    one, two = [np.zeros((150, 1))], [np.zeros((150, 1))] * 2
    assert _trained_rows(one, {"rows": "0:150"}, False) == 150
    assert _trained_rows(one, {"rows": None}, False) == 150
    assert _trained_rows(one, {"rows": ":150"}, False) == 150
    assert _trained_rows(one, {"rows": "50:200"}, False) == 0  # a stream scored from row 0 leaves them elsewhere
    assert _trained_rows(one, {"rows": "0:150"}, True) == 0  # --calibration-data: the prior is not of them
    assert _trained_rows(two, {"rows": None}, False) == 0  # several series (patients)
    assert _trained_rows(None, {}, False) == 0  # --no-calibration


@pytest.mark.parametrize("counts, problem", [([3.0, 1.0], "must list 1 finite numbers >= 0"),
                                             ([-1.0], "finite numbers >= 0"), ([float("nan")], "finite numbers"),
                                             ([True], "finite numbers"), ({"a": 1.0}, "must list 1")])  # fmt: skip
def test_card_normalisation_counts_list_a_level_per_channel_of_undifferenced_readings(counts, problem):
    card = ModelCard("m", ["a"], {"mean": [0], "std": [1]}, 0, "relative", "time2vec", 10, 8, 1)
    assert "counts" not in card.to_json()  # absent: older cards keep their text
    card.normalisation["counts"] = [12.5]
    assert ModelCard.from_json(card.to_json()).normalisation["counts"] == [12.5]
    card.differencing = 1
    with pytest.raises(ModelCardError, match="undifferenced readings only"):
        card.validate()
    card.differencing, card.normalisation["counts"] = 0, counts
    with pytest.raises(ModelCardError, match=problem):
        card.validate()


def test_training_data_bends_its_count_channels_and_the_exported_card_carries_them(export_tiny, tmp_path):
    from trep_edge.training.data import load_training_data

    rng = np.random.default_rng(0)
    requests = rng.poisson(20 * np.where(rng.random((2, 400)) < 0.03, 8, 1))
    x = np.stack([requests, rng.normal(50, 2, (2, 400))], axis=-1).astype(np.float32)
    np.save(tmp_path / "feed.npy", x)
    data = load_training_data(str(tmp_path / "feed.npy"))
    level = float(np.median(requests))
    np.testing.assert_allclose(data.normalisation.counts, [level, 0.0])
    np.testing.assert_allclose(np.nanmean(data.x, axis=(0, 1)), 0.0, atol=1e-5)  # standardised on the bent scale
    norm = data.normalisation
    np.testing.assert_allclose(data.x[..., 0], (np.arcsinh(requests / level) - norm.mean[0]) / norm.std[0], atol=1e-4)
    assert load_training_data(str(tmp_path / "feed.npy"), differencing=1).normalisation.counts is None
    given = Normalisation(np.float32([20, 50]), np.float32([5, 2]))  # fine-tuning keeps the base model's input
    assert load_training_data(str(tmp_path / "feed.npy"), normalisation=given).normalisation is given
    engine = load_engine(export_tiny(x, ["requests", "level"], tmp_path / "m.onnx", window=32, iterations=2, graphs=[]),
                         "cpu")
    assert engine.card.normalisation["counts"] == [pytest.approx(level), 0.0]


LOINC_HR = {"system": "http://loinc.org", "code": "8867-4", "display": "Heart rate", "unit": "/min"}


@pytest.mark.parametrize("codes, problem", [({"b": LOINC_HR}, "channel_codes.b names no channel"),
                                            ({"a": {"code": "8867-4"}}, "non-empty strings system and code"),
                                            ({"a": {**LOINC_HR, "units": "/min"}}, "optionally display and unit"),
                                            ({"a": {**LOINC_HR, "code": " "}}, "non-empty strings"),
                                            ({"a": "8867-4"}, "non-empty strings"), ([LOINC_HR], "an object of channel")])
def test_card_channel_codes_name_card_channels_with_a_system_and_a_code(codes, problem):
    card = ModelCard("m", ["a"], {"mean": [0], "std": [1]}, 0, "relative", "time2vec", 10, 8, 1)
    assert "channel_codes" not in card.to_json()  # absent at its default: older cards keep their text
    card.channel_codes = {"a": LOINC_HR}
    assert ModelCard.from_json(card.to_json()).channel_codes == {"a": LOINC_HR}
    card.channel_codes = codes
    with pytest.raises(ModelCardError, match=problem):
        card.validate()


def test_export_channel_codes_file_is_read_and_a_bad_one_is_refused(tmp_path):
    from trep_edge.training.commands.export import _channel_codes

    good = tmp_path / "codes.json"
    good.write_text(json.dumps({"HR": LOINC_HR}))
    assert _channel_codes(str(good)) == {"HR": LOINC_HR} and _channel_codes(None) == {}
    for text in ("[1, 2]", "{not json"):
        (tmp_path / "bad.json").write_text(text)
        with pytest.raises(ValueError, match="--channel-codes .*bad.json"):
            _channel_codes(str(tmp_path / "bad.json"))


@pytest.mark.parametrize("name", ["icu-vitals", "icu-vitals.fp16", "icu-vitals-causal"])
def test_shipped_icu_models_carry_the_loinc_codes_inside_and_beside_the_file(name):
    models = Path(__file__).resolve().parents[2] / "models"
    codes = json.loads((models / "icu-vitals.codes.json").read_text())
    inside = {p.key: p.value for p in onnx.load(str(models / f"{name}.onnx")).metadata_props}[METADATA_KEY]
    for text in (inside, (models / f"{name}.card.json").read_text()):
        card = ModelCard.from_json(text)
        assert card.channel_codes == codes and set(codes) == set(card.channels)
    assert codes["HR"]["code"] == "8867-4" and codes["O2Sat"]["code"] == "59408-5" and codes["Resp"]["code"] == "9279-1"


def test_non_onnx_file_is_refused(tmp_path):
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"\x00garbage")
    with pytest.raises(ModelCardError, match="not a loadable ONNX model"):
        load_engine(junk, "cpu")


def test_gpu_request_falls_back_to_cpu_loudly(univariate_model, caplog):
    import onnxruntime as ort

    if "CUDAExecutionProvider" in ort.get_available_providers():
        pytest.skip("CUDA present: the fallback path is what is tested here")
    chosen, missing = choose_providers("cuda,cpu")
    assert chosen == ["CPUExecutionProvider"] and missing == ["CUDAExecutionProvider"]
    with caplog.at_level("WARNING"):
        engine = load_engine(univariate_model, "tensorrt,cuda")
    assert engine.providers == ["CPUExecutionProvider"]
    assert "TensorrtExecutionProvider" in engine.status["provider_fallback"]
    assert "EXECUTION PROVIDER FALLBACK" in caplog.text
    assert choose_providers("auto") == (["CPUExecutionProvider"], [])
    with pytest.raises(ValueError, match="unknown execution provider"):
        choose_providers("gpu")


@pytest.mark.parametrize("name", ["full", "last_step"])
def test_engine_scores_both_variants_in_one_run(univariate_model, name):
    calls = []
    engine = load_engine(univariate_model, "cpu", engine=name)
    real_run = engine.session.run if name == "full" else engine.graphs[name].run

    class Spy:
        def run(self, names, feeds):
            calls.append(feeds["x"].shape)
            return real_run(names, feeds)

    if name == "full":
        engine.session = Spy()
    else:
        engine.graphs[name] = Spy()
    w = engine.card.window
    zu, zm = engine.last_step_pair(np.zeros((5, w, 1), np.float32), np.zeros(5, np.int64))
    assert calls == [(10, w, 1)]
    assert zu.shape == zm.shape == (5, engine.card.repr_dims)


def test_build_graphs_embeds_only_the_named_graphs_and_refuses_unknown_names():
    from trep_edge.training.encoder import EncoderConfig, TRepEncoder
    from trep_edge.training.export import build_graphs

    encoder = TRepEncoder(EncoderConfig(input_dims=1, repr_dims=4, hidden_dims=4, depth=1, time_embedding_dims=4)).eval()
    assert set(build_graphs(encoder, 8)) == {"last_step", "pruned_pair"}  # no step graph for a non-causal encoder
    assert set(build_graphs(encoder, 8, ["pruned_pair"])) == {"pruned_pair"}
    assert build_graphs(encoder, 8, []) == {}
    with pytest.raises(ValueError, match="unknown extra graph.*'pruned'"):
        build_graphs(encoder, 8, ["pruned"])


def test_export_range_flags_become_card_ranges_and_bad_ones_say_what_to_write():
    from trep_edge.training.commands.export import _channel_ranges

    assert _channel_ranges(["HR=0:350", "Temp=10:50.5"], ["HR", "Temp"]) == {"HR": [0.0, 350.0], "Temp": [10.0, 50.5]}
    for entry, message in (("HR=high", "CHANNEL=LOW:HIGH"), ("BP=0:300", "no channel 'BP'"), ("HR=5:1", "LOW < HIGH")):
        with pytest.raises(ValueError, match=message):
            _channel_ranges([entry], ["HR", "Temp"])
