"""The long-horizon parts on built conversations: probes, rehydration, prompt cache,
over-hit fresh starts, and the session that plays them (ctxsim.lab.stream)."""

from __future__ import annotations

import json

import pytest

from ctxsim.episode_config import EpisodeConfig
from ctxsim.errors import ScenarioError
from ctxsim.model import Artifact, ContextState, ContextUnit, Fact, ToolEnvelope
from ctxsim.policies import get_policy
from ctxsim.lab.stream import (
    Conversation,
    ProbeConfig,
    PromptCache,
    PromptCacheModel,
    RecoveryTriggers,
    RehydrationConfig,
    Rehydrator,
    StreamRewardWeights,
    StreamSession,
    make_probe,
    probe_question,
    schedule_probes,
    stream_settings,
)
from ctxsim.lab.stream.play import play
from ctxsim.tokens import count_tokens

VOCAB = (
    "deploy database schema migration rollback index query latency cache invoice meeting calendar "
    "travel recipe garden weather football concert novel painting lecture exam harbor violin"
).split()
BUDGET = Fact("fact-1", "$1,250", "msg-2", text="The approved budget for the export work is $1,250.")
NO_CACHE_MINIMUM = PromptCacheModel(min_prefix_tokens=0)


def prose(seed: int, tokens: int) -> str:
    """Deterministic words until ``tokens`` cl100k tokens (about)."""
    words, i = [], 0
    while count_tokens(" ".join(words)) < tokens:
        words.append(VOCAB[(seed * 7 + i * (seed % 5 + 1)) % len(VOCAB)])
        i += 1
    return " ".join(words) + "."


def msg(uid: str, turn: int, tokens: int, *, role: str = "user", priority: int = 2, content: str | None = None,
        pinned: bool = False, gap: float = 60.0) -> ContextUnit:
    return ContextUnit(id=uid, type="message", role=role, content=content or prose(turn, tokens), turn=turn,
                       timestamp=turn * gap, priority=priority, pinned=pinned)


def read(uid: str, turn: int, path: str, tokens: int, *, gap: float = 60.0) -> ContextUnit:
    envelope = ToolEnvelope("read_file", f"call-{uid}", arguments=json.dumps({"path": path}), durability="anchoring",
                            target=path, key_fields=(("path", path),))
    return ContextUnit(id=uid, type="tool_result", role="tool", content=f"File: {path}\n{prose(turn + 3, tokens)}",
                       turn=turn, timestamp=turn * gap + 1, tool=envelope)


def settings(actions=("summarize_old", "clear_tool_results", "externalize", "drop", "remove_oldest", "fresh_start")):
    return stream_settings(EpisodeConfig(actions=actions, max_steps=3, target="warning", recovery_mode="fresh_start"))


def session_of(conv: Conversation, **kw) -> StreamSession:
    kw.setdefault("cache", NO_CACHE_MINIMUM)
    return StreamSession(conv, *settings(), **kw)


def played(conv: Conversation, policy: str, **kw) -> StreamSession:
    session = session_of(conv, **kw)
    play(get_policy(policy), session, "built", 0)
    assert session.done
    return session


def fact_conversation(turns: int = 42, probe_turn: int = 40) -> Conversation:
    """A fact in a plain message at turn 2, then tool-heavy turns; probed at ``probe_turn``."""
    units = [
        (msg("sys-0", 0, 40, role="system", priority=1),),
        (msg("msg-1", 1, 30),),
        (msg("msg-2", 2, 20, content=BUDGET.text + " " + prose(2, 10)),),
    ]
    units += [(msg(f"msg-{t}", t, 12, role="assistant"), read(f"tool-{t}", t, f"src/m{t}.py", 250)) for t in range(3, turns)]
    return Conversation(turns=tuple(units), limit=4000, min_limit=500, facts=(BUDGET,),
                        probes=(make_probe(probe_turn, BUDGET),), task="Finish the export work.", scenario="built")


