"""What makes a context look like a real agent session, measured: per-context statistics.

:func:`context_stats` reads one :class:`~ctxsim.model.ContextState` (generated or
loaded from a transcript) and returns the statistics of :data:`STATISTICS`, so that
generated contexts and a corpus of real sessions are compared on the same numbers
(:mod:`ctxsim.lab.realism`). Token counts are cl100k tokens of each unit's content plus
its message framing (:meth:`ContextState.unit_cost`); positions are the share of the
context's tokens before a unit (0 = first, near 1 = last).

Roles of a unit: ``system``; ``task`` (the first P1 user message that is not a tool
result, else the first user message); ``tool`` (a tool message, or a user message
that carries a tool result); ``assistant``; ``other user`` (every other user message).

File views: a tool result whose command prints a file (``cat``, ``nl``, ``head``,
``tail``, ``sed -n``, ``grep -n`` on one path; for a non-shell tool, a replayable call
with a target) is a *view* keyed by its normalized command; a later view with the
same key is a *re-shown* file, an *exact* copy when its output is the same, *changed*
otherwise (the file was edited in between).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

import numpy as np

from ..model import ContextState, ContextUnit

#: a unit at least this large is "big" (tokens)
BIG_UNIT_TOKENS = 1000


@dataclass(frozen=True)
class Statistic:
    """One statistic: its key, label, and whether it is a yes/no per context (a share of contexts)."""

    key: str
    label: str
    flag: bool = False


STATISTICS: tuple[Statistic, ...] = (
    Statistic("units", "units"),
    Statistic("unit_tokens_median", "unit tokens, median"),
    Statistic("unit_tokens_p90", "unit tokens, p90"),
    Statistic("unit_tokens_max", "unit tokens, max"),
    Statistic("big_unit_share", f"share of tokens in units >= {BIG_UNIT_TOKENS:,} tokens"),
    Statistic("share_system", "tokens: system"),
    Statistic("share_task", "tokens: task"),
    Statistic("share_other_user", "tokens: other user"),
    Statistic("share_assistant", "tokens: assistant"),
    Statistic("share_tool", "tokens: tool"),
    Statistic("task_position", "task statement position (share of tokens before it)"),
    Statistic("p1_position", "P1 placement (median position of P1 units)"),
    Statistic("p1_last_position", "P1 placement (position of the last P1 unit)"),
    Statistic("distinct_paths", "distinct file paths"),
    Statistic("recurring_path_share", "share of file paths that recur"),
    Statistic("reshown_exact_share", "re-shown files, exact copies (share of tool tokens)"),
    Statistic("reshown_changed_share", "re-shown files, changed after an edit (share of tool tokens)"),
    Statistic("has_numbered_view", "contexts with numbered file views", flag=True),
    Statistic("has_diff", "contexts with diffs", flag=True),
    Statistic("has_traceback", "contexts with tracebacks", flag=True),
)

_PATH = re.compile(
    r"(?<![\w/.-])(?:\./|/testbed/)?((?:[A-Za-z_][\w.-]*/)+[A-Za-z_][\w-]*\.(?:py|pyi|cfg|toml|ini|txt|rst|json|yaml|yml))\b"
)
_CD_PREFIX = re.compile(r"^\s*cd\s+\S+\s*&&\s*")
_VIEW = re.compile(r"^(?:cat(?: -n)?|nl(?: -ba)?|head(?: -n ?\d+| -\d+)?|tail(?: -n ?\d+| -\d+)?|sed -n\s+'[\d,p;]+'|grep -n\s+\S+)\s+(\S+)"
                   r"(?:\s*\|\s*(?:sed -n\s+'[\d,p;]+'|head(?: -n ?\d+| -\d+)?|tail(?: -n ?\d+| -\d+)?))?\s*$")
_NUMBERED_LINE = re.compile(r"^\s*(?:[\w./-]+:)?\d+(?:\t|:|\s{2})", re.MULTILINE)
_DIFF = re.compile(r"^(?:diff --git |@@ -\d+(?:,\d+)? \+\d+)", re.MULTILINE)
_TRACEBACK = "Traceback (most recent call last)"


def unit_role(unit: ContextUnit, task_id: str | None) -> str:
    """``system``, ``task``, ``tool``, ``assistant`` or ``other_user`` (see the module docstring)."""
    if unit.id == task_id:
        return "task"
    if unit.role == "tool" or unit.tool is not None:
        return "tool"
    return {"system": "system", "assistant": "assistant"}.get(unit.role, "other_user")


def task_unit_id(state: ContextState) -> str | None:
    """The task message's id: the first P1 user message that is not a tool result, else the first user message."""
    users = [u for u in state.units if u.role == "user" and u.tool is None]
    first = next((u for u in users if u.priority == 1), users[0] if users else None)
    return first.id if first else None


