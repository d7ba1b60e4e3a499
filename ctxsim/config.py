"""Configuration: design 001's ``context_config`` and design 004's per-model limits.

``context_config`` (design 001 §Configuration Structure) is loaded with
:func:`load_config` into a frozen :class:`ContextConfig`; ``ContextConfig()`` with no
arguments is the seed's example, and ``data/context_config.yaml`` reproduces it.
All limits are in tokens, all delays in seconds.

The model table (``data/models.yaml``, design 004 §12.2 plus the examples of seeds 000
and 001) maps model ids to context windows; :func:`model_limit` looks one up (128K
fallback) and :func:`usage_tier` classifies usage as safe/warning/critical/exceeded.

Every invalid file raises :class:`~ctxsim.errors.ConfigError` with the file, the
dotted key path and the value in one line.
"""

from __future__ import annotations

import copy
import logging
import re
from decimal import Decimal
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any, Literal, get_args

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictStr,
    ValidationInfo,
    field_validator,
    model_validator,
)

from .errors import ConfigError, describe_value
from .model import DEFAULT_MIN_LIMIT, DEFAULT_WARNING_THRESHOLD
from .paths import DATA_DIR
from .reward import RewardWeights
from .validation import KeyedValueError, load_yaml, validate

logger = logging.getLogger(__name__)

DEFAULT_CONFIG_PATH = DATA_DIR / "context_config.yaml"
DEFAULT_MODELS_PATH = DATA_DIR / "models.yaml"

#: design 001's breaking chain, in order
SEED_CHAIN_ORDER: tuple[str, ...] = (
    "summarize_old",
    "prioritize_recent",
    "content_type_chunking",
    "discard_low_rel",
    "hybrid",
)
#: design 001's parameters per strategy id (the strategies' own defaults must agree)
SEED_STRATEGY_PARAMS: dict[str, dict[str, Any]] = {
    "summarize_old": {"old_threshold": 0.6, "summary_length": 300},
    "prioritize_recent": {"rel_threshold": 0.5, "recent_bias": 0.2, "priority_boost": 1.5},
    "content_type_chunking": {"compress_ratios": {"code": 0.7, "text": 0.5, "plan_ref": 1.0, "log": 0.4}},
    "discard_low_rel": {"discard_percent": 0.3, "placeholder_detail": "brief"},
    "hybrid": {"max_iterations": 3},
}
RecoveryMode = Literal["fresh_start", "truncate", "error"]
RECOVERY_MODES: tuple[str, ...] = get_args(RecoveryMode)

Name = Annotated[StrictStr, Field(min_length=1)]
PositiveTokens = Annotated[int, Field(gt=0)]


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


# --------------------------------------------------------------------------- context_config


class LLMLimit(_Frozen):
    """The limit of one LLM type (design 001 ``per_llm``).

    ``limit`` is always this type's own limit (tokens). ``follow_default`` is the
    seed's UI checkbox and concerns the breaking strategy only: ``true`` means the
    type uses the shared ``breaking_strategy`` settings; ``false`` marks a type whose
    strategy settings are chosen separately (e.g. a learned chain exported for it).
    """

    type: Name
    limit: PositiveTokens
    follow_default: bool = True


class BreakingStrategyConfig(_Frozen):
    """The breaking chain and optional parameters per strategy id.

    In YAML the parameters sit beside ``chain_order`` as one mapping per strategy id
    (``summarize_old: {old_threshold: 0.6}``). Ids and parameter names are checked
    against the strategy registry by its users, not here; a strategy without a
    mapping runs with its own defaults.
    """

    model_config = ConfigDict(extra="allow")
    __pydantic_extra__: dict[str, dict[str, Any]] = Field(init=False)

    chain_order: Annotated[tuple[Name, ...], Field(strict=False, min_length=1)] = SEED_CHAIN_ORDER

    @property
    def params(self) -> dict[str, dict[str, Any]]:
        """Parameters per strategy id, in file order (a deep copy)."""
        return copy.deepcopy(dict(self.__pydantic_extra__ or {}))

    def strategy_params(self, strategy_id: str) -> dict[str, Any]:
        """Parameters given for ``strategy_id`` (a deep copy; ``{}`` when none)."""
        return copy.deepcopy((self.__pydantic_extra__ or {}).get(strategy_id, {}))


