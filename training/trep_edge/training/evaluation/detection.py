"""``trep-edge eval detect``: the streaming-detection benchmark — this product's detector beside real peers.

Every detector starts cold on each stream and sees only the readings before the one it scores; no detector sees a
label. Peers, each with the committed alert rule its own documentation or the paper gives:

- ``rolling_z``: the largest |z| over channels of the reading against the previous 100 readings; alerts at 4.
- ``hst``: River's ``HalfSpaceTrees`` with its default trees (10, height 8, window 250) on online min-max scaled
  readings (``preprocessing.MinMaxScaler``, as River's docs pair them); alerts at μ + 4σ of the probation part's
  scores (its scores crowd near 1 on scaled sensor data, so a fixed cut such as 0.9 alerts on almost every reading).
- ``stumpi``: a causal matrix-profile discord score (``stumpy.stumpi``, subsequence 32, egress so the cost stays
  linear), the largest channel's distance; alerts at μ + 4σ of the probation part's scores.
- ``paper``: T-Rep's protocol as published — masked-vs-unmasked L1, adjusted by the mean of the previous 21, μ + 4σ
  of the probation part's adjusted scores, the delay-7 rule — with the same model as ``trep``.
- ``trep``: this product's detector (``runtime/trep_edge/runtime/core/detector.py``): each stream fed to the daemon's
  ``Monitor`` by ``offline.detect_recording``, the code ``trep-edge score`` runs; ``trep:NAME`` rows are ablations
  (``--ablations``). Each (model, detector settings, stream) is scored once and cached (``Detections``).
- ``trep:per-stream``: the same detector, each synthetic, archive and UCR stream with its own model trained on its
  probation part only (``--per-stream-train``, ``detection_per_stream``); ``trep:per-stream:NAME`` its ablations.
- ``trep:fine-tuned``: the same, each model fine-tuned from ``--per-stream-init-from M.onnx`` on that part instead.

Metrics: ``detection_metrics`` (NAB at the committed alerts and at the corpus-tuned threshold, event F1, delay,
false alarms per 1,000 rows, UCR top-1) and point-adjusted F1 with delay 7 (``training.evaluation.point_adjusted``).
"""
from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import math
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from trep_edge.runtime.core.detector import DetectorConfig
from trep_edge.runtime.core.engine import Engine, load_engine
from trep_edge.runtime.core.offline import detect_recording
from trep_edge.runtime.core.scoring import adjust_scores, calibrate, threshold
from trep_edge.training.evaluation.paper_protocol import detect
from trep_edge.training.evaluation.point_adjusted import point_adjust_f1

from trep_edge.training.evaluation import detection_metrics as dm
from trep_edge.training.evaluation.detection_corpus import Stream, corpus

Output = tuple[np.ndarray, np.ndarray]  # score [T], committed alerts [T]
PEERS = ("rolling_z", "hst", "stumpi", "paper")
CACHE_VERSION = b"6"  # bump when detect_recording's output changes for the same model, settings and data
PEER_PACKAGES = {"hst": ("river", "River"), "stumpi": ("stumpy", "stumpy")}  # peer: (module, name) of [bench]


def require_peers(peers: list[str]) -> None:
    """Refuse peers whose ``[bench]`` package is missing, in one line naming the extra; called before any work, so
    that a run does not die at its peers after its detectors' hour."""
    for peer in peers:
        module, name = PEER_PACKAGES.get(peer, (None, None))
        if module and importlib.util.find_spec(module) is None:
            raise SystemExit(f"the {peer} peer needs {name}: pip install 'trep-edge[bench]'")


def rolling_z(stream: Stream, window: int = 100, level: float = 4.0) -> Output:
    """|z| of each reading against the previous ``window`` readings, largest over channels."""
    x = stream.values
    score = np.full(len(x), np.nan)
    for t in range(window, len(x)):
        past = x[t - window : t]
        z = np.abs(x[t] - np.nanmean(past, axis=0)) / np.maximum(np.nanstd(past, axis=0), 1e-12)
        score[t] = np.nanmax(z) if np.isfinite(z).any() else np.nan
    return score, np.nan_to_num(score) >= level


