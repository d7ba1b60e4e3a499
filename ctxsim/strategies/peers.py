"""The compaction heuristics of well-known agent systems, re-implemented as strategies.

They are *not* registered as environment actions: the ``peer:<system>`` policies of
:mod:`ctxsim.policies.peers` apply them. Each docstring gives the source and the
system's documented parameters. Absolute token numbers of a system are scaled to
the context's limit against a 200,000-token reference window
(:data:`REFERENCE_WINDOW`): OpenCode's 40,000-token protected window becomes 20 %
of the limit. Sizes of LLM outputs (summaries) are not window-relative and stay
absolute, but a summary never gets more room than the target leaves (a floor of
:data:`MIN_BODY_TOKENS`).

Unlike ctxsim's own strategies, a peer does what its system does: it does not stop
as soon as the context fits (Anthropic clears every old tool result at once), and
it may leave the context over the target. Every peer keeps pinned units (the
systems' system prompt or instructions); none promises P1.
"""

from __future__ import annotations

from typing import ClassVar, Sequence

from pydantic import Field

from ..latency import Cost
from ..model import ContextState, ContextUnit
from ..tokens import count_tokens, message_overhead
from .base import RANK_CLEAR, RANK_SELECT, RANK_SUMMARIZE, Outcome, Params, Strategy, StrategyContext, unchanged
from .common import replace_span, summary_unit, truncate_paragraphs
from .pruning import call_target

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


class PeerStrategy(Strategy):
    """Base of the peer strategies: ``id`` is the policy name, ``source`` the reference."""

    seed = "peer"
    source: ClassVar[str] = ""


# ---- Anthropic --------------------------------------------------------------------
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


# ---- OpenCode ---------------------------------------------------------------------
OPENCODE_CLEARED = "[Old tool result content cleared]"
OPENCODE_SECTIONS = ("Goal", "Instructions", "Discoveries", "Accomplished", "Relevant files / directories")


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
        if structured is None:
            sections = [("Discoveries", [text])]
        else:
            sections = [
                ("Goal", list(structured.current_task)),
                ("Instructions", list(structured.rules)),
                ("Discoveries", list(structured.facts) + list(structured.decisions) + list(structured.notes)),
                ("Accomplished", [t.line() for t in structured.tool_outcomes] + list(structured.open_items)),
            ]
        main = truncate_paragraphs("\n\n".join(_section_block(t, items) for t, items in sections if items), room)
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


# ---- Letta ------------------------------------------------------------------------
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


# ---- Codex ------------------------------------------------------------------------
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


# ---- LangChain ----------------------------------------------------------------------
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
        from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage, trim_messages

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


#: peer name -> strategy class (the ``peer:<name>`` policies)
PEERS: dict[str, type[PeerStrategy]] = {
    "anthropic-clear": AnthropicClear,
    "opencode": OpenCodeCompaction,
    "letta": LettaSlidingWindow,
    "codex": CodexCompaction,
    "langchain-trim": LangChainTrim,
}
#: peers that need an optional extra: name -> (import check, extra, package)
NEEDS_EXTRA: dict[str, tuple] = {"langchain-trim": (langchain_available, "peers", "langchain-core")}
