"""Regression sweeps: outputs, determinism across workers, the baseline check, bad input."""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd
import pytest

from ctxsim.lab.cli import main
from ctxsim.episode_config import FULL_ACTIONS
from ctxsim.errors import ConfigError
from ctxsim.lab.results import COLUMNS, read_results
from ctxsim.strategies.peers import PEERS
from ctxsim.lab.sweep import Tolerances, compare, load_sweep
from ctxsim.transitions import read_transitions

POLICIES = ["seed-chain", "only:summarize_old", "peer:letta"]
SCENARIOS = ["mild-overflow", "transcript-missing-colon"]
TINY = f"""
name: tiny
policies: {POLICIES}
scenarios: {{names: {SCENARIOS}}}
seeds: 2
"""


def sweep(*args: object) -> int:
    return main(["sweep", *map(str, args), "--quiet"])


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    """A tiny sweep run in-process (1 worker); returns its output folder."""
    root = tmp_path_factory.mktemp("sweep")
    (root / "tiny.yaml").write_text(TINY)
    assert sweep(root / "tiny.yaml", "--workers", 1, "--out", root / "out1") == 0
    return root / "out1"


def test_outputs_are_complete_sorted_and_inside_out(tiny: Path):
    assert sorted(p.name for p in tiny.parent.iterdir()) == ["out1", "tiny.yaml"]  # nothing beside the out folder
    assert sorted(p.name for p in tiny.iterdir()) == ["results.csv", "summary.md", "sweep.yaml", "transitions.jsonl"]
    df = pd.read_csv(tiny / "results.csv")
    assert list(df.columns) == list(COLUMNS)
    assert len(df) == len(POLICIES) * len(SCENARIOS) * 2
    assert list(df[["policy", "scenario", "seed"]].itertuples(index=False)) == sorted(
        (p, s, k) for p in POLICIES for s in SCENARIOS for k in range(2)
    )
    assert df["reward"].between(-2, 2).all() and df["chain"].str.len().gt(0).all()
    records = read_transitions(tiny / "transitions.jsonl")
    assert {r["scenario"] for r in records} == set(SCENARIOS)
    assert sum(r["terminated"] or r["truncated"] for r in records) >= len(df)  # every episode ends
    ends = [(r["run_id"], r["episode"]) for r in records if r["terminated"]]
    assert len(ends) == len(set(ends)) == len(df)  # one episode per row, each named once in the joined log
    assert {r["seed"] for r in records if r["episode"] == ends[-1][1]} == {records[-1]["seed"]}
    summary = (tiny / "summary.md").read_text()
    for policy in POLICIES:
        assert f"| `{policy}` | 4 |" in summary
    assert "IQM normalized [95% CI]" in summary and "## Mean reward per scenario" in summary


def test_two_workers_give_identical_bytes_and_pass_against_own_results(tiny: Path, capsys):
    out2 = tiny.parent / "out2"
    rc = sweep(tiny.parent / "tiny.yaml", "--workers", 2, "--out", out2, "--baseline", tiny / "results.csv")
    assert rc == 0
    assert (out2 / "results.csv").read_bytes() == (tiny / "results.csv").read_bytes()
    assert (out2 / "transitions.jsonl").read_bytes() == (tiny / "transitions.jsonl").read_bytes()
    assert pd.read_csv(out2 / "regressions.csv").empty
    assert "no regression" in capsys.readouterr().out


def test_better_baseline_fails_the_check(tiny: Path, capsys):
    baseline = pd.read_csv(tiny / "results.csv")
    baseline.loc[baseline["policy"] == "peer:letta", "reward"] += 0.2
    path = tiny.parent / "better.csv"
    baseline.to_csv(path, index=False)
    out = tiny.parent / "better-out"
    assert sweep(tiny.parent / "tiny.yaml", "--workers", 1, "--out", out, "--baseline", path) == 1
    regressions = pd.read_csv(out / "regressions.csv")
    assert set(zip(regressions["policy"], regressions["scenario"], regressions["metric"])) == {
        ("peer:letta", s, "reward") for s in SCENARIOS
    }
    assert regressions["delta"].round(6).eq(-0.2).all()
    assert "Regressions (2)" in capsys.readouterr().out


