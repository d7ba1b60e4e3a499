"""An Anthropic Messages API request (system prompt, turns of blocks) compacted in one call
(ctxsim.anthropic_messages): read as the same context as its chat form, written back as
a request the API takes, kept turns as they came."""

from __future__ import annotations

import json
import re
from copy import deepcopy

import pytest
from api_forms import (BREAKS, SESSION_TURNS, Recording, StrategyPolicy, anthropic_request, as_lines, blocks_of, check_api_rules,
                       corpus_session, random_chat, shipped)
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxsim.anthropic_messages import compact_anthropic_messages, to_chat
from ctxsim.errors import TranscriptError
from ctxsim.messages import compact_messages
from ctxsim.strategies import list_strategies
from ctxsim.transcripts import EMPTY_OUTPUT, context_from_messages

POINTER = re.compile(r'read_artifact\("(art-[0-9a-f]+)"\)')


def tokens(request: dict) -> int:
    """ctxsim's count of a request (system prompt and turns)."""
    return context_from_messages(to_chat(request["messages"], request.get("system")).messages).total_tokens


@pytest.mark.parametrize("name", ["swe-testrepo-missing-colon-fc.jsonl", "ctf-crypto-katy.jsonl"])
def test_a_session_in_either_form_is_one_context(repo_root, name):
    chat = shipped(repo_root, name)
    system, turns = anthropic_request(chat)
    ours, theirs = context_from_messages(chat).units, context_from_messages(to_chat(turns, system).messages).units
    assert len(ours) == len(theirs) == len(chat)
    for a, b in zip(ours, theirs):  # content, role, type, priority and the tool call each result answers
        assert (a.content, a.role, a.type, a.priority, a.tool) == (b.content, b.role, b.type, b.priority, b.tool)


def test_a_request_that_fits_comes_back_as_it_came(repo_root):
    system, turns = anthropic_request(shipped(repo_root))
    out = compact_anthropic_messages(StrategyPolicy("drop"), turns, 10**6, system=system)
    assert out == {"system": system, "messages": turns}
    assert all(a is not b for a, b in zip(out["messages"], turns))  # copies: the caller's list is its own
    assert "system" not in compact_anthropic_messages(StrategyPolicy("drop"), turns, 10**6)


@pytest.mark.parametrize("strategy", [s for s in list_strategies() if s != "error"])
def test_every_strategy_leaves_a_request_the_api_takes(repo_root, strategy):
    system, turns = anthropic_request(shipped(repo_root))
    before, limit, store = deepcopy(turns), 3000, {}
    form = to_chat(turns, system)
    chat = compact_messages(StrategyPolicy(strategy), form.messages, limit, artifacts={})
    out = compact_anthropic_messages(StrategyPolicy(strategy), turns, limit, system=system, artifacts=store)
    assert turns == before  # the caller's request is never modified
    check_api_rules(out["messages"])
    # no more tokens than the chat form of the same break (neighbouring turns joined)
    assert tokens(out) <= context_from_messages(chat).total_tokens
    if context_from_messages(chat).total_tokens <= limit:
        assert tokens(out) <= limit
    # what the break moved behind a pointer is in the caller's store
    texts = [b.get("text") or json.dumps(b.get("content")) for t in out["messages"] for b in blocks_of(t)]
    assert {a for text in texts for a in POINTER.findall(text)} == set(store)


def test_kept_turns_and_system_prompt_come_back_as_they_came_with_their_cache_marks(repo_root):
    _, turns = anthropic_request(shipped(repo_root))
    system = [{"type": "text", "text": shipped(repo_root)[0]["content"], "cache_control": {"type": "ephemeral"}}]
    turns[2]["content"][-1]["cache_control"] = {"type": "ephemeral"}  # a breakpoint on an early tool result
    out = compact_anthropic_messages(StrategyPolicy("externalize"), turns, 3000, system=system, artifacts={})
    assert out["system"] == system
    kept = [t for t in out["messages"] if t in turns]
    assert len(kept) >= len(turns) // 2 and kept[0] == turns[0]
    # a turn the break left whole is the given one; a changed one is rebuilt from its blocks
    changed = [t for t in out["messages"] if t not in turns]
    assert changed and all(isinstance(t["content"], list) for t in changed)
    assert turns[2] in kept  # the marked turn (externalize moves the middle of the session, not its start)
    assert out["messages"][out["messages"].index(turns[2])]["content"][-1]["cache_control"] == {"type": "ephemeral"}


def test_a_compressed_tool_result_keeps_its_id_and_error_flag(repo_root):
    system, turns = anthropic_request(shipped(repo_root))
    for turn in turns:
        for block in turn["content"]:
            if block["type"] == "tool_result":
                block["is_error"] = False
    out = compact_anthropic_messages(StrategyPolicy("clear_tool_results"), turns, 3000, system=system)
    results = [b for t in out["messages"] for b in blocks_of(t) if b["type"] == "tool_result"]
    given = {b["tool_use_id"]: b for t in turns for b in blocks_of(t) if b["type"] == "tool_result"}
    cleared = [b for b in results if b != given[b["tool_use_id"]]]
    assert cleared and all(b["is_error"] is False and b["content"] != given[b["tool_use_id"]]["content"] for b in cleared)


