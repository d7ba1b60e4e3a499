"""Reports: figures written, titled and labelled; report.md references them; CLI errors."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from ctxsim.lab.cli import main
from ctxsim.lab.evaluate import summarize
from ctxsim.lab.report import (
    FIGSIZE,
    _pareto_front,
    action_shares,
    fig_iqm,
    fig_learning_curves,
    fig_pareto,
    fig_performance_profile,
    fig_reward_by_scenario,
    fig_strategy_usage,
    performance_profile,
)
from ctxsim.lab.results import read_results
from ctxsim.lab.sweep import load_sweep, run_sweep

PNG = b"\x89PNG\r\n\x1a\n"
POLICIES = ["seed-chain", "only:discard_low_rel", "peer:letta"]


@pytest.fixture(scope="module")
def sweep_dir(tmp_path_factory) -> Path:
    """Results of a real tiny sweep (3 policies × 2 scenarios × 2 seeds)."""
    root = tmp_path_factory.mktemp("report")
    (root / "s.yaml").write_text(
        f"name: s\npolicies: {POLICIES}\nscenarios: {{names: [mild-overflow, transcript-missing-colon]}}\nseeds: 2\n"
    )
    run_sweep(load_sweep(root / "s.yaml"), out=root / "sweep", workers=1)
    return root / "sweep"


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    """A training run folder holding SB3's evaluations.npz layout (timesteps, results, ep_lengths)."""
    run = tmp_path_factory.mktemp("runs") / "ContextOverflow-v0__tiny__0"
    run.mkdir()
    rng = np.random.default_rng(0)
    steps = np.arange(1, 6) * 1000
    results = np.clip(np.linspace(0.2, 1.1, 5)[:, None] + rng.normal(0, 0.1, (5, 8)), -2, 2)
    np.savez(run / "evaluations.npz", timesteps=steps, results=results, ep_lengths=np.ones((5, 8), dtype=int))
    return run


def check_png(path: Path) -> None:
    data = path.read_bytes()
    assert data.startswith(PNG) and len(data) > 5_000, path


def test_report_writes_every_figure_and_references_it(sweep_dir: Path, tmp_path: Path, run_dir: Path, capsys):
    out = tmp_path / "report"
    assert main(["report", str(sweep_dir), "--run", str(run_dir), "--out", str(out)]) == 0
    assert str(out / "report.md") in capsys.readouterr().out
    pngs = sorted(p.name for p in out.glob("*.png"))
    assert pngs == sorted([
        "iqm.png", "performance_profile.png", "reward_by_scenario.png", "pareto.png", "strategy_usage.png",
        "learning_curves.png",
    ])
    report = (out / "report.md").read_text()
    assert sorted(re.findall(r"!\[[^\]]+\]\(([^)]+)\)", report)) == pngs
    for name in pngs:
        check_png(out / name)
    for policy in POLICIES:
        assert f"| `{policy}` | 4 |" in report  # the summary table
    assert "no learned policy in the results" in report  # the pooled usage heatmap


def test_learned_policies_get_their_own_usage_heatmap_and_curves(sweep_dir: Path, tmp_path: Path, run_dir: Path):
    """A policy given as a path counts as learned: its usage heatmap, and its run's
    learning curve found without --run."""
    results = pd.read_csv(sweep_dir / "results.csv")
    results.loc[results["policy"] == "seed-chain", "policy"] = str(run_dir)
    csv = tmp_path / "learned.csv"
    results.to_csv(csv, index=False)
    out = tmp_path / "report"
    assert main(["report", str(csv), "--out", str(out)]) == 0
    usage = [p.name for p in out.glob("strategy_usage*.png")]
    assert usage == [f"strategy_usage_{run_dir.name}.png"]
    check_png(out / usage[0])
    check_png(out / "learning_curves.png")
    assert usage[0] in (out / "report.md").read_text()


