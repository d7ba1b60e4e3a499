"""One numeric path for training on every x86-64 machine with AVX2.

torch runs a CPU operation through the widest kernels the machine has: its own (ATen's
``DEFAULT``, ``AVX2`` or ``AVX512`` builds of each operation) and MKL's, whose matrix
products take a different path on each instruction set. Each path rounds differently
in the last bits, and PPO and the warm start carry those bits into different choices:
the same experiment with the same seed trained other weights on an AVX-512 machine
than on an AVX2 one, though every number computed without torch was the same.

Importing :mod:`ctxsim.lab` (before it imports torch) therefore sets, unless the
process already sets them, ``ATEN_CPU_CAPABILITY=avx2`` (torch's kernels) and
``MKL_CBWR=AVX2`` (MKL's conditional numerical reproducibility: the same results on
every CPU that has AVX2), on an x86-64 machine whose CPU reports AVX2. Training runs
on one thread (:func:`ctxsim.lab.train.train`), so the thread count adds no difference.
The pin is a path of its own even on an AVX2 CPU: torch reports its AVX2 kernels there
with or without it, yet the default experiment's seed 0 trained other weights with
``ATEN_CPU_CAPABILITY`` unset (``MKL_CBWR`` alone changed nothing). A process that imported torch before
ctxsim keeps whatever torch chose then; :func:`kernel_path` says which path ran, and
every run folder records it (``machine.json``).
"""

from __future__ import annotations

import os
import platform
from pathlib import Path

#: the environment variables that pin the path, and their values
PINS = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "AVX2"}
CPUINFO = Path("/proc/cpuinfo")


def has_avx2(cpuinfo: Path = CPUINFO) -> bool:
    """Whether this is an x86-64 machine whose CPU reports AVX2 (Linux's ``/proc/cpuinfo``;
    False where that file cannot be read)."""
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return False
    try:
        with open(cpuinfo, encoding="utf-8") as fh:
            flags = next((line.split(":", 1)[1].split() for line in fh if line.startswith("flags")), [])
    except OSError:
        return False
    return "avx2" in flags


def pin_kernels(environ: dict[str, str] | None = None, *, avx2: bool | None = None) -> dict[str, str]:
    """Set each of :data:`PINS` in ``environ`` (default ``os.environ``) that it does not
    set yet, on an AVX2 machine; returns what was set."""
    environ = os.environ if environ is None else environ
    if not (has_avx2() if avx2 is None else avx2):
        return {}
    added = {key: value for key, value in PINS.items() if key not in environ}
    environ.update(added)
    return added


def kernel_path() -> dict[str, str]:
    """The numeric path torch takes in this process: its CPU capability, MKL's
    reproducibility branch and the threads of its operations (imports torch)."""
    import torch

    return {
        "torch": torch.__version__,
        "torch CPU capability": torch.backends.cpu.get_cpu_capability(),
        "MKL_CBWR": os.environ.get("MKL_CBWR", "(not set)"),
        "torch threads": str(torch.get_num_threads()),
    }