def test_a_tool_use_whose_input_the_break_rewrote_carries_the_new_input(repo_root):
    """``supersede_writes`` puts a placeholder into the command of a write that a later
    write supersedes: the tool_use keeps its id and name, its ``input`` the shorter command,
    and the request holds no more tokens than the break kept."""
    system, turns = anthropic_request(as_lines(corpus_session(repo_root)))
    given = {b["id"]: b for t in turns for b in blocks_of(t) if b["type"] == "tool_use"}
    policy = Recording("supersede_writes")
    out = compact_anthropic_messages(policy, turns, tokens({"system": system, "messages": turns}) // 2, system=system)
    check_api_rules(out["messages"])
    rewritten = [b for t in out["messages"] for b in blocks_of(t) if b["type"] == "tool_use" and b != given[b["id"]]]
    assert rewritten
    for block in rewritten:
        assert block["name"] == given[block["id"]]["name"] and "[superseded: " in block["input"]["command"]
        assert len(block["input"]["command"]) < len(given[block["id"]]["input"]["command"])
    assert tokens(out) <= policy.final.total_tokens


def test_thinking_blocks_ride_with_their_turn_and_are_not_counted(repo_root):
    system, turns = anthropic_request(shipped(repo_root))
    thought = {"type": "thinking", "thinking": "Let me think this through. " * 2000, "signature": "c2lnbmF0dXJl"}
    plain = tokens({"system": system, "messages": turns})
    first, last = turns[1], turns[-2]  # two assistant turns: the first one the break drops, the last one it keeps
    assert first["role"] == last["role"] == "assistant"
    first["content"].insert(0, dict(thought))
    last["content"].insert(0, dict(thought))
    assert tokens({"system": system, "messages": turns}) == plain
    out = compact_anthropic_messages(StrategyPolicy("remove_oldest"), turns, 3000, system=system)
    check_api_rules(out["messages"])
    thinking = [(k, i) for k, t in enumerate(out["messages"]) for i, b in enumerate(blocks_of(t)) if b["type"] == "thinking"]
    assert thinking == [(len(out["messages"]) - 2, 0)] and out["messages"][-2] == last


def test_a_summary_that_opens_the_conversation_is_the_users_turn(repo_root):
    system, turns = anthropic_request(shipped(repo_root))
    out = compact_anthropic_messages(StrategyPolicy("compact_keep_recent"), turns, 1500, system=system)
    check_api_rules(out["messages"])
    opening = blocks_of(out["messages"][0])
    assert out["messages"][0]["role"] == "user" and "Summary" in opening[0]["text"]


def test_an_empty_tool_result_is_counted_as_a_placeholder_and_comes_back_empty(repo_root):
    system, turns = anthropic_request(shipped(repo_root, "swe-testrepo-missing-colon-fc.jsonl"))
    result = next(b for t in turns for b in t["content"] if b["type"] == "tool_result")
    del result["content"]
    form = to_chat(turns, system)
    assert EMPTY_OUTPUT in [m["content"] for m in form.messages if m["role"] == "tool"]
    out = compact_anthropic_messages(StrategyPolicy("drop"), turns, 10**6, system=system)
    assert result in [b for t in out["messages"] for b in blocks_of(t)]


@pytest.mark.parametrize("messages, system, match", [
    ([], None, "expected a non-empty list of messages"),
    ([{"role": "system", "content": "Be brief."}], None, r"message 1: 'role' must be 'user' or 'assistant'"),
    ([{"role": "user", "content": [{"type": "image", "source": {}}]}], None,
     r"message 1: block 0: an image needs a 'source' of type base64 \(with 'data'\), url \(with 'url'\) or file"),
    ([{"role": "assistant", "content": [{"type": "image", "source": {"type": "url", "url": "https://x/a.png"}}]}], None,
     r"message 1: block 0 is type 'image'; an assistant turn's blocks are read when they are text, tool_use"),
    ([{"role": "user", "content": [{"type": "document", "source": {"type": "text", "data": "x"}}]}], None,
     r"message 1: block 0 is type 'document'; a user turn's blocks are read when they are text, tool_result, image"),
    ([{"role": "user", "content": "Hi"}, {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "ls"}]}],
     None, r"message 2: block 0: a tool_use needs 'id' and 'name' as strings and 'input' as an object"),
    ([{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1",
                                    "content": [{"type": "image", "source": {"type": "url"}}]}]}], None,
     r"message 1: block 0: content block 0: an image needs a 'source'"),
    ([{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": [
        {"type": "image", "source": {"type": "url", "url": "https://x/a.png"}}, {"type": "document"}]}]}], None,
     r"message 1: block 0: content block 1 is type 'document'; a tool result's text and image blocks are read"),
    ([{"role": "user", "content": [{"type": "tool_result", "content": "ok"}]}], None, r"message 1: block 0: a tool_result needs 'tool_use_id'"),
    ([{"role": "user", "content": "   "}], None, r"message 1: its text is empty"),
    ([{"role": "assistant", "content": [{"type": "thinking", "thinking": "hm", "signature": "s"}]}], None,
     r"message 1: an assistant turn needs a text or tool_use block"),
    ([{"role": "user", "content": "Hi"}], "  ", r"system: the system prompt is empty"),
    ([{"role": "user", "content": "Hi"}], 42, r"system: expected text or a list of text blocks, got 42"),
])
def test_a_bad_request_is_refused_naming_the_message_and_block(messages, system, match):
    with pytest.raises(TranscriptError, match=match) as caught:
        compact_anthropic_messages(StrategyPolicy("drop"), messages, 1000, system=system, name="request.json")
    assert "request.json" in str(caught.value)


