"""LangChain's trim_messages, through the real library."""

from __future__ import annotations

from ...latency import Cost
from ...model import ContextState, ContextUnit
from ..base import (
    RANK_SELECT,
    Outcome,
    StrategyContext,
    unchanged,
)
from .common import PeerStrategy, priming


def langchain_available() -> bool:
    """True when langchain-core (the optional extra ``peers``) is installed."""
    from importlib.util import find_spec

    return find_spec("langchain_core") is not None


class LangChainTrim(PeerStrategy):
    """LangChain's ``trim_messages``, through the real library (extra ``peers``).

    Source: ``langchain_core.messages.trim_messages`` with ``strategy="last"``,
    ``include_system=True``, ``allow_partial=False``, ``max_tokens`` = the target
    and ``token_counter`` = ctxsim's message count (content plus chat framing,
    exactly the state's own count). Units become SystemMessage / HumanMessage /
    AIMessage / ToolMessage by role, carrying their unit id, and the kept messages
    map back to the original units. LangChain has no pinning: pinned units are set
    aside, stay in place, and shrink ``max_tokens`` by their tokens. The result
    fits unless the pinned units, or with them a leading system message (which
    ``include_system`` keeps whatever its size), do not fit alone.

    Cost: bookkeeping only (no LLM call).
    """

    id = "peer:langchain-trim"
    display_name = "LangChain trim_messages"
    rank = RANK_SELECT
    phase = "discard"
    summary = "Keep the system message and the newest messages that fit (LangChain trim_messages, strategy last)."
    source = "langchain_core.messages.trim_messages (https://python.langchain.com/docs/how_to/trim_messages/)"

    def run(self, state: ContextState, ctx: StrategyContext) -> Outcome:
        from langchain_core.messages import (
            AIMessage,
            HumanMessage,
            SystemMessage,
            ToolMessage,
            trim_messages,
        )

        free = [u for u in state.units if not u.pinned]
        by_id = {u.id: u for u in free}

        def message(u: ContextUnit):
            if u.role == "system":
                return SystemMessage(content=u.content, id=u.id)
            if u.role == "assistant":
                return AIMessage(content=u.content, id=u.id)
            if u.role == "tool":
                return ToolMessage(content=u.content, id=u.id, tool_call_id=u.tool.call_id if u.tool else u.id)
            return HumanMessage(content=u.content, id=u.id)

        max_tokens = ctx.target(state) - priming(state) - state.tokens_of(u for u in state.units if u.pinned)
        kept = trim_messages(
            [message(u) for u in free],
            max_tokens=max(0, max_tokens),
            token_counter=lambda msgs: state.tokens_of(by_id[m.id] for m in msgs),
            strategy="last",
            include_system=True,
            allow_partial=False,
        )
        keep = {m.id for m in kept}
        if len(keep) == len(free):
            return unchanged(state, "trim_messages kept every message")
        units = [u for u in state.units if u.pinned or u.id in keep]
        return Outcome(state.with_units(units, applied=self.id), Cost(units_touched=len(free) - len(keep)))