# ---- probes ---------------------------------------------------------------------------------
def test_probe_questions_never_hold_the_value():
    rule = Fact("rule-1", "never delete production data", "u1", kind="rule",
                text="One rule for the rest of this session: never delete production data.")
    bare = Fact("fact-9", "svc_0123456789", "u2")
    for fact in (BUDGET, rule, bare):
        question = probe_question(fact)
        assert fact.value not in question and question.startswith("Before we go on:")
    assert "approved budget for the export work" in probe_question(BUDGET)


def test_probe_schedule_respects_age_and_is_deterministic():
    facts = (Fact("f1", "AAA-1111", "a"), Fact("f2", "BBB-2222", "b"), Fact("f3", "CCC-3333", "c"))
    planted = {"f1": 1, "f2": 10, "f3": 30}
    config = ProbeConfig(turns=(5, 12, 20, 40, 90), min_age_turns=5)
    probes = schedule_probes(facts, planted, 60, config, "s/0")
    assert [p.turn for p in probes] == [12, 20, 40]  # 5: nothing old enough; 90: past the end
    assert all(planted[p.fact_id] <= p.turn - 5 for p in probes)
    assert [p.fact_id for p in probes] == ["f1", "f2", "f3"]  # the least-probed eligible fact each time
    assert probes == schedule_probes(facts, planted, 60, config, "s/0")


def test_conversation_rejects_a_probe_before_its_fact():
    conv = fact_conversation()
    with pytest.raises(ScenarioError, match="must come after"):
        Conversation(turns=conv.turns, limit=4000, min_limit=500, facts=(BUDGET,), probes=(make_probe(1, BUDGET),))


# ---- probes answered under chains that keep or lose the fact -------------------------------------
NO_OVER_HITS = RecoveryTriggers(max_over_hits=None)  # every event is the chain's own


def test_fact_planted_at_turn_2_survives_tool_clearing_and_is_answered_at_turn_40():
    session = played(fact_conversation(), "only:clear_tool_results", triggers=NO_OVER_HITS)
    assert session.counters.probes and session.counters.probes[0][0].turn == 40
    assert len(session.events) >= 2 and all(e.chain == ("clear_tool_results",) for e in session.events)
    assert session.probes_answered == session.probes_asked == 1


@pytest.mark.parametrize("policy", ["only:remove_oldest", "only:drop"])
def test_fact_is_lost_and_the_probe_unanswered_under_chains_that_drop_old_units(policy):
    session = played(fact_conversation(), policy, triggers=NO_OVER_HITS)
    assert session.events and all(e.chain == (policy[5:],) for e in session.events) and session.probes_asked == 1
    assert session.probes_answered == 0 and session.probe_share == 0.0
    assert "$1,250" not in session.state.render()


# ---- prompt cache ------------------------------------------------------------------------------
def test_prompt_cache_hits_the_unchanged_prefix_message_by_message():
    cache = PromptCache(NO_CACHE_MINIMUM)
    a, b, c = ("system", "rules"), ("user", "hello"), ("assistant", "hi")
    assert cache.call([a, b], [10, 20], 31) == 0  # cold
    assert cache.call([a, b, c], [10, 20, 5], 36) == 30
    assert cache.call([("system", "RULES"), b, c], [10, 20, 5], 36) == 0  # the first message was rewritten
    assert cache.call([("system", "RULES"), b, ("assistant", "bye")], [10, 20, 6], 37) == 30
    assert cache.cached_tokens == 60 and cache.input_tokens == 140
    assert cache.hit_rate == pytest.approx(60 / 140)
    assert cache.cost == pytest.approx((80 + 60 * 0.1) * 3.0 / 1e6)
    strict = PromptCache(PromptCacheModel(min_prefix_tokens=25))
    strict.call([a, b], [10, 20], 31)
    assert strict.call([a, ("user", "changed")], [10, 20], 31) == 0  # a 10-token prefix is under the minimum


HEAD_TURNS = 6


