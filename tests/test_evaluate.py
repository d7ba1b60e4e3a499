"""Evaluation rows, normalized scores, the per-policy summary and ``ctxsim evaluate``."""

from __future__ import annotations

import sys

import numpy as np
import pandas as pd
import pytest

from ctxsim.lab.cli import main
from ctxsim.lab.contexts import build_context
from ctxsim.episode import EpisodeSettings
from ctxsim.lab.evaluate import episode_seed, evaluate, summarize
from ctxsim.policies import best_chain, get_policy, run_episode, search
from ctxsim.lab.results import COLUMNS
from ctxsim.lab.scenarios import load_scenarios
from ctxsim.transitions import read_transitions

SETTINGS = EpisodeSettings(actions=("dedupe_tool_results", "remove_oldest", "summarize_old", "truncate", "fresh_start"), max_steps=2)

SUITE = """\
scenarios:
  - name: tiny-chat
    limit: 3500
    target_tokens: 4400
    mix: {message: 0.6, code: 0.2, tool_result: 0.2}
    p1_ratio: 0.2
    facts: 3
  - name: tiny-tools
    limit: 3500
    target_tokens: 4600
    mix: {message: 0.4, log: 0.2, tool_result: 0.4}
    p1_ratio: 0.1
    duplicates: 2
    facts: 3
"""


@pytest.fixture(scope="module")
def scenarios(tmp_path_factory):
    path = tmp_path_factory.mktemp("suite") / "tiny.yaml"
    path.write_text(SUITE)
    return load_scenarios(path)


@pytest.fixture(scope="module")
def frame(scenarios):
    return evaluate(["random", "oracle", "greedy", "peer:letta"], scenarios, 2, SETTINGS)


def test_one_row_per_policy_scenario_seed(frame, scenarios):
    assert list(frame.columns) == list(COLUMNS)
    keys = list(zip(frame.policy, frame.scenario, frame.seed))
    expected = [(p, s.name, k) for p in ("random", "oracle", "greedy", "peer:letta") for s in scenarios for k in (0, 1)]
    assert keys == expected
    assert (frame.chain.str.split(">").str.len() == frame.steps).all()
    assert ((frame.tokens_after < frame.tokens_before) | ~frame.success).all()
    np.testing.assert_allclose(frame.reduction_pct, 100 * (frame.tokens_before - frame.tokens_after) / frame.tokens_before)


def test_rows_match_the_episodes(frame, scenarios):
    row = frame[(frame.policy == "random") & (frame.seed == 1)].iloc[0]
    state = build_context(scenarios[0], 1)
    episode = run_episode(get_policy("random"), state, SETTINGS, episode_seed(scenarios[0].name, 1))
    assert row.reward == episode.reward and row.chain == ">".join(episode.chain)
    assert row.coherence == episode.outcome.coherence and row.latency_ms == episode.latency_ms
    assert row.oracle_reward == best_chain(state, SETTINGS)[0]
    assert row.random_reward == search(state, SETTINGS).random_reward
    assert (frame.random_reward < frame.oracle_reward).all()  # no shipped context makes every chain equal


def test_normalized_scores(frame):
    oracle = frame[frame.policy == "oracle"]
    assert (oracle.normalized_score == 1.0).all() and (oracle.reward == oracle.oracle_reward).all()
    span = frame.oracle_reward - frame.random_reward
    expected = np.where(span.abs() > 1e-9, (frame.reward - frame.random_reward) / span, 1.0)
    np.testing.assert_allclose(frame.normalized_score, expected)
    inside = frame[frame.policy != "peer:letta"]  # peers act outside the action set
    assert (inside.reward <= inside.oracle_reward + 1e-12).all()


def test_evaluation_is_deterministic(frame, scenarios):
    again = evaluate(["random", "oracle", "greedy", "peer:letta"], scenarios, [0, 1], SETTINGS)
    pd.testing.assert_frame_equal(frame, again)


def test_without_the_oracle_the_policies_rows_are_the_same(frame, scenarios):
    """``oracle=False`` skips each context's search: the policies' own columns are
    the same values, the oracle's columns NaN."""
    policies = ["random", "greedy", "peer:letta"]
    alone = evaluate(policies, scenarios, 2, SETTINGS, oracle=False)
    searched = frame[frame.policy.isin(policies)].reset_index(drop=True)
    oracle_columns = ["oracle_reward", "random_reward", "normalized_score"]
    assert alone[oracle_columns].isna().all().all()
    pd.testing.assert_frame_equal(alone.drop(columns=oracle_columns), searched.drop(columns=oracle_columns))


