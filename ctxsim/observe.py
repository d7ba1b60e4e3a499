"""The observation: one pure function from a context state to a fixed-length vector.

:func:`observe` is called by the Gymnasium environment and by the deployable
policy, so it imports only numpy, pydantic and ctxsim core (never gymnasium, torch,
pandas or matplotlib). Its result depends on the state and an
:class:`ObservationConfig` only; it is finite, float32 and inside
:func:`observation_bounds`. The features (version :data:`OBSERVATION_VERSION`) are
documented one by one in :class:`ctxsim.lab.environments.overflow.ContextOverflowEnv`;
:func:`feature_names` lists them in vector order.

Token shares use each unit's request tokens (content plus message framing) over
the sum of all units' (the reply priming is left out, so the shares sum to 1).
Relevance is the cosine similarity of each unit to the task (design 001's
``computeRelevance``) through :mod:`ctxsim.relevance`, whose embedders cache their
rows per text, so an episode embeds each unit once. Redundancy (duplicate tool
calls, superseded writes, failed calls) is detected from the units'
:class:`~ctxsim.model.ToolEnvelope` exactly as the pruning strategies detect it
(with their default parameters), never from generator metadata.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace
from functools import lru_cache
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator

from .episode_config import EpisodeConfig
from .model import UNIT_TYPES, ContextState
from .relevance import cosine_to_query
from .strategies import StrategyContext
from .strategies.pruning import DedupeToolResults, PurgeErrors, SupersedeWrites

#: bumped whenever a feature is added, removed, reordered or redefined
OBSERVATION_VERSION = 3

#: design 001's ``old_threshold``: the first 60 % of units are "old"
OLD_SHARE = 0.6
#: design 001's ``rel_threshold``: units below this (max-normalized) relevance are "low"
LOW_RELEVANCE = 0.5
#: token counts are scaled as log10(1 + n) / LOG_TOKENS_SCALE (10M tokens -> 1)
LOG_TOKENS_SCALE = 7.0
#: unit counts are scaled as log10(1 + n) / LOG_UNITS_SCALE (10,000 units -> 1)
LOG_UNITS_SCALE = 4.0
#: summary depths are scaled by this (a summary of a summary of ... 4 deep -> 1)
MAX_SUMMARY_DEPTH = 4
#: upper clip of usage (tokens / limit) and of the overflow ratio
MAX_USAGE = 4.0

_DEDUPE, _SUPERSEDE, _ERRORS = DedupeToolResults(), SupersedeWrites(), PurgeErrors()
_EPISODE = EpisodeConfig.model_construct()  # the defaults below are the episode's


class ObservationConfig(BaseModel):
    """What the observation depends on besides the state.

    ``actions``: the strategy ids of the action space (one "applied" flag each);
    ``max_steps``: strategies per episode (scales the step features); ``target``:
    ``"limit"`` or ``"warning"`` (the warning threshold's token count);
    ``embedder``: the relevance embedder id (defaults: :class:`~ctxsim.episode_config.EpisodeConfig`'s).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    actions: Annotated[tuple[str, ...], Field(min_length=1)]
    max_steps: Annotated[int, Field(ge=1)] = _EPISODE.max_steps
    target: Literal["limit", "warning"] = _EPISODE.target
    embedder: str = _EPISODE.embedder

    @field_validator("actions")
    @classmethod
    def _unique(cls, actions: tuple[str, ...]) -> tuple[str, ...]:
        if len(set(actions)) != len(actions):
            raise ValueError(f"actions repeat an id: {list(actions)}")
        return actions

    @classmethod
    def of(cls, settings: Any) -> "ObservationConfig":
        """The observation config of episode settings or of an env's resolved config
        (anything with the four fields, as attributes or keys)."""
        get = settings.__getitem__ if isinstance(settings, Mapping) else lambda name: getattr(settings, name)
        return cls(actions=tuple(get("actions")), max_steps=get("max_steps"), target=get("target"), embedder=get("embedder"))

    def target_tokens(self, state: ContextState) -> int:
        """The token count the state must fit: its limit or its warning threshold."""
        return state.warning_tokens if self.target == "warning" else state.limit


def _features(config: ObservationConfig) -> list[tuple[str, float, float]]:
    """(name, low, high) of every feature, in vector order."""
    unit = (0.0, 1.0)
    out = [
        ("usage", 0.0, MAX_USAGE),
        ("overflow", -1.0, MAX_USAGE),
        ("log_tokens", *unit),
        ("target_share", *unit),
    ]
    out += [(f"type_{t}", *unit) for t in UNIT_TYPES]
    out += [(f"priority_p{p}", *unit) for p in (1, 2, 3)]
    out += [
        ("pinned_share", *unit),
        ("log_units", *unit),
        ("log_p1_units", *unit),
        ("p1_over_target", 0.0, MAX_USAGE),
        ("pinned_over_target", 0.0, MAX_USAGE),
        ("largest_unit_share", *unit),
        ("relevance_mean", *unit),
        ("relevance_min", *unit),
        ("relevance_max", *unit),
        ("relevance_low_share", *unit),
        ("old_share", *unit),
        ("duplicate_share", *unit),
        ("superseded_share", *unit),
        ("error_share", *unit),
        ("summarized_share", *unit),
        ("summary_depth", *unit),
        ("steps_taken", *unit),
    ]
    out += [(f"applied_{sid}", *unit) for sid in config.actions]
    out.append(("steps_remaining", *unit))
    return out


def feature_names(config: ObservationConfig) -> list[str]:
    """Names of the observation's features, in vector order."""
    return [name for name, _, _ in _features(config)]


def observation_bounds(config: ObservationConfig) -> tuple[np.ndarray, np.ndarray]:
    """(low, high) float32 vectors: every observation lies inside them (new arrays)."""
    low, high = _bounds(config)
    return low.copy(), high.copy()


@lru_cache(maxsize=64)
def _bounds(config: ObservationConfig) -> tuple[np.ndarray, np.ndarray]:
    """:func:`observation_bounds`, read-only and built once per config (every
    observation clips to them)."""
    feats = _features(config)
    low = np.array([lo for _, lo, _ in feats], dtype=np.float32)
    high = np.array([hi for _, _, hi in feats], dtype=np.float32)
    low.setflags(write=False)
    high.setflags(write=False)
    return low, high


def _share(part: float, whole: float) -> float:
    return part / whole if whole > 0 else 0.0


def _log_scaled(n: float, scale: float) -> float:
    return math.log10(1.0 + n) / scale


def _relevance(state: ContextState, costs: np.ndarray, total: float, embedder: str) -> list[float]:
    """Token-weighted mean and min of the max-normalized relevance (as the strategies
    normalize it), the largest raw cosine, and the token share below LOW_RELEVANCE."""
    if not state.units:
        return [0.0, 0.0, 0.0, 0.0]
    query = StrategyContext(embedder_id=embedder).query_for(state)
    raw = cosine_to_query([u.content for u in state.units], query, embedder)
    top = float(raw.max())
    scores = raw / top if top > 0 else raw
    low = float(costs[scores < LOW_RELEVANCE].sum())
    return [_share(float(scores @ costs), total), float(scores.min()), top, _share(low, total)]


def current_break(state: ContextState, steps_taken: int) -> ContextState:
    """``state`` as an episode observes it: its history keeps only the last
    ``steps_taken`` entries, the steps of the break under way (strategies applied
    before the overflow do not count toward this break's ``max_steps``)."""
    if steps_taken == len(state.history):
        return state
    return replace(state, history=state.history[len(state.history) - steps_taken:])


def observe(state: ContextState, config: ObservationConfig) -> np.ndarray:
    """The observation vector of ``state`` (float32, see :func:`feature_names`; a new
    array on every call, computed once per state object and config)."""
    return state.derived(("observation", config), lambda: _observe(state, config)).copy()


def _observe(state: ContextState, config: ObservationConfig) -> np.ndarray:
    units = state.units
    cost_of = [state.unit_cost(u) for u in units]
    costs = np.array(cost_of, dtype=np.float64)
    total = float(costs.sum())
    target = config.target_tokens(state)
    by_type: dict[str, int] = {}
    by_priority = {1: 0, 2: 0, 3: 0}
    pinned = summarized = p1_units = 0
    for u, cost in zip(units, cost_of):
        by_type[u.type] = by_type.get(u.type, 0) + cost
        by_priority[u.priority] += cost
        p1_units += u.priority == 1
        if u.pinned:
            pinned += cost
        if u.summary_depth > 0:
            summarized += cost

    def tokens_where(selected) -> int:
        ids = {u.id for u in selected}
        return sum(c for u, c in zip(units, cost_of) if u.id in ids) if ids else 0

    split = math.floor(len(units) * OLD_SHARE)
    failed = [u for u in _ERRORS.tool_units(state) if u.tool.outcome == "failure"]
    steps = len(state.history)
    values = [
        state.usage,
        state.total_tokens / target - 1.0,
        _log_scaled(state.total_tokens, LOG_TOKENS_SCALE),
        _share(target, state.limit),
    ]
    values += [_share(by_type.get(t, 0), total) for t in UNIT_TYPES]
    values += [_share(by_priority[p], total) for p in (1, 2, 3)]
    values += [
        _share(pinned, total),
        _log_scaled(len(units), LOG_UNITS_SCALE),
        _log_scaled(p1_units, LOG_UNITS_SCALE),
        _share(float(by_priority[1]), target),
        _share(pinned, target),
        _share(float(max(cost_of, default=0.0)), total),
        *_relevance(state, costs, total, config.embedder),
        _share(float(costs[:split].sum()), total),
        _share(tokens_where(_DEDUPE.select(state)), total),
        _share(tokens_where(_SUPERSEDE.select(state)), total),
        _share(tokens_where(failed), total),
        _share(summarized, total),
        max((u.summary_depth for u in units), default=0) / MAX_SUMMARY_DEPTH,
        steps / config.max_steps,
    ]
    applied = set(state.history)
    values += [float(sid in applied) for sid in config.actions]
    values.append(max(0, config.max_steps - steps) / config.max_steps)
    low, high = _bounds(config)
    vector = np.nan_to_num(np.asarray(values, dtype=np.float64), nan=0.0, posinf=MAX_USAGE, neginf=-1.0)
    return np.clip(vector, low, high).astype(np.float32)
