"""`profile`'s input checks: bad input fails in one line, before any run directory or child.

Failure isolation with real runs is in tests/e2e/test_profile_cli_e2e.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tfprof_towers.cli import main
from tfprof_towers.variants.registry import BUILTIN_NAMES


def one_line_error(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err
    assert len(err.splitlines()) == 1, err
    return err


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--variants", "nope"], "unknown variant 'nope'"),
        (["--variants", "single,single"], "names a variant twice"),
        (["--preset", "huge"], "unknown preset 'huge'"),
        (["--variant-file", "/does/not/exist.py"], "not found"),
    ],
)
def test_bad_input_is_one_line_and_nonzero(
    argv: list[str], needle: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    assert main(["profile", *argv, "--out", str(out)]) == 2
    assert needle in one_line_error(capsys)
    assert not out.exists()  # checked before anything is created or run


@pytest.mark.parametrize(
    ("argv", "needle"),
    [(["--accelerators", "0"], "must be at least 1"), (["--steps", "x"], "not a whole number")],
)
def test_bad_numbers_are_usage_errors(
    argv: list[str], needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["profile", *argv])
    assert exc.value.code == 2
    assert needle in one_line_error(capsys)


def test_variant_file_with_syntax_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "broken.py"
    bad.write_text("def build_variant(devices)\n    return None\n")
    assert main(["profile", "--variant-file", str(bad), "--out", str(tmp_path / "r")]) == 2
    assert "syntax error at line 1" in one_line_error(capsys)


def test_variant_file_without_build_variant(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "empty.py"
    bad.write_text("x = 1\n")
    assert main(["profile", "--variant-file", str(bad), "--out", str(tmp_path / "r")]) == 2
    assert "defines no build_variant" in one_line_error(capsys)


def test_variant_file_named_like_a_builtin(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    clash = tmp_path / "single.py"
    clash.write_text("def build_variant(devices):\n    pass\n")
    out = str(tmp_path / "r")
    code = main(["profile", "--variants", "single", "--variant-file", str(clash), "--out", out])
    assert code == 2
    assert "used twice" in one_line_error(capsys)


def test_out_dir_never_overwritten(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    out.mkdir()
    (out / "run.json").write_text("{}")
    assert main(["profile", "--preset", "tiny", "--out", str(out)]) == 2
    assert "not empty" in one_line_error(capsys)
    assert (out / "run.json").read_text() == "{}"


def test_variants_lists_builtins(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["variants"]) == 0
    out = capsys.readouterr().out
    for name in BUILTIN_NAMES:
        assert name in out


def test_unknown_projection_hardware_fails_before_running(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    assert main(["profile", "--preset", "tiny", "--project-on", "nope", "--out", str(out)]) == 2
    assert "unknown hardware 'nope'" in one_line_error(capsys)
    assert not out.exists()