def file_paths(text: str) -> set[str]:
    """Relative file paths named in ``text`` (``./`` and ``/testbed/`` prefixes removed)."""
    return {m.group(1) for m in _PATH.finditer(text)}


def view_key(unit: ContextUnit) -> str | None:
    """The key of a file view (see the module docstring), None when the unit is not one."""
    tool = unit.tool
    if tool is None:
        return None
    if tool.tool_name != "bash":
        return f"{tool.tool_name} {tool.arguments}" if tool.durability == "replayable" and tool.target else None
    try:
        command = json.loads(tool.arguments).get("command", "")
    except (json.JSONDecodeError, AttributeError):
        return None
    command = _CD_PREFIX.sub("", command if isinstance(command, str) else "").strip()
    match = _VIEW.match(command)
    if not match or not file_paths(match.group(1)):
        return None
    return re.sub(r"(?:\./|/testbed/)", "", command)


def context_stats(state: ContextState) -> dict[str, float]:
    """The statistics of :data:`STATISTICS` for one context (flags as 0.0 / 1.0)."""
    units = state.units
    costs = np.array([state.unit_cost(u) for u in units], dtype=float)
    sizes = np.array([u.token_count for u in units], dtype=float)
    total = float(costs.sum()) or 1.0
    before = np.concatenate([[0.0], np.cumsum(costs)[:-1]]) / total
    task_id = task_unit_id(state)
    roles = [unit_role(u, task_id) for u in units]
    shares = {r: float(costs[[i for i, x in enumerate(roles) if x == r]].sum()) / total
              for r in ("system", "task", "other_user", "assistant", "tool")}
    p1 = [before[i] for i, u in enumerate(units) if u.priority == 1]
    mentions: dict[str, int] = {}
    for u in units:
        for path in file_paths(u.content):
            mentions[path] = mentions.get(path, 0) + 1
    seen: dict[str, str] = {}
    exact = changed = 0.0
    for i, u in enumerate(units):
        key = view_key(u)
        if key is None:
            continue
        if key in seen:
            if seen[key] == u.content:
                exact += costs[i]
            else:
                changed += costs[i]
        seen[key] = u.content
    tool_tokens = float(sum(c for c, r in zip(costs, roles) if r == "tool")) or 1.0
    outputs = [u.content for u, r in zip(units, roles) if r == "tool"]
    return {
        "units": float(len(units)),
        "unit_tokens_median": float(np.median(sizes)),
        "unit_tokens_p90": float(np.percentile(sizes, 90)),
        "unit_tokens_max": float(sizes.max()),
        "big_unit_share": float(sizes[sizes >= BIG_UNIT_TOKENS].sum() / (sizes.sum() or 1.0)),
        **{f"share_{role}": share for role, share in shares.items()},
        "task_position": float(before[state.position(task_id)]) if task_id else 0.0,
        "p1_position": float(np.median(p1)) if p1 else 0.0,
        "p1_last_position": float(max(p1)) if p1 else 0.0,
        "distinct_paths": float(len(mentions)),
        "recurring_path_share": sum(1 for n in mentions.values() if n > 1) / len(mentions) if mentions else 0.0,
        "reshown_exact_share": exact / tool_tokens,
        "reshown_changed_share": changed / tool_tokens,
        "has_numbered_view": float(any(len(_NUMBERED_LINE.findall(text)) >= 3 for text in outputs)),
        "has_diff": float(any(_DIFF.search(text) for text in outputs)),
        "has_traceback": float(any(_TRACEBACK in text for text in outputs)),
    }
