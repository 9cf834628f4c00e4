"""The precision choice: auto follows the hardware (monkeypatched CPU flags and GPU), int8 needs an int8 folder."""
from pathlib import Path

import pytest
import torch

from bertkit import runtime
from bertkit.errors import BertkitError

CPU = torch.device("cpu")


@pytest.mark.parametrize("flags, expected, reason", [
    ({"amx_bf16": True, "avx512_bf16": True}, "bf16", "AMX"),
    ({"amx_bf16": False, "avx512_bf16": True}, "bf16", "avx512_bf16"),
    ({"avx512f": True, "avx2": True}, "fp32", "no AMX or avx512_bf16"),
    ({}, "fp32", "no AMX or avx512_bf16"),
])
def test_auto_follows_the_cpu_flags(monkeypatch, flags, expected, reason):
    monkeypatch.setattr(runtime, "cpu_capabilities", lambda: flags)
    choice = runtime.choose_precision("auto", CPU)
    assert choice.precision == expected
    assert choice.dtype == runtime.FLOAT_DTYPES[expected]
    assert choice.note.startswith(f"precision auto -> {expected} (") and reason in choice.note
    assert "\n" not in choice.note


def test_auto_picks_bf16_on_a_gpu_with_bf16(monkeypatch):
    monkeypatch.setattr(runtime, "cpu_capabilities", lambda: {})
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    assert runtime.choose_precision("auto", torch.device("cuda")).precision == "bf16"
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: False)
    assert runtime.choose_precision("auto", torch.device("cuda")).precision == "fp32"


def test_int8_folders(monkeypatch):
    monkeypatch.setattr(runtime, "cpu_capabilities", lambda: {"amx_bf16": True})
    auto = runtime.choose_precision("auto", CPU, stored="int8")
    assert (auto.precision, auto.dtype) == ("int8", torch.bfloat16)       # the float parts in bf16 on AMX
    assert runtime.choose_precision(None, CPU, stored="int8").precision == "int8"
    assert runtime.choose_precision("fp32", CPU, stored="int8").precision == "fp32"
    monkeypatch.setattr(runtime, "cpu_capabilities", lambda: {})
    assert runtime.choose_precision(None, CPU, stored="int8").dtype == torch.float32
    with pytest.raises(BertkitError, match="bertkit quantize"):
        runtime.choose_precision("int8", CPU, stored="fp32")     # no int8 without the measured gate


def test_explicit_and_default_precisions():
    assert runtime.choose_precision(None, CPU).precision == "fp32"
    assert runtime.choose_precision("bf16", CPU).dtype == torch.bfloat16
    with pytest.raises(BertkitError, match="fp16"):
        runtime.choose_precision("fp16", CPU)


def test_fast_bf16_agrees_with_proc_cpuinfo():
    """torch's CPU flags against the kernel's own list (Linux x86)."""
    cpuinfo = Path("/proc/cpuinfo")
    if not cpuinfo.is_file() or "flags" not in cpuinfo.read_text():
        pytest.skip("no /proc/cpuinfo flags here")
    flags = set(next(line for line in cpuinfo.read_text().splitlines() if line.startswith("flags")).split())
    assert (runtime.fast_bf16(CPU) is not None) == bool({"amx_bf16", "avx512_bf16"} & flags)
