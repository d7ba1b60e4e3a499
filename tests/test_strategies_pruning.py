"""Seed 004 / OpenCode DCP pruning (dedupe, supersede writes, purge errors) and keep-recent compaction."""

from __future__ import annotations

import dataclasses
import json
import random
from functools import lru_cache
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from strategy_contract import apply_with_contract

from ctxsim.lab.contexts import build_context
from ctxsim.model import ContextState, ContextUnit, ToolEnvelope
from ctxsim.lab.scenarios import find_scenario
from ctxsim.strategies import get_strategy
from ctxsim.strategies.pruning import DCP_PROTECTED_TOOLS, call_target, error_text
from ctxsim.strategies import shell
from ctxsim.strategies.shell import FileCommand, file_command, superseded_command
from ctxsim.strategies.window_compaction import MIN_SUMMARY_TOKENS, summary_overhead

PRUNE_IDS = ("dedupe_tool_results", "supersede_writes", "purge_errors")
#: strategy id -> the planted marker of the units it must touch
PLANTED = {"dedupe_tool_results": "duplicate", "supersede_writes": "superseded", "purge_errors": "error"}
RULE = "never delete production data"
TASK = "Migrate the billing service to the new schema."


def message(i: int, content: str, *, role: str = "user", priority: int = 2, pinned: bool = False) -> ContextUnit:
    return ContextUnit(id=f"m{i}", type="message", role=role, content=content, turn=i, priority=priority, pinned=pinned)


def call(i: int, tool: str, *, path: str | None = None, outcome: str = "success", content: str | None = None,
         turn: int | None = None, priority: int = 2, pinned: bool = False, error: str | None = None,
         arguments: dict | None = None) -> ContextUnit:
    arguments = arguments if arguments is not None else ({"path": path} if path else {"n": i})
    body = content or f"{tool} {path or ''} output #{i}:\n" + "\n".join(f"line {k}: value {k * i}" for k in range(12))
    return ContextUnit(
        id=f"t{i}",
        type="tool_result",
        role="tool",
        content=body,
        turn=i if turn is None else turn,
        priority=priority,
        pinned=pinned,
        tool=ToolEnvelope(
            tool_name=tool, call_id=f"c{i}", arguments=ToolEnvelope.canonical_arguments(arguments),
            outcome=outcome, target=path, error_message=error,
        ),
    )


def state_of(units, limit: int | None = None) -> ContextState:
    units = tuple(units)
    if limit is None:
        limit = ContextState(units=units, limit=10**6, min_limit=10).total_tokens
    return ContextState(units=units, limit=limit, min_limit=10, task=TASK)


def planted(unit: ContextUnit) -> str | None:
    return unit.meta_dict.get("planted")


def mark(unit: ContextUnit, kind: str) -> ContextUnit:
    return dataclasses.replace(unit, meta=(("planted", kind),))


OPS = ("read", "write", "fail", "todo", "say")


@st.composite
def tool_states(draw) -> ContextState:
    """Random agent sessions: file reads/writes over 3 paths, failing commands, a protected
    todo tool, messages; redundancy is marked the way the generator marks it."""
    ops = draw(st.lists(st.tuples(st.sampled_from(OPS), st.integers(0, 2), st.booleans()), min_size=1, max_size=24))
    units: list[ContextUnit] = []
    for i, (op, k, flag) in enumerate(ops):
        path = f"src/module_{k}.py"
        if op == "read":
            units.append(call(i, "read_file", path=path, content=f"contents of {path} (version {k})\n" + "x = 1\n" * 20))
        elif op == "write":
            units.append(call(i, "write_file", path=path, arguments={"path": path, "content": f"v{i}"}))
        elif op == "fail":
            units.append(call(i, "run_command", outcome="failure", error=f"exit status {i}: tests failed" if flag else None,
                              content=f"$ pytest -k case{i}\n" + "E   assert 0 == 1\n" * 15 + f"ERROR: case{i} failed"))
        elif op == "todo":
            units.append(call(i, "todowrite", arguments={"todo": "same list"}))
        else:
            units.append(message(i, f"Step {i}: keep going with the migration.", pinned=flag and i % 5 == 0))
    # ground truth, computed from the session as the generator plants it
    last_call = {u.tool.call_key: u.id for u in units if u.tool and u.tool.tool_name not in DCP_PROTECTED_TOOLS}
    out, read_later = [], set()
    for u in reversed(units):
        kind = None
        if u.tool and u.tool.tool_name == "read_file":
            read_later.add(u.tool.target)
        if u.tool and u.tool.tool_name not in DCP_PROTECTED_TOOLS and last_call[u.tool.call_key] != u.id:
            kind = "duplicate"
        elif u.tool and u.tool.tool_name == "write_file" and u.tool.target in read_later:
            kind = "superseded"
        elif u.tool and u.tool.outcome == "failure":
            kind = "error"
        out.append(mark(u, kind) if kind else u)
    return state_of(out[::-1])


SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def check_contract(sid: str, state: ContextState) -> None:
    apply_with_contract(sid, state)


@pytest.mark.parametrize("sid", PRUNE_IDS + ("compact_keep_recent",))
@SETTINGS
@given(state=tool_states(), share=st.floats(0.3, 1.2))
def test_contract(sid, state, share):
    check_contract(sid, state_of(state.units, limit=max(10, int(state.total_tokens * share))))


@pytest.mark.parametrize("scenario", ("tool-dupes", "superseded-writes", "error-heavy", "severe-overflow", "huge-units"))
@pytest.mark.parametrize("sid", PRUNE_IDS + ("compact_keep_recent",))
def test_contract_on_suite_scenarios(sid, scenario):
    check_contract(sid, suite_context(scenario))


#: the chat-style generator's scenarios, whose planted duplicates, superseded writes and
#: failed calls carry ``meta ("planted", kind)`` (agent-loop sessions have no such marks:
#: test_shipped_scenarios.py measures their re-reads and failures)
CHAT_SUITE = Path(__file__).parent / "chat_scenarios"


@lru_cache(maxsize=None)
def suite_context(name: str, suite: Path | None = None) -> ContextState:
    """Seed 0 of a scenario of the shipped suite, or of ``suite``."""
    return build_context(find_scenario(name, suite), 0)


@pytest.mark.parametrize("sid", PRUNE_IDS)
@SETTINGS
@given(state=tool_states())
def test_prunings_touch_exactly_the_planted_units(sid, state):
    result = get_strategy(sid).apply(state)
    touched = set(result.removed) | set(result.compressed)
    expected = {u.id for u in state.units if planted(u) == PLANTED[sid]}
    if sid == "purge_errors":  # only errors at least 4 turns old are purged
        newest = max(u.turn for u in state.units)
        expected = {uid for uid in expected if newest - state.unit(uid).turn >= 4}
        assert result.removed == ()
    else:
        assert result.compressed == ()
    assert touched == expected
    assert result.cost.llm_calls == 0


def test_dedupe_keeps_the_newest_copy_and_spares_protected_tools():
    units = [
        call(0, "read_file", path="a.py", content="old a"),
        call(1, "todowrite", arguments={"todo": "x"}),
        call(2, "read_file", path="b.py"),
        call(3, "read_file", path="a.py", content="new a", priority=1),
        call(4, "todowrite", arguments={"todo": "x"}),
        call(5, "read_file", path="a.py", content="newest a"),
    ]
    state = state_of(units)
    result = get_strategy("dedupe_tool_results").apply(state)
    assert result.removed == ("t0", "t3")
    assert "newest a" in result.state.render()
    custom = get_strategy("dedupe_tool_results", protected_tools=("read_file",)).apply(state)
    assert custom.removed == ("t1",)
    assert not get_strategy("dedupe_tool_results").applicable(state_of(units[:3]))


def test_supersede_needs_a_later_successful_read_of_the_same_target():
    units = [
        call(0, "write_file", path="a.py", arguments={"path": "a.py", "content": "1"}),
        call(1, "read_file", path="b.py"),
        call(2, "edit_file", path="b.py", arguments={"path": "b.py", "patch": "2"}),
        call(3, "read_file", path="a.py"),
        call(4, "create_file", path="c.py", arguments={"path": "c.py"}),
        call(5, "read_file", path="c.py", outcome="failure", error="permission denied"),
    ]
    result = get_strategy("supersede_writes").apply(state_of(units))
    assert result.removed == ("t0",)  # b.py was read before its edit; c.py's read failed


