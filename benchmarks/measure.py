"""How the benchmarks measure: timings (median, p95), rows of the table, the
shared :class:`Bench` state, the tiktoken reference and cold contexts."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from ctxsim import collector

ENV_ID = "ctxsim/ContextOverflow-v0"
BENCH_SCENARIO = "chat-10k"
#: context seeds of the benchmark contexts start here (far from the seeds tests use)
FIRST_SEED = 1000


# ---- measuring ----------------------------------------------------------------------
@dataclass(frozen=True)
class Timing:
    """Samples of one measurement (ms)."""

    samples: tuple[float, ...]

    @property
    def median(self) -> float:
        return float(np.median(self.samples))

    @property
    def p95(self) -> float:
        return float(np.percentile(self.samples, 95))


def timed(fn: Callable[[Any], Any], *, repeat: int, warmup: int = 1, before: Callable[[], Any] | None = None) -> Timing:
    """``fn(before())`` ``warmup`` times untimed, then ``repeat`` times timed (ms each);
    ``before`` (untimed) prepares each call's input."""
    samples = []
    for i in range(warmup + repeat):
        arg = before() if before is not None else None
        start = time.perf_counter()
        fn(arg)
        elapsed = (time.perf_counter() - start) * 1000
        if i >= warmup:
            samples.append(elapsed)
    return Timing(tuple(samples))


def timed_blocks(fn: Callable[[Any], Any], *, blocks: int, repeat: int, before: Callable[[], Any] | None = None) -> Timing:
    """``fn(before())`` once untimed, then ``blocks`` blocks of ``repeat`` timed calls, each
    block with the garbage collector paused; the samples are the blocks' medians (ms), so
    the median is the median of the blocks' medians and one noisy stretch of the machine
    moves at most its own block."""
    fn(before() if before is not None else None)
    medians = []
    for _ in range(blocks):
        with collector.paused():  # a collection would land in whichever sample runs into it
            medians.append(timed(fn, repeat=repeat, warmup=0, before=before).median)
    return Timing(tuple(medians))


def rss_mb() -> float:
    """Resident set size of this process (MB), from /proc/self/status (else the peak)."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


# ---- rows -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Row:
    """One line of the table. ``ratio`` = measured / reference (None: no reference);
    ``ok`` = the target is met (None: no target, or nothing measured)."""

    benchmark: str
    what: str
    measured: str
    reference: str = ""
    ratio: float | None = None
    target: str = ""
    ok: bool | None = None
    pending: bool = False

    @property
    def verdict(self) -> str:
        if self.pending:
            return "pending"
        return "" if self.ok is None else "ok" if self.ok else "MISSED"


def ms(value: float) -> str:
    """A duration given in ms, in µs, ms or s."""
    if value < 0.1:
        return f"{value * 1000:.2g} µs" if value * 1000 < 10 else f"{value * 1000:.0f} µs"
    return f"{value:.3f} ms" if value < 1 else f"{value:.1f} ms" if value < 1000 else f"{value / 1000:.2f} s"


def timing_text(t: Timing, p95: bool = False) -> str:
    return f"{ms(t.median)} (p95 {ms(t.p95)})" if p95 else ms(t.median)


def blocks_text(t: Timing) -> str:
    """A :func:`timed_blocks` timing: the median of the blocks' medians and their range."""
    return f"{ms(t.median)} (blocks {ms(min(t.samples))}-{ms(max(t.samples))})"


@dataclass
class Bench:
    """What the benchmarks share: repetitions, fresh contexts, a scratch folder, notes."""

    quick: bool
    scratch: Path
    soak_steps: int = 1_000_000
    notes: list[str] = field(default_factory=list)
    soaks: dict[str, Any] = field(default_factory=dict)  # name -> environment.SoakResult (its readings table)
    log: Callable[[str], None] = lambda text: None
    _next_seed: dict[str, int] = field(default_factory=dict)

    def reps(self, full: int, quick: int = 2) -> int:
        return quick if self.quick else full

    def new_seed(self, scenario: str) -> int:
        """A context seed of ``scenario`` not used before in this process (from :data:`FIRST_SEED`)."""
        seed = self._next_seed.get(scenario, FIRST_SEED)
        self._next_seed[scenario] = seed + 1
        return seed

    def fresh(self, scenario: str = BENCH_SCENARIO):
        """A context of ``scenario`` with a seed not used before in this process."""
        from ctxsim.lab.contexts import build_context
        from ctxsim.lab.scenarios import find_scenario

        return build_context(find_scenario(scenario), self.new_seed(scenario))


def tiktoken_pass(text: str) -> None:
    """One raw tiktoken ``encode`` of ``text`` (the reference of most rows)."""
    from ctxsim.tokens import _encoding

    _encoding().encode(text, disallowed_special=())


def clear_summaries() -> None:
    from ctxsim.summarize.structured import SUMMARY_CACHE

    SUMMARY_CACHE.clear()


def cold(bench: Bench, scenario: str = BENCH_SCENARIO, units: int | None = None) -> Callable[[], Any]:
    """``before`` for a cold measurement: a fresh context (its first ``units`` units
    when given) and an empty summary cache."""

    def before():
        state = bench.fresh(scenario)
        if units is not None:
            state = state.with_units(state.units[:units])
        clear_summaries()
        return state

    return before