def hst(stream: Stream) -> Output:
    """River's HalfSpaceTrees on min-max scaled readings (score before learning each one)."""
    require_peers(["hst"])
    from river import anomaly, compose, preprocessing
    model = compose.Pipeline(preprocessing.MinMaxScaler(), anomaly.HalfSpaceTrees(seed=0))
    score = np.full(len(stream.values), np.nan)
    for t, row in enumerate(stream.values):
        sample = {f"c{c}": float(v) for c, v in enumerate(row) if math.isfinite(v)}
        if sample:
            score[t] = model.score_one(sample)
            model.learn_one(sample)
    return score, _mu_sigma_alerts(score, 4.0, 0)


def stumpi(stream: Stream, m: int = 32) -> Output:
    """Causal matrix-profile discord distance of each new subsequence, largest over channels."""
    require_peers(["stumpi"])
    import stumpy
    t_len, channels = stream.values.shape
    score = np.full(t_len, np.nan)
    start = max(4 * m, 1)
    for c in range(channels):
        x = np.nan_to_num(stream.values[:, c], nan=float(np.nanmedian(stream.values[:, c])))
        if t_len <= start:
            continue
        profile = stumpy.stumpi(x[:start], m=m, egress=True)
        column = np.full(t_len, np.nan)
        for t in range(start, t_len):
            profile.update(x[t])  # egress: the profile keeps its initial length, so each update costs the same
            column[t] = profile.P_[-1]
        score = np.fmax(score, np.where(np.isfinite(column), column, np.nan))
    return score, _mu_sigma_alerts(score, 4.0, 0)


def _mu_sigma_alerts(score: np.ndarray, beta: float, delay: int) -> np.ndarray:
    """Alerts at μ + β σ of the probation part's finite scores, with the paper's delay rule."""
    head = score[: dm.probation(len(score))]
    head = head[np.isfinite(head)]
    if head.size < 2:
        return np.zeros(len(score), dtype=bool)
    return detect(np.nan_to_num(score, nan=-np.inf), float(head.mean() + beta * head.std()), delay)


def paper(raw: np.ndarray) -> Output:
    """T-Rep's published protocol on the model's raw distances ``[T]`` (module docstring)."""
    adjusted = adjust_scores(np.where(np.isfinite(raw), raw, np.nan), z=21)
    head = adjusted[: dm.probation(len(raw))]
    if np.isfinite(head).sum() < 2:
        return adjusted, np.zeros(len(raw), dtype=bool)
    cut = threshold(calibrate(head), 4.0)
    return adjusted, detect(np.nan_to_num(adjusted, nan=-np.inf), cut, 7)


class Detections:
    """The product's detector over each stream (``offline.detect_recording``: the daemon's monitor), run once per
    (model, detector settings, stream) and cached on disk: the raw distance, score and alerts of every row."""

    def __init__(self, cache: Path) -> None:
        self.cache = cache

    def get(self, engine: Engine, stream: Stream, config: DetectorConfig = DetectorConfig()) -> dict[str, np.ndarray]:
        """``raw``, ``score`` and ``alerts`` of the stream (cache key: model sha256, settings, the stream's data)."""
        settings = json.dumps(config.to_dict(), sort_keys=True).encode()
        key = hashlib.sha256(CACHE_VERSION + engine.sha256.encode() + settings + stream.values.tobytes())
        path = self.cache / f"{key.hexdigest()[:24]}.npz"
        if path.is_file():
            with np.load(path) as data:
                return dict(data)
        det = detect_recording(engine, stream.values, config)
        out = {"raw": det.raw, "score": det.score, "alerts": det.alerts}
        self.cache.mkdir(parents=True, exist_ok=True)
        np.savez_compressed(path, **out)
        return out


def summarise(outputs: list[Output], streams: list[Stream]) -> dict[str, float | str]:
    """Every metric of one detector over a set of streams."""
    scores, alerts = [o[0] for o in outputs], [o[1] for o in outputs]
    events = [s.events for s in streams]
    row = {f"nab_{p}": dm.nab_score(alerts, events, p) for p in dm.PROFILES}
    row["nab_interval"] = "{:.1f}–{:.1f}".format(*dm.nab_interval(alerts, events))
    row["nab_tuned"], row["tuned_threshold"] = dm.tuned_nab(scores, events)
    row.update({k: v for k, v in dm.event_f1(alerts, events).items()})
    row["fa_per_1k"] = dm.false_alarms_per_1000(alerts, events)
    row["probation_alerts"] = dm.probation_alerts(alerts)
    labelled = [(a, s) for a, s in zip(alerts, streams) if s.events]
    pa = [point_adjust_f1(a, _labels(s), 7) for a, s in labelled]
    tp, fp, fn = (sum(r[k] for r in pa) for k in ("tp", "fp", "fn"))
    row["pa_f1_7"] = 2 * tp / (2 * tp + fp + fn) if tp else 0.0
    ucr = [(o[0], s) for o, s in zip(outputs, streams) if s.category == "ucr"]
    if ucr:
        row["ucr_top1"] = sum(dm.ucr_top1(sc, s.test_start, s.events[0]) for sc, s in ucr) / len(ucr)
    return row