def test_policy_made_worse_fails_the_check(tiny: Path, capsys):
    worse = tiny.parent / "worse.yaml"
    worse.write_text(
        "name: worse\npolicies: [only:summarize_old]\nscenarios: {names: [mild-overflow]}\nseeds: [0]\n"
        "env_config: {strategy_params: {summarize_old: {old_threshold: 0.95, summary_length: 40}}}\n"
    )
    out = tiny.parent / "worse-out"
    assert sweep(worse, "--workers", 1, "--out", out, "--baseline", tiny / "results.csv") == 1
    regressions = pd.read_csv(out / "regressions.csv")
    assert set(regressions["policy"]) == {"only:summarize_old"}
    assert "facts_retained" in set(regressions["metric"])
    assert (regressions["delta"] < -regressions["tolerance"]).all()
    assert "1 (policy, scenario) pairs compared, 5 of the baseline with none in this sweep" in capsys.readouterr().out
    # the same results pass once the tolerance allows the drop
    results = read_results(out)
    assert compare(results, read_results(tiny), Tolerances(reward=2, success_rate=1, facts_retained=1, probe_score=1)).empty


def test_compare_uses_absolute_tolerances(tiny: Path):
    results = read_results(tiny)
    assert compare(results, results, Tolerances()).empty
    better = results.assign(facts_retained=results["facts_retained"] + 0.04)
    assert compare(results, better, Tolerances()).empty  # within 0.05
    better = results.assign(facts_retained=results["facts_retained"] + 0.06)
    found = compare(results, better, Tolerances())
    assert set(found["metric"]) == {"facts_retained"} and len(found) == len(POLICIES) * len(SCENARIOS)
    assert compare(results, better, Tolerances(facts_retained=0.1)).empty
    with pytest.raises(ConfigError, match="shares no"):
        compare(results, results.assign(seed=results["seed"] + 100), Tolerances())


def test_load_sweep_resolves_defaults(tmp_path: Path):
    path = tmp_path / "s.yaml"
    path.write_text("name: s\npolicies: [random]\nseeds: [3, 1]\n")
    loaded = load_sweep(path)
    assert len(loaded.scenarios) >= 15 and loaded.seeds == [3, 1]
    assert loaded.policies == {"random": "random"} and loaded.settings.max_steps == 2  # the default env's
    assert loaded.settings.actions == FULL_ACTIONS


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("name: b\npolicies: [random]\nseeds: 2\nworkerz: 2\n", "key 'workerz': unknown key"),
        ("name: b\npolicies: [random]\nseeds: 0\n", "key 'seeds"),
        ("name: b\npolicies: [random]\nseeds: 100000000000000000000\n", "key 'seeds': a seed count must be in 1..100,000"),
        ("name: b\npolicies: [random]\nseeds: [4294967296]\n", "key 'seeds'"),
        ("name: b\npolicies: [random, random]\nseeds: 1\n", "key 'policies'"),
        ("name: b\npolicies: [no-such-policy]\nseeds: 1\n", "key 'policies[0]': unknown policy 'no-such-policy'"),
        ("name: b\npolicies: [random]\nseeds: 1\nscenarios: {names: [nope]}\n", "key 'scenarios.names[0]'"),
        ("name: b\npolicies: [random]\nseeds: 1\nenv: envs/missing.yaml\n", "key 'env': file not found"),
        ("name: b\npolicies: [random]\nseeds: 1\nenv_config: {max_stepz: 2}\n", "env_config.max_stepz"),
        ("name: b\npolicies: [random]\nseeds: 1\ntolerances: {reward: -1}\n", "key 'tolerances.reward'"),
        ("name: b\npolicies: [random\n", "invalid YAML"),
        ("- just a list\n", "must be a mapping"),
    ],
)
def test_bad_sweep_file_is_one_line_exit_2(tmp_path: Path, capsys, text: str, needle: str):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    assert sweep(path, "--out", tmp_path / "out") == 2
    err = capsys.readouterr().err
    assert err.startswith("ctxsim: error: ") and err.count("\n") == 1 and needle in err
    assert not (tmp_path / "out").exists()


