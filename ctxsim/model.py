"""The context model: units, the immutable state they form, tool envelopes and facts.

Everything here is frozen. Operations return new objects; the original log of a
scenario is never mutated (design 002's canonical log). A state's token total is the
token count of what a model would receive: every unit's content plus the chat
format's per-message framing, plus the reply priming (see :mod:`ctxsim.tokens`).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field, replace
from functools import partial
from math import isfinite
from types import MappingProxyType
from typing import Any, Callable, Generic, Hashable, Iterable, Mapping, TypeVar

from .errors import ContextError, describe_value, plain_numbers, refuse_first
from .tokens import DEFAULT_FORMAT, MESSAGE_OVERHEAD, REPLY_PRIMING, count_tokens, message_overhead

UNIT_TYPES = ("message", "code", "plan_ref", "log", "tool_result", "summary", "placeholder", "other")
ROLES = ("system", "user", "assistant", "tool")
OUTCOMES = ("success", "failure", "partial")
DURABILITIES = ("ephemeral", "anchoring", "replayable", "non_replayable")
PRIORITIES = (1, 2, 3)
#: kinds of planted ground truth: facts and rules (the original two) and the files and
#: the task state a session leaves behind; each kind is the answer of one probe kind
#: (:data:`ctxsim.probes.PROBE_KIND_OF`)
FACT_KINDS = ("fact", "rule", "artifact", "continuation")
#: the kinds a unit states in its own words (facts and user rules), as against what the
#: session left behind (artifact, continuation): what a kept P1 unit must still carry
#: (:func:`ctxsim.metrics.p1_preserved`) and what "facts retained" counts
STATED_KINDS = ("fact", "rule")
#: design 002's sensitivity levels, least to most sensitive
SENSITIVITIES = ("public", "internal", "confidential", "restricted")
DEFAULT_MIN_LIMIT = 3500
#: the largest limit, and the largest generated context, ctxsim accepts (tokens): the
#: largest context windows on offer are about this size
MAX_TOKENS = 10_000_000
#: the most distinct contexts (seeds) one scenario may give an environment
MAX_CONTEXTS = 100_000
DEFAULT_WARNING_THRESHOLD = 0.8


_T = TypeVar("_T")


class computed_once(Generic[_T]):
    """``functools.cached_property`` without its lock (Python 3.11's takes one lock,
    shared by every instance, on each first read; a cold context reads dozens): the
    value is computed on the first read and stored in the instance's ``__dict__`` (a
    frozen dataclass allows it), where every later read finds it. For pure functions
    of immutable objects: two threads reading first compute the same value."""

    def __init__(self, fn: Callable[[Any], _T]) -> None:
        self.fn, self.name, self.__doc__ = fn, fn.__name__, fn.__doc__

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, obj: Any, owner: type | None = None) -> _T:
        if obj is None:
            return self  # type: ignore[return-value]
        value = obj.__dict__[self.name] = self.fn(obj)
        return value


class Immutable:
    """A frozen value: ``copy.copy`` and ``copy.deepcopy`` give the object itself.

    Every class of this module is frozen, and so is what it holds; its memo fields
    (:class:`computed_once`, :meth:`ContextState.derived`) are pure functions of it. A
    copy of a mutable holder (a stream session copied for look-ahead) therefore shares
    its units and states instead of rebuilding them, memos included."""

    __slots__ = ()

    def __copy__(self):
        return self

    def __deepcopy__(self, memo):
        return self


def _check_choice(obj: str, name: str, value: Any, choices: Iterable[Any]) -> None:
    choices = tuple(choices)
    if value not in choices:
        raise ContextError(f"{obj}.{name} must be one of {list(choices)}, got {describe_value(value)}", key=name)


def content_hash(text: str) -> str:
    """Short, stable hash of a text (sha256, 16 hex digits)."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


