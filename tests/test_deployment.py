"""Where policies are deployed (a ContextWindow, compact_messages): content a break moves
out of the prompt (design 002's artifacts, behind pointers that say
``read_artifact("art-…")``) stays readable, and the messages get the room a provider-aware
token budget leaves them."""

from __future__ import annotations

import gzip
import json
import re
from types import SimpleNamespace

import pytest
from api_forms import StrategyPolicy

from ctxsim.errors import ContextError
from ctxsim.messages import compact_messages
from ctxsim.tokens import count_tokens
from ctxsim.transcripts import context_from_messages
from ctxsim.window import ContextItem, ContextWindow

POINTER = re.compile(r'read_artifact\("(art-[0-9a-f]+)"\)')
LOG = "\n".join(f"line {i}: the deploy cache value for key k{i} is {i * 37}" for i in range(150))


def window_with_a_long_tool_output(**kwargs) -> ContextWindow:
    window = ContextWindow(4000, compaction_threshold=100.0, task="fix the deploy cache", **kwargs)
    window.add(ContextItem("You are a coding agent.", "system_prompt", pinned=True, id="sys"))
    window.add(ContextItem("[tool_call] read_file path=/srv/cache.py", "assistant_message", id="call"))
    window.add(ContextItem(LOG, "tool_result", id="out"))
    window.add(ContextItem("The cache keys map to values; k42 looks wrong.", "assistant_message", id="note"))
    for k in range(3):  # externalize keeps the three newest units as they are
        window.add(ContextItem(f"Checking key k{40 + k} next.", "assistant_message", id=f"later{k}"))
    return window


def pointed_ids(texts) -> list[str]:
    return [m.group(1) for t in texts for m in POINTER.finditer(t or "")]


def test_a_window_keeps_what_a_compaction_externalized_and_reads_it_back():
    window = window_with_a_long_tool_output()
    assert window.artifacts() == ()
    assert window.compact("externalize", 50) > 0
    assert "out" not in window
    ids = pointed_ids(i.content for i in window.items())
    assert len(ids) == 1 and [a.id for a in window.artifacts()] == ids
    original = window.read_artifact(ids[0])
    assert LOG in original  # the span as it was, every line of the tool output
    assert window.to_state().read_artifact(ids[0]) == original
    with pytest.raises(ContextError, match="unknown artifact 'art-000'"):
        window.read_artifact("art-000")

    # the pointer item removed, the window cleared: the content is still there to read
    pointer = next(i for i in window.items() if POINTER.search(i.content))
    assert window.remove(pointer.id)
    window.clear()
    assert window.read_artifact(ids[0]) == original


def test_a_snapshot_carries_the_artifacts_to_the_window_it_restores():
    window = window_with_a_long_tool_output()
    window.compact("externalize", 50)
    (artifact,) = window.artifacts()
    snapshot = window.snapshot()
    assert snapshot.artifacts == (artifact,)
    other = ContextWindow(4000)
    other.restore(snapshot)
    assert other.read_artifact(artifact.id) == artifact.content and other.artifacts() == (artifact,)


def test_a_policy_that_externalizes_on_the_windows_own_compaction_loses_nothing():
    window = ContextWindow(4000, compaction_threshold=85.0, task="fix the deploy cache",
                           policy=StrategyPolicy("externalize"))
    window.add(ContextItem("You are a coding agent.", "system_prompt", pinned=True, id="sys"))
    window.add(ContextItem(LOG, "tool_result", id="out"))
    for k in range(3):
        window.add(ContextItem(f"Checking key k{40 + k} next.", "assistant_message", id=f"later{k}"))
    window.add(ContextItem("x " * 2000, "user_message", id="big"))  # room only once the tool output is out
    assert "big" in window and "out" not in window
    ids = pointed_ids(i.content for i in window.items())
    assert len(ids) == 1 and LOG in window.read_artifact(ids[0])
    assert [a.id for a in window.artifacts()] == ids


def messages() -> list[dict]:
    out = [{"role": "system", "content": "You are a coding agent."}, {"role": "user", "content": "Fix the deploy cache."}]
    for k in range(4):
        out.append({"role": "assistant", "content": None, "tool_calls": [
            {"id": f"c{k}", "type": "function", "function": {"name": "http_get", "arguments": f'{{"url": "http://x/{k}"}}'}}]})
        out.append({"role": "tool", "tool_call_id": f"c{k}", "content": f"response {k}\n{LOG}"})
        out.append({"role": "assistant", "content": f"read response {k}"})
    return out


