"""Agent-loop sessions with ``probes: continuation`` (ctxsim.lab.continuation): the context
is cut from a longer generated session, its probes are what the rest uses again."""

from __future__ import annotations

import pytest

from ctxsim.cuts import candidates
from ctxsim.errors import ScenarioError
from ctxsim.lab.agent_session import generate_session
from ctxsim.lab.contexts import build_context
from ctxsim.lab.continuation import STRETCH, cut_after
from ctxsim.lab.scenarios import Scenario, find_scenario, load_scenarios

FAMILY = "data/families/agent_sessions.yaml"


def continued(name: str, **keys) -> Scenario:
    return Scenario.model_validate({**find_scenario(name).model_dump(exclude_unset=True), "probes": "continuation", **keys})


@pytest.fixture(scope="module")
def pairs():
    """(scenario, context, the whole longer session it was cut from) for a few shipped scenarios."""
    out = []
    for name, seed in (("code-heavy", 0), ("chat-10k", 3), ("fact-dense", 1)):
        scenario = continued(name)
        whole = generate_session(scenario.model_copy(update={"target_tokens": round(STRETCH * scenario.resolved_target)}), seed)
        out.append((scenario, build_context(scenario, seed), whole))
    return out


def test_the_context_is_the_start_of_a_longer_session_cut_after_a_tool_result(pairs):
    for scenario, state, whole in pairs:
        k = len(state.units)
        assert [u.content for u in state.units] == [u.content for u in whole.units[:k]]
        assert k < len(whole.units) and state.units[-1].tool is not None
        assert state.total_tokens >= scenario.resolved_target > state.limit == scenario.resolved_limit
        assert not state.fits(state.limit)


def test_every_probe_is_a_string_of_the_context_that_the_rest_uses_again(pairs):
    for _, state, whole in pairs:
        future = whole.units[len(state.units):]
        future_text = "\n".join(u.content for u in future)
        context_text = "\n".join(u.content for u in state.units)
        kinds = {f.kind for f in state.fact_table}
        assert {"rule", "fact", "artifact"} <= kinds
        for fact in state.fact_table:
            holder = next(u for u in state.units if u.id == fact.unit_id)
            assert fact.value in holder.content and fact.id in holder.fact_ids
            if fact.kind == "rule":  # the user's rules: the generator's own, stated in the task
                assert fact in whole.fact_table and holder.priority == 1
                continue
            assert fact.value in context_text and fact.value in future_text
            if fact.kind != "continuation" and " " not in fact.value:  # a path, identifier or number
                assert any(fact.value in candidates(u.content, tool_output=u.tool is not None) for u in future)
        planted = {f.value for f in whole.fact_table if f.kind == "fact"}
        reused = {f.value for f in state.fact_table if f.kind == "fact"}
        assert reused - planted  # not the planted facts: what the session used again


def test_the_same_seed_gives_the_same_context_and_planted_stays_the_default(pairs):
    scenario, state, _ = pairs[0]
    assert build_context(scenario, 0) == state
    plain = find_scenario("code-heavy")
    assert plain.probes == "planted" and build_context(plain, 0) == generate_session(plain, 0)
    assert build_context(plain, 0).fact_table != state.fact_table


def test_the_cut_reaches_the_target_then_the_next_tool_result():
    whole = generate_session(find_scenario("chat-10k"), 2)
    for target in (1, 3000, whole.total_tokens // 2):
        k = cut_after(whole, target)
        before = sum(whole.unit_cost(u) for u in whole.units[:k])
        assert before >= target and whole.units[k - 1].tool is not None and k < len(whole.units)
        shorter = k - 1
        while shorter > 0 and whole.units[shorter - 1].tool is None:
            shorter -= 1
        assert shorter == 0 or sum(whole.unit_cost(u) for u in whole.units[:shorter]) < target  # the first such cut
    assert cut_after(whole, 10**9) == len(whole.units) - 1  # too short a session: the future keeps its last unit


def test_the_shipped_family_passes_the_option_to_every_draw(repo_root):
    family = find_scenario(repo_root / "data" / "families" / "agent_sessions_continuation.yaml")
    assert family.sample == find_scenario(repo_root / FAMILY).sample
    for seed in (0, 1):
        drawn = family.draw(seed)
        assert drawn.probes == "continuation"
        state = build_context(family, seed)
        assert state.fact_table and not state.fits(state.limit)
        assert state.fact_table != build_context(find_scenario(repo_root / FAMILY), seed).fact_table


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("name: s\nlimit: 8000\noverflow: 1.5\np1_ratio: 0.2\nmix: {message: 1.0}\nprobes: continuation\n",
         r"s.yaml.*probes.*only an agent_loop session.*continuation"),
        ("name: s\ntranscript: chat.jsonl\nprobes: continuation\n", r"s.yaml.*probes.*only an agent_loop session"),
        ("name: s\nsession: agent_loop\nlimit: 8000\noverflow: 1.5\nprobes: future\n", r"s.yaml.*probes.*future"),
    ],
    ids=["generated", "transcript", "bad value"],
)
def test_the_option_is_checked(write_file, text, match):
    write_file("chat.jsonl", '{"role": "user", "content": "hi"}\n')
    with pytest.raises(ScenarioError, match=match):
        load_scenarios(write_file("s.yaml", text))


def test_the_continuation_suite_follows_the_generated_scenarios(repo_root):
    """data/families/continuation.yaml holds every agent-loop scenario of data/scenarios with
    the same keys, its name suffixed, and probes: continuation."""
    from ctxsim.lab.scenarios import DEFAULT_SUITE

    base = {s.name: s for s in load_scenarios(DEFAULT_SUITE) if s.session == "agent_loop"}
    suite = load_scenarios(repo_root / "data" / "families" / "continuation.yaml")
    assert sorted(s.name for s in suite) == sorted(f"{name}-continuation" for name in base)
    for scenario in suite:
        original = base[scenario.name.removesuffix("-continuation")]
        assert scenario.probes == "continuation"
        assert scenario.model_dump(exclude={"name", "description", "probes"}) == original.model_dump(
            exclude={"name", "description", "probes"})
