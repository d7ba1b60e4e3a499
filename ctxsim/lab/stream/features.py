"""What ConversationStream-v0 observes of the session, beside the context being broken.

:func:`session_features` is the one function that turns a
:class:`~ctxsim.lab.stream.StreamSession` into these features;
:func:`stream_observation` appends them to ContextOverflow-v0's observation of the
pending event (:func:`ctxsim.observe.observe`). The environment and the evaluation of
a trained stream policy both call it. Every feature lies in [0, 1]:

=====================  ==================================================================
feature                meaning
=====================  ==================================================================
over_hits              over-hits within ``window_seconds`` of now, the pending event's
                       included, / ``max_over_hits`` (1: the next over-hit inside the
                       window is a forced fresh start; 0 when that trigger is off)
window_left            time until the oldest of those over-hits leaves the window /
                       ``window_seconds`` (when the count starts to fall; 0 when off)
turns_left             share of the conversation's turns still to come after this one
turns_since_event      turns since the previous overflow event (since the start for the
                       first) / the conversation's turns
growth                 tokens a turn has brought on average so far / the limit (how fast
                       the context fills again after a break)
last_depth             the previous event's target / the limit (0 before the first)
event_depth            the pending event's target / the limit (its chosen depth; the
                       first depth until the agent chooses)
=====================  ==================================================================
"""

from __future__ import annotations

import numpy as np

from ...observe import ObservationConfig, observe
from .session import StreamSession

#: the session features, in observation order (module docstring)
SESSION_FEATURES = (
    "over_hits", "window_left", "turns_left", "turns_since_event", "growth", "last_depth", "event_depth",
)


def session_features(session: StreamSession) -> np.ndarray:
    """The session features (module docstring) of ``session`` now, float32 in [0, 1]."""
    turns = len(session.conversation.turns)
    turn = max(session.turn, 0)
    state = session.episode.original if session.episode is not None else session.state
    limit = state.limit
    window, max_hits = session.triggers.window_seconds, session.triggers.max_over_hits
    now = session.now
    recent = [t for t in session.over_hit_times if now - t < window]  # oldest first
    over_hits = window_left = 0.0
    if max_hits is not None and recent:
        over_hits = len(recent) / max_hits
        window_left = (recent[0] + window - now) / window
    previous = session.events[-1] if session.events else None
    since = turn - previous.turn if previous is not None else turn
    values = [
        over_hits, window_left,
        (turns - 1 - turn) / turns,
        since / turns,
        session.arrived_tokens / (turn + 1) / limit,
        previous.target_tokens / limit if previous is not None else 0.0,
        session.episode.target_tokens / limit if session.episode is not None else 0.0,
    ]
    return np.clip(np.array(values, dtype=np.float32), 0.0, 1.0)


def stream_observation(session: StreamSession, config: ObservationConfig, with_session: bool) -> np.ndarray:
    """ConversationStream-v0's observation: :func:`ctxsim.observe.observe` of the pending
    event's context (each event starts with an empty history, so its step features
    count this event's steps; the conversation's context once it is over), followed by
    :func:`session_features` when ``with_session``."""
    state = session.episode.state if session.episode is not None else session.state
    context = observe(state, config)
    return np.concatenate([context, session_features(session)]) if with_session else context
