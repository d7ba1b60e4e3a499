"""An agent's own message list, compacted in one call: chat messages in, chat messages out.

:func:`compact_messages` reads OpenAI-style chat messages (``{"role", "content"}``
dicts; ``content`` as text or text parts, an assistant's ``tool_calls`` and each tool
result's ``tool_call_id``, or tool calls written as ``[tool_call]`` lines — the forms
:mod:`ctxsim.transcripts` reads), breaks the context with a policy that has
``break_context`` (an exported policy, :mod:`ctxsim.policies.exported`; its decisions
go to its JSONL log), and writes the result back as messages:

* a message the break kept unchanged is returned as it came (a shallow copy), with its
  images; a user message's images (``image_url`` parts) are read as ``[image]`` lines of
  its text and counted at the API's price of each (:mod:`ctxsim.images`), so a break
  that rewrites or removes the message drops them, and a rewritten text says
  ``[image]`` where one was;
* a message compressed in place keeps its keys with the new text as ``content``; an
  assistant's tool calls, which ctxsim reads as ``[tool_call]`` lines after its text,
  are its ``tool_calls`` as the break left those lines: a call whose line stayed as it
  came, a call whose line the break rewrote with the new arguments (while they are a
  JSON object), and a call whose line is gone (or no longer holds JSON arguments) no
  longer a call, what is left of its line staying in the text — so the messages hold no
  more tokens than the break counted;
* what the break wrote (a summary, a placeholder, a pointer, a handover) is a new
  ``{"role", "content"}`` message, a tool role becoming ``user``;
* the result stays valid for a chat API: an assistant's ``tool_calls`` whose results
  are gone are removed (an assistant message left with neither calls nor text goes),
  and a tool result whose call is gone becomes a ``user`` message with its text (a call
  is answered only by the tool messages right after its message, as the APIs want);
* the system prompt stays: the ``system`` messages the list opens with are pinned
  (design 000's pinned units, which every strategy keeps unchanged), as agent
  frameworks keep theirs when they compact (a system message later on is a P1 message
  like the task); ``keep_system=False`` lets the break treat the system prompt as any
  other P1 message;
* the newest turn stays: what the agent answers next — the user or tool messages after
  the last assistant message, with that message when they are the results of its calls —
  is held back from the break and comes back whole and last, and the break fits the
  messages before it into the tokens it leaves (an agent that lost the result of its
  last call would not know that it ran). When the call is what makes the turn too long
  (a file written in its arguments), the results alone are held back, and come back as
  ``user`` messages if the break removed the call. A newest turn that takes more than half of the
  limit (:data:`NEWEST_SHARE`) is first cut to half of it when its last message is a
  tool result or a user message of plain text: its first and last paragraphs (lines,
  words) kept in about equal parts, one line between them saying how many tokens were
  cut, as agent harnesses cut a long tool output; when it cannot be held back (no room
  for the rest, or nothing before it to break), the break takes it as any other
  message. ``keep_newest=False``: the break takes the whole list, as the policy was
  trained and evaluated (:class:`~ctxsim.episode.OverflowEpisode` breaks whole
  contexts). The decision log then records the break of the messages before the turn,
  at the limit it leaves;
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

import json
import warnings
from collections.abc import MutableMapping, Sequence
from dataclasses import replace
from itertools import takewhile
from pathlib import Path
from typing import Any, Protocol

from .budget import TokenBudget
from .errors import TranscriptError, describe_value
from .model import DEFAULT_MIN_LIMIT, ContextState, ContextUnit
from .tokens import REPLY_PRIMING, count_tokens, fitting_count
from .transcripts import ATTACHMENTS, TOOL_CALL_LINE, context_from_messages

#: the newest turn is held back from the break while it takes at most this share of the limit
NEWEST_SHARE = 0.5
#: tokens the line that says where and how much of a message was cut takes, at most
CUT_NOTE_TOKENS = 16


class Breaker(Protocol):
    """What breaks a context: :class:`~ctxsim.policies.exported.ExportedPolicy`."""

    def break_context(self, state: ContextState, *, target_tokens: int | None = None, log: str | Path | None = None): ...


def compact_messages(
    policy: Breaker, messages: list[dict[str, Any]], limit: int | TokenBudget, *, log: str | Path | None = None,
    name: str = "messages", artifacts: MutableMapping[str, str] | None = None, keep_system: bool = True,
    keep_newest: bool = True,
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
    ``keep_system``: the system prompt (the system messages the list opens with) is
    pinned (module docstring); when it alone takes more than ``limit``, TranscriptError
    says so. ``keep_newest``: the newest turn is held back from the break (cut to half
    the limit first when it takes more; module docstring).
    """
    if isinstance(limit, TokenBudget):
        limit = limit.available_for_messages
    if isinstance(limit, bool) or not isinstance(limit, int) or limit <= 0:
        raise TranscriptError(f"must be a positive number of tokens or a TokenBudget, got {describe_value(limit)}",
                              source=name, key="limit")
    if artifacts is not None and not isinstance(artifacts, MutableMapping):
        raise TranscriptError(f"must be a dict (artifact id -> text) or None, got {describe_value(artifacts)}",
                              source=name, key="artifacts")
    state = context_from_messages(messages, limit=limit, min_limit=min(limit, DEFAULT_MIN_LIMIT), name=name)
    if state.fits():
        return [dict(m) for m in messages]
    if keep_system:
        state = _with_system_pinned(state, name)
    held = newest_turn(state) if keep_newest else 0
    if keep_newest and not held and (cut := _newest_cut(messages, state, keep_system, name)) is not None:
        messages, state = cut
        held = newest_turn(state)
    history = state
    if held:
        room = limit - state.tokens_of(state.units[-held:])
        history = state.with_units(state.units[:-held], limit=room, min_limit=min(room, state.min_limit))
    final = policy.break_context(history, target_tokens=history.limit, log=log).state
    moved = final.artifacts_since(history)
    if moved and artifacts is None:
        warnings.warn(
            f"{name}: the break moved {len(moved)} span(s) out of the messages behind read_artifact pointers "
            f"({', '.join(a.id for a in moved)}); pass artifacts= (a dict) to keep their content", stacklevel=2)
    elif moved:
        artifacts.update((a.id, a.content) for a in moved)
    if held:  # the turn after what the break left, as it was read (or cut)
        final = final.with_units(final.units + state.units[-held:])
    return messages_of(final, state, messages)


