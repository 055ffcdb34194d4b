"""Promotion's verdict and its atomic install (the full path runs in test_retrain_end_to_end.py); the history every
install keeps, and ``trep-edge rollback`` (a real daemon sees the previous sha256 come back)."""
from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import shutil
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from broker import broker, collectors, daemon_tables, daemons, publish, toml_text  # noqa: F401 - fixtures

from trep_edge.cli import main as cli
from trep_edge.datasets.paths import data_root
from trep_edge.runtime.service.archive import ArchiveHeader, ArchiveRecorder, declare_archive_metrics
from trep_edge.runtime.service.checkpoint import save_checkpoint
from trep_edge.runtime.service.config import ArchiveConfig, MonitorConfig, StateConfig
from trep_edge.runtime.core.detector import DetectorConfig
from trep_edge.runtime.core.engine import file_sha256, load_engine
from trep_edge.runtime.service.http_status import Metrics
from trep_edge.runtime.core.model_card import sidecar_path
from trep_edge.runtime.core.monitor import Monitor
from trep_edge.runtime.core.reading import Reading
from trep_edge.training.promote import (AlertRate, history_folder, install, install_with_history, kept_models,
                                        refusals, rollback)
from trep_edge.training.shadow import shadow_monitors
from trep_edge.training.trainer import resolve_checkpoint


def test_a_candidate_alerting_much_more_than_the_running_model_is_refused():
    running = AlertRate(alerts=10, scored=10_000)  # 0.001 per reading
    assert refusals(True, 1e-6, AlertRate(19, 10_000), running, max_ratio=2, min_rate=0.001) == []
    (reason,) = refusals(True, 1e-6, AlertRate(25, 10_000), running, max_ratio=2, min_rate=0.001)
    assert "alert rate on the last day 0.0025 > 2 x the running model's 0.0010" in reason


def test_a_quiet_running_model_does_not_make_a_few_alerts_fatal_but_bad_parity_is():
    quiet = AlertRate(alerts=0, scored=10_000)
    assert refusals(True, 1e-6, AlertRate(5, 10_000), quiet, max_ratio=2, min_rate=0.001) == []
    assert refusals(True, 1e-6, AlertRate(50, 10_000), quiet, max_ratio=2, min_rate=0.001)
    assert refusals(True, 1e-6, AlertRate(50, 10_000), None, max_ratio=2, min_rate=0.001) == []  # first model
    assert "parity" in refusals(False, 3e-3, AlertRate(0, 1), quiet, 2, 0.001)[0]


def test_install_replaces_card_and_model_atomically_and_readably(tmp_path):
    staged, target = tmp_path / "staged" / "m.onnx", tmp_path / "models" / "m.onnx"
    staged.parent.mkdir()
    target.parent.mkdir()
    staged.write_bytes(b"new model")
    sidecar_path(staged).write_text("new card")
    target.write_bytes(b"old model")
    install(staged, target)
    assert target.read_bytes() == b"new model" and sidecar_path(target).read_text() == "new card"
    assert oct(os.stat(target).st_mode & 0o777) == "0o644"
    assert sorted(p.name for p in target.parent.iterdir()) == ["m.card.json", "m.onnx"]  # no temp file left


def test_an_exported_model_without_its_checkpoint_beside_it_is_refused_with_what_to_do(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"its checkpoint .*m\.pt \(same name, \.pt\) is needed"):
        resolve_checkpoint(tmp_path / "m.onnx")
    assert resolve_checkpoint(tmp_path / "run.pt") == tmp_path / "run.pt"  # a checkpoint is taken as given


# -- history and rollback ------------------------------------------------------------------------------------------

TINY = ["--repr-dims", "16", "--hidden-dims", "24", "--depth", "3", "--batch-size", "8", "--max-train-length", "256"]
TOPIC = "sensors/{stream}/telemetry"


@dataclass
class Promotable:
    """Two candidates exported from one tiny checkpoint (beta 4 and 5: other cards, other files) and an archive."""

    a: Path
    b: Path
    checkpoint: Path
    archive: Path


