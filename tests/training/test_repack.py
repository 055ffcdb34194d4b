"""Repacking a model file whose extra graphs carry their own weights (the older format) into the current one."""
from __future__ import annotations

import shutil
from dataclasses import replace

from trep_edge.runtime.core.engine import load_engine
from trep_edge.runtime.core.model_card import sidecar_path


def test_repacking_an_older_file_keeps_its_scores_and_stores_the_weights_once(univariate_model, tmp_path):
    from trep_edge.training.export import build_graphs, graph_entry, weights_sha256, write_card
    from trep_edge.training.repack import encoder_from_model, repack_model

    path = tmp_path / univariate_model.name
    shutil.copy(univariate_model, path)
    shutil.copy(sidecar_path(univariate_model), sidecar_path(path))
    card = load_engine(path, "cpu", engine="full").card
    encoder = encoder_from_model(path)
    assert weights_sha256(encoder) == card.weights_sha256
    # The older format: each extra graph as built, with its own copy of every weight.
    own = build_graphs(encoder, card.window)
    write_card(path, replace(card, graphs={n: graph_entry(b, card.window) for n, b in own.items()}), own)
    older = path.stat().st_size
    diffs = repack_model(path)
    assert set(diffs) == {"full", "last_step", "pruned_pair"}
    assert diffs["full"] == 0.0 and max(diffs.values()) <= 1e-5
    assert path.stat().st_size < older
    engine = load_engine(path, "cpu")
    assert engine.card.calibration == card.calibration and set(engine.graphs) == {"last_step", "pruned_pair"}
    assert all(engine.candidates[n].startswith("exact") for n in engine.graphs)
