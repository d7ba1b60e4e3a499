"""Design 004's tier-driven actions: what a window does at each usage tier.

Before a turn, :meth:`ContextWindow.check_usage` reads the usage tier of the window
(``data/models.yaml``: 75 / 90 / 95 % of ``max_tokens``) and acts on it:

==========  ==============================================================
tier        action
==========  ==============================================================
safe        nothing
warning     background compaction (a thread; the turn goes on; its Future
            gives the tokens freed or raises the compaction's error)
critical    forced compaction (the turn waits for it)
exceeded    :class:`ContextWindowExceeded` with the recovery options
==========  ==============================================================

Compactions aim at :data:`COMPACT_MARGIN_PERCENT` under the warning tier, so that
one compaction gets the window back to "safe". A caller that receives
:class:`ContextWindowExceeded` picks one of its :data:`RECOVERY_OPTIONS` and runs it
with :meth:`ContextWindow.recover`.
"""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass

from ..errors import CtxsimError

#: compaction target: this many percent under the warning tier
COMPACT_MARGIN_PERCENT = 15.0


@dataclass(frozen=True)
class RecoveryOption:
    """One way out of an exceeded window: ``action`` for :meth:`ContextWindow.recover`."""

    action: str
    message: str


RECOVERY_OPTIONS: tuple[RecoveryOption, ...] = (
    RecoveryOption("compact", "Compress the conversation history with the window's strategy, then continue."),
    RecoveryOption("fresh_start", "Start over from a handover summary of the conversation (pinned items kept)."),
    RecoveryOption("clear", "Clear every item except the pinned ones."),
)
RECOVERY_ACTIONS = tuple(o.action for o in RECOVERY_OPTIONS)


class ContextWindowExceeded(CtxsimError):
    """The window is in the "exceeded" tier: the turn must not go on before a recovery."""

    def __init__(self, current: int, maximum: int, usage_percent: float):
        self.current, self.maximum, self.usage_percent = current, maximum, usage_percent
        self.options = RECOVERY_OPTIONS
        choices = "; ".join(f"{o.action}: {o.message}" for o in RECOVERY_OPTIONS)
        super().__init__(
            f"context window limit exceeded: {current} of {maximum} tokens ({usage_percent:.1f} %); recovery options: {choices}"
        )


@dataclass
class TierAction:
    """What :meth:`ContextWindow.check_usage` did: the tier, the action taken
    ("none", "background", "forced"), tokens freed by a forced compaction and the
    background compaction's :class:`~concurrent.futures.Future`: ``background.result()``
    waits for it and returns the tokens it freed, or raises its error (which the
    ``ctxsim.window`` logger also reports when it happens, for a caller that never asks)."""

    tier: str
    action: str
    tokens_freed: int = 0
    background: Future[int] | None = None
