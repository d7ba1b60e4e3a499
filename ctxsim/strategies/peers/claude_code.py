"""Claude Code's auto-compact: one structured summary, then the files it re-reads."""

from __future__ import annotations

from pydantic import Field

from ...model import ContextState, ContextUnit
from ..base import RANK_SUMMARIZE, Outcome, Params, StrategyContext, unchanged
from .common import (
    MIN_BODY_TOKENS,
    PeerStrategy,
    body_budget,
    framed_summary,
    instructions_and_conversation,
    over_trigger,
    share,
    summary_cost,
    templated_summary,
)

CLAUDE_CODE_FRAME = (
    "This session is being continued from a previous conversation that ran out of context. "
    "The conversation is summarized below:\n"
)
#: the compact prompt's sections, filled from a structured summary
CLAUDE_CODE_TEMPLATE = (
    ("Primary Request and Intent", ("current_task",)),
    ("Key Technical Concepts", ("facts", "decisions")),
    ("Files and Code Sections", ("artifacts",)),
    ("Errors and fixes", ("tool_outcomes",)),
    ("All user messages", ("rules",)),
    ("Pending Tasks", ("open_items",)),
    ("Current Work", ("notes",)),
)


class ClaudeCodeParams(Params):
    """Claude Code auto-compact constants, file sizes scaled to the limit."""

    trigger_share: float = Field(0.835, gt=0, le=1, description="auto-compact threshold, share of the window")
    max_files: int = Field(5, ge=0, description="recently read files re-attached after the summary")
    file_share: float = Field(share(5_000), ge=0, description="largest re-attached file (5,000 tokens)")
    files_share: float = Field(share(50_000), ge=0, description="all re-attached files together (50,000 tokens)")
    summary_tokens: int = Field(2000, ge=MIN_BODY_TOKENS, description="largest summary body (tokens)")
    read_tools: tuple[str, ...] = Field(("read_file", "open", "cat", "view"), description="tools that read a file")


class ClaudeCodeCompact(PeerStrategy):
    """Claude Code's auto-compact.

    Source: Claude Code documentation ("/compact", auto-compact) and its compact
    prompt. When the conversation passes about 83.5 % of the window
    (``trigger_share``), the whole conversation is replaced by one structured
    summary in the compact prompt's sections (primary request and intent, key
    technical concepts, files and code sections, errors and fixes, all user
    messages, pending tasks, current work), written as a user message that says the
    session continues a previous one. After it, Claude Code re-attaches what the
    model would otherwise read again: the instructions file (here: pinned and
    system units, kept ahead of the summary), the plan (the newest ``plan_ref``
    unit) and up to ``max_files`` (5) files read most recently, each of at most
    ``file_share`` of the limit (5,000 of 200,000 tokens) and together at most
    ``files_share`` (50,000), as their latest read. A file read is a successful
    tool result of one of ``read_tools`` with a target path. Nothing else is kept.

    Cost: one summary call over the summarized units.
    """

    id = "peer:claude-code"
    display_name = "Claude Code auto-compact"
    rank = RANK_SUMMARIZE
    phase = "summarize"
    summary = "Replace the conversation by one structured summary; re-attach the plan and up to 5 recent files (Claude Code)."
    source = "https://docs.claude.com/en/docs/claude-code (auto-compact, /compact)"
    Params = ClaudeCodeParams

    def _is_read(self, unit: ContextUnit) -> bool:
        tool = unit.tool
        return tool is not None and tool.tool_name in self.params.read_tools and tool.outcome == "success" and bool(tool.target)

    def attachments(self, state: ContextState) -> list[ContextUnit]:
        """The plan and the recent files re-attached after the summary, in context order."""
        p = self.params
        plan = next((u for u in reversed(state.units) if u.type == "plan_ref" and not u.pinned), None)
        per_file, room = p.file_share * state.limit, p.files_share * state.limit
        files: dict[str, ContextUnit] = {}
        for u in reversed(state.units):
            if len(files) >= p.max_files:
                break
            if u.pinned or not self._is_read(u) or u.tool.target in files:
                continue
            if u.token_count <= per_file and u.token_count <= room:
                files[u.tool.target] = u
                room -= u.token_count
        chosen = {u.id for u in files.values()} | ({plan.id} if plan else set())
        return [u for u in state.units if u.id in chosen]

    def applicable(self, state: ContextState, ctx: StrategyContext | None = None) -> bool:
        return over_trigger(state, self.params.trigger_share)

    def run(self, state: ContextState, ctx: StrategyContext) -> Outcome:
        instructions, conversation = instructions_and_conversation(state)
        if not conversation:
            return unchanged(state, "nothing to summarize")
        attached = self.attachments(state)
        body = body_budget(state, ctx, instructions + attached, CLAUDE_CODE_FRAME, self.params.summary_tokens)
        text = templated_summary(state, conversation, ctx, body, CLAUDE_CODE_TEMPLATE)
        unit = framed_summary(conversation, CLAUDE_CODE_FRAME + text, prefix="claude-code", role="user")
        new = state.with_units(instructions + [unit] + attached, applied=self.id)
        return Outcome(new, summary_cost(state, conversation, text))
