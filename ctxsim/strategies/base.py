"""The strategy contract (design 003's pattern, in Python).

A strategy is a pure function of a :class:`~ctxsim.model.ContextState`: it has an
id, a display name, an aggressiveness ``rank`` (design 002's ladder: lower ranks are
applied first), a ``priority`` and a ``max_tokens`` (design 003's contract), typed
parameters with the seeds' defaults, and ``apply(state, ctx) -> StrategyResult``.
The input state is never touched.

Contract enforced here for every strategy:

* pinned units come out unchanged (a violation is a bug and raises);
* the new units a strategy writes (summaries, placeholders, handovers) hold at
  most ``max_tokens`` tokens of content when it states a bound (a bug otherwise);
* tokens never grow, except for recovery handovers: a non-recovery strategy whose
  output is larger than its input returns the input unchanged;
* the result lists which units were removed, compressed in place, or folded into a
  summary/pointer, the modeled latency (ms) and design 001's progress events.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from enum import IntEnum
from functools import partial
from typing import Any, ClassVar, Iterable, Protocol

from pydantic import BaseModel, ConfigDict, ValidationError

from ..errors import StrategyError, describe_value, plain_numbers, refuse_first
from ..latency import Cost, LatencyModel
from ..model import ContextState, ContextUnit
from ..relevance import get_embedder
from ..summarize import get_summarizer
from ..summarize.rules import holds_user_rule, may_state_rule
from ..tokens import count_tokens

TOKEN_LIMIT_EXCEEDED = "TOKEN_LIMIT_EXCEEDED"
BREAKER_FAILED = "BREAKER_FAILED"
RECOVERY_TRIGGERED = "RECOVERY_TRIGGERED"

#: design 002's ladder, least to most aggressive (the ``rank`` of a strategy)
RANK_PRUNE, RANK_EXTERNALIZE, RANK_COMPRESS, RANK_SUMMARIZE, RANK_CLEAR, RANK_SELECT, RANK_DROP, RANK_RECOVERY = range(8)


class StrategyPriority(IntEnum):
    """Design 003's priority levels: higher is more important and is tried first."""

    CRITICAL = 100
    HIGH = 80
    MEDIUM = 60
    LOW = 40
    OPTIONAL = 20


#: a strategy's default priority from its ladder rank: the more of the context it keeps, the higher
RANK_PRIORITY = {
    RANK_PRUNE: StrategyPriority.CRITICAL,
    RANK_EXTERNALIZE: StrategyPriority.HIGH,
    RANK_COMPRESS: StrategyPriority.HIGH,
    RANK_SUMMARIZE: StrategyPriority.MEDIUM,
    RANK_CLEAR: StrategyPriority.LOW,
    RANK_SELECT: StrategyPriority.LOW,
    RANK_DROP: StrategyPriority.OPTIONAL,
    RANK_RECOVERY: StrategyPriority.OPTIONAL,
}


class Params(BaseModel):
    """Base of every strategy's parameter model (frozen, unknown keys rejected)."""

    model_config = ConfigDict(frozen=True, extra="forbid")


@dataclass(frozen=True)
class ProgressEvent:
    """One progress message in design 001's phases (the sidebar's status line)."""

    phase: str
    message: str
    tokens: int
    limit: int
    code: str | None = None

    @property
    def progress(self) -> int:
        """Percent of the limit in use; -1 during recovery (design 001)."""
        return -1 if self.phase == "recovery" else min(100, round(self.tokens / self.limit * 100))


@dataclass(frozen=True)
class ContextBudget:
    """Design 003's budget: the most tokens the context may hold (``max_tokens``: a
    strategy's target never exceeds it), strategies that must run, and strategies
    never to run (exclusion takes precedence)."""

    max_tokens: int | None = None
    required: tuple[str, ...] = ()
    excluded: tuple[str, ...] = ()

    def is_required(self, strategy_id: str) -> bool:
        return strategy_id in self.required

    def is_excluded(self, strategy_id: str) -> bool:
        return strategy_id in self.excluded

    def should_execute(self, strategy_id: str) -> bool:
        return not self.is_excluded(strategy_id)


