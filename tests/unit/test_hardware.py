"""Hardware profiles: built-ins load with a source next to every number; bad input is one line."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from tfprof_towers.projection.hardware import (
    HardwareError,
    builtin_dir,
    builtin_names,
    load_file,
    load_hardware,
)

REQUIRED = ("2x-gtx1060-pcie3", "4x-v100-nvlink", "8x-a100-nvlink", "2x-rtx4090-pcie4")


def run_cli(*argv: str) -> int:
    from tfprof_towers.cli import main

    return main(list(argv))


def test_builtins_include_the_required_profiles() -> None:
    assert set(REQUIRED) <= set(builtin_names())


@pytest.mark.parametrize("name", REQUIRED)
def test_builtin_loads(name: str) -> None:
    hw = load_hardware(name)
    assert hw.name == name
    assert hw.origin == f"builtin:{name}"
    assert hw.host.peak_flops() > 0


@pytest.mark.parametrize("name", REQUIRED)
def test_every_number_has_its_source_next_to_it(name: str) -> None:
    """Each `key = <number>` line carries a comment saying where the number comes from."""
    for line in (builtin_dir() / f"{name}.toml").read_text().splitlines():
        if re.match(r"^\s*\w+\s*=\s*[-\d.]+\s*(#.*)?$", line):
            comment = line.partition("#")[2].strip()
            assert len(comment) > 8, f"{name}: no source next to: {line}"


def test_expected_topologies() -> None:
    assert load_hardware("2x-gtx1060-pcie3").peer.kind == "staged"
    assert load_hardware("2x-rtx4090-pcie4").peer.kind == "staged"
    assert load_hardware("4x-v100-nvlink").peer.topology == "mesh"
    assert load_hardware("8x-a100-nvlink").peer.topology == "switch"
    assert load_hardware("2x-gtx1060-pcie3").host_link.name == "PCIe 3.0 x8"


def test_host_build_switches_flops_per_cycle() -> None:
    hw = load_hardware("2x-gtx1060-pcie3")
    # i7-7700K: 4 cores x 4.2 GHz x 32 (AVX2 FMA) and x 8 (SSE)
    assert hw.host.peak_flops() == pytest.approx(537.6e9)
    assert hw.with_host_build("unvectorised").host.peak_flops() == pytest.approx(134.4e9)
    with pytest.raises(HardwareError, match="unknown TensorFlow build"):
        hw.with_host_build("avx9")


def _write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "mine.toml"
    p.write_text(text)
    return p


def _good_text() -> str:
    return (builtin_dir() / "2x-gtx1060-pcie3.toml").read_text()


def test_user_file_loads_by_path(tmp_path: Path) -> None:
    hw = load_hardware(str(_write(tmp_path, _good_text())))
    assert hw.origin.startswith("file:")


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda t: t.replace("[host]", "[host"), "malformed TOML"),
        (lambda t: t.replace("cores = 4 ", "# cores = 4 "), r"\[host\] missing key 'cores'"),
        (lambda t: t.replace("cores = 4 ", "cores = \"four\" "), r"\[host\] cores must be a number"),
        (lambda t: t.replace("cores = 4 ", "cores = 4.5 "), "must be a whole number"),
        (lambda t: t.replace("count = 2", "count = 0"), r"\[accelerator\] count must be positive"),
        (lambda t: t.replace("efficiency = 0.36", "efficiency = 1.5"), "at most 1"),
        (lambda t: t.replace("latency_us = 10.0", "latency_us = -1"), "must not be negative"),
        (lambda t: t.replace('kind = "staged"', 'kind = "telepathy"'), r"\[peer\] kind must be one of"),
        (lambda t: t.replace('tensorflow_build = "vectorised"', 'tensorflow_build = "fast"'),
         "tensorflow_build must be one of"),
        (lambda t: t.replace("[host]", "[host]\ncorez = 3"), "unknown key 'corez'"),
        (lambda t: t.split("[peer]")[0], r"missing table \[peer\]"),
        (lambda t: t.replace("reduction_efficiency = 0.6 ", "reduction_efficiency = 1.5 "),
         r"\[accelerator\] reduction_efficiency is a fraction of peak and must be at most 1"),
        (lambda t: t.replace("conv_efficiency = 0.6 ", "conv_efficiency = 1.2 "),
         r"\[accelerator\] conv_efficiency is a fraction of peak and must be at most 1"),
        (lambda t: t.replace("winograd_speedup = 2.0 ", "winograd_speedup = 9 "),
         r"\[accelerator\] winograd_speedup must be at most 4"),
        (lambda t: t.replace("winograd_speedup = 2.0 ", "winograd_speedup = 0 "),
         r"\[accelerator\] winograd_speedup must be positive"),
        (lambda t: t.replace("small_op_overhead_us = 3.0 ", "small_op_overhead_us = -1 "),
         r"\[accelerator\] small_op_overhead_us must not be negative"),
        (lambda t: t.replace("small_op_overhead_us = 3.0 ", 'small_op_overhead_us = "fast" '),
         r"\[accelerator\] small_op_overhead_us must be a number"),
    ],
)
def test_bad_profiles_are_one_line_errors(tmp_path: Path, edit, message: str) -> None:
    path = _write(tmp_path, edit(_good_text()))
    with pytest.raises(HardwareError, match=message) as err:
        load_file(path)
    assert "\n" not in str(err.value)
    assert str(path) in str(err.value)


def test_unknown_name_lists_the_builtins() -> None:
    with pytest.raises(HardwareError, match=r"unknown hardware 'nope'.*2x-gtx1060-pcie3"):
        load_hardware("nope")


def test_missing_file() -> None:
    with pytest.raises(HardwareError, match="not found"):
        load_hardware("/no/such/profile.toml")


def test_hardware_command_lists_profiles(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli("hardware") == 0
    out = capsys.readouterr().out
    for name in REQUIRED:
        assert name in out


def test_hardware_command_shows_sources(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli("hardware", "2x-gtx1060-pcie3") == 0
    assert "Intel ARK" in capsys.readouterr().out


@pytest.mark.parametrize("name", builtin_names())
def test_hardware_name_redirected_to_a_file_is_a_profile_that_loads(
        name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``tfprof-towers hardware NAME > my.toml``: stdout is the profile's TOML as it is, the summary on
    stderr; the file loads and gives the built-in's numbers."""
    assert run_cli("hardware", name) == 0
    out, err = capsys.readouterr()
    mine = tmp_path / "my.toml"
    mine.write_text(out)
    assert out == (builtin_dir() / f"{name}.toml").read_text()
    assert err.startswith(f"{name}: ") and err.count("\n") == 1
    loaded, builtin = load_hardware(str(mine)), load_hardware(name)
    assert loaded.origin == f"file:{mine}"
    assert dataclasses.replace(loaded, origin=builtin.origin) == builtin


