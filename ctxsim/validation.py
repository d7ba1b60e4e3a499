"""Shared loading and validation for every YAML file ctxsim reads.

Two helpers that every loader (context_config, model limits, scenarios, env specs,
experiments) uses, so that all of them fail the same way: one ctxsim error whose
single-line message names the file, the dotted key path and the offending value.

- :func:`load_yaml` reads a file as UTF-8 and parses it as ``yaml.safe_load`` does
  (libyaml's parser where PyYAML has it), refusing a key given twice.
- :func:`check_input` refuses, before anything is read, an input that is not a
  regular file or is larger than its kind's limit (:data:`INPUT_LIMITS`).
- :func:`bounded` (a pydantic ``BeforeValidator`` as :data:`Bounded`) refuses free-form
  data (``dict[str, Any]`` fields) whose YAML aliases expand to more than
  :data:`MAX_VALUES` values, before anything walks it.
- :func:`validate` runs a pydantic v2 model over parsed data and turns a
  ``ValidationError`` into the caller's error class.

Cross-field checks inside a model (``model_validator``) raise :class:`KeyedValueError`
to point the message at the nested key they concern instead of at the whole model.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, BeforeValidator, ValidationError

from .errors import CtxsimError, describe_value

ModelT = TypeVar("ModelT", bound=BaseModel)

#: pydantic error types reworded for people who write YAML, not Python
_TYPE_MESSAGES = {
    "missing": "required key is missing",
    "extra_forbidden": "unknown key",
    "model_type": "expected a mapping",
    "model_attributes_type": "expected a mapping",
    "dict_type": "expected a mapping",
    "tuple_type": "expected a list",
    "list_type": "expected a list",
    "invalid_key": "keys must be strings",
    "too_short": "needs at least {min_length} item(s)",
    "too_long": "allows at most {max_length} item(s)",
}


#: the largest seed: seeds go to numpy, which takes 0 .. 2**32 - 1
MAX_SEED = 2**32 - 1

_MB = 1024 * 1024
#: the largest input ctxsim reads, per kind of file, in bytes (checked on the file's
#: size before it is read or parsed; the README's Security section lists them)
INPUT_LIMITS = {
    "YAML file": 4 * _MB,  # context_config, models, scenarios, env specs, experiments, sweeps, tune files
    "transcript": 64 * _MB,  # chat JSONL; the request JSON files of ctxsim compact
    "transition log": 512 * _MB,  # JSONL read back by evaluate --from-log and export
    "results CSV": 512 * _MB,  # a sweep's results.csv or a baseline (sweep --baseline, report)
    "exported policy": 64 * _MB,  # policy.json and weights.npz
}
#: most values (mappings, lists and scalars, an alias counted at each use) that free-form
#: YAML data may expand to
MAX_VALUES = 1_000_000


class KeyedValueError(ValueError):
    """A failed cross-field check that names the key (relative to the model) and value.

    Raise it from a pydantic validator; :func:`validate` appends ``key`` to the
    model's own location, so the message says e.g. ``context_config.per_llm[1].limit``.
    """

    def __init__(self, key: str, value: Any, message: str):
        self.key, self.value = key, value
        super().__init__(message)


class DuplicateKeyError(ValueError):
    """A JSON object that holds the same key twice (``json.loads`` would keep the last)."""

    def __init__(self, key: str):
        self.key = key
        super().__init__(f"key {key!r} appears twice")


def _unique_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj: dict[str, Any] = {}
    for key, value in pairs:
        if key in obj:
            raise DuplicateKeyError(key)
        obj[key] = value
    return obj


def loads_json(text: str | bytes) -> Any:
    """``json.loads``, refusing an object with a key twice (DuplicateKeyError), as
    :func:`load_yaml` does for YAML."""
    return json.loads(text, object_pairs_hook=_unique_object)


#: PyYAML's safe loader with libyaml's parser where PyYAML was built with it (its wheels
#: are): the same values, parsed several times faster than by the pure-Python parser
_SafeLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _UniqueKeyLoader(_SafeLoader):
    """PyYAML's safe loader (:data:`_SafeLoader`) that refuses a mapping with the same
    key twice (safe_load keeps the last value and silently drops the first)."""

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # "<<: *anchor": its keys may be overridden
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                repeated = key in seen
            except TypeError:  # an unhashable key: the base loader reports it
                break
            if repeated:
                raise yaml.constructor.ConstructorError(
                    "while constructing a mapping", node.start_mark, f"key {key!r} appears twice", key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep)


def check_input(path: str | Path, kind: str, error_cls: type[CtxsimError]) -> None:
    """Raise ``error_cls`` naming ``path`` when it exists but is not a regular file
    (a FIFO or device would block or never end) or is larger than
    ``INPUT_LIMITS[kind]`` bytes; a missing file is left to the reader to report."""
    try:
        info = os.stat(path)
    except OSError:
        return
    if stat.S_ISDIR(info.st_mode):
        return  # the reader says what it expected instead
    if not stat.S_ISREG(info.st_mode):
        raise error_cls(f"not a regular file (a {kind} must be one)", source=str(path))
    limit = INPUT_LIMITS[kind]
    if info.st_size > limit:
        raise error_cls(f"{info.st_size:,} bytes is over the limit for a {kind} ({limit:,} bytes)", source=str(path))


def bounded(value: Any) -> Any:
    """``value`` itself, unless it expands to more than :data:`MAX_VALUES` values
    (KeyedValueError). YAML aliases make one list or mapping appear many times; the
    count visits each object once (memoized), so a bomb of 10**9 values is refused in
    time proportional to the file."""
    sizes: dict[int, int] = {}

    def size(item: Any) -> int:
        if not isinstance(item, (dict, list)):
            return 1
        known = sizes.get(id(item))
        if known is None:
            children = item.values() if isinstance(item, dict) else item
            sizes[id(item)] = -1  # a value that contains itself (a recursive alias)
            known = sizes[id(item)] = min(1 + sum(size(child) for child in children), MAX_VALUES + 1)
        elif known < 0:
            raise KeyedValueError("", "<recursive>", "a YAML alias refers to a value that contains it")
        return known

    try:
        total = size(value)
    except RecursionError:
        raise KeyedValueError("", "<deep>", "nested too deep") from None
    if total > MAX_VALUES:
        raise KeyedValueError("", type(value).__name__, f"its YAML aliases expand to more than {MAX_VALUES:,} values")
    return value


#: ``Annotated[dict[str, Any], Bounded]``: a free-form field that :func:`bounded` checks first
Bounded = BeforeValidator(bounded)


def load_yaml(path: str | Path, error_cls: type[CtxsimError]) -> Any:
    """Parse a UTF-8 YAML file as ``yaml.safe_load`` does, but refusing a key that
    appears twice in one mapping.

    Raises ``error_cls`` (one line, naming the file) when the file cannot be read, is
    not a regular file, is over the size limit (:func:`check_input`), is not UTF-8, or
    is not valid YAML (with line and column). An empty file yields None.
    """
    source = str(path)
    check_input(path, "YAML file", error_cls)
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise error_cls(f"cannot read file ({exc.strerror or exc})", source=source) from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise error_cls(f"not UTF-8 text (byte {raw[exc.start:exc.start + 1]!r} at offset {exc.start})", source=source) from None
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "unknown position"
        problem = exc.problem or exc.context or "syntax error"
        raise error_cls(f"invalid YAML at {where}: {_one_line(problem)}", source=source) from None
    except (yaml.YAMLError, ValueError, RecursionError) as exc:
        # ValueError: safe_load's timestamp constructor on dates like 2001-13-45
        raise error_cls(f"invalid YAML: {_one_line(str(exc)) or type(exc).__name__}", source=source) from None


def validate(
    model_cls: type[ModelT],
    data: Any,
    source: str | Path,
    error_cls: type[CtxsimError],
    key_prefix: str = "",
) -> ModelT:
    """``model_cls.model_validate(data)``, raising ``error_cls`` on the first error.

    ``key_prefix`` is prepended to every key path (for data nested in a larger file).
    The message is one line: the file, the dotted key path (list items as ``[i]``),
    what is wrong and the value; further errors are counted and their keys listed.
    """
    try:
        return model_cls.model_validate(data)
    except ValidationError as exc:
        raise _to_error(exc, source, error_cls, key_prefix) from None


def _to_error(exc: ValidationError, source: str | Path, error_cls: type[CtxsimError], key_prefix: str) -> CtxsimError:
    described = [_describe(err, key_prefix) for err in exc.errors()]
    key, message = described[0]
    others = sorted({k or "<top level>" for k, _ in described[1:]} - {key or "<top level>"})
    if len(described) > 1:
        message += f" (+{len(described) - 1} more error(s)" + (f" at {', '.join(others)})" if others else ")")
    return error_cls(message, source=str(source), key=key or None)


def _describe(err: dict, key_prefix: str) -> tuple[str, str]:
    """(dotted key path, 'what is wrong (got value)') for one pydantic error."""
    loc = list(err["loc"])
    value = err.get("input")
    ctx = err.get("ctx") or {}
    cause = ctx.get("error")
    if isinstance(cause, KeyedValueError):
        loc += cause.key.split(".") if cause.key else []
        value = cause.value
        text = str(cause)
    elif err["type"] in _TYPE_MESSAGES:
        text = _TYPE_MESSAGES[err["type"]].format(**ctx)
    else:
        text = err["msg"].removeprefix("Value error, ")
    if loc and loc[-1] == "[key]":  # pydantic's marker for a bad mapping key
        loc.pop()
        text = f"bad key name: {text}"
    key = join_key(*([key_prefix] if key_prefix else []), *loc)
    if err["type"] == "missing":
        return key, text
    return key, f"{_one_line(text)} (got {describe_value(value)})"


def join_key(*parts: object) -> str:
    """Dotted key path: ``join_key("a", "b", 0, "c") == "a.b[0].c"``.

    Integers become ``[i]``; an empty or unprintable key is quoted (``a['\\n']``) so
    the path stays on one line.
    """
    key = ""
    for part in parts:
        if isinstance(part, int) and not isinstance(part, bool):
            key += f"[{part}]"
        elif not isinstance(part, str) or part == "" or not part.isprintable():
            key += f"[{part!r}]"
        else:
            key += f".{part}" if key else part
    return key


def _one_line(text: str) -> str:
    return " ".join(text.split())
