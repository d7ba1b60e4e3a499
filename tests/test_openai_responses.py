"""An OpenAI Responses API input (instructions, input items) compacted in one call
(ctxsim.openai_responses): read as the same context as its chat form, written back as
input the API takes, kept items as they came."""

from __future__ import annotations

import re
from copy import deepcopy
from dataclasses import replace
from types import SimpleNamespace

import pytest
from api_forms import (BREAKS, SESSION_TURNS, Recording, StrategyPolicy, as_lines, check_responses_rules, corpus_session,
                       random_chat, responses_input, shipped)
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxsim.errors import TranscriptError
from ctxsim.messages import compact_messages
from ctxsim.openai_responses import EMPTY_OUTPUT, compact_response_items, to_chat
from ctxsim.strategies import list_strategies
from ctxsim.transcripts import context_from_messages

POINTER = re.compile(r'read_artifact\("(art-[0-9a-f]+)"\)')


def tokens(request: dict) -> int:
    """ctxsim's count of an input (instructions and items)."""
    return context_from_messages(to_chat(request["input"], request.get("instructions")).messages).total_tokens


def texts(items: list[dict]) -> list[str]:
    """Each item's text: its content or output, parts as their texts."""
    values = [item.get("content", item.get("output", "")) for item in items]
    return [v if isinstance(v, str) else "\n".join(part.get("text", "") for part in v) for v in values]


@pytest.mark.parametrize("name", ["swe-marshmallow-1867-fc.jsonl", "swe-testrepo-missing-colon-fc.jsonl"])
def test_a_session_in_either_form_is_one_context(repo_root, name):
    chat = shipped(repo_root, name)
    instructions, items = responses_input(chat, reasoning=True)
    ours, theirs = context_from_messages(chat).units, context_from_messages(to_chat(items, instructions).messages).units
    assert len(ours) == len(theirs) == len(chat)
    for a, b in zip(ours, theirs):  # content, role, type, priority and the call each result answers
        assert (a.content, a.role, a.type, a.priority, a.tool) == (b.content, b.role, b.type, b.priority, b.tool)


def test_an_input_that_fits_comes_back_as_it_came(repo_root):
    instructions, items = responses_input(shipped(repo_root), reasoning=True)
    out = compact_response_items(StrategyPolicy("drop"), items, 10**6, instructions=instructions)
    assert out == {"instructions": instructions, "input": items}
    assert all(a is not b for a, b in zip(out["input"], items))
    assert "instructions" not in compact_response_items(StrategyPolicy("drop"), items, 10**6)


@pytest.mark.parametrize("strategy", [s for s in list_strategies() if s != "error"])
def test_every_strategy_leaves_input_the_api_takes(repo_root, strategy):
    instructions, items = responses_input(shipped(repo_root), reasoning=True)
    before, limit, store = deepcopy(items), 3000, {}
    chat = compact_messages(StrategyPolicy(strategy), to_chat(items, instructions).messages, limit, artifacts={})
    out = compact_response_items(StrategyPolicy(strategy), items, limit, instructions=instructions, artifacts=store)
    assert items == before  # the caller's input is never modified
    check_responses_rules(out["input"])
    for k, item in enumerate(out["input"]):  # a reasoning item stays only before the item it came with, unchanged
        if item.get("type") == "reasoning":
            assert items[items.index(item) + 1] == out["input"][k + 1]
    assert tokens(out) <= context_from_messages(chat).total_tokens
    if context_from_messages(chat).total_tokens <= limit:
        assert tokens(out) <= limit
    assert {a for text in texts(out["input"]) for a in POINTER.findall(text)} == set(store)
    changed = [item for item in out["input"] if item not in items]
    assert all("id" not in item and "status" not in item for item in changed)  # no longer the stored items


def test_a_developer_message_and_an_empty_output(repo_root):
    instructions, items = responses_input(shipped(repo_root, "swe-testrepo-missing-colon-fc.jsonl"))
    items.insert(0, {"role": "developer", "content": [{"type": "input_text", "text": "Answer in English."}]})
    output = next(item for item in items if item.get("type") == "function_call_output")
    output["output"] = ""
    form = to_chat(items, instructions)
    assert form.messages[1]["role"] == "system" and form.messages[1]["content"] == "Answer in English."
    assert EMPTY_OUTPUT in [m["content"] for m in form.messages if m["role"] == "tool"]
    out = compact_response_items(StrategyPolicy("drop"), items, 10**6, instructions=instructions)
    assert out["input"] == items


@pytest.mark.parametrize("items, instructions, match", [
    ([], None, "expected a non-empty list of input items"),
    ([{"role": "tool", "content": "x"}], None, r"item 1: 'role' must be one of"),
    ([{"role": ["user"], "content": "x"}], None, r"item 1: 'role' must be one of .*, got \['user'\]"),
    ([{"role": "assistant", "content": [{"type": "input_image", "image_url": "x"}]}], None,
     r"item 1: content part 0 is type 'input_image'; only text parts"),
    ([{"role": "user", "content": [{"type": "input_image", "detail": "low"}]}], None,
     r"item 1: content part 0: an input_image needs 'image_url' or 'file_id' as a string"),
    ([{"role": "user", "content": [{"type": "input_image", "image_url": "x", "detail": "max"}]}], None,
     r"item 1: content part 0: 'detail' must be one of \['auto', 'low', 'high'\], got 'max'"),
    ([{"role": "user", "content": [{"type": "input_image", "image_url": "x"}, {"type": "input_file", "file_id": "f"}]}],
     None, r"item 1: content part 1 is type 'input_file'; a user message's text and input_image parts are read"),
    ([{"type": "function_call", "call_id": "c1", "name": "ls"}], None, r"item 1: a function_call needs 'call_id', 'name' and 'arguments'"),
    ([{"type": "function_call_output", "output": "ok"}], None, r"item 1: a function_call_output needs 'call_id'"),
    ([{"type": "web_search_call", "id": "ws_1"}], None, r"item 1: an item of type 'web_search_call' is not read"),
    ([{"role": "user", "content": " "}], None, r"item 1: its text is empty"),
    ([{"role": "user", "content": "Hi"}], " ", r"instructions: expected a non-empty text"),
])
def test_bad_input_is_refused_naming_the_item_and_part(items, instructions, match):
    with pytest.raises(TranscriptError, match=match) as caught:
        compact_response_items(StrategyPolicy("drop"), items, 1000, instructions=instructions, name="input.json")
    assert "input.json" in str(caught.value)




