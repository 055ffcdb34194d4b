"""Detector variants on working-week feeds: a daily schedule kept on weekdays, a quieter one at the weekend, and
faults out of step with the day or the week.

Many plant and IT feeds run five days a week: the line's shifts, the office's load and the batch jobs of the
working days give way to a quieter weekend. Found on its weekdays, the daily cycle says that every Saturday is out
of step with the Friday before it, and that every Monday is out of step with the Sunday before it; only the same
day a week earlier says that they are not. This script synthesises such feeds (no data read) from the five cycle
shapes of ``bench/periodic_faults.py``: six weeks at periods of 288, 144 and 96 readings a day, noise of 1 % or 4 %
of the cycle's range, the weekend's activity a quarter of the weekdays' above their floor, each feed starting on a
drawn weekday; and one fault of each kind per shape in weeks three to five, a day long: the weekday faults of
``periodic_faults`` (a missing busy part, which looks like a weekend day, a day held at the feed's mean, a plateau
raised or lowered, a day run late, an extra start), a weekend day run as a weekday (``weekend-run``), and none (false
alarms only). It replays the committed detector and any variants on them (``detector_replay``) and prints the
benchmark's table.

    python bench/weekly_faults.py --peers rolling_z --out bench/results/weekly_faults_general.md

Without ``--per-stream`` every stream goes through ``--model`` (the general model).
"""
from __future__ import annotations

import numpy as np

from detector_prototypes import stream_set_main
from periodic_faults import NOISE, PERIODS, SHAPES, shape_at, write_fault
from trep_edge.training.evaluation.detection_corpus import Stream

WEEKS = 6
WEEKEND = 0.25
"""The weekend's activity, as a share of the weekdays' above their floor (20)."""
FAULTS = ("missing", "flat", "raised", "lowered", "late", "extra", "weekend-run", "none")


def weekly_stream(shape: str, fault: str, period: int, noise: float, rng: np.random.Generator) -> Stream:
    """One working-week feed of ``shape`` with ``fault`` on one day of weeks three to five; the fault's event is its
    changed readings."""
    length = WEEKS * 7 * period
    t = np.arange(length)
    first = int(rng.integers(0, 5))  # the weekday the feed starts on (0 = Monday)
    day = t // period + first
    weekday = day % 7 < 5
    busy = shape_at(shape, (t % period) / period)
    quiet = 20 + WEEKEND * (busy - 20)
    clean = np.where(weekday, busy, quiet)
    values = clean.copy()
    days = np.arange(2 * 7, 5 * 7) - first  # the days of weeks three to five, counted from the feed's first
    days = days[((days + first) % 7 >= 5) == (fault == "weekend-run")]
    start = period * int(rng.choice(days))
    events = write_fault(values, busy, shape, fault, start, period, clean.mean())
    values = values + rng.normal(0, noise * 60, length)
    name = f"weekly-{shape}-{fault}-p{period}-n{noise:g}"
    return Stream(name, "weekly", ["value"], values[:, None].astype(np.float32), events,
                  meta={"shape": shape, "fault": fault, "period": period, "first_weekday": first})


def weekly_faults(seed: int = 9) -> list[Stream]:
    """Every shape with every fault: periods and noise levels taken in turn."""
    rng = np.random.default_rng(seed)
    return [weekly_stream(shape, fault, PERIODS[i % len(PERIODS)], NOISE[i % len(NOISE)], rng)
            for i, (shape, fault) in enumerate((s, f) for s in SHAPES for f in FAULTS)]


if __name__ == "__main__":
    stream_set_main("bench/weekly_faults.py", __doc__.split("\n\n")[0], lambda args: weekly_faults())
