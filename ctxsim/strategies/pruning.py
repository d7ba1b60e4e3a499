"""Design 004's automatic pruning (OpenCode DCP) and keep-recent compaction.

Three zero-LLM-cost prunings of tool calls: ``dedupe_tool_results`` (older copies
of identical calls), ``supersede_writes`` (file writes read back or written again
later; a shell heredoc loses its body in the unit that made the call) and
``purge_errors`` (old failed calls keep only their error). They remove redundancy,
not information, so they run to completion whatever the target (design 004 runs them
on every compaction); tools named in ``protected_tools`` are never pruned.

``compact_keep_recent`` is design 004's AI-driven compaction: everything but the last
N units becomes one structured summary.
"""

from __future__ import annotations

import dataclasses
import json
import posixpath
import re
from functools import lru_cache
from typing import Iterator

from pydantic import Field

from ..latency import Cost
from ..model import ContextState, ContextUnit, ToolEnvelope
from ..transcripts import TOOL_CALL_LINE
from .base import RANK_PRUNE, RANK_SUMMARIZE, Outcome, Params, Strategy, StrategyContext, unchanged
from .common import fewer_tokens, replace_span, summarize_units
from .registry import register
from .shell import FileCommand, file_command, superseded_command
from .window_compaction import JOIN_SLACK_TOKENS, MIN_SUMMARY_TOKENS, summary_budget, summary_floor, summary_header_tokens, summary_saves

#: OpenCode DCP's tools that are never pruned (design 004 §2.2)
DCP_PROTECTED_TOOLS = ("task", "todowrite", "todoread", "distill", "compress", "prune", "batch", "plan_enter", "plan_exit")
#: argument names that hold the file a call touched, when the envelope has no target
_PATH_ARGUMENTS = ("path", "file_path", "filePath", "filename")


class PruneParams(Params):
    """``protected_tools``: tool names whose results are never pruned."""

    protected_tools: tuple[str, ...] = DCP_PROTECTED_TOOLS


def call_target(tool: ToolEnvelope) -> str | None:
    """The resource a call touched: the envelope's target, else a path argument."""
    return tool.target or _call_fields(tool.arguments)[0]


@lru_cache(maxsize=16_384)
def _call_fields(arguments: str) -> tuple[str | None, str | None]:
    """(the first path argument, the ``command`` string) of a call's JSON arguments, each
    None when absent; parsed once per distinct text (every observation and mask of a
    context reads the same calls, a shell call for both fields)."""
    parsed = _json_object(arguments)
    if parsed is None:
        return None, None
    command = parsed.get("command")
    path = next((str(parsed[k]) for k in _PATH_ARGUMENTS if parsed.get(k)), None)
    return path, command if isinstance(command, str) else None


def _json_object(text: str) -> dict | None:
    """A call's JSON arguments as a dict; None when they are not a JSON object."""
    try:
        parsed = json.loads(text)
    except ValueError:
        return None
    return parsed if isinstance(parsed, dict) else None


class _Prune(Strategy):
    """Removes the units :meth:`select` picks; applicable iff it picks any."""

    rank = RANK_PRUNE
    phase = "prune"
    seed = "004"
    Params = PruneParams

    def tool_units(self, state: ContextState) -> list[ContextUnit]:
        """Tool results of unprotected tools, pinned ones included, in order."""
        protected = set(self.params.protected_tools)
        return [u for u in state.units if u.tool is not None and u.tool.tool_name not in protected]

    def select(self, state: ContextState) -> list[ContextUnit]:
        """The units the pruning removes or rewrites, in order (computed once per state
        and parameters: the mask and the observation both read it)."""
        return list(state.derived((type(self), self.params), lambda: tuple(self._select(state))))

    def _select(self, state: ContextState) -> list[ContextUnit]:
        raise NotImplementedError  # pragma: no cover - abstract

    def applicable(self, state: ContextState, ctx: StrategyContext | None = None) -> bool:
        return bool(self.select(state))

    def run(self, state: ContextState, ctx: StrategyContext) -> Outcome:
        gone = {u.id for u in self.select(state)}
        if not gone:
            return unchanged(state, "nothing to prune")
        units = [u for u in state.units if u.id not in gone]
        return Outcome(state.with_units(units, applied=self.id), Cost(units_touched=len(gone)))


@register
class DedupeToolResults(_Prune):
    """Design 004 / DCP deduplication: keep only the newest of identical tool calls.

    Tool results with the same tool name and canonical arguments
    (``ToolEnvelope.call_key``) are copies of one call; every non-pinned copy but
    the newest (by position) is removed. The newest copy holds the current result,
    so an older copy is removed even when it is P1 (no P1 promise by unit id; the
    content survives in the newest copy when the results are identical).

    Parameters: ``protected_tools`` (default DCP's list: task, todowrite, todoread,
    distill, compress, prune, batch, plan_enter, plan_exit). Ignores the target.
    Cost: bookkeeping only (no LLM call).
    """

    id = "dedupe_tool_results"
    display_name = "Deduplicate tool results"
    summary = "Remove older copies of identical tool calls (same tool + arguments), keeping the newest."

    def _select(self, state):
        units = self.tool_units(state)
        newest = {u.tool.call_key: u.id for u in units}
        return [u for u in units if not u.pinned and newest[u.tool.call_key] != u.id]


