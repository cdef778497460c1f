"""A diff document (:mod:`.diff`) as text for the terminal, and as a self-contained HTML page.

The page inlines the report's own stylesheet (``render/static/report.css``), loads nothing from the
network and escapes every name (op, node, device, file, finding) with :func:`html.escape`.
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from importlib import resources
from typing import Any, TextIO

from tfprof_towers.vocab.categories import label as category_label
from tfprof_towers.vocab.fmt import fmt_bytes, fmt_seconds
from tfprof_towers.vocab.textcap import has_invisible, visible

MAX_TEXT_ROWS = 10


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:+.1f}%"


def _signed_s(x: float) -> str:
    return ("+" if x > 0 else "-" if x < 0 else "") + fmt_seconds(abs(x)) if x else "0 s"


def _memory_rows(memory: list[dict[str, Any]]) -> list[list[str]]:
    """The header and a row per device: peak before, after, the change (and in %)."""
    rows = [["device", "before", "after", "change"]]
    for r in memory:
        pct = "" if r["change_pct"] is None else f" ({r['change_pct']:+.1f}%)"
        change = "-" if r["change"] is None else _signed_b(r["change"]) + pct
        rows.append([r["device"], fmt_bytes(r["base_peak_bytes"]), fmt_bytes(r["new_peak_bytes"]), change])
    return rows


def _signed_b(x: float) -> str:
    return ("+" if x > 0 else "-") + fmt_bytes(abs(x)) if x else "0 B"


def verdict(st: Mapping[str, Any], kind: str = "run") -> str:
    """"beyond noise (p = 0.002)" / "within noise (p = 0.4)" / "not tested (...)"; with too few steps,
    the option that gives more of the samples compared (:func:`~.diff.more_samples_hint`)."""
    from tfprof_towers.frames.diff import more_samples_hint

    t = st["test"]
    if t["p"] is None:
        return "not tested: fewer than 2 steps on a side"
    text = f"{'beyond' if st['beyond_noise'] else 'within'} noise (p = {t['p']:.3g}, alpha {st['alpha']:g})"
    if t.get("min_p") is not None and t["min_p"] >= st["alpha"]:
        text += (f"; {t['n_base']} and {t['n_new']} steps can never reach p < {st['alpha']:g}: "
                 f"{more_samples_hint(str(st['samples']), kind)}")
    return text


def status_text(p: Mapping[str, Any]) -> str | None:
    """"status: ok -> failed (record.json is unreadable: ...)"; None when both sides ran."""
    if p["base_status"] == p["new_status"] and p["new_status"] in (None, "ok"):
        return None
    def side(status: Any, error: Any) -> str:
        return f"{status} ({error})" if error and status not in (None, "ok") else str(status)
    before, after = side(p["base_status"], p.get("base_error")), side(p["new_status"], p.get("new_error"))
    return f"status: {before} -> {after}"


def no_data_text(p: Mapping[str, Any]) -> str | None:
    missing = p.get("no_data") or {}
    if not missing:
        return None
    return ("not compared: " + "; ".join(f"{side} has no data ({why})" for side, why in missing.items())
            + ": no change tables against it")


def pair_title(p: Mapping[str, Any]) -> str:
    return p["new"] if p["base"] == p["new"] else f"{p['base']} -> {p['new']}"


# ------------------------------------------------------------------------------------------
# Text


def _table(rows: list[list[str]], out: TextIO) -> None:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for k, r in enumerate(rows):
        out.write("  " + "  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                                   for i, (c, w) in enumerate(zip(r, widths))).rstrip() + "\n")
        if k == 0:
            out.write("  " + "  ".join("-" * w for w in widths) + "\n")


def _ops_rows(rows: Sequence[Mapping[str, Any]], key: str) -> list[list[str]]:
    out = [[key.replace("_", " "), "count before", "after", "time before", "after", "change"]]
    for r in rows[:MAX_TEXT_ROWS]:
        out.append([str(r[key]), f"{r['base_count']:g}", f"{r['new_count']:g}",
                    fmt_seconds(r["base_seconds"]),
                    fmt_seconds(r["new_seconds"]), _signed_s(r["change"])])
    return out


def _kernel(m: Mapping[str, Any]) -> str:
    """``_MklNativeFusedMatMul (MatMul, add)``: the kernel and the graph ops fused into the node."""
    fused = [f.rsplit("/", 1)[-1] for f in m.get("fused") or ()]
    kernel = str(m.get("kernel") or "")
    return f"{kernel} ({', '.join(fused)})" if fused else kernel


def write_text(doc: Mapping[str, Any], out: TextIO) -> None:
    out.write(f"BASE: {doc['base']}\nNEW:  {doc['new']}\n")
    for note in doc.get("notes") or ():
        out.write(f"note: {note}\n")
    for p in doc["pairs"]:
        st = p["step_time"]
        out.write(f"\n== {pair_title(p)}\n")
        status = status_text(p)
        if status:
            out.write(status + "\n")
        missing = no_data_text(p)
        if missing:
            out.write(missing + "\n")
            continue
        out.write(f"step time (median of {st['samples']}): {fmt_seconds(st['base_median_s'])} -> "
                  f"{fmt_seconds(st['new_median_s'])} ({_pct(st['change_pct'])}), "
                  f"{verdict(st, doc.get('kind', 'run'))}; {st['test']['method']}\n")
        dev = [r for r in p["devices"] if r["change"]][:MAX_TEXT_ROWS]
        if dev:
            out.write("\nwall time per step, by device and category (biggest change first):\n")
            rows = [["device", "category", "before", "after", "change"]]
            rows += [[r["device"], category_label(r["category"]), fmt_seconds(r["base_seconds"]),
                      fmt_seconds(r["new_seconds"]), _signed_s(r["change"])] for r in dev]
            _table(rows, out)
        for key, title in (("op_type", "op types"), ("op", "ops")):
            rows = p["ops"][key]
            if rows:
                out.write(f"\n{title} whose device time per step changed most (counts per step):\n")
                _table(_ops_rows(rows, key), out)
        moves = p["placement_moves"]
        if moves:
            out.write(f"\nplacement moves ({len(moves)} nodes on another device; the heaviest first):\n")
            rows = [["node", "op type", "kernel (fused ops)", "before", "after", "placed by (after)"]]
            rows += [[m["node"], m["op_type"], _kernel(m), m["base_device"], m["new_device"],
                      m["placed_by"] or "-"] for m in moves[:2 * MAX_TEXT_ROWS]]
            _table(rows, out)
            if len(moves) > 2 * MAX_TEXT_ROWS:
                out.write(f"  ... and {len(moves) - 2 * MAX_TEXT_ROWS} more (--json lists them all)\n")
        if p["links"]:
            out.write("\nlinks whose bytes per step changed:\n")
            rows = [["src", "dst", "kind", "before", "after", "change"]]
            rows += [[r["src"], r["dst"], r["kind"], fmt_bytes(r["base_bytes"]), fmt_bytes(r["new_bytes"]),
                      _signed_b(r["change"])] for r in p["links"][:MAX_TEXT_ROWS]]
            _table(rows, out)
        if p.get("memory"):
            out.write("\npeak memory per device (the allocators' events):\n")
            _table(_memory_rows(p["memory"]), out)
        f = p["findings"]
        for what in ("appeared", "gone"):
            for x in f[what]:
                out.write(f"finding {what}: [{x['severity']}] {x['rule']}: {x['message']}\n")
        out.write(f"math: {math_text(p['math'])}\n")
    gate = doc.get("gate")
    if gate is not None:
        out.write("\n" + gate_text(gate) + "\n")


def math_text(m: Mapping[str, Any]) -> str:
    if m["same"] is None:
        return f"not compared ({m.get('why', 'no losses')})"
    if m["same"]:
        return f"the same (losses {', '.join(f'{x:.6g}' for x in m['new_losses'])})"
    return (f"CHANGED: losses {', '.join(f'{x:.6g}' for x in m['base_losses'])} -> "
            f"{', '.join(f'{x:.6g}' for x in m['new_losses'])}")


def gate_text(gate: Mapping[str, Any]) -> str:
    """The gate's outcome, then one line per variant with its reason (``--fail-if-slower``)."""
    from tfprof_towers.frames.diff import INCONCLUSIVE, gate_failed

    pct = gate["fail_if_slower_pct"]
    failed = gate_failed(gate)
    if failed is None:
        head = f"pass: no variant slower by more than {pct:g}%"
        if gate["inconclusive"]:
            head += f" (inconclusive, allowed: {', '.join(gate['inconclusive'])})"
    elif failed == INCONCLUSIVE:
        which = ", ".join(gate["inconclusive"]) or "any variant"
        head = (f"INCONCLUSIVE: too few steps to tell whether {which} "
                f"got more than {pct:g}% slower (fails the gate; --allow-inconclusive lets it pass)")
    else:
        bad = gate["slower"] + gate["regressed"]
        head = f"FAIL: more than {pct:g}% slower, or no longer runs: {', '.join(bad)}"
    lines = [head] + [f"  {v['variant']}: {v['outcome']}: {v['why']}" for v in gate.get("verdicts") or ()]
    if gate.get("inconclusive_all"):
        lines.append(f"  {gate['inconclusive_all']}")
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------
# HTML


