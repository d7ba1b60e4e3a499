"""The exhaustive-search oracle: the best reward the action set can reach on one context.

Every chain of valid actions is tried, depth first, on copies of an
:class:`~ctxsim.episode.OverflowEpisode` until each branch ends (the context fits,
a recovery action ran, or ``max_steps`` forced the settings' recovery), and the
chain with the highest final reward wins. Chains share prefixes: the settings
memoize every strategy application by (state, action), so a prefix is computed
once however many chains continue it (prefix memoization). Ties go to the chain
that comes first in the settings' action order, so the result is deterministic.
At most ``sum(|A|^k, k=1..max_steps)`` nodes: 258 for 6 actions and 3 steps.

The same walk gives the random policy's expected reward exactly: a leaf's
probability under :class:`~ctxsim.policies.baselines.RandomPolicy` is the product,
along its chain, of one over the number of actions it could pick at each step, and
``random_reward`` is the probability-weighted mean of the leaves' rewards. The
evaluation normalizes between it and the best reward.

Results are cached per settings value and context fingerprint (the search is a
pure function of both), so the oracle policy, the evaluation's ``oracle_reward``,
``random_reward`` and the normalized score share one search per context.

``oracle-without-probes`` searches the same tree scored by the reward without its
probe term and follows that chain: under ``grounded``, its distance to ``oracle`` is
what knowing the probes (the strings the rest of a session uses) is worth, and what
no deployed policy, which cannot know them, can earn by search alone.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Iterator
from dataclasses import dataclass

from ..episode import EpisodeSettings, OverflowEpisode
from ..errors import PolicyError
from ..model import ContextState
from ..reward import RewardWeights, compute_reward
from .baselines import candidate_actions
from .registry import Policy, register_policy


@dataclass(frozen=True)
class OracleResult:
    """The best chain on one context and what finding it cost.

    ``random_reward``: the expected final reward of the uniform random policy
    (exact, over every chain); ``nodes_expanded``: actions applied during the search
    (tree nodes below the root); ``leaves``: finished episodes scored.
    """

    reward: float
    chain: tuple[str, ...]
    random_reward: float
    nodes_expanded: int
    leaves: int


#: id(settings) -> {state fingerprint: result}; an entry goes with its settings object.
#: Keyed by identity: settings whose strategy parameters hold a list or a dict
#: (``hybrid.chain``, ``compress_ratios``) cannot be hashed.
_RESULTS: dict[int, dict[str, OracleResult]] = {}


def _results_for(settings: EpisodeSettings) -> dict[str, OracleResult]:
    cache = _RESULTS.get(id(settings))
    if cache is None:
        cache = _RESULTS[id(settings)] = {}
        weakref.finalize(settings, _RESULTS.pop, id(settings), None)
    return cache


def search(state: ContextState, settings: EpisodeSettings, *, probes: bool = True) -> OracleResult:
    """Exhaustive search over the chains of valid actions on ``state`` (cached).

    ``probes=False``: the chains are scored by the reward without its probe term
    (:meth:`~ctxsim.reward.RewardWeights.without_probes`), and the result's rewards
    are of that reward; the same search when the term is off already."""
    weights = settings.reward if probes else settings.reward.without_probes()
    cache = _results_for(settings)
    key = state.fingerprint if weights is settings.reward else f"{state.fingerprint}/without-probes"
    if key not in cache:
        cache[key] = _search(state, settings, weights)
    return cache[key]


def best_chain(state: ContextState, settings: EpisodeSettings) -> tuple[float, tuple[str, ...]]:
    """(best final reward, the chain that reaches it) on ``state``."""
    result = search(state, settings)
    return result.reward, result.chain


def chains(state: ContextState, settings: EpisodeSettings) -> Iterator[OverflowEpisode]:
    """Every chain of valid actions on ``state``, each run to its end, as finished
    episodes: depth first, children in action order (a node's finished children
    before the subtrees of its other ones). Only the untouched episode when ``state``
    already fits."""
    for episode, _ in _leaves(state, settings):
        yield episode


def _leaves(state: ContextState, settings: EpisodeSettings) -> Iterator[tuple[OverflowEpisode, float]]:
    """:func:`chains`, each finished episode with its probability under the uniform
    random policy (the product of ``1 / len(candidate_actions)`` along its chain)."""
    root = OverflowEpisode(state, settings)
    if root.done:
        yield root, 1.0
        return
    stack = [(root, 1.0)]
    while stack:
        episode, probability = stack.pop()
        actions = candidate_actions(episode)
        children = []
        for sid in actions:
            child = episode.copy()
            child.step(sid)
            if child.done:
                yield child, probability / len(actions)
            else:
                children.append((child, probability / len(actions)))
        stack.extend(reversed(children))


def _search(state: ContextState, settings: EpisodeSettings, weights: RewardWeights) -> OracleResult:
    order = {sid: i for i, sid in enumerate(settings.actions)}
    best_reward, best, best_key = -math.inf, (), ()
    leaves, prefixes, expected = 0, set(), 0.0
    for finished, probability in _leaves(state, settings):
        leaves += 1
        value = compute_reward(finished.outcome, weights)  # finished.reward when weights are the settings'
        expected += probability * value
        prefixes.update(finished.chain[:k] for k in range(1, len(finished.chain) + 1))
        key = tuple(order[sid] for sid in finished.chain)
        if value > best_reward or (value == best_reward and key < best_key):
            best_reward, best, best_key = value, finished.chain, key
    return OracleResult(best_reward, best, expected, len(prefixes), leaves)  # every node is a prefix of a leaf's chain


@register_policy("oracle")
class OraclePolicy(Policy):
    """Follows the best chain, searched at the first ``act`` of each episode."""

    def __init__(self) -> None:
        self._chain: tuple[str, ...] = ()
        self.result: OracleResult | None = None

    def reset(self, seed: int) -> None:
        self._chain, self.result = (), None

    def act(self, episode: OverflowEpisode) -> str:
        if self.result is None:
            self.result = search(episode.original, episode.settings)
            self._chain = self.result.chain
        if episode.steps_taken >= len(self._chain):
            raise PolicyError(f"oracle chain {list(self._chain)} ended before the episode did (bug)")
        return self._chain[episode.steps_taken]


@register_policy("oracle-without-probes")
class OracleWithoutProbesPolicy(OraclePolicy):
    """``oracle`` choosing its chain by the reward without the probe term
    (``search(..., probes=False)``): the best a policy can do that knows every
    strategy's result but not which strings the rest of the session uses. Its rows
    are scored by the episode's full reward like any other policy's, so on
    ``grounded`` its distance to ``oracle`` is what knowing the probes is worth.
    Under a reward without probes (``seed001``) it is ``oracle``."""

    def act(self, episode: OverflowEpisode) -> str:
        if self.result is None:
            self.result = search(episode.original, episode.settings, probes=False)
            self._chain = self.result.chain
        return super().act(episode)
