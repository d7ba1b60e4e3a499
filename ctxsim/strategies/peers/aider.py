"""Aider's chat-history summarization: the history is capped, older turns summarized."""

from __future__ import annotations

from pydantic import Field

from ...model import ContextState, ContextUnit
from ..base import RANK_SUMMARIZE, Outcome, Params, StrategyContext, unchanged
from ..common import replace_span
from .common import (
    MIN_BODY_TOKENS,
    PeerStrategy,
    framed_summary,
    summary_cost,
    summary_of,
)

AIDER_FRAME = "I spoke to you previously about a number of things.\n"


class AiderParams(Params):
    """Aider's history budget: min(max(window / 16, floor), ceiling) tokens."""

    window_divisor: int = Field(16, ge=1, description="history budget = window / 16 ...")
    floor_tokens: int = Field(1024, ge=MIN_BODY_TOKENS, description="... at least 1,024 tokens ...")
    ceiling_tokens: int = Field(8192, ge=MIN_BODY_TOKENS, description="... at most 8,192 tokens")
    min_split: int = Field(4, ge=1, description="with this many messages or fewer, summarize them all")


class AiderHistory(PeerStrategy):
    """Aider's ``ChatSummary`` of the chat history.

    Source: Aider-AI/aider ``aider/history.py`` (``ChatSummary``) and
    ``aider/coders/base_coder.py`` (``max_chat_history_tokens``). The chat history
    (the done messages: everything but the system prompt, pinned units and the
    current exchange, i.e. the units from the last user message on) may hold
    ``min(max(window / 16, 1,024), 8,192)`` tokens. When it holds more, the newest
    messages worth under half of that budget stay verbatim, the split is moved back
    so that the summarized head ends with an assistant message, and the head becomes
    one user message opening with "I spoke to you previously about a number of
    things." (with ``min_split`` (4) messages or fewer, all of them are summarized).
    The summary gets what the budget leaves after the tail (Aider summarizes again,
    deeper, until summary and tail fit). The rest of the prompt is not Aider's to
    shrink: when the history was within its budget nothing changes, and the context
    may stay over the limit.

    Cost: one summary call over the summarized messages.
    """

    id = "peer:aider"
    display_name = "Aider chat summary"
    rank = RANK_SUMMARIZE
    phase = "summarize"
    summary = "Cap the chat history at min(max(window/16, 1,024), 8,192) tokens, summarizing older turns (Aider)."
    source = "https://github.com/Aider-AI/aider (aider/history.py)"
    Params = AiderParams

    def budget(self, state: ContextState) -> int:
        p = self.params
        return min(max(state.limit // p.window_divisor, p.floor_tokens), p.ceiling_tokens)

    def history(self, state: ContextState) -> list[ContextUnit]:
        """The done messages: units before the current exchange, system and pinned ones aside."""
        users = [i for i, u in enumerate(state.units) if u.role == "user" and u.tool is None]
        current = users[-1] if users else len(state.units)
        return [u for u in state.units[:current] if not (u.pinned or u.role == "system")]

    def split(self, state: ContextState, history: list[ContextUnit]) -> int:
        """Index of the first message kept verbatim (Aider's ``summarize_real``)."""
        if len(history) <= self.params.min_split:
            return len(history)
        half, tail, index = self.budget(state) // 2, 0, len(history)
        for i in range(len(history) - 1, -1, -1):
            if tail + history[i].token_count >= half:
                break
            tail += history[i].token_count
            index = i
        while index > 1 and history[index - 1].role != "assistant":
            index -= 1
        return len(history) if index <= self.params.min_split else index

    def applicable(self, state: ContextState, ctx: StrategyContext | None = None) -> bool:
        return state.tokens_of(self.history(state)) > self.budget(state)

    def run(self, state: ContextState, ctx: StrategyContext) -> Outcome:
        history = self.history(state)
        if state.tokens_of(history) <= self.budget(state):
            return unchanged(state, "the chat history is within its budget")
        index = self.split(state, history)
        head, tail = history[:index], history[index:]
        body = max(MIN_BODY_TOKENS, self.budget(state) - state.tokens_of(tail))
        text, _ = summary_of(state, head, ctx, body)
        unit = framed_summary(head, AIDER_FRAME + text, prefix="aider", role="user")
        new = state.with_units(replace_span(state.units, {u.id for u in head}, unit), applied=self.id)
        return Outcome(new, summary_cost(state, head, text))
