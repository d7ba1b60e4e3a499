"""Acting on a ranking without walking into a forced recovery it could avoid.

A learned policy ranks the valid actions by its network's scores and takes the
first. With a step budget (``max_steps``) that can end in a dead end: a first step
whose result no single next action brings under the target, so the episode ends in
the forced recovery (a fresh start). :func:`look_ahead` looks ahead with the policy's
own ranking: it takes the highest-ranked action that is not a recovery mode and from
which following the ranking (depth first, backtracking on failure) ends the break
under the target without any recovery; when none does, the first that is a recovery
mode or from which the ranking ends in one (a recovery the policy chooses is often
far better than a forced one: ``truncate`` keeps the recent turns). A recovery mode
the ranking puts first is taken only when no clean break is reachable. It uses
nothing the deployed policy lacks: only whether a state fits its target, which the
episode knows.

Where the P1 and pinned units alone exceed the target (:func:`keeps_over_target`), no
break that keeps them whole ends under it: there it does not search (a search tried
every continuation of every first action: 31 s of modeled steps per break on the
training split's CTF cuts) and takes the first ranked action that does not promise to
keep every P1 unit (``keeps_p1`` false: the compactions, the droppers, the recovery
modes), the others being dead ends there. That check counts tokens the state holds and
runs no strategy. On the last step of a break there (the next step decides it) it tries
those actions on copies, in the ranking's order: the first that ends under the target,
else the first recovery mode that ends the break, rather than a step the forced recovery
would follow (a failed break: on the training split's missing-colon cuts, where the
system and task messages alone exceed the limit, 10 of 50 breaks ended so).

Within the free latency: the reward charges a break's whole time once it passes its
free latency (design 001: 500 ms, then 0.1 per second of all of it), so a clean break
whose LLM call takes it to 503 ms loses 0.05 to one that stays at 450. Before the search
above, a first pass looks for a clean break that stays within that free latency: it
prices each step before its LLM calls (:meth:`~ctxsim.latency.LatencyModel.bound_ms`:
the call's input and its budget, known before the request is sent) and declines a step
that would take the break, with everything already charged, past the free latency
(only the step's work before the call, :meth:`~ctxsim.latency.LatencyModel.local_ms`,
is charged for it). A step that makes several calls (``externalize`` over several spans,
``summarize_old`` compressing P1 units in place) is priced with the calls it made, each at
its budget: a deployed agent would price each call before sending it and could stop
between them, which the simulation does not model (a step runs whole or is declined). The
first ranked action whose continuation ends clean so is taken; none: the search above
decides, as it would have. Breaks with measured latencies, or a reward without a latency
term, skip the first pass. On the default experiment's
validation split it moved 151 of 300 learned episodes (each +0.01 to +0.09 but one,
−0.12: the cheaper break dropped a probe), +0.013 [+0.010, +0.017] on the mean, and 7 of
460 on unseen training contexts, none lower (``reports/heldout_eval.md``, "After the
fourteenth look: the free latency").

Cost, and who pays it: the policy's continuation is what it would run anyway, so
when the top action finishes, the look-ahead runs the same steps the episode then
takes (strategy results are memoized per state by the episode settings); a dead end,
or a recovery mode ranked first, makes it try more: at most :data:`BUDGET` steps per
decision (``len(actions) ** (max_steps - steps_taken)`` could be far more with many
steps left). Every step it tries is charged to the episode
(:meth:`~ctxsim.episode.OverflowEpisode.charge`), so the break's latency, and the
reward's latency term, count the tried steps its chain does not take: a deployed
look-ahead runs them (with an LLM summarizer, each tried summary is a call). Charged
so, it is level with the top action on the default experiment's validation split and
unseen training contexts, and far above it on small contexts (early cuts of the real
sessions), where the top action often walks into a forced recovery
(``reports/heldout_eval.md``, "Small contexts").
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Callable

import numpy as np

from ..episode import OverflowEpisode, Step

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
    the top action. A first pass looks for such a clean break within the reward's free
    latency, declining steps whose pre-call price would pass it (module docstring). Each
    pass tries at most ``budget`` steps and decides on what it found by then; the steps
    it tried are charged to ``episode``. Where the kept units exceed the target
    (:func:`keeps_over_target`) there is no search but on the last step: the first ranked
    action that may shrink P1 units (none: the top action), on the last step the first of
    them that does not end in the forced recovery."""
    order = ranked(episode)
    if keeps_over_target(episode):
        candidates = _may_shrink_p1(episode, order)
        if episode.steps_taken < episode.settings.max_steps - 1:
            return candidates[0]
        return _first_clean(episode, candidates, lambda _: [], _Search(budget))  # the last step: no continuation
    return _first_clean(episode, order, ranked, _Search(budget))


def keeps_over_target(episode: OverflowEpisode) -> bool:
    """Whether the units the strategies keep, P1 and pinned ones, alone exceed the
    episode's target (request tokens, as the state counts them)."""
    state = episode.state
    return state.tokens_of(u for u in state.units if u.priority == 1 or u.pinned) > episode.target_tokens


