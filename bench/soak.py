"""Soak the monitor daemon: find the highest message rate this machine sustains, then hold it for minutes.

A private Mosquitto, one ``trep-edge run`` process and this publisher run on the same machine (the publisher's CPU
is part of the load, as a gateway's would be). Synthetic bedside streams (each channel of the model card: its
training mean, plus a slow wave and noise of its training spread, 5 % missing) are published with QoS 1.

1. **Step**: for each total rate in ``--rates`` (readings/s over all streams), publish for ``--step-seconds``, then
   wait for the daemon to score everything sent. A step passes when the publisher kept the pace (>= 95 %), the
   daemon dropped and lost nothing, 99 % of readings were scored within ``--max-latency`` seconds of arriving, and
   it caught up within ``--max-drain`` seconds of the last publish (no lag building up). Stepping stops at the
   first failure.
2. **Soak**: at the highest passing rate, publish for ``--soak-seconds`` while sampling the daemon's RSS, CPU,
   intake queue and counters every ``--sample-every`` seconds; report drops, losses and the RSS trend.

Results go to ``--out`` (JSON, with this command line) and a PNG of RSS and lag over time beside it.
Run the real measurement under the shared lock (docs/operations.md records the numbers):

    flock /tmp/trep-heavy.lock nice -n 5 .venv/bin/python bench/soak.py
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from trep_edge.local_broker import MOSQUITTO, free_port, wait_port
from trep_edge.runtime.core.engine import load_engine
from trep_edge.runtime.service.replay import Publisher, RecordedSeries, replay

TOPIC = "icu/{bed}/vitals"
PAGE = os.sysconf("SC_PAGE_SIZE")
TICKS = os.sysconf("SC_CLK_TCK")


def synthetic_streams(card, streams: int, steps: int, seed: int = 0) -> list[RecordedSeries]:
    """Plausible readings for every channel of the card: mean + 0.5 std slow wave + 0.2 std noise, 5 % missing."""
    rng = np.random.default_rng(seed)
    mean = np.asarray(card.normalisation["mean"], dtype=np.float64)
    std = np.asarray(card.normalisation["std"], dtype=np.float64)
    t = np.arange(steps)[:, None]
    out = []
    for k in range(streams):
        phase = rng.uniform(0, 2 * np.pi, len(mean))
        x = mean + std * (0.5 * np.sin(t / 40 + phase) + 0.2 * rng.standard_normal((steps, len(mean))))
        x[rng.random(x.shape) < 0.05] = np.nan
        out.append(RecordedSeries(f"bed{k:04d}", list(card.channels), x.astype(np.float32)))
    return out


def metrics(port: int) -> dict[str, float]:
    """The daemon's Prometheus samples (name with labels -> value)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        body = r.read().decode()
    return {key: float(value) for key, value in re.findall(r"^([^#\s]\S*) (\S+)$", body, re.M)}


def rss_and_cpu(pid: int) -> tuple[float, float]:
    """Resident memory (MB) and CPU seconds (user + system) of a process, from /proc."""
    with open(f"/proc/{pid}/statm") as fh:
        rss = int(fh.read().split()[1]) * PAGE / 2**20
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return rss, (int(fields[11]) + int(fields[12])) / TICKS


@dataclass
class Sample:
    """One look at the daemon during the soak."""

    t: float  # seconds since the soak began
    rss_mb: float
    cpu_percent: float  # of one core, since the previous sample
    sent: int  # readings handed to the network by the publisher
    received: int  # messages the daemon took from its queue
    scored: int
    queue: int
    dropped: int
    lag: int  # sent - scored - what arrived since the daemon's last tick (that waits for the next one by design)


@dataclass
class Step:
    """One rate of the step search."""

    rate: float  # target readings/s over all streams
    achieved: float  # what the publisher managed
    sent: int
    received: int
    scored: int
    dropped: int
    drain_seconds: float  # last publish -> everything scored
    daemon_cpu_percent: float
    latency_p50: float  # arrival in the daemon -> score published, from its histogram (bucket upper bounds)
    latency_p99: float
    passed: bool
    why: str = ""


