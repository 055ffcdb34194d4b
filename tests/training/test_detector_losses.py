"""bench/detector_losses.py: the points it says a detector lost add up to what the NAB score says it lost."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from trep_edge.training.evaluation.detection_corpus import Stream
from trep_edge.training.evaluation.detection_metrics import nab_parts, nab_score

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))  # the script imports its sibling, as it runs
import detector_losses  # noqa: E402


def _stream(n: int, events: list[tuple[int, int]]) -> Stream:
    return Stream(f"s{n}", "synthetic", ["c0"], np.zeros((n, 1)), events)


def _alerts(n: int, *rows: int) -> np.ndarray:
    out = np.zeros(n, dtype=bool)
    out[list(rows)] = True
    return out


def test_losses_add_up_to_the_nab_score_and_name_their_cause():
    streams = [_stream(1000, [(500, 500)]), _stream(1000, [(700, 720)]), _stream(2000, [])]
    alerts = [_alerts(1000, 460, 900), _alerts(1000), _alerts(2000, 400, 1500, 1600)]
    row = detector_losses.losses(streams, alerts)
    assert (row["windows"], row["found"], row["missed"], row["false alarms"]) == (2, 1, 1, 4)
    lost = row["lost: missed"] + row["lost: late"] + row["lost: false alarms"]
    assert lost == pytest.approx(100.0 - nab_score(alerts, [s.events for s in streams]))
    assert row["lost: missed"] == pytest.approx(50.0)  # one of two windows: half of what separates null and perfect
    assert row["lost: late"] > 0 and row["lost: false alarms"] > 0


def test_a_perfect_detector_loses_nothing_and_a_silent_one_everything():
    streams = [_stream(1000, [(500, 500)])]
    assert detector_losses.losses(streams, [_alerts(1000, 450)])["lost: late"] == pytest.approx(0.0)
    silent = detector_losses.losses(streams, [_alerts(1000)])
    assert silent["lost: missed"] == pytest.approx(100.0) and silent["lost: false alarms"] == 0.0


def test_missed_windows_are_sorted_by_what_kept_them_silent():
    n, threshold = 1000, 4.0
    streams = [_stream(n, [(500, 520)]), _stream(n, [(600, 600)]), _stream(n, [(700, 700)]), _stream(n, [(800, 800)])]
    scores = [np.full(n, 1.0) for _ in streams]
    scores[1][600] = 3.5  # near, below the threshold
    scores[2][700] = np.nextafter(threshold, -np.inf)  # reached the threshold, held back by the gate
    scores[3][800] = 9.0  # found
    scores[0][480] = 3.5  # before the onset: no part of the fault, so this window was never near
    alerts = [_alerts(n), _alerts(n), _alerts(n), _alerts(n, 800)]
    causes = detector_losses.miss_causes(streams, list(zip(scores, alerts)), threshold)
    assert causes == {"never near": 1, "below threshold": 1, "held by the gate": 1}


def test_the_timeline_counts_false_alarms_by_block_after_probation_outside_windows():
    n = 3000  # probation 450: blocks of 250 from there, the last one reached
    streams = [_stream(n, [(2000, 2000)])]
    alerts = _alerts(n, 100, 460, 470, 750, 2000)  # one in probation, two in the first block, one in the second,
    rates = detector_losses.timeline(streams, [alerts], 250)  # one inside the event's window
    assert len(rates) == detector_losses.BLOCKS
    assert rates[0] == pytest.approx(2000 / 250) and rates[1] == pytest.approx(1000 / 250)
    assert sum(rates[2:]) == 0.0


def test_the_timeline_leaves_out_streams_too_short_to_reach_its_last_block():
    short = [_stream(1000, [])]
    assert detector_losses.timeline(short, [_alerts(1000, 200)], 250) == [0.0] * detector_losses.BLOCKS


def test_by_kind_gives_a_row_per_injected_fault_kind(monkeypatch, capsys, tmp_path):
    streams = [_stream(1000, [(500, 500)]), _stream(1000, [(700, 720)]), _stream(1000, [])]
    for s, kind in zip(streams, ("spike", "drift", "none")):
        s.meta["kind"] = kind
    alerts = [_alerts(1000, 500), _alerts(1000), _alerts(1000, 300)]

    class Bench:
        categories = ["synthetic"]

        def __init__(self):
            self.streams = streams

        def run(self, config):
            return [(np.zeros(1000), a) for a in alerts]

    monkeypatch.setattr(detector_losses.dr.Bench, "load", classmethod(lambda cls, args: Bench()))
    monkeypatch.setattr(sys, "argv", ["detector_losses.py", "--by-kind", "--out", str(tmp_path / "out.md")])
    detector_losses.main()
    text = (tmp_path / "out.md").read_text()
    assert "--by-kind" in text.splitlines()[0]
    assert "| trep | kind: drift | 1 | 0 | 0 | 1 | 0 | 100.0 | 0.0 | 0.0 |" in text
    assert "| trep | kind: none | 0 | 0 | 0 | 0 | 1 | nan | nan | nan |" in text
    assert "| trep | kind: spike | 1 | 1 | 0 | 0 | 0 |" in text


def _early(n: int, *rows: int, events: list[tuple[int, int]]) -> int:
    return detector_losses.found_before_onset(nab_parts(_alerts(n, *rows), events), n, events)


def test_a_window_found_before_its_fault_began_is_counted_as_found_by_chance():
    n = 2000  # probation 300; the window of an event at 1000 is 900..1100
    events = [(1000, 1000)]
    assert _early(n, 950, 1000, events=events) == 1  # its first detection came early
    assert _early(n, 1000, 1050, events=events) == 0  # at the onset: detected
    assert _early(n, 850, 1200, events=events) == 0  # not found at all
    assert _early(n, 100, events=[(200, 200)]) == 0  # in probation: not counted
    two = [(1000, 1000), (1500, 1500)]  # windows of 100 each: 950..1050 and 1450..1550
    assert _early(n, 960, 1500, 1460, events=two) == 2
    row = detector_losses.losses([_stream(n, events)], [_alerts(n, 950)])
    assert (row["found"], row["found before onset"]) == (1, 1)


def test_windows_of_streams_with_several_are_counted_by_their_place():
    n = 3000  # two events: windows of 150 each, 925..1075 and 1925..2075
    events = [(1000, 1000), (2000, 2000)]
    streams = [_stream(n, events), _stream(n, events), _stream(n, [(1000, 1000)])]
    alerts = [_alerts(n, 950), _alerts(n, 1000, 2010), _alerts(n, 1000)]  # the one-window stream is left out
    rows = detector_losses.by_position(streams, alerts)
    assert rows == {1: {"windows": 2, "found": 2, "found before onset": 1, "missed": 0},
                    2: {"windows": 2, "found": 1, "found before onset": 0, "missed": 1}}  # fmt: skip
