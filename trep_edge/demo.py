"""``trep-edge demo``: ICU bedside monitoring on real PhysioNet 2019 patients, end to end on one machine.

A private Mosquitto (or ``--broker``), the monitor daemon with the default model, and ``trep-edge replay``
publishing patients as beds; the demo prints the daemon's live counters and every alert as it is published,
then scores the bed with the most alerts offline (``trep-edge score``) and prints the PNG path.
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
from pathlib import Path

import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion

from .local_broker import free_port, start_broker, wait_port

TOPIC = "icu/{bed}/vitals"
DATA = "PhysioNet2019_sepsis/training_setB.tar.gz"


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


def _wait_ready(port: int, daemon: subprocess.Popen, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if daemon.poll() is not None:
            raise RuntimeError(f"the daemon exited with code {daemon.returncode}; see its log above")
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


def run_demo(args: argparse.Namespace) -> int:
    """Run the whole demo; returns 0 when the daemon scored every reading that was replayed."""
    model = Path(args.model)
    if not model.is_file():
        raise FileNotFoundError(f"model {model} not found: run from the repository or pass --model")
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    procs: list[subprocess.Popen] = []
    with tempfile.TemporaryDirectory(prefix="trep-edge-demo-") as tmp:
        work = Path(tmp)
        try:
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
                     "--mqtt-client-id", f"trep-edge-demo-{http}", "--mqtt-topics", TOPIC,
                     "--windows-period", "1", "--windows-settle", "0", "--monitor-tick-interval", "0.5",
                     "--state-path", str(work / "state.npz"), "--http-port", str(http)),
                stdout=daemon_log, stderr=subprocess.STDOUT,
            )  # fmt: skip
            procs.append(daemon)
            _wait_ready(http, daemon)
            print(f"daemon: ready, model {model.name}, metrics on http://127.0.0.1:{http}/metrics, log {out_dir / 'daemon.log'}")

            alerts: list[dict] = []
            lock = threading.Lock()

            def on_message(client, userdata, msg) -> None:
                alert = json.loads(msg.payload)
                with lock:
                    alerts.append(alert)
                side = ">" if alert["adjusted"] > alert["threshold"] else "<"
                print(f"  ALERT {alert['state']:<8} {alert['stream']:<8} {alert['severity']:<8} "
                      f"adjusted {alert['adjusted']:7.2f} {side} threshold {alert['threshold']:.2f}  id {alert['alert_id']}")

            sub = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=f"trep-edge-demo-viewer-{http}")
            sub.on_message = on_message
            sub.on_connect = lambda c, u, f, rc, p=None: c.subscribe("trep-edge/alerts/#", qos=1)
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
            # Let the daemon drain its queue and finish the last tick.
            deadline, last = time.monotonic() + 60, -1.0
            while time.monotonic() < deadline:
                time.sleep(1.5)
                m = _metrics(http)
                if m.get("trep_edge_readings_total", 0) == last and m.get("trep_edge_queue_depth", 0) == 0:
                    break
                last = m.get("trep_edge_readings_total", 0)
            final = _metrics(http)
            print("final:", _summary(final))
            sub.loop_stop()
            sub.disconnect()
            daemon.send_signal(signal.SIGTERM)
            daemon.wait(30)
        finally:
            for proc in reversed(procs):
                if proc.poll() is None:
                    proc.kill()
                    proc.wait(10)

    by_bed = Counter(a["stream"] for a in alerts if a["state"] == "raised")
    print(f"alerts: {sum(by_bed.values())} raised on {len(by_bed)} of {args.beds} beds (advisory: decision support only)")
    if by_bed:
        bed = by_bed.most_common(1)[0][0]
        index = int("".join(ch for ch in bed if ch.isdigit())) - 1
        png = out_dir / f"{bed}.png"
        subprocess.run(_cli("score", DATA, "--model", str(model), "--series", str(index),
                            "--out", str(out_dir / f"{bed}.csv"), "--plot", str(png),
                            *(["--data-root", args.data_root] if args.data_root else [])),
                       check=True, stdout=subprocess.DEVNULL)  # fmt: skip
        print(f"plot of {bed} (signal, score, threshold, alerts, sepsis label): {png}")
    if sent is not None:
        print(f"replayed {sent} readings; the daemon accepted {int(final.get('trep_edge_readings_total', 0))}")
    return 0
