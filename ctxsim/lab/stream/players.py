"""Policies as they play a conversation whose events may be broken at several depths.

A policy of :mod:`ctxsim.policies` breaks one :class:`~ctxsim.episode.OverflowEpisode`
at a time and knows nothing of depths: on ConversationStream-v0 it breaks every event
to the first depth (the warning threshold by default), as it did before depths
existed — the peers and the fixed chains keep their own behaviour. Two kinds play
differently (:func:`stream_player` picks):

- the per-event reward maximizers (``oracle``, ``greedy``) also maximize over the
  depths (:class:`DepthSearch`): the best event reward any depth reaches;
- a trained ConversationStream-v0 policy (an SB3 run whose spaces are the
  environment's) acts as in the environment (:class:`LearnedStream`): the
  observation with the session features, the flat strategy × depth actions and
  their mask;
- a policy with a ``stream_player(config)`` method plays as what that returns:
  ``best-fixed:<experiment>`` the one (depth, chain) best on the experiment's whole
  training conversations (:mod:`.best_fixed`), not the chain best on single breaks.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ...errors import PolicyError
from ...observe import ObservationConfig, feature_names
from ...policies import Policy, run_episode
from ..policies.sb3 import SB3Policy
from .actions import depth_mask, step_flat
from .features import SESSION_FEATURES, stream_observation
from .play import EventPlayer, event_seed, play_event
from .session import StreamSession

if TYPE_CHECKING:
    from ..environments.conversation_stream import StreamConfig

#: the policies that maximize one event's reward: with several depths they search them too
EVENT_MAXIMIZERS = ("oracle", "greedy")
#: event rewards closer than this are ties (kept by the shallower depth)
TIE = 1e-9


class DepthSearch:
    """A per-event maximizer over the break depths: each depth's event is broken by
    ``policy`` on the side, and the depth with the highest event reward is played
    (ties: the shallower)."""

    def __init__(self, policy: Policy):
        self.policy, self.name = policy, policy.name

    def play_event(self, session: StreamSession, scenario: str, seed: int) -> float:
        best, best_reward = 0, -np.inf
        for index in range(session.depth_count):
            start = session.event_at(index)
            finished = run_episode(self.policy, start.original, start.settings, event_seed(scenario, seed, len(session.events)))
            if finished.reward > best_reward + TIE:
                best, best_reward = index, finished.reward
        session.choose_depth(best)
        return play_event(self.policy, session, scenario, seed)


class LearnedStream:
    """A trained ConversationStream-v0 policy: at every step the environment's
    observation (:func:`~ctxsim.lab.stream.features.stream_observation`), the
    network's scores of the flat actions, the best one the mask allows (ties: the
    lower index), applied as the environment applies it."""

    def __init__(self, policy: SB3Policy, obs_config: ObservationConfig, with_session: bool):
        self.policy, self.name = policy, policy.name
        self.obs_config, self.with_session = obs_config, with_session

    def play_event(self, session: StreamSession, scenario: str, seed: int) -> float:
        total = 0.0
        while True:
            scores = self.policy.scores(stream_observation(session, self.obs_config, self.with_session))
            mask = depth_mask(session)
            allowed = np.flatnonzero(mask)
            out = step_flat(session, int(allowed[np.argmax(scores[allowed])]))
            total += out.reward
            if out.event_done:
                return total


def stream_player(policy: Policy, config: StreamConfig) -> Policy | EventPlayer:
    """How ``policy`` plays conversations under a validated StreamConfig (module
    docstring). A trained policy whose spaces are neither the environment's nor
    ContextOverflow-v0's raises PolicyError (before anything is played)."""
    depths = len(config.break_depths)
    if isinstance(policy, SB3Policy):
        obs_config = ObservationConfig.of(config)
        plain = len(feature_names(obs_config))
        size = plain + (len(SESSION_FEATURES) if config.session_features else 0)
        shape, actions = policy.model.observation_space.shape, policy.model.action_space.n
        if policy.trained_actions is not None and tuple(policy.trained_actions) != tuple(config.actions):
            raise PolicyError(f"policy '{policy.name}' was trained with the actions {list(policy.trained_actions)}, "
                              f"the stream has {list(config.actions)}", key="actions")
        if shape == (size,) and actions == depths * len(config.actions):
            if policy.lookahead:
                raise PolicyError(f"policy '{policy.name}' acts with lookahead, which breaks single events; "
                                  "a stream policy acts on the stream's own actions", key="lookahead")
            return LearnedStream(policy, obs_config, config.session_features)
        if shape != (plain,) or actions != len(config.actions):
            raise PolicyError(
                f"policy '{policy.name}' has observations of shape {shape} and {actions} actions; this stream has "
                f"({size},) and {depths * len(config.actions)} (or ContextOverflow-v0's ({plain},) and "
                f"{len(config.actions)}, played at the first depth)", key="break_depths")
        return policy
    if policy.name in EVENT_MAXIMIZERS and depths > 1:
        return DepthSearch(policy)
    own = getattr(policy, "stream_player", None)  # a policy with its own way of playing conversations
    return own(config) if own is not None else policy
