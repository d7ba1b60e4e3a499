"""Benchmarks of what a deployed agent runs: an exported policy's ``decide`` and
``break_context``, the ContextWindow and ``compact_keep_recent``."""

from __future__ import annotations

import time
from typing import Iterator

import numpy as np

from .measure import (
    BENCH_SCENARIO,
    Bench,
    Row,
    Timing,
    blocks_text,
    clear_summaries,
    cold,
    ms,
    tiktoken_pass,
    timed,
    timed_blocks,
    timing_text,
)
from .targets import (
    ADD_P95_MS,
    BUILD_P95_MS,
    COMPACTION_BUDGET_MS,
    DECIDE_BUDGET_MS,
    DECIDE_COLD_CONTEXTS,
    DECIDE_COLD_MS,
    DECIDE_UNITS,
    DECIDE_WARM_BLOCKS,
    DECIDE_WARM_CALLS,
    DECIDE_WARM_MS,
    DECIDE_WARMUP_CONTEXTS,
)


def bench_export(bench: Bench) -> list[Row]:
    try:
        from ctxsim.lab.export import export_run
        from ctxsim.policies import load
    except ImportError as exc:
        return [Row("export", "decide, exported policy", f"not measured: {exc}", pending=True)]
    from ctxsim.lab.train import ExperimentConfig, train

    experiment = ExperimentConfig(
        name="bench", algo="MaskablePPO", env_config={"contexts_per_scenario": 1},
        train_scenarios=["mild-overflow", BENCH_SCENARIO], eval_scenarios=[BENCH_SCENARIO], timesteps=256, n_envs=1,
        hyperparams={"n_steps": 128, "batch_size": 64, "policy_kwargs": {"net_arch": [64, 64]}},
        eval_freq=10**9, checkpoint_freq=10**9,
    )
    run_dir = train(experiment, out=bench.scratch / "runs", progress=False)
    export_run(run_dir, bench.scratch / "export", seeds=1)
    policy = load(bench.scratch / "export")
    sample = bench.fresh()
    text = sample.render()
    ref_t = timed(lambda _: tiktoken_pass(text), repeat=bench.reps(20, 5))
    ref = f"{ms(ref_t.median)} (tiktoken, {sample.total_tokens:,} tokens)"
    for _ in range(bench.reps(DECIDE_WARMUP_CONTEXTS, 2)):
        policy.decide(cold(bench, units=DECIDE_UNITS)())
    fifty = cold(bench, units=DECIDE_UNITS)
    pairs = []  # (decide ms, tiktoken ms) on each new 50-unit context
    for _ in range(bench.reps(DECIDE_COLD_CONTEXTS, 3)):
        state = fifty()
        text50 = state.render()
        start = time.perf_counter()
        tiktoken_pass(text50)
        middle = time.perf_counter()
        policy.decide(state)
        end = time.perf_counter()  # the collector stays on: a collection decide's garbage calls for is its cost
        pairs.append(((end - middle) * 1000, (middle - start) * 1000))
    cold50_t = Timing(tuple(d for d, _ in pairs))
    ref50 = float(np.median([t for _, t in pairs]))
    cold50_ratio = float(np.median([d / t for d, t in pairs]))
    seen50 = cold(bench, units=DECIDE_UNITS)()
    warm_blocks, warm_calls = bench.reps(DECIDE_WARM_BLOCKS, 2), bench.reps(DECIDE_WARM_CALLS, 5)
    warm50_t = timed_blocks(policy.decide, blocks=warm_blocks, repeat=warm_calls, before=lambda: seen50)
    copy50_t = timed_blocks(policy.decide, blocks=warm_blocks, repeat=warm_calls, before=lambda: seen50.with_units(seen50.units))
    cold_t = timed(policy.decide, repeat=bench.reps(10, 2), warmup=0, before=cold(bench))
    warm_t = timed(policy.decide, repeat=bench.reps(50, 5), before=lambda: sample)
    everything = np.ones(len(policy.actions), dtype=bool)
    masked_t = timed(lambda state: policy.decide(state, mask=everything), repeat=bench.reps(10, 2), warmup=0,
                     before=cold(bench))
    ahead = load(bench.scratch / "export")
    ahead.spec = ahead.spec.model_copy(update={"lookahead": True})
    breaks: dict[bool, list[float]] = {False: [], True: []}
    for i in range(bench.reps(12, 2) * 2):  # each break on a new context, the two kinds in turn
        chosen = ahead if i % 2 else policy
        state = cold(bench)()
        start = time.perf_counter()
        chosen.break_context(state)
        breaks[chosen is ahead].append((time.perf_counter() - start) * 1000)
    plain_break, ahead_break = Timing(tuple(breaks[False])), Timing(tuple(breaks[True]))
    target = f"< {DECIDE_BUDGET_MS:g} ms"
    units = f"{len(sample.units)} units"
    ref50_text = f"{ms(ref50)} (tiktoken, its text; median per context)"
    bench.notes.append(
        f"export: the {DECIDE_UNITS}-unit contexts are the first {DECIDE_UNITS} units of fresh {BENCH_SCENARIO} "
        f"contexts (the issue's size), the others whole contexts; before the cold {DECIDE_UNITS}-unit row the policy "
        f"decided {bench.reps(DECIDE_WARMUP_CONTEXTS, 2)} other new contexts (untimed), so the word tables are as warm "
        "as in a running agent while every timed context is new; its ratio is the median over contexts of decide / "
        "one tiktoken encode of that context's text, timed back to back (the garbage collector on). The "
        f"{DECIDE_UNITS}-unit row on the same context again: one untimed decide, then {warm_blocks} blocks of "
        f"{warm_calls} decides of that state object, the garbage collector paused in each block; the figure is the "
        "median of the blocks' medians, its range the lowest and highest block median (decide memoizes the "
        "observation and the validity of the actions it asks about on the state object, so these are lookups and the "
        "network's forward pass); the row after it times the same way an equal state built anew for each call (its "
        "units and their cached embeddings and counts shared). break_context: the same policy acting on "
        "its top action and with look-ahead (ctxsim.policies.lookahead; the spec's lookahead set), in turn on new "
        f"{BENCH_SCENARIO} contexts, one break each.")
    return [
        Row("export", f"decide, {DECIDE_UNITS} units (cold context)", timing_text(cold50_t, True), ref50_text, cold50_ratio,
            f"< {DECIDE_COLD_MS:g} ms or <= 1x", cold50_t.median < DECIDE_COLD_MS or cold50_ratio <= 1.0),
        Row("export", f"decide, {DECIDE_UNITS} units (same context again)",
            blocks_text(warm50_t),
            f"{ms(ref50)} (tiktoken, a {DECIDE_UNITS}-unit text)", warm50_t.median / ref50,
            f"< {DECIDE_WARM_MS:g} ms", warm50_t.median < DECIDE_WARM_MS),
        Row("export", f"decide, {DECIDE_UNITS} units (same context again, a new state object)",
            blocks_text(copy50_t),
            f"{ms(ref50)} (tiktoken, a {DECIDE_UNITS}-unit text)", copy50_t.median / ref50),
        Row("export", f"decide, {units} (cold context)", timing_text(cold_t, True), ref, cold_t.median / ref_t.median,
            target, cold_t.median < DECIDE_BUDGET_MS),
        Row("export", f"decide, {units}, mask given by the caller (cold context)", timing_text(masked_t, True), ref,
            masked_t.median / ref_t.median, target, masked_t.median < DECIDE_BUDGET_MS),
        Row("export", f"decide, {units} (same context again)", timing_text(warm_t, True), ref,
            warm_t.median / ref_t.median, target, warm_t.median < DECIDE_BUDGET_MS),
        Row("export", f"break_context with look-ahead, {units} (cold context)", timing_text(ahead_break, True),
            f"{ms(plain_break.median)} (break_context on the top action, other cold contexts)",
            ahead_break.median / plain_break.median),
    ]


