import numpy as np
import pytest
from loader_checks import assert_names

from trep_edge.datasets import DataFormatError, load_yahoo

A3_HEADER = "timestamps,value,anomaly,changepoint,trend,noise,seasonality1,seasonality2,seasonality3\n"


def write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def a1_csv(values, labels):
    rows = "".join(f"{i + 1},{v},{a}\n" for i, (v, a) in enumerate(zip(values, labels)))
    return "timestamp,value,is_anomaly\n" + rows


@pytest.fixture
def yahoo_root(tmp_path):
    write(tmp_path / "A1Benchmark" / "real_1.csv", a1_csv([1.5, 2.5, 3.5], [0, 1, 0]))
    write(tmp_path / "A1Benchmark" / "real_10.csv", a1_csv([10, 11], [0, 0]))
    write(tmp_path / "A1Benchmark" / "real_2.csv", a1_csv([2, 3], [1, 0]))
    write(tmp_path / "A2Benchmark" / "synthetic_1.csv", a1_csv([5, 6], [0, 1]))
    a3_rows = "1416726000,7,0,0,1,2,3,4,5\n1416729600,8,1,0,1,2,3,4,5\n"
    write(tmp_path / "A3Benchmark" / "A3Benchmark-TS1.csv", A3_HEADER + a3_rows)
    write(tmp_path / "A3Benchmark" / "A3Benchmark_all.csv", A3_HEADER + "1,1,1,0,0,0,0,0,0\n")
    write(tmp_path / "A4Benchmark" / "A4Benchmark-TS1.csv", A3_HEADER + "1416726000,9,0,1,1,2,3,4,5\n")
    return tmp_path


def test_loads_every_benchmark_in_numeric_file_order(yahoo_root):
    names = [s.name for s in load_yahoo(yahoo_root)]
    assert names == [
        "A1Benchmark/real_1",
        "A1Benchmark/real_2",
        "A1Benchmark/real_10",
        "A2Benchmark/synthetic_1",
        "A3Benchmark/A3Benchmark-TS1",
        "A4Benchmark/A4Benchmark-TS1",
    ]


def test_values_and_labels_come_from_the_right_columns(yahoo_root):
    series = {s.name: s for s in load_yahoo(yahoo_root)}
    real_1 = series["A1Benchmark/real_1"]
    assert real_1.values.dtype == np.float32
    np.testing.assert_array_equal(real_1.values, [1.5, 2.5, 3.5])
    assert real_1.labels.tolist() == [False, True, False]
    a3 = series["A3Benchmark/A3Benchmark-TS1"]
    np.testing.assert_array_equal(a3.values, [7, 8])
    assert a3.labels.tolist() == [False, True]
    # A4's changepoint column is not an anomaly label.
    assert series["A4Benchmark/A4Benchmark-TS1"].labels.tolist() == [False]


def test_label_other_than_0_or_1_names_file_and_line(tmp_path):
    write(tmp_path / "A1Benchmark" / "real_1.csv", a1_csv([1, 2, 3], [0, 0, 2]))
    with pytest.raises(DataFormatError) as error:
        load_yahoo(tmp_path)
    assert_names(error, "real_1.csv", 4, "column 'is_anomaly' value 2 is not 0 or 1")


def test_missing_value_column_is_refused(tmp_path):
    write(tmp_path / "A2Benchmark" / "synthetic_3.csv", "timestamp,val,is_anomaly\n1,2,0\n")
    with pytest.raises(DataFormatError) as error:
        load_yahoo(tmp_path)
    assert_names(error, "synthetic_3.csv", 1, "missing column 'value'")


def test_non_number_names_file_and_line(tmp_path):
    write(tmp_path / "A4Benchmark" / "A4Benchmark-TS2.csv", A3_HEADER + "1,2,0,0,0,0,0,0,0\n2,high,0,0,0,0,0,0,0\n")
    with pytest.raises(DataFormatError) as error:
        load_yahoo(tmp_path)
    assert_names(error, "A4Benchmark-TS2.csv", 3, "column 'value' value 'high' is not a number")


def test_folder_without_benchmarks_says_where_to_get_them(tmp_path):
    with pytest.raises(FileNotFoundError, match="Webscope"):
        load_yahoo(tmp_path)