def test_hardware_command_json(capsys: pytest.CaptureFixture[str]) -> None:
    import json

    assert run_cli("hardware", "--json") == 0
    names = [p["name"] for p in json.loads(capsys.readouterr().out)]
    assert set(REQUIRED) <= set(names)


def test_hardware_command_unknown_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli("hardware", "nope") == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unknown hardware 'nope'" in err


@pytest.mark.parametrize("what, said", [("folder", "is a directory, not a TOML file"),
                                        ("null", "is a character device, not a TOML file"),
                                        ("dangling", "a symbolic link to nothing"),
                                        ("missing", "not found")])
def test_a_hardware_path_that_is_no_file_says_what_it_is(tmp_path: Path, what: str, said: str) -> None:
    from tfprof_towers.projection.hardware import HardwareError, load_hardware

    path = tmp_path / "hw.toml"
    if what == "folder":
        path.mkdir()
    elif what == "null":
        path = Path("/dev/null")
    elif what == "dangling":
        path.symlink_to(tmp_path / "gone.toml")
    with pytest.raises(HardwareError) as exc:
        load_hardware(str(path))
    assert str(exc.value) == f"hardware file {path}: {said}" or str(exc.value).startswith(
        f"hardware file {path}: {said}")


def test_profiles_without_op_class_terms_get_the_old_ones(tmp_path: Path) -> None:
    """A profile written before the op classes: reductions at the elementwise fraction, small ops at the
    per-op overhead, no Winograd speed-up."""
    new_keys = ("conv_efficiency", "reduction_efficiency", "small_op_overhead_us", "winograd_speedup")
    old = "\n".join(line for line in _good_text().splitlines() if not line.startswith(new_keys))
    a = load_file(_write(tmp_path, old)).accelerator
    assert (a.reduction_efficiency, a.small_op_overhead_us, a.winograd_speedup) == (None, None, None)
    assert (a.reduction_fraction, a.small_op_us, a.winograd) == (a.memory_efficiency, a.op_overhead_us, 1.0)
    assert a.conv_efficiency is None and a.conv_fraction == a.efficiency


@pytest.mark.parametrize("name", ["8x-p100-dgx1", "8x-k80-gce", "8x-k80-p2"])
def test_calibration_machines_load_with_their_class_terms(name: str) -> None:
    a = load_hardware(name).accelerator
    assert a.count == 8
    assert a.reduction_efficiency is not None and a.reduction_efficiency <= a.memory_efficiency
    assert a.winograd_speedup is not None and 1 < a.winograd_speedup <= 2.25  # F(2x2,3x3)'s saving
    assert a.small_op_overhead_us is not None
    for line in (builtin_dir() / f"{name}.toml").read_text().splitlines():
        if re.match(r"^\s*\w+\s*=\s*[-\d.]+\s*(#.*)?$", line):
            assert len(line.partition("#")[2].strip()) > 8, f"{name}: no source next to: {line}"
