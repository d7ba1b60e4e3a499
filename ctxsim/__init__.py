"""ctxsim: a reinforcement-learning harness for LLM context-window overflow.

Public API (imported lazily, so that the deployable policy needs only numpy):

* tokens: :func:`count_tokens`
* contexts: :func:`generate`, :func:`load_scenarios`, :func:`load_transcript`,
  :func:`load_config`, :class:`ContextState`, :class:`ContextUnit`
* strategies: :func:`list_strategies`, :func:`get_strategy`
* observation: :func:`observe`
* runtime: :class:`ContextWindow`

When gymnasium is installed, importing ctxsim registers its environments
(``ctxsim/ContextOverflow-v0`` and ``ctxsim/ConversationStream-v0``).
"""

from importlib import import_module

__version__ = "0.1.0"

_LAZY = {
    "count_tokens": "ctxsim.tokens",
    "ContextState": "ctxsim.model",
    "ContextUnit": "ctxsim.model",
    "ToolEnvelope": "ctxsim.model",
    "Fact": "ctxsim.model",
    "generate": "ctxsim.generator",
    "load_scenarios": "ctxsim.scenarios",
    "load_transcript": "ctxsim.transcripts",
    "load_config": "ctxsim.config",
    "list_strategies": "ctxsim.strategies",
    "get_strategy": "ctxsim.strategies",
    "observe": "ctxsim.observe",
    "ContextWindow": "ctxsim.window",
    "metrics": "ctxsim.metrics",
}

__all__ = sorted(_LAZY) + ["__version__"]


def __getattr__(name: str):
    if name in _LAZY:
        module = import_module(_LAZY[name])
        return module if module.__name__.endswith(name) else getattr(module, name)
    raise AttributeError(f"module 'ctxsim' has no attribute {name!r}")


def _register_envs() -> None:
    try:
        import gymnasium  # noqa: F401
    except ImportError:  # the deployable policy runs without gymnasium
        return
    from .environments import register_envs

    register_envs()


_register_envs()
