"""Per-stream state: named arrays, one row per stream, grown by doubling, saved as flat dicts declaring their rows.

Two layers, one mechanism:

- ``StreamState``: a holder's arrays (row i = stream i, or lane i: the holder does not care which), with
  ``add_streams`` / ``remove_streams`` / ``reset_streams`` / ``state_dict`` / ``from_state``. Windows, step rings,
  scales, detector and alert state are all ``StreamState`` subclasses.
- Declared rows: a flat state (``{key: array}``, as a checkpoint holds it) names under ``LAYOUT_KEY`` what indexes
  the first axis of every other key (``Rows``): a row *space* (``stream``, ``lane``, a table of entries), how many
  rows each entry of the space has (``per``: a lane's channels), and for an index array the space its values
  point into (``refers``); a setting has no space (and may list its space's ``names``). ``select`` and
  ``concatenate`` move rows by that declaration alone, so ``reshard`` moves every stream's state without knowing
  what it means and without guessing from shapes; ``counts`` refuses a key that is not declared or whose rows do
  not fit its declaration, naming it.

Every space but ``stream`` is reached from ``stream`` through an index array that ``refers`` to a known space (a
lane's stream, an entry's lane), so keeping some streams keeps exactly their lanes and entries.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any, Mapping, Sequence, TypeVar

import numpy as np

StateT = TypeVar("StateT", bound="StreamState")
LAYOUT_KEY = "layout"
"""The key of a flat state's declaration (JSON: key -> ``Rows``)."""
ROOT = "stream"
"""The space the others are reached from: one row per stream."""


