"""An exported policy's ``compact_messages`` beside LangChain's ``trim_messages`` on real sessions.

Each session of a split of the corpus (``data/transcripts/mini-swe-agent``; by default
the held-out split, astropy and marshmallow, which no shipped experiment trains or
selects on) is cut
after a share of its messages (:func:`ctxsim.cuts.cut_index`); the messages before the
cut are what an agent would send, the rest is what it went on to do, and the strings
of the context that the rest uses again are the probes (:mod:`ctxsim.cuts`), with the
task line and the agent template's instructions the cut states (listed by hand in
``--instructions``, default ``data/transcripts/instructions.yaml``). Both
compact the context to ``--fraction`` of its tokens:

* ``compact_messages``: the exported policy's chain, one call, messages in and out, the
  newest turn (the agent's last call and its result) held back from the break;
* ``compact_messages(keep_newest=False)``: the chain on every message, as the policy was
  trained and evaluated;
* ``trim_messages(strategy="last", include_system=True)``: LangChain's trim, counting
  tokens as ctxsim does (cl100k with the per-message overhead).

Printed per method: messages and tokens after (ctxsim's count of the returned
messages), the share of the probes the returned messages still hold, whether the
task statement (the first user message) is still there, and whether the newest message
(the result of the agent's last call) came back as it was sent.

    python examples/compact_vs_trim.py EXPORT_DIR [--sessions N] [--split held_out] [--cut 0.6]
        [--fraction 0.5] [--instructions FILE]

Needs the ``peers`` extra (``langchain-core``), part of ``dev``.
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
import sys
from pathlib import Path

from langchain_core.messages import (
    convert_to_messages,
    convert_to_openai_messages,
    trim_messages,
)

from ctxsim.errors import CtxsimError
from ctxsim.lab.corpus import corpus_files
from ctxsim.lab.scenarios import load_instructions
from ctxsim.paths import DATA_DIR
from ctxsim.policies import load
from ctxsim.probes import share_answered
from ctxsim.transcripts import context_from_messages, load_transcript


def read_messages(path: Path) -> list[dict]:
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def text_of(messages: list[dict]) -> str:
    """Everything a model would read of ``messages``: contents and tool-call arguments."""
    parts = []
    for m in messages:
        content = m.get("content")
        parts.append(content if isinstance(content, str) else json.dumps(content) if content else "")
        parts += [json.dumps(call.get("function", call)) for call in m.get("tool_calls") or []]
    return "\n".join(parts)


def tokens_of(messages: list[dict]) -> int:
    """ctxsim's count of chat messages (cl100k, with the per-message overhead): what
    the limit means for both methods."""
    return context_from_messages(messages).total_tokens if messages else 0


def trimmed(messages: list[dict], limit: int) -> list[dict]:
    """LangChain's ``trim_messages`` keeping the newest whole messages within ``limit``
    tokens as :func:`tokens_of` counts them, the system message kept."""
    ids = [{**m, "tool_call_id": m.get("tool_call_id") or f"call-{i}"} if m["role"] == "tool" else m
           for i, m in enumerate(messages)]
    kept = trim_messages(convert_to_messages(ids), max_tokens=limit, strategy="last", include_system=True,
                         token_counter=lambda msgs: tokens_of(convert_to_openai_messages(msgs)), allow_partial=False)
    return convert_to_openai_messages(kept)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("export", help="an export folder (ctxsim export RUN --out DIR)")
    parser.add_argument("--sessions", type=int, default=16, help="sessions, the first of the split (default 16)")
    parser.add_argument("--split", choices=["train", "validation", "held_out"], default="held_out",
                        help="the corpus split the sessions come from (default held_out)")
    parser.add_argument("--cut", type=float, default=0.6, help="share of each session's messages kept as context")
    parser.add_argument("--fraction", type=float, default=0.5, help="token limit as a share of the cut context")
    parser.add_argument("--instructions", type=Path, default=DATA_DIR / "transcripts" / "instructions.yaml",
                        help="the user's instructions, listed by hand: decision probes where the cut states them")
    args = parser.parse_args(argv)
    try:
        instructions = load_instructions(str(args.instructions), args.instructions.stat().st_mtime_ns)
        policy = load(args.export)
    except (CtxsimError, OSError) as exc:  # one line, as the ctxsim command prints it
        print(f"compact_vs_trim: error: {exc}", file=sys.stderr)
        return 2
    rows: dict[str, list[tuple[int, int, float, bool, bool]]] = {
        "compact_messages": [], "compact_messages(keep_newest=False)": [], "trim_messages": []}
    limits = []
    for path in corpus_files(split=args.split)[: args.sessions]:
        cut = load_transcript(path, cut=args.cut, instructions=instructions)  # its first messages; its facts, the probes
        messages = read_messages(path)[: len(cut.units)]
        limit = int(cut.total_tokens * args.fraction)
        limits.append(limit)
        task = next(m["content"] for m in messages if m["role"] == "user")
        for name, out in (("compact_messages", policy.compact_messages(messages, limit)),
                          ("compact_messages(keep_newest=False)", policy.compact_messages(messages, limit, keep_newest=False)),
                          ("trim_messages", trimmed(messages, limit))):
            text = text_of(out)
            tokens = tokens_of(out)
            rows[name].append((len(out), tokens, share_answered(cut.fact_table, text), task in text,
                               bool(out) and out[-1] == messages[-1]))
    print(f"{len(limits)} {args.split.replace('_', '-')} sessions, cut at {args.cut:.0%} of their messages, compacted to "
          f"{args.fraction:.0%} of the cut's tokens (limit {statistics.mean(limits):,.0f} tokens on average; means)\n")
    print("| method | messages | tokens | probes held | task kept | newest kept |")
    print("|---|---|---|---|---|---|")
    for name, values in rows.items():
        messages, tokens, probes, task, newest = zip(*values)
        print(f"| `{name}` | {statistics.mean(messages):.1f} | {statistics.mean(tokens):,.0f} | "
              f"{statistics.mean(probes):.2f} | {sum(task)}/{len(task)} | {sum(newest)}/{len(newest)} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
