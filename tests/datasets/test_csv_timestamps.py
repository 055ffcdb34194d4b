"""The timestamp column of a sensor CSV: each accepted form (ISO 8601, epoch seconds, epoch milliseconds) and each
refusal, which must name the cell and the accepted forms."""

import numpy as np
import pytest
from loader_checks import assert_names, write

from trep_edge.datasets import DataFormatError, load_csv
from trep_edge.datasets.timestamps import CSV_FORMAT

T0 = np.datetime64("2024-05-01T12:00:00", "ms")


@pytest.mark.parametrize(
    "first, second",
    [
        ("2024-05-01T12:00:00Z", "2024-05-01T12:00:00.5Z"),
        ("2024-05-01 12:00:00", "2024-05-01 12:00:00.500"),
        ("2024-05-01T14:00:00+02:00", "2024-05-01T14:00:00.5+02:00"),
    ],
)
def test_iso_8601_forms_become_utc_timestamps(tmp_path, first, second):
    series = load_csv(write(tmp_path, "iso.csv", f"when,x\n{first},1\n{second},2\n"))
    assert series.channels == ["x"]
    np.testing.assert_array_equal(series.timestamps, [T0, T0 + np.timedelta64(500, "ms")])


def test_iso_dates_without_time_are_accepted(tmp_path):
    series = load_csv(write(tmp_path, "d.csv", "day,x\n2024-05-01,1\n2024-05-02,2\n"))
    assert series.timestamps[1] - series.timestamps[0] == np.timedelta64(1, "D")


@pytest.mark.parametrize("name", ["timestamp", "time", "epoch", "ts", "Time[s]"])
def test_epoch_seconds_in_a_time_column_are_timestamps_not_a_channel(tmp_path, name):
    series = load_csv(write(tmp_path, "s.csv", f"{name},temp\n1714564800,20.5\n1714564801.5,20.6\n"))
    assert series.channels == ["temp"]
    np.testing.assert_array_equal(series.timestamps, [T0, T0 + np.timedelta64(1500, "ms")])
    assert series.values.shape == (2, 1)


def test_epoch_milliseconds_are_recognised_by_magnitude(tmp_path):
    series = load_csv(write(tmp_path, "ms.csv", "timestamp,temp\n1714564800000,1\n1714564800250,2\n"))
    np.testing.assert_array_equal(series.timestamps, [T0, T0 + np.timedelta64(250, "ms")])


def test_a_ms_unit_in_the_name_forces_milliseconds(tmp_path):
    series = load_csv(write(tmp_path, "ms.csv", "time_ms,temp\n1714564800000,1\n1714564801000,2\n"))
    assert series.timestamps[0] == T0


def test_us_dates_are_refused_with_the_accepted_forms(tmp_path):
    path = write(tmp_path, "us.csv", "date,x\n05/01/2024 12:00,1\n")
    with pytest.raises(DataFormatError) as error:
        load_csv(path)
    assert_names(error, "us.csv", 2, "column 'date' value '05/01/2024 12:00' is not a recognised timestamp")
    assert "epoch seconds such as 1714564800" in str(error.value) and "ISO 8601" in str(error.value)


@pytest.mark.parametrize(
    "text, line, problem",
    [
        ("date,x\n2024-05-01T12:00:00Z,1\n2024-13-01T12:00:00Z,2\n", 3,
         "value '2024-13-01T12:00:00Z' is not a recognised timestamp (accepted"),
        ("timestamp,x\n1714564800,1\n1714,2\n", 3,
         "value '1714' is not a recognised timestamp: epoch seconds lie between"),
        ("timestamp,x\n1714564800,1\nnoon,2\n", 3, "value 'noon' is not a recognised timestamp (accepted"),
    ],
    ids=["bad-iso-further-down", "epoch-out-of-range", "text-in-epoch-column"],
)
def test_bad_timestamp_cells_are_refused_at_their_line(tmp_path, text, line, problem):
    with pytest.raises(DataFormatError) as error:
        load_csv(write(tmp_path, "bad.csv", text))
    assert_names(error, "bad.csv", line, problem)


def test_a_counter_column_not_named_as_time_stays_a_channel(tmp_path):
    series = load_csv(write(tmp_path, "m.csv", "minute,HR\n0,60\n1,61\n"))
    assert series.timestamps is None and series.channels == ["minute", "HR"]


def test_the_documented_format_names_every_accepted_form():
    for form in ("ISO 8601", "epoch seconds", "epoch milliseconds", "2024-05-01T12:00:00Z", "refused"):
        assert form in CSV_FORMAT


@pytest.mark.parametrize("name", ["unix_time_ms", "Event Time (ms)", "ts_millis"])
def test_an_epoch_column_whose_name_holds_a_time_word_is_timestamps_not_a_channel(tmp_path, name):
    # Read as a sensor it was alerted on as one, and float32 rounded it to steps of 131,072 ms.
    series = load_csv(write(tmp_path, "u.csv", f'"{name}",temp\n1714564800000,1\n1714564800250,2\n'))
    assert series.channels == ["temp"]
    np.testing.assert_array_equal(series.timestamps, [T0, T0 + np.timedelta64(250, "ms")])


def test_a_time_word_over_values_outside_the_epoch_range_stays_a_channel(tmp_path):
    series = load_csv(write(tmp_path, "r.csv", "response_time,temp\n120,1\n95,2\n"))
    assert series.timestamps is None and series.channels == ["response_time", "temp"]


def test_rows_newest_first_are_refused_and_a_clock_set_back_once_is_not(tmp_path):
    newest_first = "t,x\n" + "".join(f"2024-05-01T12:{59 - m:02d}:00Z,{m}\n" for m in range(6))
    with pytest.raises(DataFormatError, match=r"line 3: timestamps run back in time on 5 of 5 rows \(newest first"):
        load_csv(write(tmp_path, "desc.csv", newest_first))
    # An autumn clock change in local time: 02:30 comes twice, one step back among many forward.
    hours = ["00:30", "01:30", "02:30", "02:00", "02:30", "03:30", "04:30"]
    series = load_csv(write(tmp_path, "dst.csv", "t,x\n" + "".join(f"2024-10-27 {h},1\n" for h in hours)))
    assert len(series.timestamps) == 7
