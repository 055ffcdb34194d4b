"""Several models in one daemon: ICU beds routed to the ICU model, plant machines to the general model.

One daemon with a real Mosquitto scores two beds (7 vitals) and two machines (one channel) in three phases: the
ICU model file is replaced by its fp16 variant between the first and the second (a hot swap of that model only),
and the daemon is restarted from its checkpoint between the second and the third. Each phase's readings must be
scored by their topic's model; the swap must leave the general model's streams untouched (their detector counts
go on, no model swap counted for them) while the ICU streams' detector restarts; the restart must restore both
models' streams; ``trep-edge reshard`` must split the checkpoint model by model. Bad routes are refused at load.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import time
from pathlib import Path

import numpy as np
import pytest
from broker import Broker, Collector, DaemonProcess, daemon_tables, publish, toml_text

from trep_edge.runtime.service.checkpoint import DEFAULT_MODEL, load_checkpoint, split_models
from trep_edge.runtime.service.config import ConfigError, load_config
from trep_edge.runtime.service.daemon import Daemon
from trep_edge.runtime.core.engine import file_sha256
from trep_edge.runtime.service.mqtt_io import Telemetry, TopicTemplate
from trep_edge.runtime.service.reshard import reshard_files, stream_names
from trep_edge.runtime.service.routing import check_routes
from trep_edge.runtime.core.sharding import LANE_SEPARATOR

MODELS = Path(__file__).resolve().parents[2] / "models"
VITALS = {"HR": 80.0, "O2Sat": 97.0, "Temp": 37.0, "SBP": 120.0, "MAP": 85.0, "DBP": 65.0, "Resp": 16.0}
BEDS, MACHINES = ["bed1", "bed2"], ["press1", "press2"]
PHASES = (0, 30, 45, 50)  # steps of each phase: [0, 30) swap [30, 45) restart [45, 50)
TOPICS = ["icu/{bed}/vitals", "plant/{machine}/data"]
STATES = ("active", "warming")


def _messages(t0: float, start: int, stop: int) -> list[tuple[str, str]]:
    rng = np.random.default_rng(start)
    out = []
    for k in range(start, stop):
        for bed in BEDS:
            values = {name: v * (1 + 0.01 * rng.normal()) for name, v in VITALS.items()}
            out.append((f"icu/{bed}/vitals", json.dumps({"ts": t0 + k, "values": values})))
        for machine in MACHINES:
            value = 5.0 + np.sin(k / 7) + 0.1 * rng.normal()
            out.append((f"plant/{machine}/data", json.dumps({"ts": t0 + k, "values": {"value": value}})))
    return out


def _routes(icu: Path) -> str:
    return f'[[routes]]\nmatch = "icu/+/vitals"\nmodel = "{icu}"\n'


def _scored_counts(path: Path) -> dict[str, dict[str, int]]:
    """Per model (checkpoint key), each stream's scored readings as its detector counts them."""
    models = split_models(*load_checkpoint(path))
    return {key: dict(zip(stream_names(state), state["detector/gate/scored_"].tolist()))
            for key, (state, _) in models.items()}  # fmt: skip


