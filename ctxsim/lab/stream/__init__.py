"""The long-horizon side of ctxsim: whole conversations whose context overflows again and again.

:mod:`.conversation` (the turns as they arrive), :mod:`.probes` (questions about
planted facts), :mod:`.rehydration` (design 002's ephemeral re-injection of
externalized content), :mod:`.cache` (the provider's prompt cache and its cost) and
:mod:`.session` (one conversation played turn by turn, each overflow event an
:class:`~ctxsim.episode.OverflowEpisode`). The Gymnasium face is
``ctxsim/ConversationStream-v0`` (:mod:`ctxsim.lab.environments.conversation_stream`).
"""

from .cache import PromptCache, PromptCacheModel
from .conversation import Conversation, conversation_for, generated_conversation, transcript_conversation
from .probes import Probe, ProbeConfig, make_probe, probe_question, schedule_probes
from .rehydration import Rehydrated, RehydrationConfig, Rehydrator
from .session import (
    EventRecord,
    RecoveryTriggers,
    StreamRewardWeights,
    StreamSession,
    StreamSettings,
    StreamStep,
    stream_settings,
)

__all__ = [
    "Conversation",
    "EventRecord",
    "Probe",
    "ProbeConfig",
    "PromptCache",
    "PromptCacheModel",
    "RecoveryTriggers",
    "Rehydrated",
    "RehydrationConfig",
    "Rehydrator",
    "StreamRewardWeights",
    "StreamSession",
    "StreamSettings",
    "StreamStep",
    "conversation_for",
    "generated_conversation",
    "make_probe",
    "probe_question",
    "schedule_probes",
    "stream_settings",
    "transcript_conversation",
]