class StepMemo(Protocol):
    """Answers a composite strategy's steps: the same values as ``strategy.apply(state,
    ctx)`` and ``strategy.applicable(state, ctx)``, computed once per distinct input."""

    def apply_step(self, strategy: Strategy, state: ContextState, ctx: StrategyContext) -> StrategyResult: ...

    def step_applicable(self, strategy: Strategy, state: ContextState, ctx: StrategyContext) -> bool: ...


@dataclass
class StrategyContext:
    """What a strategy may use besides the state.

    ``target_tokens`` is the size to reach (default: the state's limit; never above
    the budget's ``max_tokens``); ``query`` is
    the text relevance is measured against (default: the state's task);
    ``skip_aggressive`` is design 002's turn flag after a rehydration (externalize and
    drop then do nothing). ``steps`` is what a composite strategy (``hybrid``, a
    fallback) applies its steps through: an episode passes its step memo, so a step
    reuses the result of the same action taken directly (and the other way round);
    None applies them directly.
    """

    embedder_id: str = "hashed-tfidf"
    summarizer_kind: str = "extractive"
    latency: LatencyModel = field(default_factory=LatencyModel)
    target_tokens: int | None = None
    query: str | None = None
    budget: ContextBudget | None = None
    skip_aggressive: bool = False
    summarizer_options: dict[str, Any] = field(default_factory=dict)
    steps: StepMemo | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        target = self.target_tokens
        if not ((target is None or (type(target) is int and target >= 0)) and (self.query is None or type(self.query) is str)
                and (self.budget is None or isinstance(self.budget, ContextBudget)) and type(self.skip_aggressive) is bool
                and type(self.embedder_id) is str and type(self.summarizer_kind) is str
                and isinstance(self.latency, LatencyModel) and isinstance(self.summarizer_options, dict)):
            self._check_field_types()

    def _check_field_types(self) -> None:
        """The field types, when the quick test in ``__post_init__`` fails: a numpy target
        is taken as the plain int; otherwise StrategyError naming the first field of a
        type no StrategyContext holds (a target of text failed inside each strategy, a
        skip_aggressive of "no" read as True)."""
        plain_numbers(self, ("target_tokens",))
        target = self.target_tokens
        checks = (
            ("target_tokens", target is None or (type(target) is int and target >= 0), "a whole number >= 0 or None"),
            ("query", self.query is None or type(self.query) is str, "text or None"),
            ("budget", self.budget is None or isinstance(self.budget, ContextBudget), "a ContextBudget or None"),
            ("skip_aggressive", type(self.skip_aggressive) is bool, "True or False"),
            ("embedder_id", type(self.embedder_id) is str, "an embedder id"),
            ("summarizer_kind", type(self.summarizer_kind) is str, "a summarizer kind"),
            ("latency", isinstance(self.latency, LatencyModel), "a LatencyModel"),
            ("summarizer_options", isinstance(self.summarizer_options, dict), "a dict"),
        )
        refuse_first("StrategyContext", checks, partial(getattr, self), StrategyError)

    def apply_step(self, strategy: Strategy, state: ContextState) -> StrategyResult:
        """``strategy.apply(state, self)``, answered by ``steps`` when there is one."""
        return strategy.apply(state, self) if self.steps is None else self.steps.apply_step(strategy, state, self)

    def step_applicable(self, strategy: Strategy, state: ContextState) -> bool:
        """``strategy.applicable(state, self)``, answered by ``steps`` when there is one."""
        if self.steps is None:
            return strategy.applicable(state, self)
        return self.steps.step_applicable(strategy, state, self)

    def target(self, state: ContextState) -> int:
        target = state.limit if self.target_tokens is None else self.target_tokens
        if self.budget is not None and self.budget.max_tokens is not None:
            target = min(target, self.budget.max_tokens)
        return target

    def query_for(self, state: ContextState) -> str:
        return self.query or state.task or "current task context"

    @property
    def embedder(self):
        return get_embedder(self.embedder_id)

    @property
    def summarizer(self):
        return get_summarizer(self.summarizer_kind, **self.summarizer_options)


@dataclass(frozen=True)
class Outcome:
    """What a strategy's ``run`` returns to the template in :meth:`Strategy.apply`."""

    state: ContextState
    cost: Cost = Cost()
    fallback: str | None = None
    note: str = ""


