"""Detector variants on the detection benchmark's corpus in seconds: the detector replayed on captured inputs.

`trep-edge eval detect` feeds every stream to the daemon's monitor (`offline.detect_recording`) once per detector
setting, so each ablation row pays the engine again (about 5 minutes on the quick corpus). The detector's inputs do
not depend on its settings: each reading's paper distance, representation and window deviation, and the stream's
resets, come from the windows, the stream scale and the engine (the settings that shape them, `scale_warmup`,
`scale_adapt` and `deviation_window`, are the exception, and are refused here). This script records every call the
monitor makes on its `detector.Detector` while scoring a stream once per model (cached beside the benchmark's cache,
and made anew when the runtime code that shapes those inputs changes: `tape_code`), then replays those calls on a
detector of each variant's settings and scores the outputs with the benchmark's own metrics
(`detection.summarise_groups`). A change to the detector's judgement replays on the old tapes, which is what makes
trying one quick. `--check` first confirms that replaying the committed settings gives, row for row, the score and
alerts that `detect_recording` gave (every stream, exact equality), so a replayed row is the row the benchmark would
print for that variant. Peers are not run: their rows are the benchmark's.

    python bench/detector_replay.py --quick --check --variants 'level-only:step_record=0' --out runs/replay.md

`--per-stream` replays the evaluator's protocol instead (`trep-edge eval detect --per-stream-train`): each synthetic,
archive and UCR stream through its own model from the per-stream cache (trained there first if missing), each
stream's tape replayed on a detector of its own model's shape and card prior (`--categories` names other categories
to train models for, the multi-fault streams as well; never sepsis). `--per-stream-train-flags` trains
those models with extra `trep-edge train` flags (cached apart), to measure a training setting under the protocol:

    python bench/detector_losses.py --per-stream runs/detect-per-stream-seed1 --per-stream-train-flags='--seed 1'
"""
from __future__ import annotations

import argparse
import functools
import hashlib
import inspect
import json
import shlex
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator
from unittest import mock

import numpy as np

from trep_edge.runtime.core import detector as detector_module
from trep_edge.runtime.core.detector import Detector, DetectorConfig
from trep_edge.runtime.core.engine import Engine, load_engine
from trep_edge.runtime.core.monitor import Monitor
from trep_edge.runtime.core.offline import detect_recording
from trep_edge.training.evaluation import detection
from trep_edge.training.evaluation.detection import Output, markdown, summarise_groups, vs_committed
from trep_edge.training.evaluation.detection_corpus import Stream, corpus
from trep_edge.training.evaluation.detection_metrics import nab_windows

TAPE_VERSION = b"4"  # bump when the tape's layout changes
INPUT_SETTINGS = ("scale_warmup", "scale_adapt", "deviation_window")
CORE = Path(detector_module.__file__).parent


def _digest(*parts: bytes) -> str:
    return hashlib.sha256(b"".join(parts)).hexdigest()[:24]


@functools.cache
def tape_code() -> bytes:
    """What a tape depends on besides the model and the data (read once per run): the runtime core's code, less the
    detector's decisions. ``detector.py`` counts by ``window_deviation`` alone (the monitor computes that input with
    it) and ``seasonal.py`` not at all (it judges the readings the tape holds), so a change to how the detector judges
    its inputs reuses the tapes and a change to how they are made captures anew."""
    files = sorted(p for p in CORE.glob("*.py") if p.name not in ("detector.py", "seasonal.py"))
    return b"".join(p.read_bytes() for p in files) + inspect.getsource(detector_module.window_deviation).encode()


@functools.cache
def detector_code() -> str:
    """The digest of the code behind the committed outputs stored with a tape (all of the runtime core)."""
    return _digest(*(p.read_bytes() for p in sorted(CORE.glob("*.py"))))


