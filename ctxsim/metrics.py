"""Outcome metrics of a break: seed 001's ``BreakingOutcome`` plus facts retained.

Definitions (MISSION.md):

* success — the final context fits the target (the limit unless given); the
  episode (:mod:`ctxsim.episode`) turns it off when a recovery was forced after
  ``max_steps``;
* used_recovery — a recovery mode (fresh_start, truncate) was applied in this break
  (the original's own history does not count);
* coherence — embedding cosine similarity between the rendered final context and
  the rendered original, in [0, 1]; each context is embedded unit by unit and
  averaged with token weights (long contexts exceed embedder input sizes);
  coherence_delta = coherence − 1;
* p1_preserved — share of the original P1 units still present (compressed in place
  counts as present; folded into a summary does not) with their planted rules and
  facts (in the unit or in the result); 1.0 when there were none;
* facts_retained / rules_retained — share of the planted facts / rules whose exact
  value still appears in the rendered final context; 1.0 when none were planted.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from .model import ContextState

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

    @property
    def reduction(self) -> float:
        """tokens_reduced / original_tokens (0 for an empty original)."""
        return self.tokens_reduced / self.original_tokens if self.original_tokens else 0.0

    def to_dict(self) -> dict:
        return asdict(self)


def coherence(original: ContextState, final: ContextState, embedder_id: str = "hashed-tfidf") -> float:
    """Cosine similarity of the two rendered contexts, in [0, 1]."""
    from .relevance import get_embedder, similarity

    if original.fingerprint == final.fingerprint:
        return 1.0
    if not final.units or not original.units:
        return 0.0
    return float(
        similarity(
            [u.content for u in original.units],
            [u.token_count for u in original.units],
            [u.content for u in final.units],
            [u.token_count for u in final.units],
            get_embedder(embedder_id),
        )
    )


def p1_preserved(original: ContextState, final: ContextState) -> float:
    """Share of the original P1 units kept: present by id (compressed in place
    counts, folded into a summary does not) and still carrying every planted rule
    and fact value they held, in the unit or elsewhere in the result; 1.0 when there
    were none."""
    p1 = [u.id for u in original.units if u.priority == 1]
    if not p1:
        return 1.0
    planted: dict[str, list[str]] = {}
    for fact in original.fact_table:
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
) -> BreakingOutcome:
    """Metrics of breaking ``original`` into ``final`` (``time_ms``: latency spent)."""
    target = original.limit if target_tokens is None else target_tokens
    coh = coherence(original, final, embedder_id)
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
    )
