"""Design 001's ``computeRLReward``, as named terms with configurable weights.

success:  +1 + 0.5·coherence_delta + 0.3·tokens_reduced/original_tokens + 0.2·P1_preserved
failure:  −1
recovery used: −0.7
latency over 500 ms: −0.1 per second of the *whole* time (design 001: timeMs/1000·0.1)
clamped to [−2, 2].

Profiles (``RewardWeights.profile``, set in an env spec as ``reward: {profile: grounded}``):

* ``seed001`` (the default): exactly the formula above;
* ``grounded``: the same plus, given success, a probe term
  ``probes · (probe_score − 1)`` (0 when every probe is answered, −probes when none
  is; :mod:`ctxsim.probes`). Its default weight 1.5 makes a lost probe cost
  ``1.5 / n`` (n probes) while a drop of ``t`` of the original's ``T`` tokens gains
  at most ``0.3 · t / T`` in the reduction term, so dropping a unit that holds one
  probe answer never pays while the unit is under ``5 / n`` of the context (n = 12
  to 28 on the generated suite: units under 18 % to 42 % of the context; a unit
  holding k answers may be k times larger). A success that loses every probe scores
  about a failure.

Any weight, ``probes`` included, can be set next to the profile; an unset
``probes`` takes the profile's weight.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from .metrics import BreakingOutcome


#: reward profiles and the probe weight each gives when ``probes`` is not set
PROFILE_PROBE_WEIGHTS = {"seed001": 0.0, "grounded": 1.5}


class RewardWeights(BaseModel):
    """Weights of the reward terms (defaults: design 001) and the profile they belong to."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    profile: Literal["seed001", "grounded"] = "seed001"

    success: float = 1.0
    coherence: float = 0.5
    reduction: float = 0.3
    p1: float = 0.2
    failure: float = -1.0
    recovery: float = -0.7
    latency_per_second: float = 0.1
    latency_free_ms: float = Field(500.0, ge=0)
    facts: float = 0.0
    #: weight of the probe term; None: the profile's (PROFILE_PROBE_WEIGHTS)
    probes: float | None = None
    clamp: float = Field(2.0, gt=0)

    @property
    def probe_weight(self) -> float:
        """The weight of the probe term in effect."""
        return PROFILE_PROBE_WEIGHTS[self.profile] if self.probes is None else self.probes

    def without_probes(self) -> RewardWeights:
        """The same weights with the probe term off: what a deployed agent can score
        itself (the probes are the strings the rest of a session uses, which it cannot
        know when it breaks); ``self`` when the term is off already."""
        return self if self.probe_weight == 0.0 else self.model_copy(update={"probes": 0.0})


def reward_terms(outcome: BreakingOutcome, weights: RewardWeights | None = None) -> dict[str, float]:
    """Each named term of the reward (they sum to the unclamped reward)."""
    w = weights or RewardWeights()
    terms = {"success": 0.0, "coherence": 0.0, "reduction": 0.0, "p1": 0.0, "failure": 0.0, "facts": 0.0, "probes": 0.0}
    if outcome.success:
        terms["success"] = w.success
        terms["coherence"] = w.coherence * outcome.coherence_delta
        terms["reduction"] = w.reduction * outcome.reduction
        terms["p1"] = w.p1 * outcome.p1_preserved
        terms["facts"] = w.facts * outcome.facts_retained
        terms["probes"] = w.probe_weight * (outcome.probe_score - 1.0)
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
