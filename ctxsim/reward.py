"""Seed 001's ``computeRLReward``, as named terms with configurable weights.

success:  +1 + 0.5·coherence_delta + 0.3·tokens_reduced/original_tokens + 0.2·P1_preserved
failure:  −1
recovery used: −0.7
latency over 500 ms: −0.1 per second of the *whole* time (seed 001: timeMs/1000·0.1)
clamped to [−2, 2].
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from .metrics import BreakingOutcome


class RewardWeights(BaseModel):
    """Weights of the reward terms (defaults: seed 001)."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    success: float = 1.0
    coherence: float = 0.5
    reduction: float = 0.3
    p1: float = 0.2
    failure: float = -1.0
    recovery: float = -0.7
    latency_per_second: float = 0.1
    latency_free_ms: float = Field(500.0, ge=0)
    facts: float = 0.0
    clamp: float = Field(2.0, gt=0)


def reward_terms(outcome: BreakingOutcome, weights: RewardWeights | None = None) -> dict[str, float]:
    """Each named term of the reward (they sum to the unclamped reward)."""
    w = weights or RewardWeights()
    terms = {"success": 0.0, "coherence": 0.0, "reduction": 0.0, "p1": 0.0, "failure": 0.0, "facts": 0.0}
    if outcome.success:
        terms["success"] = w.success
        terms["coherence"] = w.coherence * outcome.coherence_delta
        terms["reduction"] = w.reduction * outcome.reduction
        terms["p1"] = w.p1 * outcome.p1_preserved
        terms["facts"] = w.facts * outcome.facts_retained
    else:
        terms["failure"] = w.failure
    terms["recovery"] = w.recovery if outcome.used_recovery else 0.0
    terms["latency"] = -(outcome.time_ms / 1000) * w.latency_per_second if outcome.time_ms > w.latency_free_ms else 0.0
    return terms


def compute_reward(outcome: BreakingOutcome, weights: RewardWeights | None = None) -> float:
    """The clamped reward of one break."""
    w = weights or RewardWeights()
    total = sum(reward_terms(outcome, w).values())
    return max(-w.clamp, min(w.clamp, total))
