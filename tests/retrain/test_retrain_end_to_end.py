"""The retraining loop end to end, against a real Mosquitto: a daemon records a replayed series to its archive,
a model is fine-tuned from the archive, exported, promoted, and hot-swapped while the replay continues, with
every reading scored (none dropped) and the new sha256 on the retained status topic."""
from __future__ import annotations

import json
import threading
import time

from broker import broker, collectors, daemon_tables, daemons  # noqa: F401 - fixtures

from trep_edge.cli import main as cli
from trep_edge.datasets.paths import data_root
from trep_edge.datasets.archive import archive_parts, read_archive, read_part
from trep_edge.runtime.core.engine import file_sha256
from trep_edge.runtime.service.replay import Publisher, load_series, replay


TOPIC = "sensors/{stream}/telemetry"
SWITCH = 3000  # steps replayed before retraining; the rest streams while the new model is promoted
HELD = 500  # the last steps, sent only once the new model is in: the swap always lands mid-stream
STEPS = 4500  # of UCR 135's 7,501: the swap needs a stream that goes on, not a long one
TINY = ["--repr-dims", "16", "--hidden-dims", "24", "--depth", "3", "--batch-size", "8", "--max-train-length", "256"]


def _json_of(capsys, argv: list[str]) -> dict:
    code = cli(argv)
    captured = capsys.readouterr()
    assert code == 0, captured.out + captured.err
    out = captured.out
    return json.loads(out[out.index("{") :])


def test_archive_retrain_promote_hot_swap_without_dropping_a_reading(tmp_path, broker, daemons, collectors, capsys,
                                                                      ucr_series):  # fmt: skip
    data = data_root() / "UCR_Anomaly/135_UCR_Anomaly_InternalBleeding16_1200_4187_4199.txt"
    model, ckpt = tmp_path / "models" / "current.onnx", tmp_path / "models" / "current.pt"
    _json_of(capsys, ["train", str(data), "--iterations", "15", *TINY, "--out", str(ckpt), "--no-progress"])
    _json_of(capsys, ["export", str(ckpt), "--out", str(model), "--window", "64", "--calibration-steps", "1000"])
    sha_before = file_sha256(model)

    archive = tmp_path / "archive"
    tables = daemon_tables(broker, model, tmp_path / "daemon",
                           archive={"enabled": True, "path": str(archive), "flush_seconds": 0.2, "max_part_seconds": 2.0})
    daemon = daemons(tmp_path / "daemon", tables)
    daemon.start()
    daemon.wait_http("/readyz")
    out = collectors(broker.port, ["trep-edge/#"])
    status_topic = "trep-edge/status/" + tables["mqtt"]["client_id"]
    (series,) = load_series(data, stream="ucr135")
    n = STEPS
    t0 = float(int(time.time()))
    publisher = Publisher("127.0.0.1", broker.port)
    publisher.wait_connected()
    swapped = threading.Event()
    try:
        replay([series], publisher, TOPIC, rate=0, t0=t0, limit=SWITCH)
        out.wait_count("trep-edge/scores/ucr135", SWITCH, timeout=40)
        out.wait_for(lambda c: sum(len(s.values) for s in read_archive(archive)) >= SWITCH, timeout=10,
                     what="the first readings in the archive")  # fmt: skip
        assert archive_parts(archive), "no archive part written"

        # Fine-tune from the archive, starting from the running model (its checkpoint sits beside it).
        candidate = tmp_path / "candidate.onnx"
        trained = _json_of(capsys, ["train", str(archive), "--init-from", str(model), "--iterations", "5",
                                    "--exclude-alerts", str(archive), "--out", str(tmp_path / "candidate.pt"),
                                    "--no-progress"])  # fmt: skip
        assert trained["steps"] == 5 and trained["channels"] == ["value"] and trained["series"] == 1
        # The full graph only: the daemon swaps from the pruned pair engine to the full one (a smaller export, too).
        _json_of(capsys, ["export", trained["checkpoint"], "--out", str(candidate), "--window", "64",
                          "--calibration-steps", "500", "--graphs", "none"])  # fmt: skip

        # The rest of the series streams while the candidate is promoted and swapped in. Its last HELD readings wait
        # for the swap, so the swap lands mid-stream however long promote takes on a loaded box.

        def stream_the_rest() -> None:
            replay([series], publisher, TOPIC, rate=200, t0=t0, start=SWITCH, limit=n - HELD - SWITCH)
            swapped.wait(300)
            replay([series], publisher, TOPIC, rate=200, t0=t0, start=n - HELD, limit=HELD)

        rest = threading.Thread(target=stream_the_rest)
        rest.start()
        report = _json_of(capsys, ["promote", str(candidate), "--archive", str(archive), "--target", str(model),
                                   "--calibration-steps", "1000", "--max-alert-ratio", "10", "--min-alert-rate", "0.01"])
        assert report["accepted"] and report["installed"] and report["parity"]["ok"], report
        assert report["sha256"] == file_sha256(model) != sha_before
        out.wait_for(lambda c: c.select(status_topic)[-1].json()["model_sha256"] == report["sha256"], timeout=20,
                     what="the new sha256 on the status topic")  # fmt: skip
        swapped_while_streaming = rest.is_alive()
        swapped.set()
        # Closing the publisher while the replay still runs would drop its last readings: wait for the replay to end.
        rest.join(180)
        assert not rest.is_alive(), "the second replay did not finish within 180 s"
        assert publisher.flush() == 0
    finally:
        swapped.set()  # a failed promote must not leave the replay waiting
        publisher.close()
    scores = out.wait_count("trep-edge/scores/ucr135", n, timeout=120)
    steps = [m.json()["step"] for m in scores]
    assert steps == list(range(steps[0], steps[0] + n)), "a reading was not scored, or scored twice"
    assert swapped_while_streaming, "the swap should happen mid-stream: slow the second replay down"
    assert all(m.json()["raw"] is not None for m in scores[-100:]), "scoring must continue with the new model"
    metrics = daemon.metrics()
    assert metrics["trep_edge_readings_total"] == n and metrics["trep_edge_scored_total"] == n
    assert metrics.get("trep_edge_dropped_total", 0) == 0 and metrics.get("trep_edge_archive_dropped_total", 0) == 0
    assert metrics['trep_edge_model_reloads_total{result="ok"}'] == 1
    assert metrics.get('trep_edge_monitor_events_total{event="discarded"}', 0) == 0
    # The archive kept recording across the swap; parts written since name the new model.
    out.wait_for(lambda c: daemon.metrics().get("trep_edge_archived_total") == n, timeout=10, what="all archived")
    newest = read_part(archive_parts(archive)[-1])[0]
    assert newest["model_sha256"] == report["sha256"] and newest["channels"] == ["value"]
    late = collectors(broker.port, [status_topic])  # a dashboard connecting now gets the retained status
    # The daemon's periodic status may arrive live right after the retained copy: judge the retained one.
    retained = late.wait_for(lambda c: [m for m in c.select(status_topic) if m.retain], what="the retained status")
    status = retained[0]
    assert status.json()["model_sha256"] == report["sha256"] and status.json()["model_error"] is None
