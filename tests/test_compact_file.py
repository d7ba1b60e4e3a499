"""``ctxsim compact``'s file handling (ctxsim.lab.compact): what a break moves behind
pointers is written beside the output, the request's other keys are kept, and a file
that cannot be read leaves no output. The command itself, with an exported policy, is
tested in test_export.py."""

from __future__ import annotations

import json
import re
from types import SimpleNamespace

import pytest
from api_forms import StrategyPolicy, anthropic_request, check_api_rules, data_url, image_part, responses_input, shipped

from ctxsim.errors import TranscriptError
from ctxsim.lab.compact import compact_file
from ctxsim.tokens import count_tokens

POINTER = re.compile(r'read_artifact\(\\?"(art-[0-9a-f]+)\\?"\)')


def test_what_the_break_moved_is_written_beside_the_output(repo_root, tmp_path):
    session = repo_root / "data" / "transcripts" / "swe-marshmallow-1867-fc.jsonl"
    out = tmp_path / "compacted.jsonl"
    done = compact_file(StrategyPolicy("externalize"), session, 3200, out)
    stored = json.loads((tmp_path / "compacted.jsonl.artifacts.json").read_text())
    assert done.artifacts == len(stored) >= 2 and done.artifacts_file == tmp_path / "compacted.jsonl.artifacts.json"
    assert set(POINTER.findall(out.read_text())) == set(stored)
    assert done.tokens_after < done.tokens_before and done.messages_before == done.messages_after == 24  # moved, not dropped
    originals = {m["content"] for m in shipped(repo_root)}
    assert all(any(original in text for original in originals) for text in stored.values())  # moved messages, whole


def test_a_request_keeps_its_other_keys_and_the_artifacts_go_where_asked(repo_root, tmp_path):
    system, turns = anthropic_request(shipped(repo_root))
    source = tmp_path / "request.json"
    source.write_text(json.dumps({"model": "m", "max_tokens": 512, "tools": [{"name": "open"}], "system": system,
                                  "messages": turns}))
    out, store = tmp_path / "out.json", tmp_path / "store.json"
    done = compact_file(StrategyPolicy("externalize"), source, 3000, out, form="anthropic", artifacts=store)
    request = json.loads(out.read_text())
    assert {k: request[k] for k in ("model", "max_tokens", "tools", "system")} == {
        "model": "m", "max_tokens": 512, "tools": [{"name": "open"}], "system": system}
    check_api_rules(request["messages"])
    assert done.artifacts_file == store and set(POINTER.findall(out.read_text())) == set(json.loads(store.read_text()))


def test_a_gzip_session_is_read_and_a_gz_output_written_compressed(repo_root, tmp_path):
    import gzip

    source = tmp_path / "session.jsonl.gz"
    source.write_bytes(gzip.compress((repo_root / "data" / "transcripts" / "swe-marshmallow-1867-fc.jsonl").read_bytes()))
    plain, packed = tmp_path / "out.jsonl", tmp_path / "out.jsonl.gz"
    compact_file(StrategyPolicy("drop"), source, 3000, plain)
    compact_file(StrategyPolicy("drop"), source, 3000, packed)
    assert gzip.decompress(packed.read_bytes()) == plain.read_bytes()
    assert len([json.loads(line) for line in plain.read_text().splitlines()]) < 24


def test_a_limit_below_the_system_prompt_is_refused_and_writes_nothing(repo_root, tmp_path):
    session = repo_root / "data" / "transcripts" / "swe-marshmallow-1867-fc.jsonl"
    with pytest.raises(TranscriptError, match=r"swe-marshmallow-1867-fc\.jsonl: key 'limit': the system message\(s\) take"):
        compact_file(StrategyPolicy("truncate"), session, 30, tmp_path / "out.jsonl")
    assert list(tmp_path.iterdir()) == []


def test_a_session_with_images_counts_them_and_keeps_them_on_messages_kept_whole(repo_root, tmp_path):
    """A chat session file whose task holds a screenshot (a data URL): the count before
    includes it, and the task, kept whole, is written as it came, image part and all."""

    sent = shipped(repo_root)
    task = next(i for i, m in enumerate(sent) if m["role"] == "user")
    sent[task] = {**sent[task], "content": [{"type": "text", "text": sent[task]["content"]}, image_part(data_url((1024, 1024)))]}
    source, out = tmp_path / "session.jsonl", tmp_path / "compacted.jsonl"
    source.write_text("".join(json.dumps(m) + "\n" for m in sent))
    plain = compact_file(StrategyPolicy("remove_oldest"), repo_root / "data" / "transcripts" / "swe-marshmallow-1867-fc.jsonl",
                         3000, tmp_path / "plain.jsonl")
    done = compact_file(StrategyPolicy("remove_oldest"), source, 3000, out)
    text = shipped(repo_root)[task]["content"]
    line = count_tokens(text + "\n[image]") - count_tokens(text)
    assert done.tokens_before - plain.tokens_before == 765 + line  # the image, and its [image] line
    assert done.tokens_after <= 3000 and sent[task] in [json.loads(line) for line in out.read_text().splitlines()]