def _may_shrink_p1(episode: OverflowEpisode, order: list[str]) -> list[str]:
    """The actions of ``order`` that do not promise to keep every P1 unit (``keeps_p1``),
    recovery modes included, in order; none: ``order`` itself."""
    strategy = episode.settings.strategy
    return [a for a in order if strategy(a).recovery or not strategy(a).keeps_p1] or list(order)


def _first_clean(episode: OverflowEpisode, actions: list[str], ranked: Ranking, search: _Search) -> str:
    """The first of ``actions`` that is not a recovery mode and from which ``ranked``'s
    choices end the break under the target, within the free latency if any does, else
    at any latency; else the first recovery mode (not tried: it always ends the break)
    or the first whose continuation ends in a recovery the ranking chose; else the
    first of ``actions``. The steps tried (and declined) are charged to ``episode``."""
    fallback = None
    try:
        free = _free_ms(episode)
        within = None if free is None else _clean_within(episode, actions, ranked, search, free)
        if within is not None:
            return within
        for action in actions:
            if episode.settings.strategy(action).recovery:
                fallback = fallback or action  # the ranking's own recovery, taken if no clean break is reachable
                continue
            end = _best_end(episode, action, ranked, search)
            if end == CLEAN:
                return action
            if end == RECOVERED and fallback is None:
                fallback = action
            if search.left <= 0:
                break
        return fallback or actions[0]
    finally:
        episode.charge({**search.declined, **search.tried})


def _clean_within(episode: OverflowEpisode, actions: list[str], ranked: Ranking, search: _Search,
                  free_ms: float) -> str | None:
    """The first pass: the first of ``actions`` that is not a recovery mode and from which
    ``ranked``'s choices end clean within ``free_ms``, else None. It tries at most
    ``search.left`` steps and leaves ``search`` with its budget whole for the next pass
    and with what it tried and declined."""
    left, search.free_ms = search.left, free_ms
    try:
        for action in actions:
            if episode.settings.strategy(action).recovery:
                continue
            if _best_end(episode, action, ranked, search) == CLEAN:
                return action
            if search.left <= 0:
                break
        return None
    finally:
        search.free_ms, search.left = None, left


def _free_ms(episode: OverflowEpisode) -> float | None:
    """The reward's free latency (ms) when a first pass can keep the break within it:
    modeled latencies, a latency term, and the break not past it already; else None."""
    weights = episode.settings.reward
    if episode.settings.latency.measured or weights.latency_per_second <= 0:
        return None
    return weights.latency_free_ms if episode.total_ms <= weights.latency_free_ms else None


class _Search:
    """One pass of a decision's search: the steps it may still try (``left``); the steps
    it tried, (fingerprint of the state a step ran on, action) -> the step's latency
    (ms); the steps it declined before their LLM calls -> what was done before them (ms);
    ``free_ms``: the latency the break must stay within (None: any)."""

    def __init__(self, budget: int):
        self.left = budget
        self.free_ms: float | None = None  # set by the first pass (:func:`_clean_within`)
        self.tried: dict[tuple[str, str], float] = {}
        self.declined: dict[tuple[str, str], float] = {}

    def declines(self, episode: OverflowEpisode, child: OverflowEpisode, step: Step) -> bool:
        """Whether ``step`` (run on ``episode``'s state, giving ``child``) would take the
        break past ``free_ms``, priced before its calls with all this search and the
        episode charged; if so it is recorded as declined."""
        key = (episode.state.fingerprint, step.action)
        if self.free_ms is None or key in self.tried or step.result is None:
            return False
        model = episode.settings.latency
        charged = {**child.tried, **self.declined, **self.tried}
        charged.pop(key, None)
        taken = set(child.taken)
        projected = (child.latency_ms - step.latency_ms + model.bound_ms(step.result.cost)
                     + sum(ms for k, ms in charged.items() if k not in taken))
        if projected <= self.free_ms:
            return False
        self.declined.setdefault(key, model.local_ms(step.result.cost))
        return True


def _best_end(episode: OverflowEpisode, action: str, ranked: Ranking, search: _Search) -> int:
    """The best end (:data:`CLEAN`, :data:`RECOVERED`, :data:`FORCED`) that ``action``
    then the ranking's choices reach; ``search.left`` counts the steps the search may
    still try (none left: :data:`FORCED`)."""
    if search.left <= 0:
        return FORCED
    search.left -= 1
    child = episode.copy()
    step = child.step(action)
    if search.declines(episode, child, step):
        return FORCED
    # the step's own latency: the forced recovery after a last step is not needed to know it is forced
    search.tried.setdefault((episode.state.fingerprint, action), step.latency_ms)
    if child.done:
        if child.forced_recovery:
            return FORCED
        return RECOVERED if step.result is not None and step.result.recovery else CLEAN
    best = FORCED
    for after in ranked(child):
        if search.free_ms is not None and child.settings.strategy(after).recovery:
            continue  # the first pass looks for clean breaks only
        best = max(best, _best_end(child, after, ranked, search))
        if best == CLEAN:
            break
    return best
