"""Codex CLI's local compaction."""

from __future__ import annotations

from pydantic import Field

from ...latency import Cost
from ...model import ContextState, ContextUnit
from ..base import (
    RANK_SUMMARIZE,
    Outcome,
    Params,
    StrategyContext,
    unchanged,
)
from ..common import truncate_paragraphs
from .common import (
    MIN_BODY_TOKENS,
    PeerStrategy,
    body_budget,
    framed_summary,
    is_tool_result,
    share,
    summary_cost,
    summary_of,
)

CODEX_FRAME = (
    "Another model worked on this task before you and wrote this handoff summary. "
    "Build on its work and avoid repeating it:\n"
)


class CodexParams(Params):
    """Codex CLI local compaction constants, scaled to the limit."""

    user_message_share: float = Field(share(20_000), gt=0, description="COMPACT_USER_MESSAGE_MAX_TOKENS")
    summary_tokens: int = Field(2000, ge=MIN_BODY_TOKENS, description="largest summary body (tokens)")


class CodexCompaction(PeerStrategy):
    """Codex CLI's local compaction: initial context + recent user messages + summary.

    Source: openai/codex ``codex-rs/core/src/compact.rs``
    (``build_compacted_history``, ``COMPACT_USER_MESSAGE_MAX_TOKENS`` = 20,000 →
    10 % of the limit) and its ``summary_prefix`` template. The compacted history
    is the initial context (pinned units, system units and the first user
    message), then the most recent other user messages walked back from the newest
    while they fit the user-message budget (the first that does not fit is cut to
    the remainder at paragraph boundaries, then the walk stops), then one summary of
    everything else (assistant replies, tool results, older user messages) as a
    user message with Codex's handoff prefix (paraphrased), at most
    ``summary_tokens`` (2,000). If that is still over the target, the oldest kept
    user messages are dropped (Codex drops the oldest history items when a
    compaction does not fit).

    Cost: one summary call over the summarized units.
    """

    id = "peer:codex"
    display_name = "Codex compaction"
    rank = RANK_SUMMARIZE
    phase = "summarize"
    summary = "Keep the initial context and recent user messages (10 % of the limit), summarize the rest (Codex CLI)."
    source = "https://github.com/openai/codex (codex-rs/core/src/compact.rs)"
    Params = CodexParams

    def _initial(self, state: ContextState) -> set[str]:
        first_user = next((u.id for u in state.units if u.role == "user" and not is_tool_result(u)), None)
        return {u.id for u in state.units if u.pinned or u.role == "system" or u.id == first_user}

    def _plan(self, state: ContextState) -> tuple[set[str], dict[str, ContextUnit], list[ContextUnit]]:
        """(initial ids, recent user messages by id — the last one possibly cut —,
        the units to summarize)."""
        initial = self._initial(state)
        budget = int(self.params.user_message_share * state.limit)
        recent: dict[str, ContextUnit] = {}
        for u in reversed(state.units):
            if u.id in initial or u.role != "user" or is_tool_result(u):
                continue
            if u.token_count <= budget:
                recent[u.id] = u
                budget -= u.token_count
                continue
            cut = truncate_paragraphs(u.content, budget) if budget > 0 else ""
            if cut:
                recent[u.id] = u.with_content(cut)
            break
        rest = [u for u in state.units if u.id not in initial and u.id not in recent]
        return initial, recent, rest

    def applicable(self, state: ContextState, ctx: StrategyContext | None = None) -> bool:
        """Something to summarize, a recent user message to cut, or one to drop."""
        _, recent, rest = self._plan(state)
        over = ctx is None or not state.fits(ctx.target(state))
        return bool(rest) or any(u is not state.unit(i) for i, u in recent.items()) or (over and bool(recent))

    def run(self, state: ContextState, ctx: StrategyContext) -> Outcome:
        initial, recent, rest = self._plan(state)
        kept = [u if u.id in initial else recent[u.id] for u in state.units if u.id in initial or u.id in recent]
        cost = Cost(units_touched=len(recent))
        units = kept
        if rest:
            body = body_budget(state, ctx, kept, CODEX_FRAME, self.params.summary_tokens)
            text, _ = summary_of(state, rest, ctx, body)
            cost += summary_cost(state, rest, text)
            units = kept + [framed_summary(rest, CODEX_FRAME + text, prefix="codex", role="user")]
        new = state.with_units(units, applied=self.id)
        target = ctx.target(state)
        droppable = [u for u in kept if u.id in recent]
        while new.total_tokens > target and droppable:
            gone = droppable.pop(0).id
            new = new.with_units([u for u in new.units if u.id != gone])
        if new.units == state.units:
            return unchanged(state, "nothing to summarize, cut or drop")
        return Outcome(new, cost)
