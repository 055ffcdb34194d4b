"""Engine selection: embedded graphs verified against the full graph, the fastest exact one used, choice visible."""
from __future__ import annotations

import base64
import json
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import onnx
import pytest

from trep_edge.runtime.service.config import ConfigError, load_config
from trep_edge.runtime.core.engine import load_engine
from trep_edge.runtime.core.model_card import Scoring, sidecar_path
from trep_edge.runtime.core.model_file import GRAPH_KEY_PREFIX, METADATA_KEY
from trep_edge.runtime.core.offline import prepare, sliding_windows

from broker import Collector, broker, daemon_tables, daemons  # noqa: F401 - fixtures

SHIPPED = Path(__file__).resolve().parents[2] / "models" / "icu-vitals.onnx"


def _copy_model(src: Path, folder: Path) -> Path:
    dst = folder / src.name
    shutil.copy(src, dst)
    shutil.copy(sidecar_path(src), sidecar_path(dst))
    return dst


def _other_weights_graph(card) -> bytes:
    """A last_step graph of the card's architecture but different (random) weights: loadable, not exact."""
    import torch

    from trep_edge.training.encoder import EncoderConfig, TRepEncoder
    from trep_edge.training.pruned_graph import last_step_graph

    cfg = card.training["config"]
    torch.manual_seed(123)
    encoder = TRepEncoder(EncoderConfig(input_dims=card.input_dims, repr_dims=cfg["repr_dims"],
                                        hidden_dims=cfg["hidden_dims"], depth=cfg["depth"],
                                        time_embedding=cfg["time_embedding"],
                                        time_embedding_dims=cfg["time_embedding_dims"]))  # fmt: skip
    return last_step_graph(encoder, card.window)


@pytest.fixture(scope="module")
def wrong_graph(univariate_model) -> bytes:
    return _other_weights_graph(load_engine(univariate_model, "cpu", engine="full").card)


def test_an_exported_model_carries_a_verified_last_step_graph(univariate_model):
    engine = load_engine(univariate_model, "cpu")
    graphs = {"last_step", "pruned_pair"}  # no "step": this is not a causal model
    assert set(engine.card.graphs) == graphs and set(engine.graphs) == graphs
    entry = engine.card.graphs["last_step"]
    assert entry["window"] == engine.card.window and len(entry["sha256"]) == 64
    assert engine.candidates["last_step"].startswith("exact (max |Δz|")
    assert engine.candidates["pruned_pair"].startswith("exact (max |Δz|")
    assert engine.selected in ("full", *graphs)
    assert engine.selection_reason.startswith(f"fastest exact engine: {engine.selected}")
    status = engine.status
    assert status["engine"] == engine.selected and "ms/window" in status["engine_reason"]
    assert set(status["engine_candidates"]) == {"full", *graphs}
    # The sidecar lists the graph too, but its bytes travel only inside the model file.
    assert json.loads(sidecar_path(univariate_model).read_text())["graphs"] == engine.card.graphs


def test_forced_engines_compute_the_same_pair_on_real_windows(univariate_model, ucr_series):
    full = load_engine(univariate_model, "cpu", engine="full")
    pruned = load_engine(univariate_model, "cpu", engine="last_step")
    pair = load_engine(univariate_model, "cpu", engine="pruned_pair")
    assert (full.selected, pruned.selected, pair.selected) == ("full", "last_step", "pruned_pair")
    assert pruned.selection_reason == "forced by model.engine = last_step"
    values = prepare(full, ucr_series.values[:700, None])
    windows = np.ascontiguousarray(sliding_windows(values, full.card.window)[::5])
    windows[3, -1] = np.nan
    starts = np.arange(len(windows), dtype=np.int64) * 5
    reference = full.last_step_pair(windows, starts)
    for other in (pruned, pair):
        for a, b in zip(reference, other.last_step_pair(windows, starts)):
            assert a.shape == b.shape == (len(windows), full.card.repr_dims)
            assert float(np.nanmax(np.abs(a - b))) <= 1e-5


