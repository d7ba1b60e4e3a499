"""Design 000's compaction strategies (the ContextWindow's ``compact(strategy, target)``).

``remove_oldest`` (FIFO), ``remove_low_priority`` (P3, then P2, then P1),
``summarize`` (fold low-priority units into one structured summary) and
``selective`` (drop the least relevant units). Pinned units are never touched.

Design 000 compacts to a share of the window (70 % by default); here the target is the
strategy context's (the limit by default) unless ``target_percent`` is given.

:func:`summary_budget` sizes a summary so that folding reaches a token target; the
keep-recent compaction of :mod:`.pruning` uses it too.
"""

from __future__ import annotations

import dataclasses
from functools import lru_cache
from typing import Sequence

from pydantic import Field

from ..latency import Cost
from ..model import ContextState, ContextUnit
from ..summarize import StructuredSummary, SummarySpan
from ..summarize.extractive import must_carry
from ..tokens import count_tokens, message_overhead
from .base import (
    RANK_SELECT, RANK_SUMMARIZE, Outcome, Params, Strategy, StrategyContext, any_unprotected, is_protected, unchanged,
)
from .common import SUMMARY_PREFIX, relevance_scores, remove_until, replace_span, summarize_units
from .registry import register

#: the smallest summary body worth writing (tokens)
MIN_SUMMARY_TOKENS = 50
#: tokenization of header + body may differ from the sum of the parts by a token or two
JOIN_SLACK_TOKENS = 2


@lru_cache(maxsize=1)
def summary_header_tokens() -> int:
    """Upper bound of a summary header's tokens (widest turn numbers) plus its newline."""
    return count_tokens(SUMMARY_PREFIX.format(first=99999, last=99999) + "\n")


def summary_overhead(state: ContextState) -> int:
    """Tokens a summary unit costs besides its body: message framing, header, slack."""
    return message_overhead(state.message_format) + summary_header_tokens() + JOIN_SLACK_TOKENS


def summary_floor(units: Sequence[ContextUnit], task: str, minimum: int) -> int:
    """Smallest summary body for ``units`` (in order; tokens): ``minimum``, or more
    when the structured summary needs more room to hold the task, every user rule
    and what earlier summaries among ``units`` carried (:func:`must_carry`; its
    rendering plus a newline, as the summarizer prices lines)."""
    carried = must_carry(units)
    if not carried:
        return minimum
    span = SummarySpan(units[0].id, units[-1].id, min(u.turn for u in units), max(u.turn for u in units))
    skeleton = StructuredSummary(
        span, depth=max(u.summary_depth for u in units), current_task=(task,) if task.strip() else (), **carried
    )
    return max(minimum, count_tokens(skeleton.render() + "\n"))


def summary_budget(state: ContextState, units: Sequence[ContextUnit], excess: int, cap: int, floor: int) -> int:
    """Body tokens of a summary replacing ``units`` that removes ``excess`` tokens.

    The body that brings the state exactly to its target, limited to ``cap`` and
    never below ``floor`` (so the result may stay over the target, or go below it
    when ``cap`` is smaller than what the target allows).
    """
    needed = state.tokens_of(units) - excess - summary_overhead(state)
    return max(floor, min(cap, needed))


def summary_saves(state: ContextState, units: Sequence[ContextUnit], body_tokens: int) -> bool:
    """True when a summary of ``body_tokens`` tokens is smaller than ``units``."""
    return state.tokens_of(units) > summary_overhead(state) + body_tokens


#: unit ``meta`` key of a window item's exact 0-100 priority (:mod:`ctxsim.window.items`)
ITEM_PRIORITY_META = "item_priority"


def low_priority_first(units: Sequence[ContextUnit]) -> list[ContextUnit]:
    """Units ordered P3, then P2, then P1; within a priority tag, by a window item's
    exact 0-100 priority when the unit carries one (design 000 orders by it), then
    oldest first."""

    def key(unit: ContextUnit) -> tuple[int, int]:
        exact = unit.meta_dict.get(ITEM_PRIORITY_META) if unit.meta else None
        return -unit.priority, int(exact) if exact is not None else 0

    return sorted(units, key=key)  # sorted() is stable: position order stays within equal keys