@dataclass
class Rig:
    """Broker, daemon and publisher of one soak run."""

    folder: Path
    model: str
    tick: float
    broker_port: int = field(default_factory=free_port)
    http_port: int = field(default_factory=free_port)
    procs: list[subprocess.Popen] = field(default_factory=list)

    def start(self) -> None:
        conf = self.folder / "mosquitto.conf"
        conf.write_text(f"listener {self.broker_port} 127.0.0.1\nallow_anonymous true\npersistence false\n"
                        "max_queued_messages 1000000\nmax_inflight_messages 0\n")  # fmt: skip
        self.procs.append(subprocess.Popen([MOSQUITTO, "-c", str(conf)], stdout=subprocess.DEVNULL,
                                           stderr=subprocess.DEVNULL))  # fmt: skip
        wait_port(self.broker_port)
        toml = self.folder / "monitor.toml"
        toml.write_text(
            f'[mqtt]\nport = {self.broker_port}\ntopics = ["{TOPIC}"]\nclient_id = "soak-monitor"\n'
            f'queue_size = 20000\n[model]\npath = "{self.model}"\nproviders = "cpu"\nwatch = false\n'
            f"[monitor]\ntick_interval = {self.tick}\n"
            f'[state]\npath = "{self.folder / "state.npz"}"\ncheckpoint_interval = 10.0\n'
            f"[http]\nport = {self.http_port}\n"
        )  # fmt: skip
        log = open(self.folder / "daemon.log", "wb")
        self.daemon = subprocess.Popen([sys.executable, "-m", "trep_edge.cli", "run", "--config", str(toml)],
                                       stdout=log, stderr=subprocess.STDOUT)  # fmt: skip
        self.procs.append(self.daemon)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.http_port}/readyz", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                time.sleep(0.2)
        else:
            raise RuntimeError(f"the daemon did not become ready: {(self.folder / 'daemon.log').read_text()}")
        self.publisher = Publisher("127.0.0.1", self.broker_port, "soak-publisher")
        self.publisher.wait_connected()

    def stop(self) -> None:
        self.publisher.close()
        for proc in reversed(self.procs):
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()

    def counters(self) -> dict[str, float]:
        m = metrics(self.http_port)
        return {"received": m.get("trep_edge_messages_total", 0.0), "scored": m.get("trep_edge_scored_total", 0.0),
                "dropped": m.get("trep_edge_dropped_total", 0.0), "queue": m.get("trep_edge_queue_depth", 0.0),
                "last_tick": m.get("trep_edge_last_tick_timestamp_seconds", 0.0),
                "latency": {k: v for k, v in m.items() if k.startswith("trep_edge_reading_latency_seconds_bucket")}}

    def wait_scored(self, target: int, timeout: float) -> float:
        """Seconds until the daemon has received and scored ``target`` readings (inf after ``timeout``)."""
        began = time.monotonic()
        while time.monotonic() - began < timeout:
            c = self.counters()
            if c["received"] >= target and c["scored"] >= target:
                return time.monotonic() - began
            time.sleep(0.1)
        return float("inf")


def quantile(before: dict[str, float], after: dict[str, float], q: float) -> float:
    """Quantile of the latency histogram's observations between two scrapes (bucket upper bound)."""
    bounds = []
    for key, count in after.items():
        le = key.split('le="')[1].split('"')[0]
        bounds.append((float("inf") if le == "+Inf" else float(le), count - before.get(key, 0.0)))
    bounds.sort()
    total = bounds[-1][1] if bounds else 0
    for bound, cumulative in bounds:
        if total and cumulative >= q * total:
            return bound
    return float("nan")


def run_step(rig: Rig, series: list[RecordedSeries], t0: float, start: int, rate: float, seconds: float,
             max_drain: float, max_latency: float) -> tuple[Step, int]:  # fmt: skip
    """Publish at ``rate`` readings/s in total for ``seconds``; return the step and the next step index."""
    per_stream = rate / len(series)
    steps = max(1, int(round(per_stream * seconds)))
    before = rig.counters()
    cpu0 = rss_and_cpu(rig.daemon.pid)[1]
    stats = replay(series, rig.publisher, TOPIC, per_stream, t0=t0, start=start, limit=steps)
    drain = rig.wait_scored(rig.publisher.sent, max(30.0, 3 * max_drain))
    after = rig.counters()
    cpu = (rss_and_cpu(rig.daemon.pid)[1] - cpu0) / max(stats.seconds + min(drain, 30.0), 1e-9) * 100
    achieved = stats.published / stats.seconds
    received = int(after["received"] - before["received"])
    step = Step(rate, round(achieved, 1), stats.published, received, int(after["scored"] - before["scored"]),
                int(after["dropped"] - before["dropped"]), round(drain, 2), round(cpu, 1),
                quantile(before["latency"], after["latency"], 0.5), quantile(before["latency"], after["latency"], 0.99),
                passed=True)  # fmt: skip
    problems = []
    if achieved < 0.95 * rate:
        problems.append(f"publisher reached only {achieved:.0f}/s")
    if step.dropped or received < stats.published:
        problems.append(f"dropped {step.dropped}, lost {stats.published - received}")
    if drain > max_drain:
        problems.append(f"took {drain:.1f} s after the last publish to score everything (lag)")
    if step.latency_p99 > max_latency:
        problems.append(f"99 % of readings waited up to {step.latency_p99:g} s for their score (lag)")
    step.passed, step.why = not problems, "; ".join(problems)
    return step, start + steps


