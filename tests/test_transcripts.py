"""Chat JSONL transcripts: the four shipped ones, type inference and bad input."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxsim.errors import TranscriptError
from ctxsim.model import ROLES
from ctxsim.transcripts import load_transcript

# SOURCES.md: messages and cl100k content tokens of each shipped transcript
SHIPPED = {
    "swe-marshmallow-1867-fc.jsonl": (24, 6949),
    "swe-testrepo-missing-colon-fc.jsonl": (10, 1786),
    "ctf-crypto-katy.jsonl": (9, 2474),
    "swe-humanevalfix-python-0.jsonl": (12, 7756),
}


@pytest.fixture(scope="module")
def transcripts(repo_root):
    folder = repo_root / "data" / "transcripts"
    return {name: load_transcript(folder / name) for name in SHIPPED}


def test_shipped_transcripts_keep_attribution(repo_root):
    folder = repo_root / "data" / "transcripts"
    sources = (folder / "SOURCES.md").read_text(encoding="utf-8")
    assert "MIT License" in sources and "princeton-nlp/SWE-agent" in sources
    assert "Permission is hereby granted" in (folder / "LICENSE").read_text(encoding="utf-8")
    assert sorted(p.name for p in folder.glob("*.jsonl")) == sorted(SHIPPED)


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_transcript_loads_whole(transcripts, name):
    state = transcripts[name]
    messages, content_tokens = SHIPPED[name]
    assert len(state.units) == messages
    assert sum(u.token_count for u in state.units) == content_tokens
    assert state.limit == state.total_tokens and state.fits()  # no limit given: it fits
    assert state.scenario == name.removesuffix(".jsonl")
    system, *_ = state.units
    assert system.role == "system" and system.priority == 1
    p1 = [u for u in state.units if u.priority == 1]
    assert [u.role for u in p1] == ["system", "user"]
    assert state.task and state.task in p1[1].content
    assert all(u.id == f"line-{i}" for i, u in enumerate(state.units, start=1))


def test_function_calling_transcript_tools(transcripts, repo_root):
    state = transcripts["swe-marshmallow-1867-fc.jsonl"]
    tools = [u for u in state.units if u.role == "tool"]
    assert len(tools) == 11 and all(u.type == "tool_result" and u.tool for u in tools)
    raw = (repo_root / "data" / "transcripts" / "swe-marshmallow-1867-fc.jsonl").read_text(encoding="utf-8")
    names = [json.loads(line).get("name") for line in raw.splitlines()]
    assert [u.tool.tool_name for u in tools] == [n for n in names if n]  # matched to the [tool_call] lines
    open_call = state.unit("line-14").tool
    assert open_call.tool_name == "open" and json.loads(open_call.arguments) == {"path": "src/marshmallow/fields.py", "line_number": 1474}
    assert open_call.durability == "replayable" and open_call.determinism_hash and open_call.target == "src/marshmallow/fields.py"
    assert dict(open_call.key_fields) == {"path": "src/marshmallow/fields.py", "lines": "1997", "status": "ok"}
    failed = [u for u in tools if u.tool.outcome == "failure"]
    assert [u.id for u in failed] == ["line-16"]
    assert "syntax error" in failed[0].tool.error_message and failed[0].tool.error_message in failed[0].content
    assert state.unit("line-8").tool.tool_name == "bash" and state.unit("line-8").tool.durability == "ephemeral"
    assert state.task == "TimeDelta serialization precision"


def test_observations_of_fenced_commands_are_tool_results(transcripts):
    ctf = transcripts["ctf-crypto-katy.jsonl"]
    observations = [u for u in ctf.units if u.type == "tool_result"]
    assert [u.id for u in observations] == ["line-4", "line-6", "line-8"]
    assert all(u.role == "user" for u in observations)
    assert observations[0].tool.tool_name == "ls" and observations[0].tool.outcome == "failure"
    assert json.loads(observations[2].tool.arguments) == {"command": "strings ~/ctf_files/release | grep flag"}
    assert observations[1].tool.outcome == "success"
    fix = transcripts["swe-humanevalfix-python-0.jsonl"]
    opened = fix.unit("line-7").tool
    assert opened.tool_name == "open" and opened.target == "main.py" and opened.durability == "replayable"


def test_demonstration_is_not_the_task(transcripts):
    state = transcripts["swe-humanevalfix-python-0.jsonl"]
    demo, task = state.unit("line-2"), state.unit("line-3")
    assert "--- DEMONSTRATION ---" in demo.content and demo.priority == 3
    assert task.priority == 1 and state.task == "I have a function that has a bug and needs to be fixed, can you help?"


def test_limits(repo_root):
    path = repo_root / "data" / "transcripts" / "swe-marshmallow-1867-fc.jsonl"
    state = load_transcript(path, limit=5000, name="m")
    assert (state.limit, state.min_limit, state.scenario) == (5000, 3500, "m")
    assert not state.fits()
    assert load_transcript(path, model="gpt4").limit == 6000
    small = repo_root / "data" / "transcripts" / "swe-testrepo-missing-colon-fc.jsonl"
    assert load_transcript(small).min_limit == load_transcript(small).limit < 3500
    assert load_transcript(small, limit=1200, min_limit=1000).min_limit == 1000
    with pytest.raises(TranscriptError, match="below min_limit"):
        load_transcript(small, limit=1200)
    with pytest.raises(TranscriptError, match="not both"):
        load_transcript(small, limit=5000, model="gpt4")


def lines(*messages) -> str:
    return "\n".join(json.dumps(m) for m in messages) + "\n"


def test_code_and_log_inference(write_file):
    code = "Here is the fix:\n```python\ndef f(x):\n    # keep it simple\n    return x + 1\n```"
    log = "\n".join(f"2026-01-0{i} 10:00:0{i} INFO worker started" for i in range(1, 6))
    prose = "Please fix the rounding bug.\n```\nls\n```"
    path = write_file(
        "t.jsonl",
        lines(
            {"role": "system", "content": "You are helpful."},
            {"role": "user", "content": "Fix the rounding bug in utils.py."},
            {"role": "assistant", "content": code},
            {"role": "user", "content": log},
            {"role": "user", "content": prose},
            {"role": "assistant", "content": code + "\nNow run it:\n```\npython f.py\n```"},
            {"role": "user", "content": "2"},
        ),
    )
    state = load_transcript(path)
    assert [u.type for u in state.units] == ["message", "message", "code", "log", "message", "code", "tool_result"]
    assert state.task == "Fix the rounding bug in utils.py."
    run = state.units[-1].tool
    assert run.tool_name == "python" and json.loads(run.arguments) == {"command": "python f.py"}


def test_chat_completions_form_loads_as_the_tool_call_lines_do(write_file, repo_root, transcripts):
    """The shipped function-calling session rewritten in OpenAI's native form (tool_calls
    with ids, tool_call_id, text parts, the tool results of each call answered in
    reverse order) is the same context."""
    native, pending = [], []
    for number, line in enumerate((repo_root / "data" / "transcripts" / "swe-marshmallow-1867-fc.jsonl").read_text().splitlines()):
        message = json.loads(line)
        if message["role"] == "assistant":
            text, *calls = message["content"].split("\n[tool_call] ")
            pending = [f"call_{number}_{i}" for i in range(len(calls))]
            message = {"role": "assistant", "content": [{"type": "text", "text": text}], "tool_calls": [
                {"id": cid, "type": "function", "function": {"name": call.split(" ", 1)[0], "arguments": call.split(" ", 1)[1]}}
                for cid, call in zip(pending, calls)]}
        elif message["role"] == "tool":
            message = {**message, "tool_call_id": pending.pop(0)}
        native.append(message)
    state = load_transcript(write_file("native.jsonl", lines(*native)), name="swe-marshmallow-1867-fc")
    assert state == transcripts["swe-marshmallow-1867-fc.jsonl"]

    # two calls answered out of order: tool_call_id picks each result's call; content may be null
    path = write_file("two.jsonl", lines(
        {"role": "user", "content": "read both"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "a", "type": "function", "function": {"name": "read_file", "arguments": '{"path": "a.py"}'}},
            {"id": "b", "type": "function", "function": {"name": "bash", "arguments": '{"command": "ls"}'}}]},
        {"role": "tool", "tool_call_id": "b", "content": "a.py b.py"},
        {"role": "tool", "tool_call_id": "a", "content": "print('a')"},
    ))
    units = load_transcript(path).units
    assert units[1].content == '[tool_call] read_file {"path": "a.py"}\n[tool_call] bash {"command": "ls"}'
    assert [(u.tool.tool_name, u.tool.target) for u in units[2:]] == [("bash", None), ("read_file", "a.py")]


def test_tool_without_call_line_uses_its_name(write_file):
    path = write_file(
        "t.jsonl",
        lines(
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": "calling"},
            {"role": "tool", "name": "fetch", "content": "Traceback (most recent call last):\nValueError: bad"},
            {"role": "tool", "content": "ok"},
        ),
    )
    first, second = load_transcript(path).units[2:]
    assert first.tool.tool_name == "fetch" and first.tool.outcome == "failure" and first.tool.durability == "anchoring"
    assert first.tool.error_message == "Traceback (most recent call last):"
    assert second.tool.tool_name == "tool" and second.tool.outcome == "success"


BAD = [
    ("bad json", '{"role": "user", "content": "hi"}\n{"role": "user", content}\n', "line 2: bad JSON"),
    ("not an object", '["user", "hi"]\n', "line 1: expected a JSON object"),
    ("missing role", '{"content": "hi"}\n', "line 1: 'role' is missing"),
    ("missing content", '{"role": "user"}\n', "line 1: 'content' is missing"),
    ("null content", '{"role": "assistant", "content": null, "tool_calls": []}\n', "line 1: 'content' is null"),
    ("lone surrogate", '{"role": "user", "content": "a\\ud800b"}\n', "line 1: 'content' holds '\\ud800' at character 1"),
    ("content type", '{"role": "user", "content": "a"}\n\n{"role": "user", "content": 5}\n', "line 3: 'content' must be a string"),
    ("role type", '{"role": 1, "content": "hi"}\n', "line 1: 'role' must be one of"),
    ("unknown role", '{"role": "robot", "content": "hi"}\n', "line 1: 'role' must be one of"),
    ("empty content", '{"role": "user", "content": "  "}\n', "line 1: 'content' is empty"),
    ("tool_call_id type", '{"role": "user", "content": "x"}\n{"role": "tool", "content": "ok", "tool_call_id": ["c1"]}\n',
     "line 2: 'tool_call_id' must be a string, got ['c1']"),
    ("name type", '{"role": "tool", "content": "x", "name": 3}\n', "line 1: 'name' must be a string"),
    ("empty file", "\n\n", "empty transcript"),
    ("image part without a url", '{"role": "user", "content": [{"type": "text", "text": "x"}, {"type": "image_url", "image_url": {}}]}\n',
     "line 1: content part 1: 'image_url' must be an object with a 'url' string, got {}"),
    ("image part on a tool message", '{"role": "tool", "content": [{"type": "image_url", "image_url": {"url": "https://x/a.png"}}]}\n',
     "line 1: content part 0 is type 'image_url'; only text parts are read"),
    ("audio part", '{"role": "user", "content": [{"type": "input_audio", "input_audio": {"data": ""}}]}\n',
     "line 1: content part 0 is type 'input_audio'; only text parts are read"),
    ("tool_calls on a user message", '{"role": "user", "content": "x", "tool_calls": []}\n', "'tool_calls' on a 'user' message"),
    ("content type beside tool calls", '{"role": "assistant", "content": NaN, "tool_calls": [{"id": "a", "function": {"name": "bash", "arguments": "{}"}}]}\n',
     "line 1: 'content' must be a string, got nan"),
    ("tool call without a name", '{"role": "assistant", "content": null, "tool_calls": [{"id": "a", "function": {"arguments": "{}"}}]}\n',
     "line 1: tool_calls[0] needs function.name"),
    ("key twice", '{"role": "user", "content": "x", "role": "system"}\n', "line 1: bad JSON (key 'role' appears twice)"),
]


@pytest.mark.parametrize("text,needle", [case[1:] for case in BAD], ids=[case[0] for case in BAD])
def test_bad_transcript_raises_transcript_error(write_file, text, needle):
    path = write_file("bad.jsonl", text)
    with pytest.raises(TranscriptError) as err:
        load_transcript(path)
    message = str(err.value)
    assert str(path) in message and needle in message and "\n" not in message


def test_non_utf8_names_the_line(write_file):
    path = write_file("latin.jsonl", b'{"role": "user", "content": "ok"}\n{"role": "user", "content": "caf\xe9"}\n')
    with pytest.raises(TranscriptError, match="line 2: not UTF-8") as err:
        load_transcript(path)
    assert str(path) in str(err.value)


def test_missing_file(tmp_path):
    with pytest.raises(TranscriptError, match="cannot read file"):
        load_transcript(tmp_path / "nope.jsonl")


messages = st.lists(
    st.fixed_dictionaries(
        {"role": st.sampled_from(ROLES), "content": st.text(min_size=1, max_size=60).filter(lambda s: s.strip())}
    ),
    min_size=1,
    max_size=12,
)


@settings(max_examples=40, deadline=None)
@given(chat=messages)
def test_any_valid_chat_round_trips_roles_and_contents(tmp_path_factory, chat):
    path = tmp_path_factory.mktemp("chat") / "c.jsonl"
    path.write_text(lines(*chat), encoding="utf-8")
    state = load_transcript(path)
    assert [(u.role, u.content) for u in state.units] == [(m["role"], m["content"]) for m in chat]
    assert all((u.tool is not None) == (u.type == "tool_result") for u in state.units)
    assert all(u.tool for u in state.units if u.role == "tool")
    assert sum(u.priority == 1 for u in state.units if u.role == "user") <= 1
    assert state.fits()
