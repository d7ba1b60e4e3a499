"""Acting on a ranking while looking ahead for a forced recovery, and paying for what
the search tries (ctxsim.policies.lookahead, OverflowEpisode.charge)."""

from __future__ import annotations

import numpy as np
import pytest

from ctxsim.episode import EpisodeSettings, OverflowEpisode
from ctxsim.errors import RecoveryError
from ctxsim.lab.contexts import build_context
from ctxsim.policies import Policy, run_episode
from ctxsim.policies.lookahead import look_ahead, ranked_actions
from ctxsim.reward import RewardWeights

#: strategies that often leave a context over its target, strategies that cut until it
#: fits, and the recovery mode
ACTIONS = ("dedupe_tool_results", "purge_errors", "prioritize_recent", "discard_low_rel", "remove_oldest",
           "remove_low_priority", "fresh_start")
#: a reward without a latency term: the look-ahead runs no first pass within the free latency
NO_LATENCY_TERM = RewardWeights(latency_per_second=0.0)
#: only strategies that stop short (no remove_*, truncate or summary): two steps of them
#: often cannot fit, and which first step can depends on the context
WEAK = ("dedupe_tool_results", "purge_errors", "discard_low_rel", "prioritize_recent", "fresh_start")


@pytest.fixture(scope="module")
def contexts(scenario_suite):
    names = ("local-14b-floor", "mild-overflow", "pinned-instructions", "tool-dupes", "gpt4-6000", "fragmented",
             "log-heavy", "plan-heavy", "severe-overflow", "transcript-marshmallow")
    by_name = {s.name: s for s in scenario_suite}
    return [build_context(by_name[name], seed) for name in names for seed in (0, 1)]


def preferring(order: tuple[str, ...]):
    """A ranking: the valid actions in the order ``order`` gives them."""
    return lambda episode: sorted(episode.valid_actions(), key=order.index)


def ends_clean(episode: OverflowEpisode) -> bool:
    """Over and under the target, with no recovery chosen or forced."""
    return episode.done and not episode.forced_recovery and episode.chain[-1] != "fresh_start"


def test_ranked_actions_sorts_the_valid_ones_and_keeps_the_order_on_ties():
    actions = ("a", "b", "c", "d")
    assert ranked_actions(actions, np.array([True, True, False, True]), np.array([0.5, 2.0, 9.0, 0.5])) == ["b", "a", "d"]
    assert ranked_actions(actions, np.array([False, False, False, True]), np.zeros(4)) == ["d"]


def test_one_step_left_it_skips_the_actions_that_stay_over_the_target(contexts):
    settings = EpisodeSettings(actions=ACTIONS, max_steps=1)
    checked = 0
    for state in contexts:
        episode = OverflowEpisode(state, settings)
        if episode.done:
            continue
        clean = {}
        for action in episode.valid_actions():
            child = episode.copy()
            child.step(action)
            clean[action] = ends_clean(child)
        stuck = [a for a, ok in clean.items() if not ok and a != "fresh_start"]
        fitting = [a for a, ok in clean.items() if ok]
        if not stuck or not fitting:
            continue
        ranking = tuple(stuck) + ("fresh_start",) + tuple(fitting)
        assert look_ahead(episode, preferring(ranking)) == fitting[0]
        plain = episode.copy()
        plain.step(stuck[0])
        assert plain.forced_recovery  # what acting on the top action alone would do
        checked += 1
    assert checked >= 3


def best_end(episode: OverflowEpisode, action: str) -> int:
    """Brute force over every continuation: 2 some ends clean, 1 some ends in a chosen
    recovery, 0 every one is forced to recover."""
    child = episode.copy()
    step = child.step(action)
    if child.done:
        return 0 if child.forced_recovery else 1 if step.result.recovery else 2
    return max(best_end(child, after) for after in child.valid_actions())


def test_two_steps_left_it_takes_the_first_action_some_continuation_finishes(contexts):
    settings = EpisodeSettings(actions=WEAK, max_steps=2)
    ranking = preferring(WEAK)
    avoided = 0
    for state in contexts:
        episode = OverflowEpisode(state, settings)
        if episode.done:
            continue
        order = ranking(episode)
        ends = [best_end(episode, a) for a in order]
        expected = order[ends.index(2)] if 2 in ends else order[ends.index(1)] if 1 in ends else order[0]
        assert look_ahead(episode, ranking) == expected
        avoided += expected != order[0]
    assert avoided >= 2  # the top action was a dead end there


