"""The end-to-end demo behind ``make demo``.

Today it generates one context per shipped scenario and describes the suite: units,
tokens against the limit, overflow, type mix and planted facts.
"""

from __future__ import annotations

import argparse
import time


def describe_suite(seed: int = 0) -> list[dict]:
    from .scenarios import DEFAULT_SUITE, build_context, load_scenarios

    rows = []
    for sc in load_scenarios(DEFAULT_SUITE):
        started = time.perf_counter()
        state = build_context(sc, seed)
        ms = (time.perf_counter() - started) * 1000
        by_type = state.tokens_by_type
        top = sorted(by_type.items(), key=lambda kv: -kv[1])[:3]
        rows.append(
            {
                "scenario": sc.name,
                "units": len(state.units),
                "tokens": state.total_tokens,
                "limit": state.limit,
                "overflow": state.total_tokens / state.limit,
                "mix": ", ".join(f"{t} {v / state.total_tokens:.0%}" for t, v in top),
                "facts": len(state.fact_table),
                "p1_units": sum(u.priority == 1 for u in state.units),
                "generate_ms": ms,
            }
        )
    return rows


def run_demo(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    rows = describe_suite()
    table = Table(title="ctxsim scenario suite (seed 0)", title_justify="left")
    for col in ("scenario", "units", "tokens", "limit", "overflow", "top types", "facts", "P1 units", "gen ms"):
        table.add_column(col)
    for r in rows:
        table.add_row(
            r["scenario"], str(r["units"]), f"{r['tokens']:,}", f"{r['limit']:,}", f"{r['overflow']:.2f}×",
            r["mix"], str(r["facts"]), str(r["p1_units"]), f"{r['generate_ms']:.0f}",
        )
    console.print(table)
    return 0
