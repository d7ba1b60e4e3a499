"""The runtime context window (design 000's ``IContextWindow``) that strategies and
learned policies plug into.

Token accounting: ``current_tokens`` is the request size of the items as chat
messages — every item's content tokens (exact cl100k) plus the chat format's
per-message framing, plus the reply priming when there is any item. It equals
``to_state().total_tokens`` (:class:`~ctxsim.model.ContextState`).

Compaction runs a ctxsim strategy, a chain of them, or a learned policy on the
mapped state (:mod:`ctxsim.window.items`) and maps the result back. Precedence
when no strategy is named: ``policy`` > ``chain`` > ``default_strategy``.

Concurrency: one re-entrant lock guards the state and every public method is
atomic. Event callbacks run after the lock is released. Compaction is optimistic
(design 002's ``CompactionTransaction``): :meth:`ContextWindow.plan_compaction` runs
the strategy on a snapshot without holding the lock and
:meth:`ContextWindow.commit` installs it only if the window's ``version`` has not
moved. ``add`` and ``build`` compact inside their own atomic section.
"""

from __future__ import annotations

import itertools
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from ..config import ContextConfig, load_config, load_models, usage_tier
from ..errors import ConfigError, ContextError, ContextWindowFull, StrategyError, describe_value
from ..model import DEFAULT_MIN_LIMIT, Artifact, ContextState
from ..strategies import Strategy, strategy_from_config
from ..tokens import MESSAGE_OVERHEAD, REPLY_PRIMING, message_overhead
from .build import BuildOptions, BuiltContext, compose, request_tokens
from .compaction import BreakingPolicy, CompactionProposal, StrategySpec, plan, resolve, run_chain, run_policy
from .events import Built, Cleared, Compacted, Event, EventHub, ItemAdded, ItemRemoved
from .items import ContextItem, check_priority, check_type, chronological, items_to_state, ordered
from .telemetry import WindowMetrics, log
from .tiers import COMPACT_MARGIN_PERCENT, RECOVERY_ACTIONS, ContextWindowExceeded, TierAction

#: optimistic attempts of compact() before it runs the strategy under the lock
COMMIT_RETRIES = 3
#: design 000: auto-compaction reaches ``threshold - 15`` percent; builds compact to 70 %
THRESHOLD_MARGIN_PERCENT = 15.0
#: design 001's recovery modes a window can run when its compaction leaves no room
WINDOW_RECOVERIES = ("fresh_start", "truncate")
BUILD_TARGET_PERCENT = 70.0


@dataclass(frozen=True)
class ContextSnapshot:
    """The window's content and settings at ``version`` (items in design 000's order);
    ``created_at``: wall-clock time of the snapshot (seconds since the epoch);
    ``strategy_params``: the parameters of the default strategy ``strategy``."""

    version: int
    items: tuple[ContextItem, ...]
    max_tokens: int
    compaction_threshold: float
    strategy: str
    agent_id: str = "agent"
    created_at: float = field(default=0.0, compare=False)
    artifacts: tuple[Artifact, ...] = ()
    strategy_params: dict[str, Any] = field(default_factory=dict, hash=False)


@dataclass(frozen=True)
class WindowStats:
    """Design 000's statistics. ``tokens_by_type`` counts content plus framing per
    item type (the reply priming is in ``current_tokens`` only)."""

    total_items: int
    pinned_items: int
    current_tokens: int
    max_tokens: int
    available_tokens: int
    usage_percent: float
    usage_tier: str
    items_by_type: dict[str, int]
    tokens_by_type: dict[str, int]
    compaction_count: int
    total_tokens_freed: int
    version: int


def _percent(value: Any, key: str, low: float = 0.0) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not low < value <= 100:
        raise ContextError(f"{key} must be a percentage in ({low:g}, 100], got {describe_value(value)}", key=key)
    return float(value)


