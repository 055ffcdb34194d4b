"""The one way this project replaces a file: the new content appears whole or not at all.

Every file that a crash must not tear goes through ``write_atomically``: the daemon's checkpoints, exported
models and their cards (``trep_edge.training.export``), promoted models (``trep_edge.training.promote``), the
trainer's checkpoints, an evaluation's results file and the folder ``trep-edge init`` writes
(``trep_edge/init_config.py``). Standard library only, so the runtime and the training side can both import it.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, BinaryIO, Callable


def write_atomically(path: Path, write: Callable[[BinaryIO], Any], mode: int | None = None) -> None:
    """Write a file through ``write(fh)``: temp file in its folder, fsync, rename, fsync the folder.

    A crash at any moment leaves either the old file or the new one, never a torn file. ``mode``: permissions
    of the new file (mkstemp creates 0600).

    ``write`` gets the temp file opened in binary mode; whatever it returns is ignored. If it raises, the temp
    file is removed and the old file (if any) is left as it was. The folder must exist.
    """
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def copy_atomically(src: Path, dst: Path, mode: int | None = 0o644) -> None:
    """Install the finished file ``src`` (e.g. a model staged in a temporary folder) as ``dst``, atomically and
    durably; ``src`` may be on another filesystem, which a plain rename cannot cross."""
    with open(src, "rb") as staged:
        write_atomically(Path(dst), lambda fh: shutil.copyfileobj(staged, fh), mode=mode)
