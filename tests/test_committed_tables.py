"""The committed tables reproduce: a slice of each CSV in ``reports/`` computed again.

Every CSV in ``reports/`` is the output of a command its report shows. Here the rows
of the policies that need no training run (a fixed chain, greedy, a peer) on one
context or conversation are computed again by that command and must equal the
committed rows value for value: text as text, numbers to 12 significant digits (the
last digit of a float can differ between CPUs, whose numpy kernels add in different
orders; on one machine the tables reproduce byte for byte); a slow test trains seed 0 of the default
experiment again and checks its learned rows the same way, another fits the stream's
best fixed (depth, chain) again; two rows of ``reports/realism.md``'s strategy-rank table are
computed again too, and every cell of the README's results table is checked against the
CSV it quotes. If one fails after a change that is meant
to change outputs, regenerate the tables with the commands at the top of
``reports/heldout_eval.md`` and ``reports/stream_eval.md`` (the learned rows need the
runs trained again, see there).
"""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from ctxsim.lab.cli import main

POLICIES = ("seed-chain", "greedy", "peer:claude-code")


def rows_of(path: Path, policies: tuple[str, ...], scenario: str, seed: int) -> list[dict[str, str]]:
    """The rows of ``policies`` on (scenario, seed) in the CSV at ``path``, as text, by policy."""
    with path.open(newline="") as handle:
        rows = [row for row in csv.DictReader(handle)
                if row["policy"] in policies and row["scenario"] == scenario and row["seed"] == str(seed)]
    return sorted(rows, key=lambda row: row["policy"])


def assert_same_rows(new: list[dict[str, str]], committed: list[dict[str, str]]) -> None:
    """``new`` equals ``committed`` key for key: equal text, or numbers equal to 1e-12 (relative)."""
    assert [row.keys() for row in new] == [row.keys() for row in committed]
    for got, want in zip(new, committed):
        for key, value in want.items():
            if got[key] != value:
                assert _number(got[key]) == pytest.approx(_number(value), rel=1e-12, abs=1e-12), (key, got, want)


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise AssertionError(f"{text!r} differs and is not a number") from None


def policy_flags(policies: tuple[str, ...]) -> list[str]:
    return [flag for policy in policies for flag in ("--policy", policy)]


@pytest.mark.parametrize(("table", "options", "scenario", "seed"), [
    ("heldout_grounded.csv", [], "gpt4-6000", 0),
    ("heldout_seed001.csv", ["--reward", "seed001"], "tool-dupes", 0),
    ("transcript_cuts.csv", ["--first-seed", "10"], "swe-heldout", 10),
    ("transcript_cuts_seed001.csv", ["--reward", "seed001", "--first-seed", "10"],
     "transcript-marshmallow-cut-family", 10),
    ("probes_worth_validation.csv", ["--split", "validation"], "code-heavy", 0),
    ("probes_worth_train200.csv", ["--split", "train", "--first-seed", "200"], "fact-dense", 200),
    ("probes_worth_traincuts.csv", ["--split", "train", "--first-seed", "200"], "swe-train", 200),
])
def test_a_held_out_table_reproduces_on_one_context(repo_root: Path, tmp_path: Path, capsys, table, options, scenario,
                                                    seed):
    out = tmp_path / "out.csv"
    policies = ("greedy", "greedy-without-probes") if table.startswith("probes_worth") else POLICIES
    code = main(["evaluate", "--experiment", str(repo_root / "experiments" / "maskable_ppo_default.yaml"), *options,
                 "--names", scenario, "--seeds", "1", *policy_flags(policies), "--out", str(out)])
    assert code == 0, capsys.readouterr().err
    committed = rows_of(repo_root / "reports" / table, policies, scenario, seed)
    assert len(committed) == len(policies)  # the slice exists in the committed table
    assert_same_rows(rows_of(out, policies, scenario, seed), committed)


def test_the_small_context_table_reproduces_on_one_context(repo_root: Path, tmp_path: Path, capsys):
    out = tmp_path / "out.csv"
    policies = ("seed-chain", "greedy", "peer:langchain-trim")
    code = main(["evaluate", "--env", str(repo_root / "envs" / "default.yaml"), "--reward", "grounded",
                 "--scenarios", str(repo_root / "data" / "families" / "swe_corpus_early.yaml"),
                 "--names", "swe-validation-early", "--first-seed", "200", "--seeds", "1", *policy_flags(policies),
                 "--out", str(out)])
    assert code == 0, capsys.readouterr().err
    committed = rows_of(repo_root / "reports" / "small_contexts.csv", policies, "swe-validation-early", 200)
    assert len(committed) == len(policies)
    assert_same_rows(rows_of(out, policies, "swe-validation-early", 200), committed)


