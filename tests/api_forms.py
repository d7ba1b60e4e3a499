"""For the tests of the deployed forms: a shipped chat session in the forms of the
Anthropic Messages API and the OpenAI Responses API, each API's rules for a request,
checked, a policy that breaks with one strategy, and images as the APIs take them."""

from __future__ import annotations

import base64
import gzip
import io
import json
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

from ctxsim.model import ContextState
from ctxsim.strategies import StrategyContext, get_strategy
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


def responses_input(chat: list[dict[str, Any]], reasoning: bool = False) -> tuple[str | None, list[dict[str, Any]]]:
    """(instructions, input items) of a chat session in the JSONL form, as the OpenAI
    Responses API holds it: the user's messages as text, the assistant's as output
    messages with ids, each ``[tool_call]`` line a ``function_call`` item (call ids
    ``call_001``, ...), each result a ``function_call_output``; with ``reasoning``, a
    ``reasoning`` item before each assistant turn."""
    instructions, items, pending, calls = None, [], [], 0
    for number, message in enumerate(chat):
        role, content = message["role"], message["content"]
        if role == "system":
            instructions = content
        elif role == "user":
            items.append({"role": "user", "content": content})
        elif role == "tool":
            items.append({"type": "function_call_output", "call_id": pending.pop(0), "output": content})
        else:
            if reasoning:
                items.append({"type": "reasoning", "id": f"rs_{number}", "summary": [], "encrypted_content": "gAAA" * 8})
            text = content.split("\n[tool_call] ")[0] if not content.startswith("[tool_call] ") else ""
            if text:
                items.append({"type": "message", "id": f"msg_{number}", "status": "completed", "role": "assistant",
                              "content": [{"type": "output_text", "text": text, "annotations": []}]})
            for call in TOOL_CALL_LINE.finditer(content):
                calls += 1
                pending.append(f"call_{calls:03d}")
                items.append({"type": "function_call", "id": f"fc_{calls}", "status": "completed", "call_id": pending[-1],
                              "name": call[1], "arguments": call[2]})
    return instructions, items


def check_responses_rules(items: list[dict[str, Any]]) -> None:
    """The Responses API's rules for input items: every function_call_output answers an
    earlier function_call, every function_call is answered later, and a reasoning item
    is followed by an item that is no reasoning item."""
    called: set[str] = set()
    for k, item in enumerate(items):
        kind = item.get("type", "message")
        if kind == "function_call":
            called.add(item["call_id"])
            assert any(i.get("type") == "function_call_output" and i["call_id"] == item["call_id"] for i in items[k + 1:]), k
        elif kind == "function_call_output":
            assert item["call_id"] in called, k
        elif kind == "reasoning":
            assert k + 1 < len(items) and items[k + 1].get("type", "message") != "reasoning", k
        else:
            assert item["role"] in ("user", "assistant", "system", "developer") and item["content"], k


class StrategyPolicy:
    """A deployable-policy stand-in: breaks with one ctxsim strategy."""

    def __init__(self, strategy_id: str):
        self.strategy_id = strategy_id

    def break_context(self, state: ContextState, target_tokens: int | None = None, log=None):
        return get_strategy(self.strategy_id).apply(state, StrategyContext(target_tokens=target_tokens))


class Recording(StrategyPolicy):
    """Breaks with one strategy and keeps the broken context (``final``), to compare the messages with."""

    def break_context(self, state: ContextState, target_tokens: int | None = None, log=None):
        result = super().break_context(state, target_tokens, log)
        self.final = result.state
        return result


#: a corpus session with tool calls in OpenAI's form (62 calls; writes of one file that
#: later writes supersede)
CORPUS_SESSION = "data/transcripts/mini-swe-agent/django__django-11179__bench1.jsonl.gz"


def corpus_session(repo_root: Path, count: int = 75) -> list[dict[str, Any]]:
    """The first ``count`` messages of :data:`CORPUS_SESSION`."""
    with gzip.open(repo_root / CORPUS_SESSION, "rt", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()][:count]


