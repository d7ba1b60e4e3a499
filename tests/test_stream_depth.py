"""Break depths and session features of ConversationStream-v0 (ctxsim.lab.stream.actions,
ctxsim.lab.stream.features), and how policies play them (ctxsim.lab.stream.players)."""

from __future__ import annotations

import numpy as np
import pytest

from ctxsim.errors import ConfigError, PolicyError, RecoveryError
from ctxsim.lab.environments.conversation_stream import ONE_DEPTH, ConversationStreamEnv, make_session
from ctxsim.lab.environments.overflow import ContextOverflowEnv
from ctxsim.lab.stream import Conversation
from ctxsim.lab.stream.actions import depth_mask, step_flat
from ctxsim.lab.stream.features import SESSION_FEATURES, session_features
from ctxsim.lab.stream.play import play
from ctxsim.lab.stream.players import DepthSearch, LearnedStream, stream_player
from ctxsim.model import ContextUnit
from ctxsim.observe import ObservationConfig, observe
from ctxsim.policies import get_policy
from ctxsim.policies.oracle import best_chain

LIMIT = 1500  # warning threshold 1,200 tokens
GAP = 300.0  # simulated seconds between turns
#: remove_oldest aims at the target it is given, so the depth decides how much it removes
ACTIONS = ["remove_oldest", "fresh_start"]


def conversation(turns: int = 24) -> Conversation:
    """One ~130-token message per turn, GAP seconds apart: overflows every few turns."""
    units = tuple((ContextUnit(id=f"m{t}", type="message", content=f"turn {t} " + "budget figures " * 60,
                               turn=t, timestamp=GAP * t),) for t in range(turns))
    return Conversation(turns=units, limit=LIMIT, min_limit=500, scenario="built", seed=0)


def config(**overrides):
    return ConversationStreamEnv.checked_config({"actions": ACTIONS, "turns": 24, "probes": {"turns": [12]}, **overrides})


def session(**overrides):
    return make_session(conversation(), config(**overrides))


# ---- depths: targets, masks, choosing -------------------------------------------------------
def test_each_depth_breaks_to_its_share_of_the_limit_and_the_first_is_the_warning_threshold():
    s = session(break_depths=[0.9, 0.6, 0.4])
    assert [s.event_at(i).target_tokens for i in range(3)] == [1200, 900, 600]  # 0.9 is above the threshold
    assert s.depth_count == 3 and s.event_depth == 0 and s.episode.target_tokens == 1200


def test_the_mask_offers_every_depth_before_the_first_step_then_only_the_chosen_one():
    s = session()
    k = len(ACTIONS)
    first = depth_mask(s)
    assert first.shape == (3 * k,)
    for i in range(3):
        np.testing.assert_array_equal(first[i * k:(i + 1) * k], s.event_at(i).action_mask())
    out = step_flat(s, 2 * k + ACTIONS.index("remove_oldest"))  # remove_oldest at depth 0.4
    assert out.event_done and s.events[-1].target_tokens == int(0.4 * LIMIT) >= s.events[-1].tokens_after
    s2 = session(max_steps=3, strategy_params={"remove_oldest": {"target_percent": 75.0}})
    step_flat(s2, 2 * k)  # removes to 75 % of the limit only: still over 0.4, the event goes on at depth 2
    assert s2.episode is not None and s2.episode.steps_taken == 1 and s2.event_depth == 2
    later = depth_mask(s2)
    assert not later[:2 * k].any() and later[2 * k:].tolist() == s2.episode.action_mask().tolist()
    step_flat(s2, 0)  # an unmasked learner's action of another block runs at the event's depth
    ended = s2.events[0] if s2.events else None
    assert (ended.target_tokens if ended else s2.episode.target_tokens) == int(0.4 * LIMIT)


def test_the_depth_is_chosen_before_the_first_step_only():
    s = session()
    with pytest.raises(RecoveryError, match="not one of the 3"):
        s.choose_depth(3)
    s2 = session(max_steps=3, strategy_params={"remove_oldest": {"target_percent": 75.0}})
    s2.choose_depth(2)
    s2.step("remove_oldest")
    with pytest.raises(RecoveryError, match="before its first step"):
        s2.choose_depth(0)
    s2.choose_depth(2)  # the event's own depth: nothing to change


def test_a_deeper_break_delays_the_next_overflow():
    def next_event_turn(depth: int) -> tuple[int, int]:
        s = session(recovery_triggers={"max_over_hits": None})
        first = s.turn
        s.choose_depth(depth)
        s.step("remove_oldest")
        return first, s.turn

    (first, shallow), (same, deep) = next_event_turn(0), next_event_turn(2)
    assert first == same and deep > shallow + 1


@pytest.mark.parametrize("depths,key", [([0.6, 0.8], "break_depths[1]"), ([0.8, 0.8], "break_depths[1]"),
                                        ([1.5], "break_depths.0"), ([], "break_depths"), ([0.0], "break_depths.0")])
def test_break_depths_are_validated_with_the_key(depths, key):
    with pytest.raises(ConfigError, match=key.replace("[", r"\[").replace("]", r"\]")):
        ConversationStreamEnv.resolve_config({"break_depths": depths}, source="envs/x.yaml", key_prefix="config")


