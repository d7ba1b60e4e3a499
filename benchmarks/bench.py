"""Benchmarks: ``python -m benchmarks --out reports/benchmarks.md`` (``make bench``).

Every figure is measured in the same run as its reference and reported as a ratio
(measured / reference), beside the seed target it answers to, with the machine
noted. Times are wall time (``time.perf_counter``) unless a row says CPU time
(``time.process_time``: ``expand``, ``cuts`` and the generation row of ``env-fresh``);
each benchmark warms up first, then repeats and reports the median (and the 95th
percentile where a seed asks for it).

Benchmarks (``--only NAME``, repeatable):

* ``tokens`` — :func:`ctxsim.count_tokens` cold (its cache and the pieces' counts
  emptied), on texts new to its cache whose pre-tokenizer pieces it has counted, and
  cached, vs tiktoken ``encode``;
* ``strategies`` — every registered strategy, design 001's ``hybrid`` and the
  ``seed-chain`` policy on the 10k-token ``chat-10k`` context, cold and warm, vs one
  tiktoken pass over the same text (design 001: full chain < 2 s for 50 units);
* ``summarizer`` — the extractive summarizer on 2,000 tokens (design 001: < 500 ms;
  cold, at most 3 tiktoken passes over its input), and where its cold time goes: its
  work done one stage at a time (splitting, classifying, counting, embedding, scoring,
  ranking, fitting), each stage against one tiktoken pass over the input;
* ``coherence`` — each measure of :mod:`ctxsim.coherence` on the 10k-token
  ``chat-10k`` context and design 001's ``hybrid`` result of it, cold, warm and (recall)
  with the original's sentence data rebuilt from cached embeddings, vs one tiktoken
  pass over the context (issue #22: ``recall`` warm <= 2x);
* ``pool`` — building the default spec's context pool (:mod:`ctxsim.lab.pool`; a
  worker per core; written to the pool folder, ``$CTXSIM_POOL_DIR``), loading it
  from disk, and the resident memory of a new process whose env holds it;
* ``expand`` — the pool's work per context in this process (generation and every
  chain of valid actions, :func:`ctxsim.lab.pool.expand`), CPU time vs one tiktoken
  pass over the context's text, on contexts never seen (seeds no earlier row used);
* ``env`` — ContextOverflow-v0 steps/s with random masked actions, warm-up and
  later, live and with the pool, vs :class:`NullOverflowEnv`; ``env-fresh`` the
  same live on contexts never seen (target >= 150 steps/s), and the mean CPU time of
  generating such contexts alone, with the steps/s it leaves as a ceiling;
* ``cuts`` — the live env on real-session cuts of at least 3,750, 7,500, 15,000 and
  30,000 tokens (mini-swe-agent sessions, each cut once): CPU time of building a cut and one episode on it vs one
  tiktoken pass over its text, per size, and how that ratio grows from the smallest
  cuts to the largest (target: it does not, <= 1x);
* ``train`` — MaskablePPO wall time for N steps on the env vs on the null env
  (target < 1.5x): live on the default spec, with its pool, and with 2 contexts per
  scenario after 3,000 random steps of another env of the same config warmed the
  process's caches (summaries, embeddings, coherence originals, and the transitions'
  memo, which envs of one config share in a process); training still reaches states
  those steps did not (about 100 a context) and ones the memo, bounded by the env's
  ``cache_size`` (20,000 entries), has let go, and runs strategies there;
* ``oracle`` — exhaustive search per context vs one seed-chain episode;
* ``sweep`` — sweep episodes/s with 1 and 2 workers (fresh processes);
* ``export`` — ``decide`` latency of an exported policy (target < 5 ms; on 50
  units < 1 ms or at most one tiktoken pass cold, < 0.2 ms warm), and what look-ahead
  adds to a whole ``break_context``;
* ``window`` — ContextWindow add and build p95 (design 000: 10 ms / 200 ms);
* ``compaction`` — ``compact_keep_recent`` on 100 messages (design 004: < 5 s);
* ``soak`` — ``--steps N`` env steps of the default spec with its pool (as training
  runs it): RSS growth over the second half of the run and after the first tenth
  (target < 50 MB), and steps/s over time; ``soak-live`` the same without the pool
  (every context generated and broken in-process, the bounded caches filling; the
  only benchmark not in the default run: ``--only soak-live``).

Where they live: :mod:`benchmarks.measure` (timing, rows, cold contexts, the tiktoken
reference), :mod:`benchmarks.targets` (every target), :mod:`benchmarks.text` (tokens,
strategies, summarizer, coherence), :mod:`benchmarks.runtime` (export, window,
compaction), :mod:`benchmarks.environment` (pool, expand, env, cuts, train, oracle,
soak), :mod:`benchmarks.sweeps`; this module runs them and writes the table.

"Cold" means a context seed this process has not seen and an empty summary cache:
its units are embedded, classified (summarizer sections), minified and summarized on
first sight (generation embeds nothing); the tables of words, features and token
counts that other contexts filled stay warm, as in a running process; "warm" repeats
the same input with every cache filled. Generation is
timed only by ``expand`` (a pool generates every context it expands), ``cuts`` (a
cut is read and its probes found) and ``env-fresh`` (every reset draws a new context;
its second row times generation alone).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

from ctxsim.atomic import atomic_write_text
from ctxsim.lab.machine import machine

from .environment import (
    bench_cuts,
    bench_env,
    bench_env_fresh,
    bench_expand,
    bench_oracle,
    bench_pool,
    bench_soak,
    bench_train,
    rate,
)
from .measure import (
    Bench,
    Row,
)
from .runtime import bench_compaction, bench_export, bench_window
from .sweeps import bench_sweep
from .text import bench_coherence, bench_strategies, bench_summarizer, bench_tokens

#: in run order: the runtime figures (export, window, compaction) come before the
#: pool is loaded, so they are measured in a process like a deployed agent's, not
#: one holding a training pool's millions of objects
BENCHMARKS: dict[str, Callable[[Bench], list[Row]]] = {
    "tokens": bench_tokens,
    "strategies": bench_strategies,
    "summarizer": bench_summarizer,
    "coherence": bench_coherence,
    "export": bench_export,
    "window": bench_window,
    "compaction": bench_compaction,
    "oracle": bench_oracle,
    "sweep": bench_sweep,
    "pool": bench_pool,
    "expand": bench_expand,
    "env": bench_env,
    "env-fresh": bench_env_fresh,
    "cuts": bench_cuts,
    "train": bench_train,
    "soak": bench_soak,
    "soak-live": lambda bench: bench_soak(bench, pooled=False),
}
#: not in the default run (``--only soak-live``)
OPT_IN = ("soak-live",)
COLUMNS = ("benchmark", "what", "measured", "reference (same run)", "ratio", "target", "verdict")


# ---- output -------------------------------------------------------------------------------
def cells(row: Row) -> list[str]:
    ratio = "" if row.ratio is None else f"{row.ratio:,.2f}x" if row.ratio >= 0.01 else f"{row.ratio:.1g}x"
    return [row.benchmark, row.what, row.measured, row.reference, ratio, row.target, row.verdict]


def markdown(rows: list[Row], info: dict[str, str], bench: Bench, seconds: float, command: str = "python -m benchmarks") -> str:
    def table(columns, lines) -> list[str]:
        out = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
        out += ["| " + " | ".join(str(c).replace("|", "\\|") for c in line) + " |" for line in lines]
        return out

    parts = ["# ctxsim benchmarks", "",
             f"Generated by `{command}` in {seconds / 60:.1f} min. "
             "Ratio = measured / reference, both measured in this run; medians unless a p95 is shown.", ""]
    parts += table(["machine", ""], list(info.items())) + [""]
    parts += table(COLUMNS, [cells(r) for r in rows]) + [""]
    for name, soak in bench.soaks.items():
        marks = soak.marks
        lines = [[f"{b.steps:,}", f"{b.seconds:,.0f}", f"{rate(a, b):,.1f}", f"{b.rss:,.0f}"] for a, b in zip(marks, marks[1:])]
        parts += [f"## {name}: readings", ""] + table(["steps", "seconds", "steps/s (interval)", "RSS MB"], lines) + [""]
    if bench.notes:
        parts += ["## Notes", ""] + [f"- {note}" for note in bench.notes] + [""]
    return "\n".join(parts)


def run(names: list[str], bench: Bench) -> list[Row]:
    rows: list[Row] = []
    for name in names:
        bench.log(f"benchmark: {name}")
        rows.extend(BENCHMARKS[name](bench))
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description="ctxsim benchmarks (ratios to references).")
    parser.add_argument("--out", help="markdown file for the table (e.g. reports/benchmarks.md)")
    parser.add_argument("--quick", action="store_true", help="few repetitions (a smoke test)")
    parser.add_argument("--only", action="append", choices=sorted(BENCHMARKS), help="run only this benchmark; repeatable")
    parser.add_argument("--steps", type=int, default=1_000_000, help="soak steps (default 1,000,000)")
    args = parser.parse_args(argv)
    if args.steps < 1:
        parser.error(f"--steps must be >= 1, got {args.steps}")
    from rich.console import Console
    from rich.table import Table

    console = Console(stderr=True)
    names = [n for n in BENCHMARKS if n in args.only] if args.only else [n for n in BENCHMARKS if n not in OPT_IN]
    info = machine()
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="ctxsim-bench-") as scratch:
        bench = Bench(args.quick, Path(scratch), soak_steps=args.steps, log=console.log)
        rows = run(names, bench)
    seconds = time.perf_counter() - start
    if hasattr(os, "getloadavg"):
        info["load average at the end"] = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    table = Table(title="ctxsim benchmarks (ratio = measured / reference, same run)", title_justify="left")
    for col in COLUMNS:
        table.add_column(col, overflow="fold")
    for row in rows:
        table.add_row(*cells(row))
    out = Console()
    if not out.is_terminal:  # a file or pipe has no width to respect
        out.width = max(out.width, 200)
    out.print(table)
    if args.out:
        flags = [" --quick"] if args.quick else []
        flags += [f" --only {name}" for name in args.only or []]
        flags += [f" --steps {args.steps}"] if args.steps != 1_000_000 else []
        atomic_write_text(args.out, markdown(rows, info, bench, seconds, "python -m benchmarks" + "".join(flags)))
        console.print(f"written: {args.out}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
