"""Breaking strategies: the action space of the environments.

Families, one module each: ``seed001`` (design 001's five), ``window_compaction`` (design 000's
compaction strategies), ``ladder`` (design 002's externalize / clear / drop),
``pruning`` (design 004 / OpenCode DCP pruning and keep-recent compaction) and
``recovery`` (fresh start, truncate, error). Each module registers its classes
with :func:`~ctxsim.strategies.registry.register`.
"""

from importlib import import_module

from .base import (
    BREAKER_FAILED,
    RECOVERY_TRIGGERED,
    TOKEN_LIMIT_EXCEEDED,
    ContextBudget,
    Outcome,
    ProgressEvent,
    Strategy,
    StrategyContext,
    StrategyPriority,
    StrategyResult,
)
from .registry import describe_strategies, get_strategy, list_strategies, register, strategy_class, strategy_from_config

FAMILIES = ("pruning", "ladder", "seed001", "window_compaction", "recovery")
for _family in FAMILIES:
    import_module(f"{__name__}.{_family}")

__all__ = [
    "BREAKER_FAILED",
    "RECOVERY_TRIGGERED",
    "TOKEN_LIMIT_EXCEEDED",
    "ContextBudget",
    "Outcome",
    "ProgressEvent",
    "Strategy",
    "StrategyContext",
    "StrategyPriority",
    "StrategyResult",
    "describe_strategies",
    "get_strategy",
    "list_strategies",
    "register",
    "strategy_class",
    "strategy_from_config",
]
