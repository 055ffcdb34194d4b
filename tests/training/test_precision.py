"""Reduced-precision variants are judged on the anomaly score, in units of the calibration σ."""
import json

from trep_edge.runtime.core.engine import load_engine
from trep_edge.runtime.core.model_card import sidecar_path
from trep_edge.runtime.core.offline import prepare
from trep_edge.training.precision import P99_TOLERANCE, export_variant


def test_fp16_variant_keeps_scores_and_is_written_with_its_card(univariate_model, ucr_series, tmp_path):
    model = tmp_path / "m.onnx"
    model.write_bytes(univariate_model.read_bytes())
    sidecar_path(model).write_text(sidecar_path(univariate_model).read_text())
    engine = load_engine(model, "cpu")
    series = [prepare(engine, ucr_series.values[:800, None])]
    report = export_variant(engine, "fp16", series, max_steps=400)
    assert report.accepted, report
    assert report.p99_error_sigma <= P99_TOLERANCE
    assert report.bytes < report.fp32_bytes
    variant = load_engine(tmp_path / "m.fp16.onnx", "cpu")
    assert variant.card.precision == "fp16"
    assert json.loads(sidecar_path(tmp_path / "m.fp16.onnx").read_text())["precision"] == "fp16"


def test_int8_variant_is_written_only_when_within_tolerance(univariate_model, ucr_series, tmp_path):
    model = tmp_path / "m.onnx"
    model.write_bytes(univariate_model.read_bytes())
    engine = load_engine(model, "cpu")
    series = [prepare(engine, ucr_series.values[:800, None])]
    report = export_variant(engine, "int8", series, max_steps=400)
    written = (tmp_path / "m.int8.onnx").exists()
    assert written == report.accepted
    assert report.accepted == (report.p99_error_sigma <= P99_TOLERANCE and report.max_error_sigma <= 0.5)