class _LookingAhead(Policy):
    name = "test:looking-ahead"

    def __init__(self, ranking):
        self.ranking = ranking

    def act(self, episode):
        return look_ahead(episode, self.ranking)


class _Top(_LookingAhead):
    def act(self, episode):
        return self.ranking(episode)[0]


def test_a_policy_acting_so_ends_cleanly_whenever_its_ranking_can(contexts):
    settings = EpisodeSettings(actions=WEAK, max_steps=2)
    ranking = preferring(WEAK)
    rescued = 0
    for state in contexts:
        ahead = run_episode(_LookingAhead(ranking), state, settings, 0)
        top = run_episode(_Top(ranking), state, settings, 0)
        start = OverflowEpisode(state, settings)
        can = start.done or max(best_end(start, a) for a in start.valid_actions())
        assert ends_clean(ahead) == (can == 2 or start.done)
        assert not ahead.forced_recovery  # fresh_start is always there to choose instead
        rescued += ends_clean(ahead) and not ends_clean(top)
    assert rescued >= 2


def test_a_recovery_the_ranking_puts_first_is_taken_only_when_no_clean_break_is_reachable(contexts):
    """A recovery mode ranked first gives way to the first other action from which the
    ranking ends clean (validation: the runs put ``truncate`` first where one
    ``summarize`` fits); with none, the recovery is taken."""
    for actions in (ACTIONS, WEAK):
        settings = EpisodeSettings(actions=actions, max_steps=2)
        ranking = preferring(("fresh_start",) + actions[:-1])
        taken, kept = 0, 0
        for state in contexts:
            episode = OverflowEpisode(state, settings)
            if episode.done:
                continue
            cleans = [a for a in ranking(episode) if a != "fresh_start" and best_end(episode, a) == 2]
            chosen = look_ahead(episode, ranking)
            assert chosen == (cleans[0] if cleans else "fresh_start")
            taken += chosen == "fresh_start"
            kept += chosen != "fresh_start"
        assert kept > 0  # the clean break wins where there is one
    assert taken > 0  # and the recovery stays where there is none (WEAK: short strategies only)


def test_with_no_clean_end_it_prefers_a_chosen_recovery_to_a_forced_one(contexts):
    order = ("purge_errors", "dedupe_tool_results", "fresh_start")
    recovering = EpisodeSettings(actions=order, max_steps=1)
    stuck = EpisodeSettings(actions=order[:2], max_steps=1)  # no recovery mode among the actions
    checked = 0
    for state in contexts:
        episode = OverflowEpisode(state, recovering)
        if episode.done or any(best_end(episode, a) == 2 for a in episode.valid_actions()):
            continue
        assert look_ahead(episode, preferring(order)) == "fresh_start"
        without = OverflowEpisode(state, stuck)
        if without.valid_actions():
            assert look_ahead(without, preferring(order)) == preferring(order)(without)[0]
        checked += 1
    assert checked >= 3


def test_the_search_stops_at_its_budget_and_takes_the_top_action(contexts):
    settings = EpisodeSettings(actions=WEAK, max_steps=2)
    ranking = preferring(WEAK)
    for state in contexts:
        episode = OverflowEpisode(state, settings)
        if episode.done:
            continue
        order = ranking(episode)
        if look_ahead(episode, ranking) != order[0]:  # a dead end came first: one try cannot get past it
            assert look_ahead(episode, ranking, budget=1) == order[0]
            return
    pytest.fail("no context put a dead end first")


def tried_steps(episode: OverflowEpisode, action: str, ranking) -> dict[tuple[str, str], float]:
    """Brute force of what the look-ahead runs from ``episode`` for ``action``: the step,
    then (not finished) the ranking's actions depth first until one path ends clean."""
    out: dict[tuple[str, str], float] = {}

    def walk(ep: OverflowEpisode, a: str) -> bool:
        child = ep.copy()
        step = child.step(a)
        out.setdefault((ep.state.fingerprint, a), step.latency_ms)
        if child.done:
            return not child.forced_recovery and not (step.result is not None and step.result.recovery)
        return any(walk(child, after) for after in ranking(child))

    walk(episode, action)
    return out


