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

Cost: the policy's continuation is what it would run anyway, so when the top action
finishes, the look-ahead runs the same steps the episode then takes (strategy
results are memoized per state by the episode settings); only a dead end, or a
recovery mode ranked first, makes it try more: at most :data:`BUDGET` steps per decision (``len(actions) ** (max_steps -
steps_taken)`` could be far more with many steps left).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Callable

import numpy as np

from ..episode import OverflowEpisode

#: steps one decision may try (a dead end among 19 actions with two steps left takes
#: at most 19 + 19 x 19 = 380; deeper searches stop here and take the top action)
BUDGET = 512

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


def look_ahead(episode: OverflowEpisode, ranked: Ranking, budget: int = BUDGET) -> str:
    """The action to take: the first of ``ranked(episode)`` that is not a recovery mode
    and from which the ranking's choices (depth first, backtracking) end under the
    target with no recovery; else the first that is a recovery mode or whose
    continuation ends in a recovery the ranking chose rather than a forced one; else
    the top action. The search tries at most ``budget`` steps and decides on what it
    found by then."""
    order = ranked(episode)
    left = [budget]
    fallback = None
    for action in order:
        if episode.settings.strategy(action).recovery:
            fallback = fallback or action  # the ranking's own recovery, taken if no clean break is reachable
            continue
        end = _best_end(episode, action, ranked, left)
        if end == CLEAN:
            return action
        if end == RECOVERED and fallback is None:
            fallback = action
        if left[0] <= 0:
            break
    return fallback or order[0]


def _best_end(episode: OverflowEpisode, action: str, ranked: Ranking, left: list[int]) -> int:
    """The best end (:data:`CLEAN`, :data:`RECOVERED`, :data:`FORCED`) that ``action``
    then the ranking's choices reach; ``left[0]`` counts the steps the search may
    still try (none left: :data:`FORCED`)."""
    if left[0] <= 0:
        return FORCED
    left[0] -= 1
    child = episode.copy()
    step = child.step(action)
    if child.done:
        if child.forced_recovery:
            return FORCED
        return RECOVERED if step.result is not None and step.result.recovery else CLEAN
    best = FORCED
    for after in ranked(child):
        best = max(best, _best_end(child, after, ranked, left))
        if best == CLEAN:
            break
    return best