@pytest.fixture(scope="module")
def promotable(built_once, ucr_series) -> Promotable:
    """Trained and exported with the CLI, as an operator would; the archive holds 1,500 normal readings of UCR 135
    recorded by the daemon's own archive writer (every promotion scores them one by one with each model)."""

    def build(ready: Path) -> Path:
        folder = ready.parent
        data = data_root() / "UCR_Anomaly/135_UCR_Anomaly_InternalBleeding16_1200_4187_4199.txt"
        ckpt = folder / "run.pt"
        assert cli(["train", str(data), "--iterations", "15", *TINY, "--out", str(ckpt), "--no-progress"]) == 0
        for model, beta in ((folder / "a.onnx", "4"), (folder / "b.onnx", "5")):
            assert cli(["export", str(ckpt), "--out", str(model), "--window", "64", "--beta", beta,
                        "--calibration-steps", "500", "--graphs", "none"]) == 0  # fmt: skip
        metrics = Metrics()
        declare_archive_metrics(metrics)
        recorder = ArchiveRecorder(ArchiveConfig(enabled=True, path=str(folder / "archive"), queue_size=8192), metrics)
        recorder.start(ArchiveHeader(("value",), "ucr135", "0" * 64, 1.0))
        t0 = float(int(time.time())) - 1500
        for i, value in enumerate(ucr_series.values[:1500]):
            recorder.record("ucr135", t0 + i, {"value": float(value)})
        recorder.close()
        assert metrics.value("trep_edge_archived_total") == 1500
        ready.write_text("built\n")
        return ready

    folder = built_once("promotable.ready", build).parent
    return Promotable(folder / "a.onnx", folder / "b.onnx", folder / "run.pt", folder / "archive")


