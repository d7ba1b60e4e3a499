"""An agent's OpenAI Responses API input, compacted in one call: ``instructions`` and
``input`` items in, ``instructions`` and ``input`` items out.

:func:`compact_response_items` reads the Responses API's input items — messages
(``role`` ``user``, ``assistant``, ``system`` or ``developer``; ``content`` as text or
``input_text``/``output_text`` parts), ``function_call`` (``call_id``, ``name``,
``arguments``), ``function_call_output`` (``call_id``, ``output``) and ``reasoning`` —
as chat messages (:func:`to_chat`: an assistant message and the function calls after it one
assistant message with ``tool_calls``, each output a ``tool`` message, a developer
message a system one),
breaks them with :func:`ctxsim.messages.compact_messages`, and writes the result back
as items (:func:`from_chat`):

* an item the break kept unchanged comes back as it came (a shallow copy);
* a message or an output compressed in place keeps its keys with the new text as
  ``content`` or ``output``, and a function call whose arguments the break rewrote
  the new ``arguments`` (each less its ``id`` and ``status``: it is no longer the item
  the API stored under that id; a reasoning item before it stays behind, and a function
  call after it in the same turn, kept unchanged, is restated the same way: the API
  refuses a stored item whose reasoning item is missing);
* what the break wrote (a summary, a placeholder, a pointer, a handover) is a new
  message item ``{"role", "content"}`` (a tool role becoming ``user``);
* the result stays valid input: a function call whose output is gone is removed, an
  output whose call is gone becomes a user message with its text, and a ``reasoning``
  item stays only in front of the item it came with, kept unchanged (it is carried, not
  counted).

``limit`` covers the instructions and the items (ctxsim's token counts of their chat
form, :mod:`ctxsim.tokens`). A user message's ``input_image`` parts are read as the
chat form's images (:mod:`ctxsim.images`: counted at OpenAI's price, an ``[image]``
line of the text; the message keeps them when the break keeps it unchanged). Files and
the built-in tools' items are refused: ctxsim does not count them. Bad input raises TranscriptError naming ``name``, the item
(from 1) and the part (from 0).
"""

from __future__ import annotations

from collections.abc import MutableMapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .budget import TokenBudget
from .errors import TranscriptError, describe_value
from .images import DETAILS
from .messages import Breaker, call_arguments, compact_messages, kept_some
from .transcripts import EMPTY_OUTPUT, part_type, text_of_parts

#: the key a chat message made by :func:`to_chat` carries: the index of its :class:`_Piece`
ORIGIN = "_responses"
#: the roles a message item may have, and the chat role of each
ROLES = {"user": "user", "assistant": "assistant", "system": "system", "developer": "system"}
#: text part types of a message item's content
TEXT_PARTS = ("input_text", "output_text", "text")


@dataclass
class _Piece:
    """One chat message of the input: the items it came from (indices into ``input``;
    none for the instructions; an assistant message and the function calls after it are
    one) and the ``reasoning`` items that came before each."""

    items: tuple[int, ...]
    reasoning: tuple[tuple[int, ...], ...] = ()


@dataclass
class ResponsesChatForm:
    """An input in chat form (:func:`to_chat`): the chat messages and what each came from."""

    messages: list[dict[str, Any]]
    pieces: list[_Piece]
    items: list[dict[str, Any]]
    instructions: str | None = None


