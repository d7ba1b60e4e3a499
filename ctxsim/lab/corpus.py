"""A corpus of real agent sessions: its files and its train / validation / held-out split.

A corpus is a folder of chat JSONL sessions (``*.jsonl`` or ``*.jsonl.gz``, read by
:mod:`ctxsim.transcripts`) with a ``splits.yaml`` naming the SWE-bench repositories
(``owner/name``) of each split (``train``, ``validation``, ``held_out``), no repository
on two sides. A session's repository is read from its file name
``{owner}__{name}-{issue}__{run}``. The shipped corpus is
``data/transcripts/mini-swe-agent`` (135 sessions; its SOURCES.md says where they come
from). A *corpus family* (:mod:`ctxsim.lab.scenarios`, ``corpus`` + ``split``) draws one
session of a split per context seed, among the sessions with an agent turn
(:func:`has_agent_turn`: three of the shipped validation sessions end at their task).
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from ..errors import ScenarioError
from ..paths import DATA_DIR
from ..transcripts import load_transcript
from ..validation import load_yaml

DEFAULT_CORPUS = DATA_DIR / "transcripts" / "mini-swe-agent"
SPLITS = ("train", "validation", "held_out")


def session_repository(path: Path) -> str:
    """``owner/name`` of a session file ``{owner}__{name}-{issue}__{run}.jsonl[.gz]``."""
    owner, rest = path.name.split("__", 1)
    return f"{owner}/{rest.split('__', 1)[0].rsplit('-', 1)[0]}"


def corpus_files(folder: str | Path = DEFAULT_CORPUS, split: str | None = None) -> list[Path]:
    """The session files of a corpus folder, those of one split when ``split`` is given
    (raises ScenarioError naming the folder or splits.yaml on a missing or empty folder,
    a bad split file or an unknown split)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ScenarioError("not a folder of sessions", source=folder)
    files = sorted(p for p in folder.iterdir() if p.name.endswith((".jsonl", ".jsonl.gz")))
    if not files:
        raise ScenarioError("no *.jsonl or *.jsonl.gz sessions in this folder", source=folder)
    if split is None:
        return files
    splits = read_splits(folder / "splits.yaml")
    if split not in splits:
        raise ScenarioError(f"unknown split {split!r}; known: {', '.join(SPLITS)}", source=folder / "splits.yaml", key=split)
    return [p for p in files if session_repository(p) in splits[split]]


def has_agent_turn(path: Path) -> bool:
    """Whether a session holds a message after its task (its first user message). One
    that ends at its task has no agent work: a cut of it is the system prompt alone."""
    roles = [unit.role for unit in load_transcript(path).units]
    return "user" in roles and roles.index("user") < len(roles) - 1


def read_splits(path: Path) -> dict[str, list[str]]:
    """The repositories per split of a ``splits.yaml``; no repository on two sides."""
    stat = path.stat() if path.is_file() else None
    return _read_splits(str(path), stat.st_mtime_ns if stat else -1)


@lru_cache(maxsize=16)
def _read_splits(path: str, mtime_ns: int) -> dict[str, list[str]]:
    path = Path(path)
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