def test_the_steps_it_tries_and_does_not_take_are_charged_to_the_break_once(contexts):
    """A dead end ranked first: the break's latency is its chain's plus every distinct
    step the search tried that the chain did not take, and the reward sees it. (A reward
    without a latency term: no first pass within the free latency, tested below.)"""
    settings = EpisodeSettings(actions=WEAK, max_steps=2, reward=NO_LATENCY_TERM)
    ranking = preferring(WEAK)
    charged = 0
    for state in contexts:
        episode = OverflowEpisode(state, settings)
        if episode.done:
            continue
        order = ranking(episode)
        chosen = look_ahead(episode, ranking)
        if chosen == order[0]:
            continue
        tried: dict[tuple[str, str], float] = {}
        for action in order[: order.index(chosen) + 1]:
            tried.update({k: v for k, v in tried_steps(episode, action, ranking).items() if k not in tried})
        ahead = run_episode(_LookingAhead(ranking), state, settings, 0)
        taken = {(s.fingerprint, a) for s, a in zip(_states(ahead), ahead.chain)}
        extra = sum(ms for step, ms in tried.items() if step not in taken)
        assert extra > 0
        assert ahead.search_ms == pytest.approx(extra)
        assert ahead.total_ms == pytest.approx(ahead.latency_ms + extra)
        assert ahead.outcome.time_ms == pytest.approx(ahead.total_ms)
        # the same chain played without a search pays its own steps only
        plain = OverflowEpisode(state, settings)
        for action in ahead.chain:
            plain.step(action)
        assert plain.search_ms == 0 and plain.total_ms == ahead.latency_ms
        charged += 1
    assert charged >= 2


def test_a_search_whose_first_try_is_taken_adds_nothing(contexts):
    settings = EpisodeSettings(actions=ACTIONS, max_steps=2)
    ranking = preferring(("remove_oldest",) + ACTIONS)  # cuts until it fits: the first try ends clean
    for state in contexts[:6]:
        ahead = run_episode(_LookingAhead(ranking), state, settings, 0)
        top = run_episode(_Top(ranking), state, settings, 0)
        assert ahead.chain == top.chain
        assert ahead.search_ms == 0 and ahead.total_ms == top.total_ms == top.latency_ms
        assert ahead.reward == top.reward


def test_a_finished_episode_cannot_be_charged(contexts):
    episode = OverflowEpisode(contexts[0], EpisodeSettings(actions=ACTIONS, max_steps=2))
    while not episode.done:
        episode.step("remove_oldest")

    with pytest.raises(RecoveryError, match="over"):
        episode.charge({("x", "remove_oldest"): 1.0})


def _states(episode: OverflowEpisode):
    """The states the episode's chain stepped from, in order (replayed)."""
    replay = OverflowEpisode(episode.original, episode.settings)
    out = []
    for action in episode.chain:
        out.append(replay.state)
        replay.step(action)
    return out


def test_it_does_not_search_where_the_kept_units_alone_exceed_the_target(scenario_suite, repo_root):
    """Where the P1 and pinned units alone are over the target (the CTF session's cuts:
    its system prompt and task), the look-ahead tries nothing and takes the first ranked
    action that does not promise to keep every P1 unit (the others are dead ends there);
    where they fit, a dead end still sends it searching."""
    from ctxsim.lab.scenarios import load_scenarios
    from ctxsim.policies.lookahead import keeps_over_target

    family = {s.name: s for s in load_scenarios(repo_root / "data" / "families" / "transcripts.yaml")}[
        "transcript-ctf-katy-cut-family"]
    settings = EpisodeSettings(actions=WEAK, max_steps=2)
    over = [OverflowEpisode(build_context(family, seed), settings) for seed in range(4)]
    over = [e for e in over if not e.done]
    assert over and all(keeps_over_target(e) for e in over)
    passed_over = kept_only = 0
    for episode in over:
        kept = sum(episode.state.unit_cost(u) for u in episode.state.units if u.priority == 1 or u.pinned)
        assert kept > episode.target_tokens
        keeping_first = ("purge_errors", "discard_low_rel", "prioritize_recent", "dedupe_tool_results", "fresh_start")
        assert [episode.settings.strategy(a).keeps_p1 for a in keeping_first] == [True, True, True, False, False]
        ranking = preferring(keeping_first)
        shrinking = next(a for a in ranking(episode) if not episode.settings.strategy(a).keeps_p1)
        assert look_ahead(episode, ranking) == shrinking
        passed_over += ranking(episode)[0] != shrinking
        only_keeping = lambda ep: [a for a in ranking(ep) if ep.settings.strategy(a).keeps_p1]  # noqa: E731
        if only_keeping(episode):  # none may shrink P1: the top action
            kept_only += 1
            assert look_ahead(episode, only_keeping) == only_keeping(episode)[0]
        assert episode.tried == {} and episode.search_ms == 0.0  # nothing run, nothing charged
    assert passed_over and kept_only  # the ranking's top action passed over; a ranking with nothing else kept
    searched = 0
    for state in (build_context(s, seed) for s in scenario_suite if s.name == "mild-overflow" for seed in range(4)):
        episode = OverflowEpisode(state, settings)
        if episode.done or keeps_over_target(episode):
            continue
        look_ahead(episode, preferring(WEAK))
        searched += bool(episode.tried)
    assert searched  # below the target the search runs as before


