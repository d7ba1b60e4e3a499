"""Acting on a ranking without walking into a forced recovery it could avoid.

A learned policy ranks the valid actions by its network's scores and takes the
first. With a step budget (``max_steps``) that can end in a dead end: a first step
whose result no single next action brings under the target, so the episode ends in
the forced recovery (a fresh start) that costs far more than any choice between two
strategies. :func:`look_ahead` looks ahead with the policy's own ranking: it takes
the highest-ranked action that is not a recovery mode and from which following the
ranking (depth first, backtracking on failure) ends the break under the target
without any recovery; when none does, the first that is a recovery mode or from
which the ranking ends in one (a recovery the policy chooses is often far better than
a forced one: ``truncate`` keeps the recent turns). A recovery mode the ranking puts
first is taken only when no clean break is reachable: on the validation split the
runs put ``truncate`` first on HumanEvalFix cuts that one ``summarize`` fits. It
uses nothing the deployed policy lacks: only whether a state fits its target, which
the episode knows.

Among clean breaks it checks the ranking against what it can score itself: the first
:data:`COMPARE` actions from which the ranking ends clean are compared by the reward
of their finished breaks without its probe term (:meth:`~ctxsim.reward.RewardWeights.without_probes`:
the fit, coherence against the original, tokens cut, P1 units, latency, all computed
from the context; the probes are the strings the rest of a session uses, which a
deployed policy cannot see). The ranking's first is kept unless another scores more
than :data:`MARGIN` above it. The margin keeps what the ranking learned of the probes
(its teacher saw them): a lost probe of about fifteen costs 0.1 under ``grounded``, so
only a gain larger than that overrules it. Chosen on the validation split and on
training contexts the runs never saw (``reports/heldout_eval.md``): the runs there put
``externalize`` or ``remove_oldest`` then ``hybrid`` first where one ``summarize`` or a
light cut keeps far more of the context.

Cost: the policy's continuation is what it would run anyway (strategy results are
memoized per state by the episode settings); the comparison runs the continuations of
up to :data:`COMPARE` first actions and scores their ends, and a dead end, or a
recovery mode ranked first, makes it try more: at most :data:`BUDGET` steps per
decision (``len(actions) ** (max_steps - steps_taken)`` could be far more with many
steps left).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Callable

import numpy as np

from ..episode import OverflowEpisode
from ..reward import compute_reward

#: steps one decision may try (a dead end among 19 actions with two steps left takes
#: at most 19 + 19 x 19 = 380; deeper searches stop here and take the top action)
BUDGET = 512

#: clean breaks compared by the reward without probes: the ranking's first this many
COMPARE = 3
#: how much more (reward without probes) another clean break must score to overrule the ranking's first
MARGIN = 0.1

#: how a break ends, worst first: the step budget forced a recovery; a recovery mode
#: the policy chose; under the target with no recovery
FORCED, RECOVERED, CLEAN = 0, 1, 2

#: the valid actions of an episode, best first
Ranking = Callable[[OverflowEpisode], list[str]]


def ranked_actions(actions: Sequence[str], mask: np.ndarray, scores: np.ndarray) -> list[str]:
    """The actions ``mask`` allows, highest score first; ties keep the actions' order
    (so the first is the masked argmax)."""
    valid = np.flatnonzero(mask)
    order = valid[np.argsort(-np.asarray(scores, dtype=np.float64)[valid], kind="stable")]
    return [actions[i] for i in order]


def look_ahead(episode: OverflowEpisode, ranked: Ranking, budget: int = BUDGET, *, compare: int = COMPARE,
               margin: float = MARGIN) -> str:
    """The action to take: among the first ``compare`` actions of ``ranked(episode)``
    that are not recovery modes and from which the ranking's choices (depth first,
    backtracking) end under the target with no recovery, the first, unless another's
    finished break scores more than ``margin`` above it by the reward without probes
    (:func:`verified`); with none, the first that is a recovery mode or whose
    continuation ends in a recovery the ranking chose rather than a forced one; else
    the top action. The search tries at most ``budget`` steps and decides on what it
    found by then."""
    order = ranked(episode)
    left = [budget]
    fallback = None
    clean: list[tuple[str, OverflowEpisode]] = []
    for action in order:
        if episode.settings.strategy(action).recovery:
            fallback = fallback or action  # the ranking's own recovery, taken if no clean break is reachable
            continue
        end, finished = _best_end(episode, action, ranked, left)
        if finished is not None:
            clean.append((action, finished))
            if len(clean) >= compare:
                break
        elif end == RECOVERED and fallback is None:
            fallback = action
        if left[0] <= 0:
            break
    if clean:
        return verified(clean, margin)
    return fallback or order[0]


def verified(clean: Sequence[tuple[str, OverflowEpisode]], margin: float = MARGIN) -> str:
    """Of clean breaks (first action, finished episode) in the ranking's order, the
    first action, unless another's break scores more than ``margin`` above it by the
    episode's reward without its probe term; then the best (the earlier on ties)."""
    weights = clean[0][1].settings.reward.without_probes()
    values = [compute_reward(finished.outcome, weights) for _, finished in clean]
    best = max(range(len(values)), key=lambda i: (values[i], -i))
    return clean[best][0] if values[best] > values[0] + margin else clean[0][0]


def _best_end(episode: OverflowEpisode, action: str, ranked: Ranking, left: list[int]) -> tuple[int, OverflowEpisode | None]:
    """The best end (:data:`CLEAN`, :data:`RECOVERED`, :data:`FORCED`) that ``action``
    then the ranking's choices reach, and the finished episode of the first clean
    path (None when none is clean); ``left[0]`` counts the steps the search may still
    try (none left: :data:`FORCED`)."""
    if left[0] <= 0:
        return FORCED, None
    left[0] -= 1
    child = episode.copy()
    step = child.step(action)
    if child.done:
        if child.forced_recovery:
            return FORCED, None
        if step.result is not None and step.result.recovery:
            return RECOVERED, None
        return CLEAN, child
    best = FORCED
    for after in ranked(child):
        end, finished = _best_end(child, after, ranked, left)
        if finished is not None:
            return CLEAN, finished
        best = max(best, end)
    return best, None