def test_summary_per_policy(frame):
    summary = summarize(frame, reps=300)
    assert list(summary.policy) == ["random", "oracle", "greedy", "peer:letta"]
    oracle = summary.set_index("policy").loc["oracle"]
    assert oracle.iqm_normalized == oracle.iqm_ci_low == oracle.iqm_ci_high == 1.0
    assert (summary.iqm_ci_low <= summary.iqm_normalized + 1e-12).all()
    assert (summary.iqm_normalized <= summary.iqm_ci_high + 1e-12).all()
    assert (summary.reward_ci_low <= summary.mean_reward).all() and (summary.mean_reward <= summary.reward_ci_high).all()
    greedy = frame[frame.policy == "greedy"]
    row = summary.set_index("policy").loc["greedy"]
    assert row.success_rate == greedy.success.mean() and row.episodes == 4
    assert row.latency_ms == pytest.approx(greedy.latency_ms.mean())


def test_missing_peer_extra_is_skipped_with_a_note(scenarios, monkeypatch):
    monkeypatch.setitem(sys.modules, "langchain_core", None)
    notes = []
    df = evaluate(["peer:langchain-trim", "random"], scenarios[:1], 1, SETTINGS, note=notes.append)
    assert list(df.policy) == ["random"] and len(notes) == 1 and "peer:langchain-trim" in notes[0]


def test_cli_evaluate_writes_the_csv_and_the_log(scenarios, tmp_path, capsys):
    out, log, env = tmp_path / "eval.csv", tmp_path / "steps.jsonl", tmp_path / "small.yaml"
    env.write_text(
        "id: ctxsim/ContextOverflow-v0\n"
        f"config: {{actions: {list(SETTINGS.actions)}, max_steps: {SETTINGS.max_steps}}}\n"
    )
    code = main(["evaluate", "--policy", "random", "--policy", "greedy", "--scenarios", str(scenarios[0].source),
                 "--seeds", "2", "--out", str(out), "--log", str(log), "--env", str(env), "--quiet"])
    assert code == 0
    df = pd.read_csv(out, keep_default_na=False)
    assert len(df) == 2 * 2 * 2 and list(df.columns) == list(COLUMNS)
    assert list(df.policy.unique()) == ["random", "greedy"] and "greedy" in capsys.readouterr().out
    assert set(">".join(df.chain).split(">")) <= set(SETTINGS.actions)
    records = read_transitions(log)
    assert len(records) == df.steps.sum()
    last = {(r["run_id"], r["scenario"], r["seed"]): r for r in records if r["terminated"]}  # written context by context
    assert len(last) == len(df)
    for row in df.itertuples():
        record = last[(f"evaluate:{row.policy}", row.scenario, row.seed)]
        assert record["reward"] == pytest.approx(row.reward, abs=1e-6) and record["action"] == row.chain.split(">")[-1]
        assert record["outcome"]["final_tokens"] == row.tokens_after


def test_cli_markdown_without_compare_and_the_by_scenario_table(scenarios, tmp_path, capsys):
    from ctxsim.lab.evaluate import reward_by_scenario

    out, md, env = tmp_path / "eval.csv", tmp_path / "tables.md", tmp_path / "small.yaml"
    env.write_text(f"id: ctxsim/ContextOverflow-v0\nconfig: {{actions: {list(SETTINGS.actions)}, max_steps: {SETTINGS.max_steps}}}\n")
    code = main(["evaluate", "--policy", "only:truncate", "--policy", "greedy", "--scenarios", str(scenarios[0].source),
                 "--seeds", "2", "--out", str(out), "--env", str(env), "--quiet", "--by-scenario", "--markdown", str(md)])
    assert code == 0 and "mean reward by scenario" in capsys.readouterr().out
    df = pd.read_csv(out, keep_default_na=False)
    table = reward_by_scenario(df)
    assert list(table.index) == ["tiny-chat", "tiny-tools"] and list(table.columns) == ["only:truncate", "greedy", "oracle"]
    for (scenario, policy), rewards in df.groupby(["scenario", "policy"]).reward:
        assert table.loc[scenario, policy] == pytest.approx(rewards.mean())
    assert (table["oracle"] >= table[["only:truncate", "greedy"]].max(axis=1) - 1e-9).all()  # the oracle is the max
    text = md.read_text()
    assert "| policy | episodes | IQM normalized" in text  # the summary, although there is no --compare
    assert "| scenario | only:truncate | greedy | oracle |" in text
    assert f"| tiny-chat | {table.loc['tiny-chat', 'only:truncate']:+.4f} |" in text


