"""How the benchmarks time: blocks of calls with the garbage collector paused."""

from __future__ import annotations

import gc

from benchmarks.measure import timed_blocks


def test_timed_blocks_gives_one_median_per_block_with_the_collector_paused_in_each():
    seen: list[bool] = []
    inputs = iter(range(100))
    timing = timed_blocks(lambda x: seen.append(gc.isenabled()), blocks=4, repeat=5, before=lambda: next(inputs))
    assert len(timing.samples) == 4 and all(s >= 0 for s in timing.samples)
    assert seen == [True] + [False] * 20  # one untimed call first, then 4 blocks of 5
    assert next(inputs) == 21 and gc.isenabled()


def test_blocks_text_gives_the_median_and_the_range_of_the_block_medians():
    from benchmarks.measure import Timing, blocks_text

    assert blocks_text(Timing((3.0, 1.0, 2.0))) == "2.0 ms (blocks 1.0 ms-3.0 ms)"


def test_random_rollout_counts_the_episodes_it_ends():
    from benchmarks.environment import NullOverflowEnv, random_rollout

    class Counted(NullOverflowEnv):
        resets = 0

        def reset(self, **kwargs):
            Counted.resets += 1
            return super().reset(**kwargs)

    marks = random_rollout(Counted(), steps=200, every=50)
    assert [m.steps for m in marks] == [0, 50, 100, 150, 200]
    assert marks[0].episodes == 0 and marks[-1].episodes == Counted.resets - 1  # the first reset starts, not ends
    assert 200 / 3 <= marks[-1].episodes <= 200  # NullOverflowEnv's episodes last 1-3 steps
    assert all(a.episodes <= b.episodes for a, b in zip(marks, marks[1:]))


def test_pool_process_reads_a_new_process_before_and_after_its_env():
    """The pool's load and memory rows run in a new process from the checkout (the
    ``benchmarks`` package importable there): its resident size with the env imported,
    the time making an env takes, then the size with the env made and reset (here
    without a pool: the plumbing, not the pool's size)."""
    from benchmarks.environment import pool_process

    before, seconds, after = pool_process({"contexts_per_scenario": 1})
    assert 20 < before <= after < 4096
    assert 0 < seconds < 60


def test_the_summarizer_stages_add_up_to_its_own_work_and_check_its_summary(tmp_path):
    """Each stage of the cold summarizer's breakdown gets a row with a positive share of
    a tiktoken pass, and the total row adds them; the staged run is checked against
    summarize_units' own summary on every input (a stage that drifted from the
    summarizer would raise)."""
    from benchmarks.measure import Bench
    from benchmarks.text import SUMMARY_STAGES, summarizer_stages

    bench = Bench(quick=True, scratch=tmp_path)
    rows = summarizer_stages(bench)
    assert [r.what for r in rows] == [f"cold, by stage: {what}" for _, what in SUMMARY_STAGES] + [
        "cold, by stage: the stages' medians added"]
    assert all(r.ratio > 0 for r in rows)
    assert abs(rows[-1].ratio - sum(r.ratio for r in rows[:-1])) < 1e-9
    assert "summarizer stages: 2 more new inputs" in bench.notes[-1]
