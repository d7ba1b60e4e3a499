"""An agent's LangChain messages (langchain-core ``BaseMessage`` lists, as a LangGraph
agent's state holds them), compacted in one call: messages in, messages out — what
LangChain's ``trim_messages`` takes and returns, broken by a policy instead.

:func:`compact_langchain_messages` reads the messages as OpenAI-style chat messages
(langchain-core's own ``convert_to_openai_messages``), breaks them with
:func:`ctxsim.messages.compact_messages`, and writes the result back as messages:

* a message the break kept unchanged comes back as it came (a copy: same type, ``id``,
  metadata);
* a message compressed in place is a copy with the new text as ``content`` (its ``id``
  kept, so LangGraph's ``add_messages`` replaces the stored one); an AI message whose
  tool calls lost their results keeps only the answered ``tool_calls``, and a call whose
  arguments the break rewrote takes the new ``args``;
* what the break wrote (a summary, a placeholder, a pointer, a handover) is a new
  ``AIMessage`` (or a ``HumanMessage``: a tool result whose call is gone);
* the result stays valid for a chat model: every tool message answers a kept call.

Needs langchain-core (the extra ``peers``); nothing else of ctxsim imports it.
"""

from __future__ import annotations

import json
from collections.abc import MutableMapping, Sequence
from pathlib import Path
from typing import Any

from .budget import TokenBudget
from .errors import TranscriptError
from .messages import Breaker, call_arguments, compact_messages

#: the key a chat message made from message ``i`` carries: ``i``
ORIGIN = "_langchain"


def compact_langchain_messages(
    policy: Breaker, messages: Sequence[Any], limit: int | TokenBudget, *, log: str | Path | None = None,
    name: str = "messages", artifacts: MutableMapping[str, str] | None = None, keep_system: bool = True,
    keep_newest: bool = True,
) -> list[Any]:
    """``messages`` (langchain-core ``BaseMessage`` objects) broken by ``policy`` to fit
    ``limit`` tokens, as messages (module docstring). ``log``, ``artifacts``,
    ``keep_newest``, ``keep_system`` (a ``SystemMessage`` kept as it came) and a
    :class:`~ctxsim.budget.TokenBudget` ``limit`` are :func:`ctxsim.messages.compact_messages`'."""
    from langchain_core.messages import AIMessage, HumanMessage, convert_to_openai_messages

    messages = list(messages)
    converted = convert_to_openai_messages(messages)
    if len(converted) != len(messages):
        raise TranscriptError(f"{len(messages)} messages converted to {len(converted)} chat messages; "
                              "each message must be one", source=name)
    chat = [{**message, ORIGIN: i} for i, message in enumerate(converted)]
    out = []
    compacted = compact_messages(policy, chat, limit, log=log, name=name, artifacts=artifacts, keep_system=keep_system,
                                 keep_newest=keep_newest)
    for m in compacted:
        index = m.get(ORIGIN)
        if index is None:  # written by the break, or a tool result whose call is gone
            out.append(AIMessage(content=m["content"]) if m["role"] == "assistant" else HumanMessage(content=m["content"]))
            continue
        original, update = messages[index], {}
        if m.get("content") != converted[index].get("content"):
            update["content"] = m.get("content") or ""
        calls = getattr(original, "tool_calls", None)
        if calls:
            given, kept = call_arguments(converted[index]), call_arguments(m)
            if kept != given:  # calls removed (their results gone) or rewritten (new arguments, a JSON object)
                update["tool_calls"] = [call if kept[call["id"]] == given[call["id"]]
                                        else {**call, "args": json.loads(kept[call["id"]])}
                                        for call in calls if call["id"] in kept]
                raw = original.additional_kwargs.get("tool_calls")  # the provider's own form, when it kept one
                if raw is not None:
                    update["additional_kwargs"] = {**original.additional_kwargs, "tool_calls": [
                        c if kept[c["id"]] == given[c["id"]]
                        else {**c, "function": {**c["function"], "arguments": kept[c["id"]]}}
                        for c in raw if c.get("id") in kept]}
        out.append(original.model_copy(update=update))
    return out
