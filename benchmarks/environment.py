"""Benchmarks of the environment: context pools, a pool's work per context, env
steps/s (live, pooled, on fresh contexts, on real-session cuts), training, the
oracle and the soak."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import gymnasium as gym
import numpy as np

from .measure import (
    BENCH_SCENARIO,
    ENV_ID,
    Bench,
    Row,
    Timing,
    clear_summaries,
    ms,
    rss_mb,
    tiktoken_pass,
)
from .targets import (
    ENV_FRESH_STEPS_S,
    POOL_RATIO_TARGET,
    SOAK_RSS_MB,
    TRAIN_RATIO_TARGET,
)


class NullOverflowEnv(gym.Env):
    """ContextOverflow-v0's observation and action spaces with no work behind them:
    random observations (uniform within the bounds, from the env's seeded
    generator), every action valid, episodes that end after 1-3 steps (reward 0).
    The reference that shows what the harness costs over the learner itself."""

    metadata = {"render_modes": []}

    def __init__(self, config: dict[str, Any] | None = None):
        from ctxsim.lab.environments.overflow import ContextOverflowEnv

        real = ContextOverflowEnv(config)
        self.observation_space, self.action_space = real.observation_space, real.action_space
        self._left = 0

    def _obs(self) -> np.ndarray:
        space = self.observation_space
        return self.np_random.uniform(space.low, space.high).astype(np.float32)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        self._left = int(self.np_random.integers(1, 4))
        return self._obs(), {}

    def step(self, action):
        self._left -= 1
        return self._obs(), 0.0, self._left <= 0, False, {}

    def action_masks(self) -> np.ndarray:
        return np.ones(self.action_space.n, dtype=bool)


@dataclass(frozen=True)
class Mark:
    """A reading during a rollout: steps done, seconds since the start, RSS (MB)."""

    steps: int
    seconds: float
    rss: float
    episodes: int = 0  # episodes ended by then


def random_rollout(env, *, steps: int | None = None, seconds: float | None = None, seed: int = 0,
                   every: int = 500, on_mark: Callable[[Mark], None] | None = None) -> list[Mark]:
    """Random masked actions on ``env`` (``action_masks()`` on the unwrapped env) for
    ``steps`` steps or ``seconds`` seconds; a :class:`Mark` at the start, every
    ``every`` steps and at the end (each also passed to ``on_mark``)."""
    rng = np.random.default_rng(seed)
    core = env.unwrapped
    env.reset(seed=seed)
    start = time.perf_counter()
    marks = [Mark(0, 0.0, rss_mb())]
    done = ended = 0
    while (steps is None or done < steps) and (seconds is None or time.perf_counter() - start < seconds):
        action = int(rng.choice(np.flatnonzero(core.action_masks())))
        _, _, terminated, truncated, _ = env.step(action)
        done += 1
        if terminated or truncated:
            ended += 1
            env.reset()
        if done % every == 0:
            marks.append(Mark(done, time.perf_counter() - start, rss_mb(), ended))
            if on_mark is not None:
                on_mark(marks[-1])
    if marks[-1].steps != done:
        marks.append(Mark(done, time.perf_counter() - start, rss_mb(), ended))
    return marks


def rate(a: Mark, b: Mark) -> float:
    """Steps per second between two marks."""
    return (b.steps - a.steps) / max(b.seconds - a.seconds, 1e-9)


def _make(config: dict[str, Any] | None = None):
    import ctxsim.lab.environments  # noqa: F401  (registers the env ids)

    return gym.make(ENV_ID, config=config)


def pooled_config(bench: Bench) -> dict[str, Any]:
    """The default spec with its context pool (a smaller pool in --quick runs)."""
    return {"pool": True} if not bench.quick else {"pool": True, "contexts_per_scenario": 4}


#: run in a new process: the resident size once ctxsim's env is imported, the seconds making
#: an env of the config given takes (with a pool on disk: reading it) and the resident size
#: once that env has reset (MB)
_POOL_PROCESS_CODE = (
    "import json, sys, time\n"
    "from benchmarks.measure import rss_mb\n"
    "from ctxsim.lab.environments.overflow import ContextOverflowEnv\n"
    "before = rss_mb()\n"
    "start = time.perf_counter()\n"
    "env = ContextOverflowEnv(json.loads(sys.argv[1]))\n"
    "seconds = time.perf_counter() - start\n"
    "env.reset(seed=0)\n"
    "print(json.dumps({'before': before, 'seconds': seconds, 'after': rss_mb()}))\n"
)


def pool_process(config: dict[str, Any]) -> tuple[float, float, float]:
    """(resident MB of a new process with the env imported, seconds to make an env of
    ``config``, resident MB once that env has reset): what a training process meets
    when it loads the pool."""
    proc = subprocess.run([sys.executable, "-c", _POOL_PROCESS_CODE, json.dumps(config)], capture_output=True,
                          text=True, check=True, cwd=Path(__file__).resolve().parents[1])
    found = json.loads(proc.stdout.strip().splitlines()[-1])
    return found["before"], found["seconds"], found["after"]


def bench_pool(bench: Bench) -> list[Row]:
    from ctxsim.lab.environments.overflow import ContextOverflowEnv
    from ctxsim.lab.parallel import default_workers
    from ctxsim.lab.pool import ensure_pool, forget_loaded

    checked = ContextOverflowEnv.checked_config(pooled_config(bench))
    config = checked.model_dump(mode="json")
    workers = default_workers()
    pool, path, _ = ensure_pool(config, checked.suite, workers=workers, rebuild=True)
    stats, overflowing, build_seconds = pool.stats(), pool.overflowing, pool.build_seconds
    forget_loaded()
    del pool
    before, load_s, after = pool_process(pooled_config(bench))
    per_context = build_seconds / max(overflowing, 1)
    bench.notes.append(
        f"pool: {stats['contexts']} contexts ({overflowing} overflow), {stats['states']:,} states, "
        f"{stats['transitions']:,} transitions, {path.stat().st_size / 1e6:,.0f} MB ({path.name} in the pool folder); built once per "
        "configuration and ctxsim version, then loaded by every env that sets pool: true. Its load and memory rows "
        "are of a new process with ctxsim's env imported: the wall time of making an env of the pooled config (its "
        "pool read from disk), then the resident size (VmRSS) once that env has reset; this benchmark process, which "
        "built the pool, holds more (the soak's readings)."
    )
    return [
        Row("pool", f"build, default spec ({stats['contexts']} contexts, {workers} workers)", f"{build_seconds:,.1f} s",
            f"{per_context * 1000:,.0f} ms per overflowing context"),
        Row("pool", f"load from disk in a new process ({path.stat().st_size / 1e6:,.0f} MB)", f"{load_s:,.2f} s",
            f"{build_seconds:,.1f} s (build)", load_s / build_seconds),
        Row("pool", "resident memory of a new process once an env holds the pool", f"{after:,.0f} MB",
            f"{before:,.0f} MB (the process before, ctxsim's env imported)", after / before),
    ]


def bench_expand(bench: Bench) -> list[Row]:
    from ctxsim.episode import settings_subset
    from ctxsim.lab.environments.overflow import ContextOverflowEnv
    from ctxsim.lab.pool import _build_one, _Task, scenario_digest
    from ctxsim.relevance.embedder import scipy_sparse

    checked = ContextOverflowEnv.checked_config()
    settings = dict(settings_subset(checked.model_dump(mode="json")), cache_size=1_000_000)  # as build_pool sets it
    first = checked.suite[0]
    _build_one(_Task(first, bench.new_seed(first.name), scenario_digest(first), settings))  # imports and tables, untimed
    scipy_sparse()  # and the import a long context's sentence products make once a process
    tasks = [_Task(s, bench.new_seed(s.name), scenario_digest(s), settings) for _ in range(bench.reps(2, 1))
             for s in checked.suite]
    seeds = sorted({task.seed for task in tasks})
    work = reference = 0.0
    contexts = states = 0
    for task in tasks:
        start = time.process_time()
        _, state, _, views = _build_one(task)
        spent = time.process_time() - start
        if not views:  # fits its target: nothing to expand
            continue
        text = state.render()
        start = time.process_time()
        tiktoken_pass(text)
        reference += time.process_time() - start
        work += spent
        contexts += 1
        states += len(views)
    ratio = work / reference
    bench.notes.append(
        f"expand: {contexts} overflowing contexts of the default spec (seeds {seeds[0]}-{seeds[-1]}: each scenario's "
        "next seeds no earlier benchmark of the run used, so every context is new), "
        f"{states / contexts:.0f} states each on average; CPU time (time.process_time) of generating each context "
        "and expanding it as a pool worker does (ctxsim.lab.pool), against one tiktoken encode of its rendered text."
    )
    return [Row("expand", f"pool work per context: generate + expand ({contexts} contexts, 1 process)",
                f"{work / contexts * 1000:,.1f} ms CPU", f"{reference / contexts * 1000:,.2f} ms CPU (tiktoken, its text)",
                ratio, f"<= {POOL_RATIO_TARGET:g}x", ratio <= POOL_RATIO_TARGET)]


def bench_env(bench: Bench) -> list[Row]:
    from ctxsim.lab.environments.overflow import _CONTEXTS

    null_marks = random_rollout(NullOverflowEnv(), steps=bench.reps(5000, 500))
    null_rate = rate(null_marks[0], null_marks[-1])
    ref = f"{null_rate:,.0f} steps/s (NullOverflowEnv)"
    rows = []
    budget = 20.0 if bench.quick else 180.0
    warm_steps = 100 if bench.quick else 500
    variants = (("default spec", None), ("default spec with its pool", pooled_config(bench)),
                ("2 contexts per scenario", {"contexts_per_scenario": 2}))
    for label, config in variants:
        env = _make(config)
        marks = random_rollout(env, seconds=budget, every=warm_steps)
        warm = next(m for m in marks if m.steps >= min(warm_steps, marks[-1].steps))
        tail = next((m for m in marks if m.seconds >= marks[-1].seconds * 2 / 3), marks[-2])
        first, later = rate(marks[0], warm), rate(tail, marks[-1])
        rows.append(Row("env", f"ContextOverflow-v0, {label}: first {warm.steps} steps", f"{first:,.1f} steps/s", ref,
                        null_rate / max(first, 1e-9)))
        rows.append(Row("env", f"ContextOverflow-v0, {label}: steps {tail.steps}-{marks[-1].steps} "
                               f"({marks[-1].seconds:.0f} s in)", f"{later:,.1f} steps/s", ref, null_rate / max(later, 1e-9)))
        if config is None:
            bench.notes.append(
                f"env: after {marks[-1].steps} steps the default spec had {len(_CONTEXTS)} of its "
                f"{env.unwrapped.context_count} "
                "contexts cached; the env ratio is null steps/s / env steps/s (time per step vs the null env)."
            )
    return rows


def bench_env_fresh(bench: Bench) -> list[Row]:
    from ctxsim.lab.environments.overflow import ContextOverflowEnv
    from ctxsim.model import MAX_CONTEXTS

    null_marks = random_rollout(NullOverflowEnv(), steps=bench.reps(5000, 500))
    null_rate = rate(null_marks[0], null_marks[-1])
    env = _make({"contexts_per_scenario": MAX_CONTEXTS})
    marks = random_rollout(env, seconds=20.0 if bench.quick else 90.0, every=10)
    # from the first reading after a tenth of the run (imports and the first tables done)
    start = next((m for m in marks[1:-1] if m.seconds >= marks[-1].seconds / 10), marks[0])
    steps_s = rate(start, marks[-1])
    core = env.unwrapped
    per_episode = (marks[-1].steps - start.steps) / max(marks[-1].episodes - start.episodes, 1)
    generation_ms = generation_cpu_ms(ContextOverflowEnv.checked_config().suite, bench.reps(60, 10))
    ceiling = per_episode / (generation_ms / 1000)
    bench.notes.append(
        f"env-fresh: the default spec with {MAX_CONTEXTS:,} context seeds per scenario, so nearly every reset "
        "generates a context this process has never seen (a transcript scenario has one context whatever the seed); "
        f"steps {start.steps}-{marks[-1].steps} of {marks[-1].seconds:.0f} s, {core.context_count:,} contexts in the draw, "
        f"{per_episode:.2f} steps per episode. The generation row builds {bench.reps(60, 10)} contexts as the env draws "
        "them (its scenarios, uniformly; seeds it never drew), mean CPU time per context (time.process_time); its "
        "ceiling, steps per episode / generation time, is what the env would reach if generating were its only work."
    )
    return [Row("env-fresh", "ContextOverflow-v0 live, default spec, contexts never seen", f"{steps_s:,.1f} steps/s",
                f"{null_rate:,.0f} steps/s (NullOverflowEnv)", null_rate / max(steps_s, 1e-9),
                f">= {ENV_FRESH_STEPS_S:g} steps/s", steps_s >= ENV_FRESH_STEPS_S),
            Row("env-fresh", f"generating the new contexts alone (mean; {per_episode:.2f} steps per episode)",
                f"{generation_ms:.1f} ms CPU per context",
                f"ceiling {ceiling:,.1f} steps/s (the env if generating were all its work)")]


def generation_cpu_ms(suite: list, count: int) -> float:
    """Mean CPU ms of building ``count`` contexts of ``suite``'s scenarios (drawn
    uniformly, as the env's resets draw them) with seeds above any its draws use."""
    from ctxsim.lab.contexts import build_context
    from ctxsim.model import MAX_CONTEXTS

    rng = np.random.default_rng(1)
    times = []
    for k in range(count):
        scenario = suite[int(rng.integers(len(suite)))]
        begin = time.process_time()
        build_context(scenario, MAX_CONTEXTS + k)
        times.append((time.process_time() - begin) * 1000)
    return float(np.mean(times))