def test_call_target_falls_back_to_path_arguments():
    envelope = ToolEnvelope("write_file", "c1", ToolEnvelope.canonical_arguments({"file_path": "x/y.py", "text": "z"}))
    assert call_target(envelope) == "x/y.py"
    assert call_target(ToolEnvelope("shell", "c2", '["ls"]')) is None
    assert call_target(ToolEnvelope("shell", "c3", "not json")) is None


def test_supersede_parses_each_calls_arguments_once(monkeypatch):
    from ctxsim.strategies import pruning

    parsed: list[str] = []
    json_object = pruning._json_object
    monkeypatch.setattr(pruning, "_json_object", lambda text: parsed.append(text) or json_object(text))
    pruning._call_fields.cache_clear()
    pruning._shell_file_command.cache_clear()
    units = [
        call(0, "bash", arguments={"command": "cat a.py"}),
        call(1, "bash", arguments={"command": "ls -la", "path": "src"}),
        call(2, "write_file", path="a.py"),
        call(3, "read_file", path="a.py"),
        call(4, "bash", arguments={"command": "cat a.py"}),
    ]
    assert [u.id for u in get_strategy("supersede_writes").select(state_of(units))] == ["t2"]
    # the shell calls that can name a whole-file command, each read once (its path and
    # command at once); "ls -la" spells no cat, nl or tee: never parsed
    assert parsed == [units[0].tool.arguments]


def test_purge_errors_keeps_error_messages_in_the_same_unit():
    failing = "$ make deploy\n" + "step output\n" * 40 + "Error: connection refused on port 5432\n"
    units = [
        call(0, "run_command", outcome="failure", content=failing),  # no error_message: taken from the output
        call(1, "run_command", outcome="failure", content=failing + "more\n" * 10, error="timeout after 30 s"),
        message(2, "Let me retry."),
        call(3, "run_command", outcome="failure", content=failing, turn=3),  # too recent (6 - 3 < 4)
        message(6, "Done."),
    ]
    state = state_of(units)
    result = get_strategy("purge_errors").apply(state)
    assert result.compressed == ("t0", "t1") and result.removed == ()
    new = result.state
    assert new.unit_ids == state.unit_ids
    assert "Error: connection refused on port 5432" in new.unit("t0").content
    assert "timeout after 30 s" in new.unit("t1").content
    assert new.unit("t1").content == new.unit("t1").tool.placeholder()
    assert new.unit("t3") == state.unit("t3")
    assert not get_strategy("purge_errors").applicable(new), "purging twice changes nothing"
    assert get_strategy("purge_errors", after_turns=3).applicable(new)


def test_error_text_fallbacks():
    unit = call(0, "x", outcome="failure", content="starting\nTraceback...\nValueError: bad input\ndone")
    assert error_text(unit) == "ValueError: bad input"
    assert error_text(call(1, "x", outcome="failure", content="a\nb\nlast line")) == "last line"


# ---- compact_keep_recent -----------------------------------------------------------------------


def session(n: int = 16) -> ContextState:
    units = [message(0, "You are a coding agent.", role="system", pinned=True)]
    units.append(message(1, f"Important: {RULE}. Always run the tests before a deploy.", priority=1))
    for i in range(2, n):
        if i % 3 == 0:
            units.append(call(i, "read_file", path=f"src/file_{i}.py"))
        else:
            units.append(message(i, f"Turn {i}: we refactored the billing schema, step {i}. " * 6,
                                 role="assistant" if i % 2 else "user"))
    return state_of(units)


def test_compact_keeps_the_last_six_verbatim_and_the_rule_in_the_summary():
    full = session()
    state = state_of(full.units, limit=int(full.total_tokens * 0.6))
    result = get_strategy("compact_keep_recent").apply(state)
    new = result.state
    assert new.fits()
    assert new.units[-6:] == state.units[-6:]
    assert new.units[0] == state.units[0], "pinned system prompt kept in place"
    (summary,) = [u for u in new.units if u.id not in state]
    assert summary.type == "summary" and new.position(summary.id) == 1
    assert RULE in summary.content
    assert set(result.summarized) == {u.id for u in state.units[1:-6]}
    assert result.cost.llm_calls == 1


