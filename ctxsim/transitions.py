"""JSONL transition logs: design 001's ``rlLogger.append({stateBefore, action, reward, stateAfter})``.

One JSON object per line (schema :data:`SCHEMA_VERSION`)::

    schema_version, run_id, episode, step, scenario, seed,
    stateBefore, action, reward, stateAfter, terminated, truncated, outcome

``stateBefore`` / ``stateAfter`` hold the observation vector and a compact
:func:`state_summary` (the full rendered text only with ``full_text=True``);
``action`` is a strategy id; ``outcome`` is the BreakingOutcome dict on an
episode's last step and null before.

Lines are reproducible: keys sorted, floats rounded to 6 digits, no timestamps or
random ids, so the same rollouts give byte-identical logs. Each line (newline
included) is written with one ``write`` and flushed, so a crash can only tear the
last line; :func:`read_transitions` skips a torn last line with a warning and
:class:`TransitionWriter` cuts one off before appending. No gymnasium import here:
the deployable policy's decision logs use :func:`state_summary` too.

Several writers may share one log (agent processes deploying one policy): a
writer cuts a torn tail and reads the last episode number under an exclusive lock
of the file (``flock``; POSIX, a no-op elsewhere), and :meth:`TransitionWriter.episode`
holds that lock while one episode is numbered and written, so episodes from
different writers never share a number or interleave. Writers that number their
episodes themselves from :attr:`TransitionWriter.first_episode` (evaluation, the
env recorder) assume they are the log's only writer.

A writer modifies only a file it recognises as a log: empty, or whose first line
is a transition record of this schema. Anything else (``--log notes.txt``) is
refused with LogFormatError before a byte changes.

A run that appends many episodes and may be killed (``evaluate --log``) marks
itself with :class:`PendingAppend`: a hidden file beside the log that says where
the run began and which command it is. After a SIGKILL the marker stays; the same
command run again resumes (keeps the killed run's complete episodes, cuts the rest,
and writes only the episodes still missing: the log ends as an uninterrupted run
would have left it), another command is refused.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

try:
    import fcntl
except ImportError:  # not POSIX: no file lock
    fcntl = None

import numpy as np

from .atomic import atomic_write_text, process_alive
from .errors import LogFormatError
from .probes import share_answered
from .model import STATED_KINDS, ContextState
from .validation import DuplicateKeyError, check_input, loads_json

logger = logging.getLogger(__name__)

SCHEMA_VERSION = 1
#: digits kept after the decimal point for every float in a record
FLOAT_DIGITS = 6
REQUIRED_KEYS = (
    "schema_version", "run_id", "episode", "step", "scenario", "seed", "stateBefore", "action", "reward",
    "stateAfter", "terminated", "truncated", "outcome",
)


def state_summary(
    state: ContextState, observation: Sequence[float] | np.ndarray | None = None, *, full_text: bool = False
) -> dict[str, Any]:
    """A compact, JSON-ready description of a context state.

    ``total_tokens`` and ``limit`` (tokens), ``units``, ``p1_units``, ``facts_present``
    (share of the planted facts and rules whose value appears in the rendered
    context; 1.0 when none were planted), ``probes_present`` (the same over every
    probe of the state's ground truth, :mod:`ctxsim.probes`), ``history`` (strategy ids applied), the
    ``observation`` vector when given, and ``text`` (the rendered context) with
    ``full_text``.
    """
    text = state.render()
    summary: dict[str, Any] = {
        "total_tokens": state.total_tokens,
        "limit": state.limit,
        "units": len(state.units),
        "p1_units": sum(u.priority == 1 for u in state.units),
        "facts_present": share_answered((f for f in state.fact_table if f.kind in STATED_KINDS), text),
        "probes_present": share_answered(state.fact_table, text),
        "history": list(state.history),
    }
    if observation is not None:
        summary["observation"] = [float(x) for x in np.asarray(observation, dtype=np.float64).ravel()]
    if full_text:
        summary["text"] = text
    return summary


def _plain(value: Any) -> Any:
    """JSON-ready copy: numpy scalars/arrays to Python, floats rounded, NaN/inf rejected."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, np.ndarray):
        return [_plain(v) for v in value.tolist()]
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        value = float(value)
        if not math.isfinite(value):
            raise LogFormatError(f"cannot log a non-finite number ({value})")
        rounded = round(value, FLOAT_DIGITS)
        return 0.0 if rounded == 0 else rounded  # no "-0.0"
    return value


def encode_record(record: Mapping[str, Any]) -> bytes:
    """One log line: sorted keys, rounded floats, compact separators, newline."""
    text = json.dumps(_plain(record), sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return (text + "\n").encode("utf-8")


class TransitionWriter:
    """Appends transition records to a JSONL file.

    An existing log is appended to, never truncated, unless ``overwrite``; a torn
    last line left by a crash (no final newline, or not JSON: what
    :func:`read_transitions` skips) is cut off first, with a warning.
    :attr:`first_episode` is the number the writer's first episode takes: one more
    than the log's last record's, so that appended runs never merge episodes.
    ``full_text`` adds each state's rendered text to the records. A log whose last
    line is JSON but not a transition record is refused (LogFormatError) before
    anything is written.
    """

    def __init__(self, path: str | Path, run_id: str, *, overwrite: bool = False, full_text: bool = False):
        self.path = Path(path)
        self.run_id = str(run_id)
        self.full_text = full_text
        self.first_episode = 0
        if not overwrite:
            recognise(self.path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fh = open(self.path, "wb" if overwrite else "ab")
        except OSError as exc:  # a folder that cannot be made, a directory, no permission
            raise LogFormatError(f"cannot write the log ({exc.strerror or exc})", source=self.path) from None
        if not overwrite:
            try:
                with self._locked():
                    self.first_episode = self._tail_episode()
            except BaseException:
                self._fh.close()
                raise

    @contextmanager
    def _locked(self) -> Iterator[None]:
        """Hold an exclusive lock of the log (other writers' locks wait for it)."""
        if fcntl is None:
            yield
            return
        fcntl.flock(self._fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(self._fh.fileno(), fcntl.LOCK_UN)

    def _tail_episode(self) -> int:
        """Cut a torn last line; the next episode number (call under the lock)."""
        _cut_torn_tail(self.path)
        return _next_episode(self.path)

    @contextmanager
    def episode(self) -> Iterator[int]:
        """The number of one episode to write now, under the log's lock: one more
        than the last record's when the block starts, whatever other writers
        appended since this writer opened the log."""
        with self._locked():
            yield self._tail_episode()

    def write(self, record: Mapping[str, Any]) -> None:
        """Write one record (any JSON-ready mapping) as one line, then flush."""
        self._fh.write(encode_record(record))
        self._fh.flush()

    def write_transition(
        self,
        *,
        episode: int,
        step: int,
        scenario: str,
        seed: int | None,
        state_before: ContextState,
        observation_before: Sequence[float] | np.ndarray,
        action: str,
        reward: float,
        state_after: ContextState,
        observation_after: Sequence[float] | np.ndarray,
        terminated: bool,
        truncated: bool,
        outcome: Mapping[str, Any] | None = None,
    ) -> None:
        """Write one transition in the schema of this module."""
        self.write(
            {
                "schema_version": SCHEMA_VERSION,
                "run_id": self.run_id,
                "episode": episode,
                "step": step,
                "scenario": scenario,
                "seed": seed,
                "stateBefore": state_summary(state_before, observation_before, full_text=self.full_text),
                "action": action,
                "reward": reward,
                "stateAfter": state_summary(state_after, observation_after, full_text=self.full_text),
                "terminated": terminated,
                "truncated": truncated,
                "outcome": dict(outcome) if outcome is not None else None,
            }
        )

    def write_step(
        self,
        step: Any,
        *,
        episode: int,
        index: int,
        scenario: str,
        seed: int | None,
        observe: Callable[[ContextState], Sequence[float] | np.ndarray],
        outcome: Mapping[str, Any] | None = None,
    ) -> None:
        """Write one applied :class:`ctxsim.episode.Step` (``action``, ``before``,
        ``after``, ``reward``, ``done``) as a transition; ``observe`` gives each
        state's observation, ``outcome`` is the episode's when the step ended it."""
        self.write_transition(
            episode=episode,
            step=index,
            scenario=scenario,
            seed=seed,
            state_before=step.before,
            observation_before=observe(step.before),
            action=step.action,
            reward=step.reward,
            state_after=step.after,
            observation_after=observe(step.after),
            terminated=step.done,
            truncated=False,
            outcome=outcome,
        )

    def close(self) -> None:
        if not self._fh.closed:
            self._fh.close()

    def __enter__(self) -> "TransitionWriter":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __getstate__(self):
        raise TypeError("a TransitionWriter holds an open file and cannot be pickled")


class PendingAppend:
    """The marker ``.<log name>.pending`` of one run appending to ``log``: JSON with
    the run's process id, the log's size before the run, the run's first episode
    number and a digest of ``command`` (what the run evaluates: the same command
    writes the same records). :meth:`resume` before the run's writer opens the log,
    :meth:`start` once it has, :meth:`finish` when the run ends."""

    def __init__(self, log: str | Path, command: str):
        self.log = Path(log)
        self.path = self.log.with_name(f".{self.log.name}.pending")
        self.command = hashlib.sha256(command.encode("utf-8")).hexdigest()[:16]
        self.size: int | None = None  # the log's size before the first, killed attempt (resumed runs)

    def resume(self) -> tuple[int | None, set[tuple[str, int]]]:
        """(first episode number, (run_id, episode) of the complete episodes kept) of
        a killed run of the same command, whose incomplete tail is cut off here;
        (None, empty) when there is none. LogFormatError when another process is
        appending now, or a killed run of another command left its records."""
        try:
            marker = loads_json(self.path.read_bytes())
            pid, size, first, command = (marker[k] for k in ("pid", "size", "first_episode", "command"))
        except FileNotFoundError:
            return None, set()
        except (OSError, ValueError, KeyError, TypeError):
            raise LogFormatError(f"the marker {self.path.name} of an unfinished run is unreadable; remove it to "
                                 "append anyway", source=self.log) from None
        if pid != os.getpid() and _alive(pid):
            raise LogFormatError(f"process {pid} is appending to this log; wait for it or pick another log", source=self.log)
        if command != self.command:
            raise LogFormatError("holds the partial records of a run that was killed before it finished, with other "
                                 "policies, scenarios, seeds or settings: rerun that command to resume it, or log to "
                                 "another file", source=self.log)
        recognise(self.log)
        data = self.log.read_bytes() if self.log.exists() else b""
        if len(data) < size:
            raise LogFormatError(f"is shorter ({len(data)} bytes) than before the unfinished run ({size} bytes); "
                                 f"remove {self.path.name} to append anyway", source=self.log)
        kept, end, offset = set(), size, size
        for line in data[size:].split(b"\n")[:-1]:  # whole lines; a torn last one is cut with the rest
            offset += len(line) + 1
            record = _parse(line)
            if record is None:
                break
            if record.get("terminated") is True:
                kept.add((record.get("run_id"), record.get("episode")))
                end = offset
        if end < len(data):
            os.truncate(self.log, end)
        logger.warning("%s: resuming a run that was killed: %d complete episode(s) kept, %d byte(s) of an "
                       "incomplete one cut", self.log, len(kept), len(data) - end)
        self.size = size
        return first, kept

    def start(self, size: int, first_episode: int) -> None:
        """Mark the run as appending from ``size`` bytes (kept from a resumed run's
        marker) with episodes numbered from ``first_episode``."""
        self.size = size if self.size is None else self.size
        atomic_write_text(self.path, json.dumps({"pid": os.getpid(), "size": self.size, "first_episode": first_episode,
                                                 "command": self.command}))

    def finish(self) -> None:
        self.path.unlink(missing_ok=True)


def _alive(pid: object) -> bool:
    return isinstance(pid, int) and not isinstance(pid, bool) and pid > 0 and process_alive(pid)


def _last_line(fh) -> tuple[int, bytes]:
    """(offset, bytes) of the last line of an open binary file, its newline included."""
    end = fh.seek(0, 2)
    tail, pos = b"", end
    while pos > 0 and tail[:-1].count(b"\n") == 0:
        size = min(65536, pos)
        pos -= size
        fh.seek(pos)
        tail = fh.read(size) + tail
    start = tail.rfind(b"\n", 0, len(tail) - 1) + 1
    return pos + start, tail[start:]


def recognise(path: Path) -> None:
    """LogFormatError unless ``path`` is missing, empty, or starts with a whole
    transition record of this schema: a file that is not a log is never modified."""
    try:
        with open(path, "rb") as fh:
            first = fh.readline(1 << 24)
    except FileNotFoundError:
        return
    except OSError as exc:
        raise LogFormatError(f"cannot read the log ({exc.strerror or exc})", source=path) from None
    if not first:
        return
    record = _parse_line(first.rstrip(b"\n"), path, "line 1") if first.endswith(b"\n") else None
    if record is None or any(k not in record for k in REQUIRED_KEYS) or record["schema_version"] != SCHEMA_VERSION:
        raise LogFormatError(f"not a ctxsim transition log: its first line is not a transition record (schema "
                             f"{SCHEMA_VERSION}, ending in a newline); refusing to modify it", source=path)


def _cut_torn_tail(path: Path) -> None:
    """Remove a torn last line from ``path``: one without a final newline (a write cut
    short by a crash), or one that is not a JSON object."""
    if not path.exists():
        return
    with open(path, "rb+") as fh:
        offset, line = _last_line(fh)
        if not line or (line.endswith(b"\n") and _parse_line(line[:-1], path, "the last line") is not None):
            return
        logger.warning("%s: cutting off a torn last line (%d bytes) before appending", path, len(line))
        fh.truncate(offset)


def _next_episode(path: Path) -> int:
    """One more than the episode number of the log's last record (0 for a missing or empty log)."""
    if not path.exists():
        return 0
    with open(path, "rb") as fh:
        _, line = _last_line(fh)
    if not line:
        return 0
    record = _parse_line(line.rstrip(b"\n"), path, "the last line")
    episode = record.get("episode") if record is not None else None
    if isinstance(episode, bool) or not isinstance(episode, int):
        raise LogFormatError("the last line is not a transition record; refusing to append", source=path)
    return episode + 1


def read_transitions(path: str | Path) -> list[dict[str, Any]]:
    """Every record of a JSONL transition log, in order.

    A torn last line (no final newline, or not JSON) is skipped with one logged
    warning. A line in the middle that is not a JSON object, or a record missing a
    required key or with another schema version, raises LogFormatError naming the
    file and the line number.
    """
    path = Path(path)
    check_input(path, "transition log", LogFormatError)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise LogFormatError(f"cannot read file ({exc.strerror or exc})", source=path) from None
    lines = data.split(b"\n")
    torn_tail = lines.pop()  # b"" when the file ends with a newline
    records: list[dict[str, Any]] = []
    for number, line in enumerate(lines, start=1):
        record = _parse_line(line, path, f"line {number}")
        if record is None:
            if number == len(lines) and not torn_tail:
                logger.warning("%s: line %d is torn (not JSON); skipped", path, number)
                break
            raise LogFormatError(f"line {number} is not a JSON object", source=path)
        _check(record, path, number)
        records.append(record)
    if torn_tail:
        logger.warning("%s: line %d is torn (no final newline); skipped", path, len(lines) + 1)
    return records


def _parse(line: bytes) -> dict[str, Any] | None:
    """The JSON object of one line; None when the line is not one (torn or foreign).
    A key written twice raises DuplicateKeyError: the line is whole but ambiguous."""
    try:
        record = loads_json(line.decode("utf-8"))
    except DuplicateKeyError:
        raise
    except (UnicodeDecodeError, ValueError, RecursionError):  # RecursionError: nesting too deep
        return None
    return record if isinstance(record, dict) else None


def _parse_line(line: bytes, path: Path, where: str) -> dict[str, Any] | None:
    """:func:`_parse`, a key written twice reported as LogFormatError naming the line
    (``where``: "line 7", "the last line")."""
    try:
        return _parse(line)
    except DuplicateKeyError as exc:
        raise LogFormatError(f"{where}: {exc}", source=path) from None


def _check(record: dict[str, Any], path: Path, number: int) -> None:
    missing = [k for k in REQUIRED_KEYS if k not in record]
    if missing:
        raise LogFormatError(f"line {number}: record misses the keys {missing}", source=path)
    if record["schema_version"] != SCHEMA_VERSION:
        raise LogFormatError(
            f"line {number}: schema_version {record['schema_version']!r}, this reader knows {SCHEMA_VERSION}", source=path
        )