class StreamState:
    """Per-stream streaming state held as rows of numpy arrays (row i = stream i), with save/restore.

    Subclasses define ``_fresh(n)`` (initial rows for n new streams, one array per attribute name) and
    ``_config()`` (JSON-able constructor keyword arguments other than ``n_streams``). Each attribute is a view of
    the first ``n_streams`` rows of a larger buffer that doubles when full: adding streams one at a time (a
    producer inventing ids) then costs amortised O(1) per stream, not a copy of every stream's state each time.
    Subclasses update rows in place and never rebind the attributes.
    """

    def __init__(self, n_streams: int = 0) -> None:
        fresh = self._fresh(n_streams)
        self._names = tuple(fresh)
        self._set_buffers(fresh, n_streams)

    def _set_buffers(self, buffers: dict[str, np.ndarray], n: int) -> None:
        """Adopt ``buffers`` (first axis: capacity >= n) and expose their first ``n`` rows as the attributes."""
        self._buffers, self._n = buffers, n
        for name, buf in buffers.items():
            setattr(self, name, buf[:n])

    def _fresh(self, n: int) -> dict[str, np.ndarray]:
        raise NotImplementedError

    def _config(self) -> dict[str, Any]:
        raise NotImplementedError

    @classmethod
    def _from_config(cls: type[StateT], config: dict[str, Any]) -> StateT:
        return cls(**config)

    @property
    def n_streams(self) -> int:
        """Number of streams (rows)."""
        return self._n

    @property
    def fields(self) -> tuple[str, ...]:
        """The names of the per-stream arrays (the keys of ``state_dict()`` besides ``config``)."""
        return self._names

    def _rows(self, stream_idx: np.ndarray, values: np.ndarray | None = None, name: str = "values") -> np.ndarray:
        """Validate stream indices (1-D, distinct, in range) and, if given, that ``values`` matches them."""
        idx = np.asarray(stream_idx)
        if idx.ndim != 1 or not (np.issubdtype(idx.dtype, np.integer) or idx.size == 0):
            raise ValueError(f"stream_idx must be a 1-D integer array, got shape {idx.shape} dtype {idx.dtype}")
        idx = idx.astype(np.int64)
        if idx.size and (idx.min() < 0 or idx.max() >= self.n_streams):
            raise ValueError(f"stream_idx must lie in 0..{self.n_streams - 1}; add streams with add_streams first")
        if idx.size > 1 and np.unique(idx).size != idx.size:  # (one index cannot repeat: a stream scored alone)
            raise ValueError("stream_idx must not repeat a stream within one call: feed one reading per stream")
        if values is not None and np.shape(values) != idx.shape:
            raise ValueError(f"{name} must have shape {idx.shape} (one value per stream_idx), got {np.shape(values)}")
        return idx

    def add_streams(self, n: int) -> np.ndarray:
        """Append ``n`` fresh streams and return their indices."""
        if n < 0:
            raise ValueError(f"n must be >= 0, got {n}")
        start, buffers = self._n, self._buffers
        capacity = next(iter(buffers.values())).shape[0]
        if start + n > capacity:
            capacity = max(2 * capacity, start + n, 8)
            grown = {}
            for name, buf in buffers.items():
                grown[name] = np.empty((capacity,) + buf.shape[1:], dtype=buf.dtype)
                grown[name][:start] = buf[:start]
            buffers = grown
        for name, rows in self._fresh(n).items():
            buffers[name][start : start + n] = rows
        self._set_buffers(buffers, start + n)
        return np.arange(start, start + n)

    def remove_streams(self, stream_idx: np.ndarray) -> None:
        """Drop streams; later streams move down to fill the gaps, as ``np.delete`` would renumber them."""
        idx = self._rows(stream_idx)
        keep = np.ones(self._n, dtype=bool)
        keep[idx] = False
        left = int(keep.sum())
        for buf in self._buffers.values():
            buf[:left] = buf[: self._n][keep]
        self._set_buffers(self._buffers, left)

    def reset_streams(self, stream_idx: np.ndarray) -> None:
        """Return streams to their initial state, keeping their indices."""
        idx = self._rows(stream_idx)
        for name, rows in self._fresh(idx.size).items():
            getattr(self, name)[idx] = rows

    def state_dict(self) -> dict[str, np.ndarray]:
        """Return a copy of the state: ``config`` (a JSON string as a 0-d array) and one array per field."""
        state = {"config": np.array(json.dumps(self._config()))}
        state.update({name: getattr(self, name).copy() for name in self._names})
        return state

    def with_arrays(self: StateT, state: Mapping[str, Any]) -> StateT:
        """A new object of this one's configuration holding the arrays of ``state`` (``state_dict`` output, whose own
        ``config`` is ignored): another card's prior or warm-up over the same streams, or a state saved before a
        setting existed (its arrays for that setting start fresh, as in ``from_state``)."""
        return type(self).from_state({**state, "config": np.array(json.dumps(self._config()))})

    @classmethod
    def from_state(cls: type[StateT], state: Mapping[str, Any]) -> StateT:
        """Rebuild from ``state_dict()`` output, or from it after ``{k: v.tolist()}`` and a JSON round trip."""
        obj = cls._from_config(json.loads(str(np.asarray(state["config"]))))
        arrays = {}
        # A field newer than the state (a checkpoint written by an earlier version) starts fresh for every stream.
        present = [name for name in obj._names if name in state]
        if not present:
            raise ValueError(f"state has none of the fields {list(obj._names)}")
        fresh = obj._fresh(int(np.shape(state[present[0]])[0]))
        for name in obj._names:
            if name not in state:
                arrays[name] = fresh[name]
                continue
            template = getattr(obj, name)
            arr = np.asarray(state[name], dtype=template.dtype)
            if arr.size == 0:  # a JSON round trip loses the shape of empty arrays, but not their first axis
                arr = arr.reshape((arr.shape[0] if arr.ndim else 0,) + template.shape[1:])
            if arr.shape[1:] != template.shape[1:]:
                raise ValueError(f"state[{name!r}] has shape {arr.shape}, expected [S, *{template.shape[1:]}]")
            arrays[name] = arr
        if len({a.shape[0] for a in arrays.values()}) != 1:
            shapes = {k: a.shape for k, a in arrays.items()}
            raise ValueError(f"state arrays disagree on the number of streams: {shapes}")
        obj._set_buffers({name: arr.copy() for name, arr in arrays.items()}, next(iter(arrays.values())).shape[0])
        return obj


