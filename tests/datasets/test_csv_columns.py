"""Which columns of a sensor CSV become channels: a label column never does, and named channels are read alone.

A ``label`` / ``is_anomaly`` / ``anomaly`` column is the answer: fed to a model as a channel it would make the
detector read it (a labelled export scored with ``trep-edge score`` alerted on the label's edge, "top: label") and
give ``trep-edge train`` a channel that no live feed sends. ``only`` (the CLIs' ``--channels``) reads the named
columns alone, so a text column such as a status need not be numeric.
"""

import numpy as np
import pytest
from loader_checks import assert_names, write

from trep_edge.datasets import DataFormatError, load_csv
from trep_edge.datasets.timestamps import CSV_FORMAT

ROWS = "2024-05-01T12:00:00Z,1.5,{}\n2024-05-01T12:05:00Z,2.5,{}\n2024-05-01T12:10:00Z,9.5,{}\n"


@pytest.mark.parametrize("name", ["label", "is_anomaly", "anomaly", "Label", "IS_ANOMALY"])
def test_a_label_column_becomes_labels_not_a_channel(tmp_path, name):
    series = load_csv(write(tmp_path, "l.csv", f"timestamp,value,{name}\n" + ROWS.format(0, 0, 1)))
    assert series.channels == ["value"]
    np.testing.assert_array_equal(series.values[:, 0], [1.5, 2.5, 9.5])
    np.testing.assert_array_equal(series.labels, [False, False, True])


def test_the_label_column_may_stand_anywhere(tmp_path):
    series = load_csv(write(tmp_path, "l.csv", "label,temp,rpm\n0,20,1000\n1,21,1100\n"))
    assert series.channels == ["temp", "rpm"] and series.timestamps is None
    np.testing.assert_array_equal(series.values, [[20, 1000], [21, 1100]])
    np.testing.assert_array_equal(series.labels, [False, True])


def test_a_csv_without_a_label_column_has_no_labels(tmp_path):
    series = load_csv(write(tmp_path, "n.csv", "timestamp,labelled_flow\n2024-05-01,1\n2024-05-02,2\n"))
    assert series.channels == ["labelled_flow"] and series.labels is None


def test_two_label_columns_are_refused_naming_both(tmp_path):
    with pytest.raises(DataFormatError) as e:
        load_csv(write(tmp_path, "two.csv", "timestamp,value,label,anomaly\n2024-05-01,1,0,0\n"))
    assert_names(e, "two.csv", 1, "several label columns (label, anomaly)")


def test_a_label_other_than_0_or_1_is_refused_at_its_line(tmp_path):
    with pytest.raises(DataFormatError) as e:
        load_csv(write(tmp_path, "bad.csv", "timestamp,value,is_anomaly\n" + ROWS.format(0, 2, 0)))
    assert_names(e, "bad.csv", 3, "column 'is_anomaly' value 2 is not 0 or 1")


def test_a_file_of_labels_only_is_refused(tmp_path):
    with pytest.raises(DataFormatError) as e:
        load_csv(write(tmp_path, "only.csv", "timestamp,label\n2024-05-01,0\n2024-05-02,1\n"))
    assert_names(e, "only.csv", 1, "no sensor channel: column 'label' holds anomaly labels")


def test_the_format_help_says_so():
    assert "label, is_anomaly or anomaly" in CSV_FORMAT and "never a sensor channel" in CSV_FORMAT


def test_named_channels_are_read_in_their_order_and_a_text_column_is_skipped(tmp_path):
    text = "timestamp,status,temp,rpm,label\n2024-05-01,OK,20,1000,0\n2024-05-02,FAULT,21,1100,1\n"
    series = load_csv(write(tmp_path, "t.csv", text), only=["rpm", "temp"])
    assert series.channels == ["rpm", "temp"]
    np.testing.assert_array_equal(series.values, [[1000, 20], [1100, 21]])
    np.testing.assert_array_equal(series.labels, [False, True])


def test_a_text_column_without_named_channels_is_refused_saying_how_to_leave_it_out(tmp_path):
    with pytest.raises(DataFormatError) as e:
        load_csv(write(tmp_path, "t.csv", "timestamp,status,temp\n2024-05-01,OK,20\n"))
    assert_names(e, "t.csv", 2, "column 'status' value 'OK' is not a number; if it is not a sensor column, name the "
                 "sensor columns to read (--channels)")


def test_a_named_channel_the_file_lacks_is_refused_listing_the_sensor_columns(tmp_path):
    with pytest.raises(DataFormatError) as e:
        load_csv(write(tmp_path, "t.csv", "timestamp,temp,label\n2024-05-01,20,0\n"), only=["temp", "label"])
    assert_names(e, "t.csv", 1, "column(s) ['label'] not present; the sensor columns are ['temp']")