def test_compact_messages_puts_what_the_break_moved_out_into_the_callers_artifacts():
    sent, store = messages(), {}
    out = compact_messages(StrategyPolicy("externalize"), sent, 3000, artifacts=store)
    ids = pointed_ids(m.get("content") for m in out)
    assert len(ids) >= 2 and set(ids) == set(store)  # every pointer resolves, nothing else was stored
    for k, artifact in enumerate(ids):  # each moved tool output reads back whole, oldest first
        assert f"response {k}\n{LOG}" in store[artifact]

    # the same store across calls keeps the session's artifacts
    more = out + [{"role": "user", "content": "Now the session cache."},
                  {"role": "assistant", "content": "Reading it.", "tool_calls": [
                      {"id": "c9", "type": "function", "function": {"name": "http_get", "arguments": "{}"}}]},
                  {"role": "tool", "tool_call_id": "c9", "content": f"session\n{LOG}"},
                  {"role": "assistant", "content": "Read it."}]  # ends with the agent's message: no turn held back
    again = compact_messages(StrategyPolicy("externalize"), more, 3000, artifacts=store)
    assert set(ids) < set(store) and set(pointed_ids(m.get("content") for m in again)) <= set(store)


def test_compact_messages_without_a_store_warns_that_the_moved_content_is_gone():
    with pytest.warns(UserWarning, match=r"messages: the break moved (\d) span\(s\) out of the messages .* pass artifacts=") as seen:
        out = compact_messages(StrategyPolicy("externalize"), messages(), 3000)
    assert len(pointed_ids(m.get("content") for m in out)) == int(re.search(r"moved (\d)", str(seen[0].message)).group(1)) >= 2


def test_compact_messages_takes_a_token_budget_with_the_tool_schemas_out_of_the_limit():
    """Design 002's provider-aware budget: the tool schemas sent with the request, the reply
    buffer and the rehydration reserve come out of the window; the messages get the rest."""
    from ctxsim.budget import TokenBudget
    from ctxsim.transcripts import context_from_messages

    tools = [{"type": "function", "function": {"name": f"tool_{k}", "description": "Fetch one URL and return its body. " * 8,
                                               "parameters": {"type": "object", "properties": {"url": {"type": "string"}}}}}
             for k in range(6)]
    budget = TokenBudget.for_request(8000, tools=tools, safety_buffer_tokens=300, rehydration_reserve_tokens=500)
    assert 0 < budget.available_for_messages < 8000 * 0.85 - budget.tool_schema_tokens + 1
    sent = messages()
    out = compact_messages(StrategyPolicy("externalize"), sent, budget, artifacts={})
    assert out == compact_messages(StrategyPolicy("externalize"), sent, budget.available_for_messages, artifacts={})
    assert context_from_messages(out, limit=budget.available_for_messages, min_limit=1).total_tokens <= budget.available_for_messages


class KeepsSystemOnly:
    """A policy stand-in that records the context and target it is given and breaks it
    to its system prompt alone."""

    def __init__(self):
        self.given = []

    def break_context(self, state, target_tokens=None, log=None):
        self.given.append((state, target_tokens))
        return SimpleNamespace(state=state.with_units(state.units[:1]))


