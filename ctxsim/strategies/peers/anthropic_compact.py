"""Anthropic's threshold compaction: everything before the compaction point becomes one summary."""

from __future__ import annotations

from pydantic import Field

from ...model import ContextState
from ..base import RANK_SUMMARIZE, Outcome, Params, StrategyContext, unchanged
from .common import (
    MIN_BODY_TOKENS,
    PeerStrategy,
    body_budget,
    framed_summary,
    instructions_and_conversation,
    over_trigger,
    summary_cost,
    templated_summary,
)

#: the default summary prompt's sections, filled from a structured summary
ANTHROPIC_COMPACT_TEMPLATE = (
    ("Task Overview", ("current_task", "rules")),
    ("Current State", ("tool_outcomes", "artifacts")),
    ("Important Discoveries", ("facts", "decisions")),
    ("Next Steps", ("open_items",)),
    ("Context to Preserve", ("notes",)),
)


class AnthropicCompactParams(Params):
    """Threshold compaction settings."""

    trigger_share: float = Field(0.75, gt=0, le=1, description="the trigger you set, share of the window")
    summary_tokens: int = Field(2000, ge=MIN_BODY_TOKENS, description="largest summary body (tokens)")


class AnthropicCompact(PeerStrategy):
    """The Messages API's threshold compaction (``compact_20260112``).

    Source: Anthropic API docs, "Compaction at a token threshold" (beta
    ``compact-2026-01-12``). Once the input passes the trigger (``trigger_share``
    of the window; the trigger is the caller's setting), the API writes a summary
    of the conversation so far and every message before the compaction point is
    dropped from later requests: the conversation becomes the system prompt and one
    compaction block. The default summary prompt asks for a task overview, the
    current state, important discoveries, next steps and context to preserve; here
    those sections are filled from a structured summary. The system prompt is a
    request parameter of its own and is never compacted (pinned and system units
    stay). The summary is the assistant's (the compaction block is response content).

    Cost: one summary call over the summarized units.
    """

    id = "peer:anthropic-compact"
    display_name = "Anthropic threshold compaction"
    rank = RANK_SUMMARIZE
    phase = "summarize"
    summary = "Replace every message before the compaction point by one summary (Anthropic API compaction)."
    source = "https://platform.claude.com/docs/en/build-with-claude/compaction-threshold"
    Params = AnthropicCompactParams

    def applicable(self, state: ContextState, ctx: StrategyContext | None = None) -> bool:
        return over_trigger(state, self.params.trigger_share)

    def run(self, state: ContextState, ctx: StrategyContext) -> Outcome:
        system, conversation = instructions_and_conversation(state)
        if not conversation:
            return unchanged(state, "nothing before the compaction point")
        body = body_budget(state, ctx, system, "", self.params.summary_tokens)
        text = templated_summary(state, conversation, ctx, body, ANTHROPIC_COMPACT_TEMPLATE)
        unit = framed_summary(conversation, text, prefix="anthropic-compact", role="assistant")
        new = state.with_units(system + [unit], applied=self.id)
        return Outcome(new, summary_cost(state, conversation, text))