def test_a_token_budget_gives_the_request_the_room_it_leaves(repo_root):
    from ctxsim.budget import TokenBudget

    system, turns = anthropic_request(shipped(repo_root))
    tools = [{"name": "open", "description": "Open a file and show 100 lines of it. " * 6,
              "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}}}]
    budget = TokenBudget.for_request(6000, tools=tools, safety_buffer_tokens=300, rehydration_reserve_tokens=500,
                                     message_format="anthropic")
    out = compact_anthropic_messages(StrategyPolicy("drop"), turns, budget, system=system)
    assert out == compact_anthropic_messages(StrategyPolicy("drop"), turns, budget.available_for_messages, system=system)
    assert tokens(out) <= budget.available_for_messages < tokens({"system": system, "messages": turns})


def test_a_break_that_kept_no_user_turn_first_starts_at_the_next_one(repo_root):
    """``truncate`` at a fifth of the tokens, the system prompt let go, drops it, the task
    and the oldest turns: what it kept opens with the assistant's turn, which the API refuses."""
    system, turns = anthropic_request(shipped(repo_root, "swe-testrepo-missing-colon-fc.jsonl"))
    limit = tokens({"system": system, "messages": turns}) // 5
    chat = compact_messages(StrategyPolicy("truncate"), to_chat(turns, system).messages, limit, keep_system=False)
    assert chat[0]["role"] == "assistant"
    out = compact_anthropic_messages(StrategyPolicy("truncate"), turns, limit, system=system, keep_system=False)
    check_api_rules(out["messages"])
    assert tokens(out) <= limit and "system" not in out
    assert all(b["type"] == "text" for b in blocks_of(out["messages"][0]))  # the results of a dropped call, as text




@given(SESSION_TURNS, st.sampled_from(BREAKS), st.floats(0.1, 0.9), st.booleans())
@settings(max_examples=100, deadline=None)
def test_any_session_broken_any_way_is_a_request_the_api_takes(turns, strategy, share, thinking):
    """Drawn sessions (parallel calls, long and short results, turns with and without
    text, thinking blocks), broken by a drawn strategy to a drawn share of their tokens:
    the request keeps the API's rules, no more tokens than the chat form's break, and a
    turn it returns unchanged is one of the given turns."""
    system, request = anthropic_request(random_chat(turns))
    if thinking:
        for turn in request:
            if turn["role"] == "assistant":
                turn["content"].insert(0, {"type": "thinking", "thinking": "Let me see.", "signature": "c2ln"})
    total = tokens({"system": system, "messages": request})
    limit = max(50, int(total * share))
    if context_from_messages([{"role": "system", "content": system}]).total_tokens > limit:  # the system prompt alone
        with pytest.raises(TranscriptError, match="the system message"):
            compact_anthropic_messages(StrategyPolicy(strategy), request, limit, system=system)
        return
    chat = compact_messages(StrategyPolicy(strategy), to_chat(request, system).messages, limit, artifacts={})
    if all(m["role"] == "system" for m in chat):  # the break kept the system prompt alone: no request to send
        with pytest.raises(TranscriptError, match="key 'messages': the policy's break kept none of the messages"):
            compact_anthropic_messages(StrategyPolicy(strategy), request, limit, system=system, artifacts={})
        return
    out = compact_anthropic_messages(StrategyPolicy(strategy), request, limit, system=system, artifacts={})
    assert out["system"] == system and out["messages"]
    check_api_rules(out["messages"])
    assert tokens(out) <= context_from_messages(chat).total_tokens
    for turn in out["messages"]:  # a thinking block only in a turn that had it, first
        kinds = [b["type"] for b in blocks_of(turn)]
        assert "thinking" not in kinds[1:]
