"""The runtime context window (design 000) that strategies and learned policies plug into.

``items`` holds the items and their mapping to context units, ``build`` the budgeted
composition, ``compaction`` the strategy/chain/policy runs and their proposals,
``events`` design 000's events, ``window`` the :class:`ContextWindow`.
"""

from .build import BuildOptions, BuiltContext
from .compaction import BreakingPolicy, CompactionProposal
from .events import EVENT_NAMES, Built, Cleared, Compacted, ItemAdded, ItemRemoved
from .items import ITEM_TYPES, ContextItem, item_to_unit, items_from_state, items_to_state, priority_band
from .tiers import RECOVERY_OPTIONS, ContextWindowExceeded, RecoveryOption, TierAction
from .window import ContextSnapshot, ContextWindow, WindowStats

__all__ = [
    "EVENT_NAMES",
    "ITEM_TYPES",
    "RECOVERY_OPTIONS",
    "BreakingPolicy",
    "BuildOptions",
    "Built",
    "BuiltContext",
    "Cleared",
    "Compacted",
    "CompactionProposal",
    "ContextItem",
    "ContextSnapshot",
    "ContextWindow",
    "ContextWindowExceeded",
    "ItemAdded",
    "ItemRemoved",
    "RecoveryOption",
    "TierAction",
    "WindowStats",
    "item_to_unit",
    "items_from_state",
    "items_to_state",
    "priority_band",
]
