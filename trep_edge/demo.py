"""``trep-edge demo``: the monitor end to end on one machine, in one of two scenarios.

- ``icu`` (default): bedside monitoring on real PhysioNet 2019 patients. A private Mosquitto (or ``--broker``), the
  monitor daemon with the default model, and ``trep-edge replay`` publishing patients as beds; the demo prints the
  daemon's live counters and every alert as it is published, then sets the alerts against the sepsis labels the
  data carries (found / missed / false alarms), scores one bed offline (the daemon's arithmetic) and prints the
  path of its PNG.
- ``plant``: machines of a plant with no model of their own. Real signals of the data folder (transformer loads and
  oil temperature, bedside numerics) at scales from 1e-3 to 1e4, with 1 or 3 channels, each with one injected fault
  of the detection benchmark's kinds (or none), published as ``plant/{machine}/data`` and scored by the shipped
  general model; the demo ends with the faults found, missed and the false alarms.
"""
from __future__ import annotations

import argparse
import json
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np

import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion

from trep_edge.bundled import bundled_dir, default_model
from trep_edge.help_format import HelpFormatter
from trep_edge.local_broker import free_port, start_broker, wait_port

TOPIC = "icu/{bed}/vitals"
PLANT_TOPIC = "plant/{machine}/data"
PLANT_SCALES = (1e-3, 1.0, 1e4, 50.0)  # the machines' units differ by orders of magnitude; nobody rescales them
PLANT_LENGTH = 2500  # readings per machine: learning, the fault, and time after it
PLANT_LEARNING = 375  # the first 15 %: each machine's statistics are new; alerts there are reported apart, as the
# detection benchmark's probation does (docs/detection.md)
PLANT_LATE = 100  # an alert up to this many readings after a fault's last row still finds it
DATA = "PhysioNet2019_sepsis/training_setB.tar.gz"
# PhysioNet 2019's SepsisLabel turns 1 six hours before clinical onset; an alert up to LEAD_HOURS before the label
# counts as finding that bed's sepsis (an early warning), an alert earlier or on a bed without sepsis as a false alarm.
LEAD_HOURS = 6


@dataclass
class Verdict:
    """Raised alerts set against sepsis labels, per bed."""

    septic: list[str]
    found: list[str]
    missed: list[str]
    false_alarms: dict[str, int]  # bed -> alerts outside the sepsis window


def judge_alerts(labels: dict[str, np.ndarray], raised_steps: dict[str, list[int]], lead: int = LEAD_HOURS) -> Verdict:
    """Found / missed labelled streams and false alarms: an alert counts when inside the label or up to ``lead``
    steps before its first step (a sepsis label runs to the end of the stay; a fault's ends with the fault)."""
    septic, found, missed, false_alarms = [], [], [], {}
    for bed, label in labels.items():
        onset = int(np.argmax(label)) if label.any() else None
        steps = raised_steps.get(bed, [])
        hits = [s for s in steps if onset is not None and onset - lead <= s and (s < onset or label[min(s, len(label) - 1)])]
        if onset is not None:
            septic.append(bed)
            (found if hits else missed).append(bed)
        if len(steps) > len(hits):
            false_alarms[bed] = len(steps) - len(hits)
    return Verdict(septic, found, missed, false_alarms)


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "trep_edge.cli", *args]


