"""Scenario schema, loader, shipped suite and build_context."""

from __future__ import annotations

import pytest
import yaml
from pydantic import ValidationError

from ctxsim.lab.contexts import build_context
from ctxsim.errors import ScenarioError
from ctxsim.model import ContextState
from ctxsim.lab.scenarios import DEFAULT_SUITE, MIX_TYPES, Scenario, find_scenario, load_scenarios

REQUIRED = {
    "chat-10k", "code-heavy", "log-heavy", "plan-heavy", "tool-dupes", "superseded-writes", "error-heavy",
    "mostly-p1", "local-14b-floor", "mild-overflow", "severe-overflow", "fragmented", "huge-units",
    "misclassified", "prior-summaries", "gpt4-6000", "cloud-grok-8000",
}
VALID = {"name": "ok", "limit": 5000, "overflow": 2.0, "p1_ratio": 0.3, "mix": {"message": 0.6, "code": 0.4}}


def dump(data) -> str:
    return yaml.safe_dump(data, sort_keys=False)


# ---- the shipped suite --------------------------------------------------------------


def test_suite_covers_the_required_scenarios(scenario_suite):
    names = {s.name for s in scenario_suite}
    assert REQUIRED <= names
    generated = [s for s in scenario_suite if not s.is_transcript]
    transcripts = [s for s in scenario_suite if s.is_transcript]
    assert len(generated) >= 15
    assert len(transcripts) == 4


def test_suite_files_hold_one_described_scenario_named_after_the_file():
    files = sorted(DEFAULT_SUITE.glob("*.yaml"))
    for file in files:
        (scenario,) = load_scenarios(file)
        assert scenario.name == file.stem
        assert scenario.description and "\n" not in scenario.description
        assert scenario.source == file.resolve()


def test_generated_scenarios_overflow_and_stay_small(scenario_suite):
    for s in scenario_suite:
        if s.is_transcript:
            continue
        assert s.resolved_limit < s.resolved_target <= 40_000, s.name
        assert s.resolved_limit >= s.min_limit


def test_seed_specific_scenarios(scenario_suite):
    by_name = {s.name: s for s in scenario_suite}
    chat = by_name["chat-10k"]
    assert (chat.resolved_limit, chat.resolved_target, chat.user_turns) == (5000, 10_000, 4)
    assert {"message", "code", "plan_ref", "tool_result"} <= set(chat.mix)
    assert by_name["local-14b-floor"].resolved_limit == 3500 == by_name["local-14b-floor"].min_limit
    assert by_name["gpt4-6000"].resolved_limit == 6000
    assert by_name["cloud-grok-8000"].resolved_limit == 8000
    assert by_name["mild-overflow"].overflow == pytest.approx(1.05)
    assert by_name["severe-overflow"].overflow == pytest.approx(5.0)
    mostly = by_name["mostly-p1"]
    assert mostly.p1_ratio >= 0.9 and mostly.p1_ratio * mostly.resolved_target > 2 * mostly.resolved_limit
    assert mostly.p1_placement == "spread"
    assert by_name["tool-dupes"].duplicates > 0 and by_name["superseded-writes"].superseded_writes > 0
    assert by_name["error-heavy"].errors > 0 and by_name["misclassified"].misclassified > 0
    assert by_name["prior-summaries"].prior_summaries > 0
    assert by_name["fragmented"].unit_tokens.max <= 40 and by_name["huge-units"].unit_tokens.min >= 2000


def test_transcript_scenarios_overflow_their_limit(scenario_suite):
    for s in scenario_suite:
        if not s.is_transcript:
            continue
        assert s.transcript_path.is_file()
        state = build_context(s, seed=0)
        assert isinstance(state, ContextState)
        assert state.limit == s.resolved_limit and state.min_limit == s.min_limit
        assert state.total_tokens > state.limit
        assert state.scenario == s.name


def test_build_context_generates_generated_scenarios():
    scenario = find_scenario("mild-overflow")
    state = build_context(scenario, seed=3)
    assert state.scenario == "mild-overflow" and state.seed == 3
    assert state.total_tokens >= scenario.resolved_target > state.limit


# ---- loading ------------------------------------------------------------------------