@dataclass(frozen=True, repr=False)
class ToolEnvelope(Immutable):
    """Structured envelope of a tool result (design 002).

    ``arguments`` is canonical JSON (sorted keys) so that identical calls compare
    equal; ``determinism_hash`` is the hash of the tool's source at call time
    (for ``replayable`` results); ``target`` is the resource the call touched
    (a file path, a URL), when there is one.
    """

    tool_name: str
    call_id: str
    arguments: str = "{}"
    outcome: str = "success"
    key_fields: tuple[tuple[str, str], ...] = ()
    durability: str = "anchoring"
    determinism_hash: str | None = None
    target: str | None = None
    error_message: str | None = None

    def __post_init__(self) -> None:
        if not self.tool_name:
            raise ContextError("ToolEnvelope.tool_name must not be empty", key="tool_name")
        _check_choice("ToolEnvelope", "outcome", self.outcome, OUTCOMES)
        _check_choice("ToolEnvelope", "durability", self.durability, DURABILITIES)

    def __repr__(self) -> str:
        # the dataclass's own repr (every field, in order), without its recursion guard:
        # a unit's fingerprint reads it
        return (
            f"{type(self).__qualname__}(tool_name={self.tool_name!r}, call_id={self.call_id!r}, "
            f"arguments={self.arguments!r}, outcome={self.outcome!r}, key_fields={self.key_fields!r}, "
            f"durability={self.durability!r}, determinism_hash={self.determinism_hash!r}, target={self.target!r}, "
            f"error_message={self.error_message!r})"
        )

    @staticmethod
    def canonical_arguments(arguments: Mapping[str, Any]) -> str:
        return json.dumps(dict(arguments), sort_keys=True, separators=(",", ":"))

    @property
    def call_key(self) -> tuple[str, str]:
        """Tool name and canonical arguments: equal for repeated identical calls."""
        return (self.tool_name, self.arguments)

    def placeholder(self) -> str:
        """Minimal text that stands for the cleared result, keeping its key fields."""
        lines = [f"[{self.tool_name}: {self.outcome}]"]
        if self.key_fields:
            lines.append("Key data: " + json.dumps(dict(self.key_fields), sort_keys=True))
        if self.error_message:
            lines.append(f"Error: {self.error_message}")
        return "\n".join(lines)


@dataclass(frozen=True)
class Fact(Immutable):
    """A planted item of ground truth: its exact value and the unit where it first occurs.

    ``kind``: ``fact`` (a recall probe's answer), ``rule`` (a user rule: decision),
    ``artifact`` (a written file's path or a distinctive line of its latest version)
    or ``continuation`` (the task, the open item / next step). ``text`` is the
    sentence that states it.
    """

    id: str
    value: str
    unit_id: str
    priority: int = 2
    kind: str = "fact"
    text: str = ""

    def __post_init__(self) -> None:
        if not self.value:
            raise ContextError(f"Fact {self.id!r} has an empty value", key="value")
        _check_choice("Fact", "kind", self.kind, FACT_KINDS)
        _check_choice("Fact", "priority", self.priority, PRIORITIES)


