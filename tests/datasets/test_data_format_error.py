import pickle

from trep_edge.datasets import DataFormatError


def test_message_names_file_line_and_problem():
    error = DataFormatError("ETTh1.csv", "column 'OT' value 'abc' is not a number", 17)
    assert str(error) == "ETTh1.csv line 17: column 'OT' value 'abc' is not a number"


def test_message_without_line_names_file_and_problem():
    assert str(DataFormatError("a.npy", "dtype <U3 is not numeric")) == "a.npy: dtype <U3 is not numeric"


def test_is_a_value_error():
    assert isinstance(DataFormatError("f", "p"), ValueError)


def test_survives_pickling_for_worker_processes():
    error = pickle.loads(pickle.dumps(DataFormatError("f.ts", "bad", 3)))
    assert (error.source, error.problem, error.line, str(error)) == ("f.ts", "bad", 3, "f.ts line 3: bad")
