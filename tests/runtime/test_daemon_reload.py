"""Reloading a running daemon: a model file change or SIGHUP swaps model and config atomically; a bad model or a
bad config is refused, logged and reported on the status topic while the old one keeps scoring."""
from __future__ import annotations

import json
import math
import os
import signal
import time

import pytest
from broker import broker, collectors, daemon_tables, daemons, publish, toml_text  # noqa: F401 - fixtures

from trep_edge.runtime.core.engine import file_sha256
from trep_edge.runtime.core.model_card import ModelCard
from trep_edge.runtime.core.model_file import METADATA_KEY

TOPIC = "sensors/{stream}/telemetry"


def _renamed_copy(source, target, name: str) -> None:
    """The same graph with another card name: a different, valid model file (other sha256)."""
    onnx = pytest.importorskip("onnx")
    model = onnx.load(str(source))
    entry = next(p for p in model.metadata_props if p.key == METADATA_KEY)
    card = ModelCard.from_json(entry.value)
    card.name = name
    entry.value = card.to_json()
    onnx.save(model, str(target))


def _replace(path, data_or_source) -> None:
    """Swap a file atomically, as a deployment should (a half-written file is refused and retried anyway)."""
    tmp = path.with_name(path.name + ".new")
    if isinstance(data_or_source, bytes):
        tmp.write_bytes(data_or_source)
    else:
        tmp.write_bytes(data_or_source.read_bytes())
    os.replace(tmp, path)


def test_model_change_and_sighup_reload_atomically_and_refuse_bad_input(tmp_path, broker, daemons, collectors,
                                                                         univariate_model):  # fmt: skip
    model = tmp_path / "model.onnx"
    model.write_bytes(univariate_model.read_bytes())
    sha_a = file_sha256(model)
    daemon = daemons(tmp_path, daemon_tables(broker, model, tmp_path))
    daemon.start()
    daemon.wait_http("/readyz")
    out = collectors(broker.port, ["trep-edge/#"])
    status_topic = "trep-edge/status/" + daemon.tables["mqtt"]["client_id"]
    t0 = float(int(time.time()))

    def status():
        return out.select(status_topic)[-1].json()

    def scored(ts: float) -> dict:
        publish(broker.port, [(TOPIC.format(stream="s1"), json.dumps({"ts": ts, "values": {"value": 63.0}}))])
        def score_of(c):
            return next((m.json() for m in c.select("trep-edge/scores/s1") if m.json()["timestamp"] == ts), None)

        return out.wait_for(score_of, what=f"the score of the reading at {ts}")

    scored(t0)
    assert status()["model_sha256"] == sha_a and status()["model_error"] is None

    # 1. A corrupt model file is refused; the old model keeps running and the status says why.
    _replace(model, b"this is not an onnx model")
    out.wait_for(lambda c: status()["model_error"], what="the refusal on the status topic")
    assert "refused reload (model file changed)" in status()["model_error"] and status()["model_sha256"] == sha_a
    assert daemon.metrics()['trep_edge_model_reloads_total{result="refused"}'] == 1
    assert scored(t0 + 1)["raw"] is not None

    # 2. A valid new model is swapped in: same inputs, so the stream keeps its window.
    _renamed_copy(univariate_model, tmp_path / "b.onnx", "ucr135-b")
    _replace(model, tmp_path / "b.onnx")
    out.wait_for(lambda c: status()["model"] == "ucr135-b", what="the new model on the status topic")
    assert status()["model_sha256"] == file_sha256(model) != sha_a and status()["model_error"] is None
    assert f'sha256="{file_sha256(model)}"' in " ".join(daemon.metrics())
    assert scored(t0 + 2)["raw"] is not None

    # 3. SIGHUP with a broken config file: refused, still running with the last good settings.
    revision = status()["config_revision"]
    good_config = daemon.config.read_text()
    daemon.config.write_text(good_config + "\n[alerts\n")
    daemon.send(signal.SIGHUP)
    out.wait_for(lambda c: status()["model_error"] and "SIGHUP" in status()["model_error"], what="the SIGHUP refusal")
    assert "not valid TOML" in status()["model_error"] and daemon.alive()

    # 4. SIGHUP with a good change: applied, and the status carries the new config revision.
    tables = dict(daemon.tables, alerts={"clear_after": 5})
    daemon.config.write_text(toml_text(tables))
    daemon.send(signal.SIGHUP)
    out.wait_for(lambda c: status()["config_revision"] != revision and status()["model_error"] is None,
                 what="the new config revision")  # fmt: skip
    assert daemon.metrics()['trep_edge_model_reloads_total{result="ok"}'] == 2
    assert scored(t0 + 3)["raw"] is not None
    assert "reloaded (SIGHUP)" in daemon.log_text()


def test_a_swap_to_a_model_with_the_same_inputs_leaves_no_stream_unscored_and_every_one_alert_capable(
        tmp_path, broker, daemons, collectors, univariate_model):  # fmt: skip
    model = tmp_path / "model.onnx"
    model.write_bytes(univariate_model.read_bytes())
    daemon = daemons(tmp_path, daemon_tables(broker, model, tmp_path, detector={"min_count": 20, "prior_weight": 0}))
    daemon.start()
    daemon.wait_http("/readyz")
    out = collectors(broker.port, ["trep-edge/#"])
    status_topic = "trep-edge/status/" + daemon.tables["mqtt"]["client_id"]
    t0, streams = float(int(time.time())) - 100, ("s1", "s2")

    def send(t: int, faulty: str = "") -> None:
        publish(broker.port, [(TOPIC.format(stream=s), json.dumps({"ts": t0 + t, "values": {
            "value": math.cos(t) + (1000.0 if s == faulty else 0.0)}})) for s in streams])  # fmt: skip

    def scores(t: int) -> list[dict]:
        def both(c):
            got = [m.json() for s in streams for m in c.select(f"trep-edge/scores/{s}") if m.json()["step"] == t0 + t]
            return len(got) == 2 and got
        return out.wait_for(both, what=f"the scores of step {t}")

    for t in range(60):
        send(t)
    before = scores(59)
    assert [s["warming"] for s in before] == [False, False]
    # A re-export: the same graph with another card (another file, same input contract).
    _renamed_copy(univariate_model, tmp_path / "b.onnx", "ucr135-b")
    _replace(model, tmp_path / "b.onnx")
    out.wait_for(lambda c: c.select(status_topic)[-1].json()["model"] == "ucr135-b", what="the swap")
    send(60, faulty="s2")
    after = scores(60)
    assert [(s["stream"], s["warming"], s["alert"]) for s in after] == [("s1", False, False), ("s2", False, True)]
    assert all(s["score"] is not None for s in after)

    def anomalies(c):
        return [m.json() for m in c.select("trep-edge/alerts/") if m.json()["kind"] == "anomaly"]

    raised = out.wait_for(anomalies, what="the alert of s2")
    assert [(m["alert_id"], m["state"], m["model"]["name"]) for m in raised] == [("s2-1", "raised", "ucr135-b")]
    assert "relearnt the model signals of 2 lanes" in daemon.log_text()
    assert daemon.metrics()['trep_edge_streams{state="warming"}'] == 0