def test_two_names_of_one_trained_policy_are_refused(tmp_path: Path, capsys):
    learned = tmp_path / "runs" / "learned"  # refused before anything loads it
    learned.mkdir(parents=True)
    (tmp_path / "s.yaml").write_text(f"name: s\npolicies: [runs/learned, {learned}]\nseeds: 1\n")
    assert sweep(tmp_path / "s.yaml", "--out", tmp_path / "out") == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "key 'policies[1]'" in err and "same policy as 'runs/learned'" in err
    assert not (tmp_path / "out").exists()


def test_an_output_folder_that_cannot_take_every_file_is_refused_before_any_work(tiny: Path, tmp_path: Path, capsys):
    import shutil

    out = tmp_path / "out"
    shutil.copytree(tiny, out)
    (out / "summary.md").unlink()
    (out / "summary.md").mkdir()  # a folder where the summary goes
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    assert sweep(tiny.parent / "tiny.yaml", "--out", out) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "summary.md is a folder here" in err
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == before  # nothing half-replaced


def test_bad_baseline_is_one_line_exit_2(tmp_path: Path, capsys):
    (tmp_path / "s.yaml").write_text("name: s\npolicies: [random]\nseeds: 1\nscenarios: {names: [mild-overflow]}\n")
    (tmp_path / "base.csv").write_text("policy,scenario\nrandom,mild-overflow\n")
    for baseline, needle in ((tmp_path / "base.csv", "missing columns"), (tmp_path / "none.csv", "file not found")):
        assert sweep(tmp_path / "s.yaml", "--out", tmp_path / "out", "--baseline", baseline) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and needle in err
    assert not (tmp_path / "out").exists()