class SupersedeParams(PruneParams):
    """``write_tools`` / ``read_tools``: tool names that write / read a file;
    ``shell_tools``: tool names that run a shell command (``{"command": ...}``)."""

    write_tools: tuple[str, ...] = ("write_file", "edit_file", "create_file")
    read_tools: tuple[str, ...] = ("read_file",)
    shell_tools: tuple[str, ...] = ("bash",)


@register
class SupersedeWrites(_Prune):
    """Design 004 / DCP supersede-writes: a write read back later is redundant.

    A non-pinned result of a write tool whose target (``ToolEnvelope.target``, else
    a ``path``-like argument) is read later (a later read-tool result on the same
    target, or a shell call's whole-file read of it, whose outcome is not
    ``failure``; paths compared normalized) is removed: the read captures the
    file's current state. Writes may be P1 and are removed all the same.

    Shell tools (a bash-only agent): a whole-file heredoc write of a shell call
    (:func:`~.shell.file_command`, paths compared normalized) is superseded when a
    later whole-file read of the same path (``cat P``, ``nl -ba P``, or a read
    tool's result on it) did not fail,
    or when a later whole-file write of the same path replaced it (an extension of
    design 004: the earlier content is gone from the file). The written text lives
    in the assistant unit that made the call (its ``[tool_call] NAME ARGS`` line
    with the result's tool name and arguments; the nearest assistant unit before
    the result), so that unit is rewritten in place (same id, P1 kept): the
    heredoc's body in that call line becomes ``[superseded: P is shown again
    later]`` / ``[superseded: P is written again later]`` (after the nearest later
    read or write), the line stays ``[tool_call] NAME`` + valid JSON, every other
    line is kept, and the few-token result stays. A unit whose rewrite would not be
    shorter, or that is pinned, is left alone.

    Parameters: ``write_tools`` (default write_file, edit_file, create_file),
    ``read_tools`` (default read_file), ``shell_tools`` (default bash),
    ``protected_tools`` (DCP's list). Ignores the target. Cost: bookkeeping only.
    """

    id = "supersede_writes"
    display_name = "Supersede writes"
    summary = "Remove file writes whose file is read back or written again later (a shell heredoc loses its body in place)."
    Params = SupersedeParams

    def _shown(self, unit: ContextUnit) -> str | None:
        """The file (normalized path) a successful read shows whole: a read tool's target,
        or a shell call's whole-file read (``cat P``, ``nl -ba P``); else None."""
        if unit.tool.outcome == "failure":
            return None
        if unit.tool.tool_name in self.params.read_tools:
            target = call_target(unit.tool)
            return posixpath.normpath(target) if target else None
        if unit.tool.tool_name in self.params.shell_tools:
            op = _shell_file_command(unit.tool.arguments)
            return op.path if op is not None and op.kind == "read" else None
        return None

    def _removed(self, state: ContextState) -> list[ContextUnit]:
        """Write-tool results whose target is read later (by a read tool or a shell read), in order."""
        writes = set(self.params.write_tools)
        read_later: set[str] = set()
        superseded = []
        for u in reversed(self.tool_units(state)):
            shown = self._shown(u)
            if shown is not None:
                read_later.add(shown)
            elif u.tool.tool_name in writes and not u.pinned:
                target = call_target(u.tool)
                if target is not None and posixpath.normpath(target) in read_later:
                    superseded.append(u)
        return superseded[::-1]

    def _rewritten(self, state: ContextState) -> dict[str, ContextUnit]:
        """Assistant unit id -> its rewrite, for every caller of a superseded shell write."""
        shells = set(self.params.shell_tools)
        later: dict[str, str] = {}  # path -> what its nearest later whole-file command did
        markers: dict[str, dict[tuple[str, str], str]] = {}  # caller id -> call key -> marker
        for u in reversed(self.tool_units(state)):
            shown = self._shown(u)
            if shown is not None:
                later[shown] = "shown"
                continue
            op = _shell_file_command(u.tool.arguments) if u.tool.tool_name in shells else None
            if op is None or op.kind == "read":  # not a whole-file command, or a failed read
                continue
            if op.path in later:
                caller = _caller(state, u)
                if caller is not None and not caller.pinned:
                    marker = f"[superseded: {op.path} is {later[op.path]} again later]"
                    markers.setdefault(caller.id, {})[u.tool.call_key] = marker
            later[op.path] = "written"
        out = {}
        for uid, calls in markers.items():
            unit = state.unit(uid)
            rewritten = unit.with_content(_without_bodies(unit.content, calls))
            if rewritten.token_count < unit.token_count:
                out[uid] = rewritten
        return out

    def _select(self, state):
        """The write results to remove and the assistant units to rewrite, in order."""
        picked = {u.id for u in self._removed(state)} | set(self._rewritten(state))
        return [u for u in state.units if u.id in picked]

    def run(self, state, ctx):
        gone = {u.id for u in self._removed(state)}
        rewritten = self._rewritten(state)
        if not gone and not rewritten:
            return unchanged(state, "nothing to prune")
        units = [rewritten.get(u.id, u) for u in state.units if u.id not in gone]
        return Outcome(state.with_units(units, applied=self.id), Cost(units_touched=len(gone) + len(rewritten)))


