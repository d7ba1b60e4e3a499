"""OpenCode's compaction: prune old tool outputs, then summarize."""

from __future__ import annotations

from typing import Sequence

from pydantic import Field

from ...latency import Cost
from ...model import ContextState, ContextUnit
from ...tokens import count_tokens
from ..base import (
    RANK_SUMMARIZE,
    Outcome,
    Params,
    StrategyContext,
    unchanged,
)
from ..common import replace_span, truncate_paragraphs
from ..pruning import call_target
from .common import (
    _SLACK_TOKENS,
    MIN_BODY_TOKENS,
    PeerStrategy,
    _section_block,
    body_budget,
    framed_summary,
    is_tool_result,
    sections_text,
    share,
    summary_cost,
    summary_of,
)

OPENCODE_CLEARED = "[Old tool result content cleared]"
OPENCODE_SECTIONS = ("Goal", "Instructions", "Discoveries", "Accomplished", "Relevant files / directories")
#: the template's sections filled from a structured summary (the files section is written apart)
OPENCODE_TEMPLATE = (
    ("Goal", ("current_task",)),
    ("Instructions", ("rules",)),
    ("Discoveries", ("facts", "decisions", "notes")),
    ("Accomplished", ("tool_outcomes", "open_items")),
)


class OpenCodeParams(Params):
    """OpenCode ``SessionCompaction`` constants, scaled to the limit."""

    prune_protect_share: float = Field(share(40_000), ge=0, description="PRUNE_PROTECT: recent tool output kept")
    prune_minimum_share: float = Field(share(20_000), ge=0, description="PRUNE_MINIMUM: prune only when it frees more")
    protect_turns: int = Field(2, ge=0, description="tool calls of the last N user turns are never pruned")
    protected_tools: tuple[str, ...] = Field(("skill",), description="PRUNE_PROTECTED_TOOLS")
    tail_share: float = Field(0.25, ge=0, le=1, description="verbatim recent tail, share of the target")
    summary_tokens: int = Field(2000, ge=MIN_BODY_TOKENS, description="largest summary body (tokens)")


class OpenCodeCompaction(PeerStrategy):
    """OpenCode's session compaction: prune old tool outputs, then summarize the head.

    Source: sst/opencode ``packages/opencode/src/session/compaction.ts`` and its
    compaction prompt. 1) *Prune*: walking back from the newest unit, tool results
    of the last ``protect_turns`` user turns (2) are skipped, then tool-output
    tokens are accumulated; once they exceed ``PRUNE_PROTECT`` (40,000 of 200k
    → 20 % of the limit) every older tool result is marked for pruning; the walk
    stops at a summary or an already-pruned result; tools in ``protected_tools``
    ("skill") are never pruned. The marks apply only when they free more than
    ``PRUNE_MINIMUM`` (20,000 → 10 %). A pruned result keeps its unit and reads
    ``[Old tool result content cleared]``. 2) *Compact*, only if still over the
    target: the newest units that fit ``tail_share`` of the target (25 %, the
    verbatim tail of OpenCode's compaction) stay; everything older becomes one
    assistant summary in OpenCode's template (Goal / Instructions / Discoveries /
    Accomplished / Relevant files / directories), at most ``summary_tokens``
    (2,000) tokens, where the first summarized unit was.

    Cost: bookkeeping for the prune; one summary call over the head.
    """

    id = "peer:opencode"
    display_name = "OpenCode compaction"
    rank = RANK_SUMMARIZE
    phase = "summarize"
    summary = "Prune tool outputs beyond a recent 20 % window, keep a 25 % tail, summarize the rest (OpenCode)."
    source = "https://github.com/sst/opencode (packages/opencode/src/session/compaction.ts)"
    Params = OpenCodeParams

    def prune(self, state: ContextState) -> dict[str, ContextUnit]:
        """Unit id -> pruned replacement (OpenCode's ``prune``)."""
        p = self.params
        protect, minimum = p.prune_protect_share * state.limit, p.prune_minimum_share * state.limit
        turns = total = freed = 0
        marked: dict[str, ContextUnit] = {}
        for u in reversed(state.units):
            if u.role == "user" and not is_tool_result(u):
                turns += 1
            if turns < p.protect_turns:
                continue
            if u.type == "summary":
                break
            if not is_tool_result(u) or u.pinned or (u.tool is not None and u.tool.tool_name in p.protected_tools):
                continue
            if u.content == OPENCODE_CLEARED:
                break
            total += u.token_count
            if total > protect:
                pruned = u.with_content(OPENCODE_CLEARED)
                if pruned.token_count < u.token_count:
                    marked[u.id] = pruned
                    freed += u.token_count - pruned.token_count
        return marked if freed > minimum else {}

    def write_summary(self, state: ContextState, head: Sequence[ContextUnit], ctx: StrategyContext, body: int) -> str:
        """OpenCode's template within ``body`` tokens: the sections filled from a
        structured summary of ``head``, then the files its tool calls touched (given
        at most half of the budget, so they are never cut off by the sections)."""
        files = list(dict.fromkeys(t for u in head if u.tool is not None and (t := call_target(u.tool))))
        files_block = truncate_paragraphs(_section_block(OPENCODE_SECTIONS[-1], files), body // 2) if files else ""
        room = body - (count_tokens(files_block) + _SLACK_TOKENS if files_block else 0)
        text, structured = summary_of(state, head, ctx, room)
        filled = _section_block("Discoveries", [text]) if structured is None else sections_text(structured, OPENCODE_TEMPLATE)
        main = truncate_paragraphs(filled, room)
        return "\n\n".join(part for part in (main, files_block) if part) or text

    def run(self, state: ContextState, ctx: StrategyContext) -> Outcome:
        pruned = self.prune(state)
        if pruned:
            state = state.with_units([pruned.get(u.id, u) for u in state.units], applied=self.id)
        cost = Cost(units_touched=len(pruned))
        target = ctx.target(state)
        if state.total_tokens <= target:
            return Outcome(state, cost) if pruned else unchanged(state, "fits the target")
        tail_budget, tail = self.params.tail_share * target, set()
        used = 0
        for u in reversed(state.units):
            if u.pinned:
                continue
            if used + state.unit_cost(u) > tail_budget:
                break
            tail.add(u.id)
            used += state.unit_cost(u)
        head = [u for u in state.units if not u.pinned and u.id not in tail]
        if not head:
            return Outcome(state, cost) if pruned else unchanged(state, "nothing older than the tail")
        kept = [u for u in state.units if u.pinned or u.id in tail]
        body = body_budget(state, ctx, kept, "", self.params.summary_tokens)
        content = self.write_summary(state, head, ctx, body)
        unit = framed_summary(head, content, prefix="opencode", role="assistant")
        units = replace_span(state.units, {u.id for u in head}, unit)
        new = state.with_units(units, applied=None if pruned else self.id)  # one history entry per application
        return Outcome(new, cost + summary_cost(state, head, content))