#: the sizes of the real-session cuts (tokens) and how many sessions are cut at each
CUT_SIZES = (3_750, 7_500, 15_000, 30_000)
CUT_SESSIONS = 2
#: a cut context overflows its limit by this factor (the corpus families draw 1.1-2.5)
CUT_OVERFLOW = 1.5


def session_cuts(count: int = CUT_SESSIONS, sizes: tuple[int, ...] = CUT_SIZES) -> list[tuple[int, Path, float]]:
    """(target size, session file, cut share) of ``count`` real mini-swe-agent sessions per
    size, each session cut once: the largest sessions take the largest size, and one more
    session the smallest size again (first in the list: the warm-up). The share is found
    by bisection: the smallest whose cut context (messages up to a tool result) holds at
    least the target's tokens."""
    from ctxsim.lab.corpus import corpus_files
    from ctxsim.transcripts import load_transcript

    by_size = sorted(corpus_files(), key=lambda f: (-load_transcript(str(f)).total_tokens, f.name))
    plan = [(size, path) for k, size in enumerate(sorted(sizes, reverse=True))
            for path in by_size[k * count:(k + 1) * count]]
    plan = [(min(sizes), by_size[len(plan)])] + sorted(plan, key=lambda c: (c[0], c[1].name))
    out = []
    for size, path in plan:
        lo, hi = 0.01, 0.99
        for _ in range(12):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if load_transcript(str(path), cut=mid).total_tokens < size else (lo, mid)
        out.append((size, path, round(hi, 4)))
    return out