def test_compact_summary_is_at_most_what_is_needed_and_max_summary_tokens():
    full = session(30)
    older = [u for u in full.units[:-6] if not u.pinned]
    for share, cap in ((0.9, 2000), (0.3, 2000), (0.9, 60)):
        state = state_of(full.units, limit=int(full.total_tokens * share))
        new = get_strategy("compact_keep_recent", max_summary_tokens=cap).apply(state).state
        (summary,) = [u for u in new.units if u.id not in state]
        assert summary.token_count <= cap + summary_overhead(state)
        needed = state.tokens_of(older) - (state.total_tokens - state.limit) - summary_overhead(state)
        assert summary.token_count <= max(MIN_SUMMARY_TOKENS, min(cap, needed)) + summary_overhead(state)


def test_compact_keeps_the_rule_even_when_the_target_is_out_of_reach():
    full = session(12)
    state = state_of(full.units, limit=full.tokens_of(full.units[-6:]))  # the recent units alone fill the limit
    result = get_strategy("compact_keep_recent").apply(state)
    assert result.summarized and not result.state.fits()
    assert RULE in result.state.render()


def test_compact_needs_keep_recent_plus_two_units_and_an_overflow():
    small = session(7)  # 7 units < 6 + 2
    tight = state_of(small.units, limit=50)
    strategy = get_strategy("compact_keep_recent")
    assert not strategy.applicable(tight)
    assert strategy.apply(tight).note == "Not enough messages to compact"
    assert get_strategy("compact_keep_recent", keep_recent=4).applicable(tight)
    roomy = session()
    assert not strategy.applicable(roomy) and not strategy.apply(roomy).changed


@pytest.mark.parametrize(
    "scenario, sid",
    (("tool-dupes", "dedupe_tool_results"), ("superseded-writes", "supersede_writes"), ("error-heavy", "purge_errors")),
)
def test_prunings_touch_exactly_the_planted_units_of_generated_scenarios(scenario, sid):
    state = suite_context(scenario, CHAT_SUITE)
    result = get_strategy(sid).apply(state)
    expected = {u.id for u in state.units if planted(u) == PLANTED[sid]}
    if sid == "purge_errors":
        newest = max(u.turn for u in state.units)
        expected = {uid for uid in expected if newest - state.unit(uid).turn >= 4}
    assert expected, f"scenario {scenario} plants nothing for {sid}"
    assert set(result.removed) | set(result.compressed) == expected
    assert result.state.history[-1] == sid


# ---- shell tools: a bash-only agent's heredoc writes ---------------------------------
SHELL_WRITES = {
    "cat > check.py << 'EOF'\nprint(1)\nEOF": "check.py",
    "cat <<'EOF' > ./check.py\nprint(1)\nEOF": "check.py",
    "cat <<EOF >check.py\nprint(1)\nEOF": "check.py",
    'cat << "END" > pkg/../check.py\nprint(1)\nEND\n': "check.py",
    "cd /testbed && cat > check.py << 'EOF'\nprint(1)\nEOF": "/testbed/check.py",
    "cd /testbed && cat <<'EOF' > /tmp/check.py\nprint(1)\nEOF": "/tmp/check.py",
    "tee notes.txt <<EOF\nhello\nEOF": "notes.txt",
    "cat <<-EOF > check.py\n\tprint(1)\n\tEOF": "check.py",
    "cat > check.py << 'EOF'\nprint(1)\nEOF\npython check.py": "check.py",
}
SHELL_READS = {
    "cat check.py": "check.py",
    "cat ./check.py": "check.py",
    "nl -ba check.py": "check.py",
    "nl check.py": "check.py",
    "cat -n check.py": "check.py",
    "cd /testbed && cat check.py": "/testbed/check.py",
    "cd /testbed && nl -ba src/../check.py": "/testbed/check.py",
    "  cat '/testbed/check.py'\n": "/testbed/check.py",
}
SHELL_NEITHER = (
    "cat check.py | head -20", "nl -ba check.py | sed -n '1,20p'", "sed -n '1,20p' check.py", "head -n 20 check.py",
    "grep -n def check.py", "cat check.py && python check.py", "cat check.py; ls", "cat a.py b.py", "cat *.py",
    "cat $FILE", "cat", "cat >> check.py << 'EOF'\nprint(1)\nEOF", "cat > check.py << 'EOF' && python check.py\nx\nEOF",
    "cat > check.py << 'EOF'\nprint(1)\n", "tee -a log.txt <<EOF\nx\nEOF", "cd /testbed; cat check.py",
    "cd /testbed && cat check.py | wc -l", "echo 'print(1)' > check.py", "python - <<'EOF'\nprint(1)\nEOF",
    "cat 'unbalanced.py", "ls -la",
)


