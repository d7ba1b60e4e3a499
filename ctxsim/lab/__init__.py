"""The lab: the research floor built on the deployable core (:mod:`ctxsim`).

Contexts (scenarios, the generator, families, agent sessions), the environments,
pools, training, evaluation, sweeps, reports, tuning, export, the demo and the
command line. The core never imports the lab; the lab imports the core.

Importing any lab module registers the policies that need the lab on the core's
policy registry (:mod:`ctxsim.policies`): ``best-fixed:<experiment>`` and trained
SB3 runs (:mod:`ctxsim.lab.policies`).
"""

from .numerics import pin_kernels

pin_kernels()  # before the lab imports torch: one numeric path for training on every AVX2 machine

from . import policies  # noqa: E402,F401  (registers the lab's policies)
