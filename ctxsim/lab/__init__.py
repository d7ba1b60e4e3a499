"""The lab: the research floor built on the deployable core (:mod:`ctxsim`).

Contexts (scenarios, the generator, families, agent sessions), the environments,
pools, training, evaluation, sweeps, reports, tuning, export, the demo and the
command line. The core never imports the lab; the lab imports the core.

Importing any lab module registers the policies that need the lab on the core's
policy registry (:mod:`ctxsim.policies`): ``best-fixed:<experiment>`` and trained
SB3 runs (:mod:`ctxsim.lab.policies`).
"""

from . import policies  # noqa: F401  (registers the lab's policies)