class RetryPolicy(_Frozen):
    """Retries of a failing tool call with exponential backoff (seconds)."""

    max_attempts: Annotated[int, Field(ge=1)] = 3
    backoff_base_seconds: Annotated[float, Field(ge=0)] = 5.0
    max_delay_seconds: Annotated[float, Field(ge=0)] = 60.0

    def delay(self, attempt: int) -> float:
        """Seconds to wait before retry number ``attempt`` (1-based):
        ``backoff_base_seconds * 2**(attempt-1)``, capped at ``max_delay_seconds``."""
        if attempt < 1:
            raise ValueError(f"attempt must be >= 1, got {attempt}")
        # cap the exponent: float ** raises OverflowError past 2**1023
        doublings = min(attempt - 1, 1000)
        return float(min(self.backoff_base_seconds * 2.0**doublings, self.max_delay_seconds))


def _seed_per_tool() -> dict[str, RetryPolicy]:
    return {"askQuestion": RetryPolicy(max_attempts=4, backoff_base_seconds=10)}


class RetryPolicies(_Frozen):
    """The default retry policy and overrides per tool name.

    A per-tool policy inherits every field it does not set from ``default``.
    """

    default: RetryPolicy = RetryPolicy()
    per_tool: Annotated[dict[Name, RetryPolicy], Field(validate_default=True)] = Field(default_factory=_seed_per_tool)

    @field_validator("per_tool", mode="after")
    @classmethod
    def _inherit_default(cls, per_tool: dict[str, RetryPolicy], info: ValidationInfo) -> dict[str, RetryPolicy]:
        default = info.data.get("default")
        if default is None:  # 'default' itself failed; its error is reported
            return per_tool
        return {
            tool: default.model_copy(update={f: getattr(policy, f) for f in policy.model_fields_set})
            for tool, policy in per_tool.items()
        }


