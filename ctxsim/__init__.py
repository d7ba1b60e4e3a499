"""ctxsim: a reinforcement-learning harness for LLM context-window overflow.

Public API (imported lazily, so that the deployable policy needs only numpy):

* tokens: :func:`count_tokens`
* contexts: :func:`generate`, :func:`load_scenarios`, :func:`load_transcript`,
  :func:`load_config`, :class:`ContextState`, :class:`ContextUnit`
* strategies: :func:`list_strategies`, :func:`get_strategy`
* observation: :func:`observe`
* runtime: :class:`ContextWindow`

``import ctxsim`` imports nothing of the ``train`` extra: not gymnasium. Its
environments (``ctxsim/ContextOverflow-v0`` and ``ctxsim/ConversationStream-v0``)
are registered by ``import ctxsim.lab.environments``, by ``gymnasium.make`` given the
module (``gymnasium.make("ctxsim.lab.environments:ctxsim/ContextOverflow-v0")``: the
installed Gymnasium has no plugin entry points), and by ``import ctxsim`` when
gymnasium is already imported.
"""

import sys
from importlib import import_module

__version__ = "0.1.0"

_LAZY = {
    "count_tokens": "ctxsim.tokens",
    "ContextState": "ctxsim.model",
    "ContextUnit": "ctxsim.model",
    "ToolEnvelope": "ctxsim.model",
    "Fact": "ctxsim.model",
    "generate": "ctxsim.lab.generator",
    "load_scenarios": "ctxsim.lab.scenarios",
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
    if sys.modules.get("gymnasium") is None:  # importing it here would load the train extra on the runtime path
        return
    from .lab.environments import register_envs

    register_envs()


_register_envs()