@dataclass(frozen=True)
class StrategyResult:
    """The result of one strategy application."""

    strategy: str
    state: ContextState
    tokens_before: int
    tokens_after: int
    removed: tuple[str, ...]
    compressed: tuple[str, ...]
    summarized: tuple[str, ...]
    cost: Cost
    latency_ms: float
    events: tuple[ProgressEvent, ...]
    fallback: str | None = None
    recovery: bool = False
    note: str = ""

    @property
    def changed(self) -> bool:
        return bool(self.removed or self.compressed or self.summarized) or self.tokens_after != self.tokens_before

    @property
    def tokens_reduced(self) -> int:
        return self.tokens_before - self.tokens_after


class Strategy:
    """Base class. Subclasses set the class attributes and implement :meth:`run`.

    Class attributes: ``id`` (public name), ``display_name``, ``rank`` (ladder
    order), ``priority`` (design 003's :class:`StrategyPriority` scale, 0-100: higher
    is tried first where strategies are ordered by importance; default from the
    rank, :data:`RANK_PRIORITY`), ``phase`` (design 001 progress phase), ``seed``
    (design document it comes from), ``keeps_p1`` (promise: every P1 unit
    survives, possibly compressed in place), ``recovery`` (a recovery mode),
    ``Params`` (a :class:`Params` model). The property :attr:`max_tokens` is seed
    003's per-strategy bound on what one application contributes.
    """

    id: ClassVar[str]
    display_name: ClassVar[str]
    rank: ClassVar[int]
    phase: ClassVar[str] = ""
    seed: ClassVar[str] = ""
    summary: ClassVar[str] = ""
    keeps_p1: ClassVar[bool] = False
    recovery: ClassVar[bool] = False
    priority: ClassVar[int]
    Params: ClassVar[type[Params]] = Params

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "priority" not in cls.__dict__ and hasattr(cls, "rank"):
            cls.priority = int(RANK_PRIORITY.get(cls.rank, StrategyPriority.MEDIUM))

    @property
    def max_tokens(self) -> int | None:
        """Most tokens of content the new units of one application hold (a summary,
        a placeholder, a handover), with these parameters; None when the strategy
        writes no new unit or sizes it by the content (e.g. to keep every user rule)."""
        return None

    def __init__(self, **params: Any):
        try:
            self.params = self.Params(**params)
        except ValidationError as exc:
            err = exc.errors()[0]
            key = ".".join(str(p) for p in err["loc"]) or "?"
            valid = ", ".join(self.Params.model_fields) or "none"
            if err["type"] == "extra_forbidden":
                raise StrategyError(
                    f"strategy '{self.id}' has no parameter '{key}'; valid parameters: {valid}"
                ) from None
            raise StrategyError(
                f"strategy '{self.id}' parameter '{key}': {err['msg']} (got {describe_value(err.get('input'))})"
            ) from None

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.params!r})"

    # ---- to implement ----------------------------------------------------
    def run(self, state: ContextState, ctx: StrategyContext) -> Outcome:  # pragma: no cover - abstract
        raise NotImplementedError

    def applicable(self, state: ContextState, ctx: StrategyContext | None = None) -> bool:
        """Cheap check: can this strategy change ``state`` at all? (action masks)"""
        return any(not u.pinned for u in state.units)

    # ---- template --------------------------------------------------------
    def apply(self, state: ContextState, ctx: StrategyContext | None = None) -> StrategyResult:
        ctx = ctx or StrategyContext()
        if ctx.budget is not None and ctx.budget.is_excluded(self.id):
            raise StrategyError(f"strategy '{self.id}' is excluded by the budget")
        started = time.perf_counter()
        out = self.run(state, ctx)
        wall_ms = (time.perf_counter() - started) * 1000
        new = out.state
        if not self.recovery and new.total_tokens > state.total_tokens:
            new, out = state, Outcome(state, out.cost, out.fallback, "output larger than input; unchanged")
        _check_pinned(self.id, state, new)
        _check_contribution(self, state, new)
        latency = round(wall_ms, 3) if ctx.latency.measured else ctx.latency.ms(out.cost)
        removed, compressed, summarized = _diff(state, new)
        return StrategyResult(
            strategy=self.id,
            state=new,
            tokens_before=state.total_tokens,
            tokens_after=new.total_tokens,
            removed=removed,
            compressed=compressed,
            summarized=summarized,
            cost=out.cost,
            latency_ms=latency,
            events=self._events(state, new, ctx, out),
            fallback=out.fallback,
            recovery=self.recovery,
            note=out.note,
        )

    def _events(self, before: ContextState, after: ContextState, ctx: StrategyContext, out: Outcome):
        target = ctx.target(before)
        events = []
        if before.total_tokens > target:
            events.append(
                ProgressEvent("detection", "Checking context length…", before.total_tokens, before.limit, TOKEN_LIMIT_EXCEEDED)
            )
        if self.recovery:
            events.append(
                ProgressEvent(
                    "recovery", "Overflow detected – starting fresh conversation", before.total_tokens, before.limit,
                    RECOVERY_TRIGGERED,
                )
            )
        events.append(
            ProgressEvent(
                self.phase or self.id,
                f"{self.display_name}… ({_k(before.total_tokens)} → {_k(after.total_tokens)} tokens)",
                after.total_tokens,
                before.limit,
            )
        )
        if out.fallback:
            events.append(ProgressEvent(self.phase or self.id, f"Fallback: {out.fallback}", after.total_tokens, before.limit))
        if self.recovery:
            events.append(ProgressEvent("handover", "Resumed from summary. Continuing task…", after.total_tokens, before.limit))
        if after.total_tokens <= target:
            events.append(
                ProgressEvent("success", f"Context reduced to {after.total_tokens:,} / {before.limit:,} tokens", after.total_tokens, before.limit)
            )
        return tuple(events)


