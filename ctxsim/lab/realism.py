"""Generated contexts against real sessions: the statistics, the corpus split, cuts and rank agreement.

``ctxsim realism`` writes ``reports/realism.md`` (and ``realism.png``): for each
statistic of :data:`~ctxsim.lab.realism_stats.STATISTICS`, the median over a family's
generated contexts beside the corpus's 10th, 50th and 90th percentiles (for a yes/no
statistic: the share of contexts on each side), and whether the generated value falls
inside the corpus range; with ``--rank``, the mean reward of every strategy alone
(``only:<id>``, one settings object for all) on the family and on cuts of the corpus,
and the Spearman rank correlation between the two.

The corpus is a folder of chat JSONL sessions (``*.jsonl`` or ``*.jsonl.gz``) with a
``splits.yaml`` naming the SWE-bench repositories (``owner/name``) of each split
(``train``, ``validation``, ``held_out``); a session's repository is read from its
file name ``{owner}__{name}-{issue}__{run}``.

A *cut* of a session (:func:`cut_messages`) is its first messages up to a drawn share,
ended after a tool result so that every call keeps its result; :func:`cut_scenarios`
makes it a transcript scenario at a drawn overflow (its tokens over the limit), the
range of the shipped transcript families.
"""

from __future__ import annotations

import gzip
import json
import math
import tempfile
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd

from ..atomic import atomic_write_bytes, atomic_write_text
from ..episode import EpisodeSettings
from ..errors import ScenarioError
from ..model import DEFAULT_MIN_LIMIT, ContextState
from ..paths import DATA_DIR
from ..strategies.registry import list_strategies
from ..transcripts import load_transcript
from ..validation import load_yaml
from .contexts import build_context
from .evaluate import evaluate
from .families import draw_rng
from .realism_stats import STATISTICS, context_stats
from .report import _png
from .scenarios import Scenario, find_scenario

DEFAULT_CORPUS = DATA_DIR / "transcripts" / "mini-swe-agent"
DEFAULT_FAMILY = DATA_DIR / "families" / "agent_sessions.yaml"
SPLITS = ("train", "validation", "held_out")
#: a cut keeps this share of a session's messages (drawn uniformly per cut)
CUT_SHARE = (0.3, 1.0)
#: a cut's tokens over its limit (drawn uniformly per cut), the shipped transcript families' range
CUT_OVERFLOW = (1.1, 2.5)


def session_repository(path: Path) -> str:
    """``owner/name`` of a session file ``{owner}__{name}-{issue}__{run}.jsonl[.gz]``."""
    owner, rest = path.name.split("__", 1)
    return f"{owner}/{rest.split('__', 1)[0].rsplit('-', 1)[0]}"


def corpus_files(folder: str | Path = DEFAULT_CORPUS, split: str | None = None) -> list[Path]:
    """The session files of a corpus folder, those of one split when ``split`` is given
    (raises ScenarioError naming splits.yaml on a bad split file or an unknown split)."""
    folder = Path(folder)
    files = sorted(p for p in folder.iterdir() if p.name.endswith((".jsonl", ".jsonl.gz")))
    if not files:
        raise ScenarioError("no *.jsonl or *.jsonl.gz sessions in this folder", source=folder)
    if split is None:
        return files
    splits = read_splits(folder / "splits.yaml")
    if split not in splits:
        raise ScenarioError(f"unknown split {split!r}; known: {', '.join(SPLITS)}", source=folder / "splits.yaml", key=split)
    return [p for p in files if session_repository(p) in splits[split]]


def read_splits(path: Path) -> dict[str, list[str]]:
    """The repositories per split of a ``splits.yaml``; no repository on two sides."""
    data = load_yaml(path, ScenarioError)
    if not isinstance(data, dict) or sorted(data) != sorted(SPLITS):
        raise ScenarioError(f"expected the keys {', '.join(SPLITS)} (got {sorted(data) if isinstance(data, dict) else data!r})",
                            source=path)
    seen: dict[str, str] = {}
    for split in SPLITS:
        repos = data[split]
        if not isinstance(repos, list) or not all(isinstance(r, str) and r.count("/") == 1 for r in repos):
            raise ScenarioError(f"expected a list of owner/name repositories (got {repos!r})", source=path, key=split)
        for repo in repos:
            if repo in seen:
                raise ScenarioError(f"repository {repo!r} is also in {seen[repo]}", source=path, key=split)
            seen[repo] = split
    return {split: list(data[split]) for split in SPLITS}


def _messages(path: Path) -> list[dict]:
    raw = path.read_bytes()
    text = (gzip.decompress(raw) if path.suffix == ".gz" else raw).decode("utf-8")
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def cut_messages(messages: list[dict], share: float) -> list[dict]:
    """The first ``share`` of ``messages``, ended after the last tool result at or before
    that point (never before the task: at least the first two messages)."""
    end = max(2, math.ceil(share * len(messages)))
    while end > 2 and messages[end - 1].get("role") != "tool":
        end -= 1
    return messages[:end]


