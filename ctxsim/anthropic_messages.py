"""An agent's Anthropic Messages API request, compacted in one call: ``system`` and
``messages`` in, ``system`` and ``messages`` out.

:func:`compact_anthropic_messages` reads the Messages API's form — a ``system`` prompt
(text or text blocks) beside ``messages`` of ``user`` and ``assistant`` turns whose
``content`` is text or a list of blocks: ``text``, ``tool_use`` (``id``, ``name``,
``input``), ``tool_result`` (``tool_use_id``, ``content`` as text or text blocks,
``is_error``) and ``thinking``/``redacted_thinking`` — as chat messages
(:func:`to_chat`: each tool result its own ``tool`` message, an assistant's
``tool_use`` blocks its ``tool_calls``, their ``input`` as compact JSON, as a model
writes a call's arguments), breaks them with
:func:`ctxsim.messages.compact_messages`, and writes the result back in the same form
(:func:`from_chat`):

* a turn the break kept whole comes back as it came (a shallow copy: its blocks,
  ``cache_control`` marks included); a kept ``system`` prompt is the one given;
* a block compressed in place keeps its keys with the new text (a tool result keeps
  its ``tool_use_id`` and ``is_error``; a ``tool_use`` whose arguments the break
  rewrote, its ``input`` the new arguments); a turn's ``thinking`` blocks stay with it
  while any of it stays (they are carried, not counted: the API does not count earlier
  turns' thinking against the window);
* what the break wrote (a summary, a placeholder, a pointer, a handover) is a new
  ``text`` block of its role's turn;
* the result keeps the API's rules: turns alternate (neighbours of one role are joined
  into one turn), a turn's ``tool_result`` blocks come first and answer ``tool_use``
  blocks of the turn just before, and a ``tool_use`` whose result is gone is removed
  (a result whose call is gone becomes a ``text`` block); the first turn is the
  user's, as the API wants it: what the break wrote ahead of every kept message (a
  summary, a handover) opens the conversation as the user's turn, and where the break
  kept no turn of the user's before an assistant turn (a recovery that truncated the
  task away), the conversation starts at the next turn of the user's.

``limit`` covers the system prompt and the messages (ctxsim's token counts of their
chat form, :mod:`ctxsim.tokens`). An ``image`` block of a user turn or of a tool
result is an ``[image]`` line of that message's text, counted at Anthropic's price
(:func:`ctxsim.images.anthropic_image_tokens`); a turn or a result the break keeps
unchanged keeps its images, one it rewrites loses them. Documents are refused: ctxsim
does not count them. Bad input raises TranscriptError naming ``name``, the message
(from 1) and the block (from 0).
"""

from __future__ import annotations

import json
from collections.abc import MutableMapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .budget import TokenBudget
from .errors import TranscriptError, describe_value
from .messages import Breaker, call_arguments, compact_messages, kept_some
from .images import IMAGE_LINE, anthropic_block_tokens
from .transcripts import ATTACHMENTS, EMPTY_OUTPUT, part_type, text_and_images, text_of_parts

#: the key a chat message made by :func:`to_chat` carries: where it came from (a :class:`_Piece` index)
ORIGIN = "_anthropic"
#: blocks carried with their turn and not counted
THINKING = ("thinking", "redacted_thinking")


@dataclass
class _Piece:
    """One chat message of the request: the turn (``turn``: index into ``messages``,
    None for the system prompt), the blocks it came from and, for an assistant turn, its
    thinking blocks."""

    turn: int | None
    blocks: tuple[int, ...]
    thinking: tuple[dict[str, Any], ...] = ()


@dataclass
class ChatForm:
    """A request in chat form (:func:`to_chat`): the chat messages and what each came from."""

    messages: list[dict[str, Any]]
    pieces: list[_Piece]
    system: Any = None
    turns: list[dict[str, Any]] = field(default_factory=list)
    blocks: list[list[dict[str, Any]]] = field(default_factory=list)  # each turn's blocks, checked (text as one block)
    by_turn: dict[int, list[int]] = field(default_factory=dict)  # turn -> the indices of its pieces