def test_figures_are_titled_labelled_and_readable(sweep_dir: Path, run_dir: Path):
    results = read_results(sweep_dir)
    figures = [
        fig_reward_by_scenario(results), fig_pareto(results), fig_strategy_usage(results, "all"),
        fig_learning_curves([run_dir]), fig_iqm(summarize(results)), fig_performance_profile(results),
    ]
    for fig in figures:
        ax = fig.axes[0]
        assert ax.get_title() and ax.get_xlabel() and ax.get_ylabel()
        width, height = fig.get_size_inches()
        assert width >= FIGSIZE[0] and height >= FIGSIZE[1]
        texts = [ax.title, ax.xaxis.label, ax.yaxis.label, *ax.get_xticklabels(), *ax.get_yticklabels()]
        assert min(t.get_fontsize() for t in texts) >= 9


def test_learning_curves_draw_the_curves_read_once_by_the_caller(run_dir: Path, tmp_path: Path):
    """``ctxsim report`` reads each run's evaluations once (checking them before any figure)
    and hands them to the figure: it draws what it is given, the same as what it reads itself."""
    from ctxsim.lab.runs import read_evaluations

    steps, rewards = read_evaluations(run_dir)
    read = fig_learning_curves([run_dir], "validation").axes[0].lines[0]
    given = fig_learning_curves([run_dir], "validation", [(steps, rewards)]).axes[0].lines[0]
    assert np.array_equal(given.get_xdata(), read.get_xdata()) and np.array_equal(given.get_ydata(), read.get_ydata())
    other = (steps, rewards + 1.0)  # a different curve for a folder that has no file at all
    line = fig_learning_curves([tmp_path / "no-run"], "validation", [other]).axes[0].lines[0]
    assert np.allclose(line.get_ydata(), rewards.mean(axis=1) + 1.0)
    assert line.get_label() == "no-run"


def test_performance_profile_and_pareto_front():
    taus = np.array([0.0, 0.5, 1.0])
    assert performance_profile([0.0, 0.5, 1.0, 2.0], taus).tolist() == [0.75, 0.5, 0.25]
    points = [(10.0, 90.0, "a"), (50.0, 50.0, "b"), (40.0, 40.0, "c"), (90.0, 10.0, "d"), (90.0, 10.0, "e")]
    assert [p[2] for p in _pareto_front(points)] == ["a", "b", "d", "e"]


def test_action_shares_sum_to_one_per_scenario(sweep_dir: Path):
    results = read_results(sweep_dir)
    shares = action_shares(results)
    assert np.allclose(shares.sum(axis=1), 1.0)
    steps = results["chain"].str.split(">").explode()
    assert set(shares.columns) == set(steps)


