"""The shipped generated scenarios are agent-loop sessions that keep their intent.

Each scenario's intent is measured on its generated contexts (seeds 0-3): the material
it plants, the kinds of step it is made of, its unit sizes, its P1 and pinned units, its
limit and overflow. Also: every probe kind planted, same seed -> same text in another
process, names and descriptions that say what the files hold.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys

import pytest

from ctxsim.lab.agent_options import step_mix
from ctxsim.config import model_limit
from ctxsim.probes import PROBE_KINDS, probe_kind
from ctxsim.lab.contexts import build_context
from ctxsim.lab.scenarios import DEFAULT_SUITE, load_scenarios
from ctxsim.serialize import dumps_state
from ctxsim.lab.corpus import DEFAULT_CORPUS
from ctxsim.strategies.pruning import DedupeToolResults, PurgeErrors, SupersedeWrites
from ctxsim.tokens import count_tokens
from ctxsim.transcripts import load_transcript

SEEDS = range(4)
GENERATED = [s for s in load_scenarios(DEFAULT_SUITE) if not s.is_transcript]
BY_NAME = {s.name: s for s in GENERATED}


@pytest.fixture(scope="module")
def contexts():
    return {s.name: [build_context(s, seed) for seed in SEEDS] for s in GENERATED}


def _command(unit) -> str:
    return json.loads(unit.tool.arguments).get("command", "")


def _exact_rereads(state) -> int:
    """Tool results whose call and output both equal an earlier one's."""
    seen, count = set(), 0
    for unit in state.units:
        if unit.tool is not None:
            key = (unit.tool.arguments, unit.content)
            count += key in seen
            seen.add(key)
    return count


def test_every_generated_scenario_is_an_agent_loop_session():
    assert len(GENERATED) == 19
    assert all(s.session == "agent_loop" for s in GENERATED)


@pytest.mark.parametrize("name", sorted(BY_NAME))
def test_overflow_limit_and_probes(name, contexts):
    scenario = BY_NAME[name]
    overflow = scenario.overflow or scenario.target_tokens / scenario.resolved_limit
    for state in contexts[name]:
        assert state.limit == scenario.resolved_limit
        assert state.total_tokens > state.limit
        assert 0.95 * overflow <= state.total_tokens / state.limit <= 1.2 * overflow
        assert {probe_kind(f) for f in state.fact_table} == set(PROBE_KINDS)
        for fact in state.fact_table:
            assert fact.value in state.unit(fact.unit_id).content
            assert fact.priority == state.unit(fact.unit_id).priority


def test_model_limits():
    for name, model in (("gpt4-6000", "gpt4"), ("cloud-grok-8000", "cloud_grok"), ("local-14b-floor", "local_14b")):
        assert BY_NAME[name].model == model and BY_NAME[name].resolved_limit == model_limit(model)
    assert (model_limit("gpt4"), model_limit("cloud_grok"), model_limit("local_14b")) == (6000, 8000, 3500)


def test_mild_and_severe_overflow(contexts):
    assert all(1.0 < s.total_tokens / s.limit <= 1.26 for s in contexts["mild-overflow"])
    assert all(4.75 <= s.total_tokens / s.limit <= 6 for s in contexts["severe-overflow"])


def test_tool_dupes_has_exact_rereads_that_dedupe_removes(contexts):
    for state in contexts["tool-dupes"]:
        assert _exact_rereads(state) >= 8
        assert len(DedupeToolResults().select(state)) >= 8
    assert max(_exact_rereads(s) for s in contexts["mild-overflow"]) < 8  # not what any session has


def test_error_heavy_has_failed_commands(contexts):
    for state in contexts["error-heavy"]:
        failed = [u for u in state.units if u.tool is not None and u.tool.outcome == "failure"]
        assert len(failed) >= 8 + 1  # the eight planted and the reproduced bug
        assert PurgeErrors().applicable(state)
    assert max(sum(u.tool.outcome == "failure" for u in s.units if u.tool) for s in contexts["mild-overflow"]) < 8


