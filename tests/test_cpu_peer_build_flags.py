"""benchmarks/peers/cpu_isa.py: the peer's native build turns AMX off exactly where cpuinfo
lists it but the kernel grants no tile state (those VMs kill ggml's AMX kernels with SIGILL),
and the build options are what every result file records."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks" / "peers"))

import cpu_isa
import llamacpp_cpu_build

AMX = {"avx512f", "amx_tile", "amx_int8", "amx_bf16"}


def test_amx_listed_but_not_granted_is_turned_off() -> None:
    flags = cpu_isa.native_build_flags(AMX, amx_granted=False)
    assert flags == ["-mno-amx-tile", "-mno-amx-int8", "-mno-amx-bf16"]


def test_amx_granted_or_absent_changes_nothing() -> None:
    assert cpu_isa.native_build_flags(AMX, amx_granted=True) == []
    assert cpu_isa.native_build_flags({"avx2", "fma"}, amx_granted=False) == []


def test_cpuinfo_flags_are_read_from_the_flags_line(tmp_path: Path) -> None:
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nmodel name\t: X\nflags\t\t: fpu avx2 amx_tile\n")
    assert cpu_isa.listed_cpu_flags(cpuinfo) == {"fpu", "avx2", "amx_tile"}


def test_this_machine_gets_a_build_that_cannot_fault_on_amx() -> None:
    """Whatever this machine is, the options carry -mno-amx-* unless tiles really work."""
    options = " ".join(llamacpp_cpu_build.llamacpp_build_options())
    listed = cpu_isa.listed_cpu_flags() & set(cpu_isa.AMX_FLAGS)
    if listed and not cpu_isa.amx_tile_state_granted():
        assert "-mno-amx-tile" in options
    else:
        assert "-mno-amx" not in options
    assert "-DGGML_NATIVE=ON" in options