def bench_cuts(bench: Bench) -> list[Row]:
    from ctxsim.cuts import clear_caches as clear_cut_caches
    from ctxsim.lab.contexts import build_context
    from ctxsim.lab.scenarios import Scenario
    from ctxsim.relevance.embedder import scipy_sparse
    from ctxsim.transcripts import load_transcript

    scipy_sparse()  # the import a long cut's sentence products make once a process (~0.17 s CPU), untimed
    env = _make()
    core = env.unwrapped
    rng = np.random.default_rng(0)
    per_size: dict[int, list[tuple[float, float, int]]] = {}
    cuts = session_cuts(bench.reps(CUT_SESSIONS, 1), CUT_SIZES if not bench.quick else CUT_SIZES[::3])
    for n, (size, path, share) in enumerate(cuts):
        tokens = load_transcript(str(path), cut=share).total_tokens
        scenario = Scenario(name=f"bench-cut-{size}", transcript=str(path), cut=share,
                            limit=max(1000, round(tokens / CUT_OVERFLOW)), min_limit=1000)
        clear_summaries()
        clear_cut_caches()  # finding the cut share built this session's cuts already
        start = time.process_time()
        state = build_context(scenario, 0)
        env.reset(seed=0, options={"state": state})
        done = False
        while not done:
            _, _, done, _, _ = env.step(int(rng.choice(np.flatnonzero(core.action_masks()))))
        spent = time.process_time() - start
        text = state.render()
        start = time.process_time()
        tiktoken_pass(text)
        if n:  # the first cut warms the process up (imports, tables), untimed
            per_size.setdefault(size, []).append((spent, time.process_time() - start, state.total_tokens))
    rows, ratios, mean_tokens = [], {}, {}
    for size, runs in sorted(per_size.items()):
        work, ref = sum(r[0] for r in runs), sum(r[1] for r in runs)
        ratios[size] = work / ref
        mean_tokens[size] = sum(r[2] for r in runs) / len(runs)
        rows.append(Row("cuts", f"live env, real-session cut of ~{mean_tokens[size]:,.0f} tokens ({len(runs)} sessions): "
                                "build + one episode", f"{work / len(runs) * 1000:,.1f} ms CPU",
                        f"{ref / len(runs) * 1000:,.2f} ms CPU (tiktoken, its text)", ratios[size]))
    smallest, largest = min(ratios), max(ratios)
    growth = ratios[largest] / ratios[smallest]
    rows.append(Row("cuts", f"cost per token of text, ~{mean_tokens[largest]:,.0f}-token cuts vs "
                            f"~{mean_tokens[smallest]:,.0f}-token cuts",
                    f"{ratios[largest]:,.1f}x vs {ratios[smallest]:,.1f}x tiktoken", "", growth,
                    "<= 1x (grows no faster than the text)", growth <= 1.0))
    bench.notes.append(
        f"cuts: mini-swe-agent sessions (data/transcripts), the largest cut to >= {largest:,} tokens, the next ones to "
        "smaller sizes, each session once (every context new: the summaries and the cuts' memos of candidate strings "
        "cleared before each, since finding the cut share builds the session's cuts; the system prompt they share "
        "stays warm; one more "
        f"session cut first, untimed, as a warm-up, and scipy.sparse imported before, when installed), limit = tokens / "
        f"{CUT_OVERFLOW:g}; per context the CPU time "
        "(time.process_time) of building it and of one ContextOverflow-v0 episode on it (reset with options state, "
        "random masked actions, seed 0), against one tiktoken encode of its rendered text.")
    return rows


