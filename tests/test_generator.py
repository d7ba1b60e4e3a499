"""The faker generator: suite invariants, planted ground truth, determinism, streaming.

The chat-style generator is exercised on ``tests/chat_scenarios``: the 19 scenarios as
they were written for it (the shipped ones are agent-loop sessions since).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctxsim.lab.generator import SessionGenerator, generate, planted, token_mix, true_type
from ctxsim.model import ContextState, content_hash
from ctxsim.lab.scenarios import MIX_TYPES, Scenario, find_scenario, load_scenarios
from ctxsim.serialize import dumps_state, state_from_dict

#: the generated scenarios written for the chat-style generator
CHAT_SUITE = Path(__file__).parent / "chat_scenarios"
GENERATED = load_scenarios(CHAT_SUITE)


@pytest.fixture(scope="module")
def contexts() -> dict[str, ContextState]:
    """Every shipped generated scenario at seed 0."""
    return {s.name: generate(s, 0) for s in GENERATED}


def check_context(scenario: Scenario, state: ContextState, over: float = 0.05) -> None:
    """The invariants every generated context satisfies (total at most ``over`` above the target)."""
    units = state.units
    assert len({u.id for u in units}) == len(units)
    # size and mix
    target = scenario.resolved_target
    assert target <= state.total_tokens <= target * (1 + over)
    mix = token_mix(state)
    for kind in MIX_TYPES:
        assert abs(mix[kind] - scenario.mix.get(kind, 0)) <= 0.10, (kind, mix)
    # the opening: system prompt and the task message are P1, the task is stated
    assert units[0].role == "system" and units[0].priority == 1
    first_user = next(u for u in units if u.role == "user")
    assert first_user.priority == 1 and state.task in first_user.content
    assert state.priority_areas == ("To Do List",)
    # planted facts, rules and next steps: exact values, once in the whole render, in their unit
    render = state.render()
    assert sum(f.kind in ("fact", "rule") for f in state.fact_table) == scenario.facts
    assert sum(f.kind == "rule" for f in state.fact_table) == scenario.rule_count
    for fact in state.fact_table:
        unit = state.unit(fact.unit_id)
        assert fact.value in unit.content and fact.value in fact.text
        assert fact.id in unit.fact_ids and fact.priority == unit.priority
        if fact.kind == "artifact":  # the write unit: first to hold its path and line
            assert unit.tool.tool_name == "write_file" and unit.tool.outcome == "success"
            assert not any(fact.value in u.content for u in units[: state.position(unit.id)])
            continue
        if fact.id == "task":
            assert unit.id == first_user.id and fact.value in state.task
            continue
        assert fact.text in unit.content and render.count(fact.value) == 1, fact
        if fact.kind == "rule":
            assert unit.role == "user" and unit.priority == 1
    assert sorted(f for u in units for f in u.fact_ids) == sorted(f.id for f in state.fact_table)
    check_probes(scenario, state)
    check_planted(scenario, state)
    # priorities, pins, summaries, labels
    p1 = sum(u.priority == 1 for u in units)
    assert abs(p1 - scenario.p1_ratio * len(units)) <= 1 + scenario.rule_count + 2 + scenario.pinned
    pinned = [u for u in units if u.pinned]
    assert len(pinned) == scenario.pinned and all(u.priority == 1 and u.role == "system" for u in pinned)
    summaries = [u for u in units if u.type == "summary"]
    assert len(summaries) == scenario.prior_summaries
    assert all(u.role == "assistant" and u.summary_depth in (1, 2) and "## Rules & Constraints" in u.content for u in summaries)
    if scenario.prior_summaries >= 3:
        assert {u.summary_depth for u in summaries} == {1, 2}
    wrong = [u for u in units if "true_type" in u.meta_dict]
    assert all(u.type != true_type(u) for u in wrong)
    assert abs(len(wrong) - scenario.misclassified * len(units)) <= 1 + 0.05 * len(units)
    # tools carry complete envelopes
    for u in units:
        assert (u.tool is not None) == (true_type(u) == "tool_result")
        if u.tool:
            assert u.role == "tool" and u.tool.key_fields and dict(u.tool.key_fields)["status"]
            assert u.tool.durability == {"read_file": "replayable", "write_file": "anchoring", "run_tests": "ephemeral",
                                         "search": "ephemeral", "http_get": "non_replayable"}[u.tool.tool_name]
            if u.tool.tool_name != "search":
                assert u.tool.target and u.tool.target in u.tool.arguments


def check_probes(scenario: Scenario, state: ContextState) -> None:
    """Every written file gives a path and a line probe; the task and one next step are continuation probes."""
    facts = state.fact_table
    writes = [u for u in state.units if u.tool and u.tool.tool_name == "write_file" and u.tool.outcome == "success"]
    assert len(writes) >= scenario.resolved_writes
    paths = {f.value for f in facts if f.kind == "artifact" and f.id.endswith("-path")}
    assert paths == {u.tool.target for u in writes}
    assert sum(f.kind == "artifact" for f in facts) == 2 * len(writes)
    continuation = [f for f in facts if f.kind == "continuation"]
    assert [f.id for f in continuation][:2] == ["task", "next-step-1"] and len(continuation) == 2
    assert state.unit(continuation[1].unit_id).role == "assistant"


def check_planted(scenario: Scenario, state: ContextState) -> None:
    """Duplicates, superseded writes and errors are exactly the requested planted ones."""
    tools = [u for u in state.units if u.tool]
    # dedupe ground truth: all but the newest of identical calls (same call key and content)
    groups: dict[tuple, list] = {}
    for u in tools:
        groups.setdefault((u.tool.call_key, u.content), []).append(u)
    older = {u.id for group in groups.values() for u in group[:-1]}
    assert older == {u.id for u in planted(state, "duplicate")}
    assert len(older) == scenario.duplicates
    # only identical calls share arguments
    assert len({u.tool.call_key for u in tools}) == len(groups)
    # supersede ground truth: writes whose path a later read_file reads
    superseded = set()
    for i, u in enumerate(tools):
        if u.tool.tool_name == "write_file" and u.tool.outcome == "success":
            if any(v.tool.tool_name == "read_file" and v.tool.target == u.tool.target for v in tools[i + 1 :]):
                superseded.add(u.id)
    assert superseded == {u.id for u in planted(state, "superseded")}
    assert len(superseded) == scenario.superseded_writes
    for u in planted(state, "superseded"):  # the later read shows what was written
        read = next(v for v in tools if v.tool.tool_name == "read_file" and v.tool.target == u.tool.target)
        assert u.content.split("\n", 1)[1] == read.content.split("\n", 1)[1]
    # errors: exactly the planted ones fail, with an error message in the content
    failed = [u for u in tools if u.tool.outcome == "failure"]
    assert {u.id for u in failed} == {u.id for u in planted(state, "error")}
    assert len(failed) == scenario.errors
    assert all(u.tool.error_message and u.tool.error_message in u.content for u in failed)


@pytest.mark.parametrize("scenario", GENERATED, ids=[s.name for s in GENERATED])
def test_shipped_scenario_overflows_with_its_ground_truth(scenario, contexts):
    state = contexts[scenario.name]
    assert state.total_tokens > state.limit == scenario.resolved_limit
    assert state.scenario == scenario.name and state.seed == 0
    check_context(scenario, state)


def test_code_logs_and_plans_look_real(contexts):
    state = contexts["severe-overflow"]
    code = [u for u in state.units if u.type == "code"]
    assert code and all(u.role == "assistant" for u in code)
    assert all("```python" in u.content and "# " in u.content and '"""' in u.content and "\n\n" in u.content for u in code)
    logs = [u for u in state.units if u.type == "log"]
    for u in logs:
        lines = u.content.splitlines()[1:]
        assert all(line[:4] == "2026" and any(f" {lvl}" in line for lvl in ("INFO", "DEBUG", "WARN", "ERROR")) for line in lines)
    assert any(len(set(l.split(" ", 1)[1] for l in u.content.splitlines()[1:])) < len(u.content.splitlines()) - 1 for u in logs)
    plans = [u for u in state.units if u.type == "plan_ref"]
    assert plans and all(u.content.startswith("To Do List") for u in plans)
    tools = Counter(u.tool.tool_name for s in contexts.values() for u in s.units if u.tool)
    assert set(tools) == {"read_file", "write_file", "run_tests", "search", "http_get"}
    read = next(u for u in state.units if u.tool and u.tool.tool_name == "read_file")
    assert read.tool.determinism_hash == content_hash(read.content.split("\n", 1)[1])


