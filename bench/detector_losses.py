"""Where a detector's NAB points go, per category: missed events, late detections, false alarms, and when the false
alarms come.

The standard NAB score is ``100 − (points lost)``, and every lost point has one of three causes: a window without a
detection (it costs ``A_TP·σ(−1) + A_FN`` against a perfect detector's first-row detection), a window found after
its first row (``A_TP·σ(−1)`` less what the detection earned), or a false alarm (its cost). This script replays the
benchmark's tapes (``bench/detector_replay.py``: the same corpus, models and options) through each detector variant
and splits its score that way (the three columns add up to ``100 −`` its NAB standard score; ``--by-kind`` adds a
row per injected fault kind) and counts the found windows whose first detection came before the fault began
(``found before onset``: a NAB window opens half its width before the onset, so a detector that alerts steadily finds
some windows by chance; the rest is what it detected), then counts false alarms per 1,000 readings outside event
windows in blocks of readings after probation: a detector whose statistics are still settling, or that judges a
model on the data it was trained on, alerts more in the first blocks. ``--misses`` sorts each missed window by what
kept it silent: its score never came near the threshold (``never near``: below ``NEAR`` all through the fault), it
came near but stayed below (``below threshold``), or it reached the threshold and the alert gate held it back
(``held by the gate``: the record, the run peaks, the refractory period or the budget; a reported score is held just
under the threshold where the gate keeps a reading back). The first says the signals do not see the fault, the
second that a lower bar would find it, the third that the gate's memory of earlier readings costs it.

    python bench/detector_losses.py --quick --per-stream --variants 'decay-0.003:record_decay=0.003'
"""
from __future__ import annotations

import argparse
import math
from pathlib import Path

import numpy as np

import detector_replay as dr
from trep_edge.training.evaluation.detection_corpus import Stream
from trep_edge.training.evaluation.detection_metrics import (PROFILES, NabParts, nab_parts, nab_windows, probation,
                                                             scaled_sigmoid)

BLOCKS = 8  # blocks of readings after probation in the false-alarm timeline
NEAR = 3.0  # surprise from which a missed window counts as near the threshold (``miss_causes``)
MISS_CAUSES = ("never near", "below threshold", "held by the gate")


def first_onsets(length: int, events: list[tuple[int, int]]) -> list[int]:
    """The row where the first fault of each of a stream's NAB windows (``nab_windows``) begins."""
    return [min(onset for onset, _ in events if a <= onset <= b) for a, b in nab_windows(length, events)]


def found_before_onset(parts: NabParts, length: int, events: list[tuple[int, int]]) -> int:
    """How many of a stream's NAB windows (``nab_parts``' ``parts`` of its ``length`` rows) were found by a detection
    before any of their events began: the fault cannot have caused it, so the window was found by chance (its reward
    is real; the detection is not)."""
    onsets = first_onsets(length, events)
    return sum(row < onsets[k] for k, row in parts.detected)


def losses(streams: list[Stream], alerts: list[np.ndarray]) -> dict[str, float]:
    """NAB standard points lost to misses, to late detections and to false alarms over ``streams`` (they sum to
    ``100 −`` the score; NaN without an event window), the counts behind them, and the found windows whose first
    detection came before the fault began (``found_before_onset``)."""
    a_tp, _, a_fn = PROFILES["standard"]
    best = a_tp * float(scaled_sigmoid(-1.0))
    missed = late = false = 0.0
    found = misses = alarms = windows = early = 0
    for stream, detections in zip(streams, alerts):
        parts = nab_parts(detections, stream.events)
        early += found_before_onset(parts, len(detections), stream.events)
        windows += parts.windows
        misses += parts.missed
        found += len(parts.rewards)
        alarms += len(parts.costs)
        missed += parts.missed * (best + a_fn)
        late += sum(best - r for r in parts.rewards)
        false -= sum(cost for _, cost in parts.costs)
    # 100 / (perfect − null); streams without an event (a kind "none") have no scale: their false alarms are counted
    scale = 100.0 / (windows * (best + a_fn)) if windows else math.nan
    return {"windows": windows, "found": found, "found before onset": early, "missed": misses,
            "false alarms": alarms, "lost: missed": missed * scale, "lost: late": late * scale,
            "lost: false alarms": false * scale}  # fmt: skip


