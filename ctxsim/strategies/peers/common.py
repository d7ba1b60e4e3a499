"""What the peer strategies share: scaling to the reference window, summary budgets and framing."""

from __future__ import annotations

from typing import ClassVar, Sequence

from ...latency import Cost
from ...model import ContextState, ContextUnit
from ...summarize.structured import StructuredSummary
from ...tokens import count_tokens, message_overhead
from ..base import (
    Strategy,
    StrategyContext,
)
from ..common import summary_unit, truncate_paragraphs

#: the context window the systems' absolute token numbers are scaled against
REFERENCE_WINDOW = 200_000
#: the smallest summary body a peer writes (tokens)
MIN_BODY_TOKENS = 50
#: tokenization of a framed summary may differ from the sum of its parts by a token or two
_SLACK_TOKENS = 2


def share(tokens: int) -> float:
    """A system's absolute token number as a share of the reference window."""
    return tokens / REFERENCE_WINDOW


def is_tool_result(unit: ContextUnit) -> bool:
    return unit.tool is not None or unit.type == "tool_result" or unit.role == "tool"


def priming(state: ContextState) -> int:
    """Tokens a request costs besides its units (the reply priming)."""
    return state.total_tokens - state.tokens_of(state.units)


def body_budget(state: ContextState, ctx: StrategyContext, kept: Sequence[ContextUnit], frame: str, cap: int) -> int:
    """Summary body tokens: what the target leaves after ``kept`` units and a summary
    unit's framing (``frame`` text plus message overhead), at most ``cap``."""
    framing = count_tokens(frame) + message_overhead(state.message_format) + _SLACK_TOKENS
    room = ctx.target(state) - priming(state) - state.tokens_of(kept) - framing
    return max(MIN_BODY_TOKENS, min(cap, room))


def summary_of(state: ContextState, units: Sequence[ContextUnit], ctx: StrategyContext, body_tokens: int):
    """(summary text within ``body_tokens``, structured summary or None) of ``units``."""
    depth = max(u.summary_depth for u in units)
    result = ctx.summarizer.summarize_units(units, body_tokens, task=ctx.query_for(state), depth=depth)
    return truncate_paragraphs(result.text, body_tokens), result.structured


def summary_cost(state: ContextState, units: Sequence[ContextUnit], written: str) -> Cost:
    """One LLM summary call reading ``units`` and writing ``written``."""
    return Cost.summary(state.tokens_of(units), count_tokens(written)) + Cost(units_touched=len(units))


def framed_summary(units: Sequence[ContextUnit], content: str, *, prefix: str, role: str) -> ContextUnit:
    """A summary unit replacing ``units`` (ids, span, depth) with the system's own text."""
    return summary_unit(units, content, prefix=prefix).with_content(content, role=role)


def _section_block(title: str, items: Sequence[str]) -> str:
    """A markdown section: ``## title`` and one ``- item`` line per item."""
    return f"## {title}\n" + "\n".join(f"- {item}" for item in items)


#: a system's summary template: (section title, the structured-summary fields it holds)
Template = Sequence[tuple[str, Sequence[str]]]


def sections_text(structured: StructuredSummary, template: Template) -> str:
    """The non-empty sections of ``template`` filled from ``structured`` (tool
    outcomes and artifacts as their one-line form), as markdown."""
    blocks = []
    for title, names in template:
        items = [item if isinstance(item, str) else item.line() for name in names for item in getattr(structured, name)]
        if items:
            blocks.append(_section_block(title, items))
    return "\n\n".join(blocks)


def templated_summary(state: ContextState, units: Sequence[ContextUnit], ctx: StrategyContext, body_tokens: int,
                      template: Template) -> str:
    """A summary of ``units`` within ``body_tokens`` in a system's section template
    (the plain summary text when the summarizer gives no structure)."""
    text, structured = summary_of(state, units, ctx, body_tokens)
    if structured is None:
        return text
    return truncate_paragraphs(sections_text(structured, template), body_tokens) or text


def instructions_and_conversation(state: ContextState) -> tuple[list[ContextUnit], list[ContextUnit]]:
    """(pinned and system units — a system's instructions —, every other unit), in order."""
    instructions = [u for u in state.units if u.pinned or u.role == "system"]
    kept = {u.id for u in instructions}
    return instructions, [u for u in state.units if u.id not in kept]


def over_trigger(state: ContextState, trigger_share: float) -> bool:
    """The context passes ``trigger_share`` of its limit and holds a conversation to compact."""
    return state.total_tokens > trigger_share * state.limit and bool(instructions_and_conversation(state)[1])


class PeerStrategy(Strategy):
    """Base of the peer strategies: ``id`` is the policy name, ``source`` the reference."""

    seed = "peer"
    source: ClassVar[str] = ""
