"""``trep-edge score``: a recorded file scored offline into a CSV and a PNG, with the daemon's alert episodes."""
from __future__ import annotations

import csv
import dataclasses
import subprocess
import sys

import numpy as np
import pytest
from ucr_files import write_ucr

from trep_edge.runtime.core.detector import DetectorConfig
from trep_edge.runtime.core.offline import detect_recording
from trep_edge.runtime.core.windows import WindowConfig
from trep_edge.runtime.service.replay import RecordedSeries, load_series
from trep_edge.runtime.service.score_file import score_recording, write_csv, write_plot


STRICT = DetectorConfig(threshold=5.0, signals=("distance", "novelty"), horizon=2000)  # the tiny model alerts on its own
# noise (and on the periodic beats of this series) with the default settings


def _spiked(ucr_series, at=(1500, 1503)) -> RecordedSeries:
    """Steps 4000..5799 of UCR 135 (a slice keeps the test fast) with a labelled 3-point spike injected."""
    values = ucr_series.values[4000:5800].copy()
    values[at[0] : at[1]] += 200.0  # about 15 of the model's normalisation scales
    labels = np.zeros(len(values), dtype=bool)
    labels[at[0] : at[1]] = True
    return RecordedSeries("spiked", ["value"], values.reshape(-1, 1), labels)


def test_scores_are_the_offline_protocol_and_episodes_follow_them(univariate_engine, ucr_series):
    series = _spiked(ucr_series)
    result = score_recording(univariate_engine, series, detector=STRICT)
    expected = detect_recording(univariate_engine, series.values, STRICT)
    np.testing.assert_array_equal(result.raw, expected.raw)
    np.testing.assert_array_equal(result.score, expected.score)
    np.testing.assert_array_equal(result.surprise, expected.surprise)
    np.testing.assert_array_equal(result.alerts, expected.alerts)
    assert result.threshold == STRICT.threshold and result.channel == [""] * len(series.values)
    # The score passes the threshold exactly where the detector alerts; the surprise is the continuous view.
    np.testing.assert_array_equal(np.nan_to_num(result.score, nan=0) >= STRICT.threshold, result.alerts)
    # The card's prior stands for the default warm-up except its first min_warmup readings (mostly padded windows).
    assert result.warming.sum() == STRICT.min_warmup - 1 and result.warming[: STRICT.min_warmup - 1].all()
    raised = [e for e in result.events if e[1] == "raised"]
    assert raised and raised[0][0] in range(1500, 1503) and raised[0][3] == "spiked-1"
    assert [e[1] for e in result.events] == ["raised", "cleared"]  # one episode, closed after the spike


def test_debounce_changes_the_alerts_and_episodes_not_the_scores(univariate_engine, ucr_series):
    series = _spiked(ucr_series, at=(1500, 1501))  # one point: cannot persist for 2 readings
    plain = score_recording(univariate_engine, series, detector=STRICT)
    debounced = score_recording(univariate_engine, series, detector=dataclasses.replace(STRICT, debounce=2))
    np.testing.assert_array_equal(plain.surprise, debounced.surprise)
    assert plain.events and not debounced.events
    assert plain.alerts[1500] and not debounced.alerts[1500]


def test_csv_has_one_row_per_step_with_scores_events_and_labels(tmp_path, univariate_engine, ucr_series):
    cold = DetectorConfig(prior_weight=0)  # the first two steps have no score: written as empty cells
    result = score_recording(univariate_engine, _spiked(ucr_series), detector=cold)
    write_csv(result, tmp_path / "out.csv")
    with open(tmp_path / "out.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert list(rows[0]) == ["step", "value", "raw", "score", "surprise", "threshold", "alert", "warming", "channel",
                             "event", "severity", "alert_id", "cause", "explanation", "label"]  # fmt: skip
    assert len(rows) == 1800
    assert [r["surprise"] for r in rows[:2]] == ["", ""] and float(rows[300]["score"]) == result.score[300]
    assert rows[50]["score"] == "" and float(rows[50]["surprise"]) == result.surprise[50]  # no score while warming
    assert (rows[0]["warming"], rows[200]["warming"], rows[0]["channel"]) == ("1", "0", "")
    assert [int(r["step"]) for r in rows if r["event"]] == [e[0] for e in result.events]
    assert [int(r["step"]) for r in rows if r["label"] == "1"] == [1500, 1501, 1502]