def _window_texts(bench: Bench, count: int) -> Iterator[str]:
    made = 0
    while made < count:
        for unit in bench.fresh().units:
            if made < count:
                made += 1
                yield unit.content


def bench_window(bench: Bench) -> list[Row]:
    from ctxsim.tokens import clear_caches
    from ctxsim.window import ContextItem, ContextWindow

    kinds = ("user_message", "assistant_message", "tool_result", "working_memory")
    texts = list(_window_texts(bench, bench.reps(400, 80)))
    window = ContextWindow(max_tokens=8000, task="benchmark")
    window.add(ContextItem("You are a coding agent.", "system_prompt", priority=100, pinned=True, id="system"))
    feed = iter(enumerate(texts))

    def add(_=None):
        i, text = next(feed)
        window.add(ContextItem(text, kinds[i % len(kinds)], priority=20 + (i * 37) % 71, id=f"item-{i}"))

    adds = timed(add, repeat=len(texts) * 3 // 4, warmup=5, before=clear_caches)  # new content: counted cold
    builds = timed(lambda _: window.build(), repeat=len(texts) - len(adds.samples) - 5, warmup=0, before=add)
    add_ref = timed(lambda _: [tiktoken_pass(t) for t in texts[:50]], repeat=5)
    built = window.build()
    build_ref = timed(lambda _: tiktoken_pass(built), repeat=20)
    per_text = add_ref.median / 50
    return [
        Row("window", f"add p95 ({len(adds.samples)} adds, auto-compaction at 85 % of 8,000 tokens)",
            timing_text(adds, True), f"{ms(per_text)} (tiktoken, one item)", adds.p95 / per_text,
            f"p95 < {ADD_P95_MS:g} ms (seed 000)", adds.p95 < ADD_P95_MS),
        Row("window", f"build p95 ({len(builds.samples)} builds, one add before each)", timing_text(builds, True),
            f"{ms(build_ref.median)} (tiktoken, built text)", builds.p95 / build_ref.median,
            f"p95 < {BUILD_P95_MS:g} ms (seed 000)", builds.p95 < BUILD_P95_MS),
    ]


def hundred_messages(bench: Bench):
    """A fresh overflowing context of exactly 100 chat messages."""
    from ctxsim.lab.generator import generate
    from ctxsim.lab.scenarios import Scenario, UnitTokens

    scenario = Scenario(name="bench-100-messages", limit=5000, target_tokens=16000, mix={"message": 1.0}, p1_ratio=0.1,
                        unit_tokens=UnitTokens(min=80, max=200))
    state = generate(scenario, bench.new_seed(scenario.name))
    if len(state.units) < 100:
        raise RuntimeError(f"the 100-message scenario gave {len(state.units)} units")
    return state.with_units(state.units[:100])


def bench_compaction(bench: Bench) -> list[Row]:
    from ctxsim.strategies import StrategyContext, get_strategy

    strategy = get_strategy("compact_keep_recent")

    def before():
        state = hundred_messages(bench)
        clear_summaries()
        return state

    t = timed(lambda s: strategy.apply(s, StrategyContext()), repeat=bench.reps(5), warmup=0, before=before)
    sample = hundred_messages(bench)
    text = sample.render()
    ref_t = timed(lambda _: tiktoken_pass(text), repeat=20)
    return [Row("compaction", f"compact_keep_recent, 100 messages ({sample.total_tokens:,} tokens, cold)", ms(t.median),
                f"{ms(ref_t.median)} (tiktoken)", t.median / ref_t.median,
                f"< {COMPACTION_BUDGET_MS / 1000:g} s (seed 004)", t.median < COMPACTION_BUDGET_MS)]
