"""Policies that need the lab, registered on the core registry (:mod:`ctxsim.policies`).

``best-fixed:<experiment>`` (:mod:`.best_fixed`: fitted on an experiment's training
contexts) and a trained SB3 run folder or model zip (:mod:`.sb3`).
"""

from . import best_fixed, sb3  # noqa: F401  (register the policies)
