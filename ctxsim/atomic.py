"""Atomic writes: a temporary file in the target folder, then a rename.

A crash never leaves a half-written file: readers see the old file or the new one.
Folders: :func:`atomic_directory` replaces one whole; :func:`output_folder` removes
what a failed run created.

Outputs are checked before they are written (:func:`check_output`): an existing
path that is not a regular file (a FIFO, socket or device) is never replaced, and a
name longer than the file system allows is refused up front. Temporaries are named
``.<name>.<pid>.<random>.tmp`` (folders without ``.tmp``); a process killed before
its rename leaves one behind, and the next write of the same name removes those
whose process is gone (:func:`remove_stale`).
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import stat
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator, TypeVar

from .errors import ConfigError

T = TypeVar("T")

#: characters of the target's name kept in a temporary's name (so that the temporary
#: of a name near the file system's limit still fits)
TEMP_NAME_CHARS = 100
#: room the temporary's decoration takes beyond the kept name: ".", ".<pid>.", random, ".tmp"
_TEMP_EXTRA = 40


def name_max(folder: str | Path) -> int:
    """Longest file name (bytes) the file system of ``folder`` (or its nearest
    existing parent) allows; 255 where it does not say."""
    folder = Path(os.path.abspath(folder))
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    try:
        return os.pathconf(folder, "PC_NAME_MAX")
    except (OSError, ValueError):
        return 255


def check_output(path: str | Path, *, folder: bool = False, key: str | None = None) -> None:
    """Raise ConfigError (naming ``path`` and ``key``) unless ``path`` can be an
    output: missing, or an existing regular file (a folder when ``folder``), with
    every name on the way within the file system's length limit."""
    path = Path(path)
    limit = name_max(path.parent)
    for part in path.parts:
        if len(os.fsencode(part)) > limit:
            raise ConfigError(f"the name {part[:40]!r}... is {len(os.fsencode(part))} bytes long; this file system "
                              f"allows {limit}", source=path, key=key)
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return
    except OSError as exc:
        raise ConfigError(f"cannot be written ({exc.strerror or exc})", source=path, key=key) from None
    wanted, ok = ("a folder", stat.S_ISDIR(mode)) if folder else ("a regular file", stat.S_ISREG(mode))
    if not ok:
        raise ConfigError(f"exists and is not {wanted} ({_kind(mode)}); refusing to replace it", source=path, key=key)


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"), (stat.S_ISREG, "a file")):
        if test(mode):
            return name
    return "a special file"


def temp_prefix(path: Path) -> str:
    """The name start of this process's temporaries for ``path`` (:func:`remove_stale` knows it)."""
    return f".{path.name[:TEMP_NAME_CHARS]}.{os.getpid()}."


def process_alive(pid: int) -> bool:
    """True when process ``pid`` runs (on this machine)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def remove_stale(path: str | Path) -> list[Path]:
    """Remove the temporaries that earlier writes of ``path`` left behind when their
    process was killed (their pid no longer runs); the removed paths."""
    path = Path(path)
    pattern = re.compile(re.escape(f".{path.name[:TEMP_NAME_CHARS]}.") + r"(\d+)\.[^/]*$")
    removed = []
    try:
        siblings = list(path.parent.iterdir())
    except OSError:
        return removed
    for sibling in siblings:
        match = pattern.match(sibling.name)
        if match is None or process_alive(int(match.group(1))):
            continue
        if sibling.is_dir() and not sibling.is_symlink():
            shutil.rmtree(sibling, ignore_errors=True)
        else:
            sibling.unlink(missing_ok=True)
        removed.append(sibling)
    return removed


def atomic_write_bytes(path: str | Path, data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically (ConfigError when ``path`` is not a
    possible output: :func:`check_output`)."""
    path = Path(path)
    if path.is_dir():  # else the rename fails naming the temporary file
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
    check_output(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale(path)
    fd, tmp = tempfile.mkstemp(prefix=temp_prefix(path), suffix=".tmp", dir=path.parent)
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


def read_or_make(path: Path, read: Callable[[Path], T], make: Callable[[], T], dump: Callable[[T], bytes]) -> tuple[T, bool]:
    """The value kept at ``path``, else made and kept there: ``(read(path), False)``
    when that succeeds; otherwise (no file, or one ``read`` cannot take: missing,
    torn, damaged or of an older format, whatever error reading it raises — a damaged
    ``.npz`` alone raises a dozen kinds) ``(make(), True)``, written to ``path``
    atomically as ``dump(value)`` first. For pure, slow results named by what they
    depend on (a fit, a teacher's rows in the pool folder): a kept file is a cache."""
    try:
        return read(path), False
    except Exception:  # noqa: BLE001 - a cache that cannot be read is made again
        pass
    value = make()
    atomic_write_bytes(path, dump(value))
    return value, True


@contextmanager
def atomic_directory(path: str | Path) -> Iterator[Path]:
    """Yield a temporary sibling folder; on success it replaces ``path`` whole."""
    path = Path(path)
    check_output(path, folder=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale(path)
    tmp = Path(tempfile.mkdtemp(prefix=temp_prefix(path), dir=path.parent))
    try:
        yield tmp
        if path.exists():
            old = path.with_name(f"{temp_prefix(path)}old")
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
    existed before is kept). ConfigError when ``out`` exists and is not a folder."""
    check_output(out, folder=True)
    created = next((p for p in reversed([out, *out.parents]) if not p.exists()), None)  # the topmost one missing
    out.mkdir(parents=True, exist_ok=True)
    try:
        yield out
    except BaseException:
        if created is not None:
            shutil.rmtree(created, ignore_errors=True)
        raise