@contextmanager
def recording(tape: list) -> Iterator[None]:
    """Append every call the monitor makes on a detector, and the row each scored step belongs to, to ``tape``."""
    init, reset, step = Detector.__init__, Detector.reset, Detector.step
    step_round = Monitor._step_round

    def on_init(self, config, dims, card_prior=None, channels=1):
        tape.append(("init", dims, channels))
        init(self, config, dims, card_prior, channels)

    def on_reset(self, streams, lanes):
        tape.append(("reset", np.array(streams), np.array(lanes)))
        reset(self, streams, lanes)

    def on_step(self, stream_idx, lanes, lane_of, distance, z, deviation=None, repeat=None, reading=None):
        tape.append(("step", *(np.array(a) for a in (stream_idx, lanes, lane_of, distance, z)),
                     *(None if a is None else np.array(a) for a in (deviation, repeat, reading))))  # fmt: skip
        return step(self, stream_idx, lanes, lane_of, distance, z, deviation, repeat, reading)

    def on_round(self, batch, rows, *args):
        # detect_recording stamps row t at t periods, so a step's index is its row; -1: no reading in it.
        reading = batch.reading[rows]
        tape.append(("row", int(batch.step[rows][reading].min()) if reading.any() else -1))
        return step_round(self, batch, rows, *args)

    with mock.patch.multiple(Detector, __init__=on_init, reset=on_reset, step=on_step), \
            mock.patch.object(Monitor, "_step_round", on_round):  # fmt: skip
        yield


def capture(engine: Engine, stream: Stream, cache: Path, check: bool = False) -> tuple[list, dict[str, np.ndarray]]:
    """The stream's tape and the committed detector's output on it, cached per model, data and ``tape_code``.

    The stored output is the one ``detect_recording`` gave when the tape was made; with ``check`` it is made again
    (one engine pass) when the runtime core's code has changed since, so that it is today's code's output."""
    key = _digest(TAPE_VERSION, engine.sha256.encode(), tape_code(), stream.values.tobytes())
    path = cache / f"{key}.npz"
    if path.is_file():
        with np.load(path, allow_pickle=True) as data:
            tape, made_by = list(data["tape"]), str(data["code"])
            committed = {"score": data["score"], "alerts": data["alerts"]}
        if not check or made_by == detector_code():
            return tape, committed
    tape = []
    with recording(tape):
        det = detect_recording(engine, stream.values, DetectorConfig())
    cache.mkdir(parents=True, exist_ok=True)
    tape_array = np.empty(len(tape), dtype=object)
    tape_array[:] = tape
    np.savez(path, tape=tape_array, score=det.score, alerts=det.alerts, code=detector_code())
    return tape, {"score": det.score, "alerts": det.alerts}


def step_rows(tape: list) -> list[int]:
    """The row of each ``step`` call of a tape, in order (-1: a step without a reading)."""
    out, row = [], -1
    for call in tape:
        if call[0] == "row":
            row = call[1]
        elif call[0] == "step":
            out.append(row)
    return out