def _metrics(port: int) -> dict[str, float]:
    """The daemon's Prometheus counters, summed over labels (enough for a one-line summary)."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            base = name.split("{")[0]
            key = base + ("{" + name.split("{", 1)[1] if base in ("trep_edge_streams", "trep_edge_alerts_total") else "")
            out[key] = out.get(key, 0.0) + float(value)
    return out


def _wait_ready(port: int, daemon: subprocess.Popen, log: Path, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if daemon.poll() is not None:
            last = log.read_text(errors="replace").strip().splitlines()[-1:] or [""]
            raise RuntimeError(f"the daemon exited with code {daemon.returncode} ({last[0]}); see {log}")
        try:
            if urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2).status == 200:
                return
        except OSError:
            pass
        time.sleep(0.3)
    raise TimeoutError("the daemon did not become ready within a minute")


def _summary(m: dict[str, float]) -> str:
    active = m.get('trep_edge_streams{state="active"}', 0)
    warming = m.get('trep_edge_streams{state="warming"}', 0)
    raised = m.get('trep_edge_alerts_total{state="raised"}', 0)
    return (f"readings {int(m.get('trep_edge_readings_total', 0))}  scored {int(m.get('trep_edge_scored_total', 0))}  "
            f"beds active {int(active)} warming {int(warming)}  alerts raised {int(raised)}  "
            f"dropped {int(m.get('trep_edge_dropped_total', 0))}")


def _report(verdict: Verdict, beds: int) -> None:
    alarms = sum(verdict.false_alarms.values())
    print(f"sepsis labels: {len(verdict.septic)} of {beds} beds septic; found {len(verdict.found)} (an alert from "
          f"{LEAD_HOURS} h before the SepsisLabel on), missed {len(verdict.missed)}"
          + (f" ({', '.join(verdict.missed)})" if verdict.missed else ""))  # fmt: skip
    where = ", ".join(f"{bed} x{n}" for bed, n in sorted(verdict.false_alarms.items()))
    print(f"false alarms: {alarms} alert(s) on {len(verdict.false_alarms)} bed(s) without sepsis or long before it"
          + (f" ({where})" if alarms else ""))  # fmt: skip


def _plot_bed(series, model: Path, out_dir: Path) -> Path:
    """Score one bed offline with the daemon's arithmetic and draw it with time in hours."""
    from trep_edge.runtime.service.config import load_config
    from trep_edge.runtime.core.engine import load_engine
    from trep_edge.runtime.service.score_file import score_recording, write_csv, write_plot

    config = load_config(None, {}, {})
    engine = load_engine(model, "cpu")
    result = score_recording(engine, series, config.alerts, config.detector)
    png = out_dir / f"{series.stream}.png"
    write_csv(result, png.with_suffix(".csv"))
    write_plot(result, png, f"{series.stream} scored by {engine.card.name}: readings hourly, orange = SepsisLabel",
               step_hours=1.0)  # fmt: skip
    return png


