"""Real TensorFlow children forked from the fork server equal children started fresh.

The same tiny profile runs twice, once with every child fresh (``TFPROF_TOWERS_FORK_SERVER=0``,
as before the server) and once forked; each variant must have the same losses and gradient norm
(bit for bit: same initial values, same ops), the same placement (every node on the same device,
with the same source lines) and the same ops in its trace.  Step *times* are compared in
``make bench`` (``fork-server`` section), never here: a test may not depend on the machine's speed.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import run_cli

from tfprof_towers.procs import forkserver
from tfprof_towers.trace.load import load_trace

VARIANTS = ("single", "mirrored")  # a TF1 graph and a TF2 strategy


def _run(tmp: Path, monkeypatch: pytest.MonkeyPatch, forked: bool) -> Path:
    out = tmp / ("forked" if forked else "fresh")
    with monkeypatch.context() as m:
        if forked:
            m.delenv(forkserver.ENV_SWITCH, raising=False)
        else:
            m.setenv(forkserver.ENV_SWITCH, "0")
        code = run_cli("profile", "--preset", "tiny", "--variants", ",".join(VARIANTS), "--out", str(out))
        assert code == 0
    return out


def _record(run: Path, name: str) -> dict:
    return json.loads((run / "variants" / name / "record.json").read_text())


def _placement(rec: dict) -> dict[str, tuple]:
    return {n["name"]: (n["device"], n["type"], tuple((s["file"], s["line"]) for s in n.get("sources") or ()))
            for n in rec["placement"]["nodes"]}


def test_forked_children_equal_fresh_ones(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if forkserver.unavailable_reason() not in (None, f"{forkserver.ENV_SWITCH}=0"):
        pytest.skip(forkserver.unavailable_reason())
    fresh, forked = _run(tmp_path, monkeypatch, False), _run(tmp_path, monkeypatch, True)
    starts = {run: json.loads((run / "run.json").read_text())["tensorflow_starts"]
              for run in (fresh, forked)}
    assert starts[fresh]["mode"] == "fresh" and starts[fresh]["imports"] == starts[fresh]["fresh"] >= 3
    assert starts[forked]["mode"] == "fork-server" and starts[forked]["imports"] == 1
    assert starts[forked]["fresh"] == 0 and starts[forked]["forked"] == starts[fresh]["fresh"]
    for name in VARIANTS:
        a, b = _record(fresh, name), _record(forked, name)
        assert a["status"] == b["status"] == "ok", (a.get("error"), b.get("error"))
        assert a["pid"] != b["pid"]
        assert a["math"] == b["math"], name  # the same losses and gradient norm, bit for bit
        assert _placement(a) == _placement(b), name
        assert a["topology"] == b["topology"]
        fresh_ops, forked_ops = (set(load_trace(run / "tensorboard" / name).events["name"].astype(str))
                                 for run in (fresh, forked))
        assert fresh_ops == forked_ops, name
        if name != VARIANTS[0]:  # the first one waits for the server's import
            assert b["process_s"]["start"] < a["process_s"]["start"], "the forked child imported again"