def test_forcing_an_engine_the_model_lacks_is_refused_with_what_to_do(univariate_model):
    with pytest.raises(ValueError, match=r"model.engine = step cannot be used .*no 'step' graph .*last_step, pruned"):
        load_engine(univariate_model, "cpu", engine="step")
    with pytest.raises(ValueError, match="engine 'fast' is unknown"):
        load_engine(univariate_model, "cpu", engine="fast")


def test_a_model_exported_before_graphs_loads_on_the_full_graph(univariate_model, tmp_path):
    from trep_edge.training.export import write_card

    model = _copy_model(univariate_model, tmp_path)
    card = load_engine(model, "cpu", engine="full").card
    write_card(model, replace(card, graphs={}))
    # What an older export wrote: the card alone in the metadata, no "graphs" key in its text.
    assert {p.key for p in onnx.load(str(model)).metadata_props} == {METADATA_KEY}
    assert "graphs" not in json.loads(sidecar_path(model).read_text())
    engine = load_engine(model, "cpu")
    assert engine.card.graphs == {} and engine.graphs == {}
    assert engine.selected == "full" and "no extra graphs" in engine.selection_reason
    with pytest.raises(ValueError, match="no 'last_step' graph .*it has: none"):
        load_engine(model, "cpu", engine="last_step")


def test_the_shipped_model_carries_an_exact_last_step_graph():
    engine = load_engine(SHIPPED, "cpu")
    assert engine.card.graphs["last_step"]["window"] == engine.card.window
    assert engine.candidates["last_step"].startswith("exact")


def test_a_graph_that_is_not_exact_is_refused_and_the_full_graph_used(univariate_model, wrong_graph, tmp_path, caplog):
    from trep_edge.training.export import graph_entry, write_card

    model = _copy_model(univariate_model, tmp_path)
    card = load_engine(model, "cpu", engine="full").card
    wrong = replace(card, graphs={"last_step": graph_entry(wrong_graph, card.window)})
    write_card(model, wrong, {"last_step": wrong_graph})
    engine = load_engine(model, "cpu")
    assert engine.selected == "full"
    assert engine.candidates["last_step"].startswith("refused: max |Δz|")
    assert "ENGINE last_step NOT USED" in caplog.text
    with pytest.raises(ValueError, match="model.engine = last_step cannot be used .*refused: max"):
        load_engine(model, "cpu", engine="last_step")


def test_a_graph_that_fails_to_run_is_refused_and_the_model_still_loads(univariate_model, tmp_path):
    from trep_edge.training.export import graph_entry, write_card

    model = _copy_model(univariate_model, tmp_path)
    card = load_engine(model, "cpu", engine="full").card
    full_graph = onnx.load(str(model))
    del full_graph.metadata_props[:]
    blob = full_graph.SerializeToString()  # a loadable graph without the z_last output
    write_card(model, replace(card, graphs={"last_step": graph_entry(blob, card.window)}), {"last_step": blob})
    engine = load_engine(model, "cpu")
    assert engine.selected == "full"
    assert engine.candidates["last_step"].startswith("refused: it fails on the probe windows")


def test_a_graph_whose_bytes_differ_from_the_card_is_not_loaded(univariate_model, wrong_graph, tmp_path):
    model_path = _copy_model(univariate_model, tmp_path)
    model = onnx.load(str(model_path))
    entry = next(p for p in model.metadata_props if p.key == GRAPH_KEY_PREFIX + "last_step")
    entry.value = base64.b64encode(wrong_graph).decode()
    onnx.save(model, str(model_path))
    engine = load_engine(model_path, "cpu")
    assert "last_step" not in engine.graphs and engine.selected != "last_step"
    assert engine.candidates["last_step"] == "refused: its bytes do not match the sha256 in the card"