def cache_conversation() -> Conversation:
    """A 600-token head of plain messages, then turns with a short message and a tool result."""
    units = [(msg(f"head-{t}", t, 100, role="user" if t % 2 else "assistant"),) for t in range(HEAD_TURNS)]
    units += [(msg(f"msg-{t}", t, 10, role="assistant"), read(f"tool-{t}", t, f"src/c{t}.py", 250))
              for t in range(HEAD_TURNS, HEAD_TURNS + 16)]
    return Conversation(turns=tuple(units), limit=3000, min_limit=500, scenario="built")


def test_rewriting_the_first_unit_loses_the_cache_and_touching_only_the_tail_does_not():
    head = played(cache_conversation(), "only:remove_oldest", triggers=NO_OVER_HITS)
    tail = played(cache_conversation(), "only:clear_tool_results", triggers=NO_OVER_HITS)
    assert head.events and tail.events
    assert all(e.chain == ("clear_tool_results",) for e in tail.events)
    head_tokens = tail.state.tokens_of(u for t in cache_conversation().turns[:HEAD_TURNS] for u in t)
    # once the head is complete, every call keeps it cached when only tool results are cleared
    assert all(hit >= head_tokens for _, hit in tail.cache.history[HEAD_TURNS:])
    # removing the oldest unit rewrites the prompt's beginning: that call's cache is lost
    event_turns = {e.turn for e in head.events}
    assert all(head.cache.history[t][1] == 0 for t in event_turns)
    assert head.cache.hit_rate < tail.cache.hit_rate
    assert head.cache.cost > tail.cache.cost


# ---- rehydration --------------------------------------------------------------------------------
def artifact_state(sizes: tuple[int, ...]) -> tuple[ContextState, dict[str, ContextUnit]]:
    """A state holding one artifact per size (tokens of content), each from a read of src/a<i>.py."""
    log = {f"old-{i}": read(f"old-{i}", i, f"src/a{i}.py", 20) for i in range(len(sizes))}
    artifacts = tuple(Artifact(f"art-{i:012x}", prose(i, size), (f"old-{i}",)) for i, size in enumerate(sizes))
    state = ContextState(units=(msg("m", 0, 20),), limit=5000, min_limit=500, artifacts=artifacts)
    return state, log


def test_rehydration_respects_per_artifact_and_total_budgets_and_the_artifact_cap():
    state, log = artifact_state((500, 120, 120, 120))
    config = RehydrationConfig(reserve_tokens=300, max_tokens_per_artifact=150, max_artifacts_per_turn=3)
    rehydrator = Rehydrator(config, state.limit)
    asking = [msg("q", 5, 10, content="Please open src/a0.py, src/a1.py, src/a2.py and src/a3.py again.")]
    out = rehydrator.inject(asking, state, log, turn=5)
    assert 1 <= len(out) <= 3
    assert all(r.unit.token_count <= 150 for r in out)
    assert sum(state.unit_cost(r.unit) for r in out) <= 300
    assert out[0].truncated and out[0].artifact_id == "art-000000000000"  # 500 tokens cut to the 150 cap
    assert rehydrator.budget_skips == 1  # the next one did not fit the 300-token reserve: injection stopped


def test_rehydration_finds_artifact_ids_tool_targets_and_named_paths():
    state, log = artifact_state((50, 50, 50))
    rehydrator = Rehydrator(RehydrationConfig(), state.limit)
    by_id = msg("a", 5, 5, content="Show me art-000000000000 again.")
    by_path = msg("b", 5, 5, content="What did src/a1.py look like?")
    by_call = read("c", 5, "src/a2.py", 10)
    unrelated = msg("d", 5, 5, content="art-0000000000001 and src/a9.py are not ours.")
    assert [a.id for a in rehydrator.referenced([by_id], state, log)] == ["art-000000000000"]
    assert [a.id for a in rehydrator.referenced([by_path], state, log)] == ["art-000000000001"]
    assert [a.id for a in rehydrator.referenced([by_call], state, log)] == ["art-000000000002"]
    assert rehydrator.referenced([unrelated], state, log) == []