def cut_scenarios(files: Sequence[Path], folder: Path, seed: int = 0) -> list[Scenario]:
    """One cut per session file, written to ``folder`` as a transcript scenario: a share of
    its messages from :data:`CUT_SHARE` and an overflow from :data:`CUT_OVERFLOW`, both
    drawn from ``seed`` and the file's position (the limit is the cut's tokens over the
    overflow; its floor is lowered to a smaller limit). Sessions whose cut is only the
    system prompt and task are skipped."""
    scenarios = []
    for i, path in enumerate(files):
        rng = draw_rng(seed * 100_003 + i)
        share, overflow = float(rng.uniform(*CUT_SHARE)), float(rng.uniform(*CUT_OVERFLOW))
        messages = cut_messages(_messages(path), share)
        if len(messages) < 4:
            continue
        stem = path.name.split(".jsonl")[0]
        out = folder / f"{stem}.jsonl"
        atomic_write_text(out, "".join(json.dumps(m) + "\n" for m in messages))
        limit = max(1, round(load_transcript(out).total_tokens / overflow))
        scenarios.append(Scenario.model_validate({"name": f"cut-{stem}", "transcript": str(out), "limit": limit,
                                                  "min_limit": min(limit, DEFAULT_MIN_LIMIT)}))
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


def rank_agreement(generated: Sequence[Scenario], cuts: Sequence[Scenario], seeds: int, strategies: Sequence[str]) -> pd.DataFrame:
    """Mean reward of each ``only:<id>`` policy on ``generated`` (``seeds`` contexts each)
    and on ``cuts`` (one context each), with every strategy in the action set."""
    settings = EpisodeSettings(actions=tuple(strategies))
    policies = [f"only:{s}" for s in strategies]
    quiet = lambda message: None  # noqa: E731 - notes about seeds of one-context transcripts
    gen = evaluate(policies, list(generated), seeds, settings, note=quiet).groupby("policy")["reward"].mean()
    real = evaluate(policies, list(cuts), 1, settings, note=quiet).groupby("policy")["reward"].mean()
    return pd.DataFrame({"generated": gen, "corpus_cuts": real}).loc[policies]


def spearman(a: Sequence[float], b: Sequence[float]) -> float:
    """Spearman's rank correlation (average ranks for ties)."""
    return float(pd.Series(list(a)).rank().corr(pd.Series(list(b)).rank()))


def write_report(table: pd.DataFrame, out: Path, *, family: str, contexts: int, corpus: str, sessions: int,
                 ranks: pd.DataFrame | None = None, rank_note: str = "") -> None:
    """``out`` (markdown) and a figure beside it (``.png``): the statistics table, and the rank agreement when given."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    lines = ["# Realism: generated contexts against real sessions", "",
             f"Generated: {contexts} contexts of `{family}`. Corpus: {sessions} sessions of `{corpus}`. "
             "Generated is the median over contexts (a yes/no statistic: the share of contexts); the corpus columns are "
             "its 10th, 50th and 90th percentiles over whole sessions (a yes/no statistic: its share). *Inside*: within "
             "the corpus's 10-90 % range (a yes/no statistic: within 0.2 of the corpus's share). Statistics are defined in "
             "`ctxsim/lab/realism_stats.py`. Command: `ctxsim realism --rank`.", "",
             "| statistic | generated | corpus p10 | p50 | p90 | inside |", "| --- | ---: | ---: | ---: | ---: | --- |"]
    for row in table.itertuples():
        lines.append(f"| {row.statistic} | {row.generated:.3g} | {row.corpus_p10:.3g} | {row.corpus_p50:.3g} | "
                     f"{row.corpus_p90:.3g} | {'yes' if row.inside else 'no'} |")
    lines += ["", f"![statistics]({out.with_suffix('.png').name})", ""]
    if ranks is not None:
        rho = spearman(ranks["generated"], ranks["corpus_cuts"])
        lines += ["## Strategy-rank agreement", "", rank_note, "",
                  f"Spearman rank correlation of the mean rewards: **{rho:.2f}**.", "",
                  "| policy | generated | corpus cuts |", "| --- | ---: | ---: |"]
        lines += [f"| {p} | {r.generated:+.3f} | {r.corpus_cuts:+.3f} |" for p, r in ranks.iterrows()]
        lines.append("")
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
    files = corpus_files(corpus, split)
    generated = stats_frame([build_context(scenario, seed) for seed in range(contexts)])
    real = stats_frame([load_transcript(p) for p in files])
    table = compare(generated, real)
    ranks, note = None, ""
    if rank:
        strategies = [s for s in list_strategies() if s != "error"]
        picked = files[:: max(1, len(files) // rank_contexts)][:rank_contexts]
        with tempfile.TemporaryDirectory() as tmp:
            cuts = cut_scenarios(picked, Path(tmp))
            ranks = rank_agreement([scenario], cuts, rank_contexts, strategies)
        note = (f"Each strategy alone (`only:<id>`, every strategy but `error` in the action set, default settings) on "
                f"{rank_contexts} contexts of the family and on one cut of each of {len(cuts)} corpus sessions (every "
                f"{max(1, len(files) // rank_contexts)}th file): a cut keeps the first {CUT_SHARE[0]:g}-{CUT_SHARE[1]:g} "
                f"of the session's messages (drawn per session), ended after a tool result, at a limit of its tokens over "
                f"an overflow of {CUT_OVERFLOW[0]:g}-{CUT_OVERFLOW[1]:g} (drawn per session; a transcript scenario, "
                "`ctxsim/lab/realism.py` `cut_scenarios`).")
    write_report(table, Path(out), family=_shown(family), contexts=contexts, corpus=_shown(corpus) + (f" ({split})" if split else ""),
                 sessions=len(files), ranks=ranks, rank_note=note)
    return table
