"""Anthropic Messages API requests for the tests: a shipped chat session in that form, and
the API's rules for a request's turns, checked."""

from __future__ import annotations

import json
from typing import Any

from ctxsim.transcripts import TOOL_CALL_LINE


def anthropic_request(chat: list[dict[str, Any]]) -> tuple[str | None, list[dict[str, Any]]]:
    """(system, messages) of a chat session in the JSONL form (calls as ``[tool_call]``
    lines, results as ``tool`` messages in order): an assistant turn's calls become
    ``tool_use`` blocks (ids ``toolu_001``, ...), the results that follow one user turn
    of ``tool_result`` blocks, a user message after them a text block of that turn."""
    system, turns, pending, calls = None, [], [], 0
    for message in chat:
        role, content = message["role"], message["content"]
        if role == "system":
            system = content
            continue
        if role == "assistant":
            text = content.split("\n[tool_call] ")[0] if not content.startswith("[tool_call] ") else ""
            blocks = [{"type": "text", "text": text}] if text else []
            for call in TOOL_CALL_LINE.finditer(content):
                calls += 1
                pending.append(f"toolu_{calls:03d}")
                arguments = json.loads(call[2]) if call[2].strip() else {}
                blocks.append({"type": "tool_use", "id": pending[-1], "name": call[1],
                               "input": arguments if isinstance(arguments, dict) else {"raw": arguments}})
            turns.append({"role": "assistant", "content": blocks})
            continue
        block = ({"type": "tool_result", "tool_use_id": pending.pop(0), "content": content} if role == "tool"
                 else {"type": "text", "text": content})
        if turns and turns[-1]["role"] == "user":
            turns[-1]["content"].append(block)
        else:
            turns.append({"role": "user", "content": [block]})
    return system, turns


def blocks_of(turn: dict[str, Any]) -> list[dict[str, Any]]:
    content = turn["content"]
    return [{"type": "text", "text": content}] if isinstance(content, str) else content


def check_api_rules(messages: list[dict[str, Any]]) -> None:
    """The Messages API's rules for a request's turns: the first is the user's, roles
    alternate, no turn is empty, a user turn's tool results come first and answer exactly
    the tool_use blocks of the assistant turn before it, and every tool_use is answered."""
    assert messages and messages[0]["role"] == "user"
    for k, turn in enumerate(messages):
        blocks = blocks_of(turn)
        assert blocks and all(b["type"] != "text" or b["text"] for b in blocks), k
        if k:
            assert turn["role"] != messages[k - 1]["role"], k
        asked = [b["id"] for b in blocks_of(messages[k - 1]) if b["type"] == "tool_use"] if k else []
        if turn["role"] == "user":
            kinds = [b["type"] for b in blocks]
            assert kinds == sorted(kinds, key=lambda kind: kind != "tool_result"), k
            assert sorted(b["tool_use_id"] for b in blocks if b["type"] == "tool_result") == sorted(asked), k
        elif any(b["type"] == "tool_use" for b in blocks):
            assert k + 1 < len(messages), "a tool_use in the last turn has no result"