def test_the_stream_table_reproduces_on_one_conversation(repo_root: Path, tmp_path: Path, capsys):
    out = tmp_path / "out.csv"
    policies = ("seed-chain", "peer:letta")
    code = main(["evaluate", "--env", str(repo_root / "envs" / "stream.yaml"), *policy_flags(policies),
                 "--names", "tool-dupes", "--seeds", "1", "--out", str(out)])
    assert code == 0, capsys.readouterr().err
    committed = rows_of(repo_root / "reports" / "stream_eval.csv", policies, "tool-dupes", 0)
    assert len(committed) == len(policies)
    assert_same_rows(rows_of(out, policies, "tool-dupes", 0), committed)


def test_the_realism_rank_table_reproduces_for_two_strategies(repo_root: Path):
    """Two rows of reports/realism.md's strategy-rank table (``ctxsim realism --rank``),
    computed again as that command computes them: the family's 12 contexts and the 12
    corpus cuts, every strategy in the action set; each reward and what was kept beside it."""
    from ctxsim.lab.corpus import DEFAULT_CORPUS, corpus_files, has_agent_turn
    from ctxsim.lab.realism import DEFAULT_FAMILY, rank_agreement, rank_cuts, rank_table
    from ctxsim.lab.scenarios import find_scenario
    from ctxsim.strategies import list_strategies

    policies = ("only:discard_low_rel", "only:remove_oldest")
    text = (repo_root / "reports" / "realism.md").read_text()
    committed = {line.split(" | ")[0].removeprefix("| "): line for line in text.splitlines() if line.startswith("| only:")}
    assert "Command: `ctxsim realism --rank`." in text and set(policies) <= set(committed)
    files = [p for p in corpus_files(DEFAULT_CORPUS) if has_agent_turn(p)]
    ranks = rank_agreement([find_scenario(DEFAULT_FAMILY)], rank_cuts(files, 12), 12,
                           [s for s in list_strategies() if s != "error"], policies).means
    assert ranks.columns[:7].tolist() == ["generated_seed001", "generated_grounded", "generated_probe_score",
                                          "generated_p1_preserved", "generated_rules_retained", "generated_reduction_pct",
                                          "corpus_cuts_seed001"]
    # as the report prints them (three decimals, shares two, percent none), bold aside:
    # the best of the whole table is not among these two
    rows = [line for line in rank_table(ranks) if line.startswith("| only:")]
    assert [row.replace("**", "") for row in rows] == [committed[p].replace("**", "") for p in policies]



#: the README's results table: its row labels -> the committed CSV each row is computed from
README_ROWS = {"held-out, `grounded`": "heldout_grounded.csv", "held-out, `seed001`": "heldout_seed001.csv",
               "transcript cuts, `grounded`": "transcript_cuts.csv", "transcript cuts, `seed001`": "transcript_cuts_seed001.csv",
               "small contexts (no split), `grounded`": "small_contexts.csv"}
#: its columns -> the policy each names (the last one names the peer in its cell)
README_COLUMNS = {"learned": "runs/default", "best-fixed": "best-fixed:maskable_ppo_default", "greedy": "greedy",
                  "oracle": "oracle", "seed-chain": "seed-chain", "`trim_messages`": "peer:langchain-trim"}


def _signed(value: float) -> str:
    """A number as the README prints it: three decimals, its sign always, a typographic minus."""
    return f"{value:+.3f}".replace("-", "−")