@dataclass(frozen=True)
class ContextUnit(Immutable):
    """One item of context: a message, a code block, a log, a tool result, ...

    ``priority`` is design 001's tag (1 = must keep). ``pinned`` units (design 000)
    survive every compaction. ``token_count`` is computed from ``content`` when not
    given, plus ``attachment_tokens``: what the unit carries beside its text (a chat
    message's images, :mod:`ctxsim.images`), which a unit with new content no longer
    carries (:meth:`with_content`). ``source_ids`` lists the original units a synthetic
    unit (summary, placeholder, pointer) stands for; ``summary_depth`` counts how many
    summaries deep its content is (a summary of a summary has depth 2).
    """

    id: str
    type: str
    content: str
    role: str = "user"
    turn: int = 0
    timestamp: float = 0.0
    priority: int = 2
    pinned: bool = False
    token_count: int = -1
    tool: ToolEnvelope | None = None
    fact_ids: tuple[str, ...] = ()
    source_ids: tuple[str, ...] = ()
    summary_depth: int = 0
    meta: tuple[tuple[str, str], ...] = ()
    attachment_tokens: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.id, str) or not self.id:
            raise ContextError(f"ContextUnit.id must be a non-empty string, got {describe_value(self.id)}", key="id")
        if not isinstance(self.content, str) or not self.content.strip():
            raise ContextError(f"ContextUnit {self.id!r}: content must not be empty", key="content")
        _check_choice(f"ContextUnit {self.id!r}", "type", self.type, UNIT_TYPES)
        _check_choice(f"ContextUnit {self.id!r}", "role", self.role, ROLES)
        if isinstance(self.priority, bool) or self.priority not in PRIORITIES:
            raise ContextError(
                f"ContextUnit {self.id!r}: priority must be 1, 2 or 3, got {describe_value(self.priority)}",
                key="priority",
            )
        if type(self.attachment_tokens) is not int or self.attachment_tokens < 0:
            raise ContextError(f"ContextUnit {self.id!r}: attachment_tokens must be an integer >= 0, got "
                               f"{describe_value(self.attachment_tokens)}", key="attachment_tokens")
        if not (type(self.pinned) is bool and type(self.turn) is int and type(self.token_count) is int
                and type(self.summary_depth) is int and self.summary_depth >= 0
                and (type(self.timestamp) is float or type(self.timestamp) is int) and isfinite(self.timestamp)
                and (self.tool is None or isinstance(self.tool, ToolEnvelope))
                and type(self.meta) is tuple and type(self.fact_ids) is tuple and type(self.source_ids) is tuple):
            self._check_field_types()  # one test above for the usual unit; the field by field check only when it fails
        if self.token_count < 0:
            object.__setattr__(self, "token_count", count_tokens(self.content) + self.attachment_tokens)

    def _check_field_types(self) -> None:
        """The field types, when the quick test in ``__post_init__`` fails: numpy's numbers
        are taken as plain ones; otherwise ContextError naming the first field of a type
        no ContextUnit holds (a ``pinned`` of ``"false"`` would read as pinned, a
        ``token_count`` of text fails every sum later)."""
        plain_numbers(self, ("turn", "token_count", "summary_depth"), ("timestamp",))
        obj = f"ContextUnit {self.id!r}"
        checks = (
            ("pinned", type(self.pinned) is bool, "True or False"),
            ("turn", type(self.turn) is int, "a whole number"),
            ("token_count", type(self.token_count) is int, "a whole number (negative: counted from the content)"),
            ("summary_depth", type(self.summary_depth) is int and self.summary_depth >= 0, "a whole number >= 0"),
            ("timestamp", type(self.timestamp) in (float, int) and isfinite(self.timestamp), "a finite number"),
            ("tool", self.tool is None or isinstance(self.tool, ToolEnvelope), "a ToolEnvelope or None"),
            ("meta", type(self.meta) is tuple, "a tuple of (key, value) pairs"),
            ("fact_ids", type(self.fact_ids) is tuple, "a tuple of ids"),
            ("source_ids", type(self.source_ids) is tuple, "a tuple of ids"),
        )
        refuse_first(obj, checks, partial(getattr, self))

    def with_content(self, content: str, **changes: Any) -> "ContextUnit":
        """A copy with new content (token count recomputed) and other changes; its
        attachments are gone unless ``changes`` gives ``attachment_tokens``."""
        return replace(self, content=content, token_count=-1, **{"attachment_tokens": 0, **changes})

    @property
    def meta_dict(self) -> dict[str, str]:
        return dict(self.meta)

    @computed_once
    def fingerprint(self) -> str:
        """Stable hash of every field (cached: units are immutable): of their ``str``
        forms joined by NUL characters (one f-string: ``format(x, "")`` is ``str(x)``)."""
        return content_hash(
            f"{self.id}\x00{self.type}\x00{self.role}\x00{self.turn}\x00{self.timestamp}\x00{self.priority}\x00"
            f"{self.pinned}\x00{self.tool}\x00{self.fact_ids}\x00{self.source_ids}\x00{self.summary_depth}\x00"
            f"{self.meta}\x00{self.content}" + (f"\x00{self.attachment_tokens}" if self.attachment_tokens else "")
        )


@dataclass(frozen=True)
class Artifact(Immutable):
    """Content moved out of the prompt (design 002's externalization); ``sensitivity``
    (one of :data:`SENSITIVITIES`) gates its automatic rehydration."""

    id: str
    content: str
    source_ids: tuple[str, ...]
    description: str = ""
    sensitivity: str = "internal"

    def __post_init__(self) -> None:
        _check_choice("Artifact", "sensitivity", self.sensitivity, SENSITIVITIES)


@dataclass(frozen=True)
class DroppedSpan(Immutable):
    """Index entry for dropped content (design 002's dropped-span index)."""

    source_ids: tuple[str, ...]
    keywords: tuple[str, ...]
    summary: str
    strategy: str