def test_rewriting_a_card_keeps_its_graphs(univariate_model, tmp_path):
    from trep_edge.training.export import write_card

    model = _copy_model(univariate_model, tmp_path)
    card = load_engine(model, "cpu", engine="full").card
    write_card(model, replace(card, name="renamed"))
    kept = load_engine(model, "cpu", engine="last_step")
    assert kept.card.name == "renamed" and kept.card.graphs == card.graphs


def test_graphs_are_added_to_an_older_export_of_the_same_weights(tmp_path):
    from trep_edge.training.encoder import EncoderConfig, TRepEncoder
    from trep_edge.training.export import build_card, embed_graphs, export_graph, write_card

    encoder = TRepEncoder(EncoderConfig(input_dims=1, repr_dims=4, hidden_dims=6, depth=2, time_embedding_dims=4))
    meta = {"channels": ["v"], "normalisation": {"mean": [0.0], "std": [1.0]}, "differencing": 0}
    card = build_card("old", encoder, meta, {"time_index": "relative"}, 20, Scoring(), 0)
    model = tmp_path / "old.onnx"
    export_graph(encoder, model)
    write_card(model, card)
    assert load_engine(model, "cpu").graphs == {}
    embed_graphs(model, encoder)
    engine = load_engine(model, "cpu", engine="last_step")
    assert engine.card.calibration == card.calibration and engine.card.weights_sha256 == card.weights_sha256
    assert engine.candidates["last_step"].startswith("exact")
    with pytest.raises(ValueError, match="weights_sha256 differs"):
        embed_graphs(model, TRepEncoder(EncoderConfig(input_dims=1, repr_dims=4, hidden_dims=6, depth=2,
                                                      time_embedding_dims=4)))  # fmt: skip


def test_precision_variants_carry_only_the_full_graph(univariate_model, ucr_series, tmp_path):
    from trep_edge.training.precision import export_variant

    reference = load_engine(_copy_model(univariate_model, tmp_path), "cpu")
    report = export_variant(reference, "fp16", [prepare(reference, ucr_series.values[:400, None])], max_steps=400)
    assert report.accepted, report
    variant = load_engine(report.path, "cpu")
    assert variant.card.precision == "fp16" and variant.card.graphs == {} and variant.selected == "full"


def test_model_engine_setting_is_checked():
    assert load_config(None, env={}).model.engine == "auto"
    assert load_config(None, env={"TREP_EDGE_MODEL_ENGINE": "last_step"}).model.engine == "last_step"
    with pytest.raises(ConfigError, match="model.engine must be one of auto, full, last_step, pruned_pair, step, got"):
        load_config(None, env={"TREP_EDGE_MODEL_ENGINE": "fast"})


def test_doctor_shows_the_chosen_engine_and_why(univariate_model):
    done = subprocess.run([sys.executable, "-m", "trep_edge.cli", "doctor", "--model", str(univariate_model),
                           "--providers", "cpu"], capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "  engine      " in done.stdout and "fastest exact engine" in done.stdout
    assert "    last_step   exact (max |Δz|" in done.stdout


def test_daemon_status_and_metrics_name_the_engine(univariate_model, broker, daemons, tmp_path):
    tables = daemon_tables(broker, univariate_model, tmp_path / "d")
    tables["model"]["engine"] = "last_step"
    daemon = daemons(tmp_path / "d", tables)
    daemon.start()
    daemon.wait_http("/readyz")
    info = [k for k in daemon.metrics() if k.startswith("trep_edge_model_info")]
    assert len(info) == 1 and 'engine="last_step"' in info[0]
    status = _retained_status(broker.port, daemon.tables["mqtt"]["client_id"])
    assert status["engine"] == "last_step" and status["engine_reason"] == "forced by model.engine = last_step"


def _retained_status(port: int, client_id: str) -> dict:
    collector = Collector(port, [f"trep-edge/status/{client_id}"])
    try:
        return collector.wait_count(f"trep-edge/status/{client_id}", 1)[0].json()
    finally:
        collector.close()