def a_call_and_its_result(output: str, k: int = 9) -> list[dict]:
    return [{"role": "assistant", "content": "Reading the log.", "tool_calls": [
                {"id": f"c{k}", "type": "function", "function": {"name": "read_log", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": f"c{k}", "content": output}]


def test_the_break_gets_the_messages_before_the_newest_turn_and_the_tokens_it_leaves():
    """The newest turn (the agent's last call and its result) is held back: the break
    sees the messages before it, at the limit less the turn's tokens, and the turn comes
    back whole and last. keep_newest=False, or a list that ends with the agent's own
    message, gives the break every message."""
    sent = messages() + a_call_and_its_result("the cache was cleared")
    state = context_from_messages(sent)
    turn_tokens = state.tokens_of(state.units[-2:])
    policy = KeepsSystemOnly()
    out = compact_messages(policy, sent, 3000)
    (given, target), = policy.given
    assert [u.id for u in given.units] == [u.id for u in state.units[:-2]]
    assert target == given.limit == 3000 - turn_tokens
    assert out == [sent[0], *sent[-2:]]

    # a call that takes more than half the limit (a file written in its arguments): its
    # result alone is held back, and comes back as a user message when the call is gone
    write = [{"role": "assistant", "content": None, "tool_calls": [{"id": "w1", "type": "function", "function": {
                 "name": "write_file", "arguments": json.dumps({"path": "cache.py", "text": LOG * 3})}}]},
             {"role": "tool", "tool_call_id": "w1", "content": "written"}]
    policy = KeepsSystemOnly()
    out = compact_messages(policy, messages() + write, 3000)
    (given, target), = policy.given
    assert len(given.units) == len(messages()) + 1 and out == [sent[0], {"role": "user", "content": "written"}]

    for messages_, keep in ((sent, False), (sent + [{"role": "assistant", "content": "Done."}], True)):
        policy = KeepsSystemOnly()
        out = compact_messages(policy, messages_, 3000, keep_newest=keep)
        (given, target), = policy.given
        assert len(given.units) == len(messages_) and target == 3000 and out == [messages_[0]]


def test_a_real_break_that_drops_the_newest_result_keeps_it_when_it_is_held_back(repo_root):
    """``selective`` drops the newest tool result of a real coding-agent session (cut
    after 58 messages, compacted to half its tokens): an agent would not know its last
    command ran. Held back, the call and its result come back as they came, the rest is
    broken around them, and the messages fit and keep the API's pairing."""
    path = repo_root / "data" / "transcripts" / "mini-swe-agent" / "django__django-10914__bench1.jsonl.gz"
    sent = [json.loads(line) for line in gzip.open(path, "rt", encoding="utf-8")][:58]
    assert sent[-1]["role"] == "tool" and sent[-2]["role"] == "assistant"
    limit = context_from_messages(sent).total_tokens // 2
    whole = compact_messages(StrategyPolicy("selective"), sent, limit, artifacts={}, keep_newest=False)
    assert sent[-1] not in whole
    out = compact_messages(StrategyPolicy("selective"), sent, limit, artifacts={})
    assert out[-2:] == sent[-2:] and out[0] == sent[0]
    assert context_from_messages(out).total_tokens <= limit
    called = {c["id"] for m in out for c in m.get("tool_calls") or ()}
    assert all(m["tool_call_id"] in called for m in out if m["role"] == "tool")


CUT_LINE = re.compile(r"\n\[… ([\d,]+) tokens of this message cut here …\]\n")


TEST_LOG = "\n".join(f"tests/test_mod{i % 37}.py::test_case_{i} PASSED [{i % 100:3d}%]" for i in range(3000))
#: a file with blank lines and indentation, and a text of one line (minified JSON)
SOURCE = "".join(f"def handler_{i}(request):\n    return respond(request, code={i})\n\n\n" for i in range(2500))
ONE_LINE = json.dumps({f"key_{i}": [i, f"value {i}"] for i in range(6000)})


@pytest.mark.parametrize(("role", "big"), [("tool", TEST_LOG), ("user", TEST_LOG), ("tool", SOURCE), ("tool", ONE_LINE)])
def test_a_newest_message_over_half_the_limit_is_cut_to_half_keeping_its_head_and_tail(role, big):
    """A newest tool output (or user message) longer than the whole limit is not dropped
    whole: it is cut to half the limit, its first and last lines (or words) kept as they
    were, one line saying how many tokens were cut; the break fits the rest into the
    other half."""
    if role == "tool":
        sent = messages() + a_call_and_its_result(big)
    else:
        sent = messages() + [{"role": "user", "content": big}]
    limit = 8000
    assert context_from_messages(sent[-1:]).total_tokens > limit
    out = compact_messages(StrategyPolicy("remove_oldest"), sent, limit, artifacts={})
    state = context_from_messages(out)
    assert state.total_tokens <= limit
    newest = out[-1]
    assert {k: v for k, v in newest.items() if k != "content"} == {k: v for k, v in sent[-1].items() if k != "content"}
    if role == "tool":
        assert out[-2] == sent[-2]  # the call, as it came
    held = 2 if role == "tool" else 1
    assert state.tokens_of(state.units[-held:]) <= limit // 2
    head, tail = CUT_LINE.split(newest["content"])[::2]
    stated = int(CUT_LINE.search(newest["content"]).group(1).replace(",", ""))
    assert big.startswith(head) and big.endswith(tail) and len(head) > 3000 and len(tail) > 3000
    assert stated == count_tokens(big) - count_tokens(head) - count_tokens(tail)
    assert abs(count_tokens(head) - count_tokens(tail)) < 40  # about equal parts

    whole = compact_messages(StrategyPolicy("remove_oldest"), sent, limit, artifacts={}, keep_newest=False)
    assert not any(CUT_LINE.search(m.get("content") or "") for m in whole)