def test_on_the_last_step_where_the_kept_units_exceed_the_target_it_passes_over_a_forced_end(repo_root):
    """Where the P1 and pinned units alone exceed the target, the last step of a break
    tries the ranked actions that may shrink P1 units on copies: the first that ends
    under the target, else the first recovery it chooses, rather than a step the forced
    recovery would follow (a failed break). The steps tried are charged. The missing-colon
    cuts after `hybrid`: `selective` and `remove_oldest` cannot fit, `truncate` can."""
    from ctxsim.lab.scenarios import load_scenarios
    from ctxsim.policies.lookahead import keeps_over_target

    family = {s.name: s for s in load_scenarios(repo_root / "data" / "families" / "transcripts.yaml")}[
        "transcript-missing-colon-cut-family"]
    settings = EpisodeSettings(actions=("hybrid", "selective", "remove_oldest", "truncate", "fresh_start"), max_steps=2)
    order = ("selective", "remove_oldest", "truncate", "fresh_start", "hybrid")
    ranking = preferring(order)
    checked = passed_over = 0
    for seed in range(200, 212):
        episode = OverflowEpisode(build_context(family, seed), settings)
        if episode.done:
            continue
        episode.step("hybrid")
        if episode.done or not keeps_over_target(episode):
            continue
        ends = {}
        for action in ranking(episode):
            copy = episode.copy()
            copy.step(action)
            ends[action] = "forced" if copy.forced_recovery else ("recovered" if action in ("truncate", "fresh_start") else "clean")
        clean = [a for a in ranking(episode) if ends[a] == "clean"]
        recovered = [a for a in ranking(episode) if ends[a] == "recovered"]
        expected = (clean or recovered)[0]
        chosen = look_ahead(episode, ranking)
        assert chosen == expected and ends[chosen] != "forced"
        assert {action for _, action in episode.tried} <= set(ranking(episode)) and episode.tried
        passed_over += ranking(episode)[0] != chosen
        checked += 1
        episode.step(chosen)
        assert episode.done and not episode.forced_recovery and episode.outcome.success
        assert episode.search_ms > 0  # what it tried and did not take is in the break's latency
    assert checked >= 3 and passed_over >= 3


# ---- within the free latency -----------------------------------------------------

#: an LLM summary first, then strategies that cut without a call
PRICED = ("summarize_old", "remove_oldest", "prioritize_recent", "remove_low_priority", "fresh_start")


def _free(ms: float) -> RewardWeights:
    return RewardWeights(latency_free_ms=ms)