def _e(x: Any) -> str:
    """Escaped, and text with control or bidi characters isolated in ``<bdi>`` with them made visible
    (a name with U+202E cannot reorder the text around it, nor show "evil" as "live")."""
    text = str(x)
    if has_invisible(text):
        return f"<bdi>{html.escape(visible(text), quote=True)}</bdi>"
    return html.escape(text, quote=True)


def _html_table(head: Sequence[str], rows: Sequence[Sequence[Any]], text: int = 1) -> str:
    """A table in the report's style: the first ``text`` columns are names, the others numbers."""
    def cls(i: int) -> str:
        return "" if i < text else ' class="num"'

    h = "".join(f"<th{cls(i)}>{_e(c)}</th>" for i, c in enumerate(head))
    body = "".join("<tr>" + "".join(f"<td{cls(i)}>{_e(c)}</td>" for i, c in enumerate(r)) + "</tr>"
                   for r in rows)
    return f"<table><thead><tr>{h}</tr></thead><tbody>{body}</tbody></table>"


def _pair_html(p: Mapping[str, Any], kind: str = "run") -> str:
    st = p["step_time"]
    parts = [f"<section><h2>{_e(pair_title(p))}</h2>"]
    status, missing = status_text(p), no_data_text(p)
    parts += [f"<p>{_e(x)}</p>" for x in (status, missing) if x]
    if missing:
        return "".join(parts) + "</section>"
    parts.append(f"<p><strong>Step time</strong> (median of {_e(st['samples'])}): "
                 f"{_e(fmt_seconds(st['base_median_s']))}"
                 f" → {_e(fmt_seconds(st['new_median_s']))} ({_e(_pct(st['change_pct']))}), "
                 f"{_e(verdict(st, kind))}. <small>{_e(st['test']['method'])}</small></p>")
    dev = [r for r in p["devices"] if r["change"]]
    if dev:
        parts.append("<h3>Wall time per step, by device and category</h3>")
        parts.append(_html_table(["device", "category", "before", "after", "change"],
                                 [[r["device"], category_label(r["category"]), fmt_seconds(r["base_seconds"]),
                                   fmt_seconds(r["new_seconds"]), _signed_s(r["change"])] for r in dev], 2))
    for key, title in (("op_type", "Op types"), ("op", "Ops")):
        if p["ops"][key]:
            parts.append(f"<h3>{title} whose device time per step changed most</h3>")
            rows = _ops_rows(p["ops"][key], key)
            parts.append(_html_table(rows[0], rows[1:]))
    if p["placement_moves"]:
        parts.append("<h3>Placement moves</h3>")
        parts.append(_html_table(["node", "op type", "kernel (fused ops)", "before", "after",
                                  "placed by (before)", "placed by (after)"],
                                 [[m["node"], m["op_type"], _kernel(m), m["base_device"], m["new_device"],
                                   m["base_sources"] or "-", m["new_sources"] or "-"]
                                  for m in p["placement_moves"]], 7))
    if p["links"]:
        parts.append("<h3>Links whose bytes per step changed</h3>")
        parts.append(_html_table(["src", "dst", "kind", "before", "after", "change"],
                                 [[r["src"], r["dst"], r["kind"], fmt_bytes(r["base_bytes"]),
                                   fmt_bytes(r["new_bytes"]), _signed_b(r["change"])]
                                  for r in p["links"]], 3))
    if p.get("memory"):
        rows = _memory_rows(p["memory"])
        parts.append("<h3>Peak memory per device</h3>")
        parts.append(_html_table(rows[0], rows[1:], 1))
    f = p["findings"]
    items = [f'<div class="finding {_e(x["severity"])}"><strong>{_e(w)}</strong>: '
             f'<span class="sev sev-{_e(x["severity"])}">{_e(x["severity"])}</span> {_e(x["rule"])}: '
             f"{_e(x['message'])}</div>" for w in ("appeared", "gone") for x in f[w]]
    if items:
        parts.append("<h3>Findings</h3>" + "".join(items))
    parts.append(f"<p><strong>Math:</strong> {_e(math_text(p['math']))}</p></section>")
    return "".join(parts)


def render_html(doc: Mapping[str, Any]) -> str:
    css = (resources.files("tfprof_towers.render") / "static" / "report.css").read_text(encoding="utf-8")
    css = css.replace("</", "<\\/")
    gate = doc.get("gate")
    notes = "".join(f"<li>{_e(n)}</li>" for n in doc.get("notes") or ())
    return (
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">"
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
        f"<title>tfprof-towers diff</title><style>{css}</style></head><body><main>"
        f"<h1>tfprof-towers diff</h1><p>BASE: <code>{_e(doc['base'])}</code><br>"
        f"NEW: <code>{_e(doc['new'])}</code></p>"
        + (f"<ul>{notes}</ul>" if notes else "")
        + (f'<div class="banner"><strong>{"<br>".join(_e(x) for x in gate_text(gate).splitlines())}'
           "</strong></div>" if gate else "")
        + "".join(_pair_html(p, doc.get("kind", "run")) for p in doc["pairs"])
        + "</main></body></html>\n"
    )