def newest_turn(state: ContextState) -> int:
    """How many of ``state``'s last units :func:`compact_messages` holds back from the
    break (module docstring): the user or tool messages after the last assistant message,
    with that message when they are tool results (they answer its calls), or those
    messages alone when the call is what takes the room; 0 when the messages end with an
    assistant message, or when each of those takes more than half of the limit
    (:data:`NEWEST_SHARE`), leaves nothing before it to break or leaves no room over what
    is pinned."""
    units = state.units
    for held in _turn_lengths(units):
        rest, turn_tokens = units[:-held], state.tokens_of(units[-held:])
        pinned = state.tokens_of(u for u in rest if u.pinned) + REPLY_PRIMING[state.message_format]
        if (any(not u.pinned for u in rest) and turn_tokens <= state.limit * NEWEST_SHARE
                and state.limit - turn_tokens > pinned):
            return held
    return 0


def _turn_lengths(units: Sequence[ContextUnit]) -> tuple[int, ...]:
    """The unit counts :func:`newest_turn` tries, in order: the newest turn with the
    assistant message whose calls its tool results answer, then the results alone; ()
    when ``units`` end with an assistant message."""
    held = len(list(takewhile(lambda u: u.role in ("user", "tool"), reversed(units))))
    if held and units[-held].role == "tool" and len(units) > held and units[-held - 1].role == "assistant":
        return held + 1, held
    return (held,) if held else ()


