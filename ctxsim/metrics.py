"""Outcome metrics of a break: design 001's ``BreakingOutcome`` plus facts retained.

Definitions (MISSION.md):

* success — the final context fits the target (the limit unless given); the
  episode (:mod:`ctxsim.episode`) turns it off when a recovery was forced after
  ``max_steps``;
* used_recovery — a recovery mode (fresh_start, truncate) was applied in this break
  (the original's own history does not count);
* coherence — how much of the original's content the final context still carries,
  in [0, 1] (1 = unchanged), by the named measure of :mod:`ctxsim.coherence`
  (default ``recall``: token-weighted recall of the original's sentences, rescaled
  so that chance matches score 0); coherence_delta = coherence − 1;
* p1_preserved — share of the original P1 units still present (compressed in place
  counts as present; folded into a summary does not) with their planted rules and
  facts (in the unit or in the result; a unit's artifact and continuation probes
  are scored by the probe metrics, not here); 1.0 when there were none;
* facts_retained / rules_retained — share of the planted facts / rules whose exact
  value still appears in the rendered final context; 1.0 when none were planted;
* probe_score — share of all probes (every planted item of ground truth: facts,
  rules, artifacts, continuation) answered by the final context, 1.0 when there
  are none; probe_recall / probe_artifact / probe_continuation / probe_decision —
  the same per probe kind, 1.0 for a kind without probes (answering rules:
  :mod:`ctxsim.probes`).
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from .coherence import DEFAULT_MEASURE, get_measure
from .model import STATED_KINDS, ContextState
from .probes import PROBE_KINDS, probe_score, probe_scores

RECOVERY_IDS = frozenset({"fresh_start", "truncate"})


@dataclass(frozen=True)
class BreakingOutcome:
    success: bool
    used_recovery: bool
    coherence: float
    coherence_delta: float
    tokens_reduced: int
    original_tokens: int
    final_tokens: int
    target_tokens: int
    p1_preserved: float
    facts_retained: float
    rules_retained: float
    time_ms: float
    probe_score: float = 1.0
    probe_recall: float = 1.0
    probe_artifact: float = 1.0
    probe_continuation: float = 1.0
    probe_decision: float = 1.0

    @property
    def probe_scores(self) -> dict[str, float]:
        """Share of probes answered per kind (recall, artifact, continuation, decision)."""
        return {kind: getattr(self, f"probe_{kind}") for kind in PROBE_KINDS}

    @property
    def reduction(self) -> float:
        """tokens_reduced / original_tokens (0 for an empty original)."""
        return self.tokens_reduced / self.original_tokens if self.original_tokens else 0.0

    def to_dict(self) -> dict:
        """The fields by name, in definition order (every field is a scalar: no deep copy)."""
        return {name: getattr(self, name) for name in _OUTCOME_FIELDS}


#: BreakingOutcome's field names, in definition order (what to_dict writes)
_OUTCOME_FIELDS = tuple(f.name for f in fields(BreakingOutcome))


def coherence(
    original: ContextState, final: ContextState, embedder_id: str = "hashed-tfidf", measure: str = DEFAULT_MEASURE
) -> float:
    """Coherence of ``final`` with ``original`` in [0, 1] by the named ``measure``."""
    return get_measure(measure)(original, final, embedder_id)


def p1_preserved(original: ContextState, final: ContextState) -> float:
    """Share of the original P1 units kept: present by id (compressed in place
    counts, folded into a summary does not) and still carrying every planted rule
    and fact value they held (kinds :data:`~ctxsim.model.STATED_KINDS`), in the unit
    or elsewhere in the result; 1.0 when there were none."""
    p1 = [u.id for u in original.units if u.priority == 1]
    if not p1:
        return 1.0
    planted: dict[str, list[str]] = {}
    for fact in original.fact_table:
        if fact.kind in STATED_KINDS:
            planted.setdefault(fact.unit_id, []).append(fact.value)
    text = final.render() if any(uid in planted for uid in p1) else ""
    kept = sum(
        uid in final and all(v in final.unit(uid).content or v in text for v in planted.get(uid, ())) for uid in p1
    )
    return kept / len(p1)


def retained(original: ContextState, final: ContextState, kind: str | None = None) -> float:
    """Share of planted facts (``kind`` "fact", "rule" or both) whose value survives."""
    facts = [f for f in original.fact_table if kind is None or f.kind == kind]
    if not facts:
        return 1.0
    text = final.render()
    return sum(f.value in text for f in facts) / len(facts)


def used_recovery(original: ContextState, final: ContextState) -> bool:
    """Whether this break applied a recovery mode: the steps ``final`` added to
    ``original``'s history (a recovery from an earlier break does not count)."""
    return any(step in RECOVERY_IDS for step in final.history[len(original.history):])


def outcome(
    original: ContextState,
    final: ContextState,
    *,
    time_ms: float = 0.0,
    target_tokens: int | None = None,
    embedder_id: str = "hashed-tfidf",
    coherence_measure: str = DEFAULT_MEASURE,
) -> BreakingOutcome:
    """Metrics of breaking ``original`` into ``final`` (``time_ms``: latency spent;
    ``coherence_measure``: a name of :data:`ctxsim.coherence.MEASURES`)."""
    target = original.limit if target_tokens is None else target_tokens
    coh = coherence(original, final, embedder_id, coherence_measure)
    by_kind = probe_scores(original, final)
    return BreakingOutcome(
        success=final.total_tokens <= target,
        used_recovery=used_recovery(original, final),
        coherence=coh,
        coherence_delta=coh - 1.0,
        tokens_reduced=original.total_tokens - final.total_tokens,
        original_tokens=original.total_tokens,
        final_tokens=final.total_tokens,
        target_tokens=target,
        p1_preserved=p1_preserved(original, final),
        facts_retained=retained(original, final, "fact"),
        rules_retained=retained(original, final, "rule"),
        time_ms=float(time_ms),
        probe_score=probe_score(original, final),
        **{f"probe_{kind}": score for kind, score in by_kind.items()},
    )
