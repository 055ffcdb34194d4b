import numpy as np
import pytest
from loader_checks import assert_names, require, write

from trep_edge.datasets import DataFormatError, load_csv

ETT_CHANNELS = ["HUFL", "HULL", "MUFL", "MULL", "LUFL", "LULL", "OT"]
ICU_CSV = "icu_vitals/s00001_numerics/s00001-2896-10-10-00-31n_decoded.csv"


def test_etth1_has_17420_hours_of_7_channels_with_timestamps(shared_data):
    series = load_csv(require(shared_data / "ETT" / "ETTh1.csv"))
    assert series.values.shape == (17420, 7)
    assert series.values.dtype == np.float64
    assert series.channels == ETT_CHANNELS
    assert series.name == "ETTh1"
    assert series.timestamps[0] == np.datetime64("2016-07-01T00:00:00")
    assert series.timestamps[1] - series.timestamps[0] == np.timedelta64(1, "h")
    np.testing.assert_allclose(series.values[0, -1], 30.531, rtol=1e-6)


def test_icu_numerics_empty_cells_are_nan_and_zeros_kept_by_default(shared_data):
    series = load_csv(require(shared_data / ICU_CSV))
    assert series.values.shape == (1936, 11)
    assert series.channels[0] == "minute"
    assert series.timestamps is None
    nbp = series.channels.index("NBPSys[mmHg]")
    assert np.isnan(series.values[0, nbp])
    assert series.values[0, series.channels.index("HR[bpm]")] == 0


def test_icu_numerics_zero_as_missing_for_named_channels_keeps_minute_counter(shared_data):
    series = load_csv(require(shared_data / ICU_CSV), zero_as_missing=["HR[bpm]", "SpO2[%]"])
    assert series.values[0, 0] == 0
    assert np.isnan(series.values[0, series.channels.index("HR[bpm]")])
    assert series.values[0, series.channels.index("RESP[pm]")] == 23


def test_zero_as_missing_true_applies_to_every_channel(tmp_path):
    series = load_csv(write(tmp_path, "z.csv", "a,b\n0,1\n2,0\n"), zero_as_missing=True)
    np.testing.assert_array_equal(np.isnan(series.values), [[True, False], [False, True]])


def test_zero_as_missing_unknown_channel_is_refused(tmp_path):
    with pytest.raises(ValueError, match="HR"):
        load_csv(write(tmp_path, "z.csv", "a,b\n0,1\n"), zero_as_missing=["HR"])


def test_date_column_becomes_timestamps_and_empty_cells_nan(tmp_path):
    path = write(tmp_path, "s.csv", "date,x,y\n2020-01-01 00:00:00,1.5,\n2020-01-01 01:00:00,,2\n")
    series = load_csv(path)
    assert series.channels == ["x", "y"]
    np.testing.assert_array_equal(series.timestamps, np.array(["2020-01-01T00", "2020-01-01T01"], "datetime64[s]"))
    np.testing.assert_array_equal(np.isnan(series.values), [[False, True], [True, False]])
    assert series.values[0, 0] == 1.5


def test_the_usual_spellings_of_a_missing_reading_are_missing_and_other_text_is_still_refused(tmp_path):
    rows = "".join(f"2020-01-01 0{k}:00:00,{cell},1\n" for k, cell in enumerate(["null", "NA", "N/A", "None", "-", "7"]))
    series = load_csv(write(tmp_path, "m.csv", "date,x,y\n" + rows))
    np.testing.assert_array_equal(np.isnan(series.values[:, 0]), [True] * 5 + [False])
    assert series.values[5, 0] == 7 and not np.isnan(series.values[:, 1]).any()
    with pytest.raises(DataFormatError, match="'off' is not a number"):
        load_csv(write(tmp_path, "t.csv", "date,x\n2020-01-01 00:00:00,off\n"))


def test_numeric_first_column_is_a_channel(tmp_path):
    series = load_csv(write(tmp_path, "n.csv", "t,x\n20200101,1\n20200102,2\n"))
    assert series.timestamps is None
    assert series.channels == ["t", "x"]
    assert series.values[1, 0] == 20200102


def test_a_meters_total_keeps_its_last_digits(tmp_path):
    # An energy meter's running total near 1.2e7 kWh steps by 0.1: float32 (steps of 1 there) read 0 or 1.
    series = load_csv(write(tmp_path, "meter.csv", "t,kwh\n2020-01-01 00:00,12345678.9\n2020-01-01 00:01,12345679.0\n"))
    assert series.values[:, 0].tolist() == [12345678.9, 12345679.0]
    assert load_csv(write(tmp_path, "m32.csv", "kwh\n12345678.9\n"), dtype=np.float32).values.dtype == np.float32