def as_lines(chat: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Chat messages in the JSONL form the request builders read: an assistant's
    ``tool_calls`` as ``[tool_call]`` lines after its text, results without call ids."""
    out = []
    for m in chat:
        lines = [f"[tool_call] {c['function']['name']} {c['function']['arguments']}" for c in m.get("tool_calls") or ()]
        out.append({"role": m["role"], "content": "\n".join(([m["content"]] if m.get("content") else []) + lines)})
    return out


def shipped(repo_root: Path, name: str = "swe-marshmallow-1867-fc.jsonl") -> list[dict[str, Any]]:
    """The messages of a shipped chat session (data/transcripts)."""
    return [json.loads(line) for line in (repo_root / "data" / "transcripts" / name).read_text().splitlines()]


#: drawn turns of a session for :func:`random_chat`: (tool calls, words of each result,
#: the assistant's text, a user message after the results)
SESSION_TURNS = st.lists(st.tuples(st.integers(0, 3), st.integers(1, 400), st.booleans(), st.booleans()),
                         min_size=1, max_size=12)
#: strategies the drawn sessions are broken with: droppers, summarizers, pointers, recoveries
BREAKS = ("drop", "hybrid", "externalize", "truncate", "clear_tool_results", "fresh_start", "summarize_old", "remove_oldest")
#: the words of drawn sessions
WORDS = "cache export value key module path error test config handler request".split() + [f"name_{i}" for i in range(40)]


def random_chat(draw_turns: list[tuple[int, int, bool, bool]], words: list[str] = WORDS) -> list[dict[str, Any]]:
    """A chat session (JSONL form) from drawn turns (:data:`SESSION_TURNS`), after a
    system prompt and a task."""
    def text(n: int, k: int) -> str:
        return " ".join(words[(k * 7 + i) % len(words)] for i in range(n))

    chat = [{"role": "system", "content": "You are a coding agent. " + text(30, 0)},
            {"role": "user", "content": "Fix the failing export. " + text(40, 1)}]
    for t, (calls, size, says, asks) in enumerate(draw_turns):
        lines = [text(12, t)] if says or not calls else []
        lines += [f'[tool_call] run {{"command": "step {t}.{c}"}}' for c in range(calls)]
        chat.append({"role": "assistant", "content": "\n".join(lines)})
        chat += [{"role": "tool", "content": f"output {t}.{c}\n" + text(size, t + c)} for c in range(calls)]
        if asks or not calls:
            chat.append({"role": "user", "content": "Go on. " + text(15, t + 3)})
    return chat


def langchain_session(repo_root) -> list:
    """The shipped function-calling session as LangChain messages (each with an id, tool
    calls with ids and their results answering them); needs langchain-core."""
    from langchain_core.messages import convert_to_messages

    messages = convert_to_messages(native_chat(shipped(repo_root)))
    for number, message in enumerate(messages):
        message.id = f"m{number}"
    return messages


def native_chat(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A chat session in the JSONL form (calls as ``[tool_call]`` lines) in OpenAI's native
    form: an assistant's ``tool_calls`` with ids, each result's ``tool_call_id``."""
    out, pending = [], []
    for number, message in enumerate(messages):
        if message["role"] == "assistant":
            text, *calls = message["content"].split("\n[tool_call] ")
            pending = [f"call_{number}_{i}" for i in range(len(calls))]
            message = {"role": "assistant", "content": text, "tool_calls": [
                {"id": cid, "type": "function", "function": {"name": call.split(" ", 1)[0], "arguments": call.split(" ", 1)[1]}}
                for cid, call in zip(pending, calls)]}
        elif message["role"] == "tool":
            message = {**message, "tool_call_id": pending.pop(0)}
        out.append(message)
    return out


def data_url(size: tuple[int, int], fmt: str = "PNG", **save: Any) -> str:
    """A ``data:`` URL of a one-colour image of ``size`` in ``fmt`` (Pillow's format
    name; ``alpha=True`` for RGBA; other keywords go to ``Image.save``)."""
    from PIL import Image  # Pillow comes with matplotlib (the extra ``lab``)

    buffer = io.BytesIO()
    Image.new("RGBA" if save.pop("alpha", False) else "RGB", size, (30, 120, 200)).save(buffer, format=fmt, **save)
    return f"data:image/{fmt.lower()};base64," + base64.b64encode(buffer.getvalue()).decode()


def image_part(url: str, detail: str | None = None) -> dict[str, Any]:
    """A chat message's ``image_url`` part."""
    return {"type": "image_url", "image_url": {"url": url} | ({"detail": detail} if detail else {})}