def test_list_file_and_folder_loading(tmp_path, write_file):
    write_file("b.yaml", dump({"scenarios": [VALID, {**VALID, "name": "two", "model": "gpt4", "limit": None}]}))
    write_file("a.yaml", dump({**VALID, "name": "first"}))
    write_file("notes.txt", "not a scenario")
    names = [s.name for s in load_scenarios(tmp_path)]
    assert names == ["first", "ok", "two"]  # files sorted by name, then file order
    (two,) = [s for s in load_scenarios(tmp_path / "b.yaml") if s.name == "two"]
    assert two.resolved_limit == 6000 and two.resolved_target == 12_000


def test_defaults():
    s = Scenario.model_validate(VALID)
    assert (s.facts, s.rule_count, s.min_limit, s.warning_threshold) == (8, 3, 3500, 0.8)
    assert (s.duplicates, s.superseded_writes, s.errors, s.pinned, s.prior_summaries, s.misclassified) == (0, 0, 0, 0, 0, 0)
    assert s.source is None and not s.is_transcript
    assert Scenario.model_validate({**VALID, "facts": 10}).rule_count == 3
    assert Scenario.model_validate({**VALID, "facts": 2}).rule_count == 1


def test_scenario_is_frozen():
    s = Scenario.model_validate(VALID)
    with pytest.raises(ValidationError):
        s.limit = 10


def test_find_scenario_by_name_file_and_unknown(tmp_path, write_file):
    assert find_scenario("chat-10k").name == "chat-10k"
    path = write_file("mine.yaml", dump(VALID))
    assert find_scenario(path).name == "ok"
    assert find_scenario("ok", suite=tmp_path).name == "ok"
    with pytest.raises(ScenarioError) as err:
        find_scenario("no-such-scenario")
    assert "chat-10k" in str(err.value) and "no-such-scenario" in str(err.value)
    many = write_file("many.yaml", dump({"scenarios": [VALID, {**VALID, "name": "other"}]}))
    with pytest.raises(ScenarioError, match="2 scenarios"):
        find_scenario(many)


def test_transcript_path_is_relative_to_the_scenario_file(write_file, repo_root):
    transcript = repo_root / "data" / "transcripts" / "swe-testrepo-missing-colon-fc.jsonl"
    write_file("t/colon.jsonl", transcript.read_bytes())
    path = write_file("t/s.yaml", dump({"name": "t", "transcript": "colon.jsonl"}))
    (s,) = load_scenarios(path)
    assert s.transcript_path == path.parent / "colon.jsonl"
    state = build_context(s, seed=0)
    assert state.limit == state.total_tokens and s.resolved_limit is None  # no limit: the transcript fits


