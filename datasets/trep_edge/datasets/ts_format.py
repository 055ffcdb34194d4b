"""Load sktime .ts files (UEA multivariate and UCR univariate classification archives) into [N, T, C] arrays.

Format: '#' comment lines, '@tag value' header lines, '@data', then one case per line with dimensions separated
by ':', values by ',', and the class label as the last ':' field. '?' and 'NaN' are missing values.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from trep_edge.datasets.cells import parse_floats
from trep_edge.datasets.errors import DataFormatError
from trep_edge.datasets.paths import data_root

_MISSING = frozenset({"?"})
_ARCHIVES = ("UEA", "UCR")


@dataclass
class _Header:
    has_label: bool = False
    classes: list[str] = field(default_factory=list)
    dimensions: int | None = None


def load_ts(path: str | os.PathLike[str]) -> tuple[np.ndarray, np.ndarray]:
    """Load a .ts file as (X float32 [N, T, C], y str [N]); short cases are NaN-padded at the end.

    y holds '' for every case when the file declares no labels (@classLabel false).
    """
    source = str(path)
    # Comments in some archive files are Latin-1; data lines are ASCII, so replacing undecodable bytes is safe.
    lines = Path(path).read_text(encoding="utf-8", errors="replace").splitlines()
    if not any(line.strip() for line in lines):
        raise DataFormatError(source, "file is empty (expected @ header lines, @data and one case per line)")
    header, data_start = _read_header(lines, source)
    cases, labels = [], []
    for number, line in enumerate(lines[data_start:], start=data_start + 1):
        if line.strip():
            dims, label = _parse_case(line.strip(), header, source, number)
            if header.dimensions is None:
                header.dimensions = len(dims)
            cases.append(dims)
            labels.append(label)
    if not cases:
        raise DataFormatError(source, "no cases after @data")
    return _stack(cases), np.array(labels, dtype=str)


def load_uea(
    name: str, root: str | os.PathLike[str] | None = None
) -> tuple[np.ndarray | None, np.ndarray | None, np.ndarray | None, np.ndarray | None]:
    """Load <root>/UEA/<name>/ or <root>/UCR/<name>/ as (X_train, y_train, X_test, y_test); a missing split is None.

    Both splits are NaN-padded to the same length so a model sees one T for the whole data set.
    """
    base = data_root(root)
    folders = [base / archive / name for archive in _ARCHIVES]
    folder = next((f for f in folders if f.is_dir()), None)
    if folder is None:
        looked = " and ".join(str(f) for f in folders)
        raise FileNotFoundError(f"data set {name!r} not found: looked in {looked}")
    splits = [folder / f"{name}_{split}.ts" for split in ("TRAIN", "TEST")]
    if not any(p.is_file() for p in splits):
        raise FileNotFoundError(f"{folder} holds neither {splits[0].name} nor {splits[1].name}")
    loaded = [load_ts(p) if p.is_file() else (None, None) for p in splits]
    (x_train, y_train), (x_test, y_test) = _common_shape(loaded, splits)
    return x_train, y_train, x_test, y_test


def _read_header(lines: list[str], source: str) -> tuple[_Header, int]:
    header = _Header()
    for index, raw in enumerate(lines):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if not line.startswith("@"):
            raise DataFormatError(source, "data before @data: expected '#' comments or '@' header lines", index + 1)
        tag, _, value = line.replace("\t", " ").partition(" ")
        tag, words = tag.lower(), value.split()
        flag = words[0].lower() if words else ""
        if tag == "@data":
            return header, index + 1
        if tag == "@timestamps" and flag == "true":
            problem = "@timeStamps true files ((time, value) pairs) are not supported; export plain values instead"
            raise DataFormatError(source, problem, index + 1)
        if tag in ("@classlabel", "@targetlabel") and flag == "true":
            header.has_label = True
            header.classes = words[1:] if tag == "@classlabel" else []
        elif tag == "@dimensions":
            if len(words) != 1 or not words[0].isdigit():
                raise DataFormatError(source, f"@dimensions needs one whole number, found {value!r}", index + 1)
            header.dimensions = int(words[0])
    raise DataFormatError(source, "no @data line: expected @ header lines followed by @data")


def _parse_case(line: str, header: _Header, source: str, number: int) -> tuple[list[np.ndarray], str]:
    label = ""
    if header.has_label:
        line, sep, label = line.rpartition(":")
        label = label.strip()
        if not sep:
            raise DataFormatError(source, "missing class label: expected values then ':<label>'", number)
        if header.classes and label not in header.classes:
            raise DataFormatError(source, f"label {label!r} is not one of @classLabel {header.classes}", number)
    parts = line.split(":")
    # Without @dimensions the first case sets the count for the rest.
    expected = header.dimensions if header.dimensions is not None else len(parts)
    if len(parts) != expected:
        raise DataFormatError(source, f"expected {expected} dimensions separated by ':', found {len(parts)}", number)
    dims = [
        parse_floats(part.split(","), source=source, line=number, what=f"dimension {d + 1}", missing=_MISSING)
        for d, part in enumerate(parts)
    ]
    return dims, label


def _stack(cases: list[list[np.ndarray]]) -> np.ndarray:
    channels = len(cases[0])
    length = max(len(dim) for dims in cases for dim in dims)
    out = np.full((len(cases), length, channels), np.nan, dtype=np.float32)
    for i, dims in enumerate(cases):
        for c, dim in enumerate(dims):
            out[i, : len(dim), c] = dim
    return out


def _common_shape(
    loaded: list[tuple[np.ndarray | None, np.ndarray | None]], paths: list[Path]
) -> list[tuple[np.ndarray | None, np.ndarray | None]]:
    arrays = [x for x, _ in loaded if x is not None]
    channels = {x.shape[2] for x in arrays}
    if len(channels) > 1:
        raise DataFormatError(paths[1], f"TEST has {arrays[1].shape[2]} dimensions but TRAIN has {arrays[0].shape[2]}")
    length = max(x.shape[1] for x in arrays)
    return [(None if x is None else _pad_time(x, length), y) for x, y in loaded]


def _pad_time(x: np.ndarray, length: int) -> np.ndarray:
    if x.shape[1] == length:
        return x
    pad = np.full((x.shape[0], length - x.shape[1], x.shape[2]), np.nan, dtype=x.dtype)
    return np.concatenate([x, pad], axis=1)