#: the JSON arguments of a whole-file command hold one of these: the command's first word
#: (:func:`~.shell.file_command`), or a ``\u`` escape that spells it
_FILE_COMMAND_WORDS = ("cat", "nl", "tee", "\\u")


@lru_cache(maxsize=16_384)
def _shell_file_command(arguments: str) -> FileCommand | None:
    """The whole-file write or read of a shell call's JSON arguments (``command``), else None
    (arguments that cannot spell the command's first word are not parsed)."""
    if not any(map(arguments.__contains__, _FILE_COMMAND_WORDS)):
        return None
    command = _call_fields(arguments)[1]
    return file_command(command) if command is not None else None


def _caller(state: ContextState, result: ContextUnit) -> ContextUnit | None:
    """The assistant unit that made ``result``'s call: the nearest assistant unit before
    it, when one of its ``[tool_call]`` lines has the result's tool name and arguments."""
    for unit in reversed(state.units[: state.position(result.id)]):
        if unit.role == "assistant":
            found = any(_call_key(m) == result.tool.call_key for m in TOOL_CALL_LINE.finditer(unit.content))
            return unit if found else None
    return None


def _call_key(line: re.Match) -> tuple[str, str] | None:
    """(tool name, canonical arguments) of a ``[tool_call]`` line, None when its JSON is not an object."""
    parsed = _json_object(line[2] or "{}")
    return None if parsed is None else (line[1], ToolEnvelope.canonical_arguments(parsed))


def _without_bodies(content: str, markers: dict[tuple[str, str], str]) -> str:
    """``content`` with the heredoc body of each call line keyed in ``markers`` replaced
    by its marker (the line's JSON dumped again, every other key and line kept)."""

    def rewrite(line: re.Match) -> str:
        key = _call_key(line)
        if key not in markers:
            return line[0]
        parsed = json.loads(line[2])
        parsed["command"] = superseded_command(parsed["command"], _shell_file_command(key[1]), markers[key])
        return f"[tool_call] {line[1]} {json.dumps(parsed)}"

    return TOOL_CALL_LINE.sub(rewrite, content)


class PurgeParams(PruneParams):
    """``after_turns``: a failed call at least this many turns older than the newest
    turn of the state is purged (DCP's default 4)."""

    after_turns: int = Field(4, ge=0)


def error_text(unit: ContextUnit) -> str:
    """The error message of a failed call: the envelope's, else the first output line
    that mentions an error, else the last non-empty line (at most 300 characters)."""
    if unit.tool is not None and unit.tool.error_message:
        return unit.tool.error_message
    lines = [line.strip() for line in unit.content.splitlines() if line.strip()]
    marked = [line for line in lines if any(w in line.lower() for w in ("error", "exception", "failed"))]
    return (marked[0] if marked else lines[-1])[:300]