BAD = [
    # (id, file text, key in the message, words of the reason)
    ("malformed", "name: x\nmix: {message: 1\n", None, "invalid YAML at line"),
    ("not a mapping", "- just\n- a list\n", None, "expected a scenario mapping"),
    ("unknown key", dump({**VALID, "colour": "red"}), "colour", "unknown key"),
    ("unknown mix type", dump({**VALID, "mix": {"message": 0.5, "poetry": 0.5}}), "mix.poetry", "bad key name"),
    ("wrong type", dump({**VALID, "limit": "5000"}), "limit", "valid integer"),
    ("bool as int", dump({**VALID, "facts": True}), "facts", "valid integer"),
    ("negative count", dump({**VALID, "duplicates": -1}), "duplicates", "greater than or equal to 0"),
    ("p1 out of range", dump({**VALID, "p1_ratio": 1.5}), "p1_ratio", "less than or equal to 1"),
    ("zero overflow", dump({**VALID, "overflow": 0}), "overflow", "greater than 0"),
    ("infinite overflow", dump({**VALID, "overflow": float("inf")}), "overflow", "finite number (got inf)"),
    ("huge overflow", dump({**VALID, "overflow": 1e300}), "overflow", "less than or equal to 100 (got 1e+300)"),
    ("nan share", dump({**VALID, "p1_ratio": float("nan")}), "p1_ratio", "finite number (got nan)"),
    ("nan threshold", dump({**VALID, "warning_threshold": float("nan")}), "warning_threshold", "finite number (got nan)"),
    ("family overflow over the bound", dump({"name": "f", "sample": {"overflow": {"min": 2, "max": 300}}}),
     "sample.overflow.max", "at most 100 (got 300"),
    ("infinite family range", dump({"name": "f", "sample": {"limit": {"min": 4000, "max": float("inf")}}}),
     "sample.limit.max", "finite number (got inf)"),
    ("infinite transcript family overflow", dump({"name": "t", "transcript": "x.jsonl", "sample": {"overflow": {"min": 2, "max": float("inf")}}}),
     "sample.overflow.max", "finite number (got inf)"),
    ("mix sum", dump({**VALID, "mix": {"message": 0.5, "code": 0.4}}), "mix", "sum to 1"),
    ("both limit and model", dump({**VALID, "model": "gpt4"}), "model", "not both"),
    ("neither limit nor model", dump({k: v for k, v in VALID.items() if k != "limit"}), "limit", "exactly one of 'limit' or 'model'"),
    ("both target and overflow", dump({**VALID, "target_tokens": 9000}), "target_tokens", "exactly one of"),
    ("neither target nor overflow", dump({k: v for k, v in VALID.items() if k != "overflow"}), "target_tokens", "exactly one of"),
    ("missing mix", dump({k: v for k, v in VALID.items() if k != "mix"}), "mix", "required"),
    ("missing name", dump({k: v for k, v in VALID.items() if k != "name"}), "name", "required"),
    ("limit under floor", dump({**VALID, "limit": 3000}), "limit", "below min_limit 3500"),
    ("unit tokens order", dump({**VALID, "unit_tokens": {"min": 50, "max": 10}}), "unit_tokens.min", "must not exceed max"),
    ("model under floor", dump({**VALID, "limit": None, "model": "local_14b", "min_limit": 4000}), "model", "below min_limit 4000"),
    ("planted tools without tool share", dump({**VALID, "errors": 2}), "mix", "tool_result share"),
    ("generated key in transcript", dump({"name": "t", "transcript": "x.jsonl", "mix": {"message": 1.0}}), "mix", "transcript scenario"),
    ("fixed key in a family", dump({"name": "f", "sample": {}, "limit": 5000}), "limit", "drawn by 'sample'"),
    ("limit in a transcript family", dump({"name": "t", "transcript": "x.jsonl", "limit": 5000, "sample": {}}), "limit", "transcript family"),
    ("generated range in a transcript family", dump({"name": "t", "transcript": "x.jsonl", "sample": {"p1_ratio": {"min": 0, "max": 1}}}),
     "sample.p1_ratio", "draws only overflow or limit"),
    ("limit and overflow in a transcript family",
     dump({"name": "t", "transcript": "x.jsonl", "sample": {"limit": {"min": 2000, "max": 3000}, "overflow": {"min": 1.1, "max": 2}}}),
     "sample.limit", "not both"),
    ("family range order", dump({"name": "f", "sample": {"overflow": {"min": 3, "max": 2}}}), "sample.overflow.min", "must not exceed max"),
    ("family range outside", dump({"name": "f", "sample": {"p1_ratio": {"min": 0, "max": 2}}}), "sample.p1_ratio", "within [0, 1]"),
    ("family unknown range", dump({"name": "f", "sample": {"colour": {"min": 0, "max": 1}}}), "sample.colour", "unknown key"),
    ("family count range without a whole number", dump({"name": "f", "sample": {"facts": {"min": 2.2, "max": 2.8}}}),
     "sample.facts", "the range holds none"),
    ("zero contexts", dump({**VALID, "contexts": 0}), "contexts", "greater than or equal to 1"),
    ("contexts beyond the bound", dump({**VALID, "contexts": 10**12}), "contexts", "less than or equal to 100000"),
    ("limit beyond any window", dump({**VALID, "limit": 2_000_000_000}), "limit", "less than or equal to 10000000"),
    ("target beyond any window", dump({**{k: v for k, v in VALID.items() if k != "overflow"}, "target_tokens": 10**23}),
     "target_tokens", "less than or equal to 10000000"),
    ("overflow x limit beyond the bound", dump({**VALID, "limit": 5_000_000, "overflow": 3}), "overflow",
     "x the limit 5,000,000 exceeds 10,000,000 tokens"),
    ("family limit under the floor", dump({"name": "f", "sample": {"limit": {"min": 3000, "max": 4000}}}),
     "sample.limit.min", "below min_limit 3500"),
    ("family limit beyond the bound", dump({"name": "f", "sample": {"limit": {"min": 4000, "max": 1e12}}}),
     "sample.limit.max", "at most 10,000,000 tokens"),
    ("family limit x overflow beyond the bound", dump({"name": "f", "sample": {"limit": {"min": 4000, "max": 4e6}}}),
     "sample.limit.max", "x sample.overflow.max 3 exceeds 10,000,000 tokens"),
    ("list item", dump({"scenarios": [VALID, {**VALID, "name": "b", "p1_ratio": "high"}]}), "scenarios[1].p1_ratio", "valid number"),
    ("empty list", dump({"scenarios": []}), "scenarios", "non-empty list"),
]