@pytest.mark.parametrize("command, path", SHELL_WRITES.items())
def test_shell_reader_finds_whole_file_heredoc_writes(command, path):
    op = file_command(command)
    assert op is not None and (op.kind, op.path) == ("write", path)
    start, end = op.body
    assert command[start:end].strip() in ("print(1)", "hello")


@pytest.mark.parametrize("command, path", SHELL_READS.items())
def test_shell_reader_finds_whole_file_reads(command, path):
    assert file_command(command) == FileCommand("read", path)


@pytest.mark.parametrize("command", SHELL_NEITHER)
def test_shell_reader_refuses_partial_and_chained_commands(command):
    assert file_command(command) is None


@settings(max_examples=400, deadline=None)
@given(st.text(alphabet="ab./-_=~*?#$`{}[]!%+:,01 \t\r();<>|&'\"\\é\u00a0\x0b", max_size=30))
def test_shell_words_of_any_line_are_shlex_words(line):
    assert shell._words(line) == shell.shlex_words(line)


def test_shell_words_of_a_plain_line_are_read_without_shlex(monkeypatch):
    line = "cd /testbed && cat <<'EOF' >check.py"
    expected = shell.shlex_words(line)
    monkeypatch.setattr(shell.shlex, "shlex", None)  # a call would raise
    assert shell._words(line) == expected == ["cd", "/testbed", "&&", "cat", "<<", "EOF", ">", "check.py"]


def test_superseded_command_keeps_the_first_line_the_delimiter_and_what_follows():
    command = "cd /testbed && cat <<'EOF' > check.py\nimport sys\nprint(sys.argv)\nEOF\npython check.py a"
    assert superseded_command(command, file_command(command), "[gone]") == (
        "cd /testbed && cat <<'EOF' > check.py\n[gone]\nEOF\npython check.py a"
    )
    empty = "cat > empty.py << 'EOF'\nEOF"
    assert superseded_command(empty, file_command(empty), "[gone]") == empty


QUIET = "<returncode>0</returncode>\n<output>\n</output>"
SCRIPT = "\n".join(f"print('case {k}: the value is', {k} * 17)" for k in range(30))


def bash_turn(i: int, command: str, output: str = QUIET, *, outcome: str = "success", priority: int = 2,
              pinned: bool = False, thought: str = "Let me do the next step.") -> tuple[ContextUnit, ContextUnit]:
    """An assistant unit holding a ``[tool_call] bash`` line and the tool result of that call
    (the units the transcript reader makes of a bash-only agent's turn)."""
    arguments = {"command": command}
    assistant = ContextUnit(id=f"a{i}", type="message", role="assistant", turn=i, priority=priority, pinned=pinned,
                            content=f"{thought}\n[tool_call] bash {json.dumps(arguments)}")
    result = ContextUnit(id=f"r{i}", type="tool_result", role="tool", turn=i, content=output,
                         tool=ToolEnvelope("bash", f"c{i}", ToolEnvelope.canonical_arguments(arguments), outcome=outcome))
    return assistant, result


def bash_state(*turns: tuple[ContextUnit, ContextUnit]) -> ContextState:
    return state_of([message(0, TASK)] + [u for turn in turns for u in turn])


def call_commands(unit: ContextUnit) -> list[str]:
    """The commands of a unit's ``[tool_call] bash`` lines (each line's JSON must parse)."""
    return [json.loads(line.split(" ", 2)[2])["command"] for line in unit.content.splitlines()
            if line.startswith("[tool_call] bash ")]