def test_a_function_call_whose_arguments_the_break_rewrote_carries_them_without_its_id(repo_root):
    """``supersede_writes`` puts a placeholder into the command of a write that a later
    write supersedes: the function_call keeps its call_id and name, takes the shorter
    arguments and leaves its stored ``id`` and ``status`` behind (the API would read the
    stored item by its id); the input holds no more tokens than the break kept."""
    instructions, items = responses_input(as_lines(corpus_session(repo_root)))
    given = {i["call_id"]: i for i in items if i.get("type") == "function_call"}
    policy = Recording("supersede_writes")
    limit = tokens({"instructions": instructions, "input": items}) // 2
    out = compact_response_items(policy, items, limit, instructions=instructions)
    check_responses_rules(out["input"])
    calls = [i for i in out["input"] if i.get("type") == "function_call"]
    rewritten = [i for i in calls if i != given[i["call_id"]]]
    assert rewritten
    for item in rewritten:
        assert "[superseded: " in item["arguments"] and "id" not in item and "status" not in item
        assert item == {k: v for k, v in given[item["call_id"]].items() if k not in ("id", "status", "arguments")} | {
            "arguments": item["arguments"]}
    assert tokens(out) <= policy.final.total_tokens


@given(SESSION_TURNS, st.sampled_from(BREAKS), st.floats(0.1, 0.9), st.booleans())
@settings(max_examples=100, deadline=None)
def test_any_session_broken_any_way_is_input_the_api_takes(turns, strategy, share, reasoning):
    """Drawn sessions (parallel calls, long and short outputs, assistant messages with
    and without text, reasoning items), broken by a drawn strategy to a drawn share of
    their tokens: the input keeps the API's rules and no more tokens than the chat form's
    break, and each reasoning item stays before the item it came with."""
    instructions, items = responses_input(random_chat(turns), reasoning=reasoning)
    limit = max(50, int(tokens({"instructions": instructions, "input": items}) * share))
    if context_from_messages([{"role": "system", "content": instructions}]).total_tokens > limit:  # they alone take more
        with pytest.raises(TranscriptError, match="the system message"):
            compact_response_items(StrategyPolicy(strategy), items, limit, instructions=instructions)
        return
    chat = compact_messages(StrategyPolicy(strategy), to_chat(items, instructions).messages, limit, artifacts={})
    if all(m["role"] == "system" for m in chat):  # the break kept the instructions alone: no input to send
        with pytest.raises(TranscriptError, match="key 'input': the policy's break kept none of the input"):
            compact_response_items(StrategyPolicy(strategy), items, limit, instructions=instructions, artifacts={})
        return
    out = compact_response_items(StrategyPolicy(strategy), items, limit, instructions=instructions, artifacts={})
    assert out["instructions"] == instructions and out["input"]
    check_responses_rules(out["input"])
    assert tokens(out) <= context_from_messages(chat).total_tokens
    for k, item in enumerate(out["input"]):
        if item.get("type") == "reasoning":
            assert items[items.index(item) + 1] == out["input"][k + 1]



class ShortenedText:
    """A policy stand-in whose break shortens one assistant message's text and keeps the
    ``[tool_call]`` lines of its calls as they came."""

    def __init__(self, unit: str):
        self.unit = unit

    def break_context(self, state, target_tokens=None, log=None):
        def shortened(unit):
            calls = [line for line in unit.content.split("\n") if line.startswith("[tool_call] ")]
            return replace(unit, content="\n".join(["(shortened)", *calls]))

        return SimpleNamespace(state=state.with_units([shortened(u) if u.id == self.unit else u for u in state.units]))


def test_a_call_whose_turns_reasoning_stayed_behind_is_restated_without_its_id(repo_root):
    """A reasoning model's turn: a reasoning item, a message, a function call. The break
    shortens the message's text and keeps the call: the message is restated and its
    reasoning item stays behind, so the call, which the API would read as the stored item
    that needs that reasoning item (and refuse without it), is restated too: no id."""
    instructions, items = responses_input(shipped(repo_root), reasoning=True)
    chat = to_chat(items, instructions).messages
    k = next(i for i, m in enumerate(chat) if m["role"] == "assistant" and m["content"] and m.get("tool_calls"))
    out = compact_response_items(ShortenedText(f"line-{k + 1}"), items, tokens({"instructions": instructions, "input": items}) - 1,
                                 instructions=instructions)
    check_responses_rules(out["input"])
    text = next(i for i, item in enumerate(out["input"]) if item.get("content") == "(shortened)")
    call = out["input"][text + 1]
    stored = next(item for item in items if item.get("call_id") == call["call_id"])
    assert call == {key: value for key, value in stored.items() if key not in ("id", "status")}
    assert out["input"][text - 1].get("type") != "reasoning"
    assert len(out["input"]) == len(items) - 1  # the reasoning item alone stayed behind
