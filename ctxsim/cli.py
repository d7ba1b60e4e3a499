"""The ``ctxsim`` command line.

Every subcommand is one function ``cmd_<name>(args)`` registered in :func:`build_parser`.
Bad input (a ctxsim error, a missing or unreadable file) prints one line on stderr
and exits with code 2; no traceback, and no half-written output file.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .errors import CtxsimError


def _console():
    from rich.console import Console

    return Console()


def _table(title: str, columns: list[str], rows: list[list[object]]):
    from rich.table import Table

    table = Table(title=title, title_justify="left")
    for col in columns:
        table.add_column(col, overflow="fold")
    for row in rows:
        table.add_row(*[str(c) for c in row])
    return table


# ---- scenarios / generate ------------------------------------------------------------
def cmd_scenarios_list(args: argparse.Namespace) -> int:
    from .scenarios import DEFAULT_SUITE, load_scenarios

    suite = Path(args.suite) if args.suite else DEFAULT_SUITE
    rows = []
    for sc in load_scenarios(suite):
        rows.append([sc.name, f"{sc.resolved_limit:,}", f"{sc.resolved_target:,}", sc.description or ""])
    _console().print(_table(f"Scenarios in {suite}", ["name", "limit", "target tokens", "description"], rows))
    return 0


def cmd_generate(args: argparse.Namespace) -> int:
    from .atomic import atomic_write_text
    from .scenarios import build_context, find_scenario
    from .serialize import dumps_state

    scenario = find_scenario(args.scenario, args.suite)
    state = build_context(scenario, args.seed)
    text = dumps_state(state)
    if args.out == "-":
        sys.stdout.write(text)
    else:
        atomic_write_text(args.out, text)
        _console().print(
            f"{scenario.name} seed {args.seed}: {len(state.units)} units, {state.total_tokens:,} tokens "
            f"(limit {state.limit:,}), {len(state.fact_table)} planted facts -> {args.out}"
        )
    return 0


def cmd_strategies(args: argparse.Namespace) -> int:
    from .strategies import describe_strategies

    rows = [
        [r["id"], r["rank"], r["seed"], "yes" if r["keeps_p1"] else "", r["summary"],
         ", ".join(f"{k}={v}" for k, v in r["params"].items())]
        for r in describe_strategies()
    ]
    _console().print(_table("Strategies (ladder order)", ["id", "rank", "seed", "keeps P1", "what it does", "parameters"], rows))
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from .demo import run_demo

    return run_demo(args)


# ---- parser -----------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ctxsim", description="Context-overflow RL harness.")
    sub = parser.add_subparsers(dest="command", required=True)

    sc = sub.add_parser("scenarios", help="scenario suites")
    sc_sub = sc.add_subparsers(dest="scenarios_command", required=True)
    sc_list = sc_sub.add_parser("list", help="list the scenarios of a suite")
    sc_list.add_argument("--suite", help="scenario file or folder (default: the shipped suite)")
    sc_list.set_defaults(func=cmd_scenarios_list)

    gen = sub.add_parser("generate", help="generate one overflowing context as JSON")
    gen.add_argument("--scenario", required=True, help="scenario name in the suite, or a scenario YAML file")
    gen.add_argument("--suite", help="scenario suite to look the name up in")
    gen.add_argument("--seed", type=int, default=0)
    gen.add_argument("--out", required=True, help="output JSON file ('-' for stdout)")
    gen.set_defaults(func=cmd_generate)

    st = sub.add_parser("strategies", help="list the registered strategies")
    st.set_defaults(func=cmd_strategies)

    demo = sub.add_parser("demo", help="the end-to-end demo (what `make demo` runs)")
    demo.add_argument("--out", default="reports/demo", help="output folder")
    demo.add_argument("--quick", action="store_true", help="shortened budgets")
    demo.set_defaults(func=cmd_demo)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except CtxsimError as exc:
        print(f"ctxsim: error: {exc}", file=sys.stderr)
        return 2
    except (FileNotFoundError, IsADirectoryError, PermissionError, NotADirectoryError) as exc:
        print(f"ctxsim: error: {exc.strerror or exc}: {exc.filename}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("ctxsim: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