def test_fact_dense_plants_24_facts_and_rules(contexts):
    for state in contexts["fact-dense"]:
        kinds = [f.kind for f in state.fact_table]
        assert kinds.count("rule") == 8 and kinds.count("fact") == 16
        values = [f.value for f in state.fact_table if f.kind == "fact"]
        assert len(set(values)) == len(values)


@pytest.mark.parametrize("name, kind, share", [("code-heavy", "code", 0.45), ("log-heavy", "log", 0.45),
                                               ("plan-heavy", "plan_ref", 0.25), ("chat-10k", "message", 0.28)])
def test_mix_scenarios_are_mostly_their_kind(name, kind, share, contexts):
    for state in contexts[name]:
        mix = step_mix(state)
        assert mix[kind] >= share, mix
    default = [step_mix(s)[kind] for s in contexts["mild-overflow"]]
    if kind != "code":  # the fitted session reads code most of all
        assert max(default) < share


def test_plan_updates_are_plan_references(contexts):
    for state in contexts["plan-heavy"]:
        plans = [u for u in state.units if u.type == "plan_ref"]
        assert plans and all(u.role == "assistant" and u.content.startswith("Plan so far:") for u in plans)


def test_mostly_p1(contexts):
    for state in contexts["mostly-p1"]:
        p1 = [u for u in state.units if u.priority == 1]
        assert abs(len(p1) / len(state.units) - 0.95) <= 0.02
        assert sum(state.unit_cost(u) for u in p1) > state.limit  # irreducible while P1 is kept
    for state in contexts["gpt4-6000"]:  # the default: system prompt and task only
        assert [u.id for u in state.units if u.priority == 1] == [state.units[0].id, state.units[1].id]


def test_pinned_instructions(contexts):
    for state in contexts["pinned-instructions"]:
        pinned = [u for u in state.units if u.pinned]
        assert len(pinned) == 6
        assert [u.role for u in pinned[:2]] == ["system", "user"]
        assert all(u.role == "user" and u.content.startswith("Pinned instruction") and u.priority == 1 for u in pinned[2:])


def test_prior_summaries(contexts):
    for state in contexts["prior-summaries"]:
        summaries = [u for u in state.units if u.type == "summary"]
        assert len(summaries) == 4 and sorted(u.summary_depth for u in summaries) == [1, 1, 1, 2]
        assert all(u.content.startswith("[Context Summary - Turns") for u in summaries)


def test_superseded_writes_are_read_back(contexts):
    for state in contexts["superseded-writes"]:
        written = {name: body for name, (_, body) in _check_writes(state).items()}
        read_back = {_command(u)[4:]: u.content for u in state.units if u.tool and _command(u).startswith("cat check_")}
        assert len(written) == 6 and set(read_back) == set(written)
        assert all(written[name] in read_back[name] for name in written)


