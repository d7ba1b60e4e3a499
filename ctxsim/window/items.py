"""Context items of the runtime window (design 000) and their mapping to context units.

A :class:`ContextItem` is what an agent puts into a :class:`~ctxsim.window.ContextWindow`:
content with a design 000 type, a 0–100 priority and a pinned flag. Strategies and
learned policies work on :class:`~ctxsim.model.ContextState`, so the window maps its
items to units and back with :func:`item_to_unit` and :func:`items_from_state`:

===================  ==============  =========
item type            unit type       unit role
===================  ==============  =========
system_prompt        message         system
instruction          plan_ref        user
retrieved_document   other           user
working_memory       other           assistant
tool_result          tool_result     tool
user_message         message         user
assistant_message    message         assistant
other                other           user
===================  ==============  =========

An item's own ``role``, when set, replaces the type's role. Priorities map to seed
001's tags by design 000's bands: 71–100 → P1, 31–70 → P2, 0–30 → P3; the exact
priority travels in the unit's ``meta`` as ``item_priority``. Units are in
chronological order (``added_at``), so "oldest" means added first.

A ``tool_result`` item that names its tool (``metadata["tool_name"]``; the call's
``metadata["arguments"]``, a dict or its JSON text, and ``metadata["call_id"]`` when the
agent has them) becomes a unit with a tool envelope (:func:`item_tool`), as a tool
result of a transcript does: the strategies that work on tool results (deduplicating
re-run calls, superseded writes, clearing and externalizing results that cannot be
fetched again) see it as one.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Any, Callable, Iterable, Mapping

from ..errors import ContextError, describe_value
from ..model import ROLES, UNIT_TYPES, ContextState, ContextUnit, ToolEnvelope
from ..strategies.window_compaction import ITEM_PRIORITY_META
from ..tokens import count_tokens
from ..transcripts import tool_arguments, tool_envelope

#: design 000's ContextItemType, in ordering rank (lower ranks come first)
TYPE_RANK: dict[str, int] = {
    "system_prompt": 0,
    "instruction": 1,
    "retrieved_document": 2,
    "working_memory": 3,
    "tool_result": 4,
    "user_message": 5,
    "assistant_message": 6,
    "other": 99,
}
ITEM_TYPES = tuple(TYPE_RANK)

#: item type -> (unit type, default role)
UNIT_MAPPING: dict[str, tuple[str, str]] = {
    "system_prompt": ("message", "system"),
    "instruction": ("plan_ref", "user"),
    "retrieved_document": ("other", "user"),
    "working_memory": ("other", "assistant"),
    "tool_result": ("tool_result", "tool"),
    "user_message": ("message", "user"),
    "assistant_message": ("message", "assistant"),
    "other": ("other", "user"),
}

#: lowest item priority of each unit priority tag (design 000's bands)
BAND_FLOOR = {1: 71, 2: 31, 3: 0}
SYNTHETIC_TYPE = "working_memory"
SYNTHETIC_ROLE = "assistant"


def _new_id() -> str:
    return uuid.uuid4().hex


def check_priority(priority: Any, obj: str = "ContextItem") -> int:
    """``priority`` if it is an int in 0–100, else a ContextError naming the field."""
    if isinstance(priority, bool) or not isinstance(priority, int) or not 0 <= priority <= 100:
        raise ContextError(f"{obj}.priority must be an integer in 0-100, got {describe_value(priority)}", key="priority")
    return priority


def check_type(item_type: Any, obj: str = "ContextItem") -> str:
    """``item_type`` if it is a design 000 item type, else a ContextError naming the field."""
    if item_type not in TYPE_RANK:
        raise ContextError(f"{obj}.type must be one of {list(ITEM_TYPES)}, got {describe_value(item_type)}", key="type")
    return item_type


def priority_band(priority: int) -> int:
    """Design 001 priority tag of a 0–100 priority: 71–100 → 1, 31–70 → 2, 0–30 → 3."""
    return 1 if priority >= BAND_FLOOR[1] else 2 if priority >= BAND_FLOOR[2] else 3


@dataclass(frozen=True)
class ContextItem:
    """One piece of context in a window (design 000's ``ContextItem``).

    ``content`` must not be blank; ``type`` is one of :data:`ITEM_TYPES`;
    ``priority`` 0–100 (higher = more important; 50 normal); ``pinned`` items
    survive every compaction. ``id`` defaults to a random uuid4 hex (the only
    randomness of the window; pass ids for reproducible runs). ``role`` (system,
    user, assistant, tool or None) is used by the build's message format.
    ``token_count`` is the exact cl100k count of ``content`` (computed, tokens).
    ``added_at`` is the window's sequence number at insertion (-1 before), not
    wall time. ``metadata`` is treated as read-only.
    """

    content: str
    type: str
    priority: int = 50
    pinned: bool = False
    id: str = field(default_factory=_new_id)
    role: str | None = None
    source_ref: str | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict, hash=False)
    added_at: int = -1
    token_count: int = field(init=False)

    def __post_init__(self) -> None:
        if not isinstance(self.id, str) or not self.id:
            raise ContextError(f"ContextItem.id must be a non-empty string, got {describe_value(self.id)}", key="id")
        if not isinstance(self.content, str) or not self.content.strip():
            raise ContextError(f"ContextItem {self.id!r}: content must not be empty, got {describe_value(self.content)}", key="content")
        check_type(self.type, f"ContextItem {self.id!r}")
        check_priority(self.priority, f"ContextItem {self.id!r}")
        if self.role is not None and self.role not in ROLES:
            raise ContextError(
                f"ContextItem {self.id!r}.role must be one of {list(ROLES)} or None, got {describe_value(self.role)}", key="role"
            )
        if self.pinned not in (True, False):  # "false" or 2 would read as pinned
            raise ContextError(f"ContextItem {self.id!r}.pinned must be True or False, got {describe_value(self.pinned)}",
                               key="pinned")
        if self.source_ref is not None and not isinstance(self.source_ref, str):
            raise ContextError(f"ContextItem {self.id!r}.source_ref must be a string or None, got "
                               f"{describe_value(self.source_ref)}", key="source_ref")
        if not isinstance(self.metadata, Mapping):
            raise ContextError(f"ContextItem {self.id!r}.metadata must be a mapping, got {describe_value(self.metadata)}",
                               key="metadata")
        if isinstance(self.added_at, bool) or not isinstance(self.added_at, int):
            raise ContextError(f"ContextItem {self.id!r}.added_at must be a whole number, got {describe_value(self.added_at)}",
                               key="added_at")
        object.__setattr__(self, "pinned", bool(self.pinned))
        object.__setattr__(self, "metadata", dict(self.metadata))
        _check_metadata(self)
        object.__setattr__(self, "token_count", count_tokens(self.content))

    @property
    def rank(self) -> tuple[int, int, int, str]:
        """Sort key of design 000's ordering: type rank, priority descending, added_at, id."""
        return (TYPE_RANK[self.type], -self.priority, self.added_at, self.id)

    @property
    def unit_role(self) -> str:
        """The chat role of the item: its own role, else its type's (see the table)."""
        return self.role or UNIT_MAPPING[self.type][1]


def ordered(items: Iterable[ContextItem]) -> list[ContextItem]:
    """Items in design 000's order: type rank, then priority descending, then added first."""
    return sorted(items, key=lambda i: i.rank)


def chronological(items: Iterable[ContextItem]) -> list[ContextItem]:
    """Items in insertion order (``added_at``, then id)."""
    return sorted(items, key=lambda i: (i.added_at, i.id))


def item_tool(item: ContextItem) -> ToolEnvelope | None:
    """The tool envelope of a ``tool_result`` item that names its tool (module doc),
    else None; an ``arguments`` entry that is neither a dict nor text raises
    ContextError naming the item."""
    name = item.metadata.get("tool_name") if item.type == "tool_result" else None
    if not isinstance(name, str) or not name:
        return None
    arguments = _check_arguments(item)
    if isinstance(arguments, dict):
        arguments = json.dumps(arguments, sort_keys=True, default=str)
    return _tool_envelope(name, arguments, item.content, str(item.metadata.get("call_id") or f"call-{item.id}"))


def _check_metadata(item: ContextItem) -> None:
    """The metadata keys the window reads, checked when the item is made (so that no
    compaction of the window fails on them later): ``summary_depth`` a whole number
    >= 0, ``tool_name``, ``call_id`` and ``unit_type`` text, ``arguments`` a dict or
    JSON text (:func:`_check_arguments`); ContextError naming the item and the key."""
    depth = item.metadata.get("summary_depth", 0)
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < 0:
        raise ContextError(f"ContextItem {item.id!r}: metadata['summary_depth'] must be a whole number >= 0, got "
                           f"{describe_value(depth)}", key="metadata.summary_depth")
    for key in ("tool_name", "call_id", "unit_type"):
        value = item.metadata.get(key)
        if value is not None and not isinstance(value, str):
            raise ContextError(f"ContextItem {item.id!r}: metadata[{key!r}] must be text, got {describe_value(value)}",
                               key=f"metadata.{key}")
    _check_arguments(item)


def _check_arguments(item: ContextItem) -> dict | str:
    """The call's ``metadata["arguments"]`` of a ``tool_result`` item (``""`` when
    absent); one that is neither a dict nor text raises ContextError naming the item
    (when the item is made, so that no compaction of the window fails on it later)."""
    arguments = item.metadata.get("arguments", "") if item.type == "tool_result" else ""
    if not isinstance(arguments, (dict, str)):
        raise ContextError(f"ContextItem {item.id!r}: metadata['arguments'] must be a dict or JSON text, got "
                           f"{describe_value(arguments)}", key="metadata.arguments")
    return arguments


@lru_cache(maxsize=4096)
def _tool_envelope(name: str, arguments: str, content: str, call_id: str) -> ToolEnvelope:
    """:func:`~ctxsim.transcripts.tool_envelope`, once per item (a window maps its
    items to units at every compaction)."""
    return tool_envelope(name, tool_arguments(arguments), content, call_id)


def item_to_unit(item: ContextItem) -> ContextUnit:
    """The context unit that stands for ``item`` (see the module table).

    A synthetic item keeps the unit type it came from (``metadata["unit_type"]``,
    e.g. ``summary``) and its ``summary_depth``. Its ``source_ids`` are not carried
    over, so a later summary of it lists the item itself among what it replaces.
    """
    unit_type = item.metadata.get("unit_type")
    if unit_type not in UNIT_TYPES:
        unit_type = UNIT_MAPPING[item.type][0]
    return ContextUnit(
        id=item.id,
        type=unit_type,
        content=item.content,
        role=item.unit_role,
        turn=max(item.added_at, 0),
        timestamp=float(max(item.added_at, 0)),
        priority=priority_band(item.priority),
        pinned=item.pinned,
        token_count=item.token_count,
        summary_depth=item.metadata.get("summary_depth", 0),  # checked when the item was made
        meta=((ITEM_PRIORITY_META, str(item.priority)), ("item_type", item.type)),
        tool=item_tool(item),
    )


def items_to_state(items: Iterable[ContextItem], *, limit: int, **state_fields: Any) -> ContextState:
    """A context state of ``items`` in chronological order (limit in tokens)."""
    units = tuple(item_to_unit(i) for i in chronological(items))
    return ContextState(units=units, limit=limit, **state_fields)


def items_from_state(
    before: Mapping[str, ContextItem], state: ContextState, next_tick: Callable[[], int]
) -> list[ContextItem]:
    """Map a strategy's output state back to items, given the items it started from.

    A unit whose id is a ``before`` item keeps that item (with the unit's content
    when a strategy compressed it). Any other unit is synthetic (summary, placeholder,
    pointer): it becomes a new ``working_memory`` item, role ``assistant``, whose
    priority is the lowest of the items it replaces (``source_ids`` that are gone
    from the state; the unit tag's band floor when there are none) and whose
    ``added_at`` is that of the first item it replaces (``next_tick()`` when none),
    so chronological order is kept. Its metadata records ``replaces`` (item ids),
    ``summary_depth`` and ``unit_type``.
    """
    out: list[ContextItem] = []
    for unit in state.units:
        item = before.get(unit.id)
        if item is not None:
            out.append(item if unit.content == item.content else replace(item, content=unit.content))
            continue
        replaced = [before[s] for s in unit.source_ids if s in before and s not in state]
        out.append(
            ContextItem(
                content=unit.content,
                type=SYNTHETIC_TYPE,
                priority=min((i.priority for i in replaced), default=BAND_FLOOR[unit.priority]),
                id=unit.id,
                role=SYNTHETIC_ROLE,
                metadata={
                    "replaces": tuple(i.id for i in replaced),
                    "summary_depth": unit.summary_depth,
                    "unit_type": unit.type,
                },
                added_at=min(i.added_at for i in replaced) if replaced else next_tick(),
            )
        )
    return out