WRITE = f"cat > check.py << 'EOF'\n{SCRIPT}\nEOF"


def test_supersede_rewrites_a_shell_write_that_is_shown_again_later():
    state = bash_state(bash_turn(1, WRITE, thought="I will write a check.\nIt prints thirty cases."),
                       bash_turn(2, "python check.py", "<returncode>0</returncode>\n<output>\ncase 0\n</output>"),
                       bash_turn(3, "cat check.py", f"<returncode>0</returncode>\n<output>\n{SCRIPT}\n</output>"))
    strategy, result = apply_with_contract("supersede_writes", state)
    assert strategy.applicable(state) and strategy.select(state) == [state.unit("a1")]
    assert result.removed == () and result.compressed == ("a1",)
    assert result.state.unit_ids == state.unit_ids
    rewritten = result.state.unit("a1")
    assert rewritten.content.splitlines()[:2] == ["I will write a check.", "It prints thirty cases."]
    assert call_commands(rewritten) == ["cat > check.py << 'EOF'\n[superseded: check.py is shown again later]\nEOF"]
    escaped = json.dumps(SCRIPT)[1:-1]  # the body as the call line's JSON holds it
    assert escaped in state.unit("a1").content and escaped not in rewritten.content
    assert all(result.state.unit(uid) == state.unit(uid) for uid in state.unit_ids if uid != "a1")
    assert result.state.total_tokens < state.total_tokens - 300
    assert result.cost.llm_calls == 0


def test_supersede_rewrites_a_shell_write_that_is_written_again_later():
    second = f"cd /testbed && cat <<'EOF' > ./check.py\n{SCRIPT}\nprint('done')\nEOF\npython check.py"
    state = bash_state(bash_turn(1, f"cd /testbed && {WRITE}"), bash_turn(2, second, outcome="failure"))
    _, result = apply_with_contract("supersede_writes", state)
    assert result.compressed == ("a1",) and result.removed == ()
    assert call_commands(result.state.unit("a1")) == [
        "cd /testbed && cat > check.py << 'EOF'\n[superseded: /testbed/check.py is written again later]\nEOF"
    ]
    assert result.state.unit("a2") == state.unit("a2")  # the newest write holds the file's content


def test_supersede_names_the_nearest_later_command_of_the_path():
    shown = f"<returncode>0</returncode>\n<output>\n{SCRIPT}\n</output>"
    state = bash_state(bash_turn(1, WRITE), bash_turn(2, "nl -ba check.py", shown), bash_turn(3, WRITE), bash_turn(4, "cat ./check.py", shown))
    result = get_strategy("supersede_writes").apply(state)
    assert result.compressed == ("a1", "a3")
    assert "shown again later" in result.state.unit("a1").content and "shown again later" in result.state.unit("a3").content


def test_supersede_crosses_tool_kinds_a_read_tool_shows_a_shell_write_and_a_shell_read_a_write_tool():
    """A bash-and-tools agent: a heredoc write read back by ``read_file``, and a ``write_file``
    read back by ``cat``, are superseded as if read back by their own kind (paths normalized)."""
    shown = call(3, "read_file", path="./check.py", content=SCRIPT, turn=3)
    state = state_of([message(0, TASK), *bash_turn(1, WRITE), shown])
    result = get_strategy("supersede_writes").apply(state)
    assert result.compressed == ("a1",) and "[superseded: check.py is shown again later]" in result.state.unit("a1").content
    failed = call(3, "read_file", path="check.py", outcome="failure", error="permission denied", turn=3)
    assert not get_strategy("supersede_writes").applicable(state_of([message(0, TASK), *bash_turn(1, WRITE), failed]))
    written = call(1, "write_file", path="src/a.py", arguments={"path": "src/a.py", "content": SCRIPT}, turn=1)
    state = state_of([message(0, TASK), written, *bash_turn(2, "cat ./src/a.py", SCRIPT)])
    assert get_strategy("supersede_writes").apply(state).removed == ("t1",)
    other = state_of([message(0, TASK), written, *bash_turn(2, "cat src/b.py", SCRIPT)])
    assert not get_strategy("supersede_writes").applicable(other)


