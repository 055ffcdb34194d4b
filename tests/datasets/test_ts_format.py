import numpy as np
import pytest
from loader_checks import assert_names, require

from trep_edge.datasets import DataFormatError, load_ts, load_uea

HEADER = (
    "#comment\n@problemName Toy\n@timeStamps false\n@univariate false\n@dimensions 2\n@classLabel true a b\n@data\n"
)


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_basicmotions_train_is_40_cases_of_100_steps_6_channels(shared_data):
    require(shared_data / "UEA" / "BasicMotions")
    x_train, y_train, x_test, y_test = load_uea("BasicMotions", root=shared_data)
    assert x_train.shape == (40, 100, 6)
    assert x_train.dtype == np.float32
    assert y_train[0] == "Standing"
    labels, counts = np.unique(y_train, return_counts=True)
    assert labels.tolist() == ["Badminton", "Running", "Standing", "Walking"]
    assert counts.tolist() == [10, 10, 10, 10]
    np.testing.assert_allclose(x_train[0, :3, 0], [0.079106, 0.079106, -0.903497], rtol=1e-6)
    assert x_test.shape == (40, 100, 6)
    assert y_test.shape == (40,)


def test_japanese_vowels_unequal_lengths_are_nan_padded_at_the_end(shared_data):
    x, y = load_ts(require(shared_data / "UEA" / "JapaneseVowels" / "JapaneseVowels_TRAIN.ts"))
    assert x.shape == (270, 26, 12)
    lengths = (~np.isnan(x[:, :, 0])).sum(axis=1)
    assert lengths.min() == 7
    assert lengths[:3].tolist() == [20, 26, 22]
    first = x[0]
    assert not np.isnan(first[:20]).any()
    assert np.isnan(first[20:]).all()


def test_load_uea_pads_both_splits_to_one_length(shared_data):
    require(shared_data / "UEA" / "JapaneseVowels")
    x_train, _, x_test, _ = load_uea("JapaneseVowels", root=shared_data)
    assert x_train.shape[1] == x_test.shape[1] == 29
    assert np.isnan(x_train[:, 26:]).all()


def test_dodger_loop_day_question_marks_are_nan(shared_data):
    require(shared_data / "UCR" / "DodgerLoopDay")
    _, _, x_test, y_test = load_uea("DodgerLoopDay", root=shared_data)
    assert x_test.shape == (80, 288, 1)
    assert np.isnan(x_test[0, :71, 0]).all()
    assert x_test[0, 71, 0] == 10.0
    assert y_test[0] == "1"


def test_phoneme_has_no_test_split(shared_data):
    require(shared_data / "UCR" / "Phoneme")
    x_train, y_train, x_test, y_test = load_uea("Phoneme", root=shared_data)
    assert x_train.shape == (214, 1024, 1)
    assert x_test is None and y_test is None


def test_load_uea_finds_ucr_folder_under_a_given_root(tmp_path):
    folder = tmp_path / "UCR" / "Toy"
    folder.mkdir(parents=True)
    write(folder, "Toy_TEST.ts", "@classLabel true x\n@data\n1,2,3:x\n")
    x_train, y_train, x_test, y_test = load_uea("Toy", root=tmp_path)
    assert x_train is None and y_train is None
    assert x_test.shape == (1, 3, 1)


def test_load_uea_refuses_splits_with_different_dimension_counts(tmp_path):
    folder = tmp_path / "UEA" / "Toy"
    folder.mkdir(parents=True)
    write(folder, "Toy_TRAIN.ts", "@classLabel true x\n@data\n1,2:3,4:x\n")
    write(folder, "Toy_TEST.ts", "@classLabel true x\n@data\n1,2:x\n")
    with pytest.raises(DataFormatError) as error:
        load_uea("Toy", root=tmp_path)
    assert_names(error, "Toy_TEST.ts", None, "TEST has 1 dimensions but TRAIN has 2")


def test_tab_separated_header_values_are_read(tmp_path):
    with pytest.raises(DataFormatError) as error:
        load_ts(write(tmp_path, "tabs.ts", "@dimensions\t3\n@classLabel\ttrue a\n@data\n1:2:a\n"))
    assert_names(error, "tabs.ts", 4, "expected 3 dimensions")