def test_the_readme_results_table_states_what_the_committed_csvs_give(repo_root: Path):
    """Each cell of the README's results table (a mean reward, or the learned policy's
    paired difference with its 95 % interval) is what ``evaluate``'s own summary and
    ``--compare`` give on the committed CSV, rounded once from the unrounded value; its
    "best other peer" is the peer with the highest mean reward there, LangChain's
    ``trim_messages`` aside (it has its own column)."""
    import pandas as pd

    from ctxsim.lab.evaluate import paired_differences, summarize

    lines = (repo_root / "README.md").read_text().splitlines()
    start = lines.index("| | learned | best-fixed | greedy | oracle | seed-chain | `trim_messages` | best other peer |")
    header = [cell.strip() for cell in lines[start].strip("|").split("|")][1:]
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip("|").split("|")])
    assert [row[0] for row in rows[::2]] == [f"{label}: mean reward" for label in README_ROWS]
    for means, differences in zip(rows[::2], rows[1::2]):
        results = pd.read_csv(repo_root / "reports" / README_ROWS[means[0].removesuffix(": mean reward")])
        summary = summarize(results).set_index("policy")["mean_reward"]
        paired = paired_differences(results, "runs/default").set_index("policy")
        peers = summary[[p.startswith("peer:") and p != "peer:langchain-trim" for p in summary.index]]
        for column, mean, difference in zip(header, means[1:], differences[1:]):
            if column == "best other peer":
                if not len(peers):
                    assert mean == difference == "", means[0]
                    continue
                best = peers.idxmax()
                policy, mean = best, mean.removesuffix(f" (`{best.removeprefix('peer:')}`)")
            else:
                policy = README_COLUMNS[column]
            assert mean == _signed(summary[policy]), (means[0], column)
            if policy == "runs/default":
                assert difference == "", means[0]
                continue
            row = paired.loc[policy]
            stated = f"{_signed(row.mean_difference)} [{_signed(row.ci_low)}, {_signed(row.ci_high)}]"
            assert difference == stated, (means[0], column)

@pytest.mark.slow
def test_the_learned_rows_reproduce_from_a_run_trained_again(repo_root: Path, tmp_path: Path, capsys, monkeypatch):
    """The learned policy's rows of the held-out table: seed 0 of the default
    experiment trained again (pools from an empty folder) gives its committed rows on
    two held-out contexts, value for value (training is deterministic)."""
    monkeypatch.chdir(tmp_path)
    experiment = str(repo_root / "experiments" / "maskable_ppo_default.yaml")
    assert main(["train", experiment, "--seed", "0", "--out", "runs/default", "--quiet"]) == 0, capsys.readouterr().err
    out = tmp_path / "out.csv"
    code = main(["evaluate", "--experiment", experiment, "--policy", "runs/default",
                 "--names", "gpt4-6000", "swe-heldout", "--seeds", "1", "--out", str(out)])
    assert code == 0, capsys.readouterr().err
    # marshmallow cuts where the look-ahead leaves the top action's dead end (seed 4) and where
    # the kept units exceed the target, so it passes over the actions that keep them (seed 9)
    cut = tmp_path / "cut.csv"
    code = main(["evaluate", "--experiment", experiment, "--policy", "runs/default", "--names",
                 "transcript-marshmallow-cut-family", "--first-seed", "4", "--seeds", "6", "--out", str(cut)])
    assert code == 0, capsys.readouterr().err
    for csv_path, scenario, seed in ((out, "gpt4-6000", 0), (out, "swe-heldout", 0),
                                     (cut, "transcript-marshmallow-cut-family", 4),
                                     (cut, "transcript-marshmallow-cut-family", 9)):
        committed = [row for row in rows_of(repo_root / "reports" / "heldout_grounded.csv", ("runs/default",), scenario, seed)
                     if row["run"].endswith("__0")]
        assert len(committed) == 1
        assert_same_rows(rows_of(csv_path, ("runs/default",), scenario, seed), committed)


@pytest.mark.slow
def test_the_stream_best_fixed_rows_reproduce_from_a_fit_made_again(repo_root: Path, tmp_path: Path, capsys):
    """The stream's best fixed (depth, chain), fitted again on the training conversations
    (an empty pool folder: 648 pairs on 36 conversations, a few minutes), gives its
    committed rows on one held-out conversation, value for value."""
    out = tmp_path / "out.csv"
    policy = ("best-fixed:maskable_ppo_stream_warm",)
    code = main(["evaluate", "--env", str(repo_root / "envs" / "stream.yaml"), *policy_flags(policy),
                 "--names", "gpt4-6000", "--seeds", "1", "--out", str(out)])
    assert code == 0, capsys.readouterr().err
    committed = rows_of(repo_root / "reports" / "stream_eval.csv", policy, "gpt4-6000", 0)
    assert len(committed) == 1
    assert_same_rows(rows_of(out, policy, "gpt4-6000", 0), committed)