class LLMSummarizerConfig(_Frozen):
    """Optional OpenAI-compatible LLM used for summaries; off by default.

    ``api_key_env`` names the environment variable that holds the key (the key
    itself never appears in a config file). ``base_url`` and ``model`` are required
    when ``enabled`` is true.
    """

    enabled: bool = False
    base_url: Name | None = None
    model: Name | None = None
    api_key_env: Annotated[StrictStr, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")] | None = None
    timeout_seconds: Annotated[float, Field(gt=0)] = 30.0

    @model_validator(mode="after")
    def _complete_when_enabled(self) -> LLMSummarizerConfig:
        if self.enabled:
            for name in ("base_url", "model"):
                if getattr(self, name) is None:
                    raise KeyedValueError(name, None, "required when enabled is true")
        return self


def _seed_per_llm() -> tuple[LLMLimit, ...]:
    return (
        LLMLimit(type="local_14b", limit=3500, follow_default=True),
        LLMLimit(type="cloud_grok", limit=8000, follow_default=False),
        LLMLimit(type="gpt4", limit=6000, follow_default=True),
    )


class ContextConfig(_Frozen):
    """Design 001's ``context_config``; the defaults are the seed's example.

    Limits are tokens. ``min_limit`` is the global floor: ``default_limit``, every
    ``per_llm`` and every ``per_agent`` limit must be at least ``min_limit``.
    ``per_agent`` maps an agent's name to its own limit (design 001's per-agent limits,
    e.g. ``{Verification: 4000, Coding: 5000}``; an agent not listed has
    ``default_limit``, or its model's). ``warning_threshold`` is the
    share of the limit (in (0, 1]) at which breaking starts. ``p1_agent_limit_bonus``
    is the share added to the limit of a P1 agent (design 001's priority system: "P1
    agents get higher limits (+20%)"). ``reward`` records the reward (profile and
    weights, :mod:`ctxsim.reward`) a chain was chosen under: an exported chain config
    carries it; the runtime does not read it.
    """

    min_limit: PositiveTokens = DEFAULT_MIN_LIMIT
    default_limit: PositiveTokens = 5000
    warning_threshold: Annotated[float, Field(gt=0, le=1)] = DEFAULT_WARNING_THRESHOLD
    per_llm: Annotated[tuple[LLMLimit, ...], Field(strict=False)] = Field(default_factory=_seed_per_llm)
    per_agent: dict[Name, PositiveTokens] = Field(default_factory=dict)
    breaking_strategy: BreakingStrategyConfig = Field(
        default_factory=lambda: BreakingStrategyConfig(**SEED_STRATEGY_PARAMS)
    )
    recovery_mode: RecoveryMode = "fresh_start"
    retry_policies: RetryPolicies = RetryPolicies()
    llm_summarizer: LLMSummarizerConfig = LLMSummarizerConfig()
    reward: RewardWeights = RewardWeights()
    p1_agent_limit_bonus: Annotated[float, Field(ge=0, le=1)] = 0.2

    @model_validator(mode="after")
    def _limits_respect_floor(self) -> ContextConfig:
        if self.default_limit < self.min_limit:
            raise KeyedValueError("default_limit", self.default_limit, f"below min_limit {self.min_limit}")
        seen: set[str] = set()
        for i, llm in enumerate(self.per_llm):
            if llm.limit < self.min_limit:
                raise KeyedValueError(f"per_llm[{i}].limit", llm.limit, f"below min_limit {self.min_limit}")
            if llm.type in seen:
                raise KeyedValueError(f"per_llm[{i}].type", llm.type, "type listed twice")
            seen.add(llm.type)
        for agent, limit in self.per_agent.items():
            if limit < self.min_limit:
                raise KeyedValueError(f"per_agent.{agent}", limit, f"below min_limit {self.min_limit}")
        return self

    def limit_for(self, llm_type: str | None = None, *, agent: str | None = None, agent_priority: int = 2) -> int:
        """Token limit of an agent: ``agent``'s own limit from ``per_agent`` when listed
        there, never above the limit of ``llm_type`` when ``per_llm`` lists that model;
        otherwise the limit of ``llm_type`` from ``per_llm``, else ``default_limit``.
        Raised by ``p1_agent_limit_bonus`` (rounded down) for a P1 agent."""
        model = next((llm.limit for llm in self.per_llm if llm.type == llm_type), None)
        limit = model if model is not None else self.default_limit
        if agent in self.per_agent:
            limit = self.per_agent[agent] if model is None else min(self.per_agent[agent], model)
        if agent_priority not in (1, 2, 3):
            raise ConfigError(f"agent_priority must be 1, 2 or 3, got {describe_value(agent_priority)}", key="agent_priority")
        return int(limit * (1 + self.p1_agent_limit_bonus)) if agent_priority == 1 else limit

    def retry_policy(self, tool: str | None = None) -> RetryPolicy:
        """The policy of ``tool`` from ``per_tool``; the default policy otherwise."""
        policies = self.retry_policies
        return policies.per_tool.get(tool, policies.default) if tool is not None else policies.default

    def strategy_params(self, strategy_id: str) -> dict[str, Any]:
        """Parameters configured for ``strategy_id`` (``{}`` when none)."""
        return self.breaking_strategy.strategy_params(strategy_id)


class _ConfigFile(_Frozen):
    context_config: ContextConfig


def load_config(path: str | Path) -> ContextConfig:
    """Read a YAML file whose top-level key is ``context_config``.

    Raises ConfigError (file, dotted key, value; one line) when the file is unreadable,
    not UTF-8, not YAML, lacks ``context_config`` or holds an invalid value.
    """
    data = load_yaml(path, ConfigError)
    return validate(_ConfigFile, data, path, ConfigError).context_config


# --------------------------------------------------------------------------- model limits

_TOKEN_COUNT = re.compile(r"(\d+(?:\.\d+)?)\s*([km]?)", re.IGNORECASE)
_MULTIPLIERS = {"": 1, "k": 1_000, "m": 1_000_000}


def _token_count(value: Any) -> int:
    """Positive token count from an int or a string like "8192", "200K", "1.5M"
    (K = 1,000 and M = 1,000,000, as in design 004). Raises ValueError."""
    if isinstance(value, int) and not isinstance(value, bool):
        count = value
    elif isinstance(value, str) and (match := _TOKEN_COUNT.fullmatch(value.strip())):
        exact = Decimal(match[1]) * _MULTIPLIERS[match[2].lower()]
        if exact != exact.to_integral_value():
            raise ValueError(f"token count {value!r} is not a whole number of tokens")
        count = int(exact)
    else:
        raise ValueError(f"token count must be an integer or a string like '200K' or '1M', got {describe_value(value)}")
    if count <= 0:
        raise ValueError(f"token count must be positive, got {describe_value(value)}")
    return count


def parse_token_count(value: Any) -> int:
    """Tokens from ``8192``, ``"8192"``, ``"200K"`` (200,000), ``"1M"`` or ``"1.5M"``
    (case-insensitive). Raises ConfigError naming the value."""
    try:
        return _token_count(value)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


TokenCount = Annotated[int, BeforeValidator(_token_count)]
ModelId = Annotated[StrictStr, Field(pattern=r"^[a-z0-9][a-z0-9._-]*$")]


class UsageTiers(_Frozen):
    """Usage shares (of a model's limit) where the tiers of design 004 begin."""

    warning: Annotated[float, Field(gt=0, le=1)] = 0.75
    critical: Annotated[float, Field(gt=0, le=1)] = 0.90
    exceeded: Annotated[float, Field(gt=0, le=1)] = 0.95

    @model_validator(mode="after")
    def _increasing(self) -> UsageTiers:
        if not self.warning < self.critical:
            raise KeyedValueError("critical", self.critical, f"must be above warning {self.warning}")
        if not self.critical < self.exceeded:
            raise KeyedValueError("exceeded", self.exceeded, f"must be above critical {self.critical}")
        return self

    def tier(self, tokens: int, limit: int) -> str:
        """"safe" below ``warning``·limit, then "warning", "critical", "exceeded"
        from ``warning``, ``critical`` and ``exceeded`` (inclusive)."""
        if limit <= 0 or tokens < 0:
            raise ValueError(f"need tokens >= 0 and limit > 0, got tokens={tokens}, limit={limit}")
        share = tokens / limit
        for name in ("exceeded", "critical", "warning"):
            if share >= getattr(self, name):
                return name
        return "safe"


class ModelTable(_Frozen):
    """Context windows (tokens) per model id, the fallback limit and the usage tiers."""

    models: dict[ModelId, TokenCount]
    default_limit: TokenCount = 128_000
    tiers: UsageTiers = UsageTiers()

    def names(self) -> tuple[str, ...]:
        """Known model ids, in file order."""
        return tuple(self.models)

    def limit(self, name: str) -> int:
        """Context window of model ``name`` (tokens).

        Lookup ignores case and surrounding spaces; a dated or suffixed id such as
        ``claude-haiku-4-5-20251001`` matches its longest known prefix followed by
        ``-``. Unknown names get ``default_limit`` and one info log line.
        """
        key = name.strip().lower()
        if key in self.models:
            return self.models[key]
        prefixes = [known for known in self.models if key.startswith(known + "-")]
        if prefixes:
            return self.models[max(prefixes, key=len)]
        logger.info("unknown model %r: using the fallback limit of %d tokens", name, self.default_limit)
        return self.default_limit


def load_models(path: str | Path | None = None) -> ModelTable:
    """Load a model table; ``None`` means ``data/models.yaml`` (loaded once, cached)."""
    if path is None:
        return _default_models()
    return validate(ModelTable, load_yaml(path, ConfigError), path, ConfigError)


@lru_cache(maxsize=1)
def _default_models() -> ModelTable:
    return load_models(DEFAULT_MODELS_PATH)


def model_limit(name: str) -> int:
    """Context window (tokens) of model ``name`` from ``data/models.yaml``."""
    return load_models().limit(name)


def usage_tier(tokens: int, limit: int) -> str:
    """"safe" | "warning" | "critical" | "exceeded" for ``tokens`` of ``limit``,
    using the tiers of ``data/models.yaml`` (design 004: 75 / 90 / 95 %)."""
    return load_models().tiers.tier(tokens, limit)
