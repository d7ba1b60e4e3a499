"""Compaction plans as data, and the renderer that applies one (design 002).

A strategy returns the compacted state; :func:`plan_of` states what it decided as
a :class:`CompactionPlan` — records keyed by the ids of the messages (units) of
the thread it was applied to — so that a decision can be printed, cached, compared
and applied to an agent's own message list. :func:`render` is the other half:
thread + plan → the compacted thread; ``render(before, plan_of(before, after))``
gives ``after``'s units back, for every strategy.

Actions and their precedence (design 002: a message id belongs to one record; when
records overlap, the higher precedence wins and a warning is kept):

========== ========== ===============================================================
action     precedence  the message ...
========== ========== ===============================================================
drop       4           is left out
externalize 3          is replaced, with the rest of its span, by one pointer unit
summarize  2           is replaced, with the rest of its span, by one unit (a
                       summary, a placeholder, a handover)
rewrite    1           keeps its id and gets new content (design 002's *clear*: a
                       placeholder with preserved fields; also in-place compression)
include    0           is kept as it is (the default; no record)
========== ========== ===============================================================

A span's replacement is rendered once, at its anchor: the first message of the
span by default, or a later one when the strategy keeps some messages of the span's
range before the replacement (fresh start keeps pinned units ahead of its handover).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from .model import ContextState, ContextUnit


class Action(str, Enum):
    INCLUDE = "include"
    REWRITE = "rewrite"
    SUMMARIZE = "summarize"
    EXTERNALIZE = "externalize"
    DROP = "drop"


PRECEDENCE = {Action.INCLUDE: 0, Action.REWRITE: 1, Action.SUMMARIZE: 2, Action.EXTERNALIZE: 3, Action.DROP: 4}


@dataclass(frozen=True)
class PlanRecord:
    """One decision over a span of messages (ids in thread order, never empty).

    ``replacement`` is the unit rendered in the span's place (None for drop);
    for rewrite the span is one message and the replacement keeps its id.
    ``tokens`` is what the span's messages held (cl100k, informative); ``anchor``
    the span message at which the replacement is rendered (default: the first).
    """

    action: Action
    message_ids: tuple[str, ...]
    replacement: ContextUnit | None = None
    tokens: int = 0
    anchor: str = ""

    def __post_init__(self) -> None:
        if not self.message_ids:
            raise ValueError("a plan record needs at least one message id")
        if (self.replacement is None) != (self.action is Action.DROP):
            raise ValueError(f"a {self.action.value} record {'needs' if self.replacement is None else 'has no'} replacement")
        if not self.anchor:
            object.__setattr__(self, "anchor", self.message_ids[0])
        elif self.anchor not in self.message_ids:
            raise ValueError(f"anchor {self.anchor!r} is not a message of the record")


@dataclass(frozen=True)
class CompactionPlan:
    """What one compaction decided: records with precedence, normalized by id.

    ``strategy`` names the decision's author; ``tokens_before``/``tokens_after`` are
    the thread's tokens before and after rendering (cl100k, with message framing).
    """

    strategy: str
    records: tuple[PlanRecord, ...]
    tokens_before: int = 0
    tokens_after: int = 0
    _actions: dict[str, PlanRecord] = field(default_factory=dict, init=False, repr=False, compare=False)
    warnings: tuple[str, ...] = field(default=(), init=False, compare=False)

    def __post_init__(self) -> None:
        actions: dict[str, PlanRecord] = {}
        warnings: list[str] = []
        for record in sorted(self.records, key=lambda r: PRECEDENCE[r.action]):
            for mid in record.message_ids:
                previous = actions.get(mid)
                if previous is not None:
                    warnings.append(
                        f"message {mid} in both {previous.action.value} and {record.action.value}; "
                        f"{record.action.value} takes precedence"
                    )
                actions[mid] = record
        object.__setattr__(self, "_actions", actions)
        object.__setattr__(self, "warnings", tuple(warnings))

    def action_of(self, message_id: str) -> tuple[Action, PlanRecord | None]:
        """The action for a message and its record (include: no record)."""
        record = self._actions.get(message_id)
        return (Action.INCLUDE, None) if record is None else (record.action, record)

    def describe(self) -> str:
        """The plan as text, one record a line (what ``ctxsim plan`` prints)."""
        lines = [f"compaction plan of {self.strategy}: {self.tokens_before:,} -> {self.tokens_after:,} tokens"]
        if not self.records:
            lines.append("  (no change: every message is included)")
        for r in self.records:
            ids = r.message_ids[0] if len(r.message_ids) == 1 else f"{r.message_ids[0]}..{r.message_ids[-1]}"
            count = f"{len(r.message_ids)} message{'s' * (len(r.message_ids) > 1)}"
            what = f"  {r.action.value:<11} {ids} ({count}, {r.tokens:,} tokens)"
            if r.replacement is not None:
                u = r.replacement
                what += f" -> {u.id} [{u.type}, {u.token_count:,} tokens]"
            lines.append(what)
        lines.extend(f"  warning: {w}" for w in self.warnings)
        return "\n".join(lines)


def plan_of(before: ContextState, after: ContextState, strategy: str = "") -> CompactionPlan:
    """The plan that turns ``before`` into ``after`` (both of one strategy step).

    A unit of ``before`` missing from ``after`` is summarized or externalized into
    the new unit that stands for it (by ``source_ids``), else dropped; a unit kept
    with other content is rewritten. New units that stand for no missing unit are
    not expressible as a plan and raise ValueError.
    """
    new_units = [u for u in after.units if u.id not in before]
    owner: dict[str, ContextUnit] = {}
    for unit in new_units:
        for sid in unit.source_ids:
            owner.setdefault(sid, unit)
    spans: dict[str, list[str]] = {}
    records: list[PlanRecord] = []
    for u in before.units:
        if u.id in after:
            kept = after.unit(u.id)
            if kept.content != u.content or kept != u:
                records.append(PlanRecord(Action.REWRITE, (u.id,), kept, u.token_count))
            continue
        target = owner.get(u.id) or next((owner[s] for s in u.source_ids if s in owner), None)
        if target is None:
            records.append(PlanRecord(Action.DROP, (u.id,), tokens=u.token_count))
        else:
            spans.setdefault(target.id, []).append(u.id)
    order = {uid: i for i, uid in enumerate(before.unit_ids)}
    anchor_at: dict[str, int] = {}  # position in ``before`` of each new unit's anchor
    previous = -1  # position in ``before`` of the unit rendered last
    for unit in after.units:
        if unit.id in before:
            previous = order[unit.id]
            continue
        ids = spans.get(unit.id)
        if not ids:
            raise ValueError(f"{strategy or 'the step'} added unit {unit.id!r} that stands for no removed unit")
        anchor = next((i for i in ids if order[i] > previous), ids[0])
        previous = anchor_at[unit.id] = order[anchor]
        action = Action.EXTERNALIZE if "artifact_id" in unit.meta_dict else Action.SUMMARIZE
        records.append(PlanRecord(action, tuple(ids), unit, sum(before.unit(i).token_count for i in ids), anchor))
    records.sort(key=lambda r: order[r.message_ids[0]])
    return CompactionPlan(strategy, tuple(records), before.total_tokens, after.total_tokens)


def render(thread: ContextState, plan: CompactionPlan) -> ContextState:
    """``thread`` with ``plan`` applied (design 002's renderer): dropped messages left
    out, rewritten ones replaced in place, each summarized or externalized span
    replaced once by its unit at its anchor (at its first message present when the
    thread lacks the anchor or a record of higher precedence took it); the history records the plan's strategy. Message ids
    the plan names but the thread lacks are ignored."""
    present = set(thread.unit_ids)
    units: list[ContextUnit] = []
    rendered: set[int] = set()
    for unit in thread.units:
        action, record = plan.action_of(unit.id)
        if action is Action.INCLUDE:
            units.append(unit)
        elif action is Action.REWRITE:
            units.append(record.replacement)
        elif action is not Action.DROP and id(record) not in rendered:
            anchored = record.anchor in present and plan.action_of(record.anchor)[1] is record
            if anchored and unit.id != record.anchor:
                continue
            rendered.add(id(record))
            units.append(record.replacement)
    return thread.with_units(units, applied=plan.strategy or None)