def _run(capsys, argv: list[str]) -> tuple[int, str, str]:
    """Run the CLI: (exit code, stdout, stderr)."""
    code = cli([str(a) for a in argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _json(capsys, argv: list) -> dict:
    return _report(*_run(capsys, argv))


def _report(code: int, out: str, err: str) -> dict:
    """The JSON a successful command printed."""
    assert code == 0, out + err
    return json.loads(out[out.index("{") :])


def _promote_argv(p: Promotable, candidate: Path, target: Path, *flags) -> list:
    return ["promote", candidate, "--archive", p.archive, "--target", target, "--checkpoint", p.checkpoint,
            "--calibration-steps", "500", "--max-alert-ratio", "10", "--min-alert-rate", "0.05", *flags]


def _promote(capsys, p: Promotable, candidate: Path, target: Path, *flags) -> dict:
    return _installed(_json(capsys, _promote_argv(p, candidate, target, *flags)), target)


def _installed(report: dict, target: Path) -> dict:
    """``report``, checked to say the candidate is installed at ``target``."""
    assert report["installed"] and report["sha256"] == file_sha256(target), report
    return report


@dataclass
class Installed:
    """A target's folder after promoting a, then b (its history included): the two reports, a's bytes and card."""

    folder: Path
    first: dict
    second: dict
    a_bytes: bytes
    a_card: bytes

    def copy(self, tmp_path: Path) -> Path:
        """A copy of the folder under ``tmp_path`` for one test to change: the copy's installed model file."""
        shutil.copytree(self.folder, tmp_path / "models")
        return tmp_path / "models" / "current.onnx"


@pytest.fixture(scope="module")
def installed_twice(built_once, promotable) -> Installed:
    """Two promotions (about 10 s each), done once per test run and copied by the tests that roll them back."""

    def promote(candidate: Path, target: Path) -> dict:
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = cli([str(a) for a in _promote_argv(promotable, candidate, target)])
        return _installed(_report(code, out.getvalue(), err.getvalue()), target)

    def build(reports: Path) -> Path:
        target = reports.parent / "models" / "current.onnx"
        first = promote(promotable.a, target)
        shutil.copyfile(target, reports.parent / "a.onnx")
        shutil.copyfile(sidecar_path(target), reports.parent / "a.card.json")
        second = promote(promotable.b, target)
        assert second["sha256"] != first["sha256"]
        reports.write_text(json.dumps([first, second]))
        return reports

    reports = built_once("installed_twice.json", build)
    first, second = json.loads(reports.read_text())
    a_bytes, a_card = (reports.parent / "a.onnx").read_bytes(), (reports.parent / "a.card.json").read_bytes()
    return Installed(reports.parent / "models", first, second, a_bytes, a_card)


def test_rollback_restores_the_first_promoted_model_exactly_and_the_history_lists_both(tmp_path, capsys,
                                                                                      installed_twice):  # fmt: skip
    target = installed_twice.copy(tmp_path)
    first, second = installed_twice.first, installed_twice.second
    a_bytes, a_card = installed_twice.a_bytes, installed_twice.a_card
    assert first["history"]["previous_sha256"] is None and second["history"]["previous_sha256"] == first["sha256"]
    listed = _json(capsys, ["rollback", "--list", "--target", target])
    assert listed["installed_sha256"] == second["sha256"]
    assert [r["sha256"] for r in listed["installs"]] == [second["sha256"], first["sha256"]]  # newest first
    assert all(r["command"] == "promote" and r["verdict"] == "accepted" for r in listed["installs"])
    assert listed["installs"][0]["card"]["name"] == "b" and listed["installs"][0]["card"]["window"] == 64
    assert [k["sha256"] for k in listed["kept"]] == [first["sha256"]]  # the model the second install replaced

    record = _json(capsys, ["rollback", "--target", target])
    assert record["sha256"] == first["sha256"] and record["previous_sha256"] == second["sha256"]
    assert target.read_bytes() == a_bytes and file_sha256(target) == first["sha256"]
    assert sidecar_path(target).read_bytes() == a_card
    assert load_engine(target, "cpu").card.scoring.beta == 4.0  # the model and its card agree (the daemon checks)
    listed = _json(capsys, ["rollback", "--list", "--target", target])
    assert [r["verdict"] for r in listed["installs"]] == ["rollback", "accepted", "accepted"]
    assert {k["sha256"] for k in listed["kept"]} == {first["sha256"], second["sha256"]}
    assert not list(target.parent.glob(".*.tmp")) and not list(history_folder(target).rglob(".*.tmp"))


def test_a_rollback_of_a_rollback_returns_to_the_second_model(tmp_path, capsys, installed_twice):
    target = installed_twice.copy(tmp_path)
    first, second = installed_twice.first, installed_twice.second
    b_bytes, b_card = target.read_bytes(), sidecar_path(target).read_bytes()
    assert _json(capsys, ["rollback", "--target", target])["sha256"] == first["sha256"]
    assert _json(capsys, ["rollback", "--target", target])["sha256"] == second["sha256"]
    assert target.read_bytes() == b_bytes and sidecar_path(target).read_bytes() == b_card
    # Going back and forth keeps one copy per model; --to picks any kept model by a prefix of its sha256.
    assert len(kept_models(target)) == 2
    assert _json(capsys, ["rollback", "--target", target, "--to", first["sha256"][:8]])["sha256"] == first["sha256"]


def test_keep_bounds_the_kept_models_and_the_records_oldest_removed_first(tmp_path, capsys, promotable):
    target = tmp_path / "models" / "current.onnx"
    # --days changes the calibration source in the card, so each promotion installs another file.
    shas = [_promote(capsys, promotable, promotable.a, target, "--days", days, "--keep", "2")["sha256"]
            for days in ("7", "6", "5", "4")]  # fmt: skip
    assert len(set(shas)) == 4
    assert [k.sha256 for k in kept_models(target)] == shas[1:3]  # the replaced ones, the oldest deleted
    listed = _json(capsys, ["rollback", "--list", "--target", target])
    assert [r["sha256"] for r in listed["installs"]] == [shas[3], shas[2]]
    folders = [p for p in history_folder(target).iterdir() if p.is_dir()]
    assert len(folders) == 2
    _json(capsys, ["rollback", "--target", target, "--keep", "1"])
    assert [k.sha256 for k in kept_models(target)] == [shas[3]] and file_sha256(target) == shas[2]


def _fake_history(tmp_path, installs: int) -> Path:
    """A target installed ``installs`` times from small files (the history does not read the model's content)."""
    target = tmp_path / "models" / "m.onnx"
    target.parent.mkdir(parents=True)
    for i in range(installs):
        staged = tmp_path / f"staged-{i}" / "m.onnx"
        staged.parent.mkdir()
        staged.write_bytes(b"model %d" % i)
        sidecar_path(staged).write_text(json.dumps({"name": f"m{i}"}))
        install_with_history(staged, target, keep=100, command="test")
    return target


def test_bad_rollback_input_exits_2_with_one_line_naming_what_to_fix(tmp_path, capsys):
    def error(*argv) -> str:
        code, out, err = _run(capsys, ["rollback", *argv])
        assert code == 2 and out == "" and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
        assert err.startswith("trep-edge rollback: error: ")
        return err

    missing = tmp_path / "models" / "absent.onnx"
    assert f"{missing} does not exist: --target must name the installed model file" in error("--target", missing)
    alone = tmp_path / "alone.onnx"
    alone.write_bytes(b"a model installed by hand")
    assert f"no model history for {alone}" in error("--target", alone)
    assert f"no model history for {alone}" in error("--target", alone, "--list")
    once = _fake_history(tmp_path / "once", 1)
    assert "no model is kept" in error("--target", once)

    target = _fake_history(tmp_path, 18)  # 17 kept models: two share a first hex digit
    kept = [k.sha256 for k in kept_models(target)]
    assert len(kept) == 17
    everything = [*kept, file_sha256(target)]
    shared = next(c for c in "0123456789abcdef" if sum(s.startswith(c) for s in kept) > 1)
    assert f"--to '{shared}' is ambiguous" in error("--target", target, "--to", shared)
    unknown = next(f"{i:02x}" for i in range(256) if not any(s.startswith(f"{i:02x}") for s in everything))
    assert f"--to '{unknown}': no model kept for {target}" in error("--target", target, "--to", unknown)
    assert "is the model installed at" in error("--target", target, "--to", file_sha256(target))
    assert "--keep 0: keep at least 1 model" in error("--target", target, "--keep", "0")
    assert target.read_bytes() == b"model 17" and len(kept_models(target)) == 17  # nothing changed
    with pytest.raises(SystemExit) as exc:  # argparse's own usage error, also exit 2
        cli(["rollback", "--target", str(target), "--list", "--to", "ab"])
    assert exc.value.code == 2 and "not allowed with argument" in capsys.readouterr().err


def test_a_model_that_ran_without_a_card_sidecar_comes_back_without_one(tmp_path):
    target = tmp_path / "m.onnx"
    target.write_bytes(b"old model, card inside only")
    staged = tmp_path / "staged" / "m.onnx"
    staged.parent.mkdir()
    staged.write_bytes(b"new model")
    sidecar_path(staged).write_text("new card")
    install_with_history(staged, target)
    assert sidecar_path(target).read_text() == "new card"
    rollback(target)
    assert target.read_bytes() == b"old model, card inside only" and not sidecar_path(target).exists()
    rollback(target)
    assert target.read_bytes() == b"new model" and sidecar_path(target).read_text() == "new card"


def test_a_running_daemon_reports_the_previous_sha256_after_a_rollback(tmp_path, capsys, installed_twice, broker,
                                                                        daemons, collectors):  # fmt: skip
    target = installed_twice.copy(tmp_path)
    first, second = installed_twice.first, installed_twice.second
    daemon = daemons(tmp_path / "daemon", daemon_tables(broker, target, tmp_path / "daemon"))  # [model] watch: on
    daemon.start()
    daemon.wait_http("/readyz")
    out = collectors(broker.port, ["trep-edge/#"])
    status_topic = "trep-edge/status/" + daemon.tables["mqtt"]["client_id"]

    def status_says(sha: str):
        def check(c):
            messages = c.select(status_topic)
            return messages and messages[-1].json()["model_sha256"] == sha and messages[-1].json()
        return out.wait_for(check, timeout=30, what=f"model_sha256 {sha[:12]} on {status_topic}")

    status_says(second["sha256"])
    _json(capsys, ["rollback", "--target", target])
    assert status_says(first["sha256"])["model_error"] is None
    _json(capsys, ["rollback", "--target", target])  # and back again
    assert status_says(second["sha256"])["model_error"] is None
    assert daemon.metrics()['trep_edge_model_reloads_total{result="ok"}'] == 2
    assert daemon.alive() and "refused" not in daemon.log_text()


# -- shadow scoring -----------------------------------------------------------------------------------------------


def test_a_shadow_run_scores_live_traffic_with_both_models_reports_it_beside_the_history_then_installs(
        tmp_path, capsys, caplog, promotable, broker, ucr_series):  # fmt: skip
    target = tmp_path / "models" / "current.onnx"
    target.parent.mkdir()
    install(promotable.a, target)  # the model the daemon runs
    # The daemon's config: its broker and topics, a short warm-up; no daemon runs (the shadow is a client of its own).
    config = tmp_path / "monitor.toml"
    config.write_text(toml_text(daemon_tables(broker, target, tmp_path, detector={"min_count": 10, "prior_weight": 0})))
    caplog.set_level(logging.INFO, logger="trep_edge.training.shadow")
    streams, t0, values = ("bed1", "bed2", "bed3"), float(int(time.time())) - 100, ucr_series.values[:40]
    published = []

    def publisher() -> None:  # once the shadow's subscription is acknowledged: 3 streams x 40 readings
        deadline = time.monotonic() + 60
        while not any("shadow: subscribed" in r.getMessage() for r in caplog.records) and time.monotonic() < deadline:
            time.sleep(0.02)
        items = [(TOPIC.format(stream=s), json.dumps({"ts": t0 + i, "values": {"value": float(v)}}))
                 for i, v in enumerate(values) for s in streams]  # fmt: skip
        publish(broker.port, items)
        published.extend(items)

    thread = threading.Thread(target=publisher)
    thread.start()
    report = _promote(capsys, promotable, promotable.b, target, "--shadow", "0.001", "--config", config)
    thread.join()
    shadow = report["shadow"]
    assert len(published) == 120 and shadow["messages"] == 120 and shadow["streams"] == 3
    installed, candidate = shadow["models"]["installed"], shadow["models"]["candidate"]
    assert installed["readings"] == candidate["readings"] == 120
    assert installed["sha256"] == report["history"]["previous_sha256"] and candidate["sha256"] == report["sha256"]
    # One checkpoint, two cards (beta 4 and 5, which the detector does not read): the same decisions on every reading.
    assert 0 < installed["scored"] == candidate["scored"] < 120 and installed["alerts"] == candidate["alerts"]
    assert shadow["surprise_difference"]["readings"] == installed["scored"]
    assert shadow["surprise_difference"]["p95_abs"] == 0.0
    # The report sits beside the history, is named by the install's record, and says it in words too.
    path = Path(shadow["report"])
    assert path.parent == history_folder(target) and path.name.endswith(f"-{report['sha256'][:12]}.json")
    assert json.loads(path.read_text())["models"] == shadow["models"]
    assert "120 messages, 3 streams" in path.with_suffix(".txt").read_text()
    assert report["history"]["checks"]["shadow_report"] == str(path)
    assert file_sha256(target) == report["sha256"] and kept_models(target)[-1].sha256 == installed["sha256"]


def test_the_shadow_starts_both_models_warm_from_the_daemons_checkpoint(tmp_path, promotable, ucr_series):
    installed, candidate = load_engine(promotable.a, "cpu"), load_engine(promotable.b, "cpu")
    config = MonitorConfig(state=StateConfig(path=str(tmp_path / "state.npz")),
                           detector=DetectorConfig(min_count=10, prior_weight=0))  # fmt: skip
    assert shadow_monitors(config, installed, candidate)[1] is None  # no checkpoint yet: a cold start
    daemon = Monitor(installed, config.windows, config.alerts, config.detector)
    for i, v in enumerate(ucr_series.values[:40]):
        daemon.ingest(Reading("bed1", 1_700_000_000.0 + i, {"value": float(v)}))
    daemon.tick(1_700_000_040.0)
    save_checkpoint(config.state.path, daemon.state_dict(), {})
    monitors, warm_from = shadow_monitors(config, installed, candidate)
    assert warm_from == config.state.path
    assert {role: (m.engine.sha256, m.streams) for role, m in monitors.items()} == {
        "installed": (installed.sha256, {"bed1": "active"}), "candidate": (candidate.sha256, {"bed1": "active"})}


def test_bad_shadow_input_exits_2_before_any_check_runs(tmp_path, capsys, promotable):
    target = tmp_path / "current.onnx"
    for flags, message in ((["--shadow", "0", "--config", "monitor.toml"], "--shadow 0.0: give the hours"),
                           (["--shadow", "1"], "--shadow needs the daemon's --config")):  # fmt: skip
        code, out, err = _run(capsys, ["promote", promotable.b, "--archive", promotable.archive, "--target", target,
                                       *flags])  # fmt: skip
        assert code == 2 and out == "" and message in err and not target.exists(), err