def test_fragmented_and_huge_units(contexts):
    assert len(contexts["fragmented"].units) >= 200
    huge = contexts["huge-units"]
    assert len(huge.units) <= 25 and max(u.token_count for u in huge.units) >= 3000


def test_mostly_p1_is_irreducible(contexts):
    state = contexts["mostly-p1"]
    assert state.tokens_by_priority[1] > state.limit


def test_same_seed_same_bytes_in_separate_processes():
    names = ["chat-10k", "misclassified", "severe-overflow"]
    code = (
        "import sys, hashlib\n"
        "from ctxsim.lab.scenarios import find_scenario\n"
        "from ctxsim.lab.generator import generate\n"
        "from ctxsim.serialize import dumps_state\n"
        "for name in sys.argv[1:]:\n"
        f"    print(hashlib.sha256(dumps_state(generate(find_scenario(name, {str(CHAT_SUITE)!r}), 11)).encode()).hexdigest())\n"
    )
    runs = [
        subprocess.run([sys.executable, "-c", code, *names], capture_output=True, text=True, check=True, env={**os.environ, "PYTHONHASHSEED": seed})
        for seed in ("1", "2")
    ]
    assert runs[0].stdout == runs[1].stdout
    here = [hashlib.sha256(dumps_state(generate(find_scenario(n, CHAT_SUITE), 11)).encode()).hexdigest() for n in names]
    assert runs[0].stdout.split() == here