def _text(content: Any, at: str, name: str, key: str) -> str:
    """The text of a message's ``content`` or an output's ``output``: a string, or text parts joined by newlines."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return text_of_parts(content, at, name, noun=f"{key} part", kinds=TEXT_PARTS)
    raise TranscriptError(f"{at}: '{key}' must be text or a list of text parts, got {describe_value(content)}", source=name)


def _is_image(part: Any) -> bool:
    return isinstance(part, dict) and part.get("type") == "input_image"


def _chat_parts(content: list[Any], at: str, name: str) -> list[dict[str, Any]]:
    """A user message's text and ``input_image`` parts as chat parts (``text``,
    ``image_url``: :mod:`ctxsim.images` prices them; an image given by ``file_id`` is
    priced at the size of one not known); any other part is refused, naming it."""
    parts = []
    for i, part in enumerate(content):
        where = f"{at}: content part {i}"
        if _is_image(part):
            url, file_id, detail = part.get("image_url"), part.get("file_id"), part.get("detail", "auto")
            if not (isinstance(url, str) and url) and not (isinstance(file_id, str) and file_id):
                raise TranscriptError(f"{where}: an input_image needs 'image_url' or 'file_id' as a string, got "
                                      f"{describe_value(part)}", source=name)
            if detail not in DETAILS:
                raise TranscriptError(f"{where}: 'detail' must be one of {list(DETAILS)}, got {describe_value(detail)}",
                                      source=name)
            parts.append({"type": "image_url", "image_url": {"url": url if isinstance(url, str) and url
                                                             else f"file:{file_id}", "detail": detail}})
        elif isinstance(part, dict) and part.get("type") in TEXT_PARTS and isinstance(part.get("text"), str):
            parts.append({"type": "text", "text": part["text"]})
        else:
            raise TranscriptError(f"{where} is {part_type(part)}; a user message's text and input_image parts are read",
                                  source=name)
    return parts


def _kind(item: Any, at: str, name: str) -> str:
    if not isinstance(item, dict):
        raise TranscriptError(f"{at}: expected an object, got {describe_value(item)}", source=name)
    kind = item.get("type", "message" if "role" in item else None)
    if kind == "message":
        if not isinstance(item.get("role"), str) or item["role"] not in ROLES:
            raise TranscriptError(f"{at}: 'role' must be one of {list(ROLES)}, got {describe_value(item.get('role'))}",
                                  source=name)
    elif kind == "function_call":
        if not all(isinstance(item.get(key), str) for key in ("call_id", "name", "arguments")) or not item["name"]:
            raise TranscriptError(f"{at}: a function_call needs 'call_id', 'name' and 'arguments' as strings, got "
                                  f"{describe_value(item)}", source=name)
    elif kind == "function_call_output":
        if not isinstance(item.get("call_id"), str):
            raise TranscriptError(f"{at}: a function_call_output needs 'call_id' as a string, got "
                                  f"{describe_value(item.get('call_id'))}", source=name)
    elif kind != "reasoning":
        raise TranscriptError(f"{at}: an item of type {kind!r} is not read (messages, function_call, "
                              "function_call_output and reasoning are)", source=name)
    return kind


def to_chat(items: Any, instructions: str | None = None, *, name: str = "input") -> ResponsesChatForm:
    """The chat form of a Responses API input (module docstring). Each chat message
    carries :data:`ORIGIN`."""
    if not isinstance(items, (list, tuple)) or not items:
        raise TranscriptError(f"expected a non-empty list of input items, got {describe_value(items)}", source=name)
    chat: list[dict[str, Any]] = []
    pieces: list[_Piece] = []

    def add(message: dict[str, Any], piece: _Piece) -> None:
        chat.append({**message, ORIGIN: len(pieces)})
        pieces.append(piece)

    if instructions is not None:
        if not isinstance(instructions, str) or not instructions.strip():
            raise TranscriptError(f"instructions: expected a non-empty text, got {describe_value(instructions)}", source=name)
        add({"role": "system", "content": instructions}, _Piece(()))
    reasoning: list[int] = []  # reasoning items waiting for the item they precede
    # an assistant message and the run of function calls after it: one assistant chat
    # message (its text, then its tool_calls), as the chat form holds a turn
    run: list[int] = []
    run_reasoning: list[tuple[int, ...]] = []

    def flush_run() -> None:
        if not run:
            return
        lead = run[0] if items[run[0]].get("type", "message") == "message" else None
        calls = [i for i in run if i != lead]
        text = _text(items[lead].get("content"), f"item {lead + 1}", name, "content") if lead is not None else None
        tool_calls = [{"id": items[i]["call_id"], "type": "function",
                       "function": {"name": items[i]["name"], "arguments": items[i]["arguments"]}} for i in calls]
        add({"role": "assistant", "content": text, **({"tool_calls": tool_calls} if tool_calls else {})},
            _Piece(tuple(run), tuple(run_reasoning)))
        run.clear()
        run_reasoning.clear()

    for k, item in enumerate(items):
        at = f"item {k + 1}"
        kind = _kind(item, at, name)
        if kind == "reasoning":
            reasoning.append(k)
            continue
        before = tuple(reasoning)
        reasoning.clear()
        if kind == "function_call":
            run.append(k)
            run_reasoning.append(before)
            continue
        flush_run()
        if kind == "function_call_output":
            output = _text(item.get("output", ""), at, name, "output")
            add({"role": "tool", "tool_call_id": item["call_id"], "content": output if output.strip() else EMPTY_OUTPUT},
                _Piece((k,), (before,)))
            continue
        content = item.get("content")
        if item["role"] == "user" and isinstance(content, list) and any(_is_image(p) for p in content):
            add({"role": "user", "content": _chat_parts(content, at, name)}, _Piece((k,), (before,)))
            continue
        text = _text(content, at, name, "content")
        if not text.strip():
            raise TranscriptError(f"{at}: its text is empty", source=name)
        if item["role"] == "assistant":  # it may lead a run of calls
            run.append(k)
            run_reasoning.append(before)
            continue
        add({"role": ROLES[item["role"]], "content": text}, _Piece((k,), (before,)))
    flush_run()
    return ResponsesChatForm(chat, pieces, list(items), instructions)


def from_chat(compacted: list[dict[str, Any]], form: ResponsesChatForm) -> dict[str, Any]:
    """The input (``{"instructions"?, "input"}``) of chat messages that
    :func:`ctxsim.messages.compact_messages` returned for ``form.messages`` (module docstring)."""
    instructions: str | None = None
    out: list[dict[str, Any]] = []
    for m in compacted:
        index = m.get(ORIGIN)
        if index is None:  # written by the break, or an output whose call is gone
            out.append({"role": "assistant" if m["role"] == "assistant" else "user", "content": m["content"]})
            continue
        piece = form.pieces[index]
        unchanged = m.get("content") == form.messages[index]["content"]
        if not piece.items:  # the instructions
            instructions = form.instructions if unchanged else m["content"]
            continue
        kept = call_arguments(m)
        lost = False  # a reasoning item of the piece stayed behind: the items after it are restated
        for position, (k, before) in enumerate(zip(piece.items, piece.reasoning)):
            item = form.items[k]
            if item.get("type", "message") == "function_call":
                if position == 0 and m.get("content"):  # text the break wrote where the calls were
                    out.append({"role": "assistant", "content": m["content"]})
                if kept.get(item["call_id"]) == item["arguments"] and not lost:
                    out += (dict(form.items[r]) for r in before)
                    out.append(dict(item))
                    continue
                if item["call_id"] in kept:  # its arguments rewritten, or its reasoning gone: restated
                    out.append(_restated(item) | {"arguments": kept[item["call_id"]]})
            elif unchanged:
                out += (dict(form.items[r]) for r in before)
                out.append(dict(item))
                continue
            elif m.get("content"):  # compressed in place: no longer the item stored under its id
                new_text = {"output": m["content"]} if m["role"] == "tool" else {"content": m["content"]}
                out.append(_restated(item) | new_text)
            lost = lost or bool(before)
    return ({"instructions": instructions} if instructions is not None else {}) | {"input": out}


def _restated(item: dict[str, Any]) -> dict[str, Any]:
    """``item`` less its ``id`` and ``status``: changed, it is no longer the item the API stored under that id."""
    return {key: value for key, value in item.items() if key not in ("id", "status")}


def compact_response_items(
    policy: Breaker, items: list[dict[str, Any]], limit: int | TokenBudget, *, instructions: str | None = None,
    log: str | Path | None = None, name: str = "input", artifacts: MutableMapping[str, str] | None = None,
    keep_system: bool = True, keep_newest: bool = True,
) -> dict[str, Any]:
    """A Responses API input (``instructions``, ``input`` items) broken by ``policy`` to
    fit ``limit`` tokens, instructions included (module docstring): ``{"instructions":
    ..., "input": [...]}`` (no ``instructions`` key when none was given), to pass on with
    ``client.responses.create(..., **result)``. ``log``, ``artifacts``, ``keep_newest``, ``keep_system`` (the
    instructions, and the system or developer messages the input opens with, kept as they came) and a
    :class:`~ctxsim.budget.TokenBudget` ``limit`` are :func:`ctxsim.messages.compact_messages`'
    (build the budget with the tool schemas and without ``system_prompt``: the
    instructions are counted here)."""
    form = to_chat(items, instructions, name=name)
    return kept_some(from_chat(compact_messages(policy, form.messages, limit, log=log, name=name, artifacts=artifacts,
                                                keep_system=keep_system, keep_newest=keep_newest), form), "input", name)