@pytest.fixture(scope="module")
def routed(tmp_path_factory):
    folder = tmp_path_factory.mktemp("routes")
    general, icu = folder / "general.onnx", folder / "icu-vitals.onnx"  # copies: the test replaces one of them
    shutil.copyfile(MODELS / "general.onnx", general)
    shutil.copyfile(MODELS / "icu-vitals.onnx", icu)
    broker = Broker(folder / "broker")
    broker.start()
    tables = daemon_tables(broker, general, folder, mqtt={"topics": TOPICS})
    daemon = DaemonProcess(folder, tables)
    daemon.config.write_text(toml_text(tables) + _routes(icu))
    state = folder / "state.npz"
    collector = None
    t0 = float(int(time.time())) - PHASES[-1]
    out: dict = {"folder": folder, "state": state, "t0": t0}
    try:
        collector = Collector(broker.port, ["trep-edge/#"])
        status_topic = "trep-edge/status/" + tables["mqtt"]["client_id"]

        def run_phase(phase: int) -> dict[str, dict[str, int]]:
            start, stop = PHASES[phase], PHASES[phase + 1]
            publish(broker.port, _messages(t0, start, stop))
            want = 4 * (stop - 1)  # every step but each stream's newest is final once a newer one arrived
            collector.wait_for(lambda c: len(c.select("trep-edge/scores/")) >= want, timeout=60,
                               what=f"scores up to step {stop - 1}")  # fmt: skip
            checkpoints = daemon.metrics()["trep_edge_checkpoints_total"]
            collector.wait_for(lambda c: daemon.metrics()["trep_edge_checkpoints_total"] > checkpoints,
                               what="a checkpoint after the phase's scores")  # fmt: skip
            return _scored_counts(state)

        daemon.start()
        daemon.wait_http("/readyz", timeout=60)
        out["counts"] = [run_phase(0)]
        out["metrics_before"] = daemon.metrics()

        os.replace(_copy(MODELS / "icu-vitals.fp16.onnx", folder / "fp16.new"), icu)
        fp16 = file_sha256(icu)
        def swapped(c: Collector) -> bool:
            return any(m["model_sha256"] == fp16 for m in c.select(status_topic)[-1].json()["models"])

        collector.wait_for(swapped, what="the ICU model's swap on the status topic")
        out["status"] = collector.select(status_topic)[-1].json()
        out["counts"].append(run_phase(1))
        out["metrics_after"] = daemon.metrics()
        assert daemon.stop(signal.SIGTERM) == 0, daemon.log_text()

        out["counts"].append(_scored_counts(state))  # the final checkpoint
        daemon.start()
        daemon.wait_http("/readyz", timeout=60)
        out["metrics_restored"] = collector.wait_for(
            lambda c: (m := daemon.metrics()).get("trep_edge_checkpoint_age_seconds") is not None and m,
            what="the restarted daemon's first gauges")  # fmt: skip
        out["counts"].append(run_phase(2))
        assert daemon.stop(signal.SIGTERM) == 0, daemon.log_text()
        out["scores"] = [m.json() for m in collector.select("trep-edge/scores/")]
        out["fp16"] = fp16
    finally:
        if collector is not None:
            collector.close()
        daemon.stop(signal.SIGKILL)
        broker.stop()
    out["log"] = daemon.log_text()
    return out


def _copy(source: Path, target: Path) -> Path:
    shutil.copyfile(source, target)
    return target


def _model_of(score: dict) -> str:
    return score["model"]["name"]


def test_each_topic_is_scored_by_its_routes_model(routed):
    by_stream: dict[str, set[str]] = {}
    for score in routed["scores"]:
        by_stream.setdefault(score["stream"], set()).add(_model_of(score))
    assert by_stream == {**{b: {"icu-vitals"} for b in BEDS}, **{m: {"general"} for m in MACHINES}}
    icu_scores = [s for s in routed["scores"] if s["stream"] in BEDS]
    assert {s["model"]["sha256"] for s in icu_scores} == {file_sha256(MODELS / "icu-vitals.onnx"), routed["fp16"]}


def test_status_and_metrics_list_both_models_with_their_streams(routed):
    models = {m["name"]: m for m in routed["status"]["models"]}
    assert set(models) == {"general", "icu-vitals"}
    assert models["icu-vitals"]["match"] == ["icu/+/vitals"] and models["general"]["match"] is None
    assert all(sum(m["streams"].values()) == 2 for m in models.values()), models
    metrics = routed["metrics_before"]
    for model in ("general", "icu-vitals"):
        assert sum(metrics[f'trep_edge_streams{{model="{model}",state="{state}"}}'] for state in STATES) == 2
        first = [s for s in routed["scores"] if _model_of(s) == model and s["timestamp"] < routed["t0"] + PHASES[1]]
        assert metrics[f'trep_edge_scored_total{{model="{model}"}}'] == len(first) >= 2 * (PHASES[1] - 1)


