"""Every parameter of an overflow episode: its key, its default and its checks.

:class:`EpisodeConfig` is the one definition of what decides how an overflow event
is broken and scored (design 001's values are the defaults where the seed has one).
It is validated once, from plain data (an env spec's ``config``, an exported
policy's ``settings``), with errors naming the key and value; the environments'
configs extend it with the keys of their own (``ctxsim.lab.environments``), and
:meth:`ctxsim.episode.EpisodeSettings.of` turns a validated one into the settings an
episode runs, without checking anything again.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictStr, model_validator

from .coherence import DEFAULT_MEASURE, MEASURES
from .config import RecoveryMode
from .errors import ConfigError, CtxsimError, StrategyError
from .latency import LatencyModel
from .relevance import list_embedders
from .reward import RewardWeights
from .strategies import get_strategy
from .strategies.registry import strategy_class
from .validation import KeyedValueError, validate

SEED_CHAIN = ("summarize_old", "prioritize_recent", "content_type_chunking", "discard_low_rel", "hybrid")
#: design 001's action set: its five strategies and its recovery (``envs/seed001.yaml``)
SEED001_ACTIONS = SEED_CHAIN + ("fresh_start",)
#: every strategy of the design documents and the recovery modes but ``error``, in
#: ladder order (pruning, externalize, compress, summarize, clear, select, drop,
#: recovery): ContextOverflow-v0's default action space. A fixed list: adding a
#: strategy to the registry does not change it, so trained policies keep working.
FULL_ACTIONS = (
    "dedupe_tool_results", "purge_errors", "supersede_writes", "externalize", "content_type_chunking",
    "compact_keep_recent", "hybrid", "summarize", "summarize_old", "clear_tool_results", "discard_low_rel",
    "prioritize_recent", "remove_low_priority", "remove_oldest", "selective", "drop", "fresh_start", "truncate",
)

#: strategy ids: a list or a tuple of strings
StrategyIds = Annotated[tuple[StrictStr, ...], Field(strict=False)]
#: an action space: at least one strategy id (the configs that change its default declare it so)
ActionIds = Annotated[StrategyIds, Field(min_length=1)]
#: strategies per episode before the recovery is forced
StepCount = Annotated[int, Field(ge=1)]


class BudgetConfig(BaseModel):
    """Design 003's budget: ``excluded`` actions are always masked; ``required`` ones
    are handed to the strategies' context (the environment does not force them)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    required: StrategyIds = ()
    excluded: StrategyIds = ()


class EpisodeConfig(BaseModel):
    """How an overflow event is broken and scored (validated; frozen); the docstring
    under each field says what it means."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    actions: ActionIds = SEED001_ACTIONS
    """Strategy ids of the action space, in order (design 001's five and ``fresh_start``;
    ContextOverflow-v0's default is :data:`FULL_ACTIONS`)."""
    max_steps: StepCount = 3
    """Strategies per episode before the recovery is forced (design 001: 3)."""
    mask_overflowing_last_step: bool = False
    """On the last of ``max_steps``, also mask the actions whose result would still be
    over the target (recovery actions stay valid), when any action fits: a learner
    cannot pick its way into the forced recovery. Costs one run of each valid action
    on that step (a pool holds them)."""
    target: Literal["limit", "warning"] = "limit"
    """What the context must fit: its limit or its warning threshold (tokens)."""
    recovery_mode: RecoveryMode = "fresh_start"
    """Applied when ``max_steps`` strategies did not fit the target: fresh_start | truncate
    | error (a failure, the context left as it was; design 001)."""
    reward: RewardWeights = Field(default_factory=RewardWeights)
    """:class:`~ctxsim.reward.RewardWeights` fields: the ``profile`` (seed001 | grounded) and any weight."""
    latency: LatencyModel = Field(default_factory=LatencyModel)
    """:class:`~ctxsim.latency.LatencyModel` fields (ms)."""
    embedder: StrictStr = "hashed-tfidf"
    """Relevance and coherence embedder id (:func:`ctxsim.relevance.list_embedders`)."""
    coherence: StrictStr = DEFAULT_MEASURE
    """Coherence measure of the reward and outcomes: ``recall`` (default) or ``centroid``
    (the earlier measure, for comparisons; :mod:`ctxsim.coherence`)."""
    strategy_params: dict[StrictStr, dict[StrictStr, Any]] = Field(default_factory=dict)
    """``{strategy id: {parameter: value}}``."""
    budget: BudgetConfig = Field(default_factory=BudgetConfig)
    """``{required: [...], excluded: [...]}`` (design 003)."""
    cache_size: Annotated[int, Field(ge=0)] = 50_000
    """Entries of the memo of strategy results (0: nothing is kept)."""

    @model_validator(mode="after")
    def _known_ids(self) -> EpisodeConfig:
        for i, sid in enumerate(self.actions):
            _known_strategy(f"actions[{i}]", sid)
            if sid == "error":
                raise KeyedValueError(f"actions[{i}]", sid, "'error' is a recovery_mode, not an action")
        if len(set(self.actions)) != len(self.actions):
            raise KeyedValueError("actions", list(self.actions), "an id is listed twice")
        for sid, params in self.strategy_params.items():
            _known_strategy(f"strategy_params.{sid}", sid)
            try:
                get_strategy(sid, **params)
            except CtxsimError as exc:
                raise KeyedValueError(f"strategy_params.{sid}", params, str(exc)) from None
        for field in ("required", "excluded"):
            for i, sid in enumerate(getattr(self.budget, field)):
                _known_strategy(f"budget.{field}[{i}]", sid)
        for i, sid in enumerate(self.budget.required):
            if sid not in self.actions or sid in self.budget.excluded:
                raise KeyedValueError(f"budget.required[{i}]", sid, "a required strategy must be an action and not excluded")
        if all(sid in self.budget.excluded for sid in self.actions):
            raise KeyedValueError("budget.excluded", list(self.budget.excluded), "excludes every action")
        if self.embedder not in list_embedders():
            raise KeyedValueError("embedder", self.embedder, f"unknown embedder; known: {list_embedders()}")
        if self.coherence not in MEASURES:
            raise KeyedValueError("coherence", self.coherence, f"unknown coherence measure; known: {sorted(MEASURES)}")
        return self

    def episode_json(self) -> str:
        """This config's episode keys as JSON (the keys a subclass adds left out): what
        the envs and stream sessions of one process share settings, and so strategy
        results, by."""
        return self.model_dump_json(include=set(EpisodeConfig.model_fields))

    @classmethod
    def checked(
        cls, data: Any, source: str | Path = "episode settings", error_cls: type[CtxsimError] = ConfigError,
        key_prefix: str = "",
    ) -> EpisodeConfig:
        """``data`` validated into this model; ``error_cls`` naming ``source``, the key
        (under ``key_prefix``) and the value otherwise."""
        return validate(cls, data, source, error_cls, key_prefix)


def _known_strategy(key: str, sid: str) -> None:
    try:
        strategy_class(sid)
    except StrategyError as exc:  # an unknown id; a plugin that failed to load is not this key's fault
        raise KeyedValueError(key, sid, str(exc)) from None