def train_seconds(env_fn: Callable[[], Any], steps: int, seed: int = 0) -> float:
    """Wall time (s) of ``MaskablePPO.learn(steps)`` on ``DummyVecEnv([env_fn])``."""
    import torch
    from sb3_contrib import MaskablePPO
    from stable_baselines3.common.logger import Logger
    from stable_baselines3.common.vec_env import DummyVecEnv

    torch.set_num_threads(1)
    vec = DummyVecEnv([env_fn])
    model = MaskablePPO("MlpPolicy", vec, n_steps=256, batch_size=64, n_epochs=4, seed=seed, device="cpu", verbose=0,
                        policy_kwargs={"net_arch": [64, 64]})
    model.set_logger(Logger(None, []))  # no log folder (SB3's default makes one under the system temp folder)
    start = time.perf_counter()
    model.learn(total_timesteps=steps)
    elapsed = time.perf_counter() - start
    vec.close()
    return elapsed


def bench_train(bench: Bench) -> list[Row]:
    steps = bench.reps(2048, 256)
    rows = []
    variants = (("default spec", None), ("default spec with its pool", pooled_config(bench)),
                ("2 contexts per scenario, caches warmed", {"contexts_per_scenario": 2}))
    for label, config in variants:
        if config is not None and not config.get("pool"):
            random_rollout(_make(config), steps=bench.reps(3000, 300))  # fill the process caches first
        null_s = train_seconds(lambda: NullOverflowEnv(config), steps)
        env_s = train_seconds(lambda: _make(config), steps)
        ratio = env_s / null_s
        rows.append(Row("train", f"MaskablePPO {steps} steps, {label}", f"{env_s:.1f} s", f"{null_s:.1f} s (NullOverflowEnv)",
                        ratio, f"< {TRAIN_RATIO_TARGET:g}x", ratio < TRAIN_RATIO_TARGET))
    bench.notes.append("train: MaskablePPO(MlpPolicy [64, 64], n_steps 256, batch 64, 4 epochs, seed 0), DummyVecEnv of one env, "
                       "torch on 1 thread. 'caches warmed': after random steps of another env of the same config, whose "
                       "memo of transitions the trained env shares (bounded by cache_size); the states those steps did not "
                       "reach, or the memo let go, still run strategies.")
    return rows


