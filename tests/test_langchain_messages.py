"""An agent's LangChain messages compacted in one call (ctxsim.langchain_messages): the
messages LangChain's trim_messages takes, broken by a policy, returned as messages a chat
model takes, kept ones as they came."""

from __future__ import annotations

import pytest
from api_forms import BREAKS, Recording, StrategyPolicy, corpus_session, langchain_session

pytest.importorskip("langchain_core")

from langchain_core.messages import AIMessage, ToolMessage, convert_to_messages, convert_to_openai_messages  # noqa: E402

from ctxsim.langchain_messages import compact_langchain_messages  # noqa: E402
from ctxsim.messages import compact_messages  # noqa: E402
from ctxsim.transcripts import context_from_messages  # noqa: E402


def check_pairs(messages: list) -> None:
    """Every tool message answers a call of an AI message before it, every call is answered."""
    called, answered = [], []
    for message in messages:
        if isinstance(message, AIMessage):
            called += [call["id"] for call in message.tool_calls]
        elif isinstance(message, ToolMessage):
            assert message.tool_call_id in called
            answered.append(message.tool_call_id)
    assert sorted(called) == sorted(answered)


def tokens(messages: list) -> int:
    return context_from_messages(convert_to_openai_messages(messages)).total_tokens


def test_messages_that_fit_come_back_as_they_came(repo_root):
    messages = langchain_session(repo_root)
    out = compact_langchain_messages(StrategyPolicy("drop"), messages, 10**6)
    assert out == messages and all(a is not b for a, b in zip(out, messages))


@pytest.mark.parametrize("strategy", BREAKS)
def test_every_break_leaves_messages_a_chat_model_takes(repo_root, strategy):
    messages = langchain_session(repo_root)
    limit = 3000
    chat = compact_messages(StrategyPolicy(strategy), convert_to_openai_messages(messages), limit, artifacts={})
    out = compact_langchain_messages(StrategyPolicy(strategy), messages, limit, artifacts={})
    check_pairs(out)
    assert tokens(out) == context_from_messages(chat).total_tokens  # the chat form's break, message for message
    given = {m.id: m for m in messages}
    for message in out:
        if message.id in given and message.content == given[message.id].content:  # kept: the same message
            original = given[message.id]
            assert type(message) is type(original)
            if not isinstance(message, AIMessage) or len(message.tool_calls) == len(original.tool_calls):
                assert message == original
        elif message.id in given:  # compressed in place: its id and type kept
            assert type(message) is type(given[message.id])
        else:  # written by the break
            assert message.id is None and message.content


def test_a_token_budget_gives_the_messages_the_room_it_leaves(repo_root):
    from ctxsim.budget import TokenBudget

    messages = langchain_session(repo_root)
    budget = TokenBudget.for_request(6000, safety_buffer_tokens=300, rehydration_reserve_tokens=500)
    out = compact_langchain_messages(StrategyPolicy("drop"), messages, budget)
    assert out == compact_langchain_messages(StrategyPolicy("drop"), messages, budget.available_for_messages)
    assert tokens(out) <= budget.available_for_messages < tokens(messages)


def test_a_tool_call_whose_arguments_the_break_rewrote_carries_the_new_args(repo_root):
    """``supersede_writes`` puts a placeholder into the command of a write that a later
    write supersedes: the AI message keeps its id and the call its id, with the shorter
    ``args``; the messages hold no more tokens than the break kept."""
    messages = convert_to_messages(corpus_session(repo_root))
    for number, message in enumerate(messages):
        message.id = f"m{number}"
    given = {call["id"]: call for m in messages if isinstance(m, AIMessage) for call in m.tool_calls}
    policy = Recording("supersede_writes")
    out = compact_langchain_messages(policy, messages, tokens(messages) // 2)
    check_pairs(out)
    rewritten = [call for m in out if isinstance(m, AIMessage) for call in m.tool_calls if call != given[call["id"]]]
    assert rewritten
    for call in rewritten:
        assert "[superseded: " in call["args"]["command"] and call["name"] == given[call["id"]]["name"]
    assert tokens(out) <= policy.final.total_tokens


def test_the_system_message_comes_back_as_it_came_unless_let_go(repo_root):
    messages = langchain_session(repo_root)
    limit = tokens(messages) // 10
    out = compact_langchain_messages(StrategyPolicy("truncate"), messages, limit)
    assert out[0] == messages[0] and out[0].type == "system" and tokens(out) <= limit
    assert messages[0] not in compact_langchain_messages(StrategyPolicy("truncate"), messages, limit, keep_system=False)