def soak(rig: Rig, series: list[RecordedSeries], t0: float, start: int, rate: float, seconds: float,
         every: float) -> dict:  # fmt: skip
    """Publish at ``rate`` for ``seconds`` while sampling the daemon; return the samples and the totals."""
    samples: list[Sample] = []
    done = threading.Event()
    began = time.monotonic()
    base, sent0 = rig.counters(), rig.publisher.sent

    def sample() -> None:
        last_cpu, last_t = rss_and_cpu(rig.daemon.pid)[1], time.monotonic()
        while not done.wait(every):
            rss, cpu = rss_and_cpu(rig.daemon.pid)
            sent, now, c = rig.publisher.sent - sent0, time.monotonic(), rig.counters()
            scored = int(c["scored"] - base["scored"])
            lag = sent - scored - rate * max(0.0, time.time() - c["last_tick"])
            cpu_percent = round((cpu - last_cpu) / (now - last_t) * 100, 1)
            samples.append(Sample(round(now - began, 2), round(rss, 1), cpu_percent, sent,
                                  int(c["received"] - base["received"]), scored, int(c["queue"]),
                                  int(c["dropped"] - base["dropped"]), int(lag)))  # fmt: skip
            last_cpu, last_t = cpu, now

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    per_stream = rate / len(series)
    stats = replay(series, rig.publisher, TOPIC, per_stream, t0=t0, start=start, limit=int(per_stream * seconds))
    drain = rig.wait_scored(rig.publisher.sent, 60.0)
    done.set()
    thread.join()
    end = rig.counters()
    return {
        "rate": rate, "seconds": round(stats.seconds, 1), "achieved": round(stats.published / stats.seconds, 1),
        "published": stats.published, "received": int(end["received"] - base["received"]),
        "scored": int(end["scored"] - base["scored"]), "dropped": int(end["dropped"] - base["dropped"]),
        "lost": stats.published - int(end["received"] - base["received"]), "drain_seconds": round(drain, 2),
        "latency_p50": quantile(base["latency"], end["latency"], 0.5),
        "latency_p99": quantile(base["latency"], end["latency"], 0.99),
        **trends([asdict(s) for s in samples]),
        "samples": [asdict(s) for s in samples],
    }  # fmt: skip


def _halves(t: np.ndarray, y: np.ndarray) -> dict:
    second = t >= t[-1] / 2
    slope = float(np.polyfit(t[second], y[second], 1)[0]) if second.sum() >= 2 else float("nan")
    return {"first": float(y[0]), "last": float(y[-1]), "max": float(y.max()),
            "first_half_mean": round(float(y[~second].mean()), 1) if (~second).any() else None,
            "second_half_mean": round(float(y[second].mean()), 1), "second_half_slope_per_minute": round(slope * 60, 2)}


def trends(samples: list[dict]) -> dict:
    """RSS, CPU and lag over the soak: start, end, peak, the two halves' means and the second half's slope.

    Lag is readings sent but not scored beyond those that arrived since the daemon's last tick: raw ``sent -
    scored`` swings by a tick's worth with the phase of each sample against the tick (and that phase drifts), so
    it measures nothing; a lag that keeps growing means the daemon falls behind, however slowly.
    """
    if not samples:
        return {}
    t = np.array([x["t"] for x in samples])
    series = {"rss_mb": "rss_mb", "daemon_cpu_percent": "cpu_percent", "lag_readings": "lag"}
    return {name: _halves(t, np.array([x[key] for x in samples], dtype=np.float64)) for name, key in series.items()}


