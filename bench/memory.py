"""Memory of the monitor per stream: resident memory and checkpoint size against the number of streams, per model.

    flock /tmp/trep-heavy.lock nice -n 5 .venv/bin/python bench/memory.py      # about 7 min on 2 cores

For each model and each stream count N, a fresh interpreter (so its RSS is its own and not what an earlier point
left in the allocator) loads the engine as the daemon does (``runtime.engine.load_engine``, engine selection
``auto``, CPU), builds a ``Monitor`` and feeds N streams until every stream's window spans the card's window length
and every stream has just been scored, all N in the same tick (the worst tick a deployment whose streams all send
at the same period has). It then records:

- resident memory after the ticks (``VmRSS``: what the process holds between ticks);
- the peak of each phase (``VmHWM``, reset between phases through ``/proc/self/clear_refs``): *register* (the
  first reading of every stream, which allocates its state), *score* (the scoring ticks), *checkpoint*
  (``Monitor.state_dict()`` written with ``np.savez``, as the daemon does every ``checkpoint_interval``);
- the process's overall peak (``resource.getrusage(...).ru_maxrss``, read before each phase reset and the largest
  kept; it is at least the parent's size when it spawned the worker, so the parent is kept small);
- the checkpoint's file size and the state's in-memory bytes.

N = 0 is the model-load baseline (engine loaded, empty monitor). Memory per stream is the least-squares slope over
the points with N > 0, and its intercept is the "loaded baseline": the model plus onnxruntime's working memory once
ticks have scored thousands of windows (in chunks of ``Engine.max_rows`` = 1024 rows; its CPU arena keeps what its
largest runs needed and does not give it back), which is why the intercept is far above the N = 0 baseline and why
N = 0 is left out of the fit. The difference between the peak line's slope and the resident line's is what a tick
holds per lane it scores and frees afterwards (batch windows, the novelty search's float32 copy of the lane's
representation ring, the results).

Filling windows: every scored reading costs one window through the model (about 700-800 windows/s on this 2-core
machine), so scoring all W steps of N streams (``--fill full``) costs N × W windows: 5,000 streams of the general
model (W = 128) would take 15 minutes. The default ``--fill sparse`` sends each stream a reading at step 0 and one
at step W - 1, with ``max_gap`` raised to W so that the steps between are filled as missing instead of resetting
the stream: the window then spans W steps and both readings are scored, at 2 N windows. Per-stream state is
allocated in full when a stream first appears (dense arrays whose new rows are written then, so their pages are
resident), so what the readings inside the window are does not change the memory; ``--check-fill N`` measures one
point both ways to show it (the JSON's ``fill_check``; the engine's arena varies by tens of MiB from run to run).

Stream registration: each new lane appends a row to every per-stream array. While ``StreamState.add_streams``
(runtime/trep_edge/runtime/core/scoring.py) appended with ``np.concatenate``, every new stream copied all existing streams' state (the
16 KiB representation ring of each): 5,000 streams took about 100 s to register and 20,000 would have taken
about 30 min. With buffers that grow by doubling (since commit 88a98f7) it is amortised O(1) per stream, and a
growth step holds the old and the new buffer for a moment (the register peak). The ``register s`` column shows
which runtime was measured; the bench predicts each point's time from the previous one (assuming registration
grows with N², the worse case) and skips a point that would overrun ``--budget``.

For a channel-independent model (card ``channel_mode = "independent"``) each channel of a stream is its own lane
with its own window and detector state; ``--channels`` sets how many each stream sends (default 1: a stream is one
lane, the unit ``[windows] max_streams`` counts for such models). Memory per stream is per lane times channels.

Writes ``--out`` (JSON, with the command line) and ``--table`` (Markdown, the tables of docs/operations.md "Memory").
The capacity columns use the memory limits shipped in deploy/ (systemd ``MemoryMax``, Kubernetes ``limits.memory``).
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path
from typing import Any

import numpy as np

# bench/throughput.py: peak_rss_mb reads VmHWM (MiB; reset per phase here), machine says what the run was on.
from throughput import machine, peak_rss_mb

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
DEPLOY = ROOT / "deploy"
MODELS = ("models/icu-vitals.onnx", "models/general.onnx")
STREAMS = (0, 1000, 5000, 20000)
MIB = 2**20


# -- memory readings (Linux /proc) -----------------------------------------------------------------------------------
def status_mib(key: str) -> float:
    """A ``/proc/self/status`` memory field (``VmRSS``, ...) in MiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) / 1024
    raise KeyError(key)


