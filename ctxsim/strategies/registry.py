"""One registry of strategies, keyed by id (design 003's factory).

Adding a strategy is one class with ``@register`` in a module of this package plus
that module's import in ``ctxsim/strategies/__init__.py``; outside ctxsim, in the
module of a ``ctxsim.plugins`` entry point (:mod:`ctxsim.plugins`), which the
lookups below load first.
"""

from __future__ import annotations

from typing import Any

from ..errors import StrategyError
from ..plugins import load_plugins
from .base import Strategy

_REGISTRY: dict[str, type[Strategy]] = {}


def register(cls: type[Strategy]) -> type[Strategy]:
    """Class decorator: make a strategy available under its ``id``."""
    if cls.id in _REGISTRY and _REGISTRY[cls.id] is not cls:
        raise StrategyError(f"strategy id '{cls.id}' registered twice")
    _REGISTRY[cls.id] = cls
    return cls


def list_strategies() -> list[str]:
    """Registered strategy ids in ladder order (rank, then id)."""
    load_plugins()
    return [c.id for c in sorted(_REGISTRY.values(), key=lambda c: (c.rank, c.id))]


def strategy_class(strategy_id: str) -> type[Strategy]:
    """The class registered under ``strategy_id``; unknown ids fail with the valid ones."""
    load_plugins()
    try:
        return _REGISTRY[strategy_id]
    except KeyError:
        raise StrategyError(
            f"unknown strategy '{strategy_id}'; valid ids: {', '.join(list_strategies())}"
        ) from None


def get_strategy(strategy_id: str, **params: Any) -> Strategy:
    """A configured strategy; unknown ids or parameters fail with the valid ones."""
    return strategy_class(strategy_id)(**params)


def strategy_from_config(strategy_id: str, config) -> Strategy:
    """A strategy with the parameters a ``context_config`` gives it."""
    return get_strategy(strategy_id, **config.strategy_params(strategy_id))


def describe_strategies() -> list[dict[str, Any]]:
    """One row per strategy: id, name, rank, priority, max tokens (with the default
    parameters), seed, summary, default parameters."""
    rows = []
    for sid in list_strategies():
        cls = _REGISTRY[sid]
        defaults = {k: f.default for k, f in cls.Params.model_fields.items()}
        rows.append(
            {
                "id": sid,
                "name": cls.display_name,
                "rank": cls.rank,
                "priority": cls.priority,
                "max_tokens": _default_max_tokens(cls),
                "seed": cls.seed,
                "keeps_p1": cls.keeps_p1,
                "recovery": cls.recovery,
                "summary": cls.summary,
                "params": defaults,
            }
        )
    return rows


def _default_max_tokens(cls: type[Strategy]) -> int | None:
    """``max_tokens`` with the default parameters (None when a plugin's parameters have no defaults)."""
    try:
        return cls().max_tokens
    except StrategyError:
        return None