@dataclass(frozen=True)
class Rows:
    """What indexes the first axis of one key of a flat state.

    Attributes:
        space: the row space (``stream``, ``lane``, an entry table's name); None for a setting (any shape).
        per: rows per entry of the space (a lane's channels: ``StreamScaler`` keeps one row per lane and channel).
        refers: for an index array, the space its values number (they are renumbered when rows move).
        names: for a setting, the space whose entries its JSON field ``names`` lists, in row order.
    """

    space: str | None = None
    per: int = 1
    refers: str | None = None
    names: str | None = None


def declare(state: dict[str, np.ndarray], keys: Mapping[str, Rows]) -> None:
    """Add ``keys``' declarations to ``state``'s layout (made if missing)."""
    layout = {k: asdict(v) for k, v in layout_of(state).items()} if LAYOUT_KEY in state else {}
    layout.update({k: asdict(v) for k, v in keys.items()})
    state[LAYOUT_KEY] = np.array(json.dumps(layout, sort_keys=True))


def declare_holder(prefix: str, state: Mapping[str, np.ndarray], space: str, per: int = 1) -> dict[str, Rows]:
    """The declaration of a ``StreamState.state_dict()`` stored under ``prefix/``: its config a setting, every
    other array ``per`` rows per entry of ``space``."""
    return {f"{prefix}/{k}": Rows() if k == "config" else Rows(space, per) for k in state}


def layout_of(state: Mapping[str, Any]) -> dict[str, Rows]:
    """The declaration of every key of ``state``; ValueError when it has none."""
    if LAYOUT_KEY not in state:
        raise ValueError(f"the state declares no rows (no {LAYOUT_KEY!r} key): it was written by an older version")
    return {k: Rows(**v) for k, v in json.loads(str(np.asarray(state[LAYOUT_KEY]))).items()}


def _names(value: Any) -> list[str]:
    return list(json.loads(str(np.asarray(value)))["names"])