@dataclass(frozen=True)
class ContextState(Immutable):
    """An ordered, immutable context and its limits.

    ``limit`` and ``min_limit`` are tokens; ``warning_threshold`` is a share of the
    limit. ``facts`` is the ground truth planted by the generator (id -> Fact).
    ``history`` lists the strategy ids applied since the original state;
    ``artifacts`` and ``dropped`` hold what externalization and drops removed.
    """

    units: tuple[ContextUnit, ...]
    limit: int
    min_limit: int = DEFAULT_MIN_LIMIT
    warning_threshold: float = DEFAULT_WARNING_THRESHOLD
    priority_areas: tuple[str, ...] = ("To Do List",)
    task: str = ""
    fact_table: tuple[Fact, ...] = ()
    artifacts: tuple[Artifact, ...] = ()
    dropped: tuple[DroppedSpan, ...] = ()
    history: tuple[str, ...] = ()
    scenario: str = ""
    seed: int | None = None
    message_format: str = DEFAULT_FORMAT
    # derived, filled in __post_init__ (and the unit and fact tables below)
    total_tokens: int = field(init=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.units, tuple):
            if isinstance(self.units, (str, bytes, Mapping)) or not isinstance(self.units, Iterable):
                raise ContextError(f"ContextState.units must be a sequence of ContextUnits, got {describe_value(self.units)}",
                                   key="units")
            object.__setattr__(self, "units", tuple(self.units))
        if not (type(self.task) is str and type(self.scenario) is str and (self.seed is None or type(self.seed) is int)
                and type(self.fact_table) is tuple and type(self.artifacts) is tuple and type(self.dropped) is tuple
                and type(self.history) is tuple and type(self.priority_areas) is tuple
                and type(self.warning_threshold) in (float, int)):
            self._check_field_types()
        for name in ("limit", "min_limit"):
            value = getattr(self, name)
            if type(value) is not int:  # numpy's integers are taken as the plain one
                plain_numbers(self, (name,))
                value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ContextError(f"ContextState.{name} must be a positive integer, got {describe_value(value)}", key=name)
        if self.limit < self.min_limit:
            raise ContextError(
                f"ContextState.limit {self.limit} is under the min_limit floor {self.min_limit}", key="limit"
            )
        if not 0 < self.warning_threshold <= 1:
            raise ContextError(
                f"ContextState.warning_threshold must be in (0, 1], got {describe_value(self.warning_threshold)}",
                key="warning_threshold",
            )
        if self.message_format not in MESSAGE_OVERHEAD:
            raise ContextError(f"unknown message_format {self.message_format!r}", key="message_format")
        index: dict[str, int] = {}
        for i, unit in enumerate(self.units):
            if not isinstance(unit, ContextUnit):
                raise ContextError(f"units[{i}] is not a ContextUnit: {describe_value(unit)}", key="units")
            if unit.id in index:
                raise ContextError(f"duplicate unit id {unit.id!r}", key="units")
            index[unit.id] = i
        overhead = MESSAGE_OVERHEAD[self.message_format]
        total = sum(u.token_count for u in self.units) + overhead * len(self.units)
        total += REPLY_PRIMING[self.message_format] if self.units else 0
        object.__setattr__(self, "total_tokens", total)
        self.__dict__["_index"] = index  # what _index would build: it was built to check the ids

    def _check_field_types(self) -> None:
        """The field types, when the quick test in ``__post_init__`` fails: a numpy seed
        or threshold is taken as the plain number; otherwise ContextError naming the
        first field of a type no ContextState holds."""
        plain_numbers(self, ("seed",), ("warning_threshold",))
        checks = (
            ("task", type(self.task) is str, "text"),
            ("scenario", type(self.scenario) is str, "text"),
            ("seed", self.seed is None or type(self.seed) is int, "a whole number or None"),
            ("warning_threshold", type(self.warning_threshold) in (float, int), "a number in (0, 1]"),
            *((name, type(getattr(self, name)) is tuple, "a tuple")
              for name in ("fact_table", "artifacts", "dropped", "history", "priority_areas")),
        )
        refuse_first("ContextState", checks, partial(getattr, self))

    # ---- reading -------------------------------------------------------
    @computed_once
    def _index(self) -> dict[str, int]:
        """Unit id -> position (``__post_init__`` fills it as it checks the ids; a state
        read from a pickle builds it when first asked: see :meth:`__getstate__`)."""
        return {u.id: i for i, u in enumerate(self.units)}

    @computed_once
    def _facts(self) -> dict[str, Fact]:
        """Fact id -> fact, built when first asked."""
        return {f.id: f for f in self.fact_table}

    @property
    def facts(self) -> Mapping[str, Fact]:
        """The planted facts and rules (id -> Fact), read-only."""
        return MappingProxyType(self._facts)

    def unit(self, unit_id: str) -> ContextUnit:
        return self.units[self._index[unit_id]]

    def __contains__(self, unit_id: object) -> bool:
        return unit_id in self._index

    def position(self, unit_id: str) -> int:
        return self._index[unit_id]

    @property
    def unit_ids(self) -> tuple[str, ...]:
        return tuple(u.id for u in self.units)

    def unit_cost(self, unit: ContextUnit) -> int:
        """Tokens a unit adds to the request: content plus message framing."""
        return unit.token_count + message_overhead(self.message_format)

    def tokens_of(self, units: Iterable[ContextUnit]) -> int:
        """Request tokens of the given units alone (no reply priming)."""
        return sum(self.unit_cost(u) for u in units)

    @property
    def usage(self) -> float:
        """total_tokens / limit."""
        return self.total_tokens / self.limit

    @property
    def warning_tokens(self) -> int:
        return int(self.limit * self.warning_threshold)

    def fits(self, target: int | None = None) -> bool:
        return self.total_tokens <= (self.limit if target is None else target)

    def tokens_by(self, attribute: str) -> dict[Any, int]:
        """Content+framing tokens grouped by a unit attribute (type, priority, role)."""
        out: dict[Any, int] = {}
        for u in self.units:
            key = getattr(u, attribute)
            out[key] = out.get(key, 0) + self.unit_cost(u)
        return out

    @property
    def tokens_by_type(self) -> dict[str, int]:
        return self.tokens_by("type")

    @property
    def tokens_by_priority(self) -> dict[int, int]:
        return self.tokens_by("priority")

    @property
    def tokens_by_role(self) -> dict[str, int]:
        return self.tokens_by("role")

    def render_messages(self) -> list[dict[str, str]]:
        """The chat messages a model would receive, in order."""
        return [{"role": u.role, "content": u.content} for u in self.units]

    def render(self) -> str:
        """The text a model would receive: one ``role: content`` block per unit."""
        return "\n\n".join(f"{u.role}: {u.content}" for u in self.units)

    @computed_once
    def fingerprint(self) -> str:
        """Stable identity of the units, limits, artifacts, history and planted ground truth (cached)."""
        parts = [str(self.limit), str(self.min_limit), str(self.warning_threshold), self.message_format,
                 self.task, "|".join(self.history), "|".join(a.id for a in self.artifacts), str(len(self.dropped)),
                 "|".join(f"{f.id}={f.kind}:{f.value}@{f.unit_id}" for f in self.fact_table)]
        parts.extend(u.fingerprint for u in self.units)
        return content_hash("\n".join(parts))

    def derived(self, key: Hashable, compute: Callable[[], _T]) -> _T:
        """``compute()`` once per state object and ``key``: for values that depend on the
        state alone and on what ``key`` names (a strategy's selection, an observation),
        which several readers of one state need. Held by the instance: never compared,
        pickled or carried over by ``dataclasses.replace``."""
        memo = self.__dict__.get("_derived")
        if memo is None:
            memo = self.__dict__["_derived"] = {}
        if key in memo:
            return memo[key]
        value = memo[key] = compute()
        return value

    def __getstate__(self) -> dict[str, Any]:
        """The fields and the fingerprint; not the memo of :meth:`derived` nor the unit and
        fact tables, which a state read back builds when first asked (a context pool holds
        175,000 states, most of which are never asked: the tables were 9 % of its file)."""
        state = dict(self.__dict__)
        for name in ("_derived", "_index", "_facts"):
            state.pop(name, None)
        return state

    def read_artifact(self, artifact_id: str) -> str:
        """Original content of an externalized span (design 002's read_artifact)."""
        for art in self.artifacts:
            if art.id == artifact_id:
                return art.content
        raise ContextError(f"unknown artifact {artifact_id!r}", key="artifact_id")

    def artifacts_since(self, before: ContextState) -> tuple[Artifact, ...]:
        """The artifacts this state holds that ``before`` (the state a break started
        from) did not: what the break moved out of the prompt."""
        known = {art.id for art in before.artifacts}
        return tuple(art for art in self.artifacts if art.id not in known)

    # ---- deriving ------------------------------------------------------
    def with_units(self, units: Iterable[ContextUnit], *, applied: str | None = None, **changes: Any) -> "ContextState":
        """A new state with other units (and optionally one more strategy in history)."""
        history = self.history + ((applied,) if applied else ())
        return replace(self, units=tuple(units), history=history, **changes)
