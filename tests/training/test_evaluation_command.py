"""trep-edge eval end to end on a tiny synthetic UEA-style set: both variants, rows written once, resumable."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from trep_edge.cli import main
from trep_edge.training.evaluation.pretrain import Budget, variant_config
from trep_edge.training.evaluation.results import ResultsFile


def _write_ts(path: Path, x: np.ndarray, y: np.ndarray) -> None:
    lines = ["@problemName toy", "@timeStamps false", "@univariate false", f"@dimensions {x.shape[2]}",
             "@equalLength true", f"@seriesLength {x.shape[1]}", "@classLabel true a b", "@data"]
    for series, label in zip(x, y):
        lines.append(":".join(",".join(f"{v:.4f}" for v in series[:, c]) for c in range(x.shape[2])) + f":{label}")
    path.write_text("\n".join(lines) + "\n")


def test_the_ablation_differs_from_t_rep_only_in_time_embedding_and_weights():
    budget = Budget(iterations=7, hidden_dims=16, seed=3)
    trep, ts2vec = variant_config("trep", "mlp", 32, budget), variant_config("ts2vec", "mlp", 32, budget)
    assert ts2vec.time_embedding == "none" and trep.time_embedding == "mlp"
    assert (ts2vec.weights.instance, ts2vec.weights.temporal, ts2vec.weights.divergence, ts2vec.weights.forecast) == (
        0.5, 0.5, 0.0, 0.0)
    differing = {k for k, v in trep.to_dict().items() if ts2vec.to_dict()[k] != v}
    assert differing == {"time_embedding", "weights"}


def test_eval_classification_writes_one_row_per_variant_and_resumes(tmp_path):
    rng = np.random.default_rng(0)
    folder = tmp_path / "UEA" / "Toy"
    folder.mkdir(parents=True)
    for split, n in (("TRAIN", 20), ("TEST", 10)):
        y = np.array(["a", "b"] * (n // 2))
        x = rng.normal(size=(n, 24, 2)) + (y == "b")[:, None, None] * 3.0
        _write_ts(folder / f"Toy_{split}.ts", x, y)
    results = tmp_path / "r.json"
    args = ["eval", "classification", "--datasets", "Toy", "--data-root", str(tmp_path), "--iterations", "2",
            "--depth", "1", "--hidden-dims", "8", "--repr-dims", "8", "--results", str(results)]
    assert main(args) == 0
    rows = ResultsFile(results).rows
    assert set(rows) == {"classification/Toy/trep", "classification/Toy/ts2vec"}
    for row in rows.values():
        assert 0.0 <= row["metrics"]["accuracy"] <= 1.0
        assert row["budget"]["iterations"] == 2 and row["seed"] == 0 and row["wall_seconds"] >= 0
    before = results.read_text()
    assert main(args) == 0
    assert results.read_text() == before  # finished rows are skipped, not recomputed
    assert json.loads(before)["rows"]["classification/Toy/trep"]["time_embedding"] == "mlp"


def test_report_marks_missing_rows_not_run_and_quotes_only_the_papers_numbers():
    from trep_edge.training.evaluation.report import report

    rows = {"classification/ERing/trep": {"metrics": {"accuracy": 0.9}, "wall_seconds": 3.0},
            "classification/ERing/ts2vec": {"metrics": {"accuracy": 0.8}, "wall_seconds": 2.0}}
    text = report(rows)
    assert "| ERing | 0.900 | 0.800 | 0.943 | — | 3 / 2 |" in text
    assert "| Libras | not run | not run | 0.829 |" in text
    assert "| ETTh1 | all | not run | not run |" in text


def test_a_non_default_time_index_or_seed_gets_its_own_rows():
    from trep_edge.training.evaluation.runner import RunSettings

    assert RunSettings().tag("ETTh1") == "ETTh1"
    assert RunSettings(time_index="periodic:24").tag("ETTh1") == "ETTh1@periodic:24"
    assert RunSettings(budget=Budget(seed=1)).tag("ETTh1") == "ETTh1#seed1"
    assert variant_config("trep", "time2vec", 8, Budget(), "periodic:24").time_index == "periodic:24"


def test_report_puts_a_repeated_seed_beside_seed_zero():
    from trep_edge.training.evaluation.report import seed_table

    rows = {f"classification/ERing{tag}/{v}": {"metrics": {"accuracy": acc}, "wall_seconds": 1.0}
            for tag, accs in (("", (0.9, 0.8)), ("#seed1", (0.85, 0.86))) for v, acc in zip(("trep", "ts2vec"), accs)}
    table = seed_table(rows)
    assert "| classification | ERing | 0 | 0.900 | 0.800 | +0.100 |" in table
    assert "| classification | ERing | 1 | 0.850 | 0.860 | -0.010 |" in table
