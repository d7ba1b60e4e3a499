"""Fixed baselines: random, design 001's chain, one strategy only, one-step greedy.

When a fixed policy has nothing left to try and the episode is not over, it calls
:func:`fallback_action`: the recovery action named by the settings'
``recovery_mode`` (``fresh_start`` by default) when it is a valid action, else the
first valid recovery action, else the first valid action (never ``error``, which
raises instead of acting). A recovery action ends the episode and counts as "used
recovery" (success when the result fits), exactly as when a learned policy picks it.
"""

from __future__ import annotations

import itertools

import numpy as np

from ..episode import EpisodeSettings, OverflowEpisode
from ..episode_config import SEED_CHAIN
from ..errors import PolicyError
from ..reward import RewardWeights, compute_reward
from ..strategies import Strategy, list_strategies
from .registry import Policy, register_family, register_policy

#: strategy ids that are not actions a policy can take ("error" raises BREAKER_FAILED)
NOT_ACTIONS = ("error",)


def candidate_actions(episode: OverflowEpisode) -> list[str]:
    """The valid actions a policy may take, in the settings' order (without ``error``,
    unless it is the only one)."""
    valid = episode.valid_actions()
    return [sid for sid in valid if sid not in NOT_ACTIONS] or valid


def fallback_action(episode: OverflowEpisode) -> str:
    """What a fixed policy does when it has nothing left to try (module docstring)."""
    settings = episode.settings
    valid = candidate_actions(episode)
    if settings.recovery_mode in valid:
        return settings.recovery_mode
    return next((sid for sid in valid if settings.strategy(sid).recovery), valid[0])


def _require(settings: EpisodeSettings, policy: str, ids: tuple[str, ...]) -> None:
    missing = [sid for sid in ids if sid not in settings.actions]
    if missing:
        actions = list(settings.actions)
        raise PolicyError(f"policy '{policy}' needs the actions {missing}; the episode has {actions}", key="actions")


@register_policy("random")
class RandomPolicy(Policy):
    """Uniform over the valid actions (:func:`candidate_actions`, the oracle's
    branches, so its expected reward is the oracle search's ``random_reward``), from
    a numpy Generator seeded in ``reset``."""

    def __init__(self) -> None:
        self._rng = np.random.default_rng(0)

    def reset(self, seed: int) -> None:
        self._rng = np.random.default_rng(seed)

    def act(self, episode: OverflowEpisode) -> str:
        valid = candidate_actions(episode)
        return valid[int(self._rng.integers(len(valid)))]


def fixed_chains(settings: EpisodeSettings) -> list[tuple[str, ...]]:
    """Every chain of ``settings.max_steps`` action ids (``error`` aside) a
    :class:`FixedChainPolicy` can play, in the settings' action order."""
    ids = [sid for sid in settings.actions if sid not in NOT_ACTIONS]
    return list(itertools.product(ids, repeat=settings.max_steps))


class FixedChainPolicy(Policy):
    """A fixed chain of action ids, cumulative, one strategy per step.

    Each id in order, on the result of the previous one; an id that is not valid
    when its turn comes is skipped for good. The episode stops as soon as the
    context fits; after ``max_steps`` steps it applies its forced recovery (the
    environment's rules). When the chain is used up before that,
    :func:`fallback_action` (design 001: "all strategies failed → recovery"). Raises
    PolicyError when the episode's actions lack one of the chain's ids.
    """

    def __init__(self, chain: tuple[str, ...]) -> None:
        self.chain = tuple(chain)
        self._next = 0

    def reset(self, seed: int) -> None:
        self._next = 0

    def check(self, settings: EpisodeSettings) -> None:
        _require(settings, self.name, self.chain)

    def act(self, episode: OverflowEpisode) -> str:
        self.check(episode.settings)
        valid = episode.valid_actions()
        while self._next < len(self.chain):
            sid = self.chain[self._next]
            self._next += 1
            if sid in valid:
                return sid
        return fallback_action(episode)


@register_policy("seed-chain")
class SeedChainPolicy(FixedChainPolicy):
    """Design 001's default breaking chain: ``summarize_old``, ``prioritize_recent``,
    ``content_type_chunking``, ``discard_low_rel`` (:class:`FixedChainPolicy`)."""

    CHAIN = SEED_CHAIN[:4]

    def __init__(self) -> None:
        super().__init__(self.CHAIN)


class OnlyPolicy(Policy):
    """``only:<strategy>``: the same strategy every step while it is valid, then
    :func:`fallback_action`. A strategy outside the episode's actions runs as a
    strategy object (the settings' configured instance), so every registered
    strategy can be evaluated on any action set."""

    def __init__(self, strategy_id: str) -> None:
        self.strategy_id = strategy_id
        self.name = f"only:{strategy_id}"

    def act(self, episode: OverflowEpisode) -> str | Strategy:
        settings, sid = episode.settings, self.strategy_id
        if sid in settings.actions:
            return sid if sid in episode.valid_actions() else fallback_action(episode)
        if settings.valid(sid, episode.state):
            return settings.strategy(sid)
        return fallback_action(episode)


register_family("only", lambda: [sid for sid in list_strategies() if sid not in NOT_ACTIONS], OnlyPolicy)


@register_policy("greedy")
class GreedyPolicy(Policy):
    """One-step lookahead on the reward.

    Each valid action is tried on a copy of the episode. Among those whose step ends
    the episode (it fits, a recovery ran, or ``max_steps`` forced recovery), the one
    with the highest reward; when none ends it, the one that removes the most tokens.
    Ties go to the earlier action in the settings' order.

    It scores with the episode's own reward, so under ``grounded`` it sees the probe
    term: which strings the rest of the session uses. No deployed policy knows them;
    ``greedy-without-probes`` is the same lookahead on what one can score.
    """

    def weights(self, settings: EpisodeSettings) -> RewardWeights:
        """The reward weights a finished copy is scored by: the episode's own."""
        return settings.reward

    def act(self, episode: OverflowEpisode) -> str:
        weights = self.weights(episode.settings)
        best_end: tuple[float, str] | None = None
        best_cut: tuple[int, str] | None = None
        for sid in candidate_actions(episode):
            child = episode.copy()
            step = child.step(sid)
            if child.done:
                value = compute_reward(child.outcome, weights)
                if best_end is None or value > best_end[0]:
                    best_end = (value, sid)
            else:
                cut = step.before.total_tokens - step.after.total_tokens
                if best_cut is None or cut > best_cut[0]:
                    best_cut = (cut, sid)
        return (best_end or best_cut)[1]


@register_policy("greedy-without-probes")
class GreedyWithoutProbesPolicy(GreedyPolicy):
    """``greedy`` scoring each finished copy by the reward without its probe term
    (:meth:`~ctxsim.reward.RewardWeights.without_probes`): the one-step lookahead a
    deployed agent can run, since everything else the reward reads (the fit, coherence
    against the original, tokens cut, P1 units, rules, latency) is computed from the
    context itself. Under a reward without probes (``seed001``) it is ``greedy``."""

    def weights(self, settings: EpisodeSettings) -> RewardWeights:
        return settings.reward.without_probes()