def bench_oracle(bench: Bench) -> list[Row]:
    from ctxsim.episode import EpisodeSettings
    from ctxsim.policies import get_policy, run_episode, search

    chain = get_policy("seed-chain")
    oracle, episode, nodes = [], [], []
    for _ in range(bench.reps(5)):
        state = bench.fresh()
        for out, run in ((episode, lambda: run_episode(chain, state, EpisodeSettings(), 0)),
                         (oracle, lambda: nodes.append(search(state, EpisodeSettings()).nodes_expanded))):
            clear_summaries()
            start = time.perf_counter()
            run()
            out.append((time.perf_counter() - start) * 1000)
    o, e = Timing(tuple(oracle)), Timing(tuple(episode))
    return [Row("oracle", f"search, default actions, {BENCH_SCENARIO} (cold; {int(np.median(nodes))} nodes)",
                ms(o.median), f"{ms(e.median)} (one seed-chain episode, same contexts, cold)", o.median / e.median)]

@dataclass(frozen=True)
class SoakResult:
    """A soak's readings. Every process cache is bounded (LRU), so resident memory
    grows while they fill and must then stay flat: ``growth_mb`` is measured over
    the second half of the run (a leak grows there too), ``warm_growth_mb`` from
    the end of the first tenth, ``total_growth_mb`` from the first step."""

    marks: tuple[Mark, ...]

    def _at(self, share: float) -> Mark:
        return next(m for m in self.marks if m.steps >= self.marks[-1].steps * share)

    @property
    def half(self) -> Mark:
        return self._at(0.5)

    @property
    def warm(self) -> Mark:
        return self._at(0.1)

    @property
    def growth_mb(self) -> float:
        return self.marks[-1].rss - self.half.rss

    @property
    def warm_growth_mb(self) -> float:
        return self.marks[-1].rss - self.warm.rss

    @property
    def total_growth_mb(self) -> float:
        return self.marks[-1].rss - self.marks[0].rss