_MAXRSS = [0.0]  # the largest ru_maxrss read before a reset (clear_refs resets ru_maxrss too: it reads the HWM)


def reset_peak() -> bool:
    """Reset this process's VmHWM to its current RSS, so the next reading is the peak of one phase only.

    Linux computes ``ru_maxrss`` of a live process from the same high-water mark, so it is read and kept first
    (``maxrss_mib`` returns the largest). Returns False where the kernel does not allow the reset (then phase
    peaks are cumulative, still upper bounds).
    """
    _MAXRSS[0] = max(_MAXRSS[0], resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def maxrss_mib() -> float:
    """The process's overall peak: the largest ``ru_maxrss`` (KiB on Linux) over all phases, in MiB."""
    return max(_MAXRSS[0], resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)


# -- synthetic readings ----------------------------------------------------------------------------------------------
def step_values(mean: np.ndarray, std: np.ndarray, phase: np.ndarray, step: int) -> np.ndarray:
    """Every stream's values at one step, ``[N, C]``: its channels' training mean plus a slow wave of half their
    spread. Plausible by construction: an implausible value would be filed as missing and leave its step unscored,
    and this bench needs every stream scored."""
    return mean + 0.5 * std * np.sin(2 * np.pi * step / 97.0 + phase)


def fill_steps(window: int, fill: str) -> list[int]:
    """The steps each stream sends a reading for so that its window spans ``window`` steps (module docstring)."""
    return list(range(window)) if fill == "full" else [0, window - 1]


# -- worker: one (model, N) point in its own process -----------------------------------------------------------------
def worker(case: dict[str, Any]) -> dict[str, Any]:
    """Measure one point: load, register N streams, score them, checkpoint; memory after each phase."""
    from trep_edge.runtime.core.engine import load_engine
    from trep_edge.runtime.core.monitor import Monitor
    from trep_edge.runtime.core.reading import Reading
    from trep_edge.runtime.core.windows import WindowConfig

    began = time.perf_counter()
    engine = load_engine(case["model"], "cpu")  # the daemon's loader; engine selection "auto" as shipped
    card = engine.card
    window = int(card.window)
    independent = card.channel_mode == "independent"
    sent = [f"c{j}" for j in range(case["channels"])] if independent else list(card.channels)
    lanes_per_stream = len(sent) if independent else 1
    n = int(case["streams"])
    period = float(card.period or 1.0)  # the card's period: no period-mismatch warning, as a correct deployment
    # max_gap = W lets the sparse fill's jump from step 0 to W - 1 become missing steps instead of a reset (a reset
    # would restart the window); max_streams counts lanes and must not refuse the bench's streams.
    config = WindowConfig(period=period, max_gap=window,
                          max_streams=max(WindowConfig().max_streams, n * lanes_per_stream))  # fmt: skip
    monitor = Monitor(engine, config)
    out: dict[str, Any] = {
        "model": card.name, "path": case["model"], "sha256": engine.sha256, "engine": engine.selected,
        "window": window, "channels_sent": len(sent), "lanes_per_stream": lanes_per_stream,
        "streams": n, "lanes": n * lanes_per_stream, "fill": case["fill"], "max_rows": engine.max_rows,
        "load_seconds": time.perf_counter() - began,
        "load_rss_mib": status_mib("VmRSS"), "load_peak_mib": peak_rss_mb(),
    }  # fmt: skip
    out["phase_peaks_exact"] = reset_peak()

    rng = np.random.default_rng(0)
    mean = np.asarray(card.normalisation["mean"], dtype=np.float64)
    std = np.asarray(card.normalisation["std"], dtype=np.float64)
    if independent:  # one normalised channel, applied to every channel a stream sends
        mean, std = np.full(len(sent), float(mean[0])), np.full(len(sent), float(std[0]))
    phase = rng.uniform(0, 2 * np.pi, size=(n, len(sent)))
    names = [f"s{i:06d}" for i in range(n)]
    rows: list[int] = []
    register_seconds = score_seconds = 0.0
    for k, step in enumerate(fill_steps(window, case["fill"]) if n else []):
        stamp = step * period
        values = step_values(mean, std, phase, step).tolist()
        started = time.perf_counter()
        for name, vals in zip(names, values):  # bounded: N readings per step
            kind = monitor.ingest(Reading(name, stamp, dict(zip(sent, vals))), now=stamp)
            if kind is not None:
                raise RuntimeError(f"reading of {name} at step {step} refused: {kind}")
        if k == 0:
            # The first step allocates every stream's state: its peak is the registration peak.
            register_seconds = time.perf_counter() - started
            out["register_peak_mib"] = peak_rss_mb()
            out["register_rss_mib"] = status_mib("VmRSS")
            reset_peak()
            started = time.perf_counter()
        result = monitor.tick(stamp)
        rows.append(result.batch_rows)
        del result  # the daemon publishes a tick's results and drops them before the next
        score_seconds += time.perf_counter() - started
    if n and rows[-1] != 2 * n * lanes_per_stream:
        raise RuntimeError(f"the last tick sent {rows[-1]} rows, not 2 per lane ({n * lanes_per_stream} lanes)")
    gc.collect()
    out.update(register_seconds=register_seconds, score_seconds=score_seconds, ticks=len(rows),
               windows_scored=sum(rows) // 2, score_peak_mib=peak_rss_mb() if n else None,
               rss_mib=status_mib("VmRSS"), counters=monitor.counters)  # fmt: skip

    reset_peak()
    with tempfile.TemporaryDirectory() as tmp:
        started = time.perf_counter()
        state = monitor.state_dict()
        out["state_bytes"] = int(sum(np.asarray(v).nbytes for v in state.values()))
        path = Path(tmp) / "monitor-state.npz"
        np.savez(path, **state)
        del state
        out["checkpoint_bytes"] = path.stat().st_size
        out["checkpoint_seconds"] = time.perf_counter() - started
    gc.collect()
    out["checkpoint_peak_mib"] = peak_rss_mb()
    out["peak_mib"] = maxrss_mib()  # ru_maxrss: the whole process's peak
    return out


# -- the run ---------------------------------------------------------------------------------------------------------
def run_point(case: dict[str, Any], timeout: float) -> dict[str, Any]:
    """Run one point in a fresh interpreter and return its numbers (``skipped`` with the reason on a timeout)."""
    try:
        done = subprocess.run([sys.executable, __file__, "--worker", json.dumps(case)], capture_output=True,
                              text=True, cwd=ROOT, timeout=max(timeout, 1.0))  # fmt: skip
    except subprocess.TimeoutExpired:
        return {**case, "skipped": f"did not finish within the remaining budget of {timeout:.0f} s"}
    if done.returncode != 0:
        raise RuntimeError(f"{case['model']} × {case['streams']} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def predicted_seconds(done: list[dict[str, Any]], streams: int) -> float:
    """Time a point of ``streams`` streams is expected to take, from the largest finished point of the same model:
    registration grows with N² (module docstring), scoring and the rest with N."""
    measured = [p for p in done if p.get("streams") and "skipped" not in p]
    if not measured:
        return 0.0
    last = max(measured, key=lambda p: p["streams"])
    ratio = streams / last["streams"]
    return last["register_seconds"] * ratio**2 + (last["score_seconds"] + last["checkpoint_seconds"]) * ratio + 10


def fit(points: list[dict[str, Any]], key: str, scale: float = 1.0) -> dict[str, float] | None:
    """Least-squares line of ``key`` (times ``scale``) against streams over the points with N > 0: slope per 1,000
    streams, intercept, and the largest residual (how straight the line is)."""
    use = [p for p in points if p.get("streams") and "skipped" not in p and p.get(key) is not None]
    if len(use) < 2:
        return None
    x = np.array([p["streams"] for p in use], dtype=np.float64)
    y = np.array([p[key] * scale for p in use], dtype=np.float64)
    slope, intercept = np.polyfit(x, y, 1)
    residual = float(np.max(np.abs(y - (slope * x + intercept))))
    return {"per_1000": float(slope * 1000), "intercept": float(intercept), "max_residual": residual,
            "points": len(use)}  # fmt: skip


def parse_size_mib(text: str, decimal: bool = False) -> float:
    """A memory size in MiB: ``1Gi``/``768Mi`` are 1024-based; a bare ``G``/``M`` is 1024-based for systemd and
    1000-based for Kubernetes (``decimal=True``); no unit is bytes."""
    match = re.fullmatch(r"\s*([\d.]+)\s*([KMGT])?(i)?B?\s*", text)
    if not match:
        raise ValueError(f"cannot read memory size {text!r}")
    number, unit, binary = float(match[1]), match[2], match[3]
    if not unit:
        return number / MIB
    base = 1000 if decimal and not binary else 1024
    return number * base ** ("KMGT".index(unit) + 1) / MIB


def shipped_limits() -> dict[str, float]:
    """The memory limits in deploy/, in MiB: each systemd unit's MemoryMax and the Kubernetes container limit."""
    limits: dict[str, float] = {}
    for unit in sorted((DEPLOY / "systemd").glob("*.service")):
        for value in re.findall(r"^MemoryMax=(\S+)$", unit.read_text(), re.M):
            limits[f"systemd {unit.name} MemoryMax={value}"] = parse_size_mib(value)
    k8s = DEPLOY / "k8s" / "trep-edge.yaml"
    if k8s.is_file():
        block = re.search(r"^\s*limits:\s*\n\s*memory:\s*(\S+)", k8s.read_text(), re.M)
        if block:
            limits[f"k8s limits.memory={block[1]}"] = parse_size_mib(block[1], decimal=True)
    return limits


def source_state() -> dict[str, Any]:
    """Which code was measured: the commit, uncommitted files under runtime/, and each runtime module's digest as
    on disk (per file, so that a file edited during a run is named), since per-stream memory and registration cost
    are properties of runtime/, not of the bench."""
    import hashlib

    head = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=ROOT).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "runtime"], capture_output=True, text=True,
                           cwd=ROOT).stdout.split()[1::2]  # fmt: skip
    files = {path.name: hashlib.sha256(path.read_bytes()).hexdigest()[:16]
             for path in sorted((ROOT / "runtime").glob("*.py"))}  # fmt: skip
    return {"commit": head, "runtime_uncommitted": dirty, "runtime_files": files}


