"""Alert lifecycle states on a real Mosquitto (docs/alerts.md, "Lifecycle"): a stream's first scored reading retains
``ok``; episodes say ``firing`` and ``resolved``; a stream silent for ``[monitor] stale_after`` is reported once as
``no_data`` (also across a restart, which keeps the report in its checkpoint) and its next reading as ``ok``; with
``[alerts] pending`` a run of hot readings the gate has not alerted on yet is ``pending`` once.

Streams are the univariate fixture model's (UCR series 135); every wait is bounded by a deadline.
"""
from __future__ import annotations

import json
import time

import numpy as np
from gates import GAUSSIAN_GATE
from broker import Collector, broker, collectors, daemon_tables, daemons, publish  # noqa: F401 - fixtures
from test_daemon_bad_input import _ready_daemon

from trep_edge.runtime.core.alerts import STATUS_OF_STATE
from trep_edge.runtime.service.checkpoint import load_checkpoint
from trep_edge.runtime.core.engine import load_engine
from trep_edge.runtime.service.replay import RecordedSeries
from trep_edge.runtime.service.score_file import score_recording

STALE_AFTER = 2.0  # seconds; the period is 1 s
SPIKE = 150  # a reading of +200 (about 15 training scales): one alert with the default detector


def _series(ucr_series, spike: int | None = SPIKE, length: int = 300) -> np.ndarray:
    values = ucr_series.values[1200 : 1200 + length].copy()
    if spike is not None:
        values[spike] += 200.0
    return values


def _reading(stream: str, t: float, value: float) -> tuple[str, str]:
    return f"icu/{stream}/vitals", json.dumps({"ts": t, "values": {"value": float(value)}})


def _send(broker, stream: str, values: np.ndarray, t0: float, start: int = 0) -> None:
    publish(broker.port, [_reading(stream, t0 + start + k, v) for k, v in enumerate(values)])


def _json(c: Collector, topic: str, **match) -> list[dict]:
    """Messages on ``topic`` whose fields equal ``match``."""
    return [m for m in (r.json() for r in c.select(topic)) if all(m.get(k) == v for k, v in match.items())]


def _wait_scores(c: Collector, stream: str, n: int, timeout: float = 30.0) -> list[dict]:
    return [m.json() for m in c.wait_count(f"trep-edge/scores/{stream}", n, timeout)]


def _retained(broker, topic: str) -> dict:
    """What a subscriber arriving now gets on ``topic``: its retained message."""
    late = Collector(broker.port, [topic])
    try:
        got = late.wait_for(lambda c: c.select(topic), timeout=10, what=f"the retained message on {topic}")
        assert got[-1].retain
        return got[-1].json()
    finally:
        late.close()


