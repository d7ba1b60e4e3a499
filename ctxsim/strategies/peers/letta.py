"""Letta (MemGPT): partial-evict sliding window with a recursive summary."""

from __future__ import annotations

from pydantic import Field

from ...model import ContextState, ContextUnit
from ...tokens import count_tokens
from ..base import (
    RANK_SUMMARIZE,
    Outcome,
    Params,
    StrategyContext,
    unchanged,
)
from ..common import replace_span
from .common import (
    MIN_BODY_TOKENS,
    PeerStrategy,
    body_budget,
    framed_summary,
    summary_cost,
    summary_of,
)

LETTA_FRAME = "Note: earlier messages are hidden from view because of memory constraints. A summary of them:\n"


class LettaParams(Params):
    """Letta summarizer settings."""

    keep_share: float = Field(0.30, gt=0, lt=1, description="partial_evict_summarizer_percentage: messages kept")
    summary_tokens: int = Field(130, ge=MIN_BODY_TOKENS, description="the summary prompt's 100-word limit, in tokens")


class LettaSlidingWindow(PeerStrategy):
    """Letta (MemGPT) partial-evict sliding window with a recursive summary.

    Source: letta-ai/letta ``letta/services/summarizer/summarizer.py``
    (``_partial_evict_buffer_summarization``) and ``letta/prompts/gpt_summarize.py``.
    Counting messages, not tokens: with N units, the cut is the first assistant
    unit at or after ``round((1 − keep_share) · N)`` (keep_share =
    ``partial_evict_summarizer_percentage`` = 0.30, so about the newest 30 % stay).
    Units between the system prompt (unit 0, when its role is system) and the cut
    are folded into one summary — a prior summary among them is folded too, which
    makes it recursive — inserted where they were, role user, framed by Letta's
    "prior messages have been hidden" note (paraphrased). The summary prompt asks
    for fewer than 100 words (``summary_tokens`` = 130). When no assistant unit
    follows, Letta raises; here the cut is the computed index. Pinned units stay.

    Cost: one summary call over the evicted units.
    """

    id = "peer:letta"
    display_name = "Letta sliding window"
    rank = RANK_SUMMARIZE
    phase = "summarize"
    summary = "Keep the newest 30 % of messages, fold the rest into one recursive summary (Letta/MemGPT)."
    source = "https://github.com/letta-ai/letta (letta/services/summarizer/summarizer.py)"
    Params = LettaParams

    def _evicted(self, state: ContextState) -> list[ContextUnit]:
        units = state.units
        start = round((1 - self.params.keep_share) * len(units))
        cut = next((i for i in range(start, len(units)) if units[i].role == "assistant"), start)
        first = 1 if units and units[0].role == "system" else 0
        return [u for u in units[first:cut] if not u.pinned]

    def applicable(self, state: ContextState, ctx: StrategyContext | None = None) -> bool:
        evicted = self._evicted(state)
        return bool(evicted) and state.tokens_of(evicted) > MIN_BODY_TOKENS + count_tokens(LETTA_FRAME)

    def run(self, state: ContextState, ctx: StrategyContext) -> Outcome:
        evicted = self._evicted(state)
        if not evicted:
            return unchanged(state, "nothing to evict")
        gone = {u.id for u in evicted}
        kept = [u for u in state.units if u.id not in gone]
        body = body_budget(state, ctx, kept, LETTA_FRAME, self.params.summary_tokens)
        text, _ = summary_of(state, evicted, ctx, body)
        unit = framed_summary(evicted, LETTA_FRAME + text, prefix="letta", role="user")
        new = state.with_units(replace_span(state.units, gone, unit), applied=self.id)
        return Outcome(new, summary_cost(state, evicted, text))