def daemon_settings() -> dict[str, int]:
    """The shipped config's stream cap and tick intake cap (deploy/monitor.toml, which shows the defaults)."""
    config = tomllib.loads((DEPLOY / "monitor.toml").read_text())
    return {"max_streams": int(config["windows"]["max_streams"]),
            "tick_max_messages": int(config["monitor"]["tick_max_messages"])}  # fmt: skip


def _tick_transient(summary: dict[str, Any]) -> float:
    """MiB a tick holds per scored lane and frees afterwards: the peak line's slope minus the resident line's."""
    return max(summary["peak"]["per_1000"] - summary["rss"]["per_1000"], 0.0) / 1000


def daemon_peak_mib(summary: dict[str, Any], streams: int, tick_lanes: int) -> float:
    """Estimated peak of the daemon's monitor at ``streams`` streams: the larger of its worst tick and its checkpoint.

    A tick scores at most ``tick_lanes`` lanes: up to that many streams the measured peak line (all scored in one
    tick), and each stream beyond adds only its resident cost. The checkpoint is the measured checkpoint peak line
    (``state_dict`` copies about the state's size). An estimate built from measured lines, not a measurement.
    """
    peak, rss, checkpoint = summary["peak"], summary["rss"], summary["checkpoint_peak"]
    scored = min(streams, tick_lanes)
    tick = peak["intercept"] + peak["per_1000"] * scored / 1000 + rss["per_1000"] * (streams - scored) / 1000
    return max(tick, checkpoint["intercept"] + checkpoint["per_1000"] * streams / 1000)


