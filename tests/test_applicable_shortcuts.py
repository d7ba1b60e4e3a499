"""Fast ``applicable`` tests agree with the plain definitions (the strategy's full plan),
on real contexts of the shipped suite and on random cuts, limits and parameters of them."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from ctxsim.lab.contexts import build_context
from ctxsim.lab.scenarios import find_scenario
from ctxsim.strategies import StrategyContext, get_strategy

SCENARIOS = ["chat-10k", "code-heavy", "log-heavy", "tool-dupes", "mild-overflow", "prior-summaries", "transcript-humanevalfix"]


@pytest.fixture(scope="module")
def contexts():
    """Real contexts, then random variations of them: a random run of their units, a
    limit from far under to over their size."""
    rng = random.Random(0)
    real = [build_context(find_scenario(name), seed) for name in SCENARIOS for seed in range(2)]
    out = list(real)
    for state in real:
        for _ in range(6):
            start = rng.randrange(len(state.units))
            units = state.units[start:start + rng.randint(1, len(state.units))]
            cut = state.with_units(units)
            limit = max(1, int(cut.total_tokens * rng.uniform(0.1, 1.3)))
            out.append(replace(cut, limit=limit, min_limit=min(cut.min_limit, limit)))
    return out


def test_compact_keep_recent_applicable_is_its_plan(contexts):
    rng = random.Random(1)
    for state in contexts:
        for _ in range(3):
            strategy = get_strategy("compact_keep_recent", keep_recent=rng.randint(1, 12),
                                    max_summary_tokens=rng.choice((1, 20, 60, 300, 2000, 8000)))
            ctx = StrategyContext(target_tokens=state.limit)
            assert strategy.applicable(state, ctx) == bool(strategy._plan(state, ctx)[0])


def test_clear_tool_results_applicable_is_any_action(contexts):
    rng = random.Random(2)
    for state in contexts:
        for skip in (False, True):
            strategy = get_strategy("clear_tool_results", keep_recent=rng.randint(0, 8))
            ctx = StrategyContext(target_tokens=state.limit, skip_aggressive=skip)
            plain = not state.fits(ctx.target(state)) and bool(list(strategy._actions(state, ctx)))
            assert strategy.applicable(state, ctx) == plain


def test_a_mask_reads_no_more_than_it_needs(monkeypatch):
    """On a large overflowing context, compact_keep_recent answers without pricing its
    summary's floor and clear_tool_results after pricing one placeholder."""
    import ctxsim.strategies.pruning as pruning
    from ctxsim.model import ToolEnvelope

    state = build_context(find_scenario("chat-10k"), 0)
    ctx = StrategyContext(target_tokens=state.limit)
    calls = {"floor": 0, "placeholder": 0}
    floor, placeholder = pruning.summary_floor, ToolEnvelope.placeholder

    def counted_floor(*args, **kwargs):
        calls["floor"] += 1
        return floor(*args, **kwargs)

    def counted_placeholder(self, *args, **kwargs):
        calls["placeholder"] += 1
        return placeholder(self, *args, **kwargs)

    monkeypatch.setattr(pruning, "summary_floor", counted_floor)
    monkeypatch.setattr(ToolEnvelope, "placeholder", counted_placeholder)
    assert get_strategy("compact_keep_recent").applicable(state, ctx)
    assert get_strategy("clear_tool_results").applicable(state, ctx)
    assert calls == {"floor": 0, "placeholder": 1}


# ---- the shipped suite's contexts and their one-step successors --------------------------
@pytest.fixture(scope="module")
def shipped():
    """Every shipped scenario's contexts at seeds 0-2, and the result of every valid action
    of the default environment's 18 on the seed-0 ones."""
    from ctxsim.episode import EpisodeSettings
    from ctxsim.episode_config import FULL_ACTIONS
    from ctxsim.lab.scenarios import DEFAULT_SUITE, load_scenarios

    settings = EpisodeSettings.from_mapping({"actions": list(FULL_ACTIONS)})
    out = []
    for scenario in load_scenarios(DEFAULT_SUITE):
        for seed in range(3):
            state = build_context(scenario, seed)
            out.append(state)
            if seed == 0:
                out += [settings.apply(sid, state).state for sid in FULL_ACTIONS
                        if sid != "truncate" and settings.valid(sid, state)]
    return out


