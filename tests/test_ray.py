"""The Ray backend and Ray Tune (optional extra ``ray``; skipped without it)."""

from __future__ import annotations

import os
import subprocess
import sys
from importlib.util import find_spec
from pathlib import Path

import pandas as pd
import pytest

from ctxsim.lab.cli import main


SWEEP = """
name: small
policies: [seed-chain, peer:letta]
scenarios: {names: [mild-overflow, transcript-missing-colon]}
seeds: 1
ray: {num_cpus: 2}
"""


def tiny_tune(repo_root: Path, *, name: str, eval_freq: int, train: str, timesteps: int, samples: int, space: str,
              n_steps: int, cpus: int) -> str:
    """A tune file of a few short trials of seed 001's experiment on small contexts:
    ``space`` is one more line of its ``param_space`` (beside ``n_steps`` and a batch of 32)."""
    return f"""
name: {name}
experiment: {repo_root / 'experiments' / 'maskable_ppo_seed001.yaml'}
overrides:
  n_envs: 1
  env_config: {{contexts_per_scenario: 2, pool: false}}
  eval_freq: {eval_freq}
  eval_episodes: 2
  checkpoint_freq: 100000
  train_scenarios: {train}
  eval_scenarios: [mild-overflow]
timesteps: {timesteps}
num_samples: {samples}
param_space:
  {space}
  n_steps: {{choice: [{n_steps}]}}
  batch_size: {{choice: [32]}}
ray: {{num_cpus: {cpus}}}
"""


@pytest.mark.optional
@pytest.mark.skipif(find_spec("ray") is None, reason="needs the extra 'ray'")
def test_ray_backend_matches_the_local_backend(tmp_path: Path):
    (tmp_path / "small.yaml").write_text(SWEEP)
    local, ray = tmp_path / "local", tmp_path / "ray"
    assert main(["sweep", str(tmp_path / "small.yaml"), "--workers", "2", "--out", str(local), "--quiet"]) == 0
    assert main(["sweep", str(tmp_path / "small.yaml"), "--backend", "ray", "--out", str(ray), "--quiet",
                 "--baseline", str(local / "results.csv")]) == 0
    for name in ("results.csv", "transitions.jsonl"):
        assert (ray / name).read_bytes() == (local / name).read_bytes(), name
    assert len(pd.read_csv(ray / "results.csv")) == 4