def test_csv_keeps_every_event_of_a_step(tmp_path, univariate_engine, ucr_series):
    result = score_recording(univariate_engine, _spiked(ucr_series), detector=STRICT)
    events = [(7, "raised", "", "ucr/sensor:value", "stuck"), (7, "raised", "high", "ucr-1", "anomaly"),
              (9, "cleared", "", "ucr-1", "anomaly")]
    write_csv(dataclasses.replace(result, events=events), tmp_path / "out.csv")
    with open(tmp_path / "out.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 1800 and [r["step"] for r in rows if r["event"]] == ["7", "9"]
    assert [rows[7][k] for k in ("event", "severity", "alert_id", "cause")] == [
        "raised; raised", "; high", "ucr/sensor:value; ucr-1", "stuck; anomaly"]
    assert [rows[9][k] for k in ("event", "alert_id")] == ["cleared", "ucr-1"]


def test_plot_is_written(tmp_path, univariate_engine, ucr_series):
    pytest.importorskip("matplotlib")
    write_plot(score_recording(univariate_engine, _spiked(ucr_series)), tmp_path / "plot.png")
    data = (tmp_path / "plot.png").read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000


def test_missing_model_channel_is_a_clear_error(univariate_engine):
    series = RecordedSeries("x", ["HR"], np.zeros((10, 1), dtype=np.float32))
    with pytest.raises(ValueError, match=r"no column\(s\) \['value'\].*--rename"):
        score_recording(univariate_engine, series)


def test_score_command_writes_csv_and_png(tmp_path, univariate_model, ucr_series):
    pytest.importorskip("matplotlib")
    (tmp_path / "m.toml").write_text("[alerts]\nclear_after = 5\n")
    # The archive file cut after its labelled anomaly (4,500 of 7,501 readings keep the test quick); its name still
    # gives the split and the labels.
    data = tmp_path / "135_UCR_Anomaly_InternalBleeding16_1200_4187_4199.txt"
    write_ucr(data, ucr_series.values[:4500])
    cmd = [sys.executable, "-m", "trep_edge.cli", "score", str(data), "--model", str(univariate_model),
           "--out", str(tmp_path / "s.csv"), "--config", str(tmp_path / "m.toml"),
           "--providers", "cpu"]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "labelled anomaly steps 4186..4198" in done.stdout
    assert (tmp_path / "s.csv").stat().st_size > 100_000 and (tmp_path / "s.png").stat().st_size > 20_000
    assert f"PNG: {tmp_path / 's.png'}" in done.stdout


def test_a_labelled_csv_scores_as_the_same_csv_without_its_label_column(tmp_path, univariate_engine, ucr_series):
    series = _spiked(ucr_series)
    body = [f"{v:.6g}" for v in series.values[:, 0]]
    plain, labelled = tmp_path / "plain.csv", tmp_path / "labelled.csv"
    plain.write_text("value\n" + "\n".join(body) + "\n")
    labelled.write_text("value,is_anomaly\n" + "\n".join(f"{v},{int(a)}" for v, a in zip(body, series.labels)) + "\n")
    (without,), (with_labels,) = load_series(plain), load_series(labelled)
    assert with_labels.channels == without.channels == ["value"]
    np.testing.assert_array_equal(with_labels.labels, series.labels)
    a = score_recording(univariate_engine, without, detector=STRICT)
    b = score_recording(univariate_engine, with_labels, detector=STRICT)
    np.testing.assert_array_equal(a.score, b.score)
    np.testing.assert_array_equal(a.alerts, b.alerts)
    assert a.labels is None and b.labels is not None and b.labels.sum() == 3


def _timed_csv(path, values: np.ndarray, seconds: np.ndarray) -> None:
    """A ``timestamp,value`` CSV as a plant historian exports it (ISO times, UTC)."""
    stamps = (np.datetime64("2026-03-01T00:00:00") + seconds.astype("timedelta64[s]")).astype(str)
    path.write_text("timestamp,value\n" + "".join(f"{t},{v:.6g}\n" for t, v in zip(stamps, values[:, 0])))


def test_by_time_an_outage_resets_the_stream_as_the_daemon_would(tmp_path, univariate_engine, ucr_series):
    values = ucr_series.values[4000:5200].reshape(-1, 1)
    seconds = np.arange(len(values)) * 60.0
    seconds[700:] += 6 * 3600  # six hours without readings: far more than max_gap steps of one minute
    _timed_csv(tmp_path / "outage.csv", values, seconds)
    (series,) = load_series(tmp_path / "outage.csv")
    np.testing.assert_array_equal(series.timestamps - series.timestamps[0], seconds)
    windows = WindowConfig(period=60.0)
    by_time = score_recording(univariate_engine, series, detector=STRICT, windows=windows)
    # The daemon's monitor fed the same readings at the same times (the grid starts at the first reading).
    monitor = detect_recording(univariate_engine, series.values, STRICT, windows=windows, timestamps=seconds)
    np.testing.assert_array_equal(by_time.surprise, monitor.surprise)
    np.testing.assert_array_equal(by_time.alerts, monitor.alerts)
    by_row = score_recording(univariate_engine, series, detector=STRICT)
    np.testing.assert_array_equal(by_row.surprise[:700], by_time.surprise[:700])
    # Back from the outage: the first readings that far ahead are set aside until jump_confirm of them confirm the
    # jump (a clock slip would not), then the stream warms up again; by position it never stopped.
    confirm = windows.jump_confirm
    assert np.isnan(by_time.raw[700 : 700 + confirm - 1]).all() and np.isfinite(by_time.raw[700 + confirm - 1])
    assert by_time.warming[700 : 700 + STRICT.min_warmup].all() and not by_time.warming[-100:].any()
    assert not by_row.warming[700:].any()


def test_by_time_a_short_gap_is_filled_not_reset(tmp_path, univariate_engine, ucr_series):
    values = ucr_series.values[4000:5000].reshape(-1, 1)
    seconds = np.arange(len(values)) * 60.0
    seconds[600:] += 3 * 60  # three missing minutes, within max_gap: the window holds three missing steps
    (series,) = [RecordedSeries("gap", ["value"], values, timestamps=seconds)]
    by_time = score_recording(univariate_engine, series, detector=STRICT, windows=WindowConfig(period=60.0))
    by_row = score_recording(univariate_engine, series, detector=STRICT)
    assert not by_time.warming[600:].any()  # no reset
    np.testing.assert_array_equal(by_time.surprise[:600], by_row.surprise[:600])
    assert not np.array_equal(by_time.raw[600:700], by_row.raw[600:700], equal_nan=True)  # the gap is in the window


def test_by_time_without_timestamps_is_refused(univariate_engine):
    series = RecordedSeries("x", ["value"], np.zeros((10, 1), dtype=np.float32))
    with pytest.raises(ValueError, match="needs timestamps"):
        score_recording(univariate_engine, series, windows=WindowConfig(period=60.0))


def test_score_command_by_time_takes_the_files_period_and_refuses_bad_options(tmp_path, univariate_model, ucr_series):
    values = ucr_series.values[4000:4400].reshape(-1, 1)
    seconds = np.arange(len(values)) * 300.0
    _timed_csv(tmp_path / "plant.csv", values, seconds)
    base = [sys.executable, "-m", "trep_edge.cli", "score", str(tmp_path / "plant.csv"), "--model",
            str(univariate_model), "--no-plot", "--out", str(tmp_path / "s.csv"), "--providers", "cpu"]  # fmt: skip
    done = subprocess.run(base + ["--by-time"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "by time, one step every 300 s" in done.stdout
    into = subprocess.run(base[:-4] + ["--out", str(tmp_path), "--providers", "cpu"], capture_output=True, text=True,
                          timeout=120)  # a folder: the CSV is named after the stream
    assert into.returncode == 0 and f"CSV: {tmp_path / 'plant.csv'}" in into.stdout, into.stderr
    for extra, message in ((["--period", "60"], "add --by-time"), (["--by-time", "--period", "-5"], "positive"),
                           (["--series", "-1"], "counts from 0")):
        bad = subprocess.run(base + extra, capture_output=True, text=True, timeout=120)
        assert bad.returncode != 0 and message in bad.stderr and "Traceback" not in bad.stderr
    (tmp_path / "rows.csv").write_text("value\n" + "".join(f"{v:.6g}\n" for v in values[:, 0]))
    plain = base.copy()
    plain[4] = str(tmp_path / "rows.csv")
    bad = subprocess.run(plain + ["--by-time"], capture_output=True, text=True, timeout=120)
    assert bad.returncode != 0 and "no timestamp column" in bad.stderr and "Traceback" not in bad.stderr


def test_score_takes_the_settings_of_the_route_that_names_its_model(tmp_path, univariate_model, vitals_model):
    from trep_edge.runtime.service.commands.score import _settings_of
    from trep_edge.runtime.service.config import load_config

    (tmp_path / "m.toml").write_text(
        f'[model]\npath = "{vitals_model}"\nengine = "full"\n[detector]\nthreshold = 7.0\n'
        f'[[routes]]\nmatch = "plant/#"\nmodel = "{univariate_model}"\nengine = "step"\n'
        '[routes.detector]\nthreshold = 9.0\n')  # fmt: skip
    config = load_config(tmp_path / "m.toml", env={})
    routed = _settings_of(config, str(univariate_model))
    assert (routed.detector.threshold, routed.model.engine) == (9.0, "step")
    assert _settings_of(config, str(vitals_model)).detector.threshold == 7.0
    other = _settings_of(config, str(tmp_path / "m.toml"))  # a file no model entry names: [model]'s, engine auto
    assert (other.detector.threshold, other.model.engine) == (7.0, "auto")