def capacity(summary: dict[str, Any], limit_mib: float, headroom: float, tick_lanes: int | None = None) -> int | None:
    """Streams that fit in ``(1 - headroom) × limit_mib`` (None without the fits).

    ``tick_lanes`` None: every stream scored in the same tick, by the measured overall peak line (worst case).
    Otherwise the daemon's case (``daemon_peak_mib``): a tick takes in at most ``tick_max_messages`` messages
    (``runtime/trep_edge/runtime/service/tick_budget.py``), so at most that many lanes are scored at once with one reading per message.
    """
    peak = summary.get("peak")
    if not peak or not summary.get("rss") or not summary.get("checkpoint_peak") or peak["per_1000"] <= 0:
        return None
    room = limit_mib * (1 - headroom)
    all_in_one = max(0, int((room - peak["intercept"]) / peak["per_1000"] * 1000))
    if tick_lanes is None:
        return all_in_one
    # The daemon's peak grows monotonically with N: bisect for the largest N within the room.
    low, high = 0, 10**7
    while low < high:
        mid = (low + high + 1) // 2
        low, high = (mid, high) if daemon_peak_mib(summary, mid, tick_lanes) <= room else (low, mid - 1)
    return low


def needed_mib(summary: dict[str, Any], streams: int, headroom: float, tick_lanes: int) -> float | None:
    """The memory limit (MiB) that holds ``streams`` in the daemon's case, with the headroom."""
    if not summary.get("peak") or not summary.get("rss") or not summary.get("checkpoint_peak"):
        return None
    return daemon_peak_mib(summary, streams, tick_lanes) / (1 - headroom)