# ---- session features ---------------------------------------------------------------------
def test_session_features_on_a_hand_built_conversation():
    s = session()
    turn = s.turn
    arrived = sum(s.state.tokens_of(conversation().turns[t]) for t in range(turn + 1))
    f = dict(zip(SESSION_FEATURES, session_features(s).tolist()))
    assert f == pytest.approx({
        "over_hits": 1 / 2, "window_left": 1.0, "turns_left": (24 - 1 - turn) / 24, "turns_since_event": turn / 24,
        "growth": arrived / (turn + 1) / LIMIT, "last_depth": 0.0, "event_depth": 1200 / LIMIT,
    })
    s.choose_depth(1)
    assert session_features(s)[SESSION_FEATURES.index("event_depth")] == pytest.approx(900 / LIMIT)
    s.step("remove_oldest")
    second = s.turn
    f = dict(zip(SESSION_FEATURES, session_features(s).tolist()))
    elapsed = GAP * (second - turn)
    assert f["over_hits"] == 1.0 and f["window_left"] == pytest.approx((3600 - elapsed) / 3600)
    assert f["turns_since_event"] == pytest.approx((second - turn) / 24) and f["last_depth"] == pytest.approx(900 / LIMIT)
    assert f["event_depth"] == pytest.approx(1200 / LIMIT)  # each event starts at the first depth
    off = make_session(conversation(), config(recovery_triggers={"max_over_hits": None}))
    assert session_features(off)[:2].tolist() == [0.0, 0.0]  # no over-hit trigger: nothing counts toward it


def test_the_env_appends_the_session_features_and_acts_on_strategy_times_depth():
    env = ConversationStreamEnv({**ONE_DEPTH, "break_depths": [0.8, 0.6, 0.4], "session_features": True, "actions": ACTIONS,
                                 "turns": 24, "probes": {"turns": [12]}})
    plain = ContextOverflowEnv({"target": "warning", "actions": ACTIONS})
    assert env.action_space.n == 6 and env.action_names[3] == "fresh_start@0.6"
    assert env.feature_names == plain.feature_names + list(SESSION_FEATURES)
    obs, info = env.reset(options={"conversation": conversation()})
    np.testing.assert_array_equal(obs[:-len(SESSION_FEATURES)], observe(env.state, ObservationConfig.of(env.config)))
    np.testing.assert_array_equal(obs[-len(SESSION_FEATURES):], session_features(env.session))
    np.testing.assert_array_equal(env.action_masks(), depth_mask(env.session))
    _, _, _, _, info = env.step(4)  # remove_oldest at 0.4
    assert info["outcome"]["target_tokens"] == 600 and info["action"] == "remove_oldest"
    assert info["stream"]["break_depth"] == pytest.approx(0.4)


# ---- policies on depths -------------------------------------------------------------------
def test_the_oracle_searches_the_depths_and_peers_keep_the_first():
    s = session()
    best = max(best_chain(s.event_at(i).original, s.event_at(i).settings)[0] for i in range(3))
    searcher = stream_player(get_policy("oracle"), config())
    assert isinstance(searcher, DepthSearch)
    searcher.play_event(s, "built", 0)
    assert s.events[0].reward == pytest.approx(best)
    assert stream_player(get_policy("seed-chain"), config()).name == "seed-chain"  # plays as it always did
    fixed = session()
    play(get_policy("only:remove_oldest"), fixed, "built", 0)
    assert {e.target_tokens for e in fixed.events} == {1200}


def test_a_trained_stream_policy_plays_the_evaluation_as_it_plays_the_env(tmp_path):
    from sb3_contrib import MaskablePPO

    from ctxsim.lab.policies.sb3 import SB3Policy

    cfg = {"actions": ACTIONS, "turns": 24, "probes": {"turns": [12]}}
    env = ConversationStreamEnv(cfg)
    model = MaskablePPO("MlpPolicy", env, seed=3, device="cpu")
    policy = SB3Policy(model, "MaskablePPO", tuple(ACTIONS), "untrained")
    player = stream_player(policy, config())
    assert isinstance(player, LearnedStream)
    obs, _ = env.reset(options={"conversation": conversation()})
    total, done = 0.0, False
    while not done:
        mask = env.action_masks()
        scores = policy.scores(obs)
        action = int(np.flatnonzero(mask)[np.argmax(scores[mask])])
        obs, reward, done, _, _ = env.step(action)
        total += reward
    s = session()
    assert play(player, s, "built", 0) == pytest.approx(total)
    assert s.metrics() == env.session.metrics()
    # a model of the one-depth env plays at the first depth; another shape is refused
    one = SB3Policy(MaskablePPO("MlpPolicy", ConversationStreamEnv({**cfg, **ONE_DEPTH}), device="cpu"),
                    "MaskablePPO", tuple(ACTIONS), "one-depth")
    assert stream_player(one, config()) is one
    two = SB3Policy(MaskablePPO("MlpPolicy", ConversationStreamEnv({**cfg, "break_depths": [0.8, 0.5]}), device="cpu"),
                    "MaskablePPO", tuple(ACTIONS), "two-depths")
    with pytest.raises(PolicyError, match="observations of shape"):
        stream_player(two, config())


def test_every_session_feature_is_documented_in_the_table():
    from ctxsim.lab.stream import features

    for name in SESSION_FEATURES:
        assert f"\n{name} " in features.__doc__, name


def test_a_copy_at_a_deeper_depth_shares_the_settings_and_their_memo():
    s = session()
    s.choose_depth(2)
    twin = s.copy()
    assert twin.episode.settings is s.episode.settings and twin.deeper[1][0] is s.deeper[1][0]
    twin.step("remove_oldest")
    assert s.episode.steps_taken == 0 and twin.events and not s.events  # playing the copy leaves the session
