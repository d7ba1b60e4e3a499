"""Building the context string of a window within a token budget (design 000's Build).

The budget is ``max_tokens - reserve_for_response`` tokens and covers the whole
request: the built string sent as one message in the window's chat format, with
its framing and reply priming (:func:`ctxsim.tokens.count_messages`), so
``count_tokens(content) <= total_tokens <= budget`` always holds (design 002's budget
test). Item types fall into build groups:

==================  ==================================  ======================
group               item types                          option
==================  ==================================  ======================
system prompt       system_prompt                       include_system_prompt
instructions        instruction                         include_instructions
recent history      user_message, assistant_message,    include_recent_history,
                    tool_result                         max_history_items
relevant memory     retrieved_document, working_memory  include_relevant_memory
other               other                               always
==================  ==================================  ======================

Collection: pinned items first, then the rest, each in design 000's order, greedily
(an item that does not fit is skipped, smaller later ones may still fit). The
string lists the chosen items in design 000's order, joined by ``section_separator``;
an item with a role is rendered with ``message_format``, one without as its content.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Sequence

from ..errors import ContextError, describe_value
from ..relevance import DEFAULT_EMBEDDER, cosine_to_query, get_embedder
from ..tokens import count_messages, count_tokens
from .items import ContextItem, chronological

HISTORY_TYPES = ("user_message", "assistant_message", "tool_result")
MEMORY_TYPES = ("retrieved_document", "working_memory")
_GROUP_OPTION = {
    "system_prompt": "include_system_prompt",
    "instruction": "include_instructions",
    "user_message": "include_recent_history",
    "assistant_message": "include_recent_history",
    "tool_result": "include_recent_history",
    "retrieved_document": "include_relevant_memory",
    "working_memory": "include_relevant_memory",
}


@dataclass(frozen=True)
class BuildOptions:
    """Options of :meth:`ContextWindow.build` (design 000's ``BuildContextOptions``).

    ``max_history_items``: most recent non-pinned history items kept (count).
    ``message_format``: template with ``{role}`` and ``{content}``.
    ``reserve_for_response``: tokens left out of the budget for the reply.
    ``include_ids``: when given, only these items are candidates; ``exclude_ids``:
    never included (pinned or not). ``query_for_memory_retrieval``: when given,
    relevant-memory items (retrieved documents, working memory) are chosen by
    relevance to this text — most relevant first, and one that shares nothing with
    it (cosine 0 with the default embedder) is left out — instead of by design 000's order.
    """

    include_system_prompt: bool = True
    include_instructions: bool = True
    include_recent_history: bool = True
    max_history_items: int = 10
    include_relevant_memory: bool = True
    section_separator: str = "\n\n---\n\n"
    message_format: str = "[{role}]: {content}"
    reserve_for_response: int = 1000
    include_ids: frozenset[str] | None = None
    exclude_ids: frozenset[str] = frozenset()
    query_for_memory_retrieval: str | None = None

    def __post_init__(self) -> None:
        for name in ("max_history_items", "reserve_for_response"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ContextError(f"BuildOptions.{name} must be an integer >= 0, got {describe_value(value)}", key=name)
        if not isinstance(self.message_format, str) or "{content}" not in self.message_format:
            raise ContextError(
                f"BuildOptions.message_format must contain '{{content}}', got {describe_value(self.message_format)}",
                key="message_format",
            )
        for name in ("section_separator", "query_for_memory_retrieval"):
            value = getattr(self, name)
            if not isinstance(value, str) and not (value is None and name == "query_for_memory_retrieval"):
                raise ContextError(f"BuildOptions.{name} must be a string, got {describe_value(value)}", key=name)
        for name in ("include_ids", "exclude_ids"):
            value = getattr(self, name)
            if isinstance(value, str):  # frozenset("h1") would be {"h", "1"}
                raise ContextError(f"BuildOptions.{name} takes a collection of ids, got the string {value!r}", key=name)
            if value is not None and not isinstance(value, Iterable):
                raise ContextError(f"BuildOptions.{name} takes a collection of ids, got {describe_value(value)}", key=name)
        if self.include_ids is not None:
            object.__setattr__(self, "include_ids", frozenset(self.include_ids))
        object.__setattr__(self, "exclude_ids", frozenset(self.exclude_ids))

    def admits(self, item: ContextItem) -> bool:
        """True when the options let ``item`` be a candidate (before budget and history cap)."""
        if item.id in self.exclude_ids or (self.include_ids is not None and item.id not in self.include_ids):
            return False
        option = _GROUP_OPTION.get(item.type)
        return option is None or bool(getattr(self, option))

    def render(self, item: ContextItem) -> str:
        """One item's text: ``message_format`` filled in when it has a role."""
        if item.role is None:
            return item.content
        return self.message_format.replace("{role}", item.role).replace("{content}", item.content)


@dataclass(frozen=True)
class BuiltContext:
    """A built context (design 000's ``BuiltContext``).

    ``total_tokens`` is the request size of ``content`` sent as one message (content,
    framing, reply priming; 0 when empty). ``excluded_ids`` are the items of the
    window that are not in ``content``: filtered by the options, over the budget,
    or removed by the compaction this build ran. ``tokens_freed`` is that
    compaction's gain (0 without one). ``build_time_ms``: measured wall time (ms).
    """

    content: str
    total_tokens: int
    included_ids: tuple[str, ...]
    excluded_ids: tuple[str, ...]
    was_compacted: bool
    tokens_freed: int
    build_time_ms: float = field(default=0.0, compare=False)


def request_tokens(content: str, chat_format: str) -> int:
    """Tokens of ``content`` sent as one chat message (0 for an empty string)."""
    return count_messages([{"role": "system", "content": content}], chat_format) if content else 0


def _history_cap(candidates: Sequence[ContextItem], keep: int) -> set[str]:
    """Ids of non-pinned history items older than the ``keep`` most recent."""
    history = chronological(i for i in candidates if i.type in HISTORY_TYPES and not i.pinned)
    return {i.id for i in history[: max(0, len(history) - keep)]}


def compose(
    items: Iterable[ContextItem], options: BuildOptions, budget: int, chat_format: str
) -> tuple[str, tuple[str, ...]]:
    """The context string and the included ids, for ``items`` in design 000's order.

    Greedy estimate from per-piece counts, then an exact count of the joined string;
    while that is over ``budget`` the last-collected item is dropped (BPE counts of
    a concatenation may differ from the sum of the parts). Pinned items the options
    admit always go in: ContextError when they alone exceed ``budget``.
    """
    candidates = [i for i in items if options.admits(i)]
    capped = _history_cap(candidates, options.max_history_items)
    candidates = [i for i in candidates if i.id not in capped]
    greedy = candidates
    if options.query_for_memory_retrieval is not None:
        candidates, greedy = _by_relevance(candidates, options.query_for_memory_retrieval)
    collection = [i for i in greedy if i.pinned] + [i for i in greedy if not i.pinned]
    separator = count_tokens(options.section_separator)
    used = request_tokens(" ", chat_format) - count_tokens(" ")  # framing + reply priming
    chosen: list[ContextItem] = []
    for item in collection:
        cost = count_tokens(options.render(item)) + (separator if chosen else 0)
        if used + cost <= budget:
            chosen.append(item)
            used += cost
        elif item.pinned:
            _pinned_over(collection, options, budget, chat_format)
    while True:
        ids = {i.id for i in chosen}
        included = [i for i in candidates if i.id in ids]
        content = options.section_separator.join(options.render(i) for i in included)
        if not chosen or request_tokens(content, chat_format) <= budget:
            return content, tuple(i.id for i in included)
        if chosen.pop().pinned:
            _pinned_over(collection, options, budget, chat_format)


def _by_relevance(candidates: list[ContextItem], query: str) -> tuple[list[ContextItem], list[ContextItem]]:
    """(candidates without the unpinned memory items that share nothing with
    ``query``, the order to collect them in: the other items in design 000's order,
    then the memory items most relevant first)."""
    memory = [i for i in candidates if i.type in MEMORY_TYPES and not i.pinned]
    if not memory:
        return candidates, candidates
    scores = cosine_to_query([i.content for i in memory], query, get_embedder(DEFAULT_EMBEDDER))
    ranked = [memory[j] for j in sorted(range(len(memory)), key=lambda j: -scores[j]) if scores[j] > 0]
    kept = {i.id for i in ranked}
    others = [i for i in candidates if not (i.type in MEMORY_TYPES and not i.pinned)]
    return [i for i in candidates if i in others or i.id in kept], others + ranked


def _pinned_over(collection: Sequence[ContextItem], options: BuildOptions, budget: int, chat_format: str) -> None:
    """Raise: the pinned items do not fit ``budget`` (they are never left out silently)."""
    pinned = [i for i in collection if i.pinned]
    need = request_tokens(options.section_separator.join(options.render(i) for i in pinned), chat_format)
    raise ContextError(
        f"the {len(pinned)} pinned item(s) need {need} tokens, over the build budget of {budget} "
        "(max_tokens - reserve_for_response): lower reserve_for_response or unpin items",
        key="reserve_for_response",
    )
