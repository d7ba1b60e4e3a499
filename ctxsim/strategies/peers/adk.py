"""Google ADK's events compaction: a sliding window of turns, summarized every N turns."""

from __future__ import annotations

from pydantic import Field, model_validator

from ...model import ContextState, ContextUnit
from ..base import RANK_SUMMARIZE, Outcome, Params, StrategyContext, unchanged
from .common import (
    MIN_BODY_TOKENS,
    PeerStrategy,
    body_budget,
    framed_summary,
    summary_cost,
    summary_of,
)


class AdkParams(Params):
    """``EventsCompactionConfig`` (the documentation's example values)."""

    compaction_interval: int = Field(3, ge=1, description="completed turns that trigger a compaction")
    overlap_size: int = Field(1, ge=0, description="turns of the previous window summarized again")
    summary_tokens: int = Field(500, ge=MIN_BODY_TOKENS, description="largest body of one window's summary (tokens)")

    @model_validator(mode="after")
    def _overlap_below_interval(self) -> "AdkParams":
        if self.overlap_size >= self.compaction_interval:
            raise ValueError("overlap_size must be smaller than compaction_interval")
        return self


class AdkCompaction(PeerStrategy):
    """Google ADK's sliding-window events compaction.

    Source: google/adk-docs ``docs/context/compaction.md`` (``EventsCompactionConfig``).
    A turn (ADK's invocation) is the units of one ``turn`` number; the system
    prompt and pinned units are the agent's instructions, not events. After every
    ``compaction_interval`` completed turns (3) the turns since the last compaction,
    plus the last ``overlap_size`` (1) turns of the previous window, are summarized
    into one event; later requests carry the summaries instead of the events they
    cover. With T turns in the context, windows end at turns 3, 6, …, ⌊T/3⌋·3 (each
    but the first starting one turn early); the turns after the last window stay
    verbatim. Each window's summary is at most ``summary_tokens`` (500), and the
    windows share what the target leaves. ADK compacts on its schedule, not to a
    target: the context may stay over the limit.

    Cost: one summary call per window.
    """

    id = "peer:adk"
    display_name = "Google ADK events compaction"
    rank = RANK_SUMMARIZE
    phase = "summarize"
    summary = "Summarize every 3 turns with a 1-turn overlap; recent turns stay verbatim (Google ADK)."
    source = "https://google.github.io/adk-docs/context/compaction/"
    Params = AdkParams

    def windows(self, state: ContextState) -> list[list[ContextUnit]]:
        """The units of each compaction window, oldest first."""
        events = [u for u in state.units if not (u.pinned or u.role == "system")]
        turns = list(dict.fromkeys(u.turn for u in events))
        n, m = self.params.compaction_interval, self.params.overlap_size
        spans = [set(turns[max(0, k * n - m if k else 0) : (k + 1) * n]) for k in range(len(turns) // n)]
        return [[u for u in events if u.turn in span] for span in spans]

    def applicable(self, state: ContextState, ctx: StrategyContext | None = None) -> bool:
        return bool(self.windows(state))

    def run(self, state: ContextState, ctx: StrategyContext) -> Outcome:
        windows = self.windows(state)
        if not windows:
            return unchanged(state, f"fewer than {self.params.compaction_interval} turns")
        covered = {u.id for window in windows for u in window}
        kept = [u for u in state.units if u.id not in covered]
        room = body_budget(state, ctx, kept, "", self.params.summary_tokens * len(windows))
        body = max(MIN_BODY_TOKENS, room // len(windows))
        summaries, cost = [], None
        for window in windows:
            text, _ = summary_of(state, window, ctx, body)
            summaries.append(framed_summary(window, text, prefix="adk", role="user"))
            step = summary_cost(state, window, text)
            cost = step if cost is None else cost + step
        first = next(i for i, u in enumerate(state.units) if u.id in covered)
        units = [u for u in state.units[:first] if u.id not in covered] + summaries
        units += [u for u in state.units[first:] if u.id not in covered]
        new = state.with_units(units, applied=self.id)
        return Outcome(new, cost)
