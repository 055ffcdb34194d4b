import numpy as np
import pytest
from loader_checks import assert_names, require

from trep_edge.datasets import DataFormatError, load_ucr_anomaly

BLEEDING = "135_UCR_Anomaly_InternalBleeding16_1200_4187_4199.txt"


def test_internal_bleeding_name_parts_and_label_positions(shared_data):
    series = load_ucr_anomaly(require(shared_data / "UCR_Anomaly" / BLEEDING))
    assert (series.id, series.name, series.train_end) == (135, "InternalBleeding16", 1200)
    assert series.values.shape == (7501,)
    assert series.values.dtype == np.float32
    np.testing.assert_allclose(series.values[:2], [63.73215, 63.35068], rtol=1e-6)
    # 1-based inclusive 4187..4199 in the name is 0-based 4186..4198.
    assert np.flatnonzero(series.labels).tolist() == list(range(4186, 4199))


def test_one_value_per_line_and_many_per_line_read_the_same(tmp_path):
    one = tmp_path / "a" / "001_UCR_Anomaly_Toy_2_4_5.txt"
    many = tmp_path / "b" / "001_UCR_Anomaly_Toy_2_4_5.txt"
    one.parent.mkdir()
    many.parent.mkdir()
    one.write_text("  1.0e+00\n  2.0\n3\n4\n5\n6\n")
    many.write_text(" 1.0e+00  2.0 3\t4 5\n6\n")
    a, b = load_ucr_anomaly(one), load_ucr_anomaly(many)
    np.testing.assert_array_equal(a.values, [1, 2, 3, 4, 5, 6])
    np.testing.assert_array_equal(a.values, b.values)
    assert a.labels.tolist() == [False, False, False, True, True, False]


def test_name_with_underscores_keeps_them(tmp_path):
    path = tmp_path / "042_UCR_Anomaly_my_series_1_2_2.txt"
    path.write_text("1\n2\n3\n")
    series = load_ucr_anomaly(path)
    assert (series.id, series.name, series.train_end) == (42, "my_series", 1)


def test_name_not_following_the_pattern_shows_it(tmp_path):
    path = tmp_path / "series_1200_4187.txt"
    path.write_text("1\n")
    with pytest.raises(DataFormatError) as error:
        load_ucr_anomaly(path)
    assert_names(error, "series_1200_4187.txt", None, "<id>_UCR_Anomaly_<name>_<trainEnd>_<anomBegin>_<anomEnd>.txt")


def test_non_number_names_its_line(tmp_path):
    path = tmp_path / "001_UCR_Anomaly_Toy_1_2_2.txt"
    path.write_text("1\n2 3\n4 oops\n")
    with pytest.raises(DataFormatError) as error:
        load_ucr_anomaly(path)
    assert_names(error, path.name, 3, "value 'oops' is not a number")


def test_anomaly_beyond_the_series_is_refused(tmp_path):
    path = tmp_path / "001_UCR_Anomaly_Toy_1_2_9.txt"
    path.write_text("1\n2\n3\n")
    with pytest.raises(DataFormatError) as error:
        load_ucr_anomaly(path)
    assert_names(error, path.name, None, "anomEnd=9")


def test_empty_file_is_refused(tmp_path):
    path = tmp_path / "001_UCR_Anomaly_Toy_1_2_2.txt"
    path.write_text("\n \n")
    with pytest.raises(DataFormatError) as error:
        load_ucr_anomaly(path)
    assert_names(error, path.name, None, "file is empty")
