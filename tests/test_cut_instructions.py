"""A cut's decision probes: the user's instructions, listed by hand, that its user messages state."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from ctxsim.cuts import DEMONSTRATION_END, DEMONSTRATION_MARK, stated_probes, task_probe
from ctxsim.errors import ScenarioError
from ctxsim.lab.contexts import build_context
from ctxsim.lab.pool import scenario_digest
from ctxsim.lab.scenarios import DEFAULT_SUITE, load_scenarios
from ctxsim.model import ContextUnit
from ctxsim.probes import probe_scores
from ctxsim.transcripts import _task_text, load_transcript

DATA = DEFAULT_SUITE.parent
INSTRUCTIONS = DATA / "transcripts" / "instructions.yaml"
RULE_A = "Never edit the tests."
RULE_B = "Always run the linter before you submit."

MESSAGES = [
    {"role": "system", "content": "You are an agent. Never edit the tests."},
    {"role": "user", "content": f"<pr_description>\nConsider the following PR description:\nParser drops charset\n"
                                f"</pr_description>\n{RULE_A} {RULE_B}"},
    {"role": "assistant", "content": '[tool_call] open_file {"path": "src/mail/header_parser.py"}'},
    {"role": "tool", "content": "[File: src/mail/header_parser.py (120 lines total)]\n41: def parse_charset(value):"},
    {"role": "assistant", "content": '[tool_call] edit_file {"path": "src/mail/header_parser.py"}'},
    {"role": "tool", "content": "Edited parse_charset in src/mail/header_parser.py"},
]


@pytest.fixture
def session(write_file) -> Path:
    return write_file("session.jsonl", "".join(json.dumps(m) + "\n" for m in MESSAGES))


def test_stated_instructions_are_rule_probes_at_the_user_unit_that_states_them(session):
    listed = [RULE_B, "Never push to main.", RULE_A, RULE_B]  # one not stated, one listed twice
    state = load_transcript(session, cut=4 / 6, instructions=listed)
    rules = [f for f in state.fact_table if f.kind == "rule"]
    assert [(f.id, f.value, f.unit_id, f.priority) for f in rules] == [
        ("cut-rule-1", RULE_B, "line-2", 1), ("cut-rule-2", RULE_A, "line-2", 1)]
    assert not any(f.kind == "rule" for f in load_transcript(session, cut=4 / 6).fact_table)
    assert load_transcript(session, instructions=listed).fact_table == ()  # no cut, no probes


def test_only_user_messages_outside_a_demonstration_state_an_instruction():
    demo = ContextUnit("d", "message", f"Intro.\n{DEMONSTRATION_MARK}\n{RULE_A}\n{DEMONSTRATION_END}\nNow the task.",
                       role="user", priority=3)
    system = ContextUnit("s", "message", f"{RULE_A} {RULE_B}", role="system", priority=1)
    assistant = ContextUnit("a", "message", RULE_B, role="assistant")
    assert stated_probes([system, demo, assistant], [RULE_A, RULE_B]) == ()
    task = ContextUnit("t", "message", f"Fix it. {RULE_A}", role="user", priority=1)
    assert [(f.value, f.unit_id) for f in stated_probes([system, demo, task], [RULE_A, RULE_B])] == [(RULE_A, "t")]


def test_a_break_that_drops_the_task_message_loses_its_decision_probes(session):
    state = load_transcript(session, cut=4 / 6, instructions=[RULE_A, RULE_B])
    kept = probe_scores(state, state)
    dropped = probe_scores(state, replace(state, units=tuple(u for u in state.units if u.id != "line-2")))
    assert kept["decision"] == 1.0 and dropped["decision"] == 0.5  # the system prompt still states RULE_A


def test_the_task_line_is_a_continuation_probe_at_the_task_message(session):
    state = load_transcript(session, cut=4 / 6)
    task = [f for f in state.fact_table if f.id == "cut-task"]
    assert [(f.value, f.unit_id, f.kind, f.priority) for f in task] == [("Parser drops charset", "line-2", "continuation", 1)]
    dropped = replace(state, units=tuple(u for u in state.units if u.id != "line-2"))
    assert probe_scores(state, dropped)["continuation"] < probe_scores(state, state)["continuation"] == 1.0
    unit = ContextUnit("t", "message", "Fix the parser.", role="user", priority=1)
    assert task_probe(unit, "Fix the parser.")[0].unit_id == "t"
    assert task_probe(unit, "Something else") == () and task_probe(None, "Fix the parser.") == ()
    assert load_transcript(session).fact_table == ()  # no cut, no probe


def test_the_task_is_the_title_after_the_issue_or_pr_description_line():
    assert _task_text(MESSAGES[1]["content"]) == "Parser drops charset"
    assert _task_text("We're solving an issue.\nISSUE:\nTimeDelta rounds down\nmore") == "TimeDelta rounds down"
    assert _task_text("<task>\n\nFix the flaky test in ci.yml\n</task>") == "Fix the flaky test in ci.yml"
    assert _task_text("Solve the CTF challenge Katy.") == "Solve the CTF challenge Katy."


def test_every_shipped_corpus_session_has_its_pr_title_as_task_and_the_template_instructions():
    corpus = sorted((DATA / "transcripts" / "mini-swe-agent").glob("*.jsonl.gz"))
    tasks = [load_transcript(path).task for path in corpus[:20]]
    assert all(task and not task.startswith("<") and "PR description" not in task for task in tasks)
    families = {s.name: s for s in load_scenarios(DATA / "families" / "swe_corpus.yaml")}
    state = build_context(families["swe-validation"], 0)
    rules = [f for f in state.fact_table if f.kind == "rule"]
    assert len(rules) == 13 and {f.unit_id for f in rules} == {"line-2"}


def test_every_listed_instruction_is_stated_by_a_shipped_transcript():
    sentences = load_scenarios(DATA / "families" / "transcripts.yaml")[-1].instruction_sentences
    files = sorted((DATA / "transcripts").glob("*.jsonl")) + sorted((DATA / "transcripts" / "mini-swe-agent").glob("*.jsonl.gz"))[:1]
    stated = {f.value for path in files for f in load_transcript(path, cut=0.5, instructions=sentences).fact_table}
    assert len(sentences) == 25 and set(sentences) <= stated


def test_the_cut_families_name_the_instructions_and_their_digest_covers_the_file(tmp_path, write_file):
    cut_families = [s for name in ("transcripts", "swe_corpus", "swe_corpus_early")
                    for s in load_scenarios(DATA / "families" / f"{name}.yaml") if s.cut is not None]
    assert cut_families and all(s.instructions_path.resolve() == INSTRUCTIONS.resolve() for s in cut_families)
    listed = write_file("rules.yaml", f"instructions:\n  - {RULE_A}\n")
    path = write_file("cut.yaml", f"name: c\ntranscript: {DATA / 'transcripts' / 'ctf-crypto-katy.jsonl'}\ncut: 0.5\n"
                                  "instructions: rules.yaml\n")
    before = scenario_digest(load_scenarios(path)[0])
    listed.write_text(f"instructions:\n  - {RULE_B}\n", encoding="utf-8")
    assert scenario_digest(load_scenarios(path)[0]) != before


@pytest.mark.parametrize("scenario, rules, key, message", [
    ("cut: 0.5\ninstructions: missing.yaml\n", None, "instructions", "no such file"),
    ("instructions: rules.yaml\n", "instructions:\n  - Never.\n", "instructions", "give 'cut' too"),
    ("cut: 0.5\ninstructions: rules.yaml\n", "instructions: Never.\n", "instructions", "non-empty list"),
    ("cut: 0.5\ninstructions: rules.yaml\n", "instructions:\n  - Never.\n  - 'two\n\n    lines'\n", "instructions[1]", "one line"),
    ("cut: 0.5\ninstructions: rules.yaml\n", "rules:\n  - Never.\n", None, "the one key 'instructions'"),
])
def test_a_bad_instructions_key_or_file_is_refused_in_one_line(tmp_path, write_file, capsys, scenario, rules, key, message):
    from ctxsim.lab.cli import main

    if rules is not None:
        write_file("rules.yaml", rules)
    path = write_file("cut.yaml", f"name: c\ntranscript: {DATA / 'transcripts' / 'ctf-crypto-katy.jsonl'}\n{scenario}")
    with pytest.raises(ScenarioError, match=message) as exc:
        load_scenarios(path)
    assert exc.value.key == key
    out = tmp_path / "out"
    assert main(["evaluate", "--policy", "random", "--scenarios", str(path), "--seeds", "1", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("ctxsim: error: ") and err.count("\n") == 1 and message in err
    assert not out.exists()
