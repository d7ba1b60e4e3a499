"""Scenario families (ctxsim.lab.families): per-seed draws, validation, and envs and pools drawing from them."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from ctxsim.lab.contexts import build_context
from ctxsim.lab.environments.overflow import ContextOverflowEnv
from ctxsim.lab.families import COUNT_KEYS, TOOL_KEYS, Range, SampleRanges
from ctxsim.lab.pool import build_pool
from ctxsim.lab.scenarios import DEFAULT_SUITE, Scenario, find_scenario, load_scenarios
from ctxsim.serialize import state_from_dict

SHIPPED = DEFAULT_SUITE.parent / "families" / "sampled.yaml"


def test_draws_are_deterministic_per_seed_and_differ_between_seeds():
    ranges = SampleRanges()
    assert ranges.draw(7) == ranges.draw(7)
    draws = [ranges.draw(seed) for seed in range(40)]
    assert len({d["limit"] for d in draws}) > 20
    assert len({tuple(sorted(d["mix"])) for d in draws}) > 5


@pytest.mark.parametrize("seed", range(60))
def test_a_draw_lies_in_its_ranges_and_is_a_valid_scenario(seed):
    ranges = SampleRanges()
    d = ranges.draw(seed)
    for key in ("limit", "overflow", "p1_ratio", "facts", "pinned", "misclassified", "prior_summaries"):
        r = getattr(ranges, key)
        assert r.min <= d[key] <= r.max, key
        assert isinstance(d[key], int) == (key in COUNT_KEYS)
    assert ranges.mix_types.min <= len(d["mix"]) <= ranges.mix_types.max
    assert math.isclose(sum(d["mix"].values()), 1.0, abs_tol=1e-9) and min(d["mix"].values()) >= 0
    if "tool_result" not in d["mix"]:
        assert all(d[k] == 0 for k in TOOL_KEYS)
    low, high = d["unit_tokens"]["min"], d["unit_tokens"]["max"]
    assert ranges.unit_tokens_min.min <= low <= high <= d["limit"]
    Scenario.model_validate({"name": "drawn", **d})


def test_log_range_draws_whole_numbers_inside_and_covers_the_decades():
    r = Range(min=8, max=1500, log=True)
    rng = np.random.default_rng(0)
    values = [r.draw(rng, whole=True) for _ in range(2000)]
    assert all(isinstance(v, int) and 8 <= v <= 1500 for v in values)
    # log-uniform: P(v < 60) = ln(60/8) / ln(1500/8) = 0.39 (a uniform draw would give 0.035)
    assert 0.33 < np.mean([v < 60 for v in values]) < 0.45


def test_a_family_scenario_builds_a_different_overflowing_context_per_seed():
    family = Scenario(name="fam", sample=SampleRanges(), contexts=5)
    states = [build_context(family, seed) for seed in range(5)]
    assert all(s.scenario == "fam" and s.total_tokens > s.limit for s in states)
    assert len({s.limit for s in states}) > 1
    again = build_context(family, 3)
    assert again.fingerprint == states[3].fingerprint
    drawn = family.draw(3)
    assert drawn.limit == states[3].limit and drawn.name == "fam" and not drawn.is_family


def test_a_family_keeps_its_own_floor_task_and_warning_threshold():
    family = Scenario(name="fam", sample=SampleRanges(limit=Range(min=1500, max=2000)), min_limit=1500,
                      warning_threshold=0.7, task="Refactor the parser")
    drawn = family.draw(0)
    assert 1500 <= drawn.limit <= 2000 and drawn.min_limit == 1500
    with pytest.raises(ValueError, match="below min_limit 1500"):  # draws under the floor: refused, not raised to it
        Scenario(name="fam", sample=SampleRanges(limit=Range(min=1000, max=1200)), min_limit=1500)
    state = build_context(family, 0)
    assert state.task == "Refactor the parser" and state.warning_threshold == 0.7


def test_a_family_has_no_fixed_target():
    family = Scenario(name="fam", sample=SampleRanges())
    assert family.resolved_limit is None
    with pytest.raises(Exception, match="draws its target per seed"):
        family.resolved_target


def test_the_shipped_family_loads_and_overrides_contexts():
    (family,) = load_scenarios(SHIPPED)
    assert family.is_family and family.contexts == 500
    assert family.context_count(16) == 500
    plain = Scenario(name="plain", limit=5000, overflow=2.0, p1_ratio=0.3, mix={"message": 1.0})
    assert plain.context_count(16) == 16


def test_env_draws_context_seeds_from_the_scenarios_own_count(tmp_path):
    path = tmp_path / "fam.yaml"
    path.write_text("name: fam\ncontexts: 3\nsample: {overflow: {min: 1.5, max: 2.0}, limit: {min: 3500, max: 4000}, unit_tokens_min: {min: 20, max: 60}}\n")
    env = ContextOverflowEnv({"scenarios": str(path), "contexts_per_scenario": 50})
    seeds = set()
    for i in range(30):
        env.reset(seed=i)
        seeds.add(env.context_seed)
        assert env.scenario == "fam"
    assert seeds == {0, 1, 2}
    assert env.context_count == 3  # the family's own count, not contexts_per_scenario


def test_pool_holds_each_scenarios_own_context_count(tmp_path):
    path = tmp_path / "fam.yaml"
    path.write_text("name: fam\ncontexts: 2\nsample: {overflow: {min: 1.2, max: 1.4}, limit: {min: 3500, max: 3600}, unit_tokens_min: {min: 200, max: 300}}\n")
    config = ContextOverflowEnv.checked_config({"scenarios": str(path), "contexts_per_scenario": 9, "pool": True})
    pool = build_pool(config.model_dump(mode="json"), config.suite, workers=1)
    assert sorted(seed for _, seed in pool.contexts) == [0, 1]


def test_cli_lists_and_generates_a_family(capsys, tmp_path):
    from ctxsim.lab.cli import main

    assert main(["scenarios", "list", "--suite", str(SHIPPED.parent)]) == 0
    out = capsys.readouterr().out
    assert "sampled" in out and "drawn per" in out
    assert "transcript-marshmallow-family" in out
    target = tmp_path / "draw.json"
    assert main(["generate", "--scenario", str(SHIPPED), "--seed", "4", "--out", str(target)]) == 0
    written = state_from_dict(json.loads(target.read_text()))
    assert written.fingerprint == build_context(load_scenarios(SHIPPED)[0], 4).fingerprint


# ---- transcript families: one real conversation, a limit drawn per seed ----------------

MARSHMALLOW = DEFAULT_SUITE.parent / "transcripts" / "swe-marshmallow-1867-fc.jsonl"


def transcript_family(**sample) -> Scenario:
    return Scenario(name="tfam", transcript=str(MARSHMALLOW), sample=SampleRanges(**sample), contexts=8)


def test_a_transcript_family_draws_its_overflow_per_seed_and_keeps_the_conversation():
    from ctxsim.transcripts import load_transcript

    whole = load_transcript(MARSHMALLOW)
    family = transcript_family(overflow=Range(min=1.2, max=2.0))
    states = [build_context(family, seed) for seed in range(8)]
    assert family.is_family and family.varies_by_seed
    assert len({s.limit for s in states}) == 8
    for seed, state in enumerate(states):
        assert 1.2 - 1e-3 <= state.total_tokens / state.limit <= 2.0 + 1e-3
        assert [u.content for u in state.units] == [u.content for u in whole.units]
        assert state.seed == seed and state.scenario == "tfam" and state.min_limit <= state.limit
    assert build_context(family, 5).fingerprint == states[5].fingerprint
    drawn = family.draw(5)
    assert drawn.limit == states[5].limit and not drawn.is_family and not drawn.varies_by_seed


def test_a_transcript_family_may_draw_the_limit_itself_and_keeps_an_explicit_floor():
    family = Scenario(name="tfam", transcript=str(MARSHMALLOW), sample=SampleRanges(limit=Range(min=3000, max=5000)), min_limit=3500)
    limits = {build_context(family, seed).limit for seed in range(12)}
    assert min(limits) == 3500 and max(limits) <= 5000 and len(limits) > 3  # draws under the floor are raised to it


def test_a_plain_transcript_is_one_context_whatever_the_seed():
    (plain,) = [s for s in load_scenarios(DEFAULT_SUITE) if s.name == "transcript-marshmallow"]
    assert not plain.varies_by_seed and plain.draw(3) is plain
    assert build_context(plain, 0).fingerprint == build_context(plain, 7).fingerprint


def test_evaluate_notes_only_transcripts_that_do_not_vary():
    from ctxsim.lab.evaluate import transcript_note

    (plain,) = [s for s in load_scenarios(DEFAULT_SUITE) if s.name == "transcript-marshmallow"]
    assert transcript_note([transcript_family()], seeds=5) is None
    note = transcript_note([plain, transcript_family()], seeds=5)
    assert "transcript-marshmallow is 5 episodes" in note and "tfam" not in note and "transcripts.yaml" in note


def test_the_stream_env_replays_a_transcript_family_at_the_seeds_limit():
    from ctxsim.lab.stream import ProbeConfig, conversation_for

    family = transcript_family(overflow=Range(min=1.2, max=2.0))
    convs = [conversation_for(family, seed, turns=60, probes=ProbeConfig()) for seed in (0, 1)]
    assert [c.limit for c in convs] == [build_context(family, seed).limit for seed in (0, 1)]
    assert convs[0].limit != convs[1].limit and [c.seed for c in convs] == [0, 1]
    assert convs[0].turns == convs[1].turns


def test_a_transcript_family_with_a_missing_file_names_it(tmp_path):
    from ctxsim.errors import TranscriptError

    family = Scenario(name="gone", transcript=str(tmp_path / "nope.jsonl"), sample=SampleRanges())
    with pytest.raises(TranscriptError, match="nope.jsonl.*cannot read file"):
        build_context(family, 0)


# ---- a chat JSONL file where scenarios are expected: a transcript family --------------

def test_a_transcript_file_is_a_transcript_family_named_after_it(tmp_path):
    import shutil

    from ctxsim.lab.families import TRANSCRIPT_FILE_CONTEXTS, TRANSCRIPT_FILE_CUT, TRANSCRIPT_FILE_SAMPLE

    log = tmp_path / "my agent log (1).jsonl"
    shutil.copy(MARSHMALLOW, log)
    scenario, cut = load_scenarios(log)
    assert scenario.name == "my-agent-log-1" and scenario.is_family and scenario.contexts == TRANSCRIPT_FILE_CONTEXTS
    assert cut.name == "my-agent-log-1-cut" and cut.is_family and cut.cut.min == TRANSCRIPT_FILE_CUT["min"]
    assert scenario.transcript_path == log.resolve()
    low, high = TRANSCRIPT_FILE_SAMPLE["overflow"]["min"], TRANSCRIPT_FILE_SAMPLE["overflow"]["max"]
    states = [build_context(scenario, seed) for seed in range(6)]
    assert len({s.limit for s in states}) == 6
    assert all(low - 1e-3 <= s.total_tokens / s.limit <= high + 1e-3 for s in states)
    assert find_scenario(log).name == scenario.name


def test_a_folder_gives_its_scenario_files_and_its_transcripts(tmp_path):
    import shutil

    shutil.copy(MARSHMALLOW, tmp_path / "b-session.jsonl")
    shutil.copy(DEFAULT_SUITE / "mild-overflow.yaml", tmp_path / "a.yaml")
    assert [s.name for s in load_scenarios(tmp_path)] == ["mild-overflow", "b-session", "b-session-cut"]


def test_the_shipped_transcript_families_use_the_values_a_transcript_file_gets():
    from ctxsim.lab.families import TRANSCRIPT_FILE_CONTEXTS, TRANSCRIPT_FILE_SAMPLE

    from ctxsim.lab.families import TRANSCRIPT_FILE_CUT

    shipped = load_scenarios(DEFAULT_SUITE.parent / "families" / "transcripts.yaml")
    for scenario in shipped:
        assert scenario.sample.overflow.model_dump(include={"min", "max"}) == TRANSCRIPT_FILE_SAMPLE["overflow"]
        assert scenario.contexts == TRANSCRIPT_FILE_CONTEXTS
        assert scenario.cut is None or scenario.cut.model_dump(include={"min", "max"}) == TRANSCRIPT_FILE_CUT
    # every shipped transcript has a whole family and a cut family
    transcripts = sorted((DEFAULT_SUITE.parent / "transcripts").glob("*.jsonl"))
    for cut in (False, True):
        assert sorted(s.transcript_path.resolve() for s in shipped if (s.cut is not None) == cut) == transcripts


def test_evaluate_takes_a_transcript_file_and_names_a_bad_line(tmp_path, capsys):
    import pandas as pd

    from ctxsim.lab.cli import main

    out = tmp_path / "r.csv"
    assert main(["evaluate", "--policy", "seed-chain", "--scenarios", str(MARSHMALLOW), "--seeds", "2",
                 "--out", str(out), "--quiet"]) == 0
    rows = pd.read_csv(out)
    assert set(rows["scenario"]) == {"swe-marshmallow-1867-fc", "swe-marshmallow-1867-fc-cut"} and len(rows) == 4
    whole = rows[rows["scenario"] == "swe-marshmallow-1867-fc"]
    assert whole["tokens_before"].nunique() == 1 and (whole["probe_score"] == 1.0).all()  # no future: no probes
    assert rows["oracle_reward"].notna().all()
    capsys.readouterr()

    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"role": "user", "content": "hi"}\n{"role": "assistant", "content": 3}\n')
    assert main(["evaluate", "--policy", "seed-chain", "--scenarios", str(bad), "--seeds", "1",
                 "--out", str(tmp_path / "bad.csv"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "bad.jsonl: line 2: 'content' must be a string" in err
    assert not (tmp_path / "bad.csv").exists()


def test_a_transcript_that_a_scenario_file_reads_is_not_a_scenario_of_its_own(tmp_path):
    import shutil

    shutil.copy(MARSHMALLOW, tmp_path / "t.jsonl")
    shutil.copy(MARSHMALLOW, tmp_path / "u.jsonl")
    (tmp_path / "t.yaml").write_text("name: t\ntranscript: t.jsonl\nlimit: 5000\n")
    (one,) = [s for s in load_scenarios(tmp_path) if s.transcript_path.name == "t.jsonl"]
    assert one.name == "t" and not one.is_family
    assert [s.name for s in load_scenarios(tmp_path)] == ["t", "u", "u-cut"]
