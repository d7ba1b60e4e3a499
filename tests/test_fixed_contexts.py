"""The fixed evaluation set: training's evaluations score the same contexts every time."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

from ctxsim.lab.environments.fixed_contexts import FixedContexts, evaluation_order
from ctxsim.errors import ScenarioError
from ctxsim.lab.scenarios import find_scenario
from ctxsim.lab.train import ExperimentConfig, train

REPO = Path(__file__).resolve().parent.parent
HELD_OUT = ["gpt4-6000", "fragmented", "tool-dupes", "transcript-marshmallow"]


def drawn(env: gym.Env, n: int) -> list[tuple[str, int]]:
    out = []
    for _ in range(n):
        _, info = env.reset()
        out.append((info["scenario"], info["seed"]))
    return out


def test_the_order_takes_scenarios_in_turn_and_seeds_in_order():
    suite = [find_scenario(name) for name in HELD_OUT]
    order = evaluation_order(suite, 16)
    first = [next(order) for _ in range(12)]
    assert first == [(name, k) for k in range(3) for name in HELD_OUT]
    # a scenario with fewer distinct contexts goes round its own seeds
    two = [find_scenario("gpt4-6000"), find_scenario("tool-dupes").model_copy(update={"contexts": 2})]
    order = evaluation_order(two, 16)
    assert [next(order) for _ in range(6)] == [("gpt4-6000", 0), ("tool-dupes", 0), ("gpt4-6000", 1), ("tool-dupes", 1),
                                               ("gpt4-6000", 2), ("tool-dupes", 0)]


@pytest.mark.parametrize("env_id", ["ctxsim/ContextOverflow-v0", "ctxsim/ConversationStream-v0"])
def test_every_evaluation_draws_the_same_contexts(env_id):
    env = FixedContexts(gym.make(env_id, config={"scenario_names": HELD_OUT[:3], "contexts_per_scenario": 4}))
    assert [s.name for s in env.unwrapped.suite] == HELD_OUT[:3]  # the configured scenarios, in order
    expected = [(name, k) for k in range(4) for name in HELD_OUT[:3]]
    assert drawn(env, 12) == expected
    assert drawn(env, 3) == expected[:3]  # the order goes round again
    env.rewind()
    assert drawn(env, 5) == expected[:5]
    _, info = env.reset(options={"scenario": "tool-dupes", "context_seed": 3})  # explicit options pass through
    assert (info["scenario"], info["seed"]) == ("tool-dupes", 3)


def test_contexts_that_fit_are_skipped_and_a_suite_that_never_overflows_is_an_error(tmp_path):
    roomy = tmp_path / "roomy.yaml"
    roomy.write_text(
        "name: roomy\ndescription: well under the limit\nlimit: 5000\noverflow: 0.5\np1_ratio: 0.3\n"
        "mix: {message: 0.5, code: 0.5}\n"
    )
    both = [str(roomy), str(REPO / "data" / "scenarios" / "tool-dupes.yaml")]
    env = FixedContexts(gym.make("ctxsim/ContextOverflow-v0", config={"scenarios": both, "contexts_per_scenario": 3}))
    assert drawn(env, 4) == [("tool-dupes", 0), ("tool-dupes", 1), ("tool-dupes", 2), ("tool-dupes", 0)]
    alone = FixedContexts(gym.make("ctxsim/ContextOverflow-v0", config={"scenarios": str(roomy), "contexts_per_scenario": 3}))
    with pytest.raises(ScenarioError, match="roomy"):
        alone.reset()


def test_a_policy_that_does_not_learn_scores_the_same_at_every_evaluation(tmp_path):
    # learning rate 0: the policy never changes, so only the contexts could move the
    # curve; with a random draw per evaluation its rows would differ
    exp = ExperimentConfig(
        name="frozen", algo="MaskablePPO", env="envs/default.yaml", env_config={"contexts_per_scenario": 4},
        train_scenarios=["chat-10k"], eval_scenarios=HELD_OUT[:3], timesteps=384, n_envs=1, seed=0,
        hyperparams={"n_steps": 64, "batch_size": 32, "n_epochs": 1, "learning_rate": 0.0, "policy_kwargs": {"net_arch": [8]}},
        eval_freq=128, eval_episodes=6, checkpoint_freq=10**6, source=str(REPO / "experiments" / "frozen.yaml"),
    )
    curve = np.load(train(exp, out=tmp_path, progress=False) / "evaluations.npz")
    results = curve["results"]
    assert results.shape == (3, 6) and len(set(np.round(results.ravel(), 9))) > 1  # the contexts differ
    np.testing.assert_array_equal(results, np.repeat(results[:1], 3, axis=0))