def run_soak(steps: int, *, config: dict[str, Any] | None = None, seed: int = 0, readings: int = 20,
             on_mark: Callable[[Mark], None] | None = None) -> SoakResult:
    """``steps`` steps of ContextOverflow-v0 (default spec) with random masked actions."""
    marks = random_rollout(_make(config), steps=steps, seed=seed, every=max(1, steps // readings), on_mark=on_mark)
    return SoakResult(tuple(marks))


def bench_soak(bench: Bench, pooled: bool = True) -> list[Row]:
    name = "soak" if pooled else "soak-live"
    config = pooled_config(bench) if pooled else None
    if pooled:
        _make(config)  # load (or build) the pool before the first reading
    soak = bench.soaks[name] = run_soak(bench.soak_steps, config=config, on_mark=lambda m: bench.log(
        f"{name}: {m.steps:,} steps in {m.seconds:,.0f} s, RSS {m.rss:,.0f} MB"))
    first, last = soak.marks[0], soak.marks[-1]
    window = soak.marks[-2] if len(soak.marks) > 2 else first
    return [
        Row(name, f"RSS growth, second half (steps {soak.half.steps:,}-{last.steps:,})", f"{soak.growth_mb:+.1f} MB",
            f"{soak.half.rss:.0f} MB at step {soak.half.steps:,}", last.rss / soak.half.rss, f"< {SOAK_RSS_MB:g} MB",
            soak.growth_mb < SOAK_RSS_MB),
        Row(name, f"RSS growth after the first tenth (steps {soak.warm.steps:,}-{last.steps:,})",
            f"{soak.warm_growth_mb:+.1f} MB", f"{soak.warm.rss:.0f} MB at step {soak.warm.steps:,}", last.rss / soak.warm.rss),
        Row(name, f"RSS growth from the first step ({last.steps:,} steps)", f"{soak.total_growth_mb:+.1f} MB",
            f"{first.rss:.0f} MB at start", last.rss / first.rss),
        Row(name, "steps/s, whole soak vs last reading interval", f"{rate(first, last):,.1f} steps/s",
            f"{rate(window, last):,.1f} steps/s (last interval)", rate(first, last) / max(rate(window, last), 1e-9)),
    ]