def _plain_pointer_saves(state, span, summary_tokens):
    """ladder.pointer_saves as first written: the pointer skeleton as a unit, tokenized."""
    from ctxsim.model import ContextUnit
    from ctxsim.strategies.ladder import _pointer_text, artifact_id, rehydrate_hint

    skeleton = _pointer_text(artifact_id(span), "", rehydrate_hint(span))
    return state.unit_cost(ContextUnit(id="bound", type="placeholder", content=skeleton)) + summary_tokens < state.tokens_of(span)


def _plain_purged(strategy, state):
    """purge_errors' units to purge as first written: every purged unit built and tokenized."""
    import dataclasses

    from ctxsim.strategies.pruning import error_text

    if not state.units:
        return []
    newest = max(u.turn for u in state.units)
    out = []
    for u in strategy.tool_units(state):
        if u.pinned or u.tool.outcome != "failure" or newest - u.turn < strategy.params.after_turns:
            continue
        envelope = dataclasses.replace(u.tool, error_message=error_text(u))
        if u.with_content(envelope.placeholder(), tool=envelope).token_count < u.token_count:
            out.append(u)
    return out


def _plain_superseded(strategy, state):
    """supersede_writes' removed writes as first written: every call's target read."""
    from ctxsim.strategies.pruning import call_target

    writes, reads = set(strategy.params.write_tools), set(strategy.params.read_tools)
    read_later, superseded = set(), []
    for u in reversed(strategy.tool_units(state)):
        target = call_target(u.tool)
        if target is None:
            continue
        if u.tool.tool_name in reads and u.tool.outcome != "failure":
            read_later.add(target)
        elif u.tool.tool_name in writes and target in read_later and not u.pinned:
            superseded.append(u)
    return superseded[::-1]