def _start_stack(args: argparse.Namespace, model: Path, topic: str, work: Path, out_dir: Path,
                 procs: list[subprocess.Popen]) -> tuple[str, int, int, subprocess.Popen]:  # fmt: skip
    """The broker (a private Mosquitto, or ``--broker``) and the daemon with ``model`` on ``topic``, one step per
    second (replays run in compressed time), ready; returns (broker host, broker port, the daemon's HTTP port, the
    daemon)."""
    if args.broker:
        host, _, port_text = args.broker.rpartition(":")
        host, port = host or "127.0.0.1", int(port_text)
        wait_port(port, host=host)
    else:
        broker, port = start_broker(work)
        procs.append(broker)
        host = "127.0.0.1"
    print(f"broker: {host}:{port}{'' if args.broker else ' (private mosquitto)'}")
    http = free_port()
    daemon_log = open(out_dir / "daemon.log", "wb")
    daemon = subprocess.Popen(
        _cli("run", "--model-path", str(model), "--mqtt-host", host, "--mqtt-port", str(port),
             "--mqtt-client-id", f"trep-edge-demo-{http}", "--mqtt-topics", topic,
             "--windows-period", "1", "--windows-settle", "0", "--monitor-tick-interval", "0.5",
             "--state-path", str(work / "state.npz"), "--http-port", str(http)),
        stdout=daemon_log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    procs.append(daemon)
    _wait_ready(http, daemon, out_dir / "daemon.log")
    return host, port, http, daemon


def _drain(http: int) -> dict[str, float]:
    """Wait (at most a minute) until the daemon has taken in and scored everything sent; its final metrics."""
    deadline, last = time.monotonic() + 60, -1.0
    while time.monotonic() < deadline:
        time.sleep(1.5)
        m = _metrics(http)
        if m.get("trep_edge_readings_total", 0) == last and m.get("trep_edge_queue_depth", 0) == 0:
            break
        last = m.get("trep_edge_readings_total", 0)
    return _metrics(http)


def _stop(procs: list[subprocess.Popen]) -> None:
    """Kill whatever still runs (the broker; the daemon if it did not stop on SIGTERM), newest first."""
    for proc in reversed(procs):
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """The ``trep-edge demo`` subcommand's arguments."""
    p = subparsers.add_parser(
        "demo",
        help="end-to-end demo: private broker, daemon, real data replayed (ICU beds, or plant machines)",
        description="Starts a private Mosquitto on a free loopback port (or uses --broker) and the monitor daemon. "
        "Scenario icu: the default model, PhysioNet 2019 patients replayed as bedside streams, live counters and every "
        "alert, alerts set against the sepsis labels, one bed scored offline as a PNG. Scenario plant: the general "
        "model, machines of real signals at scales 1e-3 to 1e4 with injected faults, and the faults found, missed "
        "and the false alarms.",
        formatter_class=HelpFormatter,
    )
    p.add_argument("--scenario", choices=("icu", "plant"), default="icu", help="ICU beds, or plant machines")
    p.add_argument("--model", help="ONNX model with its card (default: the shipped icu-vitals.onnx; general.onnx "
                   "for the plant)")
    p.add_argument("--broker", help="HOST:PORT of an existing broker instead of a private mosquitto")
    p.add_argument("--beds", type=int, default=40, help="patients replayed as beds")
    p.add_argument("--machines", type=int, default=11, help="plant: machines, one per fault kind in turn (11: all)")
    p.add_argument("--seed", type=int, default=0, help="plant: which signals and fault positions")
    p.add_argument("--rate", type=float, default=10.0, help="readings per second per bed or machine (icu: each "
                   "reading is one hour; plant: use 100 or more, a machine sends 1,500)")
    p.add_argument("--every", type=float, default=3.0, help="seconds between live summary lines")
    p.add_argument("--out", default="runs/demo", help="folder for the daemon log, the CSV and the PNG")
    p.add_argument("--data-root", help="data folder (default: $TREP_EDGE_DATA or ../shared/data)")
    return p


def run(args: argparse.Namespace) -> int:
    """Run the chosen scenario; returns 0 when the daemon scored every reading that was sent."""
    if getattr(args, "scenario", "icu") == "plant":
        return run_plant(args)
    return _run_icu(args)


def _run_icu(args: argparse.Namespace) -> int:
    """The ICU scenario (module docstring)."""
    from trep_edge.datasets.paths import resolve
    from trep_edge.runtime.service.replay import load_series

    # Everything that can be missing is checked before any process starts.
    model = Path(args.model) if args.model else default_model()
    if not model.is_file():
        raise FileNotFoundError(f"model {model} not found: pass --model")
    beds = {s.stream: s for s in load_series(resolve(DATA, args.data_root), max_series=args.beds)}
    labels = {bed: s.labels.astype(bool) for bed, s in beds.items()}
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    procs: list[subprocess.Popen] = []
    alerts: list[dict] = []
    first_ts: list[float] = []  # the replay's t0: reading i of every bed carries t0 + i (period 1)
    with tempfile.TemporaryDirectory(prefix="trep-edge-demo-") as tmp:
        work = Path(tmp)
        try:
            host, port, http, daemon = _start_stack(args, model, TOPIC, work, out_dir, procs)
            print(f"daemon: ready, model {model.name}, metrics on http://127.0.0.1:{http}/metrics, log {out_dir / 'daemon.log'}")

            lock = threading.Lock()

            def on_message(client, userdata, msg) -> None:
                payload = json.loads(msg.payload)
                if not msg.topic.startswith("trep-edge/alerts/"):
                    if not first_ts:
                        first_ts.append(float(payload["ts"]))
                        client.unsubscribe(TOPIC.format(bed="+"))
                    return
                with lock:
                    alerts.append(payload)
                hour = f"hour {payload['timestamp'] - first_ts[0]:4.0f}" if first_ts else ""
                print(f"  ALERT {payload['state']:<8} {payload['stream']:<8} {hour}  {payload['severity']:<8} "
                      f"score {payload.get('score') or float('nan'):7.2f}  id {payload['alert_id']}")

            sub = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=f"trep-edge-demo-viewer-{http}")
            sub.on_message = on_message
            sub.on_connect = lambda c, u, f, rc, p=None: c.subscribe([("trep-edge/alerts/#", 1),
                                                                      (TOPIC.format(bed="+"), 1)])
            sub.connect(host, port)
            sub.loop_start()

            replay = subprocess.Popen(
                _cli("replay", DATA, "--topic", TOPIC, "--broker", f"{host}:{port}", "--max-series", str(args.beds),
                     "--rate", str(args.rate), "--period", "1", *(["--data-root", args.data_root] if args.data_root else [])),
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            )  # fmt: skip
            procs.append(replay)
            print(f"replay: {args.beds} PhysioNet 2019 patients as beds at {args.rate} readings/s each (1 step = 1 hour)")
            while replay.poll() is None:
                time.sleep(args.every)
                print(_summary(_metrics(http)))
            replay_out = replay.stdout.read().decode() if replay.stdout else ""
            if replay.returncode != 0:
                print(replay_out, file=sys.stderr)
                raise RuntimeError(f"replay failed with code {replay.returncode}")
            published = re.search(r"published (\d+) readings", replay_out)
            sent = int(published.group(1)) if published else None
            final = _drain(http)
            print("final:", _summary(final))
            sub.loop_stop()
            sub.disconnect()
            daemon.send_signal(signal.SIGTERM)
            daemon.wait(30)
        finally:
            _stop(procs)

    raised = [a for a in alerts if a["state"] == "raised"]
    by_bed = Counter(a["stream"] for a in raised)
    print(f"alerts: {len(raised)} raised on {len(by_bed)} of {len(beds)} beds (advisory: decision support only)")
    steps: dict[str, list[int]] = {}
    for alert in raised:
        steps.setdefault(alert["stream"], []).append(round(alert["timestamp"] - first_ts[0]))
    verdict = judge_alerts(labels, steps)
    _report(verdict, len(beds))
    # Draw a septic bed the monitor found, else the bed with most alerts, else a septic one.
    bed = next(iter(verdict.found), None) or (by_bed.most_common(1)[0][0] if by_bed else None)
    bed = bed or next(iter(verdict.septic), None) or next(iter(beds))
    print(f"plot of {bed} (vitals, score, threshold, alerts, sepsis label): {_plot_bed(beds[bed], model, out_dir)}")
    if sent is not None:
        print(f"replayed {sent} readings; the daemon accepted {int(final.get('trep_edge_readings_total', 0))}")
    return 0