def _text_of(content: Any, at: str, name: str) -> str:
    """The text of a ``system`` prompt or a tool result's content: a string, or text blocks joined by newlines."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return text_of_parts(content, at, name, noun="block", images="in a user turn or a tool result")
    raise TranscriptError(f"{at}: expected text or a list of text blocks, got {describe_value(content)}", source=name)


def _result_of(content: Any, at: str, name: str) -> tuple[str, int]:
    """(text, image tokens) of a tool result's content: a string, or text and ``image``
    blocks, each image an ``[image]`` line (:func:`~ctxsim.images.anthropic_block_tokens`)."""
    if not isinstance(content, list) or not any(isinstance(b, dict) and b.get("type") == "image" for b in content):
        return _text_of(content, at, name), 0
    return text_and_images(content, at, name, image="image", price=anthropic_block_tokens, noun="content block",
                           reads="a tool result's text and image blocks")


def _attachments(tokens: int) -> dict[str, int]:
    """The key a chat message carries for the tokens of its images (none without)."""
    return {ATTACHMENTS: tokens} if tokens else {}


def _blocks(message: dict[str, Any], at: str, name: str) -> list[dict[str, Any]]:
    content = message.get("content")
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if not isinstance(content, list) or not content:
        raise TranscriptError(f"{at}: 'content' must be text or a non-empty list of blocks, got {describe_value(content)}",
                              source=name)
    for i, block in enumerate(content):
        kind = block.get("type") if isinstance(block, dict) else None
        allowed = ("text", "tool_result", "image") if message["role"] == "user" else ("text", "tool_use", *THINKING)
        if kind not in allowed:
            raise TranscriptError(f"{at}: block {i} is {part_type(block)}; {'an' if message['role'] == 'assistant' else 'a'} "
                                  f"{message['role']} turn's blocks are read when they are "
                                  f"{', '.join(allowed)}", source=name)
        if kind == "text" and not isinstance(block.get("text"), str):
            raise TranscriptError(f"{at}: block {i}: 'text' must be a string, got {describe_value(block.get('text'))}",
                                  source=name)
        if kind == "tool_use" and not (isinstance(block.get("id"), str) and isinstance(block.get("name"), str)
                                       and block["name"] and isinstance(block.get("input"), dict)):
            raise TranscriptError(f"{at}: block {i}: a tool_use needs 'id' and 'name' as strings and 'input' as an "
                                  f"object, got {describe_value(block)}", source=name)
        if kind == "tool_result" and not isinstance(block.get("tool_use_id"), str):
            raise TranscriptError(f"{at}: block {i}: a tool_result needs 'tool_use_id' as a string, got "
                                  f"{describe_value(block.get('tool_use_id'))}", source=name)
    return content


def to_chat(messages: Any, system: Any = None, *, name: str = "messages") -> ChatForm:
    """The chat form of a Messages API request (module docstring): the system prompt a
    ``system`` message, each tool result a ``tool`` message (before its turn's text),
    each turn's text blocks one message, an assistant's ``tool_use`` blocks its
    ``tool_calls``. Each chat message carries :data:`ORIGIN`."""
    if not isinstance(messages, (list, tuple)) or not messages:
        raise TranscriptError(f"expected a non-empty list of messages, got {describe_value(messages)}", source=name)
    chat: list[dict[str, Any]] = []
    pieces: list[_Piece] = []
    turn_blocks: list[list[dict[str, Any]]] = []

    def add(message: dict[str, Any], piece: _Piece) -> None:
        chat.append({**message, ORIGIN: len(pieces)})
        pieces.append(piece)

    if system is not None:
        text = _text_of(system, "system", name)
        if not text.strip():
            raise TranscriptError("system: the system prompt is empty (leave system= out instead)", source=name)
        add({"role": "system", "content": text}, _Piece(None, ()))
    for k, message in enumerate(messages):
        at = f"message {k + 1}"
        if not isinstance(message, dict):
            raise TranscriptError(f"{at}: expected an object, got {describe_value(message)}", source=name)
        role = message.get("role")
        if role not in ("user", "assistant"):
            raise TranscriptError(f"{at}: 'role' must be 'user' or 'assistant' (the system prompt goes in system=), got "
                                  f"{describe_value(role)}", source=name)
        blocks = _blocks(message, at, name)
        turn_blocks.append(blocks)
        texts = [i for i, b in enumerate(blocks) if b["type"] == "text"]
        text = "\n".join(blocks[i]["text"] for i in texts)
        if role == "user":
            for i, block in enumerate(blocks):
                if block["type"] == "tool_result":
                    result, images = _result_of(block.get("content", ""), f"{at}: block {i}", name)
                    result = result if result.strip() else EMPTY_OUTPUT
                    add({"role": "tool", "tool_call_id": block["tool_use_id"], "content": result, **_attachments(images)},
                        _Piece(k, (i,)))
            if texts and not text.strip():
                raise TranscriptError(f"{at}: its text is empty", source=name)
            said = [i for i, b in enumerate(blocks) if b["type"] in ("text", "image")]  # the user's words and images, in order
            images = sum(anthropic_block_tokens(blocks[i], f"{at}: block {i}", name) for i in said if blocks[i]["type"] == "image")
            if said:
                text = "\n".join(IMAGE_LINE if blocks[i]["type"] == "image" else blocks[i]["text"] for i in said)
                add({"role": "user", "content": text, **_attachments(images)}, _Piece(k, tuple(said)))
            continue
        uses = [i for i, b in enumerate(blocks) if b["type"] == "tool_use"]
        if not texts and not uses:
            raise TranscriptError(f"{at}: an assistant turn needs a text or tool_use block", source=name)
        calls = [{"id": blocks[i]["id"], "type": "function",
                  "function": {"name": blocks[i]["name"], "arguments": json.dumps(blocks[i]["input"], ensure_ascii=False, separators=(",", ":"))}}
                 for i in uses]
        thinking = tuple(b for b in blocks if b["type"] in THINKING)
        add({"role": "assistant", "content": text or None, **({"tool_calls": calls} if calls else {})},
            _Piece(k, tuple(texts + uses), thinking))
    by_turn: dict[int, list[int]] = {}
    for i, piece in enumerate(pieces):
        if piece.turn is not None:
            by_turn.setdefault(piece.turn, []).append(i)
    return ChatForm(chat, pieces, system, list(messages), turn_blocks, by_turn)


def from_chat(compacted: list[dict[str, Any]], form: ChatForm) -> dict[str, Any]:
    """The request (``{"system"?, "messages"}``) of chat messages that
    :func:`ctxsim.messages.compact_messages` returned for ``form.messages`` (module docstring)."""
    system: Any = None
    # (role, blocks, the pieces they came from: an index for a piece kept whole and
    # unchanged, None for anything else, so that a turn is one of the request's as it
    # came only when every entry is an index and they are all of that turn's pieces)
    turns: list[tuple[str, list[dict[str, Any]], list[int | None]]] = []
    for m in compacted:
        index = m.get(ORIGIN)
        piece = form.pieces[index] if index is not None else None
        unchanged = piece is not None and m.get("content") == form.messages[index]["content"] \
            and m.get(ATTACHMENTS) == form.messages[index].get(ATTACHMENTS)  # its text and its images
        if piece is not None and piece.turn is None:  # the system prompt
            system = form.system if unchanged else m["content"]
            continue
        role, blocks, whole = ("assistant" if m["role"] == "assistant" else "user"), [], unchanged
        if piece is None:  # written by the break, or a result whose call is gone
            blocks.append({"type": "text", "text": m["content"]})
        else:
            source = form.blocks[piece.turn]
            if m["role"] == "tool":
                block = source[piece.blocks[0]]
                blocks.append(dict(block) if unchanged else {**block, "content": m["content"]})
            elif m["role"] == "assistant":
                blocks += map(dict, piece.thinking)
                text_blocks = [source[i] for i in piece.blocks if source[i]["type"] == "text"]
                if unchanged:
                    blocks += map(dict, text_blocks)
                elif m.get("content"):
                    blocks.append({"type": "text", "text": m["content"]})
                uses = {source[i]["id"]: source[i] for i in piece.blocks if source[i]["type"] == "tool_use"}
                given = call_arguments(form.messages[index])
                calls = [call for call in m.get("tool_calls") or () if call["id"] in uses]
                rewritten = [call["function"]["arguments"] != given[call["id"]] for call in calls]
                for call, new in zip(calls, rewritten):  # a rewritten call's arguments are a JSON object
                    block = uses[call["id"]]
                    blocks.append({**block, "input": json.loads(call["function"]["arguments"])} if new else dict(block))
                whole = unchanged and len(calls) == len(uses) and not any(rewritten)
            else:
                blocks += map(dict, (source[i] for i in piece.blocks)) if unchanged else [{"type": "text", "text": m["content"]}]
        if piece is None and not any(kept != [None] or r == "user" for r, _, kept in turns):
            role = "user"  # what the break wrote before every kept message opens the conversation: the user's turn
        turns.append((role, blocks, [index] if whole else [None]))
    turns = _valid(_joined(turns))
    while len(turns) > 1 and turns[0][0] == "assistant":  # the break dropped every turn of the user's before it
        turns = _valid(turns[1:])
    if turns and turns[0][0] == "assistant":  # all that is left: its text, as the user's turn
        text = [b for b in turns[0][1] if b["type"] == "text"]
        turns = [("user", text, [None])] if text else []
    out = {"messages": [_turn(role, blocks, kept, form) for role, blocks, kept in turns]}
    return ({"system": system} if system is not None else {}) | out


def _joined(turns: list[tuple[str, list, list]]) -> list[tuple[str, list, list]]:
    """Neighbouring turns of one role joined into one: a user turn's tool results first;
    an assistant turn led by the thinking blocks of the latest of its parts that had any
    (the API reads only the last assistant turn's, which must lead it, and strips the
    others)."""
    out: list[tuple[str, list, list]] = []
    for role, blocks, kept in turns:
        if not blocks:
            continue
        if out and out[-1][0] == role:
            _, previous, previous_kept = out.pop()
            if role == "assistant":
                thinking = [b for b in blocks if b["type"] in THINKING] or [b for b in previous if b["type"] in THINKING]
                rest = [b for b in previous + blocks if b["type"] not in THINKING]
                blocks = thinking + rest
            else:
                blocks = previous + blocks
            kept = previous_kept + kept
        if role == "user":
            blocks = sorted(blocks, key=lambda b: b["type"] != "tool_result")  # stable: results first
        out.append((role, blocks, kept))
    return out


def _valid(turns: list[tuple[str, list, list]]) -> list[tuple[str, list, list]]:
    """``turns`` with every ``tool_use`` answered in the next turn and every
    ``tool_result`` answering the turn before (module docstring), joined again after."""
    while True:
        out, changed = [], False
        for k, (role, blocks, kept) in enumerate(turns):
            if role == "assistant":
                after = turns[k + 1][1] if k + 1 < len(turns) and turns[k + 1][0] == "user" else []
                answered = {b["tool_use_id"] for b in after if b["type"] == "tool_result"}
                fixed = [b for b in blocks if b["type"] != "tool_use" or b["id"] in answered]
                if not any(b["type"] not in THINKING for b in fixed):
                    fixed = []
            else:
                before = turns[k - 1][1] if k and turns[k - 1][0] == "assistant" else []
                asked = {b["id"] for b in before if b["type"] == "tool_use"}
                fixed = [b if b["type"] != "tool_result" or b["tool_use_id"] in asked
                         else {"type": "text", "text": _result_of(b.get("content", ""), "", "")[0] or EMPTY_OUTPUT}
                         for b in blocks]
            changed = changed or fixed != blocks
            out.append((role, fixed, kept if fixed == blocks else [None]))
        turns = _joined(out)
        if not changed:
            return turns


def _turn(role: str, blocks: list[dict[str, Any]], kept: list[int | None], form: ChatForm) -> dict[str, Any]:
    """One turn of the result: the turn as it came when it holds exactly the pieces of one
    of the request's turns, each whole and unchanged; else ``role`` with ``blocks``."""
    turns = {form.pieces[i].turn for i in kept} if None not in kept else set()
    if len(turns) == 1:
        (k,) = turns
        if kept == form.by_turn[k]:
            return dict(form.turns[k])
    return {"role": role, "content": blocks}


def compact_anthropic_messages(
    policy: Breaker, messages: list[dict[str, Any]], limit: int | TokenBudget, *, system: Any = None,
    log: str | Path | None = None, name: str = "messages", artifacts: MutableMapping[str, str] | None = None,
    keep_system: bool = True, keep_newest: bool = True,
) -> dict[str, Any]:
    """A Messages API request (``system``, ``messages``) broken by ``policy`` to fit
    ``limit`` tokens, system prompt included (module docstring): ``{"system": ...,
    "messages": [...]}`` (no ``system`` key when none was given), to pass on with
    ``client.messages.create(..., **result)``. ``log``, ``artifacts``, ``keep_newest``, ``keep_system`` (the
    system prompt kept as it came) and a :class:`~ctxsim.budget.TokenBudget` ``limit`` are
    :func:`ctxsim.messages.compact_messages`' (build the budget with the tool schemas and
    without ``system_prompt``, which is counted here:
    ``TokenBudget.for_request(200_000, tools=tools, message_format="anthropic")``)."""
    form = to_chat(messages, system, name=name)
    return kept_some(from_chat(compact_messages(policy, form.messages, limit, log=log, name=name, artifacts=artifacts,
                                                keep_system=keep_system, keep_newest=keep_newest), form),
                     "messages", name)
