"""``peer:<system>`` policies: well-known agent systems' compaction as one action.

A peer applies its own strategy (:mod:`ctxsim.strategies.peers`, not an environment
action) as the episode's first step, the way its system compacts once on overflow.
If the context is still over the target after it, the peer has nothing else to try
and calls :func:`~ctxsim.policies.baselines.fallback_action` — the recovery action of
the settings' ``recovery_mode`` (``fresh_start``) — exactly as the fixed baselines do,
so the outcome counts as "used recovery". Peers run on every context and action set.

``peer:langchain-trim`` needs the optional extra ``peers`` (langchain-core); without
it, :func:`~ctxsim.policies.get_policy` raises PolicyError saying so.
"""

from __future__ import annotations

from typing import Any

from ..episode import OverflowEpisode
from ..errors import PolicyError
from ..strategies import Strategy
from ..strategies.peers import NEEDS_EXTRA, PEERS
from .baselines import fallback_action
from .registry import Policy, register_family


class PeerPolicy(Policy):
    """One peer system's compaction, then the fallback (module docstring)."""

    def __init__(self, peer: str, **params: Any) -> None:
        if peer in NEEDS_EXTRA:
            available, extra, package = NEEDS_EXTRA[peer]
            if not available():
                hint = f"pip install 'ctxsim[{extra}]'"
                raise PolicyError(f"policy 'peer:{peer}' needs the optional extra '{extra}' ({package}): {hint}")
        self.name = f"peer:{peer}"
        self.strategy: Strategy = PEERS[peer](**params)

    def act(self, episode: OverflowEpisode) -> str | Strategy:
        return self.strategy if episode.steps_taken == 0 else fallback_action(episode)


def peer_available(name: str) -> bool:
    """True when ``peer:<name>`` can run here (its optional extra is installed)."""
    return name not in NEEDS_EXTRA or NEEDS_EXTRA[name][0]()


register_family("peer", lambda: list(PEERS), PeerPolicy)