def test_a_model_swap_leaves_the_other_models_streams_untouched(routed):
    before, after = routed["counts"][0], routed["counts"][1]
    icu = next(key for key in after if key != DEFAULT_MODEL)
    steps = PHASES[2] - PHASES[1]
    # The general model's detector went on counting, untouched; the ICU model was swapped to a variant with the same
    # input contract, which hands every stream over warm (its detector relearns, it never restarts the warm-up).
    assert {s: n + steps for s, n in before[DEFAULT_MODEL].items()} == after[DEFAULT_MODEL]
    assert all(after[icu][bed] > before[icu][bed] for bed in BEDS), (before, after)
    swaps = 'trep_edge_monitor_events_total{event="model_swaps",model="%s"}'
    assert routed["metrics_after"][swaps % "general"] == 0 and routed["metrics_after"][swaps % "icu-vitals"] == 1
    assert routed["metrics_after"]['trep_edge_model_reloads_total{result="ok"}'] == 1


def test_a_restart_restores_both_models_streams(routed):
    metrics = routed["metrics_restored"]
    for model in ("general", "icu-vitals"):
        assert sum(metrics[f'trep_edge_streams{{model="{model}",state="{state}"}}'] for state in STATES) == 2
    stopped, resumed = routed["counts"][2], routed["counts"][3]
    steps = PHASES[3] - PHASES[2]
    for key, counts in stopped.items():
        assert {s: n + steps for s, n in counts.items()} == resumed[key], key
    assert routed["log"].count("restored 2 streams") == 2


def test_reshard_splits_a_routed_checkpoint_model_by_model(routed):
    written = reshard_files([routed["state"]], 2, routed["folder"] / "resharded")
    names: dict[str, list[str]] = {}
    for path in written:
        for key, (state, meta) in split_models(*load_checkpoint(path)).items():
            names.setdefault(key, []).extend(n.split(LANE_SEPARATOR)[0] for n in stream_names(state))
            assert meta["model"] == ("general" if key == DEFAULT_MODEL else "icu-vitals")
    assert {k: sorted(v) for k, v in names.items()} == {DEFAULT_MODEL: MACHINES, "icu-vitals": BEDS}


def test_filters_cover_and_overlap_as_mqtt_matches_them():
    t = TopicTemplate
    assert t("icu/+/vitals").covers(t("icu/7/vitals")) and not t("icu/7/vitals").covers(t("icu/+/vitals"))
    assert t("icu/#").covers(t("icu")) and t("#").covers(t("a/+/b")) and not t("icu/+").covers(t("icu/#"))
    assert t("icu/{bed}/vitals").covers(t("icu/+/vitals"))
    assert t("icu/+/vitals").overlaps(t("icu/{bed}/#")) and t("a/#").overlaps(t("a"))
    assert not t("icu/+/vitals").overlaps(t("plant/{machine}/data")) and not t("a/+").overlaps(t("a"))


@pytest.mark.parametrize("route, error", [
    ('match = "icu/+/vitals"\nmodel = "MISSING.onnx"', "model file MISSING.onnx does not exist"),
    ('match = "icu/+/vit#"\nmodel = "ICU"', "must be a literal"),
    ('match = "lab/+/data"\nmodel = "ICU"', "overlaps none of the subscribed mqtt.topics"),
    ('match = ["icu/+/vitals", "icu/7/vitals"]\nmodel = "ICU"', "'icu/7/vitals' never applies: 'icu/\\+/vitals'"),
    ('match = "icu/+/vitals"\nmodel = "GENERAL"', "both name their model 'general'"),
    ('match = "icu/+/vitals"\nmodel = "ICU"\nthreshold = 5', "unknown key 'threshold'.*\\[routes.detector\\]"),
    ('match = "icu/+/vitals"\nmodel = "ICU"\n[routes.detector]\nthreshold = "high"', "threshold must be float"),
])  # fmt: skip
def test_bad_routes_are_refused_with_what_to_fix(tmp_path, route, error):
    general, icu = f'"{MODELS / "general.onnx"}"', f'"{MODELS / "icu-vitals.onnx"}"'
    text = f"[mqtt]\ntopics = {json.dumps(TOPICS)}\n[model]\npath = {general}\n[[routes]]\n{route}\n"
    path = tmp_path / "monitor.toml"
    path.write_text(text.replace('"ICU"', icu).replace('"GENERAL"', general))
    with pytest.raises(ConfigError, match=error):
        check_routes(load_config(path, env={}))


