import io
import tarfile

import numpy as np
import pytest
from loader_checks import assert_names, require

from trep_edge.datasets import (
    CLINICAL_COLUMNS,
    LABEL_COLUMN,
    PAPER_FEATURES,
    VITALS,
    DataFormatError,
    Patient,
    iter_patients,
    read_psv,
    sepsis_preprocess,
)

HEADER = "|".join([*CLINICAL_COLUMNS, LABEL_COLUMN])


def psv_row(hr="NaN", label=0):
    return "|".join([hr] + ["NaN"] * 39 + [str(label)])


def psv_text(*rows):
    return "\n".join([HEADER, *rows]) + "\n"


def write_tar(path, members):
    with tarfile.open(path, "w:gz") as tar:
        folder = tarfile.TarInfo("training_setB")
        folder.type = tarfile.DIRTYPE
        tar.addfile(folder)
        for name, text in members.items():
            data = text.encode()
            info = tarfile.TarInfo(f"training_setB/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def test_first_five_patients_have_40_columns_plus_sepsis_label(shared_data):
    tar_path = require(shared_data / "PhysioNet2019_sepsis" / "training_setB.tar.gz")
    patients = list(iter_patients(tar_path, limit=5))
    with tarfile.open(tar_path, "r|gz") as tar:
        first_file = next(m for m in tar if m.isfile())
        file_header = tar.extractfile(first_file).readline().decode().strip().split("|")
    assert len(file_header) == 41 and file_header[-1] == "SepsisLabel"
    assert len(patients) == 5
    assert patients[0].id == first_file.name.split("/")[-1].removesuffix(".psv")
    for patient in patients:
        assert patient.columns + [LABEL_COLUMN] == file_header
        assert patient.values.shape[1] == 40
        assert patient.values.dtype == np.float32
        assert patient.sepsis.dtype == bool
        assert patient.sepsis.shape == (len(patient.values),)
        # ICULOS counts the hours of the stay, so it is present on every row.
        assert not np.isnan(patient.values[:, CLINICAL_COLUMNS.index("ICULOS")]).any()


def test_sepsis_preprocess_real_patient_shape(shared_data):
    tar_path = require(shared_data / "PhysioNet2019_sepsis" / "training_setB.tar.gz")
    patient = next(iter_patients(tar_path, limit=1))
    x, labels = sepsis_preprocess(patient)
    assert x.shape == (45, 10)
    assert labels.shape == (45,)
    assert x.dtype == np.float32


def make_patient(hr, temp, sepsis):
    values = np.full((len(hr), 40), np.nan, dtype=np.float32)
    values[:, CLINICAL_COLUMNS.index("HR")] = hr
    values[:, CLINICAL_COLUMNS.index("Temp")] = temp
    return Patient(id="p1", columns=list(CLINICAL_COLUMNS), values=values, sepsis=np.array(sepsis, dtype=bool))


def test_forward_fill_carries_last_value_and_leaves_leading_gaps():
    nan = np.nan
    patient = make_patient([nan, 80, nan, nan, 90], [nan, nan, 37, nan, nan], [0, 0, 0, 1, 1])
    x, labels = sepsis_preprocess(patient, length=5, features=["HR", "Temp"])
    np.testing.assert_array_equal(x[:, 0], [nan, 80, 80, 80, 90])
    np.testing.assert_array_equal(x[:, 1], [nan, nan, 37, 37, 37])
    assert labels.tolist() == [False, False, False, True, True]


def test_short_stay_is_left_padded_with_nan_and_false():
    patient = make_patient([70, np.nan], [36, 37], [0, 1])
    x, labels = sepsis_preprocess(patient, length=4, features=["HR", "Temp"])
    assert x.shape == (4, 2)
    assert np.isnan(x[:2]).all()
    np.testing.assert_array_equal(x[2:], [[70, 36], [70, 37]])
    assert labels.tolist() == [False, False, False, True]


def test_long_stay_keeps_last_hours_filled_from_before_the_window():
    hr = [60] + [np.nan] * 9
    patient = make_patient(hr, list(range(10)), [0] * 9 + [1])
    x, labels = sepsis_preprocess(patient, length=3, features=["HR", "Temp"])
    np.testing.assert_array_equal(x, [[60, 7], [60, 8], [60, 9]])
    assert labels.tolist() == [False, False, True]


def test_default_features_are_the_ten_paper_features():
    assert len(PAPER_FEATURES) == 10
    x, _ = sepsis_preprocess(make_patient([1.0], [2.0], [0]))
    assert x.shape == (45, 10)
    np.testing.assert_array_equal(x[-1, :2], [1, 2])
    assert set(VITALS) <= set(CLINICAL_COLUMNS)


def test_unknown_feature_is_refused():
    with pytest.raises(ValueError, match="Pulse"):
        sepsis_preprocess(make_patient([1.0], [2.0], [0]), features=["HR", "Pulse"])


def test_read_psv_from_disk(tmp_path):
    path = tmp_path / "p000042.psv"
    path.write_text(psv_text(psv_row("80", 0), psv_row("NaN", 1)))
    patient = read_psv(path)
    assert patient.id == "p000042"
    assert patient.values.shape == (2, 40)
    assert patient.values[0, 0] == 80 and np.isnan(patient.values[1, 0])
    assert patient.sepsis.tolist() == [False, True]


def test_iter_patients_streams_psv_members_and_honours_limit(tmp_path):
    members = {f"p{i}.psv": psv_text(psv_row(str(i))) for i in range(3)}
    members["README.txt"] = "not a patient"
    tar_path = write_tar(tmp_path / "set.tar.gz", members)
    assert [p.id for p in iter_patients(tar_path)] == ["p0", "p1", "p2"]
    assert [p.id for p in iter_patients(tar_path, limit=2)] == ["p0", "p1"]


def test_bad_value_in_archive_names_member_and_line(tmp_path):
    tar_path = write_tar(tmp_path / "set.tar.gz", {"p7.psv": psv_text(psv_row("80"), psv_row("eighty"))})
    with pytest.raises(DataFormatError) as error:
        list(iter_patients(tar_path))
    assert_names(error, "training_setB/p7.psv", 3, "column 'HR' value 'eighty' is not a number")
    assert "set.tar.gz" in str(error.value)


def test_wrong_header_is_refused(tmp_path):
    path = tmp_path / "p1.psv"
    path.write_text("HR|SepsisLabel\n80|0\n")
    with pytest.raises(DataFormatError) as error:
        read_psv(path)
    assert_names(error, "p1.psv", 1, "header is not the PhysioNet 2019 one")


def test_wrong_column_count_is_refused(tmp_path):
    path = tmp_path / "p1.psv"
    path.write_text(psv_text(psv_row(), "80|0"))
    with pytest.raises(DataFormatError) as error:
        read_psv(path)
    assert_names(error, "p1.psv", 3, "expected 41 columns, found 2")


def test_sepsis_label_other_than_0_or_1_is_refused(tmp_path):
    path = tmp_path / "p1.psv"
    path.write_text(psv_text(psv_row(label=0), psv_row(label=2)))
    with pytest.raises(DataFormatError) as error:
        read_psv(path)
    assert_names(error, "p1.psv", 3, "column 'SepsisLabel' value 2 is not 0 or 1")


def test_empty_and_header_only_files_are_refused(tmp_path):
    empty, header_only = tmp_path / "p1.psv", tmp_path / "p2.psv"
    empty.write_text("")
    header_only.write_text(HEADER + "\n")
    with pytest.raises(DataFormatError) as error:
        read_psv(empty)
    assert_names(error, "p1.psv", None, "file is empty")
    with pytest.raises(DataFormatError) as error:
        read_psv(header_only)
    assert_names(error, "p2.psv", None, "no data rows")


def test_not_a_gzip_archive_is_refused(tmp_path):
    path = tmp_path / "set.tar.gz"
    path.write_text("hello")
    with pytest.raises(DataFormatError) as error:
        list(iter_patients(path))
    assert_names(error, "set.tar.gz", None, "not a readable .tar.gz archive")
