"""The machine a benchmark ran on, in one line: the CPU model and the instruction sets torch's matmuls use.

Every speed figure in BENCHMARKS.md states this line (machines differ between sessions: AMX or not)."""
from __future__ import annotations

import platform
from pathlib import Path

from bertkit.runtime import cpu_capabilities

FLAGS = ("amx_bf16", "amx_int8", "avx512_bf16", "avx512_vnni", "avx512f", "avx2")


def cpu_model() -> str:
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def cpu_description() -> str:
    """'<CPU model>; flags: amx_bf16, ...' (the flags of FLAGS torch reports on this CPU)."""
    flags = cpu_capabilities()
    return f"{cpu_model()}; flags: {', '.join(f for f in FLAGS if flags.get(f)) or 'none of ' + ', '.join(FLAGS)}"