def counts(state: Mapping[str, Any]) -> dict[str, int]:
    """Entries per space, checking the declaration: every key declared and present, every key's rows ``per`` times
    its space's entries, every index within the space it refers to. ValueError naming the first key that fails."""
    layout = layout_of(state)
    found: dict[str, tuple[int, str]] = {}

    def count(space: str, n: int, key: str) -> None:
        seen = found.setdefault(space, (n, key))
        if seen[0] != n:
            raise ValueError(f"state key {key!r} has {n} {space} rows, but {seen[1]!r} has {seen[0]}: its rows are "
                             "not declared right")  # fmt: skip

    for key, value in state.items():
        if key == LAYOUT_KEY:
            continue
        if key not in layout:
            raise ValueError(f"cannot move state key {key!r} (shape {np.shape(value)}) between shards: the state's "
                             f"layout does not declare its rows (declare them where the state is made; do not teach "
                             f"runtime/trep_edge/runtime/service/reshard.py to guess)")  # fmt: skip
        rows = layout[key]
        if rows.space is None:
            if rows.names is not None:
                count(rows.names, len(_names(value)), key)
            continue
        shape = np.shape(value)
        if not shape or shape[0] % rows.per:
            raise ValueError(f"state key {key!r} (shape {shape}) is declared {rows.per} rows per {rows.space}, "
                             "which its first axis does not fit")  # fmt: skip
        count(rows.space, shape[0] // rows.per, key)
    missing = sorted(set(layout) - set(state))
    if missing:
        raise ValueError(f"the state declares keys it does not hold: {', '.join(missing)}")
    n = {space: c for space, (c, _) in found.items()}
    for key, rows in layout.items():
        if rows.refers is not None:
            idx = np.asarray(state[key])
            if idx.dtype.kind not in "iu" or idx.ndim != 1:
                raise ValueError(f"state key {key!r} refers to {rows.refers} rows but is not a 1-d integer array")
            top = n.get(rows.refers, 0)
            if idx.size and (idx.min() < 0 or idx.max() >= top):
                raise ValueError(f"state key {key!r} points at {rows.refers} rows outside 0..{top - 1}")
    return n


def _kept(state: Mapping[str, Any], layout: Mapping[str, Rows], keep: np.ndarray) -> dict[str, np.ndarray]:
    """Which rows of every space are kept when the streams ``keep`` are: spaces follow their index arrays."""
    kept = {ROOT: np.asarray(keep, dtype=bool)}
    pending = {k: r for k, r in layout.items() if r.refers is not None and r.space != r.refers}
    while pending:
        ready = {k: r for k, r in pending.items() if r.refers in kept and r.space not in kept}
        if not ready:
            break
        for key, rows in ready.items():
            kept[rows.space] = kept[rows.refers][np.asarray(state[key], dtype=np.int64)]
            pending.pop(key)
        pending = {k: r for k, r in pending.items() if r.space not in kept}
    spaces = {r.space for r in layout.values() if r.space is not None} | {r.names for r in layout.values() if r.names}
    unreachable = sorted(spaces - set(kept))
    if unreachable:
        raise ValueError(f"no index array leads from the streams to the rows of {', '.join(unreachable)}")
    return kept


def select(state: Mapping[str, Any], keep: np.ndarray) -> dict[str, np.ndarray]:
    """The state of the streams where ``keep`` (bool, one per stream) is true, in their order, with their rows in
    every space; indices renumbered, settings copied, listed names kept with their rows."""
    layout, n = layout_of(state), counts(state)
    keep = np.asarray(keep, dtype=bool)
    if keep.shape != (n.get(ROOT, 0),):
        raise ValueError(f"keep must have one flag per stream ({n.get(ROOT, 0)}), got shape {keep.shape}")
    kept = _kept(state, layout, keep)
    out: dict[str, np.ndarray] = {LAYOUT_KEY: np.asarray(state[LAYOUT_KEY]).copy()}
    for key, rows in layout.items():
        value = np.asarray(state[key])
        if rows.space is None:
            out[key] = _with_names(value, rows, lambda names: [x for x, k in zip(names, kept[rows.names]) if k])
            continue
        value = value[np.repeat(kept[rows.space], rows.per)]
        if rows.refers is not None:
            value = (np.cumsum(kept[rows.refers]) - 1)[value]
        out[key] = value.copy()
    return out


def _with_names(value: np.ndarray, rows: Rows, change: Any) -> np.ndarray:
    if rows.names is None:
        return value.copy()
    parsed = json.loads(str(value))
    parsed["names"] = change(parsed["names"])
    return np.array(json.dumps(parsed))


def concatenate(states: Sequence[Mapping[str, Any]]) -> dict[str, np.ndarray]:
    """One state holding the rows of all ``states`` (the same declaration), in order; indices shifted, settings
    taken from the first, listed names joined. The caller checks that the settings agree."""
    layouts = [layout_of(s) for s in states]
    if any(layout != layouts[0] for layout in layouts[1:]):
        raise ValueError("the states declare different rows: they were written by other versions or models")
    n = [counts(s) for s in states]
    out: dict[str, np.ndarray] = {LAYOUT_KEY: np.asarray(states[0][LAYOUT_KEY]).copy()}
    for key, rows in layouts[0].items():
        if rows.space is None:
            every = [_names(s[key]) for s in states] if rows.names else []
            out[key] = _with_names(np.asarray(states[0][key]), rows, lambda _: sum(every, []))
            continue
        parts = [np.asarray(s[key]) for s in states]
        if rows.refers is not None:
            offsets = np.cumsum([0] + [c.get(rows.refers, 0) for c in n[:-1]])
            parts = [part + int(off) for part, off in zip(parts, offsets)]
        out[key] = np.concatenate(parts)
    return out
