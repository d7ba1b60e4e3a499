"""Summarizers: structured extractive (default) and an optional OpenAI-compatible LLM.

Both offer the same calls and return a :class:`SummaryResult`:

* ``summarize_units(units, target_tokens, *, task="", depth=0)``: a
  :class:`StructuredSummary` of context units, rendered within ``target_tokens``;
* ``summarize_text(text, target_tokens, *, task="")``: plain compression of one
  text (per-type chunking);
* ``summarize_texts(requests)``: ``summarize_text`` of each ``(text, target_tokens,
  task, keep)`` (the extractive summarizer embeds their new sentences together first).

``get_summarizer("extractive")`` (:mod:`.extractive`, deterministic, no model) or
``get_summarizer("llm", base_url=..., model=...)`` (:mod:`.llm`, off by default).
"""

from __future__ import annotations

from typing import Any

from ..errors import ConfigError, describe_value
from .extractive import ExtractiveSummarizer
from .llm import LLMSummarizer
from ..sentences import split_sentences
from .structured import (
    SUMMARY_RENDER_VERSION,
    ArtifactRef,
    StructuredSummary,
    SummaryResult,
    SummarySpan,
    ToolOutcome,
    parse_summary,
)

SUMMARIZERS = {"extractive": ExtractiveSummarizer, "llm": LLMSummarizer}

__all__ = [
    "ArtifactRef",
    "ExtractiveSummarizer",
    "LLMSummarizer",
    "SUMMARY_RENDER_VERSION",
    "StructuredSummary",
    "SummaryResult",
    "SummarySpan",
    "ToolOutcome",
    "get_summarizer",
    "parse_summary",
    "split_sentences",
]


def get_summarizer(kind: str = "extractive", **kwargs: Any) -> ExtractiveSummarizer | LLMSummarizer:
    """A summarizer of ``kind`` built with ``kwargs``; unknown kinds raise ConfigError."""
    try:
        cls = SUMMARIZERS[kind]
    except KeyError:
        raise ConfigError(
            f"unknown summarizer {describe_value(kind)}; known: {sorted(SUMMARIZERS)}", key="summarizer"
        ) from None
    try:
        return cls(**kwargs)
    except TypeError as exc:
        raise ConfigError(f"bad options for summarizer {kind!r}: {exc}", key="summarizer") from None
