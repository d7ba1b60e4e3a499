"""Generated contexts against real sessions: the statistics, the corpus split, cuts and rank agreement.

``ctxsim realism`` writes ``reports/realism.md`` (and ``realism.png``): for each
statistic of :data:`~ctxsim.lab.realism_stats.STATISTICS`, the median over a family's
generated contexts beside the corpus's 10th, 50th and 90th percentiles (for a yes/no
statistic: the share of contexts on each side), and whether the generated value falls
inside the corpus range; with ``--rank``, the mean reward of every strategy alone
(``only:<id>``, one settings object for all) on the family and on cuts of the corpus,
beside what each kept, and the Spearman rank correlation between the two with its
bootstrap interval.

A *cut* of a session is its first messages up to a drawn share, ended after a tool
result so that every call keeps its result (:func:`ctxsim.cuts.cut_index`, what every
transcript ``cut`` uses); :func:`cut_scenarios` makes it a transcript scenario at a
drawn overflow (its tokens over the limit), the range of the shipped transcript
families. The corpus and its split are :mod:`ctxsim.lab.corpus`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd

from ..atomic import atomic_write_bytes, atomic_write_text
from ..episode import EpisodeSettings
from ..model import DEFAULT_MIN_LIMIT, ContextState
from ..paths import DATA_DIR
from ..reward import RewardWeights
from ..strategies.registry import list_strategies
from ..transcripts import load_transcript
from .contexts import build_context
from .corpus import DEFAULT_CORPUS, corpus_files, has_agent_turn
from .evaluate import evaluate
from .families import draw_rng
from .realism_stats import STATISTICS, context_stats
from .report import _png
from .scenarios import Scenario, find_scenario
from .stats import rank_correlation_ci

DEFAULT_FAMILY = DATA_DIR / "families" / "agent_sessions.yaml"
#: a cut keeps this share of a session's messages (drawn uniformly per cut)
CUT_SHARE = (0.3, 1.0)
#: ... below 1 (a cut leaves at least one message of future)
MAX_CUT = 0.999
#: a cut's tokens over its limit (drawn uniformly per cut), the shipped transcript families' range
CUT_OVERFLOW = (1.1, 2.5)
#: the user's instructions of the shipped agent templates: a cut's decision probes, as the
#: corpus families' cuts have them (``data/families/swe_corpus.yaml``)
INSTRUCTIONS = DATA_DIR / "transcripts" / "instructions.yaml"


def cut_scenarios(files: Sequence[Path], seed: int = 0) -> list[Scenario]:
    """One cut per session file, as a transcript scenario with ``cut`` (:func:`ctxsim.cuts.cut_index`:
    ended after a tool result): a share of its messages from :data:`CUT_SHARE` and an
    overflow from :data:`CUT_OVERFLOW`, both drawn from ``seed`` and the file's position
    (the limit is the cut's tokens over the overflow; its floor is lowered to a smaller
    limit); its probes are those of the corpus families' cuts, the user's instructions of
    :data:`INSTRUCTIONS` among them. Sessions whose cut is only the system prompt and
    task are skipped."""
    scenarios = []
    for i, path in enumerate(files):
        rng = draw_rng(seed * 100_003 + i)
        share, overflow = float(rng.uniform(*CUT_SHARE)), float(rng.uniform(*CUT_OVERFLOW))
        share = min(share, MAX_CUT)
        state = load_transcript(path, cut=share)
        if len(state.units) < 4:
            continue
        limit = max(1, round(state.total_tokens / overflow))
        stem = path.name.split(".jsonl")[0]
        scenarios.append(Scenario.model_validate({"name": f"cut-{stem}", "transcript": str(path), "cut": share,
                                                  "limit": limit, "min_limit": min(limit, DEFAULT_MIN_LIMIT),
                                                  "instructions": str(INSTRUCTIONS)}))
    return scenarios


def stats_frame(states: Sequence[ContextState]) -> pd.DataFrame:
    """One row of statistics per context."""
    return pd.DataFrame([context_stats(s) for s in states])


def compare(generated: pd.DataFrame, corpus: pd.DataFrame) -> pd.DataFrame:
    """Per statistic: the generated median (share for a yes/no statistic), the corpus's
    10th/50th/90th percentiles (its share), and ``inside``: within the corpus's 10-90 %
    range (a share within 0.2 of the corpus's)."""
    rows = []
    for stat in STATISTICS:
        g, c = generated[stat.key], corpus[stat.key]
        if stat.flag:
            value, lo, mid, hi = g.mean(), c.mean(), c.mean(), c.mean()
            inside = abs(value - mid) <= 0.2
        else:
            value = g.median()
            lo, mid, hi = np.percentile(c, [10, 50, 90])
            inside = lo <= value <= hi
        rows.append({"statistic": stat.label, "key": stat.key, "generated": float(value), "corpus_p10": float(lo),
                     "corpus_p50": float(mid), "corpus_p90": float(hi), "inside": bool(inside)})
    return pd.DataFrame(rows)


def rank_cuts(files: Sequence[Path], count: int) -> list[Scenario]:
    """The cuts (:func:`cut_scenarios`) of ``count`` sessions of ``files`` taken at an even stride."""
    return cut_scenarios(files[:: max(1, len(files) // count)][:count])


#: the reward profiles the rank table scores every episode by: design 001's (the default)
#: and ``grounded`` (its probe term added: what the default experiment trains on)
PROFILES = ("seed001", "grounded")
#: what each policy kept, beside its mean rewards in the rank table: column -> its heading
KEPT_COLUMNS = {"probe_score": "probes", "p1_preserved": "P1", "rules_retained": "rules", "reduction_pct": "tokens cut %"}
#: the two sides of the rank table: key -> how the report names it
SIDES = {"generated": "generated", "corpus_cuts": "corpus cuts"}


@dataclass(frozen=True)
class RankAgreement:
    """The strategies' rewards on generated contexts and on corpus cuts.

    ``means``: a row per policy; for each side, its mean reward under each profile of
    :data:`PROFILES` (column ``<side>_<profile>``) and what the policy kept there (the
    means of :data:`KEPT_COLUMNS`, ``<side>_<column>``: the same episodes under every
    profile). ``rewards``: profile -> side -> reward per context (rows) and policy
    (columns, in the order of ``means``)."""

    means: pd.DataFrame
    rewards: dict[str, dict[str, pd.DataFrame]]

    def correlation(self, profile: str = PROFILES[0], policies: Sequence[str] | None = None, reps: int = 2000,
                    seed: int = 0) -> tuple[float, float, float]:
        """Spearman's correlation of the two sides' mean rewards under ``profile`` (over
        ``policies``, default all), with its 95 % bootstrap interval (each side's contexts
        resampled on their own: :func:`rank_correlation_ci`)."""
        chosen = list(self.means.index if policies is None else policies)
        sides = self.rewards[profile]
        return rank_correlation_ci(sides["generated"][chosen].to_numpy(), sides["corpus_cuts"][chosen].to_numpy(),
                                   reps=reps, seed=seed)

    def positive(self, profile: str) -> list[str]:
        """The policies whose mean reward under ``profile`` is above zero on both sides, in
        the order of ``means``."""
        means = self.means
        return [p for p in means.index if means.loc[p, f"generated_{profile}"] > 0 and means.loc[p, f"corpus_cuts_{profile}"] > 0]


def rank_agreement(generated: Sequence[Scenario], cuts: Sequence[Scenario], seeds: int, strategies: Sequence[str],
                   policies: Sequence[str] | None = None) -> RankAgreement:
    """Each ``only:<id>`` policy of ``strategies`` (or of ``policies``, a part of them)
    on ``generated`` (``seeds`` contexts each) and on ``cuts`` (one context each), with
    every strategy of ``strategies`` in the action set, scored under each profile of
    :data:`PROFILES` (see :class:`RankAgreement`)."""
    policies = list(policies) if policies is not None else [f"only:{s}" for s in strategies]
    quiet = lambda message: None  # noqa: E731 - notes about seeds of one-context transcripts
    columns: dict[str, pd.Series] = {}
    rewards: dict[str, dict[str, pd.DataFrame]] = {profile: {} for profile in PROFILES}
    for side, (scenarios, count) in {"generated": (generated, seeds), "corpus_cuts": (cuts, 1)}.items():
        for profile in PROFILES:
            settings = EpisodeSettings(actions=tuple(strategies), reward=RewardWeights(profile=profile))
            frame = evaluate(policies, list(scenarios), count, settings, note=quiet, oracle=False)
            columns[f"{side}_{profile}"] = frame.groupby("policy")["reward"].mean()
            rewards[profile][side] = frame.pivot_table(index=["scenario", "seed"], columns="policy", values="reward")[policies]
        kept = frame.groupby("policy")[list(KEPT_COLUMNS)].mean()  # a profile scores the episodes; it does not change them
        columns |= {f"{side}_{column}": kept[column] for column in KEPT_COLUMNS}
    return RankAgreement(pd.DataFrame(columns).loc[policies], rewards)


def rank_table(means: pd.DataFrame) -> list[str]:
    """The rank table's lines (``means`` as :class:`RankAgreement` has it): each policy's
    mean reward on either side under each profile and, beside them, what it kept there
    (probes answered, P1 preserved, rules retained: shares; tokens cut: percent); the
    best reward of each column in bold."""
    head, columns = [], []
    for side, name in SIDES.items():
        head += [f"{name}: reward (`{profile}`)" for profile in PROFILES] + [f"{name}: {kept}" for kept in KEPT_COLUMNS.values()]
        columns += [f"{side}_{profile}" for profile in PROFILES] + [f"{side}_{column}" for column in KEPT_COLUMNS]
    best = {f"{side}_{profile}": f"{means[f'{side}_{profile}'].max():+.3f}" for side in SIDES for profile in PROFILES}
    lines = [f"| policy | {' | '.join(head)} |", "| --- |" + " ---: |" * len(head)]
    for policy, row in means.iterrows():
        cells = []
        for column in columns:
            if column in best:
                value = f"{row[column]:+.3f}"
                cells.append(f"**{value}**" if value == best[column] else value)
            else:
                cells.append(f"{row[column]:.0f}" if column.endswith("reduction_pct") else f"{row[column]:.2f}")
        lines.append(f"| {policy} | " + " | ".join(cells) + " |")
    return lines


def write_report(table: pd.DataFrame, out: Path, *, family: str, contexts: int, corpus: str, sessions: int,
                 left_out: int = 0, ranks: RankAgreement | None = None, rank_note: str = "",
                 command: str = "ctxsim realism") -> None:
    """``out`` (markdown) and a figure beside it (``.png``): the statistics table, and the
    rank agreement when given; ``command`` is the command line that made it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    lines = ["# Realism: generated contexts against real sessions", "",
             f"Generated: {contexts} contexts of `{family}`. Corpus: {sessions} sessions of `{corpus}`"
             + (f" ({left_out} more end at their task and are left out)" if left_out else "") + ". "
             "Generated is the median over contexts (a yes/no statistic: the share of contexts); the corpus columns are "
             "its 10th, 50th and 90th percentiles over whole sessions (a yes/no statistic: its share). *Inside*: within "
             "the corpus's 10-90 % range (a yes/no statistic: within 0.2 of the corpus's share). Statistics are defined in "
             f"`ctxsim/lab/realism_stats.py`. Command: `{command}`.", "",
             "| statistic | generated | corpus p10 | p50 | p90 | inside |", "| --- | ---: | ---: | ---: | ---: | --- |"]
    for row in table.itertuples():
        lines.append(f"| {row.statistic} | {row.generated:.3g} | {row.corpus_p10:.3g} | {row.corpus_p50:.3g} | "
                     f"{row.corpus_p90:.3g} | {'yes' if row.inside else 'no'} |")
    lines += ["", f"![statistics]({out.with_suffix('.png').name})", ""]
    if ranks is not None:
        said, among = [], []
        for profile in PROFILES:
            rho, lo, hi = ranks.correlation(profile)
            said.append(f"**{rho:.2f}** under `{profile}` (95 % bootstrap interval {lo:.2f} to {hi:.2f})")
            positive = ranks.positive(profile)
            if len(positive) > 2:
                rho, lo, hi = ranks.correlation(profile, positive)
                among.append(f"**{rho:.2f}** [{lo:.2f}, {hi:.2f}] under `{profile}` ({len(positive)} strategies)")
        lines += ["## Strategy-rank agreement", "", rank_note, "",
                  f"Spearman rank correlation of the mean rewards: {'; '.join(said)}; each side's contexts resampled on "
                  "their own, the policies paired within a side."
                  + (f" Among the strategies whose mean reward is above zero on both sides (the others score at or "
                     "below zero on one side or both: most cannot fit a context alone and end in a forced recovery, and "
                     f"they carry much of the correlation): {'; '.join(among)}." if among else ""),
                  "", *rank_table(ranks.means), ""]
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out, "\n".join(lines))
    fig, ax = plt.subplots(figsize=(8, 0.38 * len(table) + 1))
    scale = table[["corpus_p90", "generated"]].abs().max(axis=1).replace(0, 1)
    y = np.arange(len(table))[::-1]
    ax.hlines(y, table.corpus_p10 / scale, table.corpus_p90 / scale, color="tab:blue", lw=6, alpha=0.4, label="corpus 10-90 %")
    ax.plot(table.corpus_p50 / scale, y, "|", color="tab:blue", ms=12, label="corpus median")
    ax.plot(table.generated / scale, y, "o", color="tab:orange", label="generated")
    ax.set_yticks(y, table.key)
    ax.set_xlabel("value / max(corpus p90, generated)")
    ax.legend(loc="lower left", fontsize=8)  # the yes/no statistics sit at the right
    fig.tight_layout()
    atomic_write_bytes(out.with_suffix(".png"), _png(fig))
    plt.close(fig)


def _shown(path: Path) -> str:
    """``path`` relative to the working directory when it is under it (so reports do not name a machine's folders)."""
    try:
        return str(Path(path).resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def run(family: Path = DEFAULT_FAMILY, contexts: int = 20, corpus: Path = DEFAULT_CORPUS, split: str | None = None,
        out: Path = Path("reports/realism.md"), rank: bool = False, rank_contexts: int = 12) -> pd.DataFrame:
    """What ``ctxsim realism`` runs; returns the statistics table."""
    scenario = find_scenario(family)
    listed = corpus_files(corpus, split)
    files = [p for p in listed if has_agent_turn(p)]  # a session that ends at its task is a system prompt and a task, no session to compare
    generated = stats_frame([build_context(scenario, seed) for seed in range(contexts)])
    real = stats_frame([load_transcript(p) for p in files])
    table = compare(generated, real)
    ranks, note = None, ""
    if rank:
        strategies = [s for s in list_strategies() if s != "error"]
        cuts = rank_cuts(files, rank_contexts)
        ranks = rank_agreement([scenario], cuts, rank_contexts, strategies)
        note = (f"Each strategy alone (`only:<id>`, every strategy but `error` in the action set, default settings) on "
                f"{rank_contexts} contexts of the family and on one cut of each of {len(cuts)} corpus sessions (every "
                f"{max(1, len(files) // rank_contexts)}th file): a cut keeps the first {CUT_SHARE[0]:g}-{CUT_SHARE[1]:g} "
                f"of the session's messages (drawn per session), ended after a tool result, at a limit of its tokens over "
                f"an overflow of {CUT_OVERFLOW[0]:g}-{CUT_OVERFLOW[1]:g} (drawn per session; a transcript scenario, "
                "`ctxsim/lab/realism.py` `cut_scenarios`). Each episode is scored by design 001's reward (`seed001`, "
                "the default) and by `grounded` (its probe term added, the reward the default experiment trains on). "
                "Beside the mean rewards, what the strategy kept there: the "
                "share of probes answered, of P1 units preserved and of rules retained (a cut's rules are the user's "
                "instructions its task message states, `data/transcripts/instructions.yaml`), and the percent of tokens "
                "cut; the best mean reward of each column is in bold.")
    options = [("--family", _shown(family), _shown(DEFAULT_FAMILY)), ("--contexts", contexts, 20),
               ("--corpus", _shown(corpus), _shown(DEFAULT_CORPUS)), ("--split", split, None)]
    command = " ".join(["ctxsim realism", *(f"{flag} {value}" for flag, value, default in options if value != default),
                        *(["--rank"] if rank else [])])
    write_report(table, Path(out), family=_shown(family), contexts=contexts, corpus=_shown(corpus) + (f" ({split})" if split else ""),
                 sessions=len(files), left_out=len(listed) - len(files), ranks=ranks, rank_note=note, command=command)
    return table