def test_it_declines_a_call_that_would_pass_the_free_latency_when_a_cheaper_break_ends_clean(contexts):
    """The top action's LLM call, priced before it is sent, would take the break past the
    free latency, and the next ranked action ends clean within it: that one is taken, and
    the declined step is charged only what it did before its call."""
    ranking = preferring(PRICED)
    checked = 0
    for state in contexts:
        probe = OverflowEpisode(state, EpisodeSettings(actions=PRICED, max_steps=1))
        if probe.done or "summarize_old" not in probe.valid_actions():
            continue
        top = probe.copy()
        step = top.step("summarize_old")
        if not ends_clean(top) or step.result.cost.llm_calls == 0:
            continue
        model = probe.settings.latency
        price, local = model.bound_ms(step.result.cost), model.local_ms(step.result.cost)
        free = price - 0.001  # the call passes it, whatever the next action costs
        episode = OverflowEpisode(state, EpisodeSettings(actions=PRICED, max_steps=1, reward=_free(free)))
        fallback = next((a for a in ranking(episode)[1:] if a != "fresh_start"), None)
        if fallback is None:
            continue
        cheap = episode.copy()
        cheap.step(fallback)
        if not ends_clean(cheap) or local + cheap.latency_ms > free:
            continue
        assert look_ahead(episode, ranking) == fallback
        played = run_episode(_LookingAhead(ranking), state, episode.settings, 0)
        assert played.chain == (fallback,)
        assert played.search_ms == pytest.approx(local)  # the call was not sent
        assert played.total_ms <= free
        # without a latency term the same ranking takes the call
        plain = EpisodeSettings(actions=PRICED, max_steps=1, reward=NO_LATENCY_TERM)
        assert look_ahead(OverflowEpisode(state, plain), ranking) == "summarize_old"
        checked += 1
    assert checked >= 3


def test_with_no_clean_break_within_the_free_latency_the_search_decides_as_without_it(contexts):
    """A free latency nothing fits in (0 ms): the first pass declines every step, and the
    choice is the one a reward without a latency term gets."""
    ranking = preferring(PRICED)
    compared = 0
    for state in contexts:
        tight = OverflowEpisode(state, EpisodeSettings(actions=PRICED, max_steps=2, reward=_free(0.0)))
        if tight.done:
            continue
        plain = OverflowEpisode(state, EpisodeSettings(actions=PRICED, max_steps=2,
                                                       reward=NO_LATENCY_TERM))
        assert look_ahead(tight, ranking) == look_ahead(plain, ranking)
        assert tight.search_ms >= plain.search_ms  # the declined steps' work before their calls too
        compared += 1
    assert compared >= 5


def test_a_break_within_the_free_latency_is_found_by_the_first_pass_at_no_extra_cost(contexts):
    """Where the ranking's own break stays within the free latency, the first pass finds
    the same action and charges the same steps."""
    ranking = preferring(("remove_oldest",) + PRICED)
    for state in contexts[:6]:
        settings = EpisodeSettings(actions=PRICED, max_steps=2)
        played = run_episode(_LookingAhead(ranking), state, settings, 0)
        top = run_episode(_Top(ranking), state, settings, 0)
        assert played.chain == top.chain and played.total_ms == top.total_ms


def test_the_first_pass_runs_only_where_latency_is_modeled_charged_and_not_yet_past(contexts):
    """Measured (wall-clock) latencies cannot be priced before a step; a reward without a
    latency term has nothing to keep within; a break already past the free latency pays
    for all of its time whatever it does next."""
    from ctxsim.latency import LatencyModel
    from ctxsim.policies.lookahead import _free_ms

    state = next(s for s in contexts if not OverflowEpisode(s, EpisodeSettings(actions=PRICED)).done)
    assert _free_ms(OverflowEpisode(state, EpisodeSettings(actions=PRICED))) == 500.0
    assert _free_ms(OverflowEpisode(state, EpisodeSettings(actions=PRICED, reward=_free(120.0)))) == 120.0
    measured = EpisodeSettings(actions=PRICED, latency=LatencyModel(measured=True))
    assert _free_ms(OverflowEpisode(state, measured)) is None
    no_term = EpisodeSettings(actions=PRICED, reward=NO_LATENCY_TERM)
    assert _free_ms(OverflowEpisode(state, no_term)) is None
    settings = EpisodeSettings(actions=WEAK, max_steps=2, reward=_free(0.001))
    past = []
    for other in contexts:
        for action in WEAK[:-1]:
            episode = OverflowEpisode(other, settings)
            if not episode.done and action in episode.valid_actions():
                episode.step(action)
                if not episode.done:
                    past.append(episode)
    assert len(past) >= 3
    assert all(e.total_ms > 0.001 and _free_ms(e) is None for e in past)
