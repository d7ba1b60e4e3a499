"""Warm start: fit a policy to a teacher's action values before RL.

Two teachers value the actions (``teacher``): on ContextOverflow-v0 the exhaustive
``oracle`` (below); on ConversationStream-v0 a ``rollout:<base>`` policy, whose
values are totals to the end of the conversation
(:mod:`ctxsim.lab.stream.teacher`). The fit is the same for both.

On ContextOverflow-v0 PPO settles on the action that is best on average
(``prioritize_recent``) and does not find the context-dependent two-step chains the
oracle uses: their advantage (about 0.01-0.05 reward) drowns in the spread of returns
across contexts. The warm start gives the learner those values directly. For the
states on the chains of valid actions of every training context (the env's context
pool holds them; without a pool they are computed) — the roots and every state
reached through an action within ``margin`` of the best — ``Q(s, a)`` is the best
final reward reachable after taking ``a`` in ``s`` (the oracle's search, one level
down). Observations are standardized first when the experiment sets
``normalize_observations``. Then, full batch, for ``epochs``:

* the actor minimizes the cross-entropy from the teacher's Boltzmann distribution over
  the valid actions, ``softmax(Q(s, ·) / scale)``, to ``pi(·|s)``, minus ``entropy`` x
  its entropy;
* the critic regresses ``max_a Q(s, a)``.

Cross-entropy and not the expected advantage ``sum_a pi(a|s) (Q(s, a) - max_b Q(s, b))``:
the latter's gradient in a logit is ``pi(a|s) (A(s, a) - E_pi A(s, ·))``, which vanishes
once the policy is sure. A freshly initialized actor gives nearly the same logits to
every state, so the first steps push all states towards the action that is best on
average (the one that never fails) and the softmax saturates there: the fit ended
with one action for every state. The cross-entropy's gradient ``pi - target`` stays
as large as the policy's error, so each state reaches its own best action.

Only the training split's contexts are used (never the validation or held-out ones). RL then
continues from the warm-started weights (``timesteps`` of the experiment). The fitted
actor samples widely (about 1.85 nats on the default experiment): PPO then improves what
it samples, not the order of its top actions, which is what acts (reports/heldout_eval.md,
"How the recipe was chosen"); ``logit_scale`` multiplies the fitted logits, keeping that
order and sharpening what PPO samples. Experiment
key ``warm_start`` (:class:`WarmStart`); MaskablePPO, PPO and A2C (an actor-critic
with action logits). Measured effect: reports/heldout_eval.md (``maskable_ppo_family``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from ..episode import OverflowEpisode

#: the teacher of ContextOverflow-v0
ORACLE = "oracle"


class WarmStart(BaseModel):
    """The ``warm_start`` block of an experiment."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True, allow_inf_nan=False)

    epochs: int = Field(500, ge=1, description="full-batch Adam steps")
    learning_rate: float = Field(0.01, gt=0, description="Adam learning rate")
    weight_decay: float = Field(0.01, ge=0, description="Adam weight decay (L2), keeps the fit smooth across contexts")
    scale: float = Field(0.01, gt=0, description="temperature of the actor's target softmax(Q / scale), reward units per nat")
    entropy: float = Field(0.0, ge=0, description="entropy bonus of the actor's loss")
    margin: float = Field(0.05, ge=0, description="fit the states reached through actions within this much reward of the best")
    logit_scale: float = Field(
        1.0, gt=0, description="the fitted actor's action logits are multiplied by this before RL: the same ranking "
        "(the acting policy unchanged), a sharper sampling policy for PPO to explore from",
    )
    teacher: str = Field(
        ORACLE, pattern=r"^(oracle|rollout:.+|rollout-futures:.+|rollout-past:.+)$",
        description="who values the actions: 'oracle' (ContextOverflow-v0's exhaustive oracle) or 'rollout:<base "
        "policy>' / 'rollout-futures:<base policy>' / 'rollout-past:<base policy>' (ConversationStream-v0's rollouts, "
        "ctxsim.lab.stream.teacher)",
    )
    contexts_per_scenario: int | None = Field(
        None, ge=1, description="the teacher values at most this many contexts (conversations) of each training "
        "scenario, the first seeds (null: every one the training env draws from)",
    )