def test_rehydration_cooldown_and_loops():
    state, log = artifact_state((60,))
    rehydrator = Rehydrator(RehydrationConfig(cooldown_turns=2), state.limit)
    ask = lambda turn: [msg(f"q{turn}", turn, 5, content="Open src/a0.py once more.")]  # noqa: E731
    assert len(rehydrator.inject(ask(5), state, log, 5)) == 1
    assert rehydrator.inject(ask(6), state, log, 6) == ()  # within the cooldown
    assert rehydrator.cooldown_skips == 1 and rehydrator.loops == 0
    assert len(rehydrator.inject(ask(7), state, log, 7)) == 1  # cooldown over: the same subject again is a loop
    assert rehydrator.rehydrations == 2 and rehydrator.loops == 1
    assert not Rehydrator(RehydrationConfig(enabled=False), state.limit).inject(ask(5), state, log, 5)


def test_a_loop_is_a_file_rehydrated_again_on_a_later_turn_whatever_artifact_holds_it():
    from dataclasses import replace

    log = {"r0": read("r0", 0, "src/x.py", 20), "r1": read("r1", 1, "src/y.py", 20),
           "r2": read("r2", 2, "src/y.py", 20), "r3": read("r3", 3, "src/x.py", 20)}
    base, _ = artifact_state((10,))
    ask = lambda turn: [msg(f"q{turn}", turn, 5, content="Open src/x.py and src/y.py.")]  # noqa: E731

    def loops(steps) -> int:
        rehydrator = Rehydrator(RehydrationConfig(cooldown_turns=0), 5000)
        for turn, artifacts in steps:
            state = replace(base, artifacts=tuple(artifacts))
            assert rehydrator.inject(ask(turn), state, log, turn)
        return rehydrator.loops

    xy = Artifact("art-00000000000a", prose(1, 60), ("r0", "r1"))
    yx = Artifact("art-00000000000b", prose(2, 60), ("r2", "r3"))
    x_alone, x_again = Artifact("art-00000000000c", prose(3, 60), ("r0",)), Artifact("art-00000000000d", prose(4, 60), ("r3",))
    assert loops([(5, [xy]), (8, [yx])]) == 1  # the same files in another order
    assert loops([(5, [x_alone]), (8, [yx])]) == 1  # x again, now beside y
    assert loops([(5, [x_alone, x_again])]) == 0  # two artifacts of x on x's first turn


def test_default_rehydration_budget_scales_seed_002_to_the_limit():
    assert RehydrationConfig().budget(100_000) == (8000, 4000)  # seed 002's RehydrationConfig at its 100k budget
    assert RehydrationConfig().budget(6000) == (480, 240)


def rehydration_conversation() -> Conversation:
    """A 1,200-token read externalized at the first overflow; read again later on a turn that overflows."""
    units = [(msg("sys-0", 0, 30, role="system", priority=1),), (read("big-1", 1, "src/big.py", 1200),)]
    units += [(msg(f"msg-{t}", t, 150),) for t in range(2, 9)]
    units += [(msg("again-9", 9, 30, content="Let's look at src/big.py once more before changing it."),
               msg("long-9", 9, 800, role="assistant"))]
    units += [(msg(f"msg-{t}", t, 40),) for t in range(10, 14)]
    return Conversation(turns=tuple(units), limit=2500, min_limit=500, scenario="built")


def test_a_rehydrating_turn_masks_aggressive_strategies_and_injects_from_the_reserve():
    session = session_of(rehydration_conversation(), rehydration=RehydrationConfig(reserve_tokens=400))
    first = session.episode
    assert first is not None and not session.skip_aggressive
    session.step("externalize")
    assert session.state.artifacts and "big-1" not in session.state
    assert session.turn == 9 and session.episode is not None  # the reading turn overflowed again
    assert session.skip_aggressive and len(session.rehydrated) == 1
    actions = session.episode.settings.actions
    mask = dict(zip(actions, session.episode.action_mask()))
    assert not mask["externalize"] and not mask["drop"] and mask["fresh_start"]
    injected = session.rehydrated[0].unit
    assert injected.id not in session.episode.state and session.state.unit_cost(injected) <= 400
    prompt = session.prompt_units()
    assert injected in prompt and prompt.index(injected) < prompt.index(session.state.unit("again-9"))
    session.step("summarize_old")
    assert session.events[-1].skip_aggressive and session.rehydrator.rehydrations == 1