def plot(result: dict, png: Path) -> None:
    """RSS, and the readings waiting before and inside the daemon, over the soak."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    s = result["soak"]["samples"]
    t = [x["t"] for x in s]
    fig, (a, b) = plt.subplots(2, 1, figsize=(8, 5), sharex=True)
    a.plot(t, [x["rss_mb"] for x in s])
    a.set_ylabel("daemon RSS (MB)")
    a.set_ylim(0, max(x["rss_mb"] for x in s) * 1.2)
    a.set_title(f"soak at {result['soak']['rate']:g} readings/s ({result['streams']} streams), "
                f"dropped {result['soak']['dropped']}, lost {result['soak']['lost']}")  # fmt: skip
    b.plot(t, [x["sent"] - x["scored"] for x in s], color="0.7", label="sent - scored")
    b.plot(t, [x["lag"] for x in s], label="lag: sent - scored - arrived since the last tick")
    b.set_ylabel("readings")
    b.legend(loc="upper left", fontsize=8)
    b.set_xlabel("seconds")
    fig.tight_layout()
    fig.savefig(png, dpi=90)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)  # fmt: skip
    p.add_argument("--model", default="models/icu-vitals.onnx")
    p.add_argument("--streams", type=int, default=200, help="beds publishing at once")
    p.add_argument("--rates", default="200,500,1000,2000,3000,4000,6000", help="total readings/s to step through")
    p.add_argument("--step-seconds", type=float, default=20.0)
    p.add_argument("--max-drain", type=float, default=3.0, help="seconds after the last publish to score everything")
    p.add_argument("--max-latency", type=float, default=2.5, help="p99 of arrival -> score published, in seconds "
                   "(histogram bucket bound: 1, 2.5, 5, ...)")
    p.add_argument("--soak-seconds", type=float, default=240.0)
    p.add_argument("--soak-rate", type=float, help="soak at this rate instead of the highest passing step")
    p.add_argument("--sample-every", type=float, default=2.0)
    p.add_argument("--tick", type=float, default=1.0, help="the daemon's [monitor] tick_interval")
    p.add_argument("--out", default="bench/results/soak.json")
    p.add_argument("--no-plot", action="store_true")
    args = p.parse_args(argv)

    card = load_engine(args.model, "cpu").card
    rates = [float(r) for r in args.rates.split(",")]
    per_stream_max = max(rates + [args.soak_rate or 0]) / args.streams
    total_steps = int(per_stream_max * (args.step_seconds * len(rates) + args.soak_seconds)) + 10
    series = synthetic_streams(card, args.streams, total_steps)
    result = {"command": " ".join([Path(sys.executable).name, *sys.argv]),
              "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
              "machine": {"cpus": os.cpu_count(), "cpu": platform.processor() or platform.machine(),
                          "load_average_at_start": os.getloadavg()},
              "model": {"path": args.model, "name": card.name, "window": card.window, "channels": len(card.channels)},
              "code": subprocess.run(["git", "describe", "--always", "--dirty"], capture_output=True, text=True,
                                     cwd=Path(__file__).parent).stdout.strip(),
              "streams": args.streams, "tick": args.tick, "steps": []}  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="trep-soak-") as tmp:
        rig = Rig(Path(tmp), args.model, args.tick)
        rig.start()
        try:
            t0, start, best = float(int(time.time())), 0, None
            for rate in rates:
                step, start = run_step(rig, series, t0, start, rate, args.step_seconds, args.max_drain,
                                       args.max_latency)  # fmt: skip
                result["steps"].append(asdict(step))
                print(json.dumps(asdict(step)), flush=True)
                if not step.passed:
                    break
                best = rate
            rate = args.soak_rate or best
            if rate is None:
                raise SystemExit("no rate passed; lower --rates")
            result["highest_sustained_rate"] = best
            result["soak"] = soak(rig, series, t0, start, rate, args.soak_seconds, args.sample_every)
        finally:
            rig.stop()
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    summary = {k: v for k, v in result["soak"].items() if k != "samples"}
    print(json.dumps({"highest_sustained_rate": result["highest_sustained_rate"], "soak": summary}, indent=1))
    if not args.no_plot:
        plot(result, out.with_suffix(".png"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