@dataclass
class Machine:
    """One plant machine of the plant scenario: its readings ``[T, C]`` and the fault injected into them."""

    name: str
    channels: list[str]
    values: np.ndarray
    fault: str  # kind and size, e.g. "level3"; "none" for a machine without a fault
    label: np.ndarray  # rows where an alert finds the fault (the fault, then PLANT_LATE rows)


def plant_machines(root: Path, count: int, seed: int = 0) -> list[Machine]:
    """``count`` machines from the detection benchmark's synthetic faults (real signals, one injected fault of each
    kind in turn, of 3 robust scales, then 5), cropped to ``PLANT_LENGTH`` readings ending a few hundred after the
    fault and put at scales 1e-3 to 1e4."""
    from trep_edge.training.evaluation.detection_corpus import KINDS, synthetic

    machines = []
    # The benchmark's first round of kinds is at 2 robust scales, subtle for a demo: start at the second.
    for k, stream in enumerate(synthetic(root, count + len(KINDS), seed)[len(KINDS) :]):
        onset = stream.events[0][0] if stream.events else len(stream.values)
        start = max(0, min(onset - (PLANT_LENGTH - 2 * PLANT_LATE - 300), len(stream.values) - PLANT_LENGTH))
        values = stream.values[start : start + PLANT_LENGTH] * PLANT_SCALES[k % len(PLANT_SCALES)]
        label = np.zeros(len(values), dtype=bool)
        for first, last in stream.events:
            label[max(first - start, 0) : max(last - start + PLANT_LATE + 1, 0)] = True
        source = stream.name.split("#")[0].split(".", 1)[1].split("+")  # "ETTh1.HUFL+HULL+MUFL#3:..." -> names
        channels = [source[int(c[1:])] for c in stream.channels]
        fault = f"{stream.meta['kind']}{stream.meta['size']:g}" if stream.events else "none"
        machines.append(Machine(f"machine{k + 1:02d}", channels, values, fault, label))
    return machines