def _k(tokens: int) -> str:
    return f"{tokens / 1000:.1f}k" if tokens >= 1000 else str(tokens)


def _diff(before: ContextState, after: ContextState) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    """Unit ids removed, compressed in place, and folded into a synthetic unit."""
    folded = {sid for u in after.units if u.id not in before for sid in u.source_ids}
    removed, summarized, compressed = [], [], []
    for u in before.units:
        if u.id not in after:
            (summarized if u.id in folded else removed).append(u.id)
        elif after.unit(u.id).token_count < u.token_count:
            compressed.append(u.id)
    return tuple(removed), tuple(compressed), tuple(summarized)


def _check_pinned(strategy_id: str, before: ContextState, after: ContextState) -> None:
    for u in before.units:
        if u.pinned and (u.id not in after or after.unit(u.id).content != u.content):
            raise StrategyError(f"strategy '{strategy_id}' broke the pinned unit {u.id!r} (bug)")


def _check_contribution(strategy: Strategy, before: ContextState, after: ContextState) -> None:
    bound = strategy.max_tokens
    if bound is None:
        return
    written = sum(count_tokens(u.content) for u in after.units if u.id not in before)
    if written > bound:
        raise StrategyError(f"strategy '{strategy.id}' wrote {written} tokens, over its max_tokens {bound} (bug)")


def unchanged(state: ContextState, note: str = "nothing to do") -> Outcome:
    """The outcome of a strategy that leaves the state as it is."""
    return Outcome(state, Cost(), None, note)


def is_protected(unit: ContextUnit, *, keep_p1: bool = False, keep_rules: bool = False) -> bool:
    """Pinned units are never touched; with ``keep_p1`` neither are P1 units, with
    ``keep_rules`` neither are units that state a user rule (removing one would lose
    the rule: design 004's compaction "preserves user rules")."""
    return unit.pinned or (keep_p1 and unit.priority == 1) or (keep_rules and holds_user_rule(unit))


def any_unprotected(units: Iterable[ContextUnit], *, keep_p1: bool = False) -> bool:
    """Whether one of ``units`` is not protected (:func:`is_protected` with ``keep_rules``):
    the units that cannot state a user rule (:func:`~ctxsim.summarize.rules.may_state_rule`)
    answer first, so rules are read only when none of them is free."""
    readable = []
    for unit in units:
        if unit.pinned or (keep_p1 and unit.priority == 1):
            continue
        if not may_state_rule(unit):
            return True
        readable.append(unit)
    return any(not holds_user_rule(unit) for unit in readable)
