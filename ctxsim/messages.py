"""An agent's own message list, compacted in one call: chat messages in, chat messages out.

:func:`compact_messages` reads OpenAI-style chat messages (``{"role", "content"}``
dicts; ``content`` as text or text parts, an assistant's ``tool_calls`` and each tool
result's ``tool_call_id``, or tool calls written as ``[tool_call]`` lines — the forms
:mod:`ctxsim.transcripts` reads), breaks the context with a policy that has
``break_context`` (an exported policy, :mod:`ctxsim.policies.exported`; its decisions
go to its JSONL log), and writes the result back as messages:

* a message the break kept unchanged is returned as it came (a shallow copy);
* a message compressed in place keeps its keys with the new text as ``content``
  (an assistant's ``[tool_call]`` lines, which ctxsim counts, are not repeated in the
  text: its ``tool_calls`` stay);
* what the break wrote (a summary, a placeholder, a pointer, a handover) is a new
  ``{"role", "content"}`` message, a tool role becoming ``user``;
* the result stays valid for a chat API: an assistant's ``tool_calls`` whose results
  are gone are removed (an assistant message left with neither calls nor text goes),
  and a tool result whose call is gone becomes a ``user`` message with its text;
* content the break moved out of the prompt (``externalize``, ``clear_tool_results``:
  design 002's artifacts, each behind a pointer message that names it,
  ``read_artifact("art-…")``) goes into the caller's ``artifacts`` mapping, artifact id
  to content, where the agent's ``read_artifact`` tool finds it; without one it is
  gone, and a warning says so.

Tokens are ctxsim's counts (:mod:`ctxsim.tokens`: contents, tool calls as their
``[tool_call]`` lines, the chat framing); the result fits ``limit`` when the break
succeeded.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import MutableMapping
from pathlib import Path
from typing import Any, Protocol

from .budget import TokenBudget
from .model import DEFAULT_MIN_LIMIT, ContextState
from .transcripts import TOOL_CALL_LINE, context_from_messages

#: a ``[tool_call]`` line with the line break before it (removed from a compressed assistant message)
_CALL_LINE = re.compile(r"\n?" + TOOL_CALL_LINE.pattern, re.MULTILINE)


class Breaker(Protocol):
    """What breaks a context: :class:`~ctxsim.policies.exported.ExportedPolicy`."""

    def break_context(self, state: ContextState, *, target_tokens: int | None = None, log: str | Path | None = None): ...


def compact_messages(
    policy: Breaker, messages: list[dict[str, Any]], limit: int | TokenBudget, *, log: str | Path | None = None,
    name: str = "messages", artifacts: MutableMapping[str, str] | None = None,
) -> list[dict[str, Any]]:
    """``messages`` broken by ``policy`` to fit ``limit`` tokens (module docstring).

    ``limit``: the tokens the messages may take, or a :class:`~ctxsim.budget.TokenBudget`
    (design 002: the model's input window less the tool schemas, formatting, a reply
    buffer and a rehydration reserve), whose ``available_for_messages`` is then the
    limit (leave a system prompt that is one of ``messages`` out of the budget: it is
    counted with them). Messages that already fit come back as copies, and nothing is logged. ``log``: a
    JSONL decision log for this call (default: the policy's own). ``artifacts``: where
    the content the break moves out of the messages goes (artifact id -> the original
    text; the same mapping across calls keeps every artifact of the session). Bad
    messages raise TranscriptError naming ``name`` and the message number (from 1).
    """
    if isinstance(limit, TokenBudget):
        limit = limit.available_for_messages
    state = context_from_messages(messages, limit=limit, min_limit=min(limit, DEFAULT_MIN_LIMIT), name=name)
    if state.fits():
        return [dict(m) for m in messages]
    final = policy.break_context(state, target_tokens=limit, log=log).state
    moved = final.artifacts_since(state)
    if moved and artifacts is None:
        warnings.warn(
            f"{name}: the break moved {len(moved)} span(s) out of the messages behind read_artifact pointers "
            f"({', '.join(a.id for a in moved)}); pass artifacts= (a dict) to keep their content", stacklevel=2)
    elif moved:
        artifacts.update((a.id, a.content) for a in moved)
    return messages_of(final, state, messages)


def messages_of(final: ContextState, original: ContextState, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The chat messages of ``final``, a break of ``original`` (the context of ``messages``)."""
    sent = {f"line-{i}": m for i, m in enumerate(messages, start=1)}
    out = []
    for unit in final.units:
        message = sent.get(unit.id)
        if message is None:
            out.append({"role": "user" if unit.role == "tool" else unit.role, "content": unit.content})
        elif unit.content == original.unit(unit.id).content:
            out.append(dict(message))
        else:
            text = _CALL_LINE.sub("", unit.content).strip() if message.get("tool_calls") else unit.content
            out.append({**message, "content": text or None})
    return _paired(out)


def _paired(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``messages`` with calls and results that lost their partner repaired (module docstring)."""
    answered = {m.get("tool_call_id") for m in messages if m.get("role") == "tool"} - {None}
    out, called = [], set()
    for m in messages:
        if m.get("role") == "assistant" and m.get("tool_calls"):
            calls = [c for c in m["tool_calls"] if isinstance(c, dict) and c.get("id") in answered]
            called.update(c["id"] for c in calls)
            if len(calls) < len(m["tool_calls"]):
                m = {k: v for k, v in m.items() if k != "tool_calls"} | ({"tool_calls": calls} if calls else {})
                if not calls and not m.get("content"):
                    continue
        elif m.get("role") == "tool" and m.get("tool_call_id") is not None and m["tool_call_id"] not in called:
            m = {"role": "user", "content": m.get("content")}
        out.append(m)
    return out