@pytest.mark.optional
@pytest.mark.skipif(find_spec("ray") is None, reason="needs the extra 'ray'")
def test_the_local_ray_a_command_starts_prints_no_notice_and_keeps_token_authentication():
    """Ray logs, at each start of a local instance, that it turned token authentication on
    (its default): ray_session keeps the setting and does not print the notice (it broke
    the one-line output of the quiet commands). In a process of its own: Ray's logging
    binds the streams it finds at its first start."""
    script = ("import os; from ctxsim.lab.sweep import RayConfig, ray_session\n"
              "with ray_session(RayConfig(num_cpus=1)):\n    print(os.environ.get('RAY_AUTH_MODE'))\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                          env={k: v for k, v in os.environ.items() if k != "RAY_AUTH_MODE"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "token"
    assert "Token authentication" not in done.stderr, done.stderr


@pytest.mark.optional
@pytest.mark.skipif(find_spec("ray") is None, reason="needs the extra 'ray'")
def test_tune_runs_trials_and_writes_the_table(tmp_path: Path, repo_root: Path, capsys):
    (tmp_path / "tune.yaml").write_text(tiny_tune(
        repo_root, name="tiny", eval_freq=64, train="[mild-overflow, transcript-missing-colon]", timesteps=128,
        samples=2, space="learning_rate: {loguniform: [0.0001, 0.001]}", n_steps=64, cpus=2))
    assert main(["tune", str(tmp_path / "tune.yaml"), "--out", str(tmp_path / "out"), "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "best: " in out and "note: the trials are scored on the experiment's held-out scenarios" in out
    table = pd.read_csv(tmp_path / "out" / "tune_results.csv")
    assert table["best_mean_reward"].is_monotonic_decreasing  # best first
    assert sorted(table["trial"]) == ["trial_00000", "trial_00001"]
    assert table["param.learning_rate"].between(1e-4, 1e-3).all() and table["param.n_steps"].eq(64).all()
    assert table["best_mean_reward"].between(-2, 2).all()
    assert (table["best_mean_reward"] >= table["final_mean_reward"] - 1e-9).all()
    for run in table["run_dir"]:
        assert (tmp_path / "out" / run / "evaluations.npz").is_file()
    best = (tmp_path / "out" / "tune_results.md").read_text()
    assert "Best hyperparameters: `batch_size=32`, `learning_rate=" in best and "`n_steps=64`" in best
    assert "on the held-out scenarios (mild-overflow)" in best and "Note: the trials are scored" in best

    # a trained run is a policy of a sweep (path relative to the sweep file) and of its
    # report; the sweep plays the run's action set (seed 001's, the experiment's env)
    run = table["run_dir"][0]
    (tmp_path / "learned.yaml").write_text(
        f"name: learned\nenv: {repo_root / 'envs' / 'seed001.yaml'}\npolicies: [seed-chain, out/{run}]\n"
        "scenarios: {names: [mild-overflow]}\nseeds: 1\n"
    )
    assert main(["sweep", str(tmp_path / "learned.yaml"), "--out", str(tmp_path / "sweep"), "--quiet"]) == 0
    results = pd.read_csv(tmp_path / "sweep" / "results.csv")
    assert sorted(results["policy"]) == sorted(["seed-chain", f"out/{run}"])
    assert main(["report", str(tmp_path / "sweep"), "--run", str(tmp_path / "out" / run),
                 "--out", str(tmp_path / "report")]) == 0
    assert (tmp_path / "report" / f"strategy_usage_{Path(run).name}.png").stat().st_size > 5_000
    assert (tmp_path / "report" / "learning_curves.png").stat().st_size > 5_000


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("param_space: {learning_rate: {uniform: [0.1, 0.01]}}\n", "key 'param_space.learning_rate.uniform': needs low < high"),
        ("param_space: {learning_rate: {uniform: [0.1, 0.2], choice: [1]}}\n", "exactly one of"),
        ("param_space: {}\n", "key 'param_space'"),
        ("param_space: {gamma: {choice: [1.0]}}\noverrides: {eval_freq: 5000}\n", "key 'overrides.eval_freq'"),
        ("param_space: {gamma: {choice: [1.0]}}\noverrides: {algo: SAC}\n", "key 'overrides.algo'"),
        ("param_space: {gamma: {uniform: [0.9, 1.5]}}\n", "key 'param_space.gamma': must be in [0, 1] (got 1.5)"),
        ("param_space: {n_steps: {choice: [0, 512]}}\n", "key 'param_space.n_steps': must be >= 1 (got 0)"),
        ("param_space: {learning_rate: {choice: [fast]}}\n", "key 'param_space.learning_rate': MaskablePPO expects"),
        ("param_space: {batch_size: {randint: [-4, 64]}}\n", "key 'param_space.batch_size': must be >= 1 (got -4)"),
        ("param_space: {n_stepz: {choice: [64]}}\n", "key 'param_space.n_stepz': MaskablePPO has no hyperparameter 'n_stepz'"),
        ("param_space: {seed: {choice: [1, 2]}}\n", "key 'param_space.seed': is set by training itself"),
        ("param_space: {learning_rate: {choice: [-0.001]}}\n", "key 'param_space.learning_rate': must be >= 0 (got -0.001)"),
        ("param_space: {gamma: {choice: [0.9]}}\nseed: 4294967296\n", "key 'seed': Input should be less than or equal to 4294967295"),
    ],
)
def test_bad_tune_file_is_one_line(tmp_path: Path, capsys, text: str, needle: str):
    """Checked before Ray is needed: these fail the same with or without the extra."""
    (tmp_path / "t.yaml").write_text("name: t\nexperiment: experiments/maskable_ppo_seed001.yaml\ntimesteps: 100\n" + text)
    assert main(["tune", str(tmp_path / "t.yaml"), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("ctxsim: error: ") and err.count("\n") == 1 and needle in err, err
    assert not (tmp_path / "out").exists()


def test_tune_selects_on_a_split_of_its_own(repo_root: Path, tmp_path: Path):
    """The shipped search scores its trials on validation scenarios taken out of
    training, never on the held-out split; a tune file that leaves them out is told
    its best score is chosen on the test split."""
    from ctxsim.lab.train import env_configs
    from ctxsim.lab.tune import load_tune

    shipped = load_tune(repo_root / "experiments" / "tune_maskable_ppo.yaml")
    split, names = shipped.selection
    _, train_cfg, eval_cfg, selection_cfg = env_configs(shipped.experiment)
    assert split == "validation" and selection_cfg["scenario_names"] == names and shipped.notes == []
    assert not set(names) & set(eval_cfg["scenario_names"]) and not set(names) & set(train_cfg["scenario_names"])

    (tmp_path / "t.yaml").write_text(
        f"name: t\nexperiment: {repo_root / 'experiments' / 'maskable_ppo_seed001.yaml'}\ntimesteps: 8000\n"
        "param_space: {ent_coef: {choice: [0.0]}}\n"
    )
    bare = load_tune(tmp_path / "t.yaml")
    assert bare.selection == ("held-out", ["gpt4-6000", "fragmented", "tool-dupes", "transcript-marshmallow"])
    assert len(bare.notes) == 1 and "held-out" in bare.notes[0] and "validation_scenarios" in bare.notes[0]


def test_tune_names_the_training_split_when_an_experiment_holds_nothing_out(repo_root: Path, tmp_path: Path):
    from ctxsim.lab.train import env_configs
    from ctxsim.lab.tune import load_tune

    (tmp_path / "t.yaml").write_text(
        f"name: t\nexperiment: {repo_root / 'experiments' / 'maskable_ppo_seed001.yaml'}\ntimesteps: 8000\n"
        "overrides: {eval_scenarios: []}\nparam_space: {ent_coef: {choice: [0.0]}}\n"
    )
    spec = load_tune(tmp_path / "t.yaml")
    split, names = spec.selection
    assert split == "training" and names == env_configs(spec.experiment)[1]["scenario_names"] and len(names) == 23
    assert "training scenarios" in spec.notes[0] and "chosen on the training split" in spec.notes[0]


@pytest.mark.optional
@pytest.mark.skipif(find_spec("ray") is None, reason="needs the extra 'ray'")
def test_a_failed_trial_is_one_line_of_its_own_and_leaves_no_folder(tmp_path: Path, repo_root: Path, capsys):
    """A trial that fails once training runs (it diverges) is reported by its own
    ctxsim error in one line, not by Ray's traceback, and its run folder is removed:
    in a search where other trials succeed, a note per failed trial beside the table;
    in one where every trial fails, the error, and the output folder the search created
    is removed. With --quiet Ray prints nothing of its own. (One Ray for both searches:
    a search uses the Ray it finds running.)"""
    import ray

    diverging = dict(eval_freq=32, train="[mild-overflow]", timesteps=64, n_steps=32)
    (tmp_path / "some.yaml").write_text(tiny_tune(repo_root, name="some", samples=2, cpus=2,
                                                  space="vf_coef: {choice: [1.0e+300, 0.5]}", **diverging) + "seed: 2\n")
    (tmp_path / "all.yaml").write_text(tiny_tune(repo_root, name="all", samples=1, cpus=1,
                                                 space="vf_coef: {choice: [1.0e+300]}", **diverging))
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        assert main(["tune", str(tmp_path / "some.yaml"), "--out", str(tmp_path / "some"), "--quiet"]) == 0
        some = capsys.readouterr()
        assert main(["tune", str(tmp_path / "all.yaml"), "--out", str(tmp_path / "all"), "--quiet"]) == 2
        every = capsys.readouterr()
    finally:
        ray.shutdown()

    diverged = "key 'hyperparams': training diverged after 32 steps"
    notes = [line for line in some.out.splitlines() if line.startswith("note: trial_")]
    assert [line.split(" ")[1] for line in notes] == ["trial_00001"], some.out
    assert all("vf_coef=1e+300) failed: " in line and diverged in line for line in notes), notes
    assert pd.read_csv(tmp_path / "some" / "tune_results.csv")["trial"].tolist() == ["trial_00000"]
    assert sorted(p.name for p in (tmp_path / "some" / "runs").iterdir()) == ["trial_00000"]
    assert "1 failed" in (tmp_path / "some" / "tune_results.md").read_text()

    last = every.err.strip().splitlines()[-1]
    assert last.startswith(f"ctxsim: error: {tmp_path / 'all.yaml'}: every trial failed; first error: "), last
    assert diverged in last and "ray::" not in last, last
    assert not (tmp_path / "all").exists()
    for output in (some, every):  # nothing of Ray's: no traceback, no progress box, no trial-end lines
        assert "Traceback" not in output.err + output.out and "Configuration for experiment" not in output.out
        assert "errored after" not in output.out, output.out