def miss_causes(streams: list[Stream], outputs: list, threshold: float) -> dict[str, int]:
    """How many missed windows of ``streams`` (each stream's ``Output`` in ``outputs``) fall under each of
    ``MISS_CAUSES`` (module docstring), judged on the score from the window's first onset to its end."""
    held = np.nextafter(threshold, -np.inf)  # the score the detector reports for a reading its gate held back
    counts = dict.fromkeys(MISS_CAUSES, 0)
    for stream, (score, alerts) in zip(streams, outputs):
        windows = nab_windows(len(alerts), stream.events)
        found = {k for k, _ in nab_parts(alerts, stream.events).detected}
        for k, ((_, b), onset) in enumerate(zip(windows, first_onsets(len(alerts), stream.events))):
            if k in found or probation(len(alerts)) > b:
                continue
            peak = np.nanmax(score[onset : b + 1], initial=-np.inf)
            counts[MISS_CAUSES[0] if peak < NEAR else MISS_CAUSES[2] if peak >= held else MISS_CAUSES[1]] += 1
    return counts


def by_position(streams: list[Stream], alerts: list[np.ndarray]) -> dict[int, dict[str, int]]:
    """``{position: counts}`` over the NAB windows of the ``streams`` that have more than one: position 1 is each such
    stream's first window, 2 its second, ...; counts as ``losses``' (``windows``, ``found``, ``found before onset``,
    ``missed``)."""
    rows: dict[int, dict[str, int]] = {}
    for stream, detections in zip(streams, alerts):
        parts = nab_parts(detections, stream.events)
        if parts.windows < 2:
            continue
        found = dict(parts.detected)
        onsets = first_onsets(len(detections), stream.events)
        for k in range(parts.windows):
            row = rows.setdefault(k + 1, dict.fromkeys(("windows", "found", "found before onset", "missed"), 0))
            row["windows"] += 1
            row["found"] += k in found
            row["found before onset"] += k in found and found[k] < onsets[k]
            row["missed"] += k not in found
    return dict(sorted(rows.items()))


def reaches_last_block(length: int, block: int) -> bool:
    """Whether a stream of ``length`` readings reaches the timeline's last block (``timeline`` counts only those)."""
    return length - probation(length) >= BLOCKS * block


