"""Probes: the questions a broken context must still answer, and when one is answered.

A probe is one planted :class:`~ctxsim.model.Fact` of the context's ground truth
(``ContextState.fact_table``); its answer is the fact's exact ``value``. The four
kinds of production compaction evaluations map onto the fact kinds:

==============  ================  ================================================
probe kind      fact kind         the answer
==============  ================  ================================================
recall          ``fact``          a planted fact ("$1,250", a port, a ticket id)
artifact        ``artifact``      a file the session wrote or edited: its path,
                                  and a distinctive line of its latest version
continuation    ``continuation``  the current task (a distinctive phrase of it)
                                  and the open item / next step
decision        ``rule``          a rule the user set ("never push to main")
==============  ================  ================================================

Answering rules (no judge, no model):

* a probe is answered when its exact value is a substring of the rendered result
  (:meth:`~ctxsim.model.ContextState.render`, the text a model would receive);
* so a unit kept, compressed in place or folded into a summary answers every probe
  whose value its new text still carries; a value a summary rephrased does not;
* an externalized span (design 002's artifacts) answers only what its pointer
  renders: the pointer's summary and rehydrate hint (which names the files the span
  wrote or read, so their path probes stay answered); the content itself (a
  file's distinctive line, a fact in a log) counts again only once it is
  rehydrated into a unit of the context;
* a dropped unit answers nothing (the dropped-span index is not rendered).

``probe_score`` is the share of all probes answered, 1.0 when the context has none.
The score of a kind is the share of that kind's probes answered, 1.0 when the
context has no probe of that kind (as ``facts_retained``): every kind is always
reported, so result tables keep the same columns for every context.
"""

from __future__ import annotations

from typing import Iterable

from .model import ContextState, Fact

#: the four probe kinds, in report order
PROBE_KINDS = ("recall", "artifact", "continuation", "decision")
#: probe kind of each fact kind
PROBE_KIND_OF = {"fact": "recall", "artifact": "artifact", "continuation": "continuation", "rule": "decision"}
#: result column of each probe kind's score (evaluate CSVs, transition and decision logs)
SCORE_COLUMNS = {kind: f"probe_{kind}" for kind in PROBE_KINDS}


def probe_kind(fact: Fact) -> str:
    """The probe kind a planted fact answers (recall, artifact, continuation, decision)."""
    return PROBE_KIND_OF[fact.kind]


def answered(fact: Fact, rendered: str) -> bool:
    """Whether ``rendered`` (a context's rendered text) answers the probe of ``fact``."""
    return fact.value in rendered


def share_answered(probes: Iterable[Fact], rendered: str) -> float:
    """Share of ``probes`` that ``rendered`` answers (1.0 when there are none)."""
    probes = list(probes)
    return sum(answered(p, rendered) for p in probes) / len(probes) if probes else 1.0


def probe_scores(original: ContextState, final: ContextState) -> dict[str, float]:
    """Share of ``original``'s probes of each kind that ``final`` answers (every kind a key)."""
    rendered = final.render()
    return {
        kind: share_answered((f for f in original.fact_table if probe_kind(f) == kind), rendered)
        for kind in PROBE_KINDS
    }


def probe_score(original: ContextState, final: ContextState) -> float:
    """Share of all of ``original``'s probes that ``final`` answers (1.0 when none)."""
    return share_answered(original.fact_table, final.render())
