"""The rollout teacher of the stream warm start (ctxsim.lab.stream.teacher): its rows are
the rollout's values of the flat actions at the environment's states, the warm start
fits a stream policy to them, and experiments that misname the teacher are refused."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ctxsim.errors import ConfigError
from ctxsim.lab.environments.conversation_stream import ConversationStreamEnv, build_conversation, make_session
from ctxsim.lab.stream.actions import depth_mask
from ctxsim.lab.stream.evaluate_stream import evaluate_stream
from ctxsim.lab.stream.rollout import Rollout
from ctxsim.lab.stream.teacher import cached_rollout_values, conversation_rows, rollout_values, teacher_file
from ctxsim.lab.train import ExperimentConfig, load_experiment, train, training_states
from ctxsim.lab.warmstart import WarmStart, fit, greedy_regret
from ctxsim.observe import ObservationConfig
from ctxsim.paths import ROOT as REPO_ROOT
from ctxsim.policies.oracle import chains

#: one short conversation that overflows several times
SCENARIO, SEED = "mild-overflow", 0
CONFIG = {"turns": 40, "probes": {"turns": [15, 25, 35], "min_age_turns": 5}, "scenario_names": [SCENARIO],
          "contexts_per_scenario": 1}
TEACHER = "rollout:seed-chain"


def fresh_session():
    checked = ConversationStreamEnv.checked_config(CONFIG)
    return checked, make_session(build_conversation(checked.suite[0], SEED, checked), checked)


@pytest.fixture(scope="module")
def rows():
    """(rows of the whole conversation, the session the teacher played) with every state kept."""
    checked, session = fresh_session()
    found = conversation_rows(Rollout.named(TEACHER, checked), session, SCENARIO, SEED, ObservationConfig.of(checked),
                              checked.session_features, margin=np.inf)
    obs, masks, q = (np.array(col) for col in zip(*found))
    return obs, masks.astype(bool), q, session


def test_the_first_row_is_the_envs_first_state_valued_by_the_rollout(rows):
    obs, masks, q, _ = rows
    env = ConversationStreamEnv(CONFIG)
    first_obs, info = env.reset(options={"scenario": SCENARIO, "context_seed": SEED})
    assert np.array_equal(obs[0], first_obs) and np.array_equal(masks[0], info["action_mask"])
    assert obs.shape[1:] == env.observation_space.shape and q.shape[1] == masks.shape[1] == env.action_space.n
    # each flat action (depth d, strategy k) is worth the best total of the chains at d that begin with k
    checked, session = fresh_session()
    rollout = Rollout.named(TEACHER, checked)
    k = len(checked.actions)
    expected = np.full(env.action_space.n, -np.inf)
    for depth in range(session.depth_count):
        start = session.event_at(depth)
        for finished in chains(start.original, start.settings):
            action = depth * k + checked.actions.index(finished.chain[0])
            expected[action] = max(expected[action], rollout.value(session, finished.chain, SCENARIO, SEED, depth))
    assert np.allclose(q[0], expected, rtol=0, atol=1e-9)
    best = rollout.best_chain(session, SCENARIO, SEED)
    if best is not None:  # the rollout's (depth, first step) is the row's best action
        depth, chain = best
        assert q[0, depth * k + checked.actions.index(chain[0])] == pytest.approx(q[0].max(), abs=1e-9)


def test_every_row_values_exactly_its_valid_actions_and_the_teacher_plays_as_the_rollout(rows):
    obs, masks, q, session = rows
    assert np.array_equal(np.isfinite(q), masks) and masks.any(1).all()
    # within an event (after its first step) only the chosen depth's block is valid
    k = len(session.settings.actions)
    blocks = masks.reshape(len(masks), session.depth_count, k).any(2).sum(1)
    assert (blocks == 1).any() and (blocks == session.depth_count).any()
    # some states are reached through steps: the rows are more than the events' first states
    decisions = sum(1 for event in session.events if event.trigger == "agent")
    assert len(q) > decisions > 0 and (obs[:, -1] > 0).all()  # event_depth is a share of the limit
    # the teacher's conversation is the rollout's
    played = evaluate_stream([TEACHER], [SCENARIO], [SEED], CONFIG).iloc[0]
    metrics = session.metrics()
    assert all(metrics[key] == played[key] for key in ("overflow_events", "strategy_steps", "probes_answered", "break_depth"))


def test_the_margin_keeps_fewer_states_and_the_mask_matches_the_env(rows):
    obs, _, q, _ = rows
    narrow = rollout_values(CONFIG, TEACHER, margin=0.0)
    assert 0 < len(narrow) < len(q)
    assert np.array_equal(narrow.observations[0], obs[0]) and np.array_equal(narrow.values[0], q[0])
    _, session = fresh_session()
    assert np.array_equal(narrow.masks[0], depth_mask(session))


def test_the_warm_start_moves_the_policy_to_the_teachers_actions(rows):
    from sb3_contrib import MaskablePPO

    obs, masks, q, _ = rows
    data = rollout_values(CONFIG, TEACHER, margin=np.inf)
    assert np.array_equal(data.values, q)
    model = MaskablePPO("MlpPolicy", ConversationStreamEnv(CONFIG), seed=0, device="cpu")

    def chosen():  # share of the states where the policy's greedy action is within 0.01 of the teacher's best
        greedy, _ = model.policy.predict(obs, deterministic=True, action_masks=masks)
        return np.mean(q[np.arange(len(q)), greedy] >= q.max(1) - 0.01)

    before_regret, before_chosen = greedy_regret(model.policy, data), chosen()
    stats = fit(model.policy, data, WarmStart(teacher=TEACHER, epochs=300, scale=0.05, weight_decay=0.0), seed=0)
    assert before_regret > 0.05 and stats["greedy_regret"] < 0.25 * before_regret
    assert chosen() >= 0.9 > before_chosen


@pytest.fixture(scope="module")
def first_rows():
    """The teacher's rows of seed 0's conversation alone (CONFIG), computed in this process."""
    return rollout_values(CONFIG, TEACHER, 0.0)


def same_rows(a, b) -> bool:
    return all(np.array_equal(getattr(a, f), getattr(b, f)) for f in ("observations", "masks", "values"))


def test_the_rows_are_the_same_on_one_process_or_several(first_rows):
    """Two conversations (seeds 0 and 1), each a work item: in-process or on two
    workers, the rows come out the same and in conversation order (seed 0's first)."""
    two = {**CONFIG, "contexts_per_scenario": 2}
    alone, shared = rollout_values(two, TEACHER, 0.0, workers=1), rollout_values(two, TEACHER, 0.0, workers=2)
    assert same_rows(alone, shared)
    assert len(first_rows) < len(alone) and np.array_equal(alone.values[:len(first_rows)], first_rows.values)


def test_the_rows_are_cached_by_config_and_teacher(tmp_path, monkeypatch, first_rows):
    monkeypatch.setenv("CTXSIM_POOL_DIR", str(tmp_path))
    first, path, computed = cached_rollout_values(CONFIG, TEACHER, 0.0)
    assert computed and path.parent == tmp_path and path.is_file()
    assert same_rows(first, first_rows)  # what the cache computes is the rows themselves
    again, same, recomputed = cached_rollout_values(CONFIG, TEACHER, 0.0)
    assert same == path and not recomputed
    assert same_rows(first, again)
    assert teacher_file(CONFIG, "rollout:peer:letta", 0.0) != path  # another teacher, another file


def test_the_rows_file_follows_values_not_where_the_files_are(tmp_path, repo_root):
    import shutil

    shutil.copytree(repo_root / "data" / "scenarios", tmp_path / "scenarios")
    shutil.copytree(repo_root / "data" / "transcripts", tmp_path / "transcripts")
    here = teacher_file({**CONFIG, "scenarios": str(repo_root / "data" / "scenarios")}, TEACHER, 0.0)
    assert teacher_file({**CONFIG, "scenarios": str(tmp_path / "scenarios"), "cache_size": 7}, TEACHER, 0.0) == here
    assert teacher_file({**CONFIG, "turns": CONFIG.get("turns", 60) + 1}, TEACHER, 0.0) != here
    assert teacher_file(CONFIG, TEACHER, 0.25) != here


def test_contexts_per_scenario_limits_the_teachers_contexts():
    config = {"scenario_names": ["mild-overflow"], "contexts_per_scenario": 2}
    every = training_states("ctxsim/ContextOverflow-v0", config, WarmStart())
    first = training_states("ctxsim/ContextOverflow-v0", config, WarmStart(contexts_per_scenario=1))
    assert 0 < len(first) < len(every)
    assert np.array_equal(every.observations[: len(first)], first.observations)


def _stream_experiment(**changes) -> ExperimentConfig:
    base = dict(
        name="sw", algo="MaskablePPO", env=str(REPO_ROOT / "envs" / "stream.yaml"),
        env_config={"contexts_per_scenario": 1, "turns": 40, "probes": CONFIG["probes"]},
        train_scenarios=[SCENARIO], eval_scenarios=["gpt4-6000"], timesteps=32, n_envs=1,
        hyperparams={"n_steps": 32, "batch_size": 32}, eval_freq=32, eval_episodes=1,
        warm_start={"teacher": TEACHER, "epochs": 20, "margin": 0.0},
    )
    return ExperimentConfig.model_validate({**base, **changes})


def test_training_a_stream_policy_with_the_rollout_teacher(tmp_path, monkeypatch):
    monkeypatch.setenv("CTXSIM_POOL_DIR", str(tmp_path / "pools"))
    run = train(_stream_experiment(), out=tmp_path, progress=False)
    stats = json.loads((run / "warm_start.json").read_text())
    assert stats["teacher"] == TEACHER and stats["states"] == len(rollout_values(CONFIG, TEACHER, 0.0))
    assert list(np.load(run / "evaluations.npz")["timesteps"]) == [0, 32]  # the warm-started policy is a candidate
    assert list((tmp_path / "pools").glob("teacher-*.npz"))


@pytest.mark.parametrize("warm_start, env, match", [
    ({"teacher": "bogus"}, "stream.yaml", "key 'warm_start.teacher'"),
    ({"teacher": "rollout:"}, "stream.yaml", "key 'warm_start.teacher'"),
    ({"contexts_per_scenario": 0}, "default.yaml", "key 'warm_start.contexts_per_scenario'"),
])
def test_a_bad_warm_start_block_names_file_key_and_value(tmp_path, warm_start, env, match):
    path = tmp_path / "exp.yaml"
    path.write_text(f"name: x\nalgo: MaskablePPO\nenv: {REPO_ROOT / 'envs' / env}\nwarm_start: {json.dumps(warm_start)}\n")
    with pytest.raises(ConfigError, match=match) as err:
        load_experiment(path)
    assert str(path) in str(err.value) and str(next(iter(warm_start.values()))) in str(err.value)


@pytest.mark.parametrize("teacher, env, match", [
    ("oracle", "stream.yaml", "'oracle' needs a ContextOverflow env"),
    (TEACHER, "default.yaml", "needs ConversationStream-v0"),
    ("rollout:no-such-policy", "stream.yaml", "no-such-policy"),
])
def test_a_teacher_that_does_not_suit_the_env_is_refused_before_any_run(tmp_path, teacher, env, match):
    experiment = _stream_experiment(env=str(REPO_ROOT / "envs" / env), env_config={}, train_scenarios=None, eval_scenarios=[],
                                    warm_start={"teacher": teacher})
    with pytest.raises(ConfigError, match=match) as err:
        train(experiment, out=tmp_path / "runs", progress=False)
    assert "key 'warm_start.teacher'" in str(err.value)
    assert not (tmp_path / "runs").exists()
