"""Design 002's provider-aware token budget: what is left for the conversation.

Everything sent to the model counts against ``max_input_tokens``: the system prompt,
the tool schemas, the provider's formatting, a safety buffer for the reply, and a
reserve for rehydrated artifacts (injected ephemerally, so left out of the
compaction target). Compaction aims at :attr:`TokenBudget.available_for_messages`:

    available_for_messages = ⌊max_input_tokens × soft_threshold⌋
                             − system prompt − tool schemas − formatting
                             − safety buffer − rehydration reserve

All fields are cl100k tokens (``soft_threshold`` a share in (0, 1]).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from typing import Any, Mapping, Sequence

from .errors import ConfigError, describe_value
from .tokens import count_message, count_tokens


def tool_schema_tokens(tools: Sequence[Mapping[str, Any]]) -> int:
    """Tokens of tool schemas as sent: each schema as compact JSON with sorted keys."""
    return sum(count_tokens(json.dumps(tool, sort_keys=True, separators=(",", ":"), ensure_ascii=False)) for tool in tools)


@dataclass(frozen=True)
class TokenBudget:
    """Design 002's ``TokenBudget`` (see the module docstring)."""

    max_input_tokens: int
    soft_threshold: float = 0.85
    system_prompt_tokens: int = 0
    tool_schema_tokens: int = 0
    formatting_overhead_tokens: int = 0
    safety_buffer_tokens: int = 500
    rehydration_reserve_tokens: int = 2000
    max_rehydration_artifacts: int = 3

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "soft_threshold":
                if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
                    raise ConfigError(f"TokenBudget.soft_threshold must be in (0, 1], got {describe_value(value)}", key=f.name)
                continue
            least = 1 if f.name == "max_input_tokens" else 0
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise ConfigError(f"TokenBudget.{f.name} must be an integer >= {least}, got {describe_value(value)}", key=f.name)
        if self.available_for_messages <= 0:
            raise ConfigError(
                f"TokenBudget leaves no room for messages: {self.overhead} tokens of overhead in "
                f"{int(self.max_input_tokens * self.soft_threshold)}", key="max_input_tokens",
            )

    @classmethod
    def for_request(
        cls, max_input_tokens: int, *, system_prompt: str = "", tools: Sequence[Mapping[str, Any]] = (),
        message_format: str = "openai", **overrides: Any,
    ) -> "TokenBudget":
        """The budget of a request with this system prompt (one message in
        ``message_format``, framing included) and these tool schemas."""
        system = count_message(system_prompt, message_format) if system_prompt else 0
        return cls(max_input_tokens, system_prompt_tokens=system, tool_schema_tokens=tool_schema_tokens(tools), **overrides)

    @property
    def overhead(self) -> int:
        """Tokens that are not conversation messages."""
        return (self.system_prompt_tokens + self.tool_schema_tokens + self.formatting_overhead_tokens
                + self.safety_buffer_tokens + self.rehydration_reserve_tokens)

    @property
    def available_for_messages(self) -> int:
        """The compaction target for the conversation (tokens)."""
        return int(self.max_input_tokens * self.soft_threshold) - self.overhead

    @property
    def available_for_rehydration(self) -> int:
        return self.rehydration_reserve_tokens