# ---- seed 001's over-hit trigger ----------------------------------------------------------------
def over_hit_conversation(gap: float) -> Conversation:
    """Each turn adds ~400 tokens to a 2,000-token window: a minimal break overflows again next turn."""
    units = [(msg("sys-0", 0, 30, role="system", pinned=True, gap=gap),)]
    units += [(msg(f"msg-{t}", t, 400, gap=gap),) for t in range(1, 14)]
    return Conversation(turns=tuple(units), limit=2000, min_limit=500, scenario="built")


def test_more_than_two_over_hits_within_an_hour_force_a_fresh_start():
    session = played(over_hit_conversation(gap=60.0), "only:remove_oldest")
    triggers = [e.trigger for e in session.events]
    assert triggers[:3] == ["agent", "agent", "over_hits"]
    forced = session.events[2]
    assert forced.chain == ("fresh_start",) and forced.used_recovery
    assert session.events[1].time_s - session.events[0].time_s < 3600
    assert session.metrics()["over_hit_fresh_starts"] == triggers.count("over_hits") >= 2
    assert triggers[3:5] == ["agent", "agent"]  # the count starts again after the fresh start


def test_over_hits_spread_over_more_than_an_hour_force_nothing():
    session = played(over_hit_conversation(gap=2000.0), "only:remove_oldest")
    assert len(session.events) >= 4 and all(e.trigger == "agent" for e in session.events)
    off = played(over_hit_conversation(gap=60.0), "only:remove_oldest", triggers=RecoveryTriggers(max_over_hits=None))
    assert all(e.trigger == "agent" for e in off.events)


def test_milestone_fresh_start_is_off_by_default_and_on_by_flag():
    units = [(msg("sys-0", 0, 30, role="system", pinned=True),), (msg("m-1", 1, 200),),
             (ContextUnit(id="plan-2", type="plan_ref", role="assistant", turn=2, timestamp=120.0,
                          content="To Do List:\n- [x] P1: Ship the export\n- [ ] P2: Write docs"),),
             (msg("m-3", 3, 20),)]
    conv = Conversation(turns=tuple(units), limit=4000, min_limit=500, scenario="built")
    off = session_of(conv)
    assert off.done and off.counters.milestones == 1 and off.counters.milestone_fresh_starts == 0
    on = session_of(conv, triggers=RecoveryTriggers(milestone_fresh_start=True))
    assert on.counters.milestone_fresh_starts == 1 and "m-1" not in on.state and "m-3" in on.state


# ---- rewards and counters ---------------------------------------------------------------------------
def test_no_extra_overflow_pays_for_itself_with_the_default_weights():
    from ctxsim.reward import RewardWeights

    w = RewardWeights()
    best_success = w.success + w.reduction * 1.0 + w.p1 * 1.0  # everything cut, every P1 kept, coherence delta <= 0
    assert best_success + StreamRewardWeights().overflow_event <= 0


def test_rewards_are_event_rewards_plus_overflow_cost_plus_probe_share():
    session = session_of(fact_conversation())
    total, terms_seen = 0.0, []
    while not session.done:
        out = session.step("clear_tool_results")
        assert out.reward == pytest.approx(sum(out.terms.values()))
        total += out.reward
        terms_seen.append(out.terms)
    events = session.events
    assert sum(t["event"] + t["triggered"] for t in terms_seen) == pytest.approx(sum(e.reward for e in events))
    assert sum(t["overflow"] for t in terms_seen) == pytest.approx(StreamRewardWeights().overflow_event * len(events))
    assert terms_seen[-1]["probes"] == pytest.approx(5.0 * session.probe_share)
    assert session.counters.compactions >= len(events)
    fresh_starts = sum(e.used_recovery for e in events)
    assert fresh_starts >= 2 and session.counters.max_summary_depth == fresh_starts  # each handover nests the last