def test_huge_and_fragmented_units(contexts):
    for state in contexts["huge-units"]:
        sizes = sorted(state.unit_cost(u) for u in state.units)
        assert sum(size >= 3000 for size in sizes) >= 2
        assert max(sizes) <= 6000 + 100
    for state in contexts["fragmented"]:
        sizes = sorted(state.unit_cost(u) for u in state.units)
        assert len(sizes) >= 120 and sizes[len(sizes) // 2] <= 40


def test_misclassified(contexts):
    for state in contexts["misclassified"]:
        wrong = [u for u in state.units if "true_type" in u.meta_dict]
        assert abs(len(wrong) / len(state.units) - 0.25) <= 0.02
        assert all(u.type != u.meta_dict["true_type"] for u in wrong)


def test_severe_overflow_has_a_worked_example_and_its_material(contexts):
    for state in contexts["severe-overflow"]:
        demo = state.units[1]
        assert demo.priority == 3 and "--- DEMONSTRATION ---" in demo.content
        assert _exact_rereads(state) >= 3
        assert sum(f.kind == "rule" for f in state.fact_table) == 4


def test_same_seed_same_text_in_another_process(contexts):
    code = ("import hashlib, sys; from ctxsim.lab.scenarios import DEFAULT_SUITE, load_scenarios; from ctxsim.lab.contexts import build_context; "
            "from ctxsim.serialize import dumps_state; "
            "[print(s.name, hashlib.sha256(dumps_state(build_context(s, 1)).encode()).hexdigest()) "
            "for s in load_scenarios(DEFAULT_SUITE) if not s.is_transcript]")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    there = dict(zip(out[::2], out[1::2]))
    here = {name: hashlib.sha256(dumps_state(states[1]).encode()).hexdigest() for name, states in contexts.items()}
    assert there == here
    assert dumps_state(contexts["tool-dupes"][0]) != dumps_state(contexts["tool-dupes"][1])


@pytest.mark.parametrize("name, words", [
    ("tool-dupes", ("re-reads",)), ("error-heavy", ("failed commands",)), ("fact-dense", ("facts",)),
    ("code-heavy", ("code",)), ("log-heavy", ("output",)), ("plan-heavy", ("plan",)), ("mostly-p1", ("P1",)),
    ("pinned-instructions", ("pinned",)), ("prior-summaries", ("summaries",)), ("superseded-writes", ("shown again", "cat")),
    ("huge-units", ("huge",)), ("misclassified", ("wrong type",)), ("chat-10k", ("user",)), ("fragmented", ("tiny",)),
])
def test_descriptions_name_the_intent(name, words):
    description = BY_NAME[name].description
    assert "agent" in description or "session" in description
    assert all(word in description for word in words)


def _check_writes(state) -> dict[str, tuple[str, str]]:
    """Helper-script name -> (id of the assistant unit that wrote it, the heredoc body)."""
    out = {}
    for unit in state.units:
        for line in unit.content.splitlines():
            if line.startswith("[tool_call] bash "):
                command = json.loads(line.split(" ", 2)[2])["command"]
                if command.startswith("cat > check_"):
                    out[command.split()[2]] = (unit.id, command.split("\n", 1)[1].rsplit("\nEOF", 1)[0])
    return out


def test_supersede_writes_removes_the_bodies_of_the_scripts_shown_again(contexts):
    strategy = SupersedeWrites()
    for state in contexts["superseded-writes"]:
        writes = _check_writes(state)
        assert len(writes) == 6 and strategy.applicable(state)
        result = strategy.apply(state)
        assert result.removed == () and set(result.compressed) >= {uid for uid, _ in writes.values()}
        assert result.state.unit_ids == state.unit_ids
        for name, (uid, body) in writes.items():
            assert f"[superseded: {name} is shown again later]" in result.state.unit(uid).content
            assert json.dumps(body)[1:-1] not in result.state.unit(uid).content
        bodies = sum(count_tokens(json.dumps(body)) for _, body in writes.values())
        markers = sum(count_tokens(json.dumps(f"[superseded: {name} is shown again later]")) for name in writes)
        # counted apart, a body's first and last tokens may merge with their neighbours': 4 per body
        assert result.tokens_reduced >= bodies - markers - 4 * len(writes)


#: a corpus session whose agent writes a script again with a heredoc (the corpus has
#: 64 such re-writes in 35 of its 135 sessions)
REWRITING_SESSION = "django__django-15347__bench1.jsonl.gz"


def test_supersede_writes_applies_to_a_real_session_that_writes_a_file_again():
    state = load_transcript(DEFAULT_CORPUS / REWRITING_SESSION)
    result = SupersedeWrites().apply(state)
    assert result.compressed and result.removed == ()
    for uid in result.compressed:
        before, after = state.unit(uid), result.state.unit(uid)
        assert after.role == "assistant" and "is written again later]" in after.content
        calls = [json.loads(line.split(" ", 2)[2]) for line in after.content.splitlines() if line.startswith("[tool_call] ")]
        assert calls and all(isinstance(c["command"], str) for c in calls)
        assert len(after.content.splitlines()) == len(before.content.splitlines())
