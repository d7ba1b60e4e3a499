"""Policies that break overflows: baselines, the oracle, peer systems, learned models.

One registry (:mod:`.registry`): ``get_policy(name_or_path, **kwargs)`` and
``list_policies()``; ``run_episode(policy, state, settings, seed)`` runs one.

============================  ===========================================================
name                          what it does
============================  ===========================================================
``random``                    uniform over the valid actions (:mod:`.baselines`)
``seed-chain``                design 001's default chain, one strategy per step
``only:<strategy>``           the same strategy every step while valid, then recovery
``greedy``                    one-step lookahead on the reward
``greedy-without-probes``     the same, scored by the reward without its probe term
``oracle``                    exhaustive search for the best chain (:mod:`.oracle`)
``oracle-without-probes``     the same search scored without the probe term
``best-fixed:<experiment>``   the best fixed chain on its training contexts (:mod:`ctxsim.lab.policies.best_fixed`)
``peer:<system>``             a well-known agent system's compaction (:mod:`.peers`)
a run directory / ``.zip``    a trained SB3 model (:mod:`ctxsim.lab.policies.sb3`)
an export directory           an exported numpy policy (:mod:`.exported`; :func:`load`)
a folder of trained ones      (evaluate and sweeps) one policy whose rows name each run
============================  ===========================================================

Importing this package needs numpy only: no torch, stable-baselines3, gymnasium,
pandas or matplotlib (the exported policy runs with numpy alone). The two policies that need the lab (``best-fixed:`` and trained SB3 models) are
registered when the lab is imported (:mod:`ctxsim.lab`).
"""

from . import baselines, exported, oracle, peers  # noqa: F401  (register the policies)
from .baselines import fallback_action
from .exported import BreakResult, ExportedPolicy, load
from .oracle import OracleResult, best_chain, search
from .registry import (
    Policy,
    get_policy,
    is_learned,
    is_trained_policy,
    list_policies,
    register_family,
    register_loader,
    register_policy,
    run_episode,
    trained_policies_in,
)

__all__ = [
    "BreakResult",
    "ExportedPolicy",
    "OracleResult",
    "Policy",
    "best_chain",
    "fallback_action",
    "get_policy",
    "is_learned",
    "is_trained_policy",
    "list_policies",
    "load",
    "register_family",
    "register_loader",
    "register_policy",
    "run_episode",
    "search",
    "trained_policies_in",
]