def _publish_machines(host: str, port: int, machines: list[Machine], rate: float, t0: int) -> int:
    """Every machine's reading i at time ``t0 + i``, ``rate`` readings per second per machine; the number sent."""
    client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=f"trep-edge-demo-plant-{t0}")
    client.connect(host, port)
    client.loop_start()
    sent, started = 0, time.monotonic()
    try:
        for i in range(max(len(m.values) for m in machines)):
            for m in machines:
                if i < len(m.values):
                    values = {c: (None if np.isnan(v) else float(v)) for c, v in zip(m.channels, m.values[i])}
                    client.publish(PLANT_TOPIC.format(machine=m.name), json.dumps({"ts": t0 + i, "values": values}),
                                   qos=1).wait_for_publish(10)  # fmt: skip
                    sent += 1
            time.sleep(max(0.0, started + (i + 1) / rate - time.monotonic()))
    finally:
        client.loop_stop()
        client.disconnect()
    return sent


def run_plant(args: argparse.Namespace) -> int:
    """The plant scenario (module docstring); returns 0 when the daemon scored every reading sent."""
    from trep_edge.datasets.paths import data_root

    model = Path(args.model) if args.model else bundled_dir("models") / "general.onnx"
    if not model.is_file():
        raise FileNotFoundError(f"model {model} not found: pass --model")
    machines = plant_machines(data_root(args.data_root), args.machines, args.seed)
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    procs: list[subprocess.Popen] = []
    raised: dict[str, list[float]] = {}
    t0 = int(time.time()) - PLANT_LENGTH  # the last readings are stamped about now
    with tempfile.TemporaryDirectory(prefix="trep-edge-demo-") as tmp:
        try:
            host, port, http, daemon = _start_stack(args, model, PLANT_TOPIC, Path(tmp), out_dir, procs)
            print(f"daemon: ready, model {model.name} (no training for these machines), log {out_dir / 'daemon.log'}")
            for m in machines:
                print(f"  {m.name}: {len(m.channels)} channel(s) {', '.join(m.channels)}, level "
                      f"{np.nanmedian(m.values):.3g}, injected fault {m.fault}")  # fmt: skip

            def on_alert(client, userdata, msg) -> None:
                alert = json.loads(msg.payload)
                if alert.get("kind") == "anomaly" and alert["state"] == "raised":
                    raised.setdefault(alert["stream"], []).append(alert["timestamp"] - t0)
                    print(f"  ALERT {alert['stream']} at reading {alert['timestamp'] - t0:5.0f}  channel "
                          f"{alert.get('channel')}  score {alert.get('score') or float('nan'):6.1f}")  # fmt: skip

            viewer = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=f"trep-edge-demo-viewer-{http}")
            viewer.on_message = on_alert
            viewer.on_connect = lambda c, u, f, rc, p=None: c.subscribe("trep-edge/alerts/#", 1)
            viewer.connect(host, port)
            viewer.loop_start()
            print(f"replay: {len(machines)} machines at {args.rate} readings/s each")
            sent = _publish_machines(host, port, machines, args.rate, t0)
            final = _drain(http)
            print("final:", _summary(final).replace("beds", "machines"))
            viewer.loop_stop()
            viewer.disconnect()
            daemon.send_signal(signal.SIGTERM)
            daemon.wait(30)
        finally:
            _stop(procs)
    learning = sum(t < PLANT_LEARNING for times in raised.values() for t in times)
    steps = {name: [round(t) for t in times if t >= PLANT_LEARNING] for name, times in raised.items()}
    verdict = judge_alerts({m.name: m.label for m in machines}, steps, lead=0)
    print(f"while learning (each machine's first {PLANT_LEARNING} readings): {learning} alert(s), not counted below")
    faults = {m.name: m.fault for m in machines}
    print(f"faults: {len(verdict.septic)} injected; found {len(verdict.found)}, missed {len(verdict.missed)}"
          + (f" ({', '.join(f'{n} {faults[n]}' for n in verdict.missed)})" if verdict.missed else ""))  # fmt: skip
    where = ", ".join(f"{name} x{n}" for name, n in sorted(verdict.false_alarms.items()))
    print(f"false alarms: {sum(verdict.false_alarms.values())}" + (f" ({where})" if where else ""))
    print(f"replayed {sent} readings; the daemon accepted {int(final.get('trep_edge_readings_total', 0))}")
    return 0
