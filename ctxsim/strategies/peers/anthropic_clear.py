"""Anthropic's context editing: clearing old tool results."""

from __future__ import annotations

from pydantic import Field

from ...latency import Cost
from ...model import ContextState, ContextUnit
from ..base import (
    RANK_CLEAR,
    Outcome,
    Params,
    StrategyContext,
    unchanged,
)
from .common import PeerStrategy, is_tool_result, share


class AnthropicClearParams(Params):
    """Anthropic ``clear_tool_uses_20250919`` parameters (API defaults)."""

    keep: int = Field(3, ge=0, description="most recent tool uses kept (API default 3)")
    trigger_share: float = Field(share(100_000), gt=0, description="trigger: 100,000 input tokens (share of the limit)")
    clear_at_least_share: float = Field(0.0, ge=0, description="clear_at_least (default unset), share of the limit")
    exclude_tools: tuple[str, ...] = Field((), description="tool names never cleared")
    clear_tool_inputs: bool = Field(False, description="also clear the tool call's arguments")


class AnthropicClear(PeerStrategy):
    """Anthropic's context editing, "clear tool uses" (``clear_tool_uses_20250919``).

    Source: Anthropic API docs, "Context editing" (beta ``context-management-2025-06-27``).
    When the input exceeds the trigger (100,000 tokens = 50 % of a 200k window), the
    API clears the oldest tool results in chronological order, keeping the ``keep``
    most recent tool uses (default 3), and replaces each cleared result with a
    placeholder; the tool call (name and arguments) stays unless
    ``clear_tool_inputs``. Tools in ``exclude_tools`` are never cleared; with
    ``clear_at_least`` set, clearing happens only if it frees that many tokens.

    Here: tool results are units with a tool envelope (or type tool_result / role
    tool); a cleared one keeps its id and envelope, becomes type ``placeholder``
    with content ``[<tool> <arguments>] [cleared]``, and is skipped when the
    placeholder would not be shorter. Pinned units are never cleared. Every old
    tool result is cleared at once, whatever the target. Cost: bookkeeping only
    (server-side, no LLM call).
    """

    id = "peer:anthropic-clear"
    display_name = "Anthropic clear tool uses"
    rank = RANK_CLEAR
    phase = "clear"
    summary = "Clear every tool result but the 3 most recent, leaving a placeholder (Anthropic context editing)."
    source = "https://docs.claude.com/en/docs/build-with-claude/context-editing"
    Params = AnthropicClearParams

    def placeholder(self, unit: ContextUnit) -> str:
        if unit.tool is None or self.params.clear_tool_inputs:
            return "[tool result cleared]"
        return f"[{unit.tool.tool_name} {unit.tool.arguments}] [cleared]"

    def _cleared(self, state: ContextState) -> dict[str, ContextUnit]:
        """Unit id -> its cleared replacement."""
        p = self.params
        if state.total_tokens <= p.trigger_share * state.limit:
            return {}
        tools = [
            u for u in state.units
            if is_tool_result(u) and not u.pinned and (u.tool is None or u.tool.tool_name not in p.exclude_tools)
        ]
        old = tools[: max(0, len(tools) - p.keep)]
        out = {}
        for u in old:
            if u.type == "placeholder":
                continue
            cleared = u.with_content(self.placeholder(u), type="placeholder")
            if cleared.token_count < u.token_count:
                out[u.id] = cleared
        freed = sum(state.unit(uid).token_count - c.token_count for uid, c in out.items())
        return out if freed >= p.clear_at_least_share * state.limit else {}

    def applicable(self, state: ContextState, ctx: StrategyContext | None = None) -> bool:
        return bool(self._cleared(state))

    def run(self, state: ContextState, ctx: StrategyContext) -> Outcome:
        cleared = self._cleared(state)
        if not cleared:
            return unchanged(state, "no tool result to clear")
        units = [cleared.get(u.id, u) for u in state.units]
        return Outcome(state.with_units(units, applied=self.id), Cost(units_touched=len(cleared)))