class WindowParams(Params):
    """``target_percent``: compact to this share of the limit (%, design 000 uses 70);
    None: to the strategy context's target (the limit by default)."""

    target_percent: float | None = Field(None, gt=0, le=100)


def window_target(state: ContextState, ctx: StrategyContext, target_percent: float | None) -> int:
    """Tokens to reach: ``limit * target_percent / 100``, or the context's target."""
    return ctx.target(state) if target_percent is None else int(state.limit * target_percent / 100)


class _Removal(Strategy):
    """Removes units in :meth:`order` until the state fits the target; pinned units
    and units stating a user rule are never removed (:func:`~.base.is_protected`)."""

    rank = RANK_SELECT
    phase = "discard"
    seed = "000"
    Params = WindowParams

    def order(self, state: ContextState, candidates: list[ContextUnit], ctx: StrategyContext) -> tuple[list[ContextUnit], Cost]:
        raise NotImplementedError  # pragma: no cover - abstract

    def applicable(self, state: ContextState, ctx: StrategyContext | None = None) -> bool:
        ctx = ctx or StrategyContext()
        over = state.total_tokens > window_target(state, ctx, self.params.target_percent)
        return over and any_unprotected(state.units)

    def run(self, state: ContextState, ctx: StrategyContext) -> Outcome:
        target = window_target(state, ctx, self.params.target_percent)
        candidates = [u for u in state.units if not is_protected(u, keep_rules=True)]
        if state.total_tokens <= target or not candidates:
            return unchanged(state, "fits the target" if candidates else "only pinned units and user rules")
        ordered, cost = self.order(state, candidates, ctx)
        kept, removed = remove_until(state, ordered, target)
        new = state.with_units(kept, applied=self.id)
        note = "" if new.fits(target) else "only pinned units and user rules left; still over the target"
        return Outcome(new, cost + Cost(units_touched=len(removed)), note=note)


@register
class RemoveOldest(_Removal):
    """Design 000 ``RemoveOldest``: FIFO removal.

    Removes non-pinned units oldest first (by position) until the state fits the
    target, then stops. P1 units are removed like any other (no P1 promise); units
    stating a user rule are kept.

    Parameters: ``target_percent`` (% of the limit, default None = the context's
    target). Cost: bookkeeping only.
    """

    id = "remove_oldest"
    display_name = "Remove oldest"
    summary = "Drop the oldest non-pinned units first (FIFO) until the context fits; user rules stay."

    def order(self, state, candidates, ctx):
        return candidates, Cost()


@register
class RemoveLowPriority(_Removal):
    """Design 000 ``RemoveLowPriority``: priority-based removal.

    Removes non-pinned P3 units, then P2, then P1 until the state fits the target;
    within a tag, window items (:mod:`ctxsim.window`) go by their exact 0-100
    priority, lowest first, and ties (and generated units) oldest first. P1 units go
    last but may go (no P1 promise); units stating a user rule are kept.

    Parameters: ``target_percent`` (% of the limit, default None = the context's
    target). Cost: bookkeeping only.
    """

    id = "remove_low_priority"
    display_name = "Remove low priority"
    summary = "Drop P3, then P2, then P1 units (lowest item priority, then oldest, first within a tag) until the context fits; user rules stay."

    def order(self, state, candidates, ctx):
        return low_priority_first(candidates), Cost()


class SelectiveParams(WindowParams):
    """``query``: text relevance is measured against (None: the context's query,
    by default the state's task)."""

    query: str | None = None


@register
class Selective(_Removal):
    """Design 000 ``Selective``: semantic selection of the units to keep.

    Scores every non-pinned unit by cosine similarity to ``query`` (or the task),
    normalized to the most relevant unit (``common.relevance_scores``), and removes
    the least relevant first (ties: oldest first) until the state fits the target.
    P1 units get no boost (no P1 promise); units stating a user rule are kept.

    Parameters: ``target_percent`` (% of the limit, default None), ``query``
    (default None = the context's query or task). Cost: one embedding pass over
    the candidates and the query.
    """

    id = "selective"
    display_name = "Selective (relevance)"
    summary = "Drop the units least relevant to the task/query until the context fits; user rules stay."
    Params = SelectiveParams

    def order(self, state, candidates, ctx):
        if self.params.query is not None:
            ctx = dataclasses.replace(ctx, query=self.params.query)
        scores, cost = relevance_scores(state, candidates, ctx)
        ranked = sorted(range(len(candidates)), key=lambda i: (float(scores[i]), i))
        return [candidates[i] for i in ranked], cost