@dataclass(frozen=True)
class ActionValues:
    """One row per non-terminal state: observation, valid-action mask and ``Q`` (−inf where invalid)."""

    observations: np.ndarray
    masks: np.ndarray
    values: np.ndarray

    def __len__(self) -> int:
        return len(self.values)


def action_values(env, margin: float = math.inf) -> ActionValues:
    """The action values of every state on every chain of valid actions of every
    context a :class:`~ctxsim.lab.environments.overflow.ContextOverflowEnv` draws from,
    keeping the roots and the states reached through an action whose value is within
    ``margin`` of the best at its parent (the states a good policy meets)."""
    settings = env.episode_settings
    rows: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []

    def expand(episode: OverflowEpisode) -> tuple[float, list]:
        """(best value, rows of this state and its kept descendants)."""
        mask = episode.action_mask()
        q = np.full(len(settings.actions), -math.inf)
        below: list[tuple[float, list]] = []
        for i, sid in enumerate(settings.actions):
            if mask[i]:
                child = episode.copy()
                child.step(sid)
                if child.done:
                    q[i] = child.reward
                else:
                    q[i], child_rows = expand(child)
                    below.append((q[i], child_rows))
        best = float(q.max())
        kept = [row for value, child_rows in below if value >= best - margin for row in child_rows]
        return best, [(env.observation_of(episode.state), mask, q), *kept]

    for state in env.contexts():
        episode = OverflowEpisode(state, settings)
        if not episode.done:
            rows.extend(expand(episode)[1])
    obs, masks, q = (np.array(col) for col in zip(*rows))
    return ActionValues(obs.astype(np.float32), masks.astype(bool), q)


def fit(policy: Any, data: ActionValues, config: WarmStart, seed: int) -> dict[str, float]:
    """Fit an SB3 actor-critic ``policy`` in place; returns the final losses, the number
    of states and the fitted policy's :func:`greedy_regret` on them."""
    import torch

    torch.manual_seed(seed)
    obs = torch.as_tensor(data.observations)
    mask = torch.as_tensor(data.masks)
    q = torch.as_tensor(np.where(data.masks, data.values, 0.0), dtype=torch.float32)
    best = q.masked_fill(~mask, -torch.inf).max(dim=1).values
    target = torch.softmax(((q - best[:, None]) / config.scale).masked_fill(~mask, -torch.inf), dim=1)
    optimizer = torch.optim.Adam(policy.parameters(), lr=config.learning_rate, weight_decay=config.weight_decay)
    policy.set_training_mode(True)
    for _ in range(config.epochs):
        logits, value = _forward(policy, obs)
        logp = torch.log_softmax(logits.masked_fill(~mask, -1e9), dim=1).masked_fill(~mask, 0.0)
        actor = -(target * logp).sum(1).mean() + config.entropy * (logp.exp() * logp).sum(1).mean()
        critic = torch.nn.functional.mse_loss(value.squeeze(1), best)
        optimizer.zero_grad()
        (actor + critic).backward()
        optimizer.step()
    if config.logit_scale != 1.0:
        with torch.no_grad():  # the last layer's weights and bias: every logit times the factor
            policy.action_net.weight.mul_(config.logit_scale)
            policy.action_net.bias.mul_(config.logit_scale)
    policy.set_training_mode(False)
    return {"actor_loss": actor.item(), "critic_loss": critic.item(), "states": len(data), "greedy_regret": greedy_regret(policy, data)}


def greedy_regret(policy: Any, data: ActionValues) -> float:
    """Mean over the states of ``max_a Q(s, a) - Q(s, greedy action of the policy)`` (reward units)."""
    import torch

    with torch.no_grad():
        logits, _ = _forward(policy, torch.as_tensor(data.observations))
    scores = np.where(data.masks, logits.numpy(), -np.inf)
    chosen = data.values[np.arange(len(data)), scores.argmax(1)]
    return float((data.values.max(1) - chosen).mean())


def _forward(policy: Any, obs):
    """(action logits, value) of an SB3 ActorCriticPolicy (or its maskable variant)."""
    features = policy.extract_features(obs)
    if isinstance(features, tuple):  # separate actor and critic feature extractors
        latent_pi, latent_vf = policy.mlp_extractor.forward_actor(features[0]), policy.mlp_extractor.forward_critic(features[1])
    else:
        latent_pi, latent_vf = policy.mlp_extractor(features)
    return policy.action_net(latent_pi), policy.value_net(latent_vf)