def _newest_cut(messages: list[dict[str, Any]], state: ContextState, keep_system: bool,
                name: str) -> tuple[list[dict[str, Any]], ContextState] | None:
    """(the messages with the newest one's text cut, their context) so that the newest turn
    takes half of the limit (:func:`newest_turn`), or None when the newest message is no
    tool result or user message of plain text or no cut lets the turn be held back. The
    cut keeps the text's first and last lines (words, for a text of one long line) in
    about equal parts, as they were, and says in one line between them how many tokens
    it took out, as agent harnesses cut a tool's long output."""
    last = messages[-1]
    text = last.get("content")
    if last.get("role") not in ("user", "tool") or not isinstance(text, str) or not state.units[-1].content == text:
        return None
    half, total = int(state.limit * NEWEST_SHARE), state.units[-1].token_count
    for turn in _turn_lengths(state.units):  # with its call, then the results alone
        keep = total + half - state.tokens_of(state.units[-turn:]) - CUT_NOTE_TOKENS
        for _ in range(3):  # pieces may count a token or two more once joined
            if keep <= 0:
                break
            head, tail = _head_and_tail(text, keep - keep // 2, keep // 2)
            gone = total - count_tokens(head) - count_tokens(tail)
            cut_text = f"{head}\n[… {gone:,} tokens of this message cut here …]\n{tail}"
            cut = [*messages[:-1], {**last, "content": cut_text}]
            cut_state = context_from_messages(cut, limit=state.limit, min_limit=state.min_limit, name=name)
            if keep_system:
                cut_state = _with_system_pinned(cut_state, name)
            if newest_turn(cut_state):
                return cut, cut_state
            keep -= max(cut_state.tokens_of(cut_state.units[-turn:]) - half, 1)
    return None


def _head_and_tail(text: str, head_tokens: int, tail_tokens: int) -> tuple[str, str]:
    """The first lines of ``text`` that fit ``head_tokens`` and the last of the lines after
    them that fit ``tail_tokens``, each as it stands in ``text``; the words of a text whose
    first and last lines do not fit; ("", "") when not even a word does."""
    for sep in ("\n", " "):
        pieces = text.split(sep)
        first = fitting_count(pieces, sep, head_tokens)
        last = fitting_count(pieces[first:], sep, tail_tokens, from_end=True)
        if first or last:
            return sep.join(pieces[:first]), sep.join(pieces[len(pieces) - last:])
    return "", ""


def _with_system_pinned(state: ContextState, name: str = "messages") -> ContextState:
    """``state`` with its system prompt pinned: the system messages it opens with (a
    system message later in the conversation, such as a reminder an agent adds on each
    turn, is a P1 message like the task). TranscriptError (key ``limit``) when they
    alone, with the reply priming, take more than its limit."""
    system = list(takewhile(lambda u: u.role == "system", state.units))
    need = state.tokens_of(system) + REPLY_PRIMING[state.message_format]
    if need > state.limit:
        raise TranscriptError(
            f"the system message(s) take {need:,} tokens, over the limit of {state.limit:,}: the system prompt "
            "is kept, and nothing else could stay", source=name, key="limit")
    return state.with_units([replace(u, pinned=True) for u in system] + list(state.units[len(system):]))


def messages_of(final: ContextState, original: ContextState, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The chat messages of ``final``, a break of ``original`` (the context of ``messages``)."""
    sent = {f"line-{i}": m for i, m in enumerate(messages, start=1)}
    out = []
    for unit in final.units:
        message = sent.get(unit.id)
        if message is None:
            out.append({"role": "user" if unit.role == "tool" else unit.role, "content": unit.content})
        elif _unchanged(unit, original.unit(unit.id)):
            out.append(dict(message))
        elif message.get("tool_calls"):
            text, calls = _compressed_calls(message["tool_calls"], unit.content)
            rest = {k: v for k, v in message.items() if k != "tool_calls"}
            out.append({**rest, "content": text or None} | ({"tool_calls": calls} if calls else {}))
        else:  # rewritten: its images are gone
            out.append({**{k: v for k, v in message.items() if k != ATTACHMENTS}, "content": unit.content})
    return _paired(out)


def _unchanged(unit: ContextUnit, before: ContextUnit) -> bool:
    """Whether the break kept a message's unit as it was: its text and its images."""
    return unit.content == before.content and unit.attachment_tokens == before.attachment_tokens


def call_arguments(message: dict[str, Any]) -> dict[str, str]:
    """Call id -> arguments of a chat message's ``tool_calls`` (empty without calls)."""
    return {call["id"]: call["function"]["arguments"] for call in message.get("tool_calls") or ()}


def _compressed_calls(calls: list[dict[str, Any]], content: str) -> tuple[str, list[dict[str, Any]]]:
    """An assistant message's text and ``tool_calls`` after the break compressed its
    content to ``content`` (ctxsim reads the message as its text, then one ``[tool_call]``
    line per call): a call whose line is still there comes back as it came; a call whose
    line the break rewrote (a superseded write's placeholder, a minified argument) takes
    the line's arguments while they are still a JSON object; any other call is gone as a
    call, and what the break left of its line stays in the text."""
    rest, kept = content, []
    for call in calls:
        function = call["function"]
        span = _line_span(rest, f"[tool_call] {function['name']} {function['arguments']}".rstrip())
        if span is None:
            match = next((m for m in TOOL_CALL_LINE.finditer(rest) if m[1] == function["name"] and _json_object(m[2])), None)
            if match is None:
                continue
            span, call = match.span(), {**call, "function": {**function, "arguments": match[2]}}
        rest = _without(rest, *span)
        kept.append(call)
    return rest.strip(), kept


def _line_span(text: str, line: str) -> tuple[int, int] | None:
    """Where ``line`` is one whole line of ``text``, or None."""
    start = text.find(line)
    while start >= 0:
        end = start + len(line)
        if (start == 0 or text[start - 1] == "\n") and (end == len(text) or text[end] == "\n"):
            return start, end
        start = text.find(line, start + 1)
    return None


def _without(text: str, start: int, end: int) -> str:
    """``text`` without the line at ``start:end`` and the line break before it (or after it, for the first line)."""
    if start > 0:
        start -= 1
    elif end < len(text):
        end += 1
    return text[:start] + text[end:]


def _json_object(text: str) -> bool:
    try:
        return isinstance(json.loads(text), dict)
    except ValueError:
        return False


def kept_some(request: dict[str, Any], key: str, name: str) -> dict[str, Any]:
    """``request`` when its ``key`` (the Messages API's ``messages``, the Responses API's
    ``input``) still holds an item; TranscriptError naming ``name`` and ``key``
    otherwise: a break that kept only the system prompt leaves a request the API
    refuses (its decisions are logged by then)."""
    if not request[key]:
        raise TranscriptError(f"the policy's break kept none of the {key} (the API needs one)", source=name, key=key)
    return request


def _paired(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``messages`` with calls and results that lost their partner repaired (module
    docstring). A call is answered only by the tool messages right after its assistant
    message, as the chat APIs want them (a message the break wrote between a call and its
    result, such as a pointer to the results it moved out, parts them)."""
    out: list[dict[str, Any]] = []
    called: set[Any] = set()  # the kept calls of the assistant message whose results come now
    for i, m in enumerate(messages):
        if m.get("role") == "assistant" and m.get("tool_calls"):
            ids = {c.get("id") for c in m["tool_calls"] if isinstance(c, dict)}
            answered = {r.get("tool_call_id") for r in takewhile(
                lambda r: r.get("role") == "tool" and r.get("tool_call_id") in ids, messages[i + 1:])}
            calls = [c for c in m["tool_calls"] if isinstance(c, dict) and c.get("id") in answered]
            called = {c["id"] for c in calls}
            if len(calls) < len(m["tool_calls"]):
                m = {k: v for k, v in m.items() if k != "tool_calls"} | ({"tool_calls": calls} if calls else {})
                if not calls and not m.get("content"):
                    continue
        elif m.get("role") == "tool" and m.get("tool_call_id") is not None and m["tool_call_id"] in called:
            called.discard(m["tool_call_id"])
        else:
            called = set()
            if m.get("role") == "tool" and m.get("tool_call_id") is not None:
                m = {"role": "user", "content": m.get("content")}
        out.append(m)
    return out
