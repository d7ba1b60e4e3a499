"""``examples/instructions_kept.py``: what a break keeps of the user's instructions and
task, which the probes of a transcript cut do not ask for."""

from __future__ import annotations

import importlib.util
import math

import pytest

from ctxsim.model import ContextState, ContextUnit


@pytest.fixture(scope="module")
def example(repo_root):
    spec = importlib.util.spec_from_file_location("instructions_kept", repo_root / "examples" / "instructions_kept.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _state(*contents: tuple[str, str], task: str = "Fix the parser") -> ContextState:
    units = tuple(ContextUnit(id=f"u{k}", type="message", role=role, content=text, turn=k)
                  for k, (role, text) in enumerate(contents))
    return ContextState(units=units, limit=10_000, task=task)


def test_the_row_counts_user_instructions_and_the_task_line(example):
    state = _state(("system", "Never run as root."),
                   ("user", "Fix the parser\nNever push to main. The parser lives in src/parse.py. Always run the tests."),
                   ("assistant", "You must be kidding."))
    assert example.instructions(state) == ["Never push to main.", "Always run the tests."]  # user messages only
    kept = example.kept_row(state, state)
    assert kept == {"instructions": 1.0, "n_instructions": 2, "task": 1.0}
    later = _state(("user", "Always run the tests."), ("assistant", "Done."))
    assert example.kept_row(state, later) == {"instructions": 0.5, "n_instructions": 2, "task": 0.0}
    none = example.kept_row(_state(("assistant", "Never mind.")), later)
    assert math.isnan(none["instructions"]) and none["n_instructions"] == 0


def test_trim_messages_drops_the_instructions_and_task_of_a_real_session_cut(example):
    pytest.importorskip("langchain_core")
    df = example.play(["peer:langchain-trim", "only:remove_low_priority"], ["swe-train"], range(200, 201))
    rows = df.set_index("policy")
    assert set(rows.index) == {"peer:langchain-trim", "only:remove_low_priority"}
    assert rows.loc["peer:langchain-trim", "n_instructions"] > 5  # the agent template states several
    # trim keeps the system message and the newest messages: the task message goes
    assert rows.loc["peer:langchain-trim", "instructions"] == 0 and rows.loc["peer:langchain-trim", "task"] == 0
    # a removal keeps every unit that states a user rule (and so the task message)
    assert rows.loc["only:remove_low_priority", "instructions"] == 1 and rows.loc["only:remove_low_priority", "task"] == 1
    table = example.summary(df)
    assert list(table.index.get_level_values("policy")) == ["peer:langchain-trim", "only:remove_low_priority"]


def test_the_held_out_split_is_not_offered(example, capsys):
    with pytest.raises(SystemExit):
        example.main(["--split", "eval", "--policy", "greedy"])
    assert "invalid choice" in capsys.readouterr().err
