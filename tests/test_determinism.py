"""Determinism across the whole pipeline: the same inputs give the same bytes.

One small pipeline — generate two contexts, evaluate 3 policies on 2 scenarios x 2
seeds with a transition log, a sweep with 1 and with 2 workers, and a few hundred
steps of MaskablePPO training with a fixed seed on DummyVecEnv — runs twice, in two
processes with different PYTHONHASHSEED values. Every output must be byte-identical
between the two runs (the training run: the content of evaluations.npz), and the
sweep's results must not depend on the number of workers.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent
POLICIES = ["seed-chain", "greedy", "random"]
PIPELINE = textwrap.dedent(
    """
    import sys
    from pathlib import Path

    from ctxsim.lab.cli import main
    from ctxsim.lab.train import ExperimentConfig, train

    out, scenarios, sweep, policies = Path(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4].split(",")
    for name, seed in (("chat-10k", 3), ("transcript-missing-colon", 0)):
        assert main(["generate", "--scenario", name, "--seed", str(seed), "--out", str(out / "generate" / f"{name}.json")]) == 0
    assert main(["evaluate", *[a for p in policies for a in ("--policy", p)], "--scenarios", scenarios, "--seeds", "2", "--out", str(out / "evaluate" / "results.csv"),
                 "--log", str(out / "evaluate" / "transitions.jsonl"), "--quiet"]) == 0
    for workers in ("1", "2"):
        assert main(["sweep", sweep, "--workers", workers, "--out", str(out / f"sweep-{workers}"), "--quiet"]) == 0
    experiment = ExperimentConfig(
        name="determinism", algo="MaskablePPO", env_config={"contexts_per_scenario": 2},
        train_scenarios=["mild-overflow", "chat-10k"], eval_scenarios=["mild-overflow"], timesteps=256, n_envs=2,
        vec_env="dummy", seed=7, hyperparams={"n_steps": 64, "batch_size": 32, "n_epochs": 2, "policy_kwargs": {"net_arch": [32]}},
        eval_freq=128, eval_episodes=4, checkpoint_freq=10**6,
    )
    run = train(experiment, out=out / "runs", progress=False)
    (out / "evaluations.npz").write_bytes((run / "evaluations.npz").read_bytes())
    """
)


def scenario_file(folder: Path) -> Path:
    """Two shipped scenarios, one generated and one transcript, in one file."""
    generated = yaml.safe_load((REPO / "data" / "scenarios" / "mild-overflow.yaml").read_text())
    transcript = yaml.safe_load((REPO / "data" / "scenarios" / "transcript-missing-colon.yaml").read_text())
    transcript["transcript"] = str((REPO / "data" / "scenarios" / transcript["transcript"]).resolve())
    path = folder / "scenarios.yaml"
    path.write_text(yaml.safe_dump({"scenarios": [generated, transcript]}))
    return path


def run_twice(tmp_path: Path) -> tuple[Path, Path]:
    scenarios = scenario_file(tmp_path)
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(f"name: determinism\npolicies: {POLICIES}\nscenarios: {{suite: {scenarios}}}\nseeds: 2\n")
    outs = (tmp_path / "a", tmp_path / "b")
    procs = [
        subprocess.Popen([sys.executable, "-c", PIPELINE, str(out), str(scenarios), str(sweep), ",".join(POLICIES)], cwd=tmp_path,
                         env={**os.environ, "PYTHONHASHSEED": hash_seed}, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                         text=True)
        for out, hash_seed in zip(outs, ("0", "4242"))
    ]
    for proc in procs:
        _, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err[-3000:]
    return outs


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory) -> tuple[Path, Path]:
    return run_twice(tmp_path_factory.mktemp("determinism"))


def files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("part", ["generate", "evaluate", "sweep-1", "sweep-2"])
def test_outputs_are_byte_identical_across_processes(pipeline, part):
    a, b = (files(out / part) for out in pipeline)
    assert a and sorted(a) == sorted(b)
    for name in a:
        assert a[name] == b[name], f"{part}/{name} differs between PYTHONHASHSEED=0 and =4242"


def test_outputs_are_complete(pipeline):
    out = pipeline[0]
    assert sorted(files(out / "generate")) == ["chat-10k.json", "transcript-missing-colon.json"]
    results = (out / "evaluate" / "results.csv").read_text().splitlines()
    assert len(results) == 1 + len(POLICIES) * 2 * 2
    assert (out / "evaluate" / "transitions.jsonl").stat().st_size > 0


def test_sweep_results_do_not_depend_on_workers(pipeline):
    for out in pipeline:
        for name in ("results.csv", "transitions.jsonl", "summary.md"):
            assert (out / "sweep-1" / name).read_bytes() == (out / "sweep-2" / name).read_bytes(), name


def test_training_with_a_fixed_seed_gives_the_same_evaluations(pipeline):
    a, b = (np.load(out / "evaluations.npz") for out in pipeline)
    assert sorted(a.files) == sorted(b.files) and "results" in a.files
    assert list(a["timesteps"]) == [128, 256]
    for key in a.files:
        assert np.array_equal(a[key], b[key]), key
