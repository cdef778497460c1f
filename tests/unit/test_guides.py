"""Every command the README and the guides show parses: its subcommand and flags exist (a dry parse by the
real argparse parser, nothing run), each ``make`` target and variable is the Makefile's, a synopsis names
only flags its subcommand takes, and the README's synopsis names every flag of every subcommand.  The runs
are the e2e tier's (tests/e2e/test_guides_e2e.py); the parser of the guides is tests/guide_kit.py."""

from __future__ import annotations

import argparse
from pathlib import Path

import guide_kit as kit
import pytest

from tfprof_towers.cli import build_parser

COMMANDS = kit.all_commands()


@pytest.fixture(scope="module")
def parser() -> argparse.ArgumentParser:
    return build_parser()


def test_the_guides_show_commands_of_every_kind() -> None:
    """The collector finds the commands (an empty list would make every test below vacuous)."""
    docs = {c.doc.name for c in COMMANDS}
    assert {"README.md", "diagnose.md", "notebook.md", "projection.md", "variants.md", "cluster.md",
            "benchmarks.md", "memory.md", "scaling.md"} <= docs
    assert sum(c.program == "make" for c in COMMANDS) >= 10
    assert sum(c.runs for c in COMMANDS) >= 8
    assert sum(c.output is not None for c in COMMANDS) >= 6


def test_every_mark_is_known() -> None:
    for doc in kit.guides():
        for line, word in kit.marks(doc):
            assert word in kit.MARKS, f"{doc.name}:{line}: unknown guide-test mark {word!r}"


@pytest.mark.parametrize("command", [c for c in COMMANDS if c.program == "tfprof-towers"],
                         ids=lambda c: c.where)
def test_each_tfprof_towers_command_parses(command: kit.Command, parser: argparse.ArgumentParser) -> None:
    if command.mark == "synopsis":
        assert kit.synopsis_problems(parser, command) == [], command.text
    else:
        assert kit.parse_problem(parser, command.argv) is None, command.text


@pytest.mark.parametrize("command", [c for c in COMMANDS if c.program == "make"], ids=lambda c: c.where)
def test_each_make_command_names_a_target_of_the_makefile(command: kit.Command,
                                                          parser: argparse.ArgumentParser) -> None:
    assert kit.make_problems(command, parser) == [], command.text


def test_the_readme_synopsis_names_every_flag_of_every_subcommand(parser: argparse.ArgumentParser) -> None:
    synopsis = [c for c in COMMANDS if c.doc.name == "README.md" and c.mark == "synopsis"]
    shown: dict[str, set[str]] = {}
    for c in synopsis:
        shown.setdefault(c.argv[0], set()).update(
            w.strip("[]|") for w in c.text.split() if w.strip("[]|").startswith("--"))
    missing = {name: sorted(kit.options(sub) - shown.get(name, set()))
               for name, sub in kit.subparsers(parser).items()}
    assert {name: flags for name, flags in missing.items() if flags} == {}


# --- the checks themselves fail where they should ----------------------------------------------------

GUIDE = '''# A guide

<!-- guide-test: synopsis -->
```
tfprof-towers analyze PATH [--json] [--no-such-flag]
```

```sh
tfprof-towers sql trace.xplane.pb \\
  "SELECT device
   FROM wall"   # a comment
make profile ARGS="--preset tiny --no-such-flag"
make bench-nothing WORKERS=0 NOVAR=1
```

```console
$ tfprof-towers analyze trace.xplane.pb --json --no-such-flag
{"steps": 1}
$ python other.py
```

```sh
tfprof-towers hardware 2x-gtx1060-pcie3 > mybox.toml
```

```text
# A desktop
```
'''


@pytest.fixture()
def guide(tmp_path: Path) -> list[kit.Command]:
    doc = tmp_path / "guide.md"
    doc.write_text(GUIDE)
    return kit.commands(doc)


def test_the_collector_reads_marks_continuations_prompts_and_outputs(guide: list[kit.Command]) -> None:
    assert [(c.line, c.program, c.mark) for c in guide] == [
        (5, "tfprof-towers", "synopsis"), (9, "tfprof-towers", None), (12, "make", None),
        (13, "make", None), (17, "tfprof-towers", None), (23, "tfprof-towers", None)]
    assert guide[1].argv == ("sql", "trace.xplane.pb", "SELECT device\nFROM wall")
    assert guide[2].argv == ("profile", "ARGS=--preset tiny --no-such-flag")
    assert guide[4].output == ('{"steps": 1}',)
    assert guide[1].output is None  # several commands in its block: no output is theirs
    assert guide[5].argv == ("hardware", "2x-gtx1060-pcie3") and guide[5].stdout_to == "mybox.toml"
    assert guide[5].output == ("# A desktop",)