def test_ray_backend_without_ray_names_the_extra(tmp_path: Path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # makes `import ray` fail as if Ray were not installed
    (tmp_path / "s.yaml").write_text("name: s\npolicies: [random]\nseeds: 1\nscenarios: {names: [mild-overflow]}\n")
    assert sweep(tmp_path / "s.yaml", "--backend", "ray", "--out", tmp_path / "out") == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "pip install 'ctxsim[ray]'" in err


def test_shipped_sweeps_load(repo_root: Path):
    regression = load_sweep(repo_root / "experiments" / "regression.yaml")
    assert len(regression.scenarios) >= 15 and len(regression.seeds) == 2
    assert {f"peer:{name}" for name in PEERS} <= set(regression.policies)  # every peer, LangChain's included (dev)
    full = load_sweep(repo_root / "experiments" / "sweep_full.yaml")
    assert set(regression.policies) <= set(full.policies) and len(full.scenarios) == len(regression.scenarios)


def test_committed_baseline_holds_on_a_subset(repo_root: Path, tmp_path: Path, capsys):
    """A fast slice of the CI check: if this fails after an intended change, regenerate
    reports/baseline.csv as experiments/regression.yaml explains."""
    (tmp_path / "slice.yaml").write_text(
        "name: slice\npolicies: [seed-chain, greedy, peer:letta, only:summarize_old]\n"
        "scenarios: {names: [mild-overflow, transcript-missing-colon]}\nseeds: [0]\n"
        f"env: {repo_root / 'envs' / 'seed001.yaml'}\n"  # the regression check's environment
    )
    baseline = repo_root / "reports" / "baseline.csv"
    rc = sweep(tmp_path / "slice.yaml", "--workers", 1, "--out", tmp_path / "out", "--baseline", baseline)
    assert rc == 0, capsys.readouterr().out
    assert "8 (policy, scenario) pairs compared" in capsys.readouterr().out


def test_zero_tolerance_against_own_results_passes(tiny: Path, tmp_path: Path):
    (tmp_path / "strict.yaml").write_text(
        (tiny.parent / "tiny.yaml").read_text() + "tolerances: {reward: 0, success_rate: 0, facts_retained: 0}\n"
    )
    assert sweep(tmp_path / "strict.yaml", "--workers", 1, "--out", tmp_path / "out", "--baseline", tiny / "results.csv") == 0


@pytest.mark.parametrize(("column", "value", "needle"), [("reward", "abc", "a finite number"), ("seed", "x", "an integer >= 0")])
def test_baseline_with_a_bad_value_is_one_line_exit_2(repo_root: Path, tmp_path: Path, capsys, column, value, needle):
    (tmp_path / "s.yaml").write_text("name: s\npolicies: [random]\nseeds: 1\nscenarios: {names: [mild-overflow]}\n")
    rows = pd.read_csv(repo_root / "reports" / "baseline.csv", dtype=str, keep_default_na=False)
    rows = rows[(rows["policy"] == "random") & (rows["scenario"] == "mild-overflow")].reset_index(drop=True)
    rows.loc[0, column] = value  # the row the sweep shares with the baseline
    rows.to_csv(tmp_path / "base.csv", index=False)
    assert sweep(tmp_path / "s.yaml", "--workers", 1, "--out", tmp_path / "out", "--baseline", tmp_path / "base.csv") == 2
    err = capsys.readouterr().err
    assert err == f"ctxsim: error: {tmp_path / 'base.csv'}: key '{column}': row 1: expected {needle} (got '{value}')\n"
    assert not (tmp_path / "out").exists()


def test_failed_sweep_leaves_no_out_folder(repo_root: Path, tmp_path: Path, capsys):
    """A transcript with a malformed line fails the run, after the out folder was made."""
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "t.yaml").write_text("name: t\ntranscript: t.jsonl\nlimit: 1200\nmin_limit: 1000\n")
    lines = (repo_root / "data" / "transcripts" / "swe-testrepo-missing-colon-fc.jsonl").read_text().splitlines()
    (suite / "t.jsonl").write_text("\n".join(lines[:2]) + '\n{"role": "user", "content": \n')
    (tmp_path / "s.yaml").write_text("name: s\npolicies: [seed-chain]\nseeds: 1\nscenarios: {suite: suite}\n")
    kept = tmp_path / "kept"  # a folder that existed before is kept, with what it held
    kept.mkdir()
    (kept / "notes.md").write_text("mine\n")
    for out in (tmp_path / "new" / "out", kept):
        assert sweep(tmp_path / "s.yaml", "--workers", 1, "--out", out) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and f"{suite / 't.jsonl'}: line 3: bad JSON" in err, err
    assert not (tmp_path / "new").exists()
    assert [p.name for p in kept.iterdir()] == ["notes.md"]


def test_coverage_counts_only_pairs_with_matching_rows():
    from ctxsim.lab.sweep import coverage

    def rows(policy, runs, seeds=(0, 1)):
        return [{"policy": policy, "run": run, "scenario": "chat-10k", "seed": s} for run in runs for s in seeds]

    baseline = pd.DataFrame(rows("seed-chain", [""]) + rows("runs/x", ["runs/x/a__1"]))
    retrained = pd.DataFrame(rows("seed-chain", [""]) + rows("runs/x", ["runs/x/a__2"]))  # new run names
    assert coverage(retrained, baseline) == (1, 1, 1)
    assert coverage(baseline, baseline) == (2, 0, 0)
    other_seeds = pd.DataFrame(rows("seed-chain", [""], seeds=(5,)))
    assert coverage(other_seeds, baseline) == (0, 1, 2)
