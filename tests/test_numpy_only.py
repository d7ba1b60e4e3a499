"""The exported policy runs where torch, SB3, gymnasium, pandas and matplotlib cannot be imported."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from ctxsim.policies import load
from ctxsim.scenarios import build_context, find_scenario
from ctxsim.transitions import read_transitions

BLOCKED = ("torch", "stable_baselines3", "sb3_contrib", "gymnasium", "pandas", "matplotlib")
SCENARIO, SEED = "tool-dupes", 1


@pytest.fixture(scope="module")
def export_dir(tmp_path_factory):
    """A tiny MaskablePPO run on the default env (seed 001's actions), exported in this process."""
    from ctxsim.export import export_run
    from ctxsim.train import ExperimentConfig, train

    experiment = ExperimentConfig(
        name="numpy_only", algo="MaskablePPO", eval_scenarios=[SCENARIO], timesteps=32, n_envs=1, seed=0,
        hyperparams={"n_steps": 32, "batch_size": 32, "n_epochs": 1}, eval_freq=10**6, checkpoint_freq=10**6,
    )
    run = train(experiment, out=tmp_path_factory.mktemp("runs"), progress=False)
    return export_run(run, tmp_path_factory.mktemp("export") / "policy", seeds=1).out


def test_exported_policy_decides_and_breaks_with_numpy_alone(export_dir, tmp_path):
    code = textwrap.dedent(
        f"""
        import json, sys
        for name in {BLOCKED!r}:
            sys.modules[name] = None  # any import of them raises ImportError
        from ctxsim.policies import load
        from ctxsim.scenarios import build_context, find_scenario

        policy = load(sys.argv[1])
        state = build_context(find_scenario({SCENARIO!r}), {SEED})
        result = policy.break_context(state, log=sys.argv[2])
        heavy = sorted(n for n, m in sys.modules.items() if m is not None and n.split(".")[0] in {BLOCKED!r})
        print(json.dumps({{"decision": policy.decide(state), "chain": list(result.chain), "reward": result.reward,
                           "success": result.success, "tokens": result.state.total_tokens, "heavy": heavy}}))
        """
    )
    log = tmp_path / "decisions.jsonl"
    done = subprocess.run([sys.executable, "-c", code, str(export_dir), str(log)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["heavy"] == []

    policy = load(export_dir)  # the same answers as in a process with everything importable
    state = build_context(find_scenario(SCENARIO), SEED)
    result = policy.break_context(state)
    assert got["decision"] == policy.decide(state) == result.chain[0]
    assert (tuple(got["chain"]), got["reward"], got["success"], got["tokens"]) == (
        result.chain, result.reward, result.success, result.state.total_tokens)
    assert [r["action"] for r in read_transitions(log)] == got["chain"]