def test_blank_lines_are_skipped_and_line_numbers_stay_true(tmp_path):
    path = write(tmp_path, "gap.csv", "x,y\n1,2\n\n3,abc\n")
    with pytest.raises(DataFormatError) as error:
        load_csv(path)
    assert_names(error, "gap.csv", 4, "column 'y' value 'abc' is not a number")


def test_non_number_names_file_line_column_and_value(tmp_path):
    path = write(tmp_path, "ETTh1.csv", "date,HUFL,OT\n2016-07-01 00:00:00,1,2\n2016-07-01 01:00:00,1,abc\n")
    with pytest.raises(DataFormatError) as error:
        load_csv(path)
    assert_names(error, "ETTh1.csv", 3, "column 'OT' value 'abc' is not a number")


def test_wrong_column_count_is_refused(tmp_path):
    with pytest.raises(DataFormatError) as error:
        load_csv(write(tmp_path, "short.csv", "a,b,c\n1,2,3\n4,5\n"))
    assert_names(error, "short.csv", 3, "expected 3 columns, found 2")


def test_bad_date_is_refused(tmp_path):
    path = write(tmp_path, "dates.csv", "date,x\n2020-01-01 00:00,1\nyesterday,2\n")
    with pytest.raises(DataFormatError) as error:
        load_csv(path)
    assert_names(error, "dates.csv", 3, "column 'date' value 'yesterday' is not a recognised timestamp (accepted: ISO 8601")


def test_missing_header_is_refused(tmp_path):
    with pytest.raises(DataFormatError) as error:
        load_csv(write(tmp_path, "nohead.csv", "1,2\n3,4\n"))
    assert_names(error, "nohead.csv", 1, "no header row")


@pytest.mark.parametrize(("text", "line", "problem"), [
    # Read on, the first reading became the header: a row lost and a channel named after a value.
    ("2014-04-01 00:00:00,49.9\n2014-04-01 00:05:00,49.8\n", 1, "no header row: the first line holds readings"),
    ("timestamp\n2014-04-01 00:00:00\n", 1, "no sensor channel: the one column, 'timestamp', holds timestamps"),
    ("timestamp,value,\n2014-04-01 00:00:00,3.5,9\n", 2, "expected 2 columns, found 3"),  # a trailing cell not empty
])
def test_a_file_without_readings_under_named_columns_is_refused_saying_what_to_fix(tmp_path, text, line, problem):
    with pytest.raises(DataFormatError) as error:
        load_csv(write(tmp_path, "bad.csv", text))
    assert_names(error, "bad.csv", line, problem)


@pytest.mark.parametrize("text", [
    "timestamp;value;flow\n2014-04-01 00:00:00;11,93;-0,5\n2014-04-01 00:05:00;1,2e3;7\n",
    "timestamp;value;flow\n2014-04-01 00:00:00;11.93;-.5\n2014-04-01 00:05:00;1200;7\n",
    "timestamp\tvalue\tflow\n2014-04-01 00:00:00\t11.93\t-0.5\n2014-04-01 00:05:00\t1200\t7\n",
])
def test_semicolon_and_tab_separated_exports_are_read_with_their_decimal_commas(tmp_path, text):
    series = load_csv(write(tmp_path, "eu.csv", text))
    assert series.channels == ["value", "flow"]
    assert series.timestamps[1] - series.timestamps[0] == np.timedelta64(5, "m")
    np.testing.assert_allclose(series.values, [[11.93, -0.5], [1200, 7]], rtol=1e-6)


def test_a_trailing_separator_and_whitespace_only_lines_are_not_columns_or_readings(tmp_path):
    series = load_csv(write(tmp_path, "t.csv", "timestamp , value,\n 2014-04-01 00:00:00 , 3.5 ,\n"
                            "2014-04-01 00:05:00,4,\n   \n \t\n"))
    assert series.channels == ["value"]
    np.testing.assert_array_equal(series.values[:, 0], [3.5, 4])


def test_duplicate_column_names_are_refused(tmp_path):
    with pytest.raises(DataFormatError) as error:
        load_csv(write(tmp_path, "dup.csv", "a,b,a\n1,2,3\n"))
    assert_names(error, "dup.csv", 1, "duplicate column name 'a'")


def test_empty_file_is_refused(tmp_path):
    with pytest.raises(DataFormatError) as error:
        load_csv(write(tmp_path, "empty.csv", ""))
    assert_names(error, "empty.csv", None, "file is empty")


def test_header_without_rows_is_refused(tmp_path):
    with pytest.raises(DataFormatError) as error:
        load_csv(write(tmp_path, "head.csv", "a,b\n"))
    assert_names(error, "head.csv", None, "no data rows")