def replay(tapes: list[list], config: DetectorConfig, card_prior: dict | None, rows: list[int]) -> list[Output]:
    """The score and alerts of every row of each tape's stream when one detector of ``config`` receives the tapes'
    calls, all streams side by side (the detector is vectorised across streams; each keeps its own state).

    The tapes must come from one model (one ``init``: the same dims and lane channels)."""
    inits = {call[1:] for tape in tapes for call in tape if call[0] == "init"}
    if len(inits) != 1:
        raise ValueError(f"tapes replayed together must share one model's detector shape, got {sorted(inits)}")
    (dims, channels), = inits
    steps = []  # per tape: [(resets before the step, step call, row)]
    for tape in tapes:
        mine, resets, row = [], [], -1
        for call in tape:
            if call[0] == "reset":
                resets.append(call[1:])
            elif call[0] == "row":
                row = call[1]
            elif call[0] == "step":
                mine.append((resets, call[1:], row))
                resets = []
        steps.append(mine)
    # Each tape's streams and lanes get rows of their own in the one detector.
    n_streams = [1 + max((int(c[0].max(initial=-1)) for _, c, _ in mine), default=-1) for mine in steps]
    n_lanes = [1 + max((int(c[1].max(initial=-1)) for _, c, _ in mine), default=-1) for mine in steps]
    stream_at, lane_at = np.cumsum([0] + n_streams), np.cumsum([0] + n_lanes)
    detector = Detector(config, dims, card_prior, channels)
    detector.add(int(stream_at[-1]), int(lane_at[-1]))
    outputs = [(np.full(n, np.nan), np.zeros(n, dtype=bool)) for n in rows]
    for k in range(max(map(len, steps), default=0)):
        active = [i for i, mine in enumerate(steps) if k < len(mine)]
        parts, placed = [], 0
        for i in active:
            resets, (stream_idx, lanes, lane_of, distance, z, deviation, repeat, reading), row = steps[i][k]
            for r_streams, r_lanes in resets:
                detector.reset(r_streams + stream_at[i], r_lanes + lane_at[i])
            parts.append((stream_idx + stream_at[i], lanes + lane_at[i], lane_of + placed, distance, z, deviation,
                          repeat, reading))  # fmt: skip
            placed += len(stream_idx)
        out = detector.step(*(np.concatenate(column) for column in zip(*parts)))
        placed = 0
        for i in active:
            row = steps[i][k][2]
            if row >= 0:  # one stream per recording: its step call scores at most one row
                outputs[i][0][row], outputs[i][1][row] = out.score[placed], out.alert[placed]
            placed += len(steps[i][k][1][0])
    return outputs


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The corpus, model and output options this script shares with ``bench/detector_prototypes.py``."""
    parser.add_argument("--quick", action="store_true", help="the benchmark's quick subset")
    parser.add_argument("--check", action="store_true", help="confirm the committed settings replay exactly (an "
                        "engine pass for each stream whose stored output predates the runtime code)")
    parser.add_argument("--model", default="models/general.onnx")
    parser.add_argument("--icu-model", default="models/icu-vitals.onnx")
    parser.add_argument("--data-root", help="data folder (default: $TREP_EDGE_DATA or ../shared/data)")
    parser.add_argument("--cache", default="~/.cache/trep-edge/replay", help="captured tapes")
    parser.add_argument("--out", help="write the tables (Markdown) here too")
    parser.add_argument("--per-stream", nargs="?", const="runs/detect-per-stream", metavar="CACHE",
                        help="one model per stream, from this per-stream cache (default runs/detect-per-stream)")
    parser.add_argument("--categories", default="", metavar="A,B",
                        help="only the corpus's streams of these categories (comma-separated; default: all, or with "
                        "--per-stream those the evaluator's protocol trains models for), e.g. the general model on "
                        "those streams, or per-stream models on the multi-fault streams too")
    parser.add_argument("--per-stream-train-flags", default="", metavar="FLAGS",
                        help="with --per-stream: trep-edge train flags added to the evaluator's, given with '=': "
                        "--per-stream-train-flags='--seed 1'")


PEERS = {"rolling_z": detection.rolling_z, "hst": detection.hst, "stumpi": detection.stumpi}
"""The benchmark's model-free peers, for scripts that build streams of their own (``paper`` needs the benchmark's
cached distances and is not among them)."""


def add_peers_argument(parser: argparse.ArgumentParser) -> None:
    """``--peers``: which of ``PEERS`` a script that builds its own streams runs beside the detector."""
    parser.add_argument("--peers", default=",".join(PEERS), help=f"comma-separated peers of {', '.join(PEERS)} "
                        "('' for none; hst and stumpi need the [bench] extra)")


def chosen_peers(args: argparse.Namespace, parser: argparse.ArgumentParser) -> tuple[list[str], list[str]]:
    """The peers ``--peers`` names (or the parser's error), and the flags that say so in a results file's command."""
    peers = [p for p in args.peers.split(",") if p]
    unknown = sorted(set(peers) - set(PEERS))
    if unknown:
        parser.error(f"unknown peers {unknown}: choose from {', '.join(PEERS)}")
    detection.require_peers(peers)
    return peers, [f"--peers '{args.peers}'"] * (args.peers != ",".join(PEERS))


def committed_and(specs: list[str], parser: argparse.ArgumentParser) -> dict[str, DetectorConfig]:
    """The committed detector (``trep``) and the ``NAME:key=value;...`` variants, or the parser's error."""
    try:
        return {"trep": DetectorConfig()} | DetectorConfig.variants(specs)
    except ValueError as exc:
        parser.error(str(exc))


def corpus_flags(args: argparse.Namespace) -> list[str]:
    """The options of ``add_arguments`` that choose the corpus and its models, as a results file's command says."""
    return (["--quick"] * args.quick + [f"--categories {args.categories}"] * bool(args.categories)
            + ["--per-stream", str(args.per_stream)] * bool(args.per_stream)
            + [f"--per-stream-train-flags='{args.per_stream_train_flags}'"] * bool(args.per_stream_train_flags))


@dataclass
class Bench:
    """The benchmark's streams and their tapes, grouped by the model (detector shape) they run through."""

    streams: list[Stream]
    tapes: list[list]
    committed: list[dict[str, np.ndarray]]
    priors: list[dict | None]
    scalings: list[str | None]  # each stream's model card's ``scaling`` (``DetectorConfig.for_scaling``)
    groups: list[list[int]]
    started: float
    count_from: float = 0.0  # a stream-set script's ``--count-from`` (``uncounted_before``)
    scored: dict[str, list[Output]] = field(default_factory=dict)  # each row's outputs as counted (``paired``)

    @classmethod
    def load(cls, args: argparse.Namespace, streams: list[Stream] | None = None) -> Bench:
        """Capture or read back every stream's tape, as the options in ``add_arguments`` select; ``streams``: these
        instead of the benchmark's corpus."""
        if args.per_stream_train_flags and not args.per_stream:
            raise SystemExit("--per-stream-train-flags trains per-stream models: give --per-stream too")
        started = time.perf_counter()
        from_corpus = streams is None
        streams = corpus(args.data_root, args.quick) if from_corpus else streams
        if args.categories:
            wanted = set(args.categories.split(","))
            unknown = wanted - {s.category for s in streams}
            if unknown:
                raise SystemExit(f"--categories: no stream of {sorted(unknown)} here")
            streams = [s for s in streams if s.category in wanted]
        cache = Path(args.cache).expanduser()
        if args.per_stream:
            from trep_edge.training.evaluation import detection_per_stream as ps

            try:
                extra = tuple(shlex.split(args.per_stream_train_flags))
            except ValueError as exc:
                raise SystemExit(f"--per-stream-train-flags {args.per_stream_train_flags!r}: {exc}") from None
            models = ps.PerStreamModels(Path(args.per_stream).expanduser(), extra=extra)
            if "sepsis" in {s.category for s in streams} and args.categories:
                raise SystemExit("--categories: sepsis stays are too short to train a per-stream model on")
            if from_corpus and not args.categories:  # the evaluator's protocol's categories; given streams all
                streams = [s for s in streams if s.category in ps.CATEGORIES]
            engine_of = models.engine  # one model at a time: 88 onnxruntime sessions at once take about 9 GB
            groups = [[k] for k in range(len(streams))]  # each stream on a detector of its own model's shape
        else:
            general, icu = load_engine(args.model, "cpu"), load_engine(args.icu_model, "cpu")

            def engine_of(stream: Stream) -> Engine:
                return icu if stream.category == "sepsis" else general

            by_engine: dict[int, list[int]] = {}
            for k, s in enumerate(streams):  # each model's streams on one detector of its shape, as the benchmark runs
                by_engine.setdefault(id(engine_of(s)), []).append(k)
            groups = list(by_engine.values())
        tapes, committed, priors, scalings = [], [], [], []
        for s in streams:
            engine = engine_of(s)
            tape, output = capture(engine, s, cache, args.check)
            tapes.append(tape)
            committed.append(output)
            priors.append(engine.card.detector_prior)
            scalings.append(engine.card.scaling)
        print(f"captured or loaded {len(streams)} tapes in {time.perf_counter() - started:.0f} s", flush=True)
        return cls(streams, tapes, committed, priors, scalings, groups, started)

    @property
    def categories(self) -> list[str]:
        """The corpus categories present, in table order."""
        return sorted({s.category for s in self.streams})

    def run(self, config: DetectorConfig, tapes: list[list] | None = None) -> list[Output]:
        """Every stream's output from a detector of ``config`` replaying its tape (or the given stand-ins)."""
        tapes = self.tapes if tapes is None else tapes
        outputs: list = [None] * len(self.streams)
        for pick in self.groups:
            # The monitor judges with the settings for its model's scaling: so does the replay.
            done = replay([tapes[k] for k in pick], config.for_scaling(self.scalings[pick[0]]), self.priors[pick[0]],
                          [len(self.streams[k].values) for k in pick])  # fmt: skip
            for k, out in zip(pick, done):
                outputs[k] = out
        return outputs

    def check(self) -> None:
        """Exit unless replaying the committed settings gives every stream's committed output exactly."""
        for s, (score, alerts), want in zip(self.streams, self.run(DetectorConfig()), self.committed):
            if not (np.array_equal(score, want["score"], equal_nan=True) and np.array_equal(alerts, want["alerts"])):
                raise SystemExit(f"replay differs from detect_recording on {s.name}")

    def results(self, command: str, args: argparse.Namespace) -> dict:
        """An empty results record (``detection.markdown``'s layout) for rows to be added by ``score``."""
        return {"command": command, "rows": {}, "seconds": {},
                "streams": {c: sum(s.category == c for s in self.streams) for c in self.categories},
                "model": f"each stream's own, from {args.per_stream}" if args.per_stream else args.model,
                "icu_model": args.icu_model}  # fmt: skip

    def uncounted_before(self, outputs: list[Output]) -> list[Output]:
        """The outputs with each stream's rows before ``count_from`` of its length left unscored and unalerted, or
        before its first NAB window where that starts earlier, so that no detection is lost: a stream set whose
        faults are placed from that share of the rows on is then scored where a fault could be."""
        if not self.count_from:
            return outputs
        kept = []
        for s, (score, alerts) in zip(self.streams, outputs):
            rows = len(s.values)
            cut = min([int(self.count_from * rows)] + [a for a, _ in nab_windows(rows, s.events)])
            score, alerts = score.astype(float), alerts.copy()
            score[:cut], alerts[:cut] = np.nan, False
            kept.append((score, alerts))
        return kept

    def score(self, results: dict, name: str, outputs: list[Output], began: float) -> None:
        """Add one row of outputs to ``results`` (counted from ``count_from``) and print its headline."""
        outputs = self.uncounted_before(outputs)
        self.scored[name] = outputs
        categories = self.categories
        results["seconds"][name] = time.perf_counter() - began
        groups = {"overall": categories} | {c: [c] for c in categories}
        results["rows"][name] = summarise_groups(outputs, self.streams, groups)
        row = results["rows"][name]["overall"]
        print(json.dumps({name: {k: round(float(row[k]), 3) for k in ("nab_standard", "nab_tuned", "f1", "fa_per_1k")}
                                | {"nab_interval": row["nab_interval"]}}
                         | {c: round(float(results["rows"][name][c]["nab_standard"]), 1) for c in categories}),
              flush=True)  # fmt: skip

    def score_peers(self, results: dict, peers: list[str]) -> None:
        """Add a row for each of ``PEERS`` named, run on every stream."""
        for name in peers:
            began = time.perf_counter()
            self.score(results, name, [PEERS[name](s) for s in self.streams], began)

    def score_variants(self, results: dict, variants: dict[str, DetectorConfig]) -> None:
        """Replay and score each variant in turn (a row each)."""
        for name, config in variants.items():
            began = time.perf_counter()
            self.score(results, name, self.run(config), began)

    def paired(self, results: dict) -> None:
        """Give every other row the 90 % interval of its overall score less the committed detector's (``trep``) over
        the same bootstrap draws of the streams (``detection_metrics.nab_interval``), and print it."""
        if "trep" not in self.scored:
            return
        for name, outputs in self.scored.items():
            if name != "trep":
                paired = vs_committed(outputs, self.scored["trep"], self.streams)
                results["rows"][name]["overall"]["vs_trep"] = paired
                print(json.dumps({name: {"nab_standard_minus_trep_90": paired}}), flush=True)

    def finish(self, results: dict, out: str | None) -> None:
        """Pair every row with the committed one (``paired``), stamp the wall time and write the tables to ``out`` (if
        given)."""
        self.paired(results)
        results["wall_seconds"] = time.perf_counter() - self.started
        print(f"{results['wall_seconds']:.0f} s in all")
        if out:
            Path(out).parent.mkdir(parents=True, exist_ok=True)
            Path(out).write_text(markdown(results))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_arguments(parser)
    parser.add_argument("--variants", nargs="*", default=[], help="NAME:key=value;key=value detector variants")
    args = parser.parse_args()
    variants = committed_and(args.variants, parser)
    for name, config in variants.items():
        changed = [s for s in INPUT_SETTINGS if getattr(config, s) != getattr(DetectorConfig(), s)]
        if changed:
            parser.error(f"variant {name} changes {changed}, which shape the detector's inputs: "
                         "run trep-edge eval detect")
    bench = Bench.load(args)
    if args.check:
        bench.check()
    results = bench.results(" ".join(["python bench/detector_replay.py", *corpus_flags(args), *["--check"] * args.check,
                                      *["--variants", *(f"'{v}'" for v in args.variants)] * bool(args.variants)]), args)
    bench.score_variants(results, variants)
    bench.finish(results, args.out)


if __name__ == "__main__":
    main()