def test_report_errors_are_one_line(tmp_path: Path, sweep_dir: Path, capsys):
    assert main(["report", str(tmp_path / "missing"), "--out", str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err.count("\n") == 1
    assert main(["report", str(sweep_dir), "--run", str(tmp_path), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "evaluations.npz" in err
    assert not (tmp_path / "out").exists()


def test_a_label_relative_to_the_sweep_file_finds_its_run_through_sweep_yaml(
    sweep_dir: Path, tmp_path: Path, run_dir: Path, monkeypatch
):
    import shutil

    import yaml

    resolved = yaml.safe_load((sweep_dir / "sweep.yaml").read_text())
    assert resolved["policy_paths"] == {} and resolved["suite"] == resolved["env_config"]["scenarios"]
    copy = tmp_path / "sweep"
    shutil.copytree(sweep_dir, copy)
    label = f"runs/{run_dir.name}"  # as a sweep file beside a runs/ folder names it
    results = pd.read_csv(copy / "results.csv")
    results.loc[results["policy"] == "seed-chain", "policy"] = label
    results.to_csv(copy / "results.csv", index=False)
    (copy / "sweep.yaml").write_text(yaml.safe_dump({**resolved, "policy_paths": {label: str(run_dir)}}))
    monkeypatch.chdir(tmp_path)  # runs/<name> does not exist here
    assert main(["report", str(copy), "--out", str(tmp_path / "report")]) == 0
    check_png(tmp_path / "report" / "learning_curves.png")
    usage = [p.name for p in (tmp_path / "report").glob("strategy_usage*.png")]
    assert usage == [f"strategy_usage_{run_dir.name}.png"]  # the label's own rows
    check_png(tmp_path / "report" / usage[0])


def test_a_folder_of_runs_gives_each_runs_learning_curve(tmp_path: Path, run_dir: Path):
    from ctxsim.lab.report import find_runs

    folder = tmp_path / "runs"
    for seed in (0, 1):
        run = folder / f"ContextOverflow-v0__tiny__{seed}__1"
        run.mkdir(parents=True)
        (run / "best_model.zip").write_bytes((run_dir / "evaluations.npz").read_bytes()[:10])  # a run folder's marker
        (run / "evaluations.npz").write_bytes((run_dir / "evaluations.npz").read_bytes())
    (folder / "notes.txt").write_text("not a run\n")
    expected = [(folder / f"ContextOverflow-v0__tiny__{s}__1").resolve() for s in (0, 1)]
    assert find_runs(tmp_path / "none", [], [folder]) == expected  # --run FOLDER
    assert find_runs(tmp_path / "none", [str(folder)], []) == expected  # a learned policy that is the folder
    assert find_runs(tmp_path / "none", ["seed-chain"], [run_dir]) == [run_dir.resolve()]


@pytest.mark.parametrize(
    ("arrays", "needle"),
    [
        (b"garbage", "evaluations.npz: not a NumPy .npz archive"),
        ({"results": np.ones((2, 3))}, "evaluations.npz: key 'timesteps': missing array (has ['results'])"),
        ({"timesteps": np.array([]), "results": np.array([])}, "evaluations.npz: key 'timesteps': expected a non-empty"),
        ({"timesteps": np.arange(3), "results": np.ones((2, 4))}, "evaluations.npz: key 'results': expected finite rewards"),
        ("unknown compression", "evaluations.npz: key 'timesteps': expected an array of numbers (That compression method"),
    ],
    ids=["garbage", "no-timesteps", "empty", "results-shape", "damaged-header"],
)
def test_bad_evaluations_npz_is_one_line_and_writes_nothing(tmp_path: Path, sweep_dir: Path, capsys, arrays, needle):
    run = tmp_path / "run"
    run.mkdir()
    if isinstance(arrays, bytes):
        (run / "evaluations.npz").write_bytes(arrays)
    elif isinstance(arrays, str):  # a whole archive whose directory names a compression zipfile lacks (it raised NotImplementedError)
        np.savez(run / "evaluations.npz", timesteps=np.arange(3), results=np.ones((3, 2)))
        data = bytearray((run / "evaluations.npz").read_bytes())
        entry = data.find(b"PK\x01\x02")  # the first central directory entry; its method is at offset 10
        data[entry + 10:entry + 12] = (99).to_bytes(2, "little")
        (run / "evaluations.npz").write_bytes(bytes(data))
    else:
        np.savez(run / "evaluations.npz", **arrays)
    kept = tmp_path / "kept"  # a folder that existed before keeps exactly what it held
    kept.mkdir()
    (kept / "notes.md").write_text("mine\n")
    for out in (tmp_path / "new" / "out", kept):
        assert main(["report", str(sweep_dir), "--run", str(run), "--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"ctxsim: error: {run}/") and err.count("\n") == 1 and needle in err, err
    assert not (tmp_path / "new").exists()
    assert [p.name for p in kept.iterdir()] == ["notes.md"]


def _edit_results(text: str, row: int, column: str, value: str) -> str:
    lines = text.splitlines(keepends=True)
    cells = lines[row].rstrip("\n").split(",")
    cells[lines[0].rstrip("\n").split(",").index(column)] = value
    lines[row] = ",".join(cells) + "\n"
    return "".join(lines)


@pytest.mark.parametrize(
    ("edit", "needle"),
    [
        (lambda t: t.splitlines(keepends=True)[0], "bad.csv: no rows"),
        (lambda t: _edit_results(t, 2, "reward", "abc"), "bad.csv: key 'reward': row 2: expected a finite number (got 'abc')"),
        (lambda t: _edit_results(t, 1, "seed", "x"), "bad.csv: key 'seed': row 1: expected an integer >= 0 (got 'x')"),
        (lambda t: _edit_results(t, 3, "success", "maybe"), "key 'success': row 3: expected True or False (got 'maybe')"),
        (lambda t: _edit_results(t, 1, "coherence", ""), "key 'coherence': row 1: expected a finite number (got '')"),
        (lambda t: t + t.splitlines(keepends=True)[1], "bad.csv: row 13 repeats row 1: policy "),
        (lambda t: "".join(t.splitlines(keepends=True)[:-1]), "has no row for scenario 'transcript-missing-colon', seed 1"),
        (lambda t: t.replace(",normalized_score\n", ",score\n", 1), "bad.csv: missing columns ['normalized_score']"),
    ],
    ids=["header-only", "reward-abc", "seed-x", "success-maybe", "coherence-empty", "repeated-row", "missing-row",
         "missing-column"],
)
def test_bad_results_csv_is_one_line_and_writes_nothing(tmp_path: Path, sweep_dir: Path, capsys, edit, needle):
    csv = tmp_path / "bad.csv"
    csv.write_text(edit((sweep_dir / "results.csv").read_text()))
    assert main(["report", str(csv), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"ctxsim: error: {csv}") and err.count("\n") == 1 and needle in err, err
    assert not (tmp_path / "out").exists()


def test_tune_reads_a_runs_evaluations_through_the_checked_reader(tmp_path):
    from ctxsim.errors import ConfigError
    from ctxsim.lab.tune import eval_rewards

    np.savez(tmp_path / "evaluations.npz", timesteps=np.array([100, 200, 300]),
             results=np.array([[0.5, 0.7], [1.0, 1.2], [0.8, 0.8]]))
    assert eval_rewards(tmp_path) == pytest.approx((1.1, 0.8))
    np.savez(tmp_path / "evaluations.npz", results=np.array([[0.5]]))
    with pytest.raises(ConfigError, match="timesteps"):
        eval_rewards(tmp_path)


def _split_configs(train: list[str], held_out: list[str], selection: list[str]) -> dict:
    """The env configs ctxsim.lab.train records in a run's config.yaml, by their scenario names."""
    return {"env_config": {"scenario_names": train}, "eval_env_config": {"scenario_names": held_out},
            "selection_env_config": {"scenario_names": selection}}


@pytest.mark.parametrize(
    ("config", "split"),
    [  # runs written before selection_env_config was recorded: the experiment's validation_scenarios say
     ({"experiment": {"algo": "MaskablePPO", "validation_scenarios": ["code-heavy"]}}, "validation"),
     ({"experiment": {"algo": "MaskablePPO", "validation_scenarios": None}}, "held-out"),
     # the scenarios the callback was given, as the run recorded them
     ({"experiment": {"algo": "MaskablePPO"}, **_split_configs(["chat-10k"], ["gpt4-6000"], ["code-heavy"])}, "validation"),
     ({"experiment": {"algo": "MaskablePPO"}, **_split_configs(["chat-10k"], ["gpt4-6000"], ["gpt4-6000"])}, "held-out"),
     ({"experiment": {"algo": "MaskablePPO"}, **_split_configs(["chat-10k"], ["chat-10k"], ["chat-10k"])}, "training"),
     (None, "evaluation")],
)
def test_the_learning_curve_names_the_split_its_callback_scored(
    sweep_dir: Path, tmp_path: Path, run_dir: Path, config, split
):
    """A run selects its best model on the validation split when its experiment names one,
    else on the held-out split, which is the training split when nothing is held out
    (ctxsim.lab.train.env_configs): the caption and the figure's title say which split the curve is
    (the whole report is written for a run that records its split and for one that says nothing;
    the caption reads the same function as the figure)."""
    import yaml

    from ctxsim.lab.runs import evaluation_split

    run = tmp_path / run_dir.name
    run.mkdir()
    (run / "evaluations.npz").write_bytes((run_dir / "evaluations.npz").read_bytes())
    if config is not None:
        (run / "config.yaml").write_text(yaml.safe_dump(config))
    assert evaluation_split(run) == (None if config is None else split)
    assert fig_learning_curves([run]).axes[0].get_title().startswith(f"Learning curves ({split} evaluation")
    if config is None or "selection_env_config" in config and split == "validation":  # the report, once per source
        assert main(["report", str(sweep_dir), "--run", str(run), "--out", str(tmp_path / "report")]) == 0
        report = (tmp_path / "report" / "report.md").read_text()
        assert f"during training on the {split} split" in report
        assert "Held-out evaluation mean reward" not in report