def summarise(points: list[dict[str, Any]], limits: dict[str, float], headroom: float,
              settings: dict[str, int]) -> dict[str, Any]:
    """One model's fits: memory and checkpoint per stream, baselines, and the streams each shipped limit holds."""
    zero = next((p for p in points if p.get("streams") == 0 and "skipped" not in p), None)
    summary: dict[str, Any] = {
        "baseline_rss_mib": zero["rss_mib"] if zero else None,
        "baseline_peak_mib": zero["peak_mib"] if zero else None,
        "rss": fit(points, "rss_mib"),
        "peak": fit(points, "peak_mib"),
        "checkpoint_peak": fit(points, "checkpoint_peak_mib"),
        "checkpoint_mib": fit(points, "checkpoint_bytes", 1 / MIB),
        "state_mib": fit(points, "state_bytes", 1 / MIB),
    }
    for key in ("rss", "peak", "checkpoint_peak", "checkpoint_mib", "state_mib"):
        if summary[key]:
            summary[key]["bytes_per_stream"] = summary[key]["per_1000"] * MIB / 1000
    if summary["rss"] and summary["peak"]:
        # What a tick adds per lane it scores (batch windows, the novelty search's float32 copy of each scored
        # lane's representation ring, results), freed after the tick.
        summary["tick_transient_bytes_per_lane"] = _tick_transient(summary) * MIB
    lanes = [p["lanes_per_stream"] for p in points if "lanes_per_stream" in p] or [1]
    tick_lanes = settings["tick_max_messages"] * lanes[0]  # one reading per message, each of its channels a lane
    measured = max((p["streams"] for p in points if "skipped" not in p), default=0)
    summary.update(
        tick_lanes=tick_lanes,
        capacity_all_in_one_tick={name: capacity(summary, mib, headroom) for name, mib in limits.items()},
        capacity_daemon_estimate={name: capacity(summary, mib, headroom, tick_lanes) for name, mib in limits.items()},
        max_streams={"streams": settings["max_streams"],
                     "times_largest_measured": settings["max_streams"] / max(measured, 1),
                     "limit_needed_mib": needed_mib(summary, settings["max_streams"], headroom, tick_lanes)},
    )  # fmt: skip
    return summary