def test_reward_by_scenario_puts_the_oracle_last_when_it_is_also_a_policy():
    from ctxsim.lab.evaluate import reward_by_scenario

    rows = [
        {"policy": policy, "scenario": scenario, "seed": seed, "reward": reward, "oracle_reward": 1.0 + seed}
        for policy, offset in (("oracle", 0.0), ("greedy", -0.5))
        for scenario in ("a", "b")
        for seed in (0, 1)
        for reward in [1.0 + seed + offset]
    ]
    table = reward_by_scenario(pd.DataFrame(rows))
    assert list(table.columns) == ["greedy", "oracle"]
    assert table["oracle"].tolist() == [1.5, 1.5] and table["greedy"].tolist() == [1.0, 1.0]


def test_cli_unknown_policy_is_one_line(tmp_path, capsys):
    out = tmp_path / "eval.csv"
    code = main(["evaluate", "--policy", "random", "--policy", "nope", "--seeds", "1", "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and not out.exists()
    assert err.count("\n") == 1 and "unknown policy 'nope'" in err and "seed-chain" in err


def test_paired_differences_are_paired_and_signed():
    import pandas as pd

    from ctxsim.lab.evaluate import paired_differences

    rows = []
    for seed in range(4):
        for sc in ("a", "b", "c"):
            base = seed * 0.1 + len(sc)
            rows += [
                {"policy": "good", "scenario": sc, "seed": seed, "reward": base + 0.2},
                {"policy": "bad", "scenario": sc, "seed": seed, "reward": base},
                {"policy": "better", "scenario": sc, "seed": seed, "reward": base + 0.5},
            ]
    diffs = paired_differences(pd.DataFrame(rows), "good", reps=200).set_index("policy")
    assert diffs.loc["bad", "mean_difference"] == pytest.approx(0.2) and bool(diffs.loc["bad", "beats"])
    assert diffs.loc["better", "mean_difference"] == pytest.approx(-0.3) and not bool(diffs.loc["better", "beats"])


def test_paired_differences_of_another_column():
    import pandas as pd

    from ctxsim.lab.evaluate import paired_differences

    rows = [{"policy": p, "scenario": "a", "seed": seed, "reward": 1.0, "probe_score": score + 0.01 * seed}
            for seed in range(6) for p, score in (("ref", 0.9), ("peer", 0.6))]
    diffs = paired_differences(pd.DataFrame(rows), "ref", "probe_score", reps=200).set_index("policy")
    assert diffs.loc["peer", "mean_difference"] == pytest.approx(0.3) and bool(diffs.loc["peer", "beats"])
    assert diffs.loc["peer", "ci_low"] == pytest.approx(0.3)  # the same difference on every context


def test_gap_captured_is_the_share_between_best_fixed_and_the_oracle():
    import pandas as pd

    from ctxsim.lab.evaluate import gap_captured

    rows = []
    for seed in range(8):
        gap = 0.0 if seed == 7 else 0.1 * (seed + 1)  # the last context: oracle and best-fixed tie
        share = 1.0 if seed % 2 else 0.5  # the policy takes all of the gap on odd seeds, half on even ones
        for run in ("r0", "r1"):
            rows.append({"policy": "learned", "run": run, "scenario": "a", "seed": seed, "reward": 1.0 + share * gap})
        rows += [{"policy": "oracle", "run": "", "scenario": "a", "seed": seed, "reward": 1.0 + gap},
                 {"policy": "best-fixed:x", "run": "", "scenario": "a", "seed": seed, "reward": 1.0}]
    g = gap_captured(pd.DataFrame(rows), "learned", "best-fixed:x", reps=200)
    assert (g.episodes, g.ties) == (14, 2)  # two runs on each of 7 open contexts; the tie left out
    # 8 halves and 6 wholes: the middle eight are 5 halves and 3 wholes
    assert g.median == pytest.approx(0.5) and g.iqm == pytest.approx(5.5 / 8)
    assert 0.5 - 1e-9 <= g.ci_low <= g.iqm <= g.ci_high <= 1.0
    with pytest.raises(ValueError, match="no-such"):
        gap_captured(pd.DataFrame(rows), "no-such", "best-fixed:x")



def test_runs_that_act_alike_do_not_narrow_the_gap_interval():
    """The gap's interval resamples the contexts within each scenario and the runs once
    per resample, as the other intervals do: five runs that act exactly alike give about
    the one run's interval (resampling episodes as independent draws narrowed it about
    sqrt(5)-fold)."""
    import numpy as np
    import pandas as pd

    from ctxsim.lab.evaluate import gap_captured

    rng = np.random.default_rng(3)
    shares = rng.uniform(-0.5, 1.2, size=(3, 12))
    def frame(runs: int) -> pd.DataFrame:
        rows = []
        for s, scenario in enumerate("abc"):
            for seed in range(12):
                gap = 0.2 + 0.05 * seed
                rows += [{"policy": "oracle", "run": "", "scenario": scenario, "seed": seed, "reward": 1.0 + gap},
                         {"policy": "best-fixed:x", "run": "", "scenario": scenario, "seed": seed, "reward": 1.0}]
                rows += [{"policy": "learned", "run": f"r{r}", "scenario": scenario, "seed": seed,
                          "reward": 1.0 + shares[s, seed] * gap} for r in range(runs)]
        return pd.DataFrame(rows)

    one, five = (gap_captured(frame(runs), "learned", "best-fixed:x", reps=400) for runs in (1, 5))
    assert five.iqm == pytest.approx(one.iqm) and (one.episodes, five.episodes) == (36, 180)
    width = lambda g: g.ci_high - g.ci_low  # noqa: E731
    assert 0.85 < width(five) / width(one) < 1.15, (width(one), width(five))

def test_a_transcript_with_several_seeds_gets_a_note_and_identical_contexts(scenarios):
    from ctxsim.lab.scenarios import find_scenario

    transcript = find_scenario("transcript-missing-colon")
    notes = []
    df = evaluate(["only:truncate"], [scenarios[0], transcript], 2, SETTINGS, note=notes.append)
    assert len(notes) == 1 and "transcript-missing-colon is 2 episodes of the same context" in notes[0]
    rows = df[df.scenario == "transcript-missing-colon"]
    assert rows.tokens_before.nunique() == 1 and rows.reward.nunique() == 1
    notes.clear()
    evaluate(["only:truncate"], [transcript], 1, SETTINGS, note=notes.append)
    assert notes == []


def test_an_appended_log_numbers_episodes_on_and_summarizes_each_once(tmp_path):
    from ctxsim.lab.export import summarize_log
    from ctxsim.transitions import read_transitions

    log = tmp_path / "log.jsonl"
    argv = ["evaluate", "--policy", "seed-chain", "--names", "chat-10k", "mild-overflow", "--seeds", "1",
            "--log", str(log), "--quiet"]
    assert main(argv + ["--out", str(tmp_path / "a.csv")]) == 0
    first = read_transitions(log)
    with open(log, "ab") as fh:  # a run cut off mid-line, then evaluated again
        fh.write(b'{"schema_version": 1, "ru')
    assert main(argv + ["--out", str(tmp_path / "b.csv")]) == 0
    records = read_transitions(log)
    assert records[: len(first)] == first and len(records) == 2 * len(first)
    numbers = sorted({r["episode"] for r in records})
    assert numbers == list(range(4))
    summary = summarize_log(log)
    assert len(summary.episodes) == 4 and summary.unfinished == 0
    assert all(e.chain == tuple(r["action"] for r in records if r["episode"] == n)
               for n, e in zip(numbers, summary.episodes))


@pytest.mark.parametrize("overwrite", [False, True])
def test_a_failed_evaluation_leaves_the_log_as_it_was(scenarios, tmp_path, overwrite):
    from ctxsim.errors import TranscriptError

    gone = tmp_path / "gone.yaml"  # its transcript is missing: the second scenario fails after the first was logged
    gone.write_text("name: gone\ntranscript: missing.jsonl\nlimit: 4000\n")
    broken = [scenarios[0], *load_scenarios(gone)]
    log = tmp_path / "log.jsonl"
    evaluate(["greedy"], scenarios[:1], 1, SETTINGS, log=log)
    before = log.read_bytes()
    with pytest.raises(TranscriptError, match="missing.jsonl"):
        evaluate(["greedy"], broken, 1, SETTINGS, log=log, overwrite=overwrite)
    assert log.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["gone.yaml", "log.jsonl"]
    new = tmp_path / "new.jsonl"
    with pytest.raises(TranscriptError):
        evaluate(["greedy"], broken, 1, SETTINGS, log=new, overwrite=overwrite)
    assert not new.exists()
    evaluate(["greedy"], scenarios, 1, SETTINGS, log=log, overwrite=overwrite)  # completed: kept
    records = read_transitions(log)
    assert {r["scenario"] for r in records} == {s.name for s in scenarios} and (overwrite or log.read_bytes().startswith(before))


def test_a_policy_that_cannot_act_here_is_refused_before_the_log_opens(scenarios, tmp_path):
    from ctxsim.errors import PolicyError

    log = tmp_path / "log.jsonl"
    with pytest.raises(PolicyError, match="seed-chain' needs the actions"):  # SETTINGS lack seed 001's chain
        evaluate(["greedy", "seed-chain"], scenarios, 1, SETTINGS, log=log)
    assert not log.exists()


def _paired_frame(runs_ref=("",), runs_other=("",), seeds=range(6), scenarios=("a", "b", "c")):
    rng = np.random.default_rng(7)
    context = {(sc, s): rng.normal(0, 3) for sc in scenarios for s in seeds}
    rows = [{"policy": policy, "run": run, "scenario": sc, "seed": s, "reward": context[sc, s] + shift + rng.normal(0, 0.2)}
            for policy, runs, shift in (("ref", runs_ref, 0.4), ("other", runs_other, 0.0))
            for run in runs for sc in scenarios for s in seeds]
    return pd.DataFrame(rows)


def test_paired_difference_is_the_difference_of_means_over_the_common_contexts_with_unequal_runs():
    from ctxsim.lab.evaluate import paired_differences

    df = _paired_frame(runs_ref=("r0", "r1", "r2"), runs_other=("q0", "q1", "q2", "q3", "q4"))
    d = paired_differences(df, "ref", reps=300).set_index("policy").loc["other"]
    means = df.groupby("policy")["reward"].mean()
    assert d.mean_difference == pytest.approx(means["ref"] - means["other"]) and d.ci_low < d.mean_difference < d.ci_high
    back = paired_differences(df, "other", reps=300).set_index("policy").loc["ref"]
    assert back.mean_difference == pytest.approx(-d.mean_difference)  # reference minus other, not the reverse
    # a scenario only the reference has is left out of both sides
    part = df[(df.policy == "ref") | (df.scenario != "c")]
    d = paired_differences(part, "ref", reps=100).set_index("policy").loc["other"]
    common = part[part.scenario != "c"].groupby("policy")["reward"].mean()
    assert d.mean_difference == pytest.approx(common["ref"] - common["other"])


def test_paired_differences_refuse_a_ragged_pairing_a_missing_value_and_a_missing_reference():
    from ctxsim.lab.evaluate import paired_differences

    df = _paired_frame()
    lone = df.drop(df.index[(df.policy == "other") & (df.scenario == "a") & (df.seed == 2)])
    with pytest.raises(ValueError, match="every"):  # one (scenario, seed) missing on a side
        paired_differences(lone, "ref", reps=50)
    nan = df.copy()
    nan.loc[nan.index[-1], "reward"] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        paired_differences(nan, "ref", reps=50)
    with pytest.raises(ValueError, match="'nope' is not in the results"):
        paired_differences(df, "nope", reps=50)


def test_paired_difference_on_one_context_or_a_constant_difference_has_zero_width():
    from ctxsim.lab.evaluate import paired_differences

    one = pd.DataFrame([{"policy": "ref", "scenario": "a", "seed": 0, "reward": 1.0},
                        {"policy": "other", "scenario": "a", "seed": 0, "reward": 0.9}])
    d = paired_differences(one, "ref", reps=50).iloc[0]
    assert (d.mean_difference, d.ci_low, d.ci_high) == pytest.approx((0.1, 0.1, 0.1)) and bool(d.beats)
    tied = _paired_frame().assign(reward=1.0)
    d = paired_differences(tied, "ref", reps=50).iloc[0]
    assert (d.mean_difference, d.ci_low, d.ci_high, bool(d.beats)) == (0.0, 0.0, 0.0, False)


def test_gap_captured_counts_a_context_where_best_fixed_earns_more_as_a_tie_and_a_nan_reward_gives_nan():
    from ctxsim.lab.evaluate import gap_captured

    rows = []
    for seed in range(6):
        gap = -0.2 if seed == 0 else 0.1 * seed  # seed 0: best-fixed above the oracle
        rows += [{"policy": "oracle", "scenario": "a", "seed": seed, "reward": 1.0 + gap},
                 {"policy": "best-fixed:x", "scenario": "a", "seed": seed, "reward": 1.0},
                 {"policy": "learned", "scenario": "a", "seed": seed, "reward": 1.0 + 0.5 * gap}]
    df = pd.DataFrame(rows)
    g = gap_captured(df, "learned", "best-fixed:x", reps=100)
    assert (g.episodes, g.ties) == (5, 1) and g.iqm == pytest.approx(0.5) and g.ci_low == pytest.approx(0.5)
    df.loc[(df.policy == "learned") & (df.seed == 3), "reward"] = np.nan
    g = gap_captured(df, "learned", "best-fixed:x", reps=100)
    assert np.isnan(g.iqm) and np.isnan(g.median)