class SummarizeParams(WindowParams):
    """``summary_ratio``: largest share of the folded units' content tokens the
    summary body may take (design 002's ``summarize_target_ratio``);
    ``fold_p2``: also fold P2 units when folding the P3 units cannot reach the target."""

    summary_ratio: float = Field(0.25, gt=0, le=1)
    fold_p2: bool = True


@register
class Summarize(Strategy):
    """Design 000 ``Summarize``: fold low-priority units into one structured summary.

    Candidates are the non-pinned P3 units, then (``fold_p2``) the P2 units, oldest
    first within a priority. The strategy folds the shortest prefix of them whose
    summary can bring the state to the target, into one structured summary unit
    (design 002 header; placed where the first folded unit was). The body is the size
    that reaches the target exactly, at most ``summary_ratio`` of the folded content
    tokens, and never below a floor: 50 tokens (``MIN_SUMMARY_TOKENS``), or what
    the task and the user rules of the folded units need (:func:`summary_floor`).
    When even folding every candidate cannot reach the target, all of them are
    folded into a floor-sized body (best effort). P1 and pinned units are never
    folded (keeps P1).

    Parameters: ``target_percent`` (% of the limit, default None = the context's
    target), ``summary_ratio`` (default 0.25), ``fold_p2`` (default True).
    Cost: one summary call over the folded units.
    """

    id = "summarize"
    display_name = "Summarize low priority"
    rank = RANK_SUMMARIZE
    phase = "summarize"
    seed = "000"
    summary = "Fold P3 (then P2) units into one structured summary sized to reach the target."
    keeps_p1 = True
    Params = SummarizeParams

    def _plan(self, state: ContextState, ctx: StrategyContext) -> tuple[list[ContextUnit], int] | None:
        """(units to fold, summary body tokens), or None when folding cannot shrink the state."""
        excess = state.total_tokens - window_target(state, ctx, self.params.target_percent)
        if excess <= 0:
            return None
        lowest = 2 if self.params.fold_p2 else 3
        candidates = low_priority_first([u for u in state.units if not u.pinned and u.priority >= lowest])
        task = ctx.query_for(state)
        floors: dict[int, int] = {}  # prefix length -> its floor (the last one is read twice)

        def floor_of(units: list[ContextUnit]) -> int:
            if len(units) not in floors:
                floors[len(units)] = summary_floor(sorted(units, key=lambda u: state.position(u.id)), task, MIN_SUMMARY_TOKENS)
            return floors[len(units)]

        chosen: list[ContextUnit] = []
        room = -summary_overhead(state)  # tokens freed by folding ``chosen`` into an empty body
        for unit in candidates:
            chosen.append(unit)
            room += state.unit_cost(unit)
            if room - MIN_SUMMARY_TOKENS >= excess and room - floor_of(chosen) >= excess:
                break
        if not chosen:
            return None
        cap = int(self.params.summary_ratio * sum(u.token_count for u in chosen))
        body = summary_budget(state, chosen, excess, cap, floor_of(chosen))
        return (chosen, body) if summary_saves(state, chosen, body) else None

    def applicable(self, state: ContextState, ctx: StrategyContext | None = None) -> bool:
        return self._plan(state, ctx or StrategyContext()) is not None

    def run(self, state: ContextState, ctx: StrategyContext) -> Outcome:
        plan = self._plan(state, ctx)
        if plan is None:
            return unchanged(state, "fits the target or no low-priority units worth folding")
        chosen, body = plan
        chosen_ids = {u.id for u in chosen}
        folded = [u for u in state.units if u.id in chosen_ids]  # chronological order
        unit, cost = summarize_units(state, folded, body, ctx)
        units = replace_span(state.units, chosen_ids, unit)
        return Outcome(state.with_units(units, applied=self.id), cost)