def vs_committed(outputs: list[Output | None], committed: list[Output | None], streams: list[Stream]) -> str:
    """The 90 % interval of a detector's NAB score less the committed detector's, over the same bootstrap draws of the
    streams both have an output for (``detection_metrics.nab_interval``), as ``"+a to +b"``."""
    pick = [k for k, (o, c) in enumerate(zip(outputs, committed)) if o is not None and c is not None]
    low, high = dm.nab_interval([outputs[k][1] for k in pick], [streams[k].events for k in pick],
                                baseline=[committed[k][1] for k in pick])  # fmt: skip
    return f"{low:+.1f} to {high:+.1f}"


def summarise_groups(
    outputs: list[Output | None], streams: list[Stream], groups: dict[str, list[str]]
) -> dict[str, dict[str, float | str]]:
    """``summarise`` over each group of categories whose streams all have an output (None: the detector skipped it)."""
    rows = {}
    for group, cats in groups.items():
        pick = [k for k, s in enumerate(streams) if s.category in cats]
        if pick and all(outputs[k] is not None for k in pick):
            rows[group] = summarise([outputs[k] for k in pick], [streams[k] for k in pick])
    return rows


def _labels(stream: Stream) -> np.ndarray:
    labels = np.zeros(len(stream.values), dtype=bool)
    for a, b in stream.events:
        labels[a : b + 1] = True
    return labels