def _talk(broker, stream: str, values: np.ndarray, t0: float, k: int, seconds: float, until=lambda: False) -> int:
    """Send ``stream``'s reading ``k``, ``k + 1``, ... (``values`` over again) every 0.3 s for ``seconds`` or until
    ``until()``; return the next ``k``."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not until():
        publish(broker.port, [_reading(stream, t0 + k, values[k % len(values)])])
        k += 1
        time.sleep(0.3)
    return k


def test_first_scored_reading_retains_ok_once_and_episodes_say_firing_then_resolved(
    tmp_path, broker, daemons, collectors, univariate_model, ucr_series
):
    out = collectors(broker.port, ["trep-edge/#"])
    daemon = _ready_daemon(tmp_path, broker, daemons, univariate_model, monitor={"tick_interval": 0.1})
    t0 = float(int(time.time())) - 1000
    calm, spiky = _series(ucr_series, spike=None), _series(ucr_series)
    _send(broker, "calm", calm, t0)
    _send(broker, "spiky", spiky, t0)
    scores = {s: _wait_scores(out, s, len(calm)) for s in ("calm", "spiky")}

    for stream in ("calm", "spiky"):
        oks = _json(out, f"trep-edge/state/{stream}", kind="stream")
        first_scored = next(s for s in scores[stream] if not s["warming"])
        assert [(m["status"], m["reason"], m["timestamp"]) for m in oks] == [("ok", "first_score",
                                                                              first_scored["timestamp"])]
        assert oks[0]["active"] is False and oks[0]["open_alert"] is None and oks[0]["advisory"] is True
        assert not _json(out, f"trep-edge/alerts/{stream}", kind="stream"), "the first ok is for the state topic only"
    assert _retained(broker, "trep-edge/state/calm") == _json(out, "trep-edge/state/calm")[-1]

    reference = score_recording(load_engine(univariate_model, "cpu"), RecordedSeries("spiky", ["value"],
                                                                                     spiky.reshape(-1, 1))).events
    assert [state for _, state, *_ in reference][:1] == ["raised"] and reference[-1][1] == "cleared"
    episodes = out.wait_count("trep-edge/alerts/spiky", len(reference))
    got = [m.json() for m in episodes]
    assert [(m["kind"], m["alert_id"], m["state"], m["status"]) for m in got] == [
        ("anomaly", alert_id, state, STATUS_OF_STATE[state]) for _, state, _, alert_id, _ in reference]
    assert got[0]["status"] == "firing" and got[-1]["status"] == "resolved" and got[-1]["active"] is False
    state_topic = [m.json() for m in out.select("trep-edge/state/spiky")]
    assert state_topic[0]["status"] == "ok" and state_topic[1:] == got  # ok first, then the episode changes
    assert _retained(broker, "trep-edge/state/spiky") == got[-1]
    assert daemon.metrics()["trep_edge_streams_stale"] == 0  # stale_after is off by default


def test_a_silent_stream_is_no_data_once_while_another_talks_and_ok_when_back(
    tmp_path, broker, daemons, collectors, univariate_model, ucr_series
):
    out = collectors(broker.port, ["trep-edge/alerts/#", "trep-edge/state/#", "trep-edge/scores/#"])
    daemon = _ready_daemon(tmp_path, broker, daemons, univariate_model,
                           monitor={"tick_interval": 0.1, "stale_after": STALE_AFTER})  # fmt: skip
    t0 = float(int(time.time())) - 1000
    series = _series(ucr_series, spike=None, length=400)
    values = series[:60]
    _send(broker, "quiet", values, t0)
    _send(broker, "talker", values, t0)
    _wait_scores(out, "quiet", len(values))

    def no_data(stream: str, topic: str = "alerts") -> list[dict]:
        return _json(out, f"trep-edge/{topic}/{stream}", kind="stream", status="no_data")

    k = _talk(broker, "talker", series, t0, len(values), 20, until=lambda: no_data("quiet"))
    [silent] = no_data("quiet")
    k = _talk(broker, "talker", series, t0, k, 3 * STALE_AFTER)  # the sweep runs every 0.5 s: time to repeat
    assert len(no_data("quiet")) == 1 and len(no_data("quiet", "state")) == 1
    assert not no_data("talker") and not no_data("talker", "state")
    assert silent["silent_for"] == STALE_AFTER and silent["open_alert"] is None and silent["active"] is False
    assert silent["reason"] == "silent" and abs(silent["timestamp"] - time.time()) < 30
    assert _retained(broker, "trep-edge/state/quiet") == silent
    assert daemon.metrics()["trep_edge_streams_stale"] == 1

    publish(broker.port, [_reading("quiet", t0 + len(values), series[len(values)])])

    def recovered(c) -> list[dict]:
        return _json(c, "trep-edge/alerts/quiet", kind="stream", status="ok")

    [back] = out.wait_for(recovered, timeout=10, what="quiet's recovery")
    assert back["reason"] == "recovered" and back["no_data_since"] == silent["timestamp"]
    assert back["timestamp"] == t0 + len(values)  # the reading that came back
    _talk(broker, "talker", series, t0, k, 1.0)
    assert len(recovered(out)) == 1
    assert _retained(broker, "trep-edge/state/quiet") == back
    assert daemon.metrics()["trep_edge_streams_stale"] == 0


def test_no_data_survives_a_restart_and_the_recovery_retains_the_open_episode_again(
    tmp_path, broker, daemons, collectors, univariate_model, ucr_series
):
    out = collectors(broker.port, ["trep-edge/alerts/#", "trep-edge/state/#", "trep-edge/scores/#"])
    # clear_after far away: the spike's episode stays open through the silence.
    daemon = _ready_daemon(tmp_path, broker, daemons, univariate_model, alerts={"clear_after": 100_000},
                           monitor={"tick_interval": 0.1, "stale_after": STALE_AFTER})  # fmt: skip
    t0 = float(int(time.time())) - 1000
    values = _series(ucr_series, length=200)
    _send(broker, "spiky", values, t0)
    calm = _series(ucr_series, spike=None, length=400)
    _send(broker, "talker", calm[: len(values)], t0)
    _wait_scores(out, "spiky", len(values))
    [raised] = out.wait_for(lambda c: _json(c, "trep-edge/alerts/spiky", kind="anomaly"), what="the spike's alert")
    assert raised["state"] == "raised" and raised["status"] == "firing"

    def no_data(c) -> list[dict]:
        return _json(c, "trep-edge/alerts/spiky", kind="stream", status="no_data")

    k = _talk(broker, "talker", calm, t0, len(values), 20, until=lambda: no_data(out))
    [silent] = no_data(out)
    assert silent["open_alert"] == raised["alert_id"] and silent["active"] is True

    assert daemon.stop() == 0
    _, meta = load_checkpoint(tmp_path / "state.npz")
    assert meta["lifecycle"]["stale"] == {"spiky": silent["timestamp"]}
    assert meta["lifecycle"]["open"]["spiky"]["alert_id"] == raised["alert_id"]
    daemon.start()
    daemon.wait_http("/readyz")
    assert daemon.metrics()["trep_edge_streams_stale"] == 1
    assert "1 restored stream(s) were reported as no_data" in daemon.log_text()
    _talk(broker, "talker", calm, t0, k, 3 * STALE_AFTER + 1)  # past stale_after, counted from the restore
    assert len(no_data(out)) == 1, "no_data published again after the restart"
    assert len(_json(out, "trep-edge/state/spiky", kind="stream", status="no_data")) == 1
    assert len(_json(out, "trep-edge/state/talker", kind="stream", status="ok")) == 1  # its first ok, not again

    publish(broker.port, [_reading("spiky", t0 + len(values), calm[len(values)])])
    [back] = out.wait_for(lambda c: _json(c, "trep-edge/alerts/spiky", kind="stream", status="ok"), timeout=10,
                          what="spiky's recovery")  # fmt: skip
    assert back["reason"] == "recovered" and back["open_alert"] == raised["alert_id"] and back["active"] is True
    # The retained state is the open episode's last message again, as it was published, not the ok.
    episode = _json(out, "trep-edge/alerts/spiky", kind="anomaly")[-1]
    out.wait_for(lambda c: c.select("trep-edge/state/spiky")[-1].json() == episode, timeout=10,
                 what="the episode retained again")  # fmt: skip
    assert _retained(broker, "trep-edge/state/spiky") == episode
    assert daemon.metrics()["trep_edge_streams_stale"] == 0


def test_pending_once_per_hot_run_then_ok_or_firing_with_debounce(
    tmp_path, broker, daemons, collectors, univariate_model, ucr_series
):
    """Debounce 8: the spike's own run is 5 hot readings (pending, then ok); the run when it leaves the window is
    longer and fires (pending, then raised). Readings go one per tick around the spike: pending is the gate's state
    after each tick."""
    out = collectors(broker.port, ["trep-edge/alerts/#", "trep-edge/scores/#"])
    debounce = 8
    _ready_daemon(tmp_path, broker, daemons, univariate_model, monitor={"tick_interval": 0.1},
                  # the spike's size was set on the Gaussian tail's surprise scale
                  detector={"debounce": debounce, **GAUSSIAN_GATE}, alerts={"pending": True})
    t0 = float(int(time.time())) - 1000
    values = _series(ucr_series, length=200)
    start = SPIKE - 5
    _send(broker, "pump", values[:start], t0)
    _wait_scores(out, "pump", start)
    for k in range(start, len(values)):
        _send(broker, "pump", values[k : k + 1], t0, start=k)
        _wait_scores(out, "pump", k + 1, timeout=10)

    events = [m.json() for m in out.select("trep-edge/alerts/pump")]
    lifecycle = [(m["kind"], m.get("status"), m.get("reason")) for m in events]
    first = events[0]
    assert first["status"] == "pending" and first["timestamp"] == t0 + SPIKE
    assert first["hot_readings"] == 1 and first["debounce"] == debounce and first["score"] > first["threshold"]
    assert lifecycle[:2] == [("stream", "pending", "pending"), ("stream", "ok", "pending_ended")]
    assert events[1]["timestamp"] <= t0 + SPIKE + debounce  # the run ended before it could alert
    raised = lifecycle.index(("anomaly", "firing", None))
    assert lifecycle[raised - 1] == ("stream", "pending", "pending")  # the run that fired was pending first
    # Once per run: a pending is always followed by its end (ok) or its alert, never by another pending.
    follows = [lifecycle[i + 1] for i, e in enumerate(lifecycle[:-1]) if e[1] == "pending"]
    assert all(f in (("stream", "ok", "pending_ended"), ("anomaly", "firing", None)) for f in follows), lifecycle


def test_stale_after_must_exceed_the_period_and_stay_below_evict_after(tmp_path, broker, daemons, univariate_model):
    for monitor, message in (({"stale_after": 1.0}, "must exceed [windows] period"),
                             ({"stale_after": 30.0, "evict_after": 20.0}, "must be less than monitor.evict_after")):
        folder = tmp_path / f"stale-{monitor['stale_after']:g}"
        daemon = daemons(folder, daemon_tables(broker, univariate_model, folder, monitor=monitor))
        daemon.start()
        assert daemon.proc.wait(60) == 2
        assert message in daemon.log_text()
