"""Plugins: packages outside ctxsim that add strategies, policies or embedders.

A distribution declares entry points in the group ``ctxsim.plugins`` (as gymnasium's
``gymnasium.envs`` or pytest's ``pytest11``); each names a module that, when
imported, registers what it adds with the public register functions
(:func:`ctxsim.strategies.register`, :func:`ctxsim.policies.register_policy`,
``register_family``, ``register_loader``, :func:`ctxsim.relevance.register_embedder`)::

    [project.entry-points."ctxsim.plugins"]
    my-strategies = "my_package.ctxsim_plugin"

:func:`load_plugins` imports them once per process, at the first lookup or listing
of a registry (``list_strategies``, ``strategy_class`` and ``get_strategy``,
``get_policy``, ``list_policies``, ``is_trained_policy``, ``get_embedder``,
``list_embedders``), never at ``import ctxsim``. So the command line and every
worker process (sweeps, context pools, SB3's subprocess envs) see the same
registries as the process that started them. The context pools' digest covers the
loaded plugins (:func:`ctxsim.lab.pool.source_digest`).

A plugin whose import fails, or that registers an id that already exists, raises
:class:`~ctxsim.errors.PluginError` naming the entry point, its module and
distribution and the underlying error: at that lookup and at every later one in the
process (its registries are incomplete).
"""

from __future__ import annotations

import sys
import threading
from dataclasses import dataclass
from pathlib import Path

from .errors import PluginError

GROUP = "ctxsim.plugins"


@dataclass(frozen=True)
class Plugin:
    """One loaded entry point of :data:`GROUP`.

    ``name``: the entry point's name; ``module``: what it names; ``distribution`` and
    ``version``: the distribution that declares it; ``sources``: the folders of the
    top-level package the module belongs to (or the top-level module's file), whose
    code shapes what the plugin registers.
    """

    name: str
    module: str
    distribution: str
    version: str
    sources: tuple[Path, ...]

    def files(self) -> list[tuple[str, Path]]:
        """(name relative to the source's parent folder, path) of every Python source
        file of :attr:`sources`, sorted (an extension module has none)."""
        out = []
        for source in self.sources:
            paths = sorted(source.rglob("*.py")) if source.is_dir() else [source] if source.suffix == ".py" else []
            out.extend((p.relative_to(source.parent).as_posix(), p) for p in paths)
        return out


_lock = threading.RLock()
_loaded: tuple[Plugin, ...] | None = None
_failure: PluginError | None = None
_loading = False


def load_plugins() -> tuple[Plugin, ...]:
    """Import every entry point of :data:`GROUP`, sorted by name, once per process, and
    return them (thread-safe; a lookup costs one comparison after the first).

    A lookup that a plugin makes while it is imported sees the registries as they
    are (this returns ``()`` to it). Raises :class:`PluginError` when a plugin failed
    to load, now and at every later call.
    """
    global _loaded, _failure, _loading
    if _loaded is not None:
        return _loaded
    with _lock:
        if _failure is not None:
            raise _failure
        if _loaded is not None or _loading:
            return _loaded or ()
        _loading = True
        try:
            _loaded = tuple(_load(ep) for ep in _entry_points())
        except PluginError as exc:
            _failure = exc
            raise
        finally:
            _loading = False
        return _loaded


def _entry_points() -> list:
    from importlib import metadata  # here: `import ctxsim` stays light

    return sorted(metadata.entry_points(group=GROUP), key=lambda ep: (ep.name, ep.value))


def _load(ep) -> Plugin:
    dist = ep.dist
    distribution, version = (dist.name, dist.version) if dist is not None else ("unknown", "unknown")
    try:
        ep.load()
    except Exception as exc:
        raise PluginError(
            f"plugin '{ep.name}' (entry point group {GROUP}, module {ep.value}, distribution {distribution} {version}) "
            f"failed to load: {type(exc).__name__}: {exc}"
        ) from exc
    return Plugin(ep.name, ep.value, distribution, version, _sources(ep.module))


def _sources(module: str) -> tuple[Path, ...]:
    """The folders of the imported top-level package of ``module``, or its file."""
    top = sys.modules[module.partition(".")[0]]
    if hasattr(top, "__path__"):
        return tuple(Path(p) for p in top.__path__)
    return (Path(top.__file__),) if getattr(top, "__file__", None) else ()
