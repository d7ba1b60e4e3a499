"""The compaction heuristics of well-known agent systems, re-implemented as strategies.

They are *not* registered as environment actions: the ``peer:<system>`` policies of
:mod:`ctxsim.policies.peers` apply them. Each docstring gives the source and the
system's documented parameters. Absolute token numbers of a system are scaled to
the context's limit against a 200,000-token reference window
(:data:`REFERENCE_WINDOW`): OpenCode's 40,000-token protected window becomes 20 %
of the limit. Sizes of LLM outputs (summaries) are not window-relative and stay
absolute, but a summary never gets more room than the target leaves (a floor of
:data:`MIN_BODY_TOKENS`).

Unlike ctxsim's own strategies, a peer does what its system does: it does not stop
as soon as the context fits (Anthropic clears every old tool result at once), and
it may leave the context over the target. Every peer keeps pinned units (the
systems' system prompt or instructions); none promises P1.
"""

from __future__ import annotations

from .adk import AdkCompaction
from .aider import AIDER_FRAME, AiderHistory
from .anthropic_clear import AnthropicClear
from .anthropic_compact import AnthropicCompact
from .claude_code import CLAUDE_CODE_FRAME, ClaudeCodeCompact
from .codex import CODEX_FRAME, CodexCompaction
from .common import PeerStrategy
from .langchain_trim import LangChainTrim, langchain_available
from .letta import LETTA_FRAME, LettaSlidingWindow
from .opencode import OPENCODE_CLEARED, OPENCODE_SECTIONS, OpenCodeCompaction

#: peer name -> strategy class (the ``peer:<name>`` policies)
PEERS: dict[str, type[PeerStrategy]] = {
    "anthropic-clear": AnthropicClear,
    "opencode": OpenCodeCompaction,
    "letta": LettaSlidingWindow,
    "codex": CodexCompaction,
    "langchain-trim": LangChainTrim,
    "claude-code": ClaudeCodeCompact,
    "anthropic-compact": AnthropicCompact,
    "aider": AiderHistory,
    "adk": AdkCompaction,
}
#: peers that need an optional extra: name -> (import check, extra, package)
NEEDS_EXTRA: dict[str, tuple] = {"langchain-trim": (langchain_available, "peers", "langchain-core")}
