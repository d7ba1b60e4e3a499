"""Atomic writes: a temporary file in the target folder, then a rename.

A crash never leaves a half-written file: readers see the old file or the new one.
Folders: :func:`atomic_directory` replaces one whole; :func:`output_folder` removes
what a failed run created.
"""

from __future__ import annotations

import errno
import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator


def atomic_write_bytes(path: str | Path, data: bytes) -> Path:
    path = Path(path)
    if path.is_dir():  # else the rename fails naming the temporary file
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, 0o666 & ~_umask())  # mkstemp makes 0600; outputs get the usual mode
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write_text(path: str | Path, text: str) -> Path:
    return atomic_write_bytes(path, text.encode("utf-8"))


@contextmanager
def atomic_directory(path: str | Path) -> Iterator[Path]:
    """Yield a temporary sibling folder; on success it replaces ``path`` whole."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
    try:
        yield tmp
        if path.exists():
            old = path.with_name(f".{path.name}.old")
            shutil.rmtree(old, ignore_errors=True)
            path.rename(old)
            tmp.rename(path)
            shutil.rmtree(old, ignore_errors=True)
        else:
            tmp.rename(path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


@contextmanager
def output_folder(out: Path) -> Iterator[Path]:
    """``out``, created (with its parents) when missing; what this created is removed
    again when the body fails, so a failed run leaves no folder behind (a folder that
    existed before is kept)."""
    created = next((p for p in reversed([out, *out.parents]) if not p.exists()), None)  # the topmost one missing
    out.mkdir(parents=True, exist_ok=True)
    try:
        yield out
    except BaseException:
        if created is not None:
            shutil.rmtree(created, ignore_errors=True)
        raise