def markdown(result: dict[str, Any]) -> str:
    """The Markdown tables of docs/operations.md "Memory": one row per point, then one per model."""
    lines = ["| model | streams | lanes | RSS after ticks MiB | peak register / score / checkpoint MiB | "
             "peak (ru_maxrss) MiB | checkpoint MiB | register s |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
    for p in result["points"]:
        if "skipped" in p:
            lines.append(f"| {Path(p['model']).stem} | {p['streams']:,} | | skipped: {p['skipped']} | | | | |")
            continue
        phases = " / ".join("–" if p.get(k) is None else f"{p[k]:,.0f}"
                            for k in ("register_peak_mib", "score_peak_mib", "checkpoint_peak_mib"))  # fmt: skip
        lines.append(f"| {p['model']} | {p['streams']:,} | {p['lanes']:,} | {p['rss_mib']:,.0f} | {phases} | "
                     f"{p['peak_mib']:,.0f} | {p['checkpoint_bytes'] / MIB:,.1f} | {p['register_seconds']:,.1f} |")
    headroom = result["headroom"]
    # Limits of the same size (the two systemd units, the pod) share a column.
    groups: dict[float, list[str]] = {}
    for name, mib in result["limits"].items():
        groups.setdefault(mib, []).append(name)
    columns = [(names[0], f"{mib:,.0f} MiB ({'; '.join(names)})") for mib, names in groups.items()]
    cap = result["daemon_settings"]["max_streams"]
    lines += ["", "| model | baseline after load MiB | loaded baseline MiB (RSS / peak) | RSS per stream | "
              "tick transient per scored lane | checkpoint per stream | "
              + " | ".join(f"streams in {label}, {100 * headroom:.0f} % headroom: all in one tick / daemon estimate"
                           for _, label in columns)
              + f" | limit for max_streams = {cap:,} (daemon estimate) |",
              "|---|---:|---:|---:|---:|---:|" + "---:|" * (len(columns) + 1)]  # fmt: skip
    for model, s in result["summary"].items():
        if not s["peak"]:
            lines.append(f"| {model} | too few points for a fit |")
            continue

        def per(key: str) -> str:
            return f"{s[key]['bytes_per_stream'] / 1024:,.1f} KiB"

        def count(value: int | None) -> str:
            return "–" if value is None else f"{value:,}"

        caps = " | ".join(f"{count(s['capacity_all_in_one_tick'][n])} / {count(s['capacity_daemon_estimate'][n])}"
                          for n, _ in columns)  # fmt: skip
        need = s["max_streams"]
        transient = s["tick_transient_bytes_per_lane"] / 1024
        lines.append(f"| {model} | {s['baseline_rss_mib']:,.0f} | {s['rss']['intercept']:,.0f} / "
                     f"{s['peak']['intercept']:,.0f} | {per('rss')} | {transient:,.1f} KiB"
                     f" | {per('checkpoint_mib')} | {caps} | {need['limit_needed_mib'] / 1024:,.1f} GiB "
                     f"({need['times_largest_measured']:,.0f}× the largest point) |")  # fmt: skip
    return "\n".join(lines)


def write(result: dict[str, Any], out: Path, table: Path) -> None:
    """Fit every model's points against the limits and settings now in deploy/, write the JSON and the table."""
    limits, settings = shipped_limits(), daemon_settings()
    result["command"] = result["command"].strip()
    by_model: dict[str, list[dict[str, Any]]] = {}
    for p in result["points"]:
        by_model.setdefault(p["model"] if "skipped" not in p else Path(p["model"]).stem, []).append(p)
    result.update(limits=limits, daemon_settings=settings,
                  summary={m: summarise(ps, limits, result["headroom"], settings) for m, ps in by_model.items()})
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    text = markdown(result)
    table.parent.mkdir(parents=True, exist_ok=True)
    table.write_text(f"<!-- {result['command']} -->\n{text}\n")
    print(text)
    print(f"wrote {out} and {table}")


def main(argv: list[str] | None = None) -> int:
    """Run every (model, N) point in its own process, fit per-stream memory, write the JSON and the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--model", action="append",
                        help=f"model file; repeat for several (default {', '.join(MODELS)})")  # fmt: skip
    parser.add_argument("--streams", default=",".join(map(str, STREAMS)),
                        help="stream counts, comma separated; 0 = the model-load baseline")  # fmt: skip
    parser.add_argument("--channels", type=int, default=1,
                        help="channels (lanes) each stream sends to a channel-independent model")  # fmt: skip
    parser.add_argument("--fill", choices=("sparse", "full"), default="sparse",
                        help="readings per stream: full = every step of the window, sparse = its first and last")
    parser.add_argument("--check-fill", type=int, default=100,
                        help="also measure this many streams with both fills, per model (0 = skip)")
    parser.add_argument("--headroom", type=float, default=0.25,
                        help="fraction of each memory limit kept free for what the daemon holds besides the monitor "
                             "(MQTT intake queue, publishing, HTTP) and allocator slack, in the capacity columns")
    parser.add_argument("--budget", type=float, default=600.0, help="seconds for the whole run; later points skip")
    parser.add_argument("--refit", action="store_true",
                        help="measure nothing: recompute the fits, capacities and table from --out's points (after "
                             "changing deploy/ limits or --headroom)")  # fmt: skip
    parser.add_argument("--out", default=str(RESULTS / "memory.json"), help="JSON results")
    parser.add_argument("--table", default=str(RESULTS / "memory.md"), help="Markdown tables")
    args = parser.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(json.loads(args.worker))))
        return 0
    if args.refit:
        result = json.loads(Path(args.out).read_text())
        result["headroom"] = args.headroom
        write(result, Path(args.out), Path(args.table))
        return 0
    # The parent imports neither onnxruntime nor the runtime before the workers run: a worker's ru_maxrss starts
    # from the parent's resident size at spawn, so the parent must stay small.
    began = time.monotonic()
    source = source_state()
    models = args.model or list(MODELS)
    counts = sorted({int(s) for s in args.streams.split(",") if s.strip()})
    deadline = began + args.budget
    points: list[dict[str, Any]] = []
    checks: list[dict[str, Any]] = []
    for model in models:
        done: list[dict[str, Any]] = []
        for n in counts:
            case = {"model": model, "streams": n, "channels": args.channels, "fill": args.fill}
            left = deadline - time.monotonic()
            if predicted_seconds(done, n) > left:
                row = {**case, "skipped": f"predicted {predicted_seconds(done, n):.0f} s > {left:.0f} s left"}
            else:
                row = run_point(case, left)
            done.append(row)
            print(json.dumps({k: row.get(k) for k in ("model", "streams", "rss_mib", "peak_mib", "checkpoint_bytes",
                                                      "register_seconds", "skipped")}), flush=True)  # fmt: skip
        points += done
        if args.check_fill:
            # The same N both ways: the sparse fill's memory must match a window of real readings.
            pair = {}
            for fill in ("sparse", "full"):
                case = {"model": model, "streams": args.check_fill, "channels": args.channels, "fill": fill}
                pair[fill] = run_point(case, deadline - time.monotonic())
            checks.append({"model": Path(model).stem, "streams": args.check_fill,
                           **{f"{f}_{k}": pair[f].get(k) for f in pair
                              for k in ("rss_mib", "peak_mib", "checkpoint_bytes", "windows_scored", "skipped")}})
            print(json.dumps(checks[-1]), flush=True)
    result = {
        "command": " ".join(["python bench/memory.py", *(sys.argv[1:] if argv is None else argv)]),
        "source": source,
        "runtime_files_changed_during_run": sorted(name for name, digest in source_state()["runtime_files"].items()
                                                   if source["runtime_files"].get(name) != digest),
        "machine": machine(), "fill": args.fill, "channels": args.channels, "headroom": args.headroom,
        "points": points, "fill_check": checks,
        "wall_seconds": time.monotonic() - began, "loadavg_1_5_15_after": os.getloadavg(),
    }  # fmt: skip
    write(result, Path(args.out), Path(args.table))
    return 0


if __name__ == "__main__":
    sys.exit(main())