def test_shortcuts_agree_with_the_plain_definitions_on_the_shipped_suite(shipped, contexts):
    from ctxsim.strategies.base import is_protected

    rng = random.Random(3)
    for state in shipped + contexts:
        for target in (state.limit, max(1, state.total_tokens // 2), state.total_tokens):
            for skip in (False, True):
                ctx = StrategyContext(target_tokens=target, skip_aggressive=skip)
                over = not state.fits(ctx.target(state))
                ext = get_strategy("externalize", preserve_recent=rng.randint(0, 5),
                                   threshold_tokens=rng.choice((50, 300, 1000)), min_span_tokens=rng.choice((100, 1000)))
                spans = ext.spans(state)
                assert ext.applicable(state, ctx) == (not skip and over and bool(spans))
                for span in ext._candidates(state):
                    assert (span in spans) == _plain_pointer_saves(state, span, ext.params.summary_tokens)
                drop = get_strategy("drop", preserve_recent=rng.randint(0, 5), drop_p1=rng.random() < 0.5)
                assert drop.applicable(state, ctx) == (not skip and over and bool(drop._order(state)))
            for sid in ("remove_oldest", "remove_low_priority", "selective"):
                ctx = StrategyContext(target_tokens=target)
                plain = state.total_tokens > target and any(not is_protected(u, keep_rules=True) for u in state.units)
                assert get_strategy(sid).applicable(state, ctx) == plain
        purge = get_strategy("purge_errors", after_turns=rng.randint(0, 6))
        assert purge.select(state) == _plain_purged(purge, state)
        assert purge.applicable(state) == bool(_plain_purged(purge, state))
        supersede = get_strategy("supersede_writes")
        assert supersede._removed(state) == _plain_superseded(supersede, state)


def test_shell_calls_are_parsed_only_when_they_can_name_a_file_command(shipped):
    from ctxsim.strategies.pruning import _call_fields, _shell_file_command
    from ctxsim.strategies.shell import file_command

    calls = {u.tool.arguments for state in shipped for u in state.units if u.tool is not None}
    calls |= {'{"command": "\\u0063at a.py"}', '{"command": "\\u006el -ba b.py"}', '{"command": "ls"}', "not json"}
    found = 0
    for arguments in calls:
        command = _call_fields(arguments)[1]
        plain = file_command(command) if command is not None else None
        assert _shell_file_command(arguments) == plain
        found += plain is not None
    assert found >= 3  # the escaped ones and the suite's own


def test_fewer_tokens_is_the_token_comparison():
    from ctxsim.strategies.common import fewer_tokens
    from ctxsim.tokens import count_tokens

    texts = ["", "a", "hello world", "naïve café ☕", "\ud800 lone", "x" * 500, "日本語のテキスト" * 20, "[read_file: success]"]
    for text in texts:
        for tokens in {0, 1, count_tokens(text), count_tokens(text) + 1, len(text), len(text) + 1}:
            assert fewer_tokens(text, tokens) == (count_tokens(text) < tokens), (text, tokens)


def test_drop_and_the_window_removals_read_no_rule_when_a_unit_that_cannot_state_one_is_free(monkeypatch):
    from ctxsim.strategies import base

    state = build_context(find_scenario("chat-10k"), 0)
    read: list[str] = []
    holds = base.holds_user_rule
    monkeypatch.setattr(base, "holds_user_rule", lambda unit: read.append(unit.id) or holds(unit))
    ctx = StrategyContext(target_tokens=state.limit)
    for sid in ("drop", "remove_oldest", "remove_low_priority", "selective"):
        assert get_strategy(sid).applicable(state, ctx)
    assert read == []


def test_a_decision_computes_each_pruning_selection_and_the_observation_once(monkeypatch):
    from ctxsim.episode import EpisodeSettings
    from ctxsim.episode_config import FULL_ACTIONS
    from ctxsim.observe import ObservationConfig, observe
    from ctxsim.strategies import pruning

    calls: list[str] = []
    for cls in (pruning.DedupeToolResults, pruning.SupersedeWrites):
        plain = cls._select
        monkeypatch.setattr(cls, "_select", lambda self, state, plain=plain: calls.append(self.id) or plain(self, state))
    settings = EpisodeSettings.from_mapping({"actions": list(FULL_ACTIONS)})
    config = ObservationConfig.of(settings)
    state = build_context(find_scenario("tool-dupes"), 0)
    settings.mask(state)
    first = observe(state, config)
    first[:] = -5  # a new array each time: the caller may change it
    again = observe(state, config)
    assert sorted(calls) == ["dedupe_tool_results", "supersede_writes"]
    assert (again != first).all() and (again == observe(state.with_units(state.units), config)).all()


def test_validity_memoized_on_the_state_object_agrees_and_costs_no_fingerprint(shipped):
    from ctxsim.episode import EpisodeSettings
    from ctxsim.episode_config import FULL_ACTIONS

    settings = EpisodeSettings.from_mapping({"actions": list(FULL_ACTIONS)})
    other = EpisodeSettings.from_mapping({"actions": list(FULL_ACTIONS), "target": "warning"})
    for state in shipped[::7]:
        fresh = state.with_units(state.units)  # an equal state object, nothing computed on it yet
        plain = [settings.valid(sid, state) for sid in FULL_ACTIONS if sid != "hybrid"]
        assert [settings.valid(sid, fresh, by_fingerprint=False) for sid in FULL_ACTIONS if sid != "hybrid"] == plain
        assert "fingerprint" not in fresh.__dict__  # hybrid's steps go through the fingerprint memo
        assert [other.valid(sid, fresh, by_fingerprint=False) for sid in FULL_ACTIONS] == [other.valid(sid, state) for sid in FULL_ACTIONS]
