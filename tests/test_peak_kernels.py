"""The per-precision peak microkernels (`codegen.llvm.peak_kernels`): which units a target has,
that each kernel runs exactly the steps it is asked for (its chains' sums are exact small
integers: compared with ==), and that each unit's instruction is in its code for a CPU that has
it, whatever this host is."""

from __future__ import annotations

import math

import pytest

from tensor_graphs.codegen.llvm import peak_kernels as pk
from tensor_graphs.target import Target

HOST = Target.host()

#: unit -> (a CPU that has it, what its code must contain)
INSTRUCTIONS = {
    "fma": ("znver3", "vfmadd213ps\t%ymm"),
    "avx512bf16": ("cooperlake", "vdpbf16ps\t%zmm"),
    "vnni": ("cascadelake", "vpdpbusd\t%zmm"),
    "amx-bf16": ("sapphirerapids", "tdpbf16ps"),
    "amx-int8": ("sapphirerapids", "tdpbssd"),
}


@pytest.mark.parametrize(
    "cpu, units",
    [
        ("znver3", ["fma"]),
        ("x86-64-v3", ["fma"]),
        ("alderlake", ["fma", "vnni"]),
        ("cascadelake", ["fma", "vnni"]),
        ("znver5", ["fma", "avx512bf16", "vnni"]),
        ("sapphirerapids", ["fma", "avx512bf16", "vnni", "amx-bf16", "amx-int8"]),
    ],
)
def test_a_target_measures_the_units_it_has(cpu, units):
    assert [u.name for u in pk.available_units(Target.named(cpu))] == units


@pytest.mark.parametrize("unit", list(pk.UNITS))
def test_each_unit_s_instruction_is_in_its_kernel(unit):
    cpu, instruction = INSTRUCTIONS[unit]
    asm = pk.assembly(unit, Target.named(cpu))
    assert instruction in asm
    if unit in ("fma", "avx512bf16", "vnni"):  # one instruction per chain in the loop
        chains = pk.vector_chains(Target.named(cpu))
        assert asm.count(instruction.split("\t")[0]) == chains


def test_avx_vnni_on_a_256_bit_target_uses_the_vex_form():
    asm = pk.assembly("vnni", Target.named("alderlake"))
    assert "{vex}\tvpdpbusd\t%ymm" in asm
    assert pk.vnni_lanes(Target.named("alderlake")) == 8


HOST_UNITS = [u.name for u in pk.available_units(HOST)]


@pytest.mark.parametrize("unit", list(pk.UNITS))
@pytest.mark.parametrize("steps", [1, 7, 1000])
def test_a_kernel_runs_exactly_its_steps(unit, steps):
    if unit not in HOST_UNITS:
        pytest.skip(f"this CPU has no {unit} (its code is checked by test_each_unit_s_instruction_is_in_its_kernel)")
    sums = pk.run_kernel(unit, HOST, steps)
    expected = pk.UNITS[unit].kernel(HOST).expected(steps)
    assert sums.size > 0 and (sums == expected).all(), (sums.min(), sums.max(), expected)


def test_steps_below_one_are_refused():
    with pytest.raises(ValueError, match="at least 1"):
        pk.run_kernel("fma", HOST, 0)


def test_measuring_gives_each_unit_a_rate_and_the_best_per_precision():
    peaks = {name: pk.measure_peak(name, HOST, threads=2, repeat=2, seconds=0.01) for name in HOST_UNITS}
    for p in peaks.values():
        assert p.threads == 2 and len(p.runs) == 2 and p.gops == max(p.runs)
        assert all(math.isfinite(r) and r > 0 for r in p.runs)
    best = pk.precision_peaks(peaks)
    assert best["float32"].unit == "fma"
    for precision, p in best.items():
        assert p.gops == max(q.gops for q in peaks.values() if q.precision == precision)


def test_a_target_this_cpu_cannot_run_is_refused(monkeypatch):
    from tensor_graphs import target as target_module

    monkeypatch.setattr(target_module, "_host_feature_set", lambda: frozenset(["sse2", "avx", "avx2", "fma"]))
    with pytest.raises(target_module.TargetError, match="amx-tile.*lacks"):
        pk.measure_peak("amx-bf16", Target.named("sapphirerapids"))
