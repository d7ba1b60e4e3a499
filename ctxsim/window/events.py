"""Design 000's context-window events and the hub that delivers them.

Every event is a frozen dataclass with the seed's fields. ``timestamp`` is the
window's sequence number (the same counter that stamps ``ContextItem.added_at``),
not wall time, so a single-threaded run produces the same events every time.
Token fields are tokens; usage fields are percent of ``max_tokens``.

Event names for :meth:`ContextWindow.on`: ``"added"``, ``"removed"``,
``"compacted"``, ``"cleared"``, ``"built"``.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Callable, ClassVar, Iterable

from ..errors import ContextError, describe_value
from .telemetry import log_event

#: why an item left the window (design 000's "Manual", "Compaction", "Clear")
REMOVAL_REASONS = ("manual", "compaction", "clear")
#: why a compaction ran: an explicit compact(), the add threshold, the window's recovery
#: when that left no room, or a build over budget
COMPACTION_REASONS = ("manual", "threshold", "recovery", "build")


@dataclass(frozen=True)
class ItemAdded:
    """An item entered the window; ``total_tokens_after`` is the window's usage after."""

    name: ClassVar[str] = "added"
    agent_id: str
    item_id: str
    type: str
    token_count: int
    total_tokens_after: int
    timestamp: int


@dataclass(frozen=True)
class ItemRemoved:
    """An item left the window; ``reason`` is one of :data:`REMOVAL_REASONS`."""

    name: ClassVar[str] = "removed"
    agent_id: str
    item_id: str
    type: str
    token_count: int
    reason: str
    timestamp: int


@dataclass(frozen=True)
class Compacted:
    """A compaction was committed.

    ``strategy`` names what was asked for (a strategy id, ``"a+b"`` for a chain,
    ``"policy"``); ``applied`` lists the strategy ids that actually ran.
    ``items_removed`` counts items gone (removed or folded into a summary),
    ``items_added`` the synthetic items (summaries, placeholders) that came in.
    ``reason``: ``threshold`` (``add`` went over the compaction threshold),
    ``recovery`` (the window's recovery, when that compaction left no room),
    ``build`` (``build`` over its budget), ``manual`` (``compact``, ``commit``, ``recover``).
    """

    name: ClassVar[str] = "compacted"
    agent_id: str
    strategy: str
    applied: tuple[str, ...]
    items_removed: int
    items_added: int
    tokens_freed: int
    usage_before_percent: float
    usage_after_percent: float
    reason: str
    timestamp: int


@dataclass(frozen=True)
class Cleared:
    """``clear()`` ran: how many items and tokens it removed."""

    name: ClassVar[str] = "cleared"
    agent_id: str
    items_cleared: int
    tokens_cleared: int
    included_pinned: bool
    timestamp: int


@dataclass(frozen=True)
class Built:
    """A context was built; ``total_tokens`` is the built request's size and
    ``build_time_ms`` the measured wall time of the build (ms; the one field that
    is not reproducible)."""

    name: ClassVar[str] = "built"
    agent_id: str
    items_included: int
    items_excluded: int
    total_tokens: int
    was_compacted: bool
    timestamp: int
    build_time_ms: float = field(default=0.0, compare=False)


Event = ItemAdded | ItemRemoved | Compacted | Cleared | Built
EVENT_NAMES = tuple(cls.name for cls in (ItemAdded, ItemRemoved, Compacted, Cleared, Built))


class EventHub:
    """Callbacks by event name. ``emit`` calls them in registration order.

    The hub has its own lock, held only to copy the callback lists, so callbacks
    run without any lock held and may call back into the window. An exception in a
    callback propagates to the caller of the window method (later callbacks of
    that emission do not run).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._callbacks: dict[str, list[Callable[[Event], None]]] = {name: [] for name in EVENT_NAMES}

    def _check(self, event_name: str) -> str:
        if event_name not in self._callbacks:
            raise ContextError(f"unknown event {describe_value(event_name)}; known: {list(EVENT_NAMES)}", key="event")
        return event_name

    def on(self, event_name: str, callback: Callable[[Event], None]) -> Callable[[Event], None]:
        if not callable(callback):
            raise ContextError(f"callback for {event_name!r} is not callable: {describe_value(callback)}", key="callback")
        with self._lock:
            self._callbacks[self._check(event_name)].append(callback)
        return callback

    def off(self, event_name: str, callback: Callable[[Event], None]) -> bool:
        with self._lock:
            callbacks = self._callbacks[self._check(event_name)]
            if callback in callbacks:
                callbacks.remove(callback)
                return True
        return False

    def emit(self, events: Iterable[Event]) -> None:
        """Log each event (design 000's templates) and call its callbacks."""
        for event in events:
            log_event(event)
            with self._lock:
                callbacks = tuple(self._callbacks[event.name])
            for callback in callbacks:
                callback(event)
