"""One numeric path for training (ctxsim.lab.numerics): importing the lab pins torch's
and MKL's kernels to AVX2 on an AVX2 machine, unless the process chose its own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib.util import find_spec

import pytest

from ctxsim.lab import numerics
from ctxsim.lab.numerics import PINS, has_avx2, pin_kernels


def test_the_pins_are_set_where_missing_and_never_over_the_processs_own():
    environ = {"MKL_CBWR": "COMPATIBLE", "PATH": "/bin"}
    assert pin_kernels(environ, avx2=True) == {"ATEN_CPU_CAPABILITY": "avx2"}
    assert environ == {"MKL_CBWR": "COMPATIBLE", "PATH": "/bin", "ATEN_CPU_CAPABILITY": "avx2"}
    assert pin_kernels(environ, avx2=True) == {}  # a second call changes nothing


def test_a_machine_without_avx2_gets_no_pin():
    environ: dict[str, str] = {}
    assert pin_kernels(environ, avx2=False) == {} and environ == {}


@pytest.mark.parametrize("machine,flags,expected", [
    ("x86_64", "fpu sse2 avx avx2 fma", True),
    ("x86_64", "fpu sse2 avx", False),
    ("aarch64", "fp asimd avx2", False),  # only an x86-64 CPU runs these kernels
])
def test_avx2_is_read_from_the_cpus_flags(tmp_path, monkeypatch, machine, flags, expected):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(f"processor\t: 0\nmodel name\t: a CPU\nflags\t\t: {flags}\n\nprocessor\t: 1\nflags\t\t: {flags}\n")
    monkeypatch.setattr(numerics.platform, "machine", lambda: machine)
    assert has_avx2(cpuinfo) is expected
    assert has_avx2(tmp_path / "missing") is False


#: what a new process that imports the lab, then torch, runs with
PROBE = ("import json, os, ctxsim.lab, torch\n"
         "print(json.dumps([os.environ.get('MKL_CBWR'), os.environ.get('ATEN_CPU_CAPABILITY'),"
         " torch.backends.cpu.get_cpu_capability()]))")


@pytest.mark.skipif(find_spec("torch") is None or not has_avx2(), reason="needs torch (extra 'train') and an AVX2 CPU")
@pytest.mark.parametrize("own,expected", [
    ({}, ["AVX2", "avx2", "AVX2"]),
    ({"ATEN_CPU_CAPABILITY": "default"}, ["AVX2", "default", "DEFAULT"]),  # the process's own choice stands
])
def test_a_process_that_imports_the_lab_trains_on_the_pinned_path(own, expected):
    environ = {k: v for k, v in os.environ.items() if k not in PINS} | own
    done = subprocess.run([sys.executable, "-c", PROBE], env=environ, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == expected
