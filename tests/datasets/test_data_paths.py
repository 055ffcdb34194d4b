from pathlib import Path

import pytest

from trep_edge.datasets import data_root
from trep_edge.datasets import paths
from trep_edge.datasets.paths import DEFAULT_ROOT, ENV_VAR


def test_override_wins_over_environment(tmp_path, monkeypatch):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    monkeypatch.setenv(ENV_VAR, str(tmp_path / "b"))
    assert data_root(tmp_path / "a") == tmp_path / "a"


def test_environment_variable_used_without_override(tmp_path, monkeypatch):
    monkeypatch.setenv(ENV_VAR, str(tmp_path))
    assert data_root() == tmp_path


def test_default_is_shared_data_beside_the_repo():
    repo = Path(__file__).resolve().parents[2]
    assert DEFAULT_ROOT == repo.parent / "shared" / "data"


def test_missing_folder_says_how_to_set_it(tmp_path, monkeypatch):
    monkeypatch.setenv(ENV_VAR, str(tmp_path / "nowhere"))
    with pytest.raises(FileNotFoundError) as error:
        data_root()
    assert "nowhere" in str(error.value)
    assert ENV_VAR in str(error.value)
    assert "--data-root" in str(error.value)


def test_default_used_when_environment_unset_or_empty(tmp_path, monkeypatch):
    monkeypatch.setattr(paths, "DEFAULT_ROOT", tmp_path)
    monkeypatch.setenv(ENV_VAR, "")
    assert data_root() == tmp_path
    monkeypatch.delenv(ENV_VAR)
    assert data_root() == tmp_path
