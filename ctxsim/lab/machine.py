"""The machine a measurement ran on, for the header of benchmark and validity reports."""

from __future__ import annotations

import datetime as _dt
import os
import platform

import numpy as np


def machine() -> dict[str, str]:
    """CPU model, cores, versions and date of this run (imports torch: the ``train`` extra)."""
    from .numerics import kernel_path

    kernels = kernel_path()
    cpu = platform.processor() or "unknown"
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            cpu = next((line.split(":", 1)[1].strip() for line in fh if line.startswith("model name")), cpu)
    except OSError:
        pass
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "n/a"
    return {
        "CPU": cpu,
        "cores": f"{os.cpu_count()} ({usable} usable by this process)",
        "load average at start (1/5/15 min)": load,
        "Python": platform.python_version(),
        "numpy": np.__version__,
        "torch": kernels["torch"],
        "torch kernels": f"{kernels['torch CPU capability']}, MKL_CBWR={kernels['MKL_CBWR']}",
        "date (UTC)": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M"),
    }
