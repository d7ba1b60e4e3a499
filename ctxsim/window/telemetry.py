"""Design 000's observability: its log templates and its metrics.

Logs go to the ``ctxsim.window`` logger with the seed's templates and levels
(:data:`LOG_TEMPLATES`, and two of ctxsim's: the window's recovery and a background
compaction that failed; placeholders filled with
:meth:`str.format`). Metrics are kept
per window in :class:`WindowMetrics`: gauges (items, tokens, usage percent) are
read from the window, counters (compactions, tokens freed) from its statistics, and
the two histograms of operation latency — ``add_latency_ms`` and
``build_latency_ms`` — are recorded here from measured wall time (milliseconds).
"""

from __future__ import annotations

import bisect
import logging
import threading
from dataclasses import dataclass, field

LOGGER = logging.getLogger("ctxsim.window")

#: design 000's log templates: name -> (level, template)
LOG_TEMPLATES: dict[str, tuple[int, str]] = {
    "added": (logging.DEBUG, "Added context item {item_id} type={type} tokens={tokens} for agent {agent_id}"),
    "removed": (logging.DEBUG, "Removed context item {item_id} reason={reason} for agent {agent_id}"),
    "built": (logging.DEBUG, "Built context: {item_count} items, {tokens} tokens for agent {agent_id}"),
    "initialized": (logging.INFO, "Context window initialized for agent {agent_id}, max={max_tokens} tokens"),
    "compacted": (logging.INFO, "Compacted context for agent {agent_id}: strategy={strategy}, freed={tokens}tokens"),
    "threshold": (logging.WARNING, "Context usage at {percent}% for agent {agent_id}, triggering compaction"),
    "full": (logging.ERROR, "Context window full for agent {agent_id}: current={current}, max={max}, requested={requested}"),
    # not a seed 000 template: the window's recovery (design 001's recovery_mode)
    "recovery": (logging.WARNING, "Compaction left no room for agent {agent_id}, running recovery {mode}"),
    # not a seed 000 template: a background compaction (design 004's warning tier) that raised
    "background_failed": (logging.ERROR, "Background compaction failed for agent {agent_id}: {error}"),
}

#: histogram bucket upper bounds (ms); the last bucket is everything above
LATENCY_BUCKETS_MS: tuple[float, ...] = (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 25, 50, 100, 200, 500, 1000, 2500, 5000)


def log(event: str, **fields: object) -> None:
    """Log ``event`` with its design 000 template and level (formatted only when enabled)."""
    level, template = LOG_TEMPLATES[event]
    if LOGGER.isEnabledFor(level):
        LOGGER.log(level, template.format(**fields))


def log_event(event) -> None:
    """Log a window event (:mod:`.events`) with its template, when it has one."""
    if event.name == "added":
        log("added", item_id=event.item_id, type=event.type, tokens=event.token_count, agent_id=event.agent_id)
    elif event.name == "removed":
        log("removed", item_id=event.item_id, reason=event.reason, agent_id=event.agent_id)
    elif event.name == "built":
        log("built", item_count=event.items_included, tokens=event.total_tokens, agent_id=event.agent_id)
    elif event.name == "compacted":
        log("compacted", agent_id=event.agent_id, strategy=event.strategy, tokens=event.tokens_freed)


@dataclass
class Histogram:
    """Counts of observations (ms) per bucket of :data:`LATENCY_BUCKETS_MS`, thread-safe."""

    counts: list[int] = field(default_factory=lambda: [0] * (len(LATENCY_BUCKETS_MS) + 1))
    total: float = 0.0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def observe(self, ms: float) -> None:
        with self._lock:
            self.counts[bisect.bisect_left(LATENCY_BUCKETS_MS, ms)] += 1
            self.total += ms

    @property
    def count(self) -> int:
        return sum(self.counts)

    def quantile(self, q: float) -> float:
        """Upper bound (ms) of the bucket holding the ``q`` quantile (inf past the last bucket; 0 when empty)."""
        with self._lock:
            n = sum(self.counts)
            if n == 0:
                return 0.0
            rank, seen = q * n, 0
            for i, c in enumerate(self.counts):
                seen += c
                if seen >= rank and c:
                    return LATENCY_BUCKETS_MS[i] if i < len(LATENCY_BUCKETS_MS) else float("inf")
        return float("inf")


@dataclass
class WindowMetrics:
    """The two latency histograms of design 000's metrics table (``add_latency_ms``,
    ``build_latency_ms``); the gauges and counters are in :meth:`ContextWindow.metrics`."""

    add_latency_ms: Histogram = field(default_factory=Histogram)
    build_latency_ms: Histogram = field(default_factory=Histogram)