def test_generation_does_not_depend_on_the_clock(monkeypatch):
    """Faker's relative-date providers read the current time; a context must not."""
    import datetime as dt

    import faker.providers.date_time as faker_dates

    scenarios = [*GENERATED[:8], Scenario(name="fam", sample={}, contexts=4)]
    scenarios = [s for s in scenarios if not s.is_transcript]
    now = [generate(s.draw(seed), seed).fingerprint for s in scenarios for seed in range(4)]

    class Later(dt.datetime):
        @classmethod
        def now(cls, tz=None):
            return dt.datetime(2071, 7, 3, 17, 5, tzinfo=tz or dt.timezone.utc).replace(tzinfo=tz)

    monkeypatch.setattr(faker_dates, "datetime", Later)
    later = [generate(s.draw(seed), seed).fingerprint for s in scenarios for seed in range(4)]
    assert later == now


def test_different_seeds_differ_and_json_round_trips():
    scenario = find_scenario("chat-10k", CHAT_SUITE)
    a, b = generate(scenario, 1), generate(scenario, 2)
    assert dumps_state(a) != dumps_state(b)
    assert a.render() != b.render()
    assert state_from_dict(json.loads(dumps_state(a))) == a


def test_task_override_and_no_facts():
    scenario = Scenario.model_validate(
        {"name": "t", "limit": 4000, "overflow": 1.2, "p1_ratio": 0.0, "mix": {"code": 1.0}, "facts": 0, "task": "Port the CLI to Rust"}
    )
    state = generate(scenario, 5)
    assert state.task == "Port the CLI to Rust" and not [f for f in state.fact_table if f.kind in ("fact", "rule")]
    assert state.facts["task"].value == "the CLI to Rust"  # the task without its leading verb
    assert "Port the CLI to Rust" in next(u for u in state.units if u.role == "user").content
    assert token_mix(state)["code"] >= 0.9


