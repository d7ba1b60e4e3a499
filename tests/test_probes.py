"""Probes of four kinds on generated contexts: planted, answered by the rules of ctxsim.probes, scored, rewarded.

Contexts come from the chat-style generator (``tests/chat_scenarios``), whose planted
write_file calls and fact ids these tests read; the shipped agent-loop scenarios'
probes are checked in test_shipped_scenarios.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ctxsim.lab.generator import generate
from ctxsim.metrics import outcome
from ctxsim.model import ContextState, ContextUnit, Fact
from ctxsim.probes import PROBE_KINDS, SCORE_COLUMNS, answered, probe_kind, probe_score, probe_scores
from ctxsim.reward import RewardWeights, compute_reward, reward_terms
from ctxsim.lab.scenarios import find_scenario, load_scenarios
from ctxsim.strategies import StrategyContext
from ctxsim.strategies.ladder import externalize_span
from ctxsim.lab.stream.rehydration import RehydrationConfig, Rehydrator

CHAT_SUITE = Path(__file__).parent / "chat_scenarios"
GENERATED = load_scenarios(CHAT_SUITE)


@pytest.fixture(scope="module")
def state() -> ContextState:
    return generate(find_scenario("gpt4-6000", CHAT_SUITE), 0)


def holders(state: ContextState, value: str) -> list[ContextUnit]:
    return [u for u in state.units if value in u.content]


def probe_of(state: ContextState, kind: str, *, alone: bool = True) -> Fact:
    """A probe of ``kind`` whose value one unit alone holds (when ``alone``)."""
    return next(f for f in state.fact_table if probe_kind(f) == kind and (not alone or len(holders(state, f.value)) == 1))


def without(state: ContextState, ids: set[str]) -> ContextState:
    return state.with_units([u for u in state.units if u.id not in ids], applied="drop")


@pytest.mark.parametrize("scenario", GENERATED, ids=[s.name for s in GENERATED])
def test_every_generated_context_has_all_four_kinds(scenario):
    state = generate(scenario, 1)
    kinds = {probe_kind(f) for f in state.fact_table}
    assert kinds == set(PROBE_KINDS)
    assert outcome(state, state).probe_scores == dict.fromkeys(PROBE_KINDS, 1.0)  # unchanged: all answered


def test_artifact_probes_are_the_written_files_path_and_latest_content(state):
    writes = {u.id: u for u in state.units if u.tool and u.tool.tool_name == "write_file" and u.tool.outcome == "success"}
    artifacts = [f for f in state.fact_table if f.kind == "artifact"]
    assert len(artifacts) == 2 * len(writes) and {f.unit_id for f in artifacts} == set(writes)
    for fact in artifacts:
        unit = writes[fact.unit_id]
        if fact.id.endswith("-path"):
            assert fact.value == unit.tool.target
        else:  # a line of the written text that no earlier unit holds
            assert fact.value in [line.strip() for line in unit.content.split("\n", 1)[1].splitlines()]
            assert not any(fact.value in u.content for u in state.units[: state.position(unit.id)])


def test_continuation_probes_are_the_task_and_a_late_next_step(state):
    task, step = (f for f in state.fact_table if f.kind == "continuation")
    assert task.value in state.task and task.unit_id == next(u.id for u in state.units if u.role == "user")
    position = state.position(step.unit_id) / len(state.units)
    assert position > 0.5 and state.unit(step.unit_id).role == "assistant" and "Open item" in step.text


@pytest.mark.parametrize("kind", PROBE_KINDS)
def test_a_kept_probe_is_answered_and_a_dropped_one_is_not(state, kind):
    fact = probe_of(state, kind, alone=kind != "continuation")
    dropped = without(state, {u.id for u in holders(state, fact.value) if not u.pinned})
    assert not answered(fact, dropped.render()) and answered(fact, state.render())
    scores = probe_scores(state, dropped)
    assert scores[kind] < 1.0 and probe_score(state, dropped) < 1.0
    assert outcome(state, dropped).probe_scores == scores
    # the other kinds lose only what the dropped units held
    for other in PROBE_KINDS:
        lost = [f for f in state.fact_table if probe_kind(f) == other and not answered(f, dropped.render())]
        assert (scores[other] < 1.0) == bool(lost)


@pytest.mark.parametrize("kind", PROBE_KINDS)
def test_a_summary_answers_what_it_carries_and_nothing_it_rephrased(state, kind):
    fact = probe_of(state, kind)
    (unit,) = holders(state, fact.value)

    def summarized(text: str) -> ContextState:
        summary = ContextUnit(id="summary-x", type="summary", role="assistant", content=text, source_ids=(unit.id,),
                              summary_depth=1)
        return state.with_units([summary if u.id == unit.id else u for u in state.units], applied="summarize_old")

    values = [state.facts[i].value for i in unit.fact_ids]  # everything the unit held
    carried = summarized("[Context Summary]\n## Facts\n" + "\n".join(f"- {v}" for v in values))
    assert answered(fact, carried.render()) and probe_scores(state, carried)[kind] == 1.0
    rephrased = summarized("[Context Summary]\n## Facts\n" + "\n".join(f"- {v.upper()[::-1]} (paraphrased)" for v in values))
    assert not answered(fact, rephrased.render()) and probe_scores(state, rephrased)[kind] < 1.0


def test_an_externalized_file_answers_its_path_only_until_rehydrated(state):
    line = next(f for f in state.fact_table
                if f.kind == "artifact" and f.id.endswith("-line") and len(holders(state, f.value)) == 1)
    path = state.facts[line.id.replace("-line", "-path")]
    unit = state.unit(line.unit_id)
    pointer, artifact, _ = externalize_span([unit], StrategyContext(), 40)
    externalized = state.with_units([pointer if u.id == unit.id else u for u in state.units], applied="externalize",
                                    artifacts=state.artifacts + (artifact,))
    # the pointer's rehydrate hint names the file; its content is out of the prompt
    assert path.value in pointer.content and answered(path, externalized.render())
    assert line.value not in pointer.content and not answered(line, externalized.render())
    assert line.value in externalized.read_artifact(artifact.id)
    # rehydrated (seed 002's read_artifact, through the long-horizon session's rehydrator): answered again
    ask = ContextUnit(id="ask", type="message", role="user", content=f"Show me artifact {artifact.id} again.")
    asked = externalized.with_units(externalized.units + (ask,))
    (injected,) = Rehydrator(RehydrationConfig(), state.limit).inject([ask], asked, {u.id: u for u in state.units}, 1)
    rehydrated = asked.with_units(asked.units + (injected.unit,))
    assert answered(line, rehydrated.render()) and answered(path, rehydrated.render())


def test_scores_are_one_without_probes_and_per_kind_when_a_kind_is_missing():
    unit = ContextUnit(id="u", type="message", content="The budget is $1,250.")
    bare = ContextState(units=(unit,), limit=4000)
    assert probe_score(bare, bare) == 1.0 and probe_scores(bare, bare) == dict.fromkeys(PROBE_KINDS, 1.0)
    planted = ContextState(units=(unit,), limit=4000, fact_table=(Fact("f", "$1,250", "u"),))
    empty = planted.with_units([ContextUnit(id="v", type="message", content="nothing")])
    assert probe_scores(planted, empty) == {"recall": 0.0, "artifact": 1.0, "continuation": 1.0, "decision": 1.0}
    assert set(SCORE_COLUMNS.values()) == {f"probe_{k}" for k in PROBE_KINDS}


def test_facts_and_rules_retained_keep_counting_only_facts_and_rules(state):
    task = state.facts["task"]
    gone = without(state, {u.id for u in holders(state, task.value)})
    o = outcome(state, gone)
    assert o.probe_continuation < 1.0
    facts = [f for f in state.fact_table if f.kind == "fact"]
    assert o.facts_retained == sum(answered(f, gone.render()) for f in facts) / len(facts)


# ---- reward profiles ------------------------------------------------------------------

def _fitting_break(state: ContextState, keep: set[str]) -> ContextState:
    """Drop the oldest non-pinned units that hold no probe answer (besides ``keep``) until the context fits."""
    values = [f.value for f in state.fact_table]
    current = state
    for unit in state.units:
        if current.fits():
            break
        if unit.pinned or unit.id in keep or any(v in unit.content for v in values):
            continue
        current = without(current, {unit.id})
    return current


@pytest.mark.parametrize("scenario", [s for s in GENERATED if s.name in ("gpt4-6000", "fact-dense", "huge-units", "tool-dupes")],
                         ids=lambda s: s.name)
def test_dropping_a_probe_answer_lowers_the_grounded_reward_even_when_it_raises_reduction(scenario):
    state = generate(scenario, 0)
    base = _fitting_break(state, set())
    assert base.fits()
    # the largest unit that alone holds a probe answer: the most a drop of it can gain in reduction
    sole = {u.id for f in state.fact_table if len(hs := holders(base, f.value)) == 1 for u in hs if not u.pinned}
    unit = max((base.unit(i) for i in sole), key=lambda u: u.token_count)
    cut = without(base, {unit.id})
    before, after = outcome(state, base), outcome(state, cut)
    assert after.reduction > before.reduction and after.probe_score < before.probe_score
    grounded = RewardWeights(profile="grounded")
    assert compute_reward(after, grounded) < compute_reward(before, grounded)
    assert reward_terms(after, grounded)["probes"] < reward_terms(before, grounded)["probes"] <= 0.0
    # seed001 is seed 001's formula exactly: no probe term
    assert reward_terms(after)["probes"] == 0.0 and compute_reward(after) == compute_reward(after, RewardWeights(probes=0.0))


def test_grounded_equals_seed001_when_every_probe_is_answered_and_weights_override(state):
    o = outcome(state, state.with_units(state.units[:1] + state.units[2:]))
    kept = outcome(state, state)
    assert compute_reward(kept, RewardWeights(profile="grounded")) == compute_reward(kept)
    assert RewardWeights(profile="grounded").probe_weight == 1.5
    assert RewardWeights(profile="grounded", probes=3.0).probe_weight == 3.0
    assert RewardWeights().probe_weight == 0.0
    terms = reward_terms(o, RewardWeights(profile="grounded", probes=3.0))
    assert terms["probes"] == pytest.approx(3.0 * (o.probe_score - 1.0)) if o.success else terms["probes"] == 0.0


# ---- where probe scores show: results, logs, the long-horizon env, env specs ----------------

def test_evaluate_shows_reward_and_probe_scores_side_by_side_under_either_profile(repo_root, tmp_path):
    from ctxsim.lab.evaluate import evaluate, settings_from_env_spec, summarize
    from ctxsim.lab.results import COLUMNS, read_results
    from ctxsim.lab.sweep import Tolerances, compare

    scenarios = [find_scenario("mild-overflow", CHAT_SUITE), find_scenario("fact-dense", CHAT_SUITE)]
    frames = {}
    for spec, profile in ((None, "seed001"), (repo_root / "envs" / "grounded.yaml", "grounded")):
        settings, config = settings_from_env_spec(spec)
        assert settings.reward.profile == profile and config["reward"]["profile"] == profile
        df = evaluate(["only:remove_oldest"], scenarios, [0], settings, note=lambda _: None)
        assert list(df.columns) == list(COLUMNS) and set(df["reward_profile"]) == {profile}
        for column in ("probe_score", *SCORE_COLUMNS.values()):
            assert df[column].between(0, 1).all()
        frames[profile] = df
    seed001, grounded = frames["seed001"], frames["grounded"]
    assert (seed001["probe_score"] < 1).any()  # dropping the oldest loses probes
    lost = seed001["success"] & (seed001["probe_score"] < 1)
    assert lost.any()
    expected = (seed001["reward"] + 1.5 * (seed001["probe_score"] - 1)).clip(-2, 2)
    assert grounded["reward"][lost].tolist() == pytest.approx(expected[lost].tolist())
    summary = summarize(seed001, reps=50)
    assert summary["probe_score"].iloc[0] == pytest.approx(seed001["probe_score"].mean())
    # the results CSV reads back; a baseline from before probes (no probe columns) still compares
    path = tmp_path / "r.csv"
    seed001.to_csv(path, index=False)
    results = read_results(path)
    old = results.drop(columns=["probe_score", *SCORE_COLUMNS.values(), "reward_profile"])
    assert compare(results, old, Tolerances()).empty
    better = results.assign(probe_score=results["probe_score"] + 0.2)
    assert set(compare(results, better, Tolerances())["metric"]) == {"probe_score"}
    assert compare(results, better, Tolerances(probe_score=0.3)).empty


def test_logged_outcomes_carry_probe_scores_and_log_summaries_read_them(tmp_path):
    from ctxsim.lab.export import summarize_log
    from ctxsim.transitions import TransitionWriter, state_summary

    state = generate(find_scenario("mild-overflow", CHAT_SUITE), 0)
    task = state.facts["task"]
    gone = without(state, {u.id for u in holders(state, task.value)})
    summary = state_summary(gone)
    facts = [f for f in state.fact_table if f.kind in ("fact", "rule")]
    assert summary["facts_present"] == sum(answered(f, gone.render()) for f in facts) / len(facts)
    assert summary["probes_present"] == probe_score(gone, gone) < 1.0
    o = outcome(state, gone)
    log = tmp_path / "log.jsonl"
    with TransitionWriter(log, run_id="r") as writer:
        writer.write_transition(episode=0, step=0, scenario="mild-overflow", seed=0, state_before=state,
                                observation_before=[0.0], action="drop", reward=0.5, state_after=gone,
                                observation_after=[0.0], terminated=True, truncated=False, outcome=o.to_dict())
    (episode,) = summarize_log(log).episodes
    assert episode.probe_score == pytest.approx(o.probe_score) and o.probe_score < 1.0
    assert summarize_log(log).overall.mean_probe_score == pytest.approx(o.probe_score)


def test_stream_probes_take_the_four_kinds_in_turn_and_report_each():
    from ctxsim.lab.stream.conversation import conversation_for
    from ctxsim.lab.stream.evaluate_stream import COLUMNS, evaluate_stream
    from ctxsim.lab.stream.probes import MASK, ProbeConfig

    conv = conversation_for(find_scenario("gpt4-6000", CHAT_SUITE), 0, 60, ProbeConfig(turns=(15, 25, 35, 45, 55)))
    kinds = [probe_kind(conv.fact(p.fact_id)) for p in conv.probes]
    assert sorted(kinds[:4]) == sorted(PROBE_KINDS)
    for probe in conv.probes:
        assert conv.fact(probe.fact_id).value not in probe.question and MASK in probe.question
    config = {"scenario_names": ["gpt4-6000"], "contexts_per_scenario": 1, "turns": 40,
              "probes": {"turns": [12, 20, 28, 36], "min_age_turns": 5}}
    df = evaluate_stream(["seed-chain"], ["gpt4-6000"], [0], config)
    assert {f"probe_share_{k}" for k in PROBE_KINDS} <= set(COLUMNS) <= set(df.columns)
    row = df.iloc[0]
    assert row["probes_asked"] == 4
    shares = [row[f"probe_share_{k}"] for k in PROBE_KINDS]
    assert row["probe_share"] == pytest.approx(sum(shares) / 4)  # one probe of each kind


def test_an_env_spec_names_its_profile_and_a_bad_one_is_one_line_exit_2(tmp_path, capsys):
    from ctxsim.lab.cli import main
    from ctxsim.lab.environments.overflow import ContextOverflowEnv

    config = ContextOverflowEnv.checked_config({"reward": {"profile": "grounded", "p1": 0.4}}).model_dump(mode="json")
    assert config["reward"]["profile"] == "grounded" and config["reward"]["p1"] == 0.4 and config["reward"]["probes"] is None
    spec = tmp_path / "bad.yaml"
    spec.write_text("id: ctxsim/ContextOverflow-v0\nconfig:\n  reward: {profile: nope}\n")
    assert main(["evaluate", "--env", str(spec), "--policy", "seed-chain", "--names", "mild-overflow", "--seeds", "1",
                 "--out", str(tmp_path / "r.csv"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "config.reward.profile" in err and "nope" in err