@register
class PurgeErrors(_Prune):
    """Design 004 / DCP purge-errors: old failed calls keep only their error message.

    A non-pinned tool result with outcome ``failure`` whose turn is at least
    ``after_turns`` turns before the newest turn of the state has its content
    replaced in place (same unit id) by the envelope's placeholder, which keeps the
    tool name, outcome, key fields and the error message (:func:`error_text`). Units
    whose placeholder would not be shorter are left alone. Every unit survives, so
    P1 units are kept (compressed in place).

    Parameters: ``after_turns`` (turns, default 4), ``protected_tools`` (DCP's
    list). Ignores the target. Cost: bookkeeping only.
    """

    id = "purge_errors"
    display_name = "Purge old errors"
    summary = "Replace failed tool results older than N turns by their error message (same unit)."
    keeps_p1 = True
    Params = PurgeParams

    def _purges(self, state: ContextState) -> Iterator[tuple[ContextUnit, ToolEnvelope]]:
        """(unit, its envelope with the error message) for every unit to purge, in order
        (found lazily: ``applicable`` stops at the first)."""
        if not state.units:
            return
        newest = max(u.turn for u in state.units)
        for u in self.tool_units(state):
            if u.pinned or u.tool.outcome != "failure" or newest - u.turn < self.params.after_turns:
                continue
            envelope = dataclasses.replace(u.tool, error_message=error_text(u))
            if fewer_tokens(envelope.placeholder(), u.token_count):
                yield u, envelope

    def _purged(self, state: ContextState) -> dict[str, ContextUnit]:
        """Unit id -> its purged replacement, for every unit to purge."""
        return {u.id: u.with_content(envelope.placeholder(), tool=envelope) for u, envelope in self._purges(state)}

    def _select(self, state):
        return [u for u, _ in self._purges(state)]

    def applicable(self, state: ContextState, ctx: StrategyContext | None = None) -> bool:
        return next(self._purges(state), None) is not None

    def run(self, state, ctx):
        purged = self._purged(state)
        if not purged:
            return unchanged(state, "no old errors to purge")
        units = [purged.get(u.id, u) for u in state.units]
        return Outcome(state.with_units(units, applied=self.id), Cost(units_touched=len(purged)))


class CompactParams(Params):
    """``keep_recent``: units kept verbatim at the end (design 004 default 6);
    ``max_summary_tokens``: largest summary body (tokens, design 004 default 2000)."""

    keep_recent: int = Field(6, ge=1)
    max_summary_tokens: int = Field(2000, ge=1)


@register
class CompactKeepRecent(Strategy):
    """Design 004's AI-driven compaction: keep the last N units, summarize the rest.

    The last ``keep_recent`` units stay verbatim; every older non-pinned unit
    (earlier summaries included) is folded into one structured summary (the
    summarizer's sections; user rules are kept verbatim) placed where the first of
    them was. The body is what brings the state to the target, at most
    ``max_summary_tokens``, and at least 50 tokens or what the task and the user
    rules need (:func:`~.window.summary_floor`; within ``max_summary_tokens``).
    Not applicable with fewer than ``keep_recent + 2`` units (design 004's "Not
    enough messages to compact"), when the state fits the target, or when the
    older units are smaller than a minimal summary. P1 units may be folded
    (no P1 promise by unit id).

    Parameters: ``keep_recent`` (units, default 6), ``max_summary_tokens``
    (tokens, default 2000). Cost: one summary call over the older units.
    """

    id = "compact_keep_recent"
    display_name = "Compact (keep recent)"
    rank = RANK_SUMMARIZE
    phase = "summarize"
    seed = "004"
    summary = "Summarize everything but the last N units into one structured summary that keeps user rules."
    Params = CompactParams

    @property
    def max_tokens(self) -> int:
        """The summary unit: a body of at most ``max_summary_tokens`` under its header."""
        return self.params.max_summary_tokens + summary_header_tokens() + JOIN_SLACK_TOKENS

    def _older(self, state: ContextState, ctx: StrategyContext) -> tuple[list[ContextUnit], str]:
        """(the units to fold, "") or ([], why not), before the summary's size is known."""
        if len(state.units) < self.params.keep_recent + 2:
            return [], "Not enough messages to compact"
        if state.total_tokens <= ctx.target(state):
            return [], "fits the target"
        older = [u for u in state.units[: -self.params.keep_recent] if not u.pinned]
        return older, "" if older else "only pinned units before the recent ones"

    def _plan(self, state: ContextState, ctx: StrategyContext) -> tuple[list[ContextUnit], int, str]:
        """(older units, summary body tokens, "") or ([], 0, why not)."""
        older, why_not = self._older(state, ctx)
        if not older:
            return [], 0, why_not
        excess = state.total_tokens - ctx.target(state)
        cap = self.params.max_summary_tokens
        floor = min(cap, summary_floor(older, ctx.query_for(state), MIN_SUMMARY_TOKENS))
        body = summary_budget(state, older, excess, cap, floor)
        if not summary_saves(state, older, body):
            return [], 0, "older units are smaller than their summary"
        return older, body, ""

    def applicable(self, state: ContextState, ctx: StrategyContext | None = None) -> bool:
        ctx = ctx or StrategyContext()
        older = self._older(state, ctx)[0]
        # the body is at most max_summary_tokens whatever its floor: older units that outweigh
        # a summary of that size are saved on without reading them for the floor
        return bool(older) and (summary_saves(state, older, self.params.max_summary_tokens) or bool(self._plan(state, ctx)[0]))

    def run(self, state: ContextState, ctx: StrategyContext) -> Outcome:
        older, body, why_not = self._plan(state, ctx)
        if not older:
            return unchanged(state, why_not)
        unit, cost = summarize_units(state, older, body, ctx, prefix="compact")
        units = replace_span(state.units, {u.id for u in older}, unit)
        return Outcome(state.with_units(units, applied=self.id), cost)