def timeline(streams: list[Stream], alerts: list[np.ndarray], block: int) -> list[float]:
    """False alarms per 1,000 readings outside event windows, in blocks of ``block`` readings after probation (the
    last block: everything after), over the streams that reach the last block (the same streams in every block:
    short streams, such as ICU stays of a few dozen hours, would otherwise crowd the first)."""
    count, seen = np.zeros(BLOCKS), np.zeros(BLOCKS)
    for stream, detections in zip(streams, alerts):
        n = len(detections)
        if not reaches_last_block(n, block):
            continue
        outside = np.ones(n, dtype=bool)
        for a, b in nab_windows(n, stream.events):
            outside[a : b + 1] = False
        start = probation(n)
        alarms = np.array([row for row, _ in nab_parts(detections, stream.events).costs], dtype=np.int64)
        for k in range(BLOCKS):
            lo, hi = start + k * block, (start + (k + 1) * block if k < BLOCKS - 1 else n)
            seen[k] += outside[lo:hi].sum()
            count[k] += ((alarms >= lo) & (alarms < hi)).sum()
    return list(1000.0 * count / np.maximum(seen, 1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    dr.add_arguments(parser)
    parser.add_argument("--variants", nargs="*", default=[], help="NAME:key=value;key=value detector variants")
    parser.add_argument("--block", type=int, default=250, help="readings per block of the false-alarm timeline")
    parser.add_argument("--misses", action="store_true", help="also what kept each missed window silent (never near "
                        f"the threshold, from {NEAR:g} but below it, or held by the alert gate), per category")
    parser.add_argument("--by-kind", action="store_true", help="also a row per fault kind (the streams of one "
                        "injected fault: synthetic and archive)")
    parser.add_argument("--by-position", action="store_true", help="also the windows of streams with several, by "
                        "their place in the stream (first, second, ...)")
    args = parser.parse_args()
    if args.check:
        parser.error("--check belongs to bench/detector_replay.py")
    variants = dr.committed_and(args.variants, parser)
    bench = dr.Bench.load(args)
    command = "python bench/detector_losses.py " + " ".join(
        dr.corpus_flags(args)
        + ["--block", str(args.block)] * (args.block != 250)
        + ["--by-kind"] * args.by_kind + ["--misses"] * args.misses + ["--by-position"] * args.by_position
        + ["--variants", *(f"'{v}'" for v in args.variants)] * bool(args.variants))
    keys = ["windows", "found", "found before onset", "missed", "false alarms", "lost: missed", "lost: late",
            "lost: false alarms"]
    heads = [f"{k * args.block}–{(k + 1) * args.block}" for k in range(BLOCKS - 1)] + [f"{(BLOCKS - 1) * args.block}+"]
    table = ["| detector | category | " + " | ".join(keys) + " |", "|---" * (len(keys) + 2) + "|"]
    blocks = ["| detector | " + " | ".join(heads) + " |", "|---" * (BLOCKS + 1) + "|"]
    reach = sum(reaches_last_block(len(s.values), args.block) for s in bench.streams)
    groups = {c: [k for k, s in enumerate(bench.streams) if c in ("overall", s.category)]
              for c in ["overall", *bench.categories]}  # fmt: skip
    if args.by_kind:
        kinds = sorted({s.meta["kind"] for s in bench.streams if "kind" in s.meta})
        groups |= {f"kind: {kind}": [k for k, s in enumerate(bench.streams) if s.meta.get("kind") == kind]
                   for kind in kinds}  # fmt: skip
    misses = ["| detector | category | " + " | ".join(MISS_CAUSES) + " |", "|---" * (len(MISS_CAUSES) + 2) + "|"]
    places = ["| detector | position | windows | found | found before onset | missed |", "|---" * 6 + "|"]
    for name, config in variants.items():
        outputs = bench.run(config)
        alerts = [alert for _, alert in outputs]
        for category, pick in groups.items():
            row = losses([bench.streams[k] for k in pick], [alerts[k] for k in pick])
            table.append(f"| {name} | {category} | " + " | ".join(
                f"{row[k]:.1f}" if k.startswith("lost") else str(row[k]) for k in keys) + " |")
            if args.misses:
                causes = miss_causes([bench.streams[k] for k in pick], [outputs[k] for k in pick], config.threshold)
                misses.append(f"| {name} | {category} | " + " | ".join(str(causes[c]) for c in MISS_CAUSES) + " |")
        if args.by_position:
            for place, row in by_position(bench.streams, alerts).items():
                places.append(f"| {name} | {place} | " + " | ".join(str(v) for v in row.values()) + " |")
        rates = timeline(bench.streams, alerts, args.block)
        blocks.append(f"| {name} | " + " | ".join(f"{r:.2f}" for r in rates) + " |")
        print(f"{name}: lost {table[-len(groups)]}", flush=True)
    text = "\n".join([f"Command: `{command}`", "", "NAB standard points lost (they sum to 100 − the score):", "",
                      *table, "", f"False alarms per 1,000 readings outside event windows, by readings after "
                      f"probation ({reach} streams reach the last block):", "", *blocks, ""]
                     + ["What kept the missed windows silent (the score from the fault's onset to the window's end):",
                        "", *misses, ""] * args.misses
                     + ["The windows of streams with several, by their place in the stream:", "", *places, ""]
                     * args.by_position)  # fmt: skip
    print(text)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
