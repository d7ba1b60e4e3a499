"""Compaction of a window's items by a strategy, a chain or a learned policy.

:func:`plan` is pure: it maps the items to a context state, runs what compacts it
and maps the result back (:mod:`.items`), returning a :class:`CompactionProposal`
stamped with the window version it was computed against (design 002's
``CompactionTransaction``: the window commits it only if that version still holds).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Protocol, Sequence

from ..errors import ContextError, StrategyError, describe_value
from ..model import Artifact, ContextState
from ..strategies import Strategy, StrategyContext, get_strategy
from .items import ContextItem, chronological, items_from_state

StrategySpec = str | Strategy | Sequence[str | Strategy]


class PolicyResult(Protocol):
    state: ContextState


class BreakingPolicy(Protocol):
    """What a learned (deployable) policy offers the window.

    ``break_context(state, target_tokens)`` returns an object whose ``state`` is the
    broken context (tokens at most ``target_tokens`` when it can); pinned units
    must come out unchanged. ``decide(state)`` (the strategy id it would pick) is
    part of deployable policies but not used by the window.
    """

    def break_context(self, state: ContextState, target_tokens: int | None = None) -> PolicyResult: ...


@dataclass(frozen=True)
class CompactionProposal:
    """A compaction computed against ``expected_version``.

    ``strategy`` names what ran ("policy", "a+b" for a chain, or an id) and
    ``applied`` the strategy ids that changed the state. ``items`` is the window's
    content after a commit (chronological); ``removed`` the items it drops (removed
    or folded into a summary), ``added`` the synthetic items it brings; ``artifacts``
    the content it moves out of the window behind pointer items (design 002's
    externalization), which the window keeps for ``read_artifact``. Tokens are
    window tokens (content, framing and reply priming).
    """

    expected_version: int
    strategy: str
    applied: tuple[str, ...]
    target_tokens: int
    tokens_before: int
    tokens_after: int
    items: tuple[ContextItem, ...]
    removed: tuple[ContextItem, ...]
    added: tuple[ContextItem, ...]
    changed: bool
    window_key: int = field(repr=False, default=0)
    artifacts: tuple[Artifact, ...] = ()

    @property
    def tokens_freed(self) -> int:
        """Tokens the commit frees (0 when nothing changed)."""
        return self.tokens_before - self.tokens_after


def resolve(spec: StrategySpec, key: str) -> tuple[Strategy, ...]:
    """Strategies of an id, a Strategy, or a sequence of them; an unknown id or
    anything else raises StrategyError naming ``key`` and the value."""
    if isinstance(spec, (str, Strategy)):
        entries = [spec]
    elif isinstance(spec, Iterable) and not isinstance(spec, Mapping):
        entries = list(spec)
    else:
        raise StrategyError(f"expected a strategy id, a Strategy or a list of them, got {describe_value(spec)}",
                            key=key)
    if not entries:
        raise ContextError(f"{key} must name at least one strategy", key=key)
    out = []
    for entry in entries:
        if isinstance(entry, str):
            try:
                out.append(get_strategy(entry))
            except StrategyError as exc:
                raise StrategyError(exc.message, key=key) from None
        elif isinstance(entry, Strategy):
            out.append(entry)
        else:
            raise StrategyError(f"{key}: expected a strategy id, got {describe_value(entry)}", key=key)
    return tuple(out)


def run_chain(strategies: Sequence[Strategy], state: ContextState, target: int) -> ContextState:
    """Apply ``strategies`` in order, skipping inapplicable ones, until ``state`` fits ``target`` tokens."""
    ctx = StrategyContext(target_tokens=target)
    for strategy in strategies:
        if state.total_tokens <= target:
            break
        if strategy.applicable(state, ctx):
            state = strategy.apply(state, ctx).state
    return state


def run_policy(policy: BreakingPolicy, state: ContextState, target: int) -> ContextState:
    """The policy's broken state, checked: a ContextState with every pinned unit intact."""
    after: Any = policy.break_context(state, target_tokens=target).state
    if not isinstance(after, ContextState):
        raise StrategyError(f"policy returned {describe_value(after)} instead of a ContextState", key="policy")
    for unit in state.units:
        if unit.pinned and (unit.id not in after or after.unit(unit.id).content != unit.content):
            raise StrategyError(f"policy removed or changed the pinned item {unit.id!r}", key="policy")
    return after


def plan(
    before: Mapping[str, ContextItem],
    state: ContextState,
    *,
    version: int,
    target: int,
    label: str,
    compact: Callable[[ContextState], ContextState],
    next_tick: Callable[[], int],
    window_key: int,
) -> CompactionProposal:
    """Run ``compact`` on ``state`` (the mapped ``before`` items) and map the result back."""
    new_state = compact(state)
    items = tuple(items_from_state(before, new_state, next_tick))
    old = tuple(chronological(before.values()))
    after_ids = {i.id for i in items}
    return CompactionProposal(
        expected_version=version,
        strategy=label,
        applied=new_state.history[len(state.history):],
        target_tokens=target,
        tokens_before=state.total_tokens,
        tokens_after=new_state.total_tokens,
        items=items,
        removed=tuple(i for i in old if i.id not in after_ids),
        added=tuple(i for i in items if i.id not in before),
        changed=items != old,
        window_key=window_key,
        artifacts=new_state.artifacts_since(state),
    )