def run(args: argparse.Namespace) -> dict:
    """Score every stream with every detector; return the results (and write them)."""
    started = time.perf_counter()
    streams = corpus(args.data_root, args.quick)
    detections = Detections(Path(args.cache).expanduser())
    general = load_engine(args.model, "cpu")
    icu = load_engine(args.icu_model, "cpu")
    variants = {"trep": DetectorConfig()} | DetectorConfig.variants(args.ablations or [])
    detectors: dict[str, Callable[[Stream], Output]] = {}
    for name, config in variants.items():
        label = name if name == "trep" else f"trep:{name}"
        detectors[label] = lambda s, c=config: _trep(s, c, general, icu, detections)
    scope: dict[str, tuple[str, ...]] = {}  # detectors run on some categories only
    notes: dict[str, str] = {}
    per_stream = {}  # row family -> (its models, its note)
    if getattr(args, "per_stream_train", False) or getattr(args, "per_stream_init_from", None):
        from trep_edge.training.evaluation import detection_per_stream as ps

        cache = Path(args.per_stream_cache).expanduser()
        if getattr(args, "per_stream_train", False):
            per_stream["trep:per-stream"] = ps.PerStreamModels(cache, args.per_stream_threads), ps.NOTE
        if getattr(args, "per_stream_init_from", None):
            iterations = getattr(args, "per_stream_fine_tune_iterations", None)
            iterations = ps.FINE_TUNE_ITERATIONS if iterations is None else iterations
            base = ps.FineTune.of(Path(args.per_stream_init_from), iterations)
            per_stream["trep:fine-tuned"] = ps.PerStreamModels(cache, args.per_stream_threads, base), base.note
        extra = DetectorConfig.variants(getattr(args, "per_stream_ablations", None) or [])
        for family, (models, note) in per_stream.items():
            for name, config in ({"": DetectorConfig()} | extra).items():
                label = family + (f":{name}" if name else "")
                detectors[label] = lambda s, c=config, m=models: _trep_per_stream(s, c, m, detections)
                scope[label], notes[label] = ps.CATEGORIES, note
    chosen = [p for p in (PEERS if args.peers is None else args.peers.split(",")) if p]
    require_peers(chosen)
    peers = {"rolling_z": rolling_z, "hst": hst, "stumpi": stumpi,
             "paper": lambda s: paper(detections.get(_engine_for(s, general, icu), s)["raw"])}  # fmt: skip
    detectors.update({p: peers[p] for p in chosen})
    results: dict[str, dict] = {"command": args.command, "quick": args.quick, "model": str(args.model),
                                "icu_model": str(args.icu_model), "rows": {}, "seconds": {},
                                "notes": notes}  # fmt: skip
    categories = sorted({s.category for s in streams})
    # Every detector also gets a row over each partial scope's categories, so a partial row has peers to stand by.
    groups = {"overall": categories} | {"+".join(c): [x for x in categories if x in c] for c in set(scope.values())}
    groups |= {cat: [cat] for cat in categories}
    committed = None
    for name, fn in detectors.items():
        began = time.perf_counter()
        covered = scope.get(name, categories)
        outputs = [fn(s) if s.category in covered else None for s in streams]
        results["seconds"][name] = time.perf_counter() - began
        results["rows"][name] = rows = summarise_groups(outputs, streams, groups)
        shown = "overall" if name not in scope else "+".join(scope[name])
        if name == "trep":  # the first detector: every later row is paired with it on the streams it covers
            committed = outputs
        elif committed is not None and shown in rows:
            rows[shown]["vs_trep"] = vs_committed(outputs, committed, streams)
        print(json.dumps({name: rows.get(shown)}, default=float), flush=True)
    for family, (models, _) in per_stream.items():
        results["per_stream" if family == "trep:per-stream" else "fine_tuned"] = models.info
    results["wall_seconds"] = time.perf_counter() - started
    results["streams"] = {cat: sum(s.category == cat for s in streams) for cat in categories}
    out = Path(args.out or "bench/results/detection.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2, default=float))
    # The tables go beside the JSON unless named, so a run written elsewhere never overwrites the committed tables.
    Path(args.table or out.with_suffix(".md")).write_text(markdown(results))
    return results


def _engine_for(stream: Stream, general: Engine, icu: Engine) -> Engine:
    return icu if stream.category == "sepsis" else general


def _trep(stream: Stream, config: DetectorConfig, general: Engine, icu: Engine, detections: Detections) -> Output:
    det = detections.get(_engine_for(stream, general, icu), stream, config)
    return det["score"], det["alerts"]


def _trep_per_stream(stream: Stream, config: DetectorConfig, models, detections: Detections) -> Output:
    """The product's detector with the stream's own model (``detection_per_stream``)."""
    det = detections.get(models.engine(stream), stream, config)
    return det["score"], det["alerts"]


def markdown(results: dict) -> str:
    """One table per category and overall: a row per detector. Beside NAB std, the 90 % interval of the score over
    bootstrap draws of the section's streams (``detection_metrics.nab_interval``), and where a script adds it
    (``vs_trep``), of the row's score less the committed detector's on the same draws: a change whose interval holds 0
    is within what the choice of streams alone moves."""
    cols = [("nab_standard", "NAB std"), ("nab_interval", "90 % of stream draws"), ("vs_trep", "− trep, 90 %"),
            ("nab_reward_low_FP", "low FP"), ("nab_reward_low_FN", "low FN"),
            ("nab_tuned", "NAB std tuned"), ("f1", "event F1"), ("mean_delay", "delay"), ("fa_per_1k", "FA/1k"),
            ("pa_f1_7", "PA-F1@7"), ("ucr_top1", "UCR top-1"), ("probation_alerts", "probation alerts")]  # fmt: skip
    lines = [f"Command: `{results['command']}` — wall time {results['wall_seconds']:.0f} s; streams "
             f"{results['streams']}; model `{results['model']}` (sepsis: `{results['icu_model']}`).", ""]  # fmt: skip
    notes = results.get("notes") or {}
    lines += [f"- `{name}`: {note}" for name, note in notes.items()] + [""] * bool(notes)
    sections = ["overall"] + sorted(set().union(*(r.keys() for r in results["rows"].values())) - {"overall"})
    for section in sections:
        lines += [f"**{section}**", "", "| detector | " + " | ".join(c[1] for c in cols) + " | seconds |",
                  "|---" * (len(cols) + 2) + "|"]  # fmt: skip
        for name, rows in results["rows"].items():
            if section not in rows:
                continue  # a detector that does not run on every stream of this section (results["notes"])
            row = rows[section]
            cells = [f"{row[k]:.3g}" if isinstance(row.get(k), float) and math.isfinite(row[k]) else
                     ("" if k not in row else str(row[k])) for k, _ in cols]  # fmt: skip
            lines.append(f"| {name} | " + " | ".join(cells) + f" | {results['seconds'][name]:.0f} |")
        lines.append("")
    return "\n".join(lines)
