"""Recovery modes (design 001's ``recovery_mode``): fresh start, truncate, error.

A recovery mode is what happens when breaking failed: the result counts as "used
recovery" in the reward. ``fresh_start`` replaces the whole context by a short
handover summary, ``truncate`` keeps only the newest units that fit (design 003's
paragraph-boundary truncation for the one on the edge), ``error`` raises
:class:`~ctxsim.errors.RecoveryError` (``BREAKER_FAILED``).
"""

from __future__ import annotations

from pydantic import Field

from ..errors import RecoveryError
from ..latency import Cost
from ..model import ContextState, ContextUnit
from ..tokens import count_tokens
from .base import BREAKER_FAILED, RANK_RECOVERY, Outcome, Params, Strategy, StrategyContext, unchanged
from .common import source_ids_of, synthetic_id, truncate_paragraphs
from .registry import register

HANDOVER_PREFIX = "Resuming from overflow:"
HANDOVER_SUFFIX = "Continue task: {task}."


class FreshStartParams(Params):
    """``handover_tokens``: size of the whole handover unit (tokens, design 001: 500)."""

    handover_tokens: int = Field(500, ge=64)


@register
class FreshStart(Strategy):
    """Design 001's fresh start: the context becomes one handover summary.

    Every non-pinned unit is summarized, P1 units first and then the rest (each in
    their order), so the summary keeps the P1 rules first, into one handover unit
    (type summary, role assistant, priority 1) of at most ``handover_tokens``
    tokens: ``"Resuming from overflow: <summary>"`` then ``"Continue task: <task>."``
    (a task longer than a quarter of the handover is cut). Pinned units stay, in
    their order, before the handover. The result may be larger than the input
    (a tiny context); only recovery may grow. Not applicable when every unit is
    pinned. Ignores the target.

    Parameters: ``handover_tokens`` (tokens, default 500). Cost: one summary call
    over the whole non-pinned context.
    """

    id = "fresh_start"
    display_name = "Fresh start"
    rank = RANK_RECOVERY
    phase = "recovery"
    seed = "001"
    summary = "Recovery: replace the context by a ≤ 500-token handover summary (P1 rules first) that names the task; pinned units kept."
    recovery = True
    Params = FreshStartParams

    @property
    def max_tokens(self) -> int:
        """The whole handover unit: ``handover_tokens``."""
        return self.params.handover_tokens

    def applicable(self, state: ContextState, ctx: StrategyContext | None = None) -> bool:
        return any(not u.pinned for u in state.units)

    def _frame(self, state: ContextState) -> tuple[str, str]:
        """Handover head and tail (the tail names the task, cut to a quarter of the budget)."""
        task = truncate_paragraphs(state.task, self.params.handover_tokens // 4) or "the current task"
        return HANDOVER_PREFIX, HANDOVER_SUFFIX.format(task=task)

    def run(self, state: ContextState, ctx: StrategyContext) -> Outcome:
        rest = [u for u in state.units if not u.pinned]
        if not rest:
            return unchanged(state, "only pinned units")
        ordered = [u for u in rest if u.priority == 1] + [u for u in rest if u.priority != 1]
        head, tail = self._frame(state)
        budget = self.params.handover_tokens - count_tokens(f"{head} \n{tail}") - 2  # 2: join slack
        result = ctx.summarizer.summarize_units(
            ordered, budget, task=ctx.query_for(state), depth=max(u.summary_depth for u in rest)
        )
        body = result.text  # at most ``budget`` tokens (the summarizer's contract)
        handover = ContextUnit(
            id=synthetic_id("handover", rest),
            type="summary",
            role="assistant",
            content=f"{head} {body}\n{tail}",
            turn=max(u.turn for u in rest),
            timestamp=max(u.timestamp for u in rest),
            priority=1,
            source_ids=source_ids_of(rest),
            summary_depth=max(u.summary_depth for u in rest) + 1,
        )
        pinned = [u for u in state.units if u.pinned]
        cost = Cost.summary(state.tokens_of(rest), handover.token_count, budget - result.token_count)
        cost += Cost(units_touched=len(rest))
        return Outcome(state.with_units(pinned + [handover], applied=self.id), cost)


@register
class Truncate(Strategy):
    """Recovery by truncation: keep the newest units that fit, cut the next one.

    Pinned units are kept. Walking from the newest non-pinned unit back, units are
    kept whole while they fit the target; the first one that does not fit whole is
    cut at paragraph boundaries (design 003's smart truncation, keeping its first
    paragraphs; then lines, then words) to the remaining budget, or dropped when
    nothing fits; every older unit is dropped. Order is kept. Applicable when the
    state is over the target and has a non-pinned unit. No P1 promise.

    Parameters: none. Cost: bookkeeping only.
    """

    id = "truncate"
    display_name = "Truncate"
    rank = RANK_RECOVERY
    phase = "recovery"
    seed = "003"
    summary = "Recovery: keep pinned and the newest units that fit; cut the next one at paragraph boundaries; drop the rest."
    recovery = True

    def applicable(self, state: ContextState, ctx: StrategyContext | None = None) -> bool:
        ctx = ctx or StrategyContext()
        return state.total_tokens > ctx.target(state) and any(not u.pinned for u in state.units)

    def run(self, state: ContextState, ctx: StrategyContext) -> Outcome:
        if not self.applicable(state, ctx):
            return unchanged(state, "fits the target or only pinned units")
        priming = state.total_tokens - state.tokens_of(state.units)
        remaining = ctx.target(state) - priming - state.tokens_of(u for u in state.units if u.pinned)
        kept: dict[str, ContextUnit] = {}
        text = ""
        for u in reversed([u for u in state.units if not u.pinned]):
            if state.unit_cost(u) <= remaining:
                kept[u.id] = u
                remaining -= state.unit_cost(u)
                continue
            room = remaining - (state.unit_cost(u) - u.token_count)  # content tokens left after framing
            text = truncate_paragraphs(u.content, room) if room > 0 else ""
            if text:
                kept[u.id] = u.with_content(text)
            break
        units = [u if u.pinned else kept[u.id] for u in state.units if u.pinned or u.id in kept]
        touched = len(state.units) - len(units) + (1 if text else 0)
        return Outcome(state.with_units(units, applied=self.id), Cost(units_touched=touched))


@register
class RecoveryErrorMode(Strategy):
    """Recovery mode "error": give up and raise.

    ``run`` raises :class:`~ctxsim.errors.RecoveryError` whose message starts with
    ``BREAKER_FAILED`` and gives the tokens, the limit and the target. Always
    applicable (raising is its effect).

    Parameters: none.
    """

    id = "error"
    display_name = "Error (no recovery)"
    rank = RANK_RECOVERY
    phase = "recovery"
    seed = "001"
    summary = "Recovery mode `error`: raise BREAKER_FAILED instead of recovering."
    recovery = True

    def applicable(self, state: ContextState, ctx: StrategyContext | None = None) -> bool:
        return True

    def run(self, state: ContextState, ctx: StrategyContext) -> Outcome:
        # said the same whether or not the context fits: a plan may apply this mode to any context
        raise RecoveryError(
            f"{BREAKER_FAILED}: recovery_mode is 'error', so nothing recovers (context of {state.total_tokens} "
            f"tokens, limit {state.limit}, target {ctx.target(state)})",
            key="recovery_mode",
        )
