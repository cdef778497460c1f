"""A run's answer in one document: the ranking, the recommendation and its reason, the findings and the
memory verdicts, taken from its :class:`~tfprof_towers.rundir.summary.Summary` (what ``summary.json``
holds).  What the MCP server's ``run_summary`` tool returns: the short read of a run for an agent,
before it asks ``analyze`` about one variant's trace or ``sql`` about its frames."""

from __future__ import annotations

from typing import Any

from tfprof_towers.rundir.projection_doc import ProjectionSummary
from tfprof_towers.rundir.summary import Summary, SummaryEntry


def run_digest(summary: Summary) -> dict[str, Any]:
    """The ranking (best first, then the variants that did not run), the recommendation, the findings
    (most severe first, as the summary holds them), each measured or estimated peak memory with its fit
    verdict, and the projection's memory verdicts where the run was projected."""
    by_name = {e.name: e for e in summary.variants}
    order = [*summary.ranking, *(e.name for e in summary.variants if e.name not in summary.ranking)]
    topology = summary.topology.to_json() if summary.topology is not None else None
    return {
        "run_dir": summary.run_dir,
        "partial": summary.partial,
        "interrupted_by": summary.interrupted_by,
        "topology": topology,
        "ranking": [_ranked(by_name[n]) for n in order if n in by_name],
        "recommendation": summary.recommendation.to_json(),
        "findings": [f.to_json() for f in summary.findings],
        "memory": [{"variant": e.name, "device": device, **peak.to_json()}
                   for e in summary.variants for device, peak in e.memory.items()],
        "projected_memory": _projected_memory(summary.projection),
        "problems": list(summary.problems),
    }


def _ranked(e: SummaryEntry) -> dict[str, Any]:
    st = e.step_time_s
    return {"rank": e.rank, "variant": e.name, "status": e.status, "family": e.family, "source": e.source,
            "median_step_s": st.median, "p10_s": st.p10, "p90_s": st.p90, "steps": st.n,
            "speedup_vs_single": e.speedup_vs_baseline, "accelerators_used": e.accelerators_used,
            "error": e.error}


def _projected_memory(projection: ProjectionSummary | None) -> list[dict[str, Any]]:
    """Each projected variant's memory fit (``projection.variants[].memory_fit``), where there is one."""
    if projection is None:
        return []
    return [{"variant": v.name, "hardware": projection.hardware, **v.memory_fit}
            for v in projection.variants if v.memory_fit is not None]