class ContextWindow:
    """A token-bounded, priority-ordered context window (design 000).

    ``max_tokens``: window size (tokens). ``compaction_threshold``: percent of
    ``max_tokens`` above which ``add`` compacts first (to ``threshold - 15`` %).
    ``policy``: a :class:`BreakingPolicy`; ``chain``: strategy ids applied in order
    until the target is reached; ``default_strategy``: a strategy id.
    ``message_format``: the chat format whose framing is counted (``openai``,
    ``anthropic``, ``plain``). ``max_items``: item limit (design 000: 1,000).
    ``task``: the text relevance-based strategies score against (``ContextState.task``).
    ``preserve_tool_results``: tool names whose results no compaction touches (seed
    004's ``preserveToolResults``; a ``tool_result`` item names its tool in
    ``metadata["tool_name"]``, and its unit then carries the call:
    :func:`~ctxsim.window.items.item_tool`). ``recovery``: design 001's recovery mode
    (``fresh_start`` or ``truncate``) that ``add`` runs when its compaction leaves no
    room for the item; None raises ContextWindowFull then. :meth:`check_usage` acts on design 004's usage tiers
    (:mod:`.tiers`).
    """

    def __init__(
        self,
        max_tokens: int,
        compaction_threshold: float = 85.0,
        *,
        policy: BreakingPolicy | None = None,
        chain: Sequence[str | Strategy] | None = None,
        default_strategy: str | Strategy = "remove_low_priority",
        message_format: str = "openai",
        max_items: int = 1000,
        agent_id: str = "agent",
        task: str = "",
        preserve_tool_results: Sequence[str] = ("updatePlan", "executeCommand"),
        recovery: str | None = None,
    ):
        for name, value in (("max_tokens", max_tokens), ("max_items", max_items)):
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ContextError(f"ContextWindow.{name} must be a positive integer, got {describe_value(value)}", key=name)
        if message_format not in MESSAGE_OVERHEAD:
            raise ContextError(
                f"unknown message_format {describe_value(message_format)}; known: {sorted(MESSAGE_OVERHEAD)}", key="message_format"
            )
        if policy is not None and not callable(getattr(policy, "break_context", None)):
            raise ContextError(f"policy has no break_context(state, target_tokens): {describe_value(policy)}", key="policy")
        for name, value in (("agent_id", agent_id), ("task", task)):
            if not isinstance(value, str):
                raise ContextError(f"ContextWindow.{name} must be a string, got {describe_value(value)}", key=name)
        self.max_tokens, self.max_items, self.agent_id, self.task = max_tokens, max_items, agent_id, task
        if isinstance(preserve_tool_results, str) or not all(isinstance(t, str) for t in preserve_tool_results):
            raise ContextError(
                f"preserve_tool_results must be a list of tool names, got {describe_value(preserve_tool_results)}",
                key="preserve_tool_results",
            )
        self.preserve_tool_results = frozenset(preserve_tool_results)
        self.message_format = message_format
        self.policy = policy
        self._chain = resolve(chain, "chain") if chain is not None else None
        self._default = resolve(default_strategy, "default_strategy")[0]
        if recovery is not None and recovery not in WINDOW_RECOVERIES:
            raise ContextError(f"recovery must be one of {list(WINDOW_RECOVERIES)} or None, got {describe_value(recovery)}",
                               key="recovery")
        self.recovery = recovery
        self._threshold = _percent(compaction_threshold, "compaction_threshold", THRESHOLD_MARGIN_PERCENT)
        self._overhead = message_overhead(message_format)
        self._priming = REPLY_PRIMING[message_format]
        self._lock = threading.RLock()
        self._events = EventHub()
        self._clock = itertools.count()
        self._items: dict[str, ContextItem] = {}
        self._artifacts: dict[str, Artifact] = {}  # what compactions moved out, by id, oldest first
        self._tokens = 0  # content + framing of every item, without the reply priming
        self._version = self._compactions = self._freed = 0
        self._metrics = WindowMetrics()
        log("initialized", agent_id=agent_id, max_tokens=max_tokens)

    @classmethod
    def from_config(
        cls, config: ContextConfig | str | Path, *, llm_type: str | None = None, agent_priority: int = 2, **kwargs: Any
    ) -> ContextWindow:
        """A window set up by a ``context_config`` (design 001; the ``chain_config.yaml``
        ``ctxsim export`` writes, or a file or :class:`~ctxsim.config.ContextConfig` of
        one's own): ``max_tokens`` the limit of the agent ``agent_id`` (a keyword of the
        constructor; its ``per_agent`` limit when listed) on ``llm_type`` at
        ``agent_priority`` (:meth:`~ctxsim.config.ContextConfig.limit_for`),
        ``compaction_threshold`` its ``warning_threshold``, ``chain`` its ``chain_order``
        with each strategy's parameters. ``kwargs`` go to the constructor (``task``,
        ``policy``: a policy given decides instead of the chain, ``recovery`` to set
        another, ...); its ``recovery_mode`` becomes the window's ``recovery`` (``error``:
        none, the window raises ContextWindowFull). A bad file, or a chain or threshold the window cannot
        take, raises ConfigError naming it."""
        source = None
        if not isinstance(config, ContextConfig):
            source = config
            config = load_config(config)
        try:
            chain = [strategy_from_config(sid, config) for sid in config.breaking_strategy.chain_order]
            kwargs.setdefault("recovery", None if config.recovery_mode == "error" else config.recovery_mode)
            limit = config.limit_for(llm_type, agent=kwargs.get("agent_id"), agent_priority=agent_priority)
            return cls(limit,
                       compaction_threshold=config.warning_threshold * 100, chain=chain, **kwargs)
        except (ContextError, StrategyError) as exc:
            key = {"compaction_threshold": "warning_threshold"}.get(exc.key or "", exc.key or "breaking_strategy")
            raise ConfigError(exc.message, source=source, key=f"context_config.{key}") from None

    # ---- settings and readings ------------------------------------------------
    @property
    def compaction_threshold(self) -> float:
        return self._threshold

    @compaction_threshold.setter
    def compaction_threshold(self, value: float) -> None:
        with self._lock:
            self._threshold = _percent(value, "compaction_threshold", THRESHOLD_MARGIN_PERCENT)

    @property
    def default_strategy(self) -> str:
        return self._default.id

    @default_strategy.setter
    def default_strategy(self, value: str | Strategy) -> None:
        strategy = resolve(value, "default_strategy")[0]
        with self._lock:
            self._default = strategy

    @property
    def version(self) -> int:
        """Increments on every change of the window's content."""
        return self._version

    @property
    def current_tokens(self) -> int:
        with self._lock:
            return self._tokens + (self._priming if self._items else 0)

    @property
    def available_tokens(self) -> int:
        return self.max_tokens - self.current_tokens

    @property
    def usage_percent(self) -> float:
        return self.current_tokens / self.max_tokens * 100

    @property
    def usage_tier(self) -> str:
        """Design 004's tier of the current usage: safe, warning, critical, exceeded."""
        return usage_tier(self.current_tokens, self.max_tokens)

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, item_id: object) -> bool:
        return item_id in self._items

    def get(self, item_id: str) -> ContextItem | None:
        return self._items.get(item_id)

    def items(self, type: str | None = None) -> list[ContextItem]:
        """Items in design 000's order (type rank, priority descending, added first)."""
        if type is not None:
            check_type(type, "items()")
        with self._lock:
            values = list(self._items.values())
        return ordered(i for i in values if type is None or i.type == type)

    def pinned_items(self) -> list[ContextItem]:
        return [i for i in self.items() if i.pinned]

    def to_state(self) -> ContextState:
        """The items as a context state (chronological; limit = max_tokens), with the
        artifacts compactions moved out of the window."""
        with self._lock:
            items, artifacts = list(self._items.values()), tuple(self._artifacts.values())
        return self._state_of(items, artifacts)

    def artifacts(self) -> tuple[Artifact, ...]:
        """The content compactions moved out of the window behind pointer items
        (design 002's artifacts), oldest first. Kept for the window's life: removing
        or clearing items, or a later compaction of a pointer, leaves them."""
        with self._lock:
            return tuple(self._artifacts.values())

    def read_artifact(self, artifact_id: str) -> str:
        """The original content behind a pointer item (``read_artifact("art-…")`` in its
        text: design 002's rehydration); an unknown id raises ContextError naming it."""
        with self._lock:
            artifact = self._artifacts.get(artifact_id)
        if artifact is None:
            raise ContextError(f"unknown artifact {describe_value(artifact_id)}; the window holds "
                               f"{len(self._artifacts)} artifact(s)", key="artifact_id")
        return artifact.content

    def on(self, event_name: str, callback: Callable[[Event], None]) -> Callable[[Event], None]:
        """Call ``callback(event)`` on every event ``event_name`` (see :mod:`.events`)."""
        return self._events.on(event_name, callback)

    def off(self, event_name: str, callback: Callable[[Event], None]) -> bool:
        return self._events.off(event_name, callback)

    # ---- changing the content -------------------------------------------------
    def add(self, item: ContextItem) -> ContextItem:
        """Add ``item``; returns it as stored (``added_at`` set).

        When the projected usage is above the threshold, compacts to ``threshold −
        15`` % first (lower when the item would not fit beside that). Raises
        :class:`ContextWindowFull` when it still does not fit (without compacting
        when not even the pinned items leave room), and
        ContextError for a duplicate id or a full item count (``max_items``).
        """
        events: list[Event] = []
        started = time.perf_counter()
        try:
            with self._lock:
                return self._add_locked(item, events)
        finally:
            self._metrics.add_latency_ms.observe((time.perf_counter() - started) * 1000)
            self._events.emit(events)

    def add_range(self, items: Iterable[ContextItem]) -> int:
        """Add items in order, atomically; returns how many were added. Items that do
        not fit are skipped; any other error stops the batch (earlier items stay)."""
        if not isinstance(items, Iterable):
            raise ContextError(f"add_range() takes an iterable of ContextItems, got {describe_value(items)}", key="items")
        events: list[Event] = []
        added = 0
        try:
            with self._lock:
                for item in items:
                    try:
                        self._add_locked(item, events)
                        added += 1
                    except ContextWindowFull:
                        continue
            return added
        finally:
            self._events.emit(events)

    def remove(self, item_id: str) -> bool:
        with self._lock:
            item = self._items.pop(item_id, None)
            if item is None:
                return False
            self._tokens -= self._cost(item)
            self._version += 1
            event = ItemRemoved(self.agent_id, item.id, item.type, item.token_count, "manual", self._tick())
        self._events.emit([event])
        return True

    def update_priority(self, item_id: str, priority: int) -> bool:
        check_priority(priority, "update_priority()")
        return self._change(item_id, priority=priority)

    def pin(self, item_id: str) -> bool:
        return self._change(item_id, pinned=True)

    def unpin(self, item_id: str) -> bool:
        return self._change(item_id, pinned=False)

    def clear(self, include_pinned: bool = False) -> int:
        """Remove every item (pinned ones only with ``include_pinned``); returns the count."""
        with self._lock:
            gone = [i for i in chronological(self._items.values()) if include_pinned or not i.pinned]
            before = self.current_tokens
            for item in gone:
                del self._items[item.id]
                self._tokens -= self._cost(item)
            if gone:
                self._version += 1
            events: list[Event] = [
                ItemRemoved(self.agent_id, i.id, i.type, i.token_count, "clear", self._tick()) for i in gone
            ]
            events.append(Cleared(self.agent_id, len(gone), before - self.current_tokens, include_pinned, self._tick()))
        self._events.emit(events)
        return len(gone)

    def snapshot(self) -> ContextSnapshot:
        with self._lock:
            return ContextSnapshot(
                self._version, tuple(self.items()), self.max_tokens, self._threshold, self._default.id, self.agent_id,
                time.time(), tuple(self._artifacts.values()), self._default.params.model_dump(),
            )

    def restore(self, snapshot: ContextSnapshot) -> None:
        """Replace the content by the snapshot's items (ids, priorities, ``added_at``
        kept) and artifacts, and take its threshold and default strategy (with its
        parameters). The window keeps its own ``max_tokens``; a snapshot that does not
        fit raises ContextWindowFull. No events are emitted."""
        if not isinstance(snapshot, ContextSnapshot):
            raise ContextError(f"restore() takes a ContextSnapshot, got {describe_value(snapshot)}", key="snapshot")
        default = resolve(snapshot.strategy, "strategy")[0]
        if snapshot.strategy_params:
            try:
                default = type(default)(**snapshot.strategy_params)
            except StrategyError as exc:
                raise StrategyError(exc.message, key="strategy_params") from None
        items = list(snapshot.items)
        for item in items:
            if not isinstance(item, ContextItem):
                raise ContextError(f"snapshot items must be ContextItems, got {describe_value(item)}", key="items")
        tokens = sum(self._cost(i) for i in items)
        needed = tokens + (self._priming if items else 0)
        with self._lock:
            if needed > self.max_tokens:
                raise ContextWindowFull(self.current_tokens, self.max_tokens, needed)
            if len(items) > self.max_items:
                raise ContextError(f"snapshot has {len(items)} items, over max_items={self.max_items}", key="max_items")
            if len({i.id for i in items}) != len(items):
                raise ContextError("snapshot has duplicate item ids", key="items")
            self._threshold = _percent(snapshot.compaction_threshold, "compaction_threshold", THRESHOLD_MARGIN_PERCENT)
            self._default = default
            self._items = {i.id: i for i in items}
            self._artifacts = {a.id: a for a in snapshot.artifacts}
            self._tokens = tokens
            start = max([next(self._clock)] + [i.added_at + 1 for i in items])
            self._clock = itertools.count(start)
            self._version += 1

    def stats(self) -> WindowStats:
        with self._lock:
            items = self.items()
            current = self.current_tokens
            compactions, freed, version = self._compactions, self._freed, self._version
        by_count: dict[str, int] = {}
        by_tokens: dict[str, int] = {}
        for item in items:
            by_count[item.type] = by_count.get(item.type, 0) + 1
            by_tokens[item.type] = by_tokens.get(item.type, 0) + self._cost(item)
        return WindowStats(
            total_items=len(items),
            pinned_items=sum(i.pinned for i in items),
            current_tokens=current,
            max_tokens=self.max_tokens,
            available_tokens=self.max_tokens - current,
            usage_percent=current / self.max_tokens * 100,
            usage_tier=usage_tier(current, self.max_tokens),
            items_by_type=by_count,
            tokens_by_type=by_tokens,
            compaction_count=compactions,
            total_tokens_freed=freed,
            version=version,
        )

    # ---- building ---------------------------------------------------------------
    def build(self, options: BuildOptions | None = None) -> str:
        return self.build_structured(options).content

    def build_structured(self, options: BuildOptions | None = None) -> BuiltContext:
        """Compose the context within ``max_tokens - reserve_for_response`` tokens.

        When the window is over that budget it compacts first (to 70 %, design 000, or
        to the budget when that is lower) with the policy/chain/default strategy. See
        :mod:`.build` for the rules.
        """
        options = BuildOptions() if options is None else options
        if not isinstance(options, BuildOptions):
            raise ContextError(f"build() takes BuildOptions or None, got {describe_value(options)}", key="options")
        started = time.perf_counter()
        budget = self.max_tokens - options.reserve_for_response
        if budget <= 0:
            raise ContextError(
                f"reserve_for_response={options.reserve_for_response} leaves no budget in max_tokens={self.max_tokens}",
                key="reserve_for_response",
            )
        events: list[Event] = []
        try:
            with self._lock:
                before_ids = [i.id for i in ordered(self._items.values())]
                proposal = None
                if self.current_tokens > budget:
                    target = min(BUILD_TARGET_PERCENT, 100.0 * budget / self.max_tokens)
                    proposal = self._compact_locked(None, target, "build", events)
                items = self.items()
            content, included = compose(items, options, budget, self.message_format)
            kept = set(included)
            window_ids = list(dict.fromkeys(before_ids + [i.id for i in items]))  # the compaction's new items too
            total = request_tokens(content, self.message_format)
            build_ms = (time.perf_counter() - started) * 1000
            self._metrics.build_latency_ms.observe(build_ms)
            built = BuiltContext(
                content=content,
                total_tokens=total,
                included_ids=included,
                excluded_ids=tuple(i for i in window_ids if i not in kept),
                was_compacted=bool(proposal and proposal.changed),
                tokens_freed=proposal.tokens_freed if proposal and proposal.changed else 0,
                build_time_ms=build_ms,
            )
            events.append(
                Built(self.agent_id, len(included), len(built.excluded_ids), built.total_tokens, built.was_compacted,
                      self._tick(), build_ms)
            )
            return built
        finally:
            self._events.emit(events)

    # ---- compaction ---------------------------------------------------------------
    def plan_compaction(self, strategy: StrategySpec | None = None, target_percent: float = 70.0) -> CompactionProposal:
        """Run a compaction on a snapshot of the items without holding the lock.

        ``strategy``: an id, a Strategy, or a sequence of them (a chain); None uses
        the policy/chain/default. Target: ``target_percent`` % of ``max_tokens``.
        Pinned items are never removed or changed (a policy that does so raises
        StrategyError).
        """
        target = int(self.max_tokens * _percent(target_percent, "target_percent") / 100)
        with self._lock:
            version, before, artifacts = self._version, dict(self._items), tuple(self._artifacts.values())
        state = self._state_of(before.values(), artifacts)
        preserved = {i.id for i in before.values() if self._preserved(i)}
        if preserved:  # strategies treat preserved tool results as pinned
            state = state.with_units([replace(u, pinned=True) if u.id in preserved else u for u in state.units])
        if strategy is None and self.policy is not None:
            label, compact = "policy", partial(run_policy, self.policy, target=target)
        else:
            strategies = resolve(strategy, "strategy") if strategy is not None else (self._chain or (self._default,))
            label, compact = "+".join(s.id for s in strategies), partial(run_chain, strategies, target=target)
        return plan(
            before, state, version=version, target=target, label=label,
            compact=compact, next_tick=self._tick, window_key=id(self),
        )

    def commit(self, proposal: CompactionProposal) -> bool:
        """Install ``proposal``; False (nothing changed) when the window's version
        moved since it was planned, or it was planned on another window."""
        if not isinstance(proposal, CompactionProposal):
            raise ContextError(f"commit() takes a CompactionProposal, got {describe_value(proposal)}", key="proposal")
        events: list[Event] = []
        with self._lock:
            ok = self._commit_locked(proposal, "manual", events)
        self._events.emit(events)
        return ok

    def compact(self, strategy: StrategySpec | None = None, target_percent: float = 70.0) -> int:
        """Compact to ``target_percent`` % of ``max_tokens``; returns tokens freed.

        Plans and commits optimistically up to :data:`COMMIT_RETRIES` times, then
        plans and commits under the lock (which cannot conflict).
        """
        for _ in range(COMMIT_RETRIES):
            proposal = self.plan_compaction(strategy, target_percent)
            if self.commit(proposal):
                return proposal.tokens_freed if proposal.changed else 0
        events: list[Event] = []
        try:
            with self._lock:
                proposal = self._compact_locked(strategy, target_percent, "manual", events)
            return proposal.tokens_freed if proposal.changed else 0
        finally:
            self._events.emit(events)

    # ---- design 000's metrics -------------------------------------------------------------
    def metrics(self) -> dict[str, object]:
        """Design 000's metrics by name: gauges (items, tokens, usage percent), the
        latency histograms (ms; :class:`~.telemetry.Histogram`) and the counters."""
        stats = self.stats()
        return {
            "agents.context.items": stats.total_items,
            "agents.context.tokens": stats.current_tokens,
            "agents.context.usage_percent": stats.usage_percent,
            "agents.context.add_latency_ms": self._metrics.add_latency_ms,
            "agents.context.build_latency_ms": self._metrics.build_latency_ms,
            "agents.context.compaction_total": stats.compaction_count,
            "agents.context.tokens_freed_total": stats.total_tokens_freed,
        }

    # ---- design 004's tiers -------------------------------------------------------------
    def check_usage(self, strategy: StrategySpec | None = None) -> TierAction:
        """Act on the usage tier before a turn (see :mod:`.tiers`): safe → nothing;
        warning → compaction in a background thread; critical → compaction now;
        exceeded → :class:`ContextWindowExceeded` with the recovery options.
        Compactions use ``strategy`` (default: the policy/chain/default strategy); an
        unknown one raises StrategyError at any tier, not in the background thread."""
        if strategy is not None:
            resolve(strategy, "strategy")
        tier = self.usage_tier
        if tier == "safe":
            return TierAction(tier, "none")
        if tier == "exceeded":
            raise ContextWindowExceeded(self.current_tokens, self.max_tokens, self.usage_percent)
        target = self._tier_target()
        if tier == "warning":
            return TierAction(tier, "background", background=self._compact_in_background(strategy, target))
        return TierAction(tier, "forced", tokens_freed=self.compact(strategy, target))

    def _compact_in_background(self, strategy: StrategySpec | None, target: float) -> Future[int]:
        """:meth:`compact` in a daemon thread; its Future holds the tokens freed or the
        error, which is logged as well (a fire-and-forget caller would not see it)."""
        future: Future[int] = Future()

        def run() -> None:
            future.set_running_or_notify_cancel()
            try:
                future.set_result(self.compact(strategy, target))
            except Exception as exc:  # noqa: BLE001 - handed to the caller through the Future
                log("background_failed", agent_id=self.agent_id, error=f"{type(exc).__name__}: {exc}")
                future.set_exception(exc)

        threading.Thread(target=run, name="ctxsim-compaction", daemon=True).start()
        return future

    def recover(self, action: str) -> int:
        """Run one of the recovery options of :class:`ContextWindowExceeded`; returns
        tokens freed. ``compact``: the window's compaction to the tier target;
        ``fresh_start``: design 001's handover; ``clear``: every unpinned item goes."""
        if action not in RECOVERY_ACTIONS:
            raise ContextError(f"unknown recovery action {describe_value(action)}; known: {list(RECOVERY_ACTIONS)}", key="action")
        before = self.current_tokens
        if action == "clear":
            self.clear()
            return before - self.current_tokens
        return self.compact("fresh_start" if action == "fresh_start" else None, self._tier_target())

    def _tier_target(self) -> float:
        """Compaction target (percent): :data:`COMPACT_MARGIN_PERCENT` under the warning tier."""
        return max(1.0, load_models().tiers.warning * 100 - COMPACT_MARGIN_PERCENT)

    def _preserved(self, item: ContextItem) -> bool:
        return item.type == "tool_result" and item.metadata.get("tool_name") in self.preserve_tool_results

    # ---- internals (callers hold the lock where noted) ---------------------------------
    def _tick(self) -> int:
        return next(self._clock)

    def _cost(self, item: ContextItem) -> int:
        return item.token_count + self._overhead

    def _requested(self, cost: int) -> int:
        """Tokens an item of ``cost`` adds now (the reply priming comes with the first)."""
        return cost + (0 if self._items else self._priming)

    def _state_of(self, items: Iterable[ContextItem], artifacts: tuple[Artifact, ...]) -> ContextState:
        """A state of ``items`` and ``artifacts`` with the window's settings."""
        return items_to_state(
            items,
            limit=self.max_tokens,
            min_limit=min(DEFAULT_MIN_LIMIT, self.max_tokens),
            warning_threshold=self._threshold / 100,
            task=self.task,
            message_format=self.message_format,
            artifacts=artifacts,
        )

    def _change(self, item_id: str, **changes: Any) -> bool:
        with self._lock:
            item = self._items.get(item_id)
            if item is None:
                return False
            new = replace(item, **changes)
            if new != item:
                self._items[item_id] = new
                self._version += 1
            return True

    def _add_locked(self, item: ContextItem, events: list[Event]) -> ContextItem:
        if not isinstance(item, ContextItem):
            raise ContextError(f"add() takes a ContextItem, got {describe_value(item)}", key="item")
        if item.id in self._items:
            raise ContextError(f"an item with id {item.id!r} is already in the window", key="id")
        if len(self._items) >= self.max_items:
            raise ContextError(f"the window holds max_items={self.max_items} items", key="max_items")
        cost = self._cost(item)
        pinned = sum(self._cost(i) for i in self._items.values() if i.pinned)
        if pinned + cost + self._priming > self.max_tokens:  # no compaction can make room
            raise self._full(cost)
        projected = (self.current_tokens + self._requested(cost)) / self.max_tokens * 100
        if projected > self._threshold:
            log("threshold", percent=round(projected, 1), agent_id=self.agent_id)
            # design 000's target, or lower when the item needs more room than that leaves
            room = (self.max_tokens - self._requested(cost)) / self.max_tokens * 100
            self._compact_locked(None, min(self._threshold - THRESHOLD_MARGIN_PERCENT, room), "threshold", events)
            if self.current_tokens + self._requested(cost) > self.max_tokens and self.recovery is not None:
                log("recovery", mode=self.recovery, agent_id=self.agent_id)
                self._compact_locked(self.recovery, room, "recovery", events)
        if self.current_tokens + self._requested(cost) > self.max_tokens:
            raise self._full(cost)
        stored = replace(item, added_at=self._tick())
        self._items[stored.id] = stored
        self._tokens += cost
        self._version += 1
        events.append(ItemAdded(self.agent_id, stored.id, stored.type, stored.token_count, self.current_tokens, self._tick()))
        return stored

    def _full(self, cost: int) -> ContextWindowFull:
        error = ContextWindowFull(self.current_tokens, self.max_tokens, self._requested(cost))
        log("full", agent_id=self.agent_id, current=error.current, max=error.maximum, requested=error.requested)
        return error

    def _compact_locked(
        self, strategy: StrategySpec | None, target_percent: float, reason: str, events: list[Event]
    ) -> CompactionProposal:
        proposal = self.plan_compaction(strategy, target_percent)  # re-entrant: the version cannot move
        self._commit_locked(proposal, reason, events)
        return proposal

    def _commit_locked(self, proposal: CompactionProposal, reason: str, events: list[Event]) -> bool:
        if proposal.window_key != id(self) or proposal.expected_version != self._version:
            return False
        if not proposal.changed:
            return True
        usage_before = self.usage_percent
        self._items = {i.id: i for i in proposal.items}
        self._artifacts.update((a.id, a) for a in proposal.artifacts)
        self._tokens = sum(self._cost(i) for i in proposal.items)
        self._version += 1
        self._compactions += 1
        self._freed += proposal.tokens_freed
        events.extend(
            ItemRemoved(self.agent_id, i.id, i.type, i.token_count, "compaction", self._tick()) for i in proposal.removed
        )
        events.extend(
            ItemAdded(self.agent_id, i.id, i.type, i.token_count, self.current_tokens, self._tick()) for i in proposal.added
        )
        events.append(
            Compacted(
                self.agent_id, proposal.strategy, proposal.applied, len(proposal.removed), len(proposal.added),
                proposal.tokens_freed, usage_before, self.usage_percent, reason, self._tick(),
            )
        )
        return True
