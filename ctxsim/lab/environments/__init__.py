"""ctxsim's Gymnasium environments and their YAML specs (``envs/*.yaml``).

Importing this package registers the environment ids (:func:`register_envs`).
"""

from __future__ import annotations

import gymnasium

#: (id, entry point) of every ctxsim environment
ENVIRONMENTS: tuple[tuple[str, str], ...] = (
    ("ctxsim/ContextOverflow-v0", "ctxsim.lab.environments.overflow:ContextOverflowEnv"),
    ("ctxsim/ConversationStream-v0", "ctxsim.lab.environments.conversation_stream:ConversationStreamEnv"),
)


def register_envs() -> None:
    """Register every ctxsim env id with Gymnasium (idempotent).

    ``max_episode_steps`` is left unset: episodes end by themselves.
    """
    for env_id, entry_point in ENVIRONMENTS:
        if env_id not in gymnasium.registry:
            gymnasium.register(id=env_id, entry_point=entry_point)


def env_ids() -> list[str]:
    """The registered ctxsim env ids."""
    return [env_id for env_id, _ in ENVIRONMENTS]


register_envs()
