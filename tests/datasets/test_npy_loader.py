import numpy as np
import pytest
from loader_checks import assert_names

from trep_edge.datasets import DataFormatError, load_npy


def saved(tmp_path, array, name="a.npy"):
    path = tmp_path / name
    np.save(path, array)
    return path


@pytest.mark.parametrize(
    ("shape", "expected"),
    [((5,), (1, 5, 1)), ((5, 3), (1, 5, 3)), ((2, 5, 3), (2, 5, 3))],
)
def test_shapes_become_batches_of_series(tmp_path, shape, expected):
    array = np.arange(np.prod(shape), dtype=np.float64).reshape(shape)
    loaded = load_npy(saved(tmp_path, array))
    assert loaded.shape == expected
    assert loaded.dtype == np.float64
    np.testing.assert_array_equal(loaded.ravel(), array.ravel())


def test_float32_stays_float32_and_integers_and_float64_keep_their_digits(tmp_path):
    assert load_npy(saved(tmp_path, np.array([1.5, 2], dtype=np.float32))).dtype == np.float32
    counter = np.array([2**40, 2**40 + 1])  # int64: float32 would read both as 2**40
    np.testing.assert_array_equal(load_npy(saved(tmp_path, counter, "c.npy")).ravel(), counter)
    total = np.array([12_345_678.9, 12_345_679.0])
    np.testing.assert_array_equal(load_npy(saved(tmp_path, total, "t.npy")).ravel(), total)


def test_four_dimensions_are_refused(tmp_path):
    with pytest.raises(DataFormatError) as error:
        load_npy(saved(tmp_path, np.zeros((1, 2, 3, 4)), "four.npy"))
    assert_names(error, "four.npy", None, "expected [T], [T, C] or [N, T, C]")


@pytest.mark.parametrize("array", [np.array(["a", "b"]), np.array([True, False])])
def test_non_numeric_dtypes_are_refused(tmp_path, array):
    with pytest.raises(DataFormatError) as error:
        load_npy(saved(tmp_path, array, "text.npy"))
    assert_names(error, "text.npy", None, "is not numeric")


def test_object_arrays_are_refused_without_unpickling(tmp_path):
    with pytest.raises(DataFormatError) as error:
        load_npy(saved(tmp_path, np.array([{"a": 1}], dtype=object), "obj.npy"))
    assert_names(error, "obj.npy", None, "unreadable .npy array")


def test_files_that_are_not_npy_are_refused(tmp_path):
    path = tmp_path / "z.npz"
    np.savez(path, a=np.zeros(3))
    with pytest.raises(DataFormatError) as error:
        load_npy(path)
    assert_names(error, "z.npz", None, "not a .npy file")


def test_truncated_file_is_refused(tmp_path):
    path = saved(tmp_path, np.zeros((10, 5)), "cut.npy")
    path.write_bytes(path.read_bytes()[:200])
    with pytest.raises(DataFormatError) as error:
        load_npy(path)
    assert_names(error, "cut.npy", None, "unreadable .npy array")