@pytest.mark.parametrize("form", ["chat", "anthropic"])
def test_a_break_that_leaves_the_session_over_the_limit_is_refused_and_writes_nothing(repo_root, tmp_path, form):
    """A break that cannot fit the session (here one that only purges errors, of which the
    session has none) is no success: the command says so, naming the limit, and writes
    nothing, where it printed the tokens over the limit and exited 0."""
    session = repo_root / "data" / "transcripts" / "swe-marshmallow-1867-fc.jsonl"
    if form == "anthropic":
        system, turns = anthropic_request(shipped(repo_root))
        session = tmp_path / "request.json"
        session.write_text(json.dumps({"model": "m", "system": system, "messages": turns}))
    with pytest.raises(TranscriptError, match=r"key 'limit': the policy's break left [\d,]+ tokens, over the limit of 3,000"):
        compact_file(StrategyPolicy("purge_errors"), session, 3000, tmp_path / "out.json", form=form)
    assert not (tmp_path / "out.json").exists()


class SystemOnly:
    """A policy stand-in whose break keeps the system prompt alone."""

    def break_context(self, state, target_tokens=None, log=None):
        return SimpleNamespace(state=state.with_units(state.units[:1]))


def test_a_request_the_break_left_without_messages_is_refused_and_writes_nothing(repo_root, tmp_path):
    """The Messages API takes no request without messages: the command says the break
    kept none and writes nothing, where it wrote the request and then failed counting it."""
    system, turns = anthropic_request(shipped(repo_root))
    session = tmp_path / "request.json"
    session.write_text(json.dumps({"model": "m", "system": system, "messages": turns}))
    with pytest.raises(TranscriptError, match=r"request.json: key 'messages': the policy's break kept none of the messages"):
        compact_file(SystemOnly(), session, 3000, tmp_path / "out.json", form="anthropic", keep_newest=False)
    assert not (tmp_path / "out.json").exists()


@pytest.mark.parametrize("form", ["anthropic", "responses"])
def test_the_library_calls_refuse_a_request_the_break_left_without_messages(repo_root, form):
    """``compact_anthropic_messages`` and ``compact_response_items`` raise, naming the
    request's key, instead of returning a request without messages that the API refuses."""
    from ctxsim.anthropic_messages import compact_anthropic_messages
    from ctxsim.openai_responses import compact_response_items

    chat = shipped(repo_root)
    if form == "anthropic":
        system, turns = anthropic_request(chat)
        call, key, given = (lambda: compact_anthropic_messages(SystemOnly(), turns, 3000, system=system,
                                                               keep_newest=False)), "messages", turns
    else:
        instructions, items = responses_input(chat)
        call, key, given = (lambda: compact_response_items(SystemOnly(), items, 3000, instructions=instructions,
                                                           keep_newest=False)), "input", items
    with pytest.raises(TranscriptError, match=rf"key '{key}': the policy's break kept none of the {key}"):
        call()
    # a policy that keeps the messages returns them
    kept = (compact_anthropic_messages(StrategyPolicy("remove_oldest"), turns, 10**6, system=system) if form == "anthropic"
            else compact_response_items(StrategyPolicy("remove_oldest"), items, 10**6, instructions=instructions))
    assert kept[key] == given


@pytest.mark.parametrize("form", ["chat", "anthropic", "responses"])
def test_a_session_holding_a_lone_surrogate_anywhere_is_refused_and_writes_nothing(repo_root, tmp_path, form):
    """``"\\ud800"`` is valid JSON but no character: kept in a key the break passes through
    (a call's arguments, a reasoning summary, a request's model), the output could not be
    written as UTF-8 (UnicodeEncodeError after the break ran). It is refused on reading,
    naming the line or the key; a surrogate pair (an emoji) is text and is kept."""
    chat = shipped(repo_root)
    if form == "chat":
        lines = [json.dumps(m) for m in chat]
        call = next(i for i, m in enumerate(chat) if "[tool_call]" in m["content"])
        message = {**chat[call], "tool_calls": [{"id": "c1", "type": "function",
                                                 "function": {"name": "bash", "arguments": "{\"cmd\": \"echo \ud800\"}"}}]}
        lines[call] = json.dumps(message)
        text, needle = "\n".join(lines) + "\n", rf"line {call + 1}: 'tool_calls\[0\]\.function\.arguments' holds '\\ud800'"
    elif form == "anthropic":
        system, turns = anthropic_request(chat)
        text, needle = json.dumps({"model": "m\ud800", "system": system, "messages": turns}), r"'model' holds '\\ud800' at character 1"
    else:
        instructions, items = responses_input(chat, reasoning=True)
        at = next(i for i, item in enumerate(items) if item.get("type") == "reasoning")
        items[at] = {**items[at], "summary": [{"type": "summary_text", "text": "thinking \ud800"}]}
        text, needle = json.dumps({"model": "m", "instructions": instructions, "input": items}), rf"'input\[{at}\]\.summary\[0\]\.text' holds"
    session = tmp_path / ("session.jsonl" if form == "chat" else "request.json")
    session.write_text(text)
    with pytest.raises(TranscriptError, match=needle):
        compact_file(StrategyPolicy("drop"), session, 3000, tmp_path / "out.json", form=form)
    assert sorted(p.name for p in tmp_path.iterdir()) == [session.name]
    # the same session with a surrogate pair (one character, an emoji) is read and written
    session.write_text(text.replace("\\ud800", "\\ud83d\\ude00"))
    compact_file(StrategyPolicy("remove_oldest"), session, 10**6, tmp_path / "out.json", form=form)
    assert "\U0001f600" in (tmp_path / "out.json").read_text(encoding="utf-8")
