"""`tfprof-towers project`: bad input fails in one line before any graph is built."""

from __future__ import annotations

from pathlib import Path

import pytest


def run_cli(*argv: str) -> int:
    from tfprof_towers.cli import main

    return main(list(argv))


def _one_line_error(capsys: pytest.CaptureFixture[str], text: str) -> None:
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert "Traceback" not in err
    assert text in err


def test_unknown_hardware(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli("project", "--hardware", "16x-imaginary") == 2
    _one_line_error(capsys, "unknown hardware '16x-imaginary'")


def test_unknown_variant(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli("project", "--hardware", "2x-gtx1060-pcie3", "--variants", "nope") == 2
    _one_line_error(capsys, "unknown variant 'nope'")


def test_malformed_hardware_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "box.toml"
    bad.write_text("[host\ncores = 4\n")
    assert run_cli("project", "--hardware", str(bad), "--variants", "single") == 2
    _one_line_error(capsys, "malformed TOML")


def test_missing_key_in_hardware_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "box.toml"
    bad.write_text('name = "box"\n[host]\nmodel = "x"\n')
    assert run_cli("project", "--hardware", str(bad)) == 2
    _one_line_error(capsys, "[host] missing key 'cores'")


def test_not_a_run_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli("project", str(tmp_path), "--hardware", "2x-gtx1060-pcie3") == 2
    _one_line_error(capsys, "not a tfprof-towers run directory")


def test_missing_variant_file(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli("project", "--hardware", "2x-gtx1060-pcie3", "--variant-file", "/no/such.py") == 2
    _one_line_error(capsys, "not found")


def test_importing_the_package_does_not_import_tensorflow() -> None:
    import subprocess
    import sys

    code = ("import sys, tfprof_towers.projection, tfprof_towers.commands.project, "
            "tfprof_towers.commands.hardware; print('tensorflow' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


@pytest.mark.parametrize(("batch", "why"), [("0", "must be between 1 and 65536: 0"),
                                            ("many", "not a whole number: 'many'")])
def test_a_bad_batch_is_a_usage_error(batch: str, why: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        run_cli("project", "--hardware", "2x-gtx1060-pcie3", "--batch", batch)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert f"argument --batch: {why}" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1, err


def test_batch_renames_the_preset_it_projects(monkeypatch: pytest.MonkeyPatch) -> None:
    """``--batch N``: the preset's sizes with batch N, named so (never taken for the run's own preset)."""
    from tfprof_towers.commands import project as command

    seen = {}

    def fake_project(hardware, preset, variants, run_dir=None, host_build=None):
        seen["preset"] = preset
        return {"ranking": []}

    monkeypatch.setattr(command, "project", fake_project)
    monkeypatch.setattr(command, "show", lambda doc, run_dir, as_json: None)
    run_cli("project", "--hardware", "2x-gtx1060-pcie3", "--preset", "seed", "--batch", "192",
            "--variants", "single")
    p = seen["preset"]
    assert (p.name, p.batch, p.dim) == ("seed-batch192", 192, 1000)


def test_sources_name_the_command_for_a_builtin_and_the_file_for_a_file() -> None:
    from tfprof_towers.commands.project import sources_of

    assert sources_of({"name": "8x-v100-nvlink", "origin": "builtin:8x-v100-nvlink"}) == \
        "`tfprof-towers hardware 8x-v100-nvlink`"
    mybox = {"name": "mybox", "origin": "file:/tmp/mybox.toml"}
    assert sources_of(mybox) == "the comments in /tmp/mybox.toml"