@pytest.mark.parametrize(
    "later",
    (bash_turn(2, "sed -n '1,40p' check.py"), bash_turn(2, "cat check.py | head -40"), bash_turn(2, "cat other.py"),
     bash_turn(2, "cat check.py", "<returncode>1</returncode>\n<output>\ncat: check.py: No such file or directory\n</output>",
               outcome="failure"),
     bash_turn(2, "cd /testbed && cat check.py"), bash_turn(2, f"cat >> check.py << 'EOF'\n{SCRIPT}\nEOF")),
    ids=("sed-n", "piped", "other-path", "failed-read", "other-directory", "append"),
)
def test_supersede_leaves_shell_writes_without_a_later_whole_file_read_or_write(later):
    state = bash_state(bash_turn(1, WRITE), later)
    strategy = get_strategy("supersede_writes")
    assert not strategy.applicable(state) and not strategy.apply(state).changed


def test_supersede_never_touches_a_pinned_caller_and_keeps_a_p1_caller_in_place():
    read = bash_turn(2, "cat check.py", f"<returncode>0</returncode>\n<output>\n{SCRIPT}\n</output>")
    pinned = bash_state(bash_turn(1, WRITE, pinned=True), read)
    assert not get_strategy("supersede_writes").applicable(pinned)
    p1 = bash_state(bash_turn(1, WRITE, priority=1), read)
    _, result = apply_with_contract("supersede_writes", p1)
    assert result.compressed == ("a1",) and result.state.unit("a1").priority == 1


def test_supersede_shell_tools_are_a_parameter_and_later_writes_are_rewritten_once_shorter_only():
    read = bash_turn(2, "cat check.py")
    assert not get_strategy("supersede_writes", shell_tools=()).applicable(bash_state(bash_turn(1, WRITE), read))
    tiny = bash_state(bash_turn(1, "cat > check.py << 'EOF'\nx\nEOF"), read)  # the marker is not shorter than "x"
    assert not get_strategy("supersede_writes").applicable(tiny)


def test_supersede_rewrites_only_the_superseded_call_of_a_unit_with_several():
    other = f"cat > keep.py << 'EOF'\n{SCRIPT}\nEOF"
    caller = ContextUnit(id="a1", type="message", role="assistant", turn=1,
                         content="Two files.\n" + "\n".join(f"[tool_call] bash {json.dumps({'command': c})}" for c in (WRITE, other)))
    results = [ContextUnit(id=f"r1{k}", type="tool_result", role="tool", turn=1, content=QUIET,
                           tool=ToolEnvelope("bash", f"c1{k}", ToolEnvelope.canonical_arguments({"command": c})))
               for k, c in enumerate((WRITE, other))]
    state = state_of([message(0, TASK), caller, *results, *bash_turn(2, "cat check.py")])
    _, result = apply_with_contract("supersede_writes", state)
    assert call_commands(result.state.unit("a1")) == [
        "cat > check.py << 'EOF'\n[superseded: check.py is shown again later]\nEOF", other
    ]


def _plain_delimiter_line(text: str, delimiter: str, strip_tabs: bool) -> int | None:
    """The definition: the offset of the first line (split at "\\n") equal to the delimiter."""
    offset = 0
    for line in text.split("\n"):
        if (line.lstrip("\t") if strip_tabs else line) == delimiter:
            return offset
        offset += len(line) + 1
    return None


def test_a_heredocs_delimiter_line_is_found_as_the_line_loop_finds_it():
    rng = random.Random(5)
    pieces = ["EOF", "\tEOF", "EOF ", " EOF", "E.F", "x", "\n", "\n", "\r", "\t", "EOFX", "$", "(", "a.b"]
    for _ in range(3000):
        text = "".join(rng.choices(pieces, k=rng.randint(0, 12)))
        for delimiter in ("EOF", "E.F", "a.b", "$"):
            for strip_tabs in (False, True):
                assert shell.delimiter_line(text, delimiter, strip_tabs) == _plain_delimiter_line(text, delimiter, strip_tabs)
    body = "\n".join(f"line {i}" for i in range(5000))
    assert shell.delimiter_line(body + "\nEOF\n", "EOF", False) == len(body) + 1