def test_load_uea_unknown_name_says_where_it_looked(tmp_path):
    with pytest.raises(FileNotFoundError, match="UEA/Nope"):
        load_uea("Nope", root=tmp_path)


def test_missing_values_and_multivariate_cases(tmp_path):
    x, y = load_ts(write(tmp_path, "toy.ts", HEADER + "1,?,3:4,5,NaN:a\n\n6,7:8,9:b\n"))
    assert y.tolist() == ["a", "b"]
    assert x.shape == (2, 3, 2)
    np.testing.assert_array_equal(x[0, :, 0], [1, np.nan, 3])
    np.testing.assert_array_equal(x[0, :, 1], [4, 5, np.nan])
    np.testing.assert_array_equal(x[1, :, 1], [8, 9, np.nan])


def test_unlabelled_file_gives_empty_labels(tmp_path):
    x, y = load_ts(write(tmp_path, "u.ts", "@classLabel false\n@data\n1,2\n3,4\n"))
    assert x[:, :, 0].tolist() == [[1, 2], [3, 4]]
    assert y.tolist() == ["", ""]


def test_non_number_names_file_line_and_dimension(tmp_path):
    with pytest.raises(DataFormatError) as error:
        load_ts(write(tmp_path, "bad.ts", HEADER + "1,2:3,4:a\n1,2:3,x:b\n"))
    assert_names(error, "bad.ts", 9, "dimension 2 value 'x' is not a number")


def test_wrong_dimension_count_is_refused(tmp_path):
    with pytest.raises(DataFormatError) as error:
        load_ts(write(tmp_path, "dims.ts", HEADER + "1,2:3,4:a\n1,2:b\n"))
    assert_names(error, "dims.ts", 9, "expected 2 dimensions")


def test_dimension_count_from_first_case_without_header_tag(tmp_path):
    with pytest.raises(DataFormatError) as error:
        load_ts(write(tmp_path, "nodims.ts", "@classLabel true a\n@data\n1:2:a\n1:a\n"))
    assert_names(error, "nodims.ts", 4, "expected 2 dimensions")


def test_label_outside_declared_classes_is_refused(tmp_path):
    with pytest.raises(DataFormatError) as error:
        load_ts(write(tmp_path, "label.ts", HEADER + "1,2:3,4:c\n"))
    assert_names(error, "label.ts", 8, "label 'c' is not one of @classLabel")


def test_missing_label_is_refused(tmp_path):
    with pytest.raises(DataFormatError) as error:
        load_ts(write(tmp_path, "nolabel.ts", "@classLabel true a\n@data\n1,2,3\n"))
    assert_names(error, "nolabel.ts", 3, "missing class label")


def test_missing_data_line_is_refused(tmp_path):
    with pytest.raises(DataFormatError) as error:
        load_ts(write(tmp_path, "nodata.ts", "@problemName X\n@classLabel true a\n"))
    assert_names(error, "nodata.ts", None, "no @data line")


def test_values_before_data_line_are_refused(tmp_path):
    with pytest.raises(DataFormatError) as error:
        load_ts(write(tmp_path, "early.ts", "@problemName X\n1,2,3:a\n@data\n"))
    assert_names(error, "early.ts", 2, "data before @data")


def test_timestamped_files_are_refused_with_reason(tmp_path):
    with pytest.raises(DataFormatError) as error:
        load_ts(write(tmp_path, "stamps.ts", "@timeStamps true\n@data\n(0,1),(1,2):a\n"))
    assert_names(error, "stamps.ts", 1, "@timeStamps true")


def test_empty_file_is_refused(tmp_path):
    with pytest.raises(DataFormatError) as error:
        load_ts(write(tmp_path, "empty.ts", "\n"))
    assert_names(error, "empty.ts", None, "file is empty")


def test_no_cases_after_data_is_refused(tmp_path):
    with pytest.raises(DataFormatError) as error:
        load_ts(write(tmp_path, "nocases.ts", HEADER))
    assert_names(error, "nocases.ts", None, "no cases after @data")
