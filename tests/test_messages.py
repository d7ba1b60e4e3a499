"""compact_messages (ctxsim.messages) returns what the break kept: no more tokens than the
break counted, an assistant's tool calls as the break left their ``[tool_call]`` lines,
and the system prompt as it came unless the caller lets it go."""

from __future__ import annotations

import json
from dataclasses import replace
from types import SimpleNamespace

import pytest
from api_forms import Recording, StrategyPolicy, corpus_session

from ctxsim.errors import TranscriptError
from ctxsim.messages import compact_messages
from ctxsim.strategies import list_strategies
from ctxsim.transcripts import context_from_messages

def tokens(messages: list[dict]) -> int:
    return context_from_messages(messages).total_tokens if messages else 0


@pytest.mark.parametrize("strategy", [s for s in list_strategies() if s != "error"])
def test_the_messages_hold_no_more_tokens_than_the_break_kept(repo_root, strategy):
    """Every strategy, to half of the session's tokens: the messages returned count no
    more than the broken context (a call whose arguments the break shortened comes back
    shortened), and every call they hold has JSON-object arguments, as the session's do."""
    sent = corpus_session(repo_root)
    policy = Recording(strategy)
    out = compact_messages(policy, sent, tokens(sent) // 2, artifacts={})
    assert tokens(out) <= policy.final.total_tokens
    for message in out:
        for call in message.get("tool_calls") or ():
            assert isinstance(json.loads(call["function"]["arguments"]), dict)


def test_a_call_whose_arguments_the_break_rewrote_keeps_its_id_with_the_new_arguments(repo_root):
    sent = corpus_session(repo_root)
    given = {c["id"]: c for m in sent for c in m.get("tool_calls") or ()}
    out = compact_messages(StrategyPolicy("supersede_writes"), sent, tokens(sent) // 2)
    rewritten = [c for m in out for c in m.get("tool_calls") or () if c != given[c["id"]]]
    assert rewritten
    for call in rewritten:
        assert "[superseded: " in call["function"]["arguments"]
        assert call["function"]["name"] == given[call["id"]]["function"]["name"]
        assert len(call["function"]["arguments"]) < len(given[call["id"]]["function"]["arguments"])
    for message in out:  # the calls' lines are not repeated in the text
        assert "[tool_call]" not in (message.get("content") or "")


def test_a_call_whose_line_the_break_cut_is_text_and_its_result_the_users():
    """``truncate`` cuts the newest message that does not fit whole: here the call that
    writes a long module, cut within its arguments, which are no JSON any more. It stays
    in its message's text, and its result becomes the user's message."""
    module = "\n".join(f"line {i} of the new module" for i in range(300))
    call = {"id": "c1", "type": "function",
            "function": {"name": "bash", "arguments": json.dumps({"command": f"cat > mod.py << EOF\n{module}\nEOF"})}}
    sent = [{"role": "system", "content": "You are a coding agent."}, {"role": "user", "content": "Write the module."},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "c1", "content": "written"},
            {"role": "assistant", "content": "Done: the module is written."}]
    out = compact_messages(StrategyPolicy("truncate"), sent, tokens(sent) // 2)
    assert [m["role"] for m in out] == ["system", "assistant", "user", "assistant"]
    assert "tool_calls" not in out[1] and out[1]["content"].startswith('[tool_call] bash {"command": "cat > mod.py << EOF\\nline 0')
    assert out[2] == {"role": "user", "content": "written"} and out[3] == sent[4]
    assert tokens(out) <= tokens(sent) // 2


@pytest.mark.parametrize("strategy", ["truncate", "remove_oldest", "selective", "compact_keep_recent", "fresh_start"])
def test_the_system_prompt_stays_unless_the_caller_lets_it_go(repo_root, strategy):
    sent = corpus_session(repo_root)
    limit = tokens(sent) // 10
    policy = Recording(strategy)
    out = compact_messages(policy, sent, limit, artifacts={})
    assert out[0] == sent[0] and out[0]["role"] == "system"
    assert tokens(out) <= policy.final.total_tokens
    # compact_keep_recent keeps its last units whole and its summary keeps every instruction
    # of the folded task message: alone, it ends above a tenth of this session (an exported
    # policy's recovery would follow; a single strategy has none)
    if strategy != "compact_keep_recent":
        assert tokens(out) <= limit
    # unpinned, it is a P1 message like the task, and these strategies let it go
    assert sent[0] not in compact_messages(StrategyPolicy(strategy), sent, limit, artifacts={}, keep_system=False)


def test_a_limit_below_the_system_prompt_is_refused_naming_it(repo_root):
    sent = corpus_session(repo_root)
    system = tokens(sent[:1])
    with pytest.raises(TranscriptError, match=rf"session\.jsonl: key 'limit': the system message\(s\) take {system} tokens"):
        compact_messages(StrategyPolicy("drop"), sent, system - 1, name="session.jsonl")
    assert tokens(compact_messages(StrategyPolicy("truncate"), sent, system + 200)) <= system + 200


def test_a_developer_message_is_the_system_prompt(repo_root):
    """OpenAI's reasoning models take their system prompt as a ``developer`` message in
    Chat Completions: it is read as the system prompt, pinned, and comes back as it came."""
    sent = corpus_session(repo_root)
    sent[0] = {**sent[0], "role": "developer"}
    assert context_from_messages(sent).units[0].role == "system"
    out = compact_messages(StrategyPolicy("truncate"), sent, tokens(sent) // 10)
    assert out[0] == sent[0] and tokens(out) <= tokens(sent) // 10


def test_only_the_system_messages_the_list_opens_with_are_pinned(repo_root):
    """A system message later in the conversation (a reminder an agent adds) is a P1
    message like the task: a strategy that drops P1 messages may drop it, not the prompt."""
    sent = corpus_session(repo_root)
    sent.insert(40, {"role": "system", "content": "Reminder: 20 steps left."})
    out = compact_messages(StrategyPolicy("truncate"), sent, tokens(sent) // 10)
    assert out[0] == sent[0] and sent[40] not in out


class Rewriting:
    """A policy stand-in whose break puts a message of its own in place of ``unit``
    (a pointer to the result it moved out, say)."""

    def __init__(self, unit: str):
        self.unit = unit

    def break_context(self, state, target_tokens=None, log=None):
        units = [replace(u, id="ext-1", role="assistant", type="message", tool=None,
                         content="[Externalized Content - artifact:art-1] the first result")
                 if u.id == self.unit else u for u in state.units]
        return SimpleNamespace(state=state.with_units(units))


def test_a_message_the_break_wrote_between_calls_and_their_results_parts_them():
    """Parallel calls answered by two results: the break writes a pointer in place of the
    first. The second result no longer follows its call (the chat APIs want the results
    right after the message with the calls): the call goes and its result is the user's."""
    calls = [{"id": f"c{i}", "type": "function", "function": {"name": "bash", "arguments": f'{{"command": "ls {i}"}}'}}
             for i in (1, 2)]
    sent = [{"role": "system", "content": "You are a coding agent."}, {"role": "user", "content": "List both folders."},
            {"role": "assistant", "content": None, "tool_calls": calls},
            {"role": "tool", "tool_call_id": "c1", "content": "a.py\n" * 200},
            {"role": "tool", "tool_call_id": "c2", "content": "b.py"},
            {"role": "assistant", "content": "Both listed."}]
    out = compact_messages(Rewriting("line-4"), sent, tokens(sent) // 2)
    assert [m["role"] for m in out] == ["system", "user", "assistant", "user", "assistant"]
    assert out[2]["content"].startswith("[Externalized Content") and "tool_calls" not in out[2]
    assert out[3] == {"role": "user", "content": "b.py"} and out[4] == sent[5]


def test_a_tool_result_with_no_text_is_read_and_comes_back_as_it_came(repo_root):
    """A command that printed nothing has a tool result of empty text, which the chat API
    takes: it is read as "(no output)", as the Messages and Responses forms read one, where
    it was refused as empty content; kept unchanged, it comes back empty."""
    sent = corpus_session(repo_root)
    k = next(i for i, m in enumerate(sent) if m["role"] == "tool" and i > 60)
    sent[k] = {**sent[k], "content": ""}
    assert context_from_messages(sent).units[k].content == "(no output)"
    out = compact_messages(StrategyPolicy("remove_oldest"), sent, tokens(sent) // 2)
    assert sent[k] in out and tokens(out) <= tokens(sent) // 2
