"""The train and export subcommands: a tiny run end to end, and bad arguments refused with what to fix."""
import argparse
import csv
import json
import subprocess
import sys

import numpy as np
import pytest

from trep_edge.cli import main
from trep_edge.runtime.core.engine import load_engine


@pytest.fixture()
def npy_data(tmp_path):
    rng = np.random.default_rng(0)
    x = (np.sin(np.arange(300) / 7)[None, :, None] + 0.1 * rng.normal(size=(3, 300, 2))).astype(np.float32)
    path = tmp_path / "toy.npy"
    np.save(path, x)
    return path


TINY = ["--iterations", "3", "--depth", "2", "--hidden-dims", "8", "--repr-dims", "4", "--no-progress"]


def test_train_then_export_writes_a_loadable_calibrated_model(npy_data, tmp_path, capsys):
    ckpt = tmp_path / "toy.pt"
    assert main(["train", str(npy_data), "--out", str(ckpt), *TINY]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["steps"] == 3 and set(summary["final_losses"]) >= {"instance", "temporal", "divergence", "forecast"}
    model = tmp_path / "toy.onnx"
    # The full graph only (the extra graphs' exports are tested in test_export.py): half the export's time.
    assert main(["export", str(ckpt), "--out", str(model), "--window", "16", "--calibration-steps", "200",
                 "--graphs", "none"]) == 0  # fmt: skip
    engine = load_engine(model, "cpu")
    assert engine.card.channels == ["dim0", "dim1"] and engine.card.window == 16
    assert engine.card.calibration.n > 100
    assert engine.card.training["data_fingerprint"] == json.loads(
        (tmp_path / "toy.card.json").read_text())["training"]["data_fingerprint"]


def test_resume_continues_to_more_steps(npy_data, tmp_path, capsys):
    ckpt = tmp_path / "r.pt"
    main(["train", str(npy_data), "--out", str(ckpt), *TINY])
    capsys.readouterr()
    assert main(["train", str(npy_data), "--out", str(ckpt), "--resume", str(ckpt), "--no-progress"]) == 0
    assert json.loads(capsys.readouterr().out)["steps"] == 3


@pytest.mark.parametrize(
    "argv, message",
    [
        (["train", "no/such/file.csv"], "not found as a path nor under the data folder"),
        (["train", "{npy}", "--weights", "0.5,0.5"], "needs four numbers"),
        (["train", "{npy}", "--weights", "1,1,1,1"], "sum to 1"),
        (["train", "{npy}", "--time-index", "hourly"], "relative' or 'periodic:P'"),
        (["train", "{npy}", "--time-embedding", "none"], "divergence and forecast weights of 0"),
        (["train", "{npy}", "--rows", "abc"], "START:END"),
        (["export", "{npy}", "--out", "x.onnx"], "not a readable trep-edge checkpoint"),
    ],
)
def test_bad_arguments_are_refused_with_a_message(argv, message, npy_data, capsys):
    argv = [a.replace("{npy}", str(npy_data)) for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and err.startswith(f"trep-edge {argv[0]}: error:")


def test_unknown_format_is_refused(tmp_path, capsys):
    bad = tmp_path / "data.parquet"
    bad.write_bytes(b"x")
    assert main(["train", str(bad)]) == 2
    assert "unknown data format" in capsys.readouterr().err


def test_export_prints_only_its_summary(npy_data, tmp_path, capsys):
    ckpt = tmp_path / "toy.pt"
    assert main(["train", str(npy_data), "--out", str(ckpt), *TINY]) == 0
    argv = ["export", str(ckpt), "--out", str(tmp_path / "t.onnx"), "--window", "16", "--calibration-steps", "200"]
    done = subprocess.run([sys.executable, "-m", "trep_edge.cli", *argv], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""  # no exporter INFO lines, torchvision notices or internal deprecation warnings
    assert json.loads(done.stdout)["model"].endswith("t.onnx")


def test_a_labelled_csv_trains_on_its_readings_only(tmp_path, capsys):
    # A labelled export (timestamp, value, is_anomaly): the model's channels are the readings, never the answer.
    rng = np.random.default_rng(1)
    rows = [f"2024-05-01T00:{k // 60:02d}:{k % 60:02d}Z,{v:.4f},{int(k in (150, 151))}"
            for k, v in enumerate(np.sin(np.arange(240) / 7) + 0.1 * rng.normal(size=240))]  # fmt: skip
    data = tmp_path / "labelled.csv"
    data.write_text("timestamp,value,is_anomaly\n" + "\n".join(rows) + "\n")
    assert main(["train", str(data), *TINY, "--out", str(tmp_path / "m.pt")]) == 0
    assert json.loads(capsys.readouterr().out)["channels"] == ["value"]


def _nab_csv(path, values):
    """A NAB-style stream file: timestamp, value, one reading every 5 minutes (no label column)."""
    stamps = np.datetime64("2024-05-01T00:00") + np.arange(len(values)) * np.timedelta64(5, "m")
    path.write_text("timestamp,value\n" + "".join(f"{t}Z,{v!r}\n" for t, v in zip(stamps, values.tolist())))
    return path


@pytest.mark.parametrize(
    "name, values",
    [
        # A sensor that held one value for its whole training part, then moved: its training scale is zero.
        ("constant-training", np.r_[np.full(150, 7.0), 7.0 + 0.1 * np.random.default_rng(2).normal(size=850)]),
        # A random walk near 1e9 in steps of about 50, the size of float32's resolution there (64).
        ("near-1e9", 1e9 + np.cumsum(np.random.default_rng(3).normal(size=1000)) * 50),
    ],
)
def test_odd_streams_train_on_their_first_15_percent_and_score_whole(name, values, tmp_path, capsys):
    # The evaluator's path on streams that break naive scaling: train on the first 15 %, export, score every reading.
    values = values.copy()
    values[700] += 40 * (np.std(values[:700]) + 1.0)  # one unmistakable spike after probation
    data = _nab_csv(tmp_path / f"{name}.csv", values)
    ckpt, model, out = tmp_path / "m.pt", tmp_path / "m.onnx", tmp_path / "scored.csv"
    assert main(["train", str(data), "--rows", "0:150", *TINY, "--out", str(ckpt)]) == 0
    assert main(["export", str(ckpt), "--out", str(model), "--window", "32", "--graphs", "none"]) == 0
    assert main(["score", str(data), "--model", str(model), "--no-plot", "--out", str(out)]) == 0
    capsys.readouterr()
    # The prior says where the training rows end, so the scored stream's statistics know when it leaves them.
    assert load_engine(model, "cpu").card.detector_prior["rows"] == 150
    with out.open(newline="") as fh:
        table = list(csv.DictReader(fh))  # an alert's explanation is JSON, commas included
    assert len(table) == len(values)
    raw = np.array([float(r["raw"]) if r["raw"] else np.nan for r in table])
    assert np.isfinite(raw[200:]).all()  # every reading after warm-up is scored, none turns into NaN or inf
    alerts = np.flatnonzero([r["alert"] == "1" for r in table])
    assert 700 in alerts or 701 in alerts, alerts
    assert len(alerts) <= 4, alerts  # the spike and at most three others in 850 scored readings


def test_no_weight_average_infers_with_the_last_weights():
    from trep_edge.training.commands import train

    parser = argparse.ArgumentParser(prog="trep-edge")
    train.add_parser(parser.add_subparsers(dest="command"))
    assert train.config_from_args(parser.parse_args(["train", "x.npy"])).average_weights
    assert not train.config_from_args(parser.parse_args(["train", "x.npy", "--no-weight-average"])).average_weights
