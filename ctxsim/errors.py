"""One error hierarchy for ctxsim.

Every error the library raises on bad input is a :class:`CtxsimError`. Messages name
the file, the key and the offending value, so the CLI can print them as one line.
"""

from __future__ import annotations

import numbers
import reprlib
from pathlib import Path
from typing import Callable, Iterable


class CtxsimError(Exception):
    """Base class of every error ctxsim raises on purpose."""

    def __init__(self, message: str, *, source: str | Path | None = None, key: str | None = None):
        self.message = message  # without the "source: key" prefix
        self.source = str(source) if source is not None else None
        self.key = key
        where = []
        if self.source:
            where.append(self.source)
        if key:
            where.append(f"key '{key}'")
        prefix = ": ".join(where)
        super().__init__(f"{prefix}: {message}" if prefix else message)


class ContextError(CtxsimError):
    """A context unit or state was built with a bad value."""


class ConfigError(CtxsimError):
    """A configuration file (context_config, env spec, experiment) is invalid."""


class ScenarioError(CtxsimError):
    """A scenario file is invalid or names something unknown."""


class TranscriptError(CtxsimError):
    """A chat transcript could not be read."""


class StrategyError(CtxsimError):
    """An unknown strategy id or parameter, or a strategy that cannot run."""


class RecoveryError(CtxsimError):
    """Recovery mode 'error': the overflow could not be broken (BREAKER_FAILED)."""


class PolicyError(CtxsimError):
    """An unknown policy name or an unreadable policy directory."""


class PluginError(CtxsimError):
    """A ``ctxsim.plugins`` entry point failed to load (its module raised, or it
    registered an id that already exists)."""


class LogFormatError(CtxsimError):
    """A JSONL transition log has a record that does not follow the schema."""


class ContextWindowFull(CtxsimError):
    """An item cannot fit in a ContextWindow even after compaction."""

    def __init__(self, current: int, maximum: int, requested: int):
        self.current, self.maximum, self.requested = current, maximum, requested
        super().__init__(
            f"context window full: current={current} tokens, max={maximum} tokens, requested={requested} tokens"
        )


#: a repr that shows containers to a few levels and items only, so describing a huge
#: value (e.g. YAML aliases nested into 10**9 items) takes constant time
_SHORT_REPR = reprlib.Repr()
_SHORT_REPR.maxlevel = 3
_SHORT_REPR.maxdict = _SHORT_REPR.maxlist = _SHORT_REPR.maxtuple = _SHORT_REPR.maxset = _SHORT_REPR.maxfrozenset = 8
_SHORT_REPR.maxstring = _SHORT_REPR.maxother = 200


def describe_value(value: object, limit: int = 60) -> str:
    """A short repr of a user-supplied value for error messages (bounded in time)."""
    try:
        text = _SHORT_REPR.repr(value) if isinstance(value, (dict, list, tuple, set, frozenset)) else repr(value)
    except ValueError:  # an int with more digits than Python prints
        text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def plain_numbers(obj: object, integers: Iterable[str] = (), reals: Iterable[str] = ()) -> None:
    """Set the named fields of a frozen dataclass ``obj`` that hold a number of another
    type (numpy's, a Fraction) to the plain ``int`` or ``float`` (never a bool: True is
    not a count), so that the type checks after accept what a researcher's arrays give."""
    for names, plain, kind in ((integers, int, numbers.Integral), (reals, float, numbers.Real)):
        for name in names:
            value = getattr(obj, name)
            if type(value) is not plain and not isinstance(value, bool) and isinstance(value, kind):
                object.__setattr__(obj, name, plain(value))


def refuse_first(what: str, checks: Iterable[tuple[str, bool, str]], value_of: Callable[[str], object],
                 error: type[CtxsimError] = ContextError) -> None:
    """Raise ``error`` for the first ``(field, ok, expected)`` of ``checks`` that is not
    ok: "``what``.field must be ``expected``, got <value>", keyed by the field (the
    field types of the model's objects, checked once together and named only on failure)."""
    for name, ok, expected in checks:
        if not ok:
            raise error(f"{what}.{name} must be {expected}, got {describe_value(value_of(name))}", key=name)