def test_a_removed_or_misspelt_flag_fails_the_parse(guide: list[kit.Command],
                                                    parser: argparse.ArgumentParser) -> None:
    assert kit.synopsis_problems(parser, guide[0]) == ["analyze has no --no-such-flag"]
    assert kit.parse_problem(parser, guide[1].argv) is None
    assert "unrecognized arguments: --no-such-flag" in kit.parse_problem(parser, guide[4].argv)
    assert "unrecognized arguments: --no-such-flag" in kit.make_problems(guide[2], parser)[0]
    assert kit.make_problems(guide[3], parser) == ["no make target bench-nothing",
                                                   "the Makefile sets no NOVAR"]


def test_a_flag_removed_from_the_tool_fails_a_guide_that_shows_it() -> None:
    """Take ``--dask`` out of ``analyze``'s parser: the guide's commands that use it stop parsing."""
    parser = build_parser()
    analyze = kit.subparsers(parser)["analyze"]
    dask = next(a for a in analyze._actions if "--dask" in a.option_strings)
    analyze._remove_action(dask)
    for flag in dask.option_strings:
        del analyze._option_string_actions[flag]
    using = [c for c in COMMANDS if c.argv[:1] == ("analyze",) and "--dask" in c.text]
    assert using
    assert all(kit.parse_problem(parser, c.argv) or kit.synopsis_problems(parser, c) for c in using)


@pytest.mark.parametrize(("shown", "real", "problems"), [
    (["trace: t.pb", "[high] idle_accelerators (/device:GPU:0)"],
     "trace: t.pb\nsteps: 1\n[high] idle_accelerators (/device:GPU:0)\n", []),
    (["device  step  idle", "/device:GPU:4  19.865 ms  4.995 ms 25.1%", "...", "1.98 GiB GPU:0"],
     "device step idle\n│ /device:GPU:4 │ 21.003 ms │ 5.1 ms 24.0% │\n│ 1.98 GiB GPU:0 │\n", []),
    (["trace: t.pb", "peak 1.98 GiB"], "trace: t.pb\npeak 1.99 GiB\n", ["no line like 'peak 1.98 GiB'"]),
    (["steps: 3"], "trace: t.pb\nsteps: 3\n", ["the first line is not 'steps: 3' (it is ['trace: t.pb'])"]),
    (["producer: tensorflow (`a`, ...; high)"], "producer: tensorflow (`a`, `b`, `c`; high)\n", []),
    (["trace: logs/train/plugins/profile/<date>/<host>.xplane.pb"],
     "trace: logs/train/plugins/profile/2026_12_05_09_10_43/vm.xplane.pb\n", []),
    (["trace: logs/<date>.xplane.pb"], "trace: logs/a/b.xplane.pb\n",
     ["the first line is not 'trace: logs/<date>.xplane.pb' (it is ['trace: logs/a/b.xplane.pb'])"]),
    (["[medium] straggler"], "[high] straggler\n", ["the first line is not '[medium] straggler' "
                                                    "(it is ['[high] straggler'])"]),
])
def test_a_shown_output_is_matched_by_what_does_not_depend_on_speed(shown: list[str], real: str,
                                                                    problems: list[str]) -> None:
    assert kit.output_problems(shown, real) == problems


def test_export_help_names_every_frame() -> None:
    from tfprof_towers.commands.export import run
    from tfprof_towers.frames.names import FRAMES

    listed = run.__doc__.split("The frames (docs/notebook.md):")[1].split(".")[0]
    assert [name.strip() for name in listed.replace("\n", " ").split(",")] == list(FRAMES)


def test_the_stray_scope_the_guides_point_at_is_that_line_of_builders_py() -> None:
    """The guides quote where `diff` and the findings say `towers_bug`'s forward pass was put on the host."""
    import re

    builders = (kit.REPO / "tfprof_towers" / "capture" / "tf1" / "builders.py").read_text().splitlines()
    cited = {(doc.name, int(n)) for doc in kit.guides()
             for n in re.findall(r"builders\.py:(\d+)", doc.read_text())}
    assert cited
    for doc, n in sorted(cited):
        assert "with tf.device(devices.host)" in builders[n - 1] and "towers_bug" in builders[n - 1], (doc, n)


def test_the_seed_presets_matmul_flops_are_the_ones_projection_md_states() -> None:
    import re

    from tfprof_towers.variants.config import get_preset

    text = " ".join((kit.REPO / "docs" / "projection.md").read_text().split())
    m = re.search(r"the (\d+) matmuls' ([\d,]+) \(six forward", text)
    assert m, "projection.md no longer states the seed preset's matmul FLOPs"
    seed = get_preset("seed")
    assert int(m.group(1)) == 3 * seed.blocks - 1
    assert int(m.group(2).replace(",", "")) == seed.flops_per_step()
