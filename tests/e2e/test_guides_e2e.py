"""The quick commands the README and the guides show, run as shown: each exits 0, and where a guide shows
its output, the real output has it (what does not depend on the machine's speed: the first line, the
column headers, the findings, the byte and FLOP counts; tests/guide_kit.py says how lines are matched).

Each guide's commands run in order in a folder of their own, as a reader's shell would: the shared
fixture traces are there by their file names, ``examples/`` is the repository's, and ``reports/latest``
is a copy of the session's tiny run.  A command marked ``slow``, ``yours`` or ``synopsis`` in its guide
is only parsed (tests/unit/test_guides.py).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import guide_kit as kit
import pytest
from conftest import REPO, SHARED_FIXTURES

from tfprof_towers.cli import main

pytestmark = pytest.mark.slow

RUNS: dict[str, list[kit.Command]] = {}
for _command in kit.all_commands():
    if _command.runs:
        RUNS.setdefault(_command.doc.name, []).append(_command)


def _sandbox(folder: Path, commands: list[kit.Command], run_dir: Path | None) -> None:
    """The folder a reader runs ``commands`` in: the fixtures by name, ``examples/``, ``reports/latest``."""
    for trace in SHARED_FIXTURES.glob("*.xplane.pb"):
        (folder / trace.name).symlink_to(trace)
    (folder / "examples").symlink_to(REPO / "examples")
    if run_dir is not None:
        shutil.copytree(run_dir, folder / "reports" / "latest", symlinks=True)


@pytest.mark.parametrize("doc", sorted(RUNS))
def test_the_quick_commands_of_each_guide_run_as_shown(
        doc: str, tmp_path: Path, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    commands = RUNS[doc]
    if any(name.endswith(".xplane.pb") for c in commands for name in c.argv) and not SHARED_FIXTURES.is_dir():
        pytest.skip(f"{doc} shows the shared fixture traces and ../shared/fixtures is absent")
    uses_run = any("reports/latest" in c.argv for c in commands)
    _sandbox(tmp_path, commands, request.getfixturevalue("tiny_run") if uses_run else None)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COLUMNS", "200")  # no table wrapped or cut short by a narrow terminal
    problems = []
    for command in commands:
        capsys.readouterr()
        code = main(list(command.argv))
        out, err = capsys.readouterr()
        if command.stdout_to:
            Path(command.stdout_to).write_text(out)
        if code != 0:
            problems.append(f"{command.where}: exit {code}: {err.strip()[-500:]}")
            continue
        if command.output:
            problems += [f"{command.where}: {p}" for p in kit.output_problems(command.output, err + out)]
    assert problems == []