def test_a_route_overrides_its_models_settings_only(tmp_path):
    path = tmp_path / "monitor.toml"
    path.write_text(f'[mqtt]\ntopics = {json.dumps(TOPICS)}\n[detector]\ndebounce = 2\n[[routes]]\nname = "icu"\n'
                    f'match = "icu/+/vitals"\nmodel = "{MODELS / "icu-vitals.onnx"}"\nengine = "full"\n'
                    '[routes.windows]\nperiod = 3600\n')  # fmt: skip
    config = load_config(path, env={})
    icu, default = check_routes(config)
    assert (icu.name, icu.match, default.name, default.match) == ("icu", ("icu/+/vitals",), "icu-vitals", ())
    assert icu.config.windows.period == 3600 and icu.config.model.engine == "full" and icu.config.detector.debounce == 2
    assert default.config is config and config.windows.period == 1.0 and config.model.engine == "auto"
    assert load_config(None, env={}).revision != config.revision


def test_a_route_may_score_with_the_default_models_file_under_a_name_and_detector_of_its_own(tmp_path):
    """docs/operations.md: a quieter detector for the topics of long-lived feeds, on the same model."""
    general = MODELS / "general.onnx"
    path = tmp_path / "monitor.toml"
    path.write_text(f'[mqtt]\ntopics = {json.dumps(TOPICS)}\n[model]\npath = "{general}"\n[[routes]]\n'
                    f'name = "long-lived"\nmatch = "plant/+/+"\nmodel = "{general}"\n'
                    '[routes.detector]\nhorizon = 4000\nbudget = 4\n')  # fmt: skip
    routed, default = check_routes(load_config(path, env={}))
    assert (routed.name, default.name) == ("long-lived", "general")
    assert (routed.config.detector.horizon, routed.config.detector.budget) == (4000, 4.0)
    assert (default.config.detector.horizon, default.config.detector.budget) == (500, 8.0)


def test_a_stream_id_belongs_to_one_model_a_restored_one_moves_and_bed_events_find_its_model(tmp_path):
    """In process, no broker: the intake of a daemon whose two topics yield the same stream id."""
    ts = float(int(time.time()))
    icu_reading = json.dumps({"ts": ts, "values": VITALS}).encode()
    plant_reading = json.dumps({"ts": ts, "values": {"value": 1.0}}).encode()

    def daemon(routes: str) -> Daemon:
        path = tmp_path / "monitor.toml"
        path.write_text(f'[mqtt]\ntopics = {json.dumps(TOPICS)}\n[model]\npath = "{MODELS / "general.onnx"}"\n'
                        f'providers = "cpu"\n[http]\nport = 0\n[state]\npath = "{tmp_path / "state.npz"}"\n{routes}')
        return Daemon(load_config(path, env={}))

    def message(topic: str, payload: bytes) -> Telemetry:
        return Telemetry("7", "7", topic, payload, time.time())

    # Before the ICU route existed, stream 7 was the general model's; the checkpoint keeps it there.
    before = daemon("")
    before._ingest([message("plant/7/data", plant_reading)])
    before.checkpoint()
    routed = daemon(_routes(MODELS / "icu-vitals.onnx"))
    general, icu = routed.default, routed.units[0]
    assert general.monitor.has_stream("7") and not icu.monitor.has_stream("7")
    # Its first reading on an ICU topic moves it; from then on a reading of stream 7 on a plant topic is refused.
    routed._ingest([message("icu/7/vitals", icu_reading), message("plant/7/data", plant_reading)])
    assert icu.monitor.has_stream("7") and not general.monitor.has_stream("7")
    assert routed.metrics.value("trep_edge_rejected_total", kind="other_model_stream") == 1
    assert routed.metrics.value("trep_edge_readings_total") == 1
    # A bed event acts on the model that holds the stream; discharged, the id is free for the plant topic again.
    event = json.dumps({"event": "discharge", "stream": "7"}).encode()
    routed._ingest([Telemetry("trep-edge/beds", None, "trep-edge/beds", event, time.time(), control="bed_events"),
                    message("plant/7/data", plant_reading)])  # fmt: skip
    assert general.monitor.has_stream("7") and not icu.monitor.has_stream("7")
    assert routed.metrics.value("trep_edge_control_requests_total", request="discharge", result="accepted") == 1