def test_message_free_mix():
    scenario = Scenario.model_validate(
        {"name": "code-only", "limit": 3500, "target_tokens": 4000, "p1_ratio": 0.0, "mix": {"code": 1.0}, "facts": 2}
    )
    state = generate(scenario, 0)
    check_context(scenario, state)
    assert token_mix(state)["message"] < 0.06


def test_session_generator_streams_beyond_the_target():
    scenario = find_scenario("error-heavy", CHAT_SUITE)
    session = SessionGenerator(scenario, 4)
    opening = session.next_turn()
    assert [u.role for u in opening][0] == "system" and opening[-1].role == "user"
    seen = len(opening)
    while session.total_tokens < 2.5 * session.target:
        turn = session.next_turn()
        assert turn and session.units[seen:] == tuple(turn)
        seen += len(turn)
        assert session.total_tokens == session.state().total_tokens
    state = session.state()
    assert len(session.facts) > scenario.facts  # the second cycle planted more
    assert len(planted(state, "error")) >= 2 * scenario.errors
    assert len({u.id for u in state.units}) == len(state.units)
    render = state.render()
    once = [f for f in state.fact_table if f.kind != "artifact" and f.id != "task"]
    assert len([f for f in once if f.kind == "continuation"]) >= 2  # a next step per cycle
    assert all(render.count(f.value) == 1 for f in once)
    mix = token_mix(state)
    assert all(abs(mix[k] - scenario.mix.get(k, 0)) <= 0.1 for k in MIX_TYPES)


def test_transcript_scenario_is_not_generated():
    with pytest.raises(ValueError, match="transcript"):
        SessionGenerator(find_scenario("transcript-marshmallow"), 0)


# The system prompt, the task message and the messages that carry rules and facts are
# messages whatever the mix (about 100 tokens plus 25 per fact), so random mixes keep
# a message share that can hold them; test_message_free_mix covers the extreme.
mixes = st.dictionaries(st.sampled_from(MIX_TYPES[1:]), st.integers(1, 10), min_size=1).flatmap(
    lambda d: st.floats(0.15, 0.8).map(lambda m: {"message": m, **{k: (1 - m) * v / sum(d.values()) for k, v in d.items()}})
)


@st.composite
def scenarios(draw) -> Scenario:
    mix = draw(mixes)
    tools = "tool_result" in mix and mix["tool_result"] >= 0.1
    lo = draw(st.integers(8, 300))
    data = {
        "name": draw(st.from_regex(r"[a-z][a-z0-9-]{0,12}", fullmatch=True)),
        "limit": 3500,
        "target_tokens": draw(st.integers(4000, 9000)),
        "mix": mix,
        "p1_ratio": draw(st.floats(0, 1)),
        "facts": draw(st.integers(0, 14)),
        "duplicates": draw(st.integers(0, 3)) if tools else 0,
        "superseded_writes": draw(st.integers(0, 2)) if tools else 0,
        "errors": draw(st.integers(0, 3)) if tools else 0,
        "pinned": draw(st.integers(0, 3)),
        "prior_summaries": draw(st.integers(0, 4)),
        "misclassified": draw(st.sampled_from([0.0, 0.1, 0.3])),
    }
    if draw(st.booleans()):
        data["unit_tokens"] = {"min": lo, "max": lo + draw(st.integers(0, 400))}
    return Scenario.model_validate(data)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenario=scenarios(), seed=st.integers(0, 2**32))
def test_random_scenarios_keep_every_invariant(scenario, seed):
    # small contexts dense with planted items may end a little further above the target
    check_context(scenario, generate(scenario, seed), over=0.08)