def test_a_models_limit_times_the_overflow_is_bounded_too(write_file):
    path = write_file("big.yaml", dump({**{k: v for k, v in VALID.items() if k != "limit"}, "model": "gemini-3-pro", "overflow": 20}))
    scenario = load_scenarios(path)[0]
    with pytest.raises(ScenarioError, match=r"key 'overflow': overflow 20 x the limit of model 'gemini-3-pro' \(1,000,000\) exceeds"):
        scenario.resolved_target


@pytest.mark.parametrize("text,key,reason", [case[1:] for case in BAD], ids=[case[0] for case in BAD])
def test_bad_file_raises_one_line_scenario_error(write_file, text, key, reason):
    path = write_file("bad.yaml", text)
    with pytest.raises(ScenarioError) as err:
        load_scenarios(path)
    message = str(err.value)
    assert "\n" not in message
    assert str(path) in message
    if key is not None:
        assert f"key '{key}'" in message
    assert reason in message


def test_non_utf8_file(write_file):
    path = write_file("latin.yaml", "name: caf\xe9\n".encode("latin-1"))
    with pytest.raises(ScenarioError, match="not UTF-8") as err:
        load_scenarios(path)
    assert str(path) in str(err.value)


def test_duplicate_names_across_files(tmp_path, write_file):
    first = write_file("a.yaml", dump(VALID))
    second = write_file("b.yaml", dump(VALID))
    with pytest.raises(ScenarioError) as err:
        load_scenarios(tmp_path)
    message = str(err.value)
    assert str(second) in message and str(first) in message and "key 'name'" in message


def test_empty_folder(tmp_path):
    with pytest.raises(ScenarioError, match="no \\*.yaml"):
        load_scenarios(tmp_path)


def test_mix_types_are_the_generator_types():
    assert set(MIX_TYPES) == {"message", "code", "plan_ref", "log", "tool_result", "other"}


def test_cli_scenarios_list_shows_every_shipped_scenario(capsys):
    from ctxsim.lab.cli import main
    from ctxsim.lab.scenarios import DEFAULT_SUITE, load_scenarios

    assert main(["scenarios", "list"]) == 0
    out = capsys.readouterr().out
    for sc in load_scenarios(DEFAULT_SUITE):
        assert sc.name in out


@pytest.mark.parametrize("overflow, shown", [(".inf", "inf"), ("1.0e+300", "1e+300")])
def test_cli_rejects_an_unbounded_overflow_in_one_line(tmp_path, write_file, capsys, overflow, shown):
    from ctxsim.lab.cli import main

    path = write_file("big.yaml", f"name: big\nlimit: 5000\noverflow: {overflow}\np1_ratio: 0.3\nmix: {{message: 1.0}}\n")
    out = tmp_path / "out"
    for argv in (["scenarios", "list", "--suite", str(path)], ["generate", "--scenario", str(path), "--out", str(out)],
                 ["evaluate", "--policy", "random", "--scenarios", str(path), "--seeds", "1", "--out", str(out)]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"ctxsim: error: {path}: key 'overflow': ") and err.count("\n") == 1
        assert f"(got {shown})" in err
        assert not out.exists()
