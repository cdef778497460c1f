/* tfprof-towers report charts: inline SVG, no dependencies, works offline.
 *
 * Data comes from the JSON block with id "report-data" (written with Jinja's
 * |tojson, so "<", ">" and "&" arrive escaped).  Every name from a trace or
 * graph is put into the page with textContent or setAttribute, never as markup.
 */
(function () {
  "use strict";
  var SVG = "http://www.w3.org/2000/svg";

  function el(name, attrs, parent) {
    var node = document.createElementNS(SVG, name);
    Object.keys(attrs || {}).forEach(function (k) { node.setAttribute(k, String(attrs[k])); });
    if (parent) { parent.appendChild(node); }
    return node;
  }

  function text(parent, x, y, content, cls, anchor) {
    var t = el("text", { x: x, y: y, "class": cls || "" }, parent);
    if (anchor) { t.setAttribute("text-anchor", anchor); }
    t.textContent = content;
    return t;
  }

  function fmtSeconds(s) {
    if (s === null || s === undefined || !isFinite(s)) { return "–"; }
    var a = Math.abs(s);
    if (a === 0) { return "0 s"; }
    if (a >= 1) { return s.toPrecision(3) + " s"; }
    if (a >= 1e-3) { return (s * 1e3).toPrecision(3) + " ms"; }
    if (a >= 1e-6) { return (s * 1e6).toPrecision(3) + " µs"; }
    return (s * 1e9).toPrecision(3) + " ns";
  }

  function fmtBytes(b) {
    if (b === null || b === undefined || !isFinite(b) || b <= 0) { return ""; }
    var units = [[1e12, "TB"], [1e9, "GB"], [1e6, "MB"], [1e3, "kB"]];
    for (var i = 0; i < units.length; i++) {
      if (b >= units[i][0]) { return (b / units[i][0]).toPrecision(3) + " " + units[i][1]; }
    }
    return Math.round(b) + " B";
  }

  function niceStep(max, ticks) {
    var raw = max / ticks, mag = Math.pow(10, Math.floor(Math.log10(raw)));
    var steps = [1, 2, 2.5, 5, 10];
    for (var i = 0; i < steps.length; i++) { if (steps[i] * mag >= raw) { return steps[i] * mag; } }
    return 10 * mag;
  }

  function axis(svg, x0, width, y, maxS) {
    if (!(maxS > 0)) { return; }
    var step = niceStep(maxS, 5);
    for (var v = 0; v <= maxS * 1.0001; v += step) {
      var x = x0 + (v / maxS) * width;
      el("line", { x1: x, x2: x, y1: 0, y2: y, "class": "grid" }, svg);
      text(svg, x, y + 12, fmtSeconds(v), "tick", "middle");
    }
  }

  function legend(container, categories, present) {
    var box = document.createElement("div");
    box.className = "legend";
    categories.forEach(function (c) {
      if (present && !present[c.key]) { return; }
      var item = document.createElement("span");
      item.className = "legend-item";
      var sw = document.createElement("span");
      sw.className = "swatch";
      sw.style.background = c.color;
      item.appendChild(sw);
      item.appendChild(document.createTextNode(c.label));
      box.appendChild(item);
    });
    container.appendChild(box);
  }

  /* Stacked wall-time bars: one bar per (variant, device), segments per category. */
  function renderBreakdown(container, data) {
    var rows = data.rows || [];
    if (!rows.length) { return; }
    var cats = data.categories, labelW = 300, barW = 620, rowH = 20, gap = 6, top = 6;
    var maxS = Math.max.apply(null, rows.map(function (r) { return r.step_s || 0; }));
    var height = top + rows.length * (rowH + gap) + 20;
    var svg = el("svg", { width: labelW + barW + 20, height: height, "class": "chart breakdown-chart",
      role: "img", "aria-label": "wall-time breakdown per variant and device" });
    axis(svg, labelW, barW, height - 18, maxS);
    var present = {};
    rows.forEach(function (r, i) {
      var y = top + i * (rowH + gap), x = labelW;
      text(svg, labelW - 8, y + rowH * 0.7, r.variant ? r.variant + " · " + r.device : r.device, "row-label", "end");
      cats.forEach(function (c) {
        var s = (r.wall || {})[c.key] || 0;
        if (s <= 0 || !(maxS > 0)) { return; }
        present[c.key] = true;
        var w = (s / maxS) * barW;
        var rect = el("rect", { x: x, y: y, width: Math.max(w, 0.5), height: rowH, fill: c.color,
          "class": "seg", "data-cat": c.key }, svg);
        var t = el("title", {}, rect);
        t.textContent = r.variant + " · " + r.device + ": " + c.label + " " + fmtSeconds(s) +
          " (" + (100 * s / (r.step_s || 1)).toFixed(1) + "% of the step)";
        x += w;
      });
      text(svg, x + 4, y + rowH * 0.7, fmtSeconds(r.step_s), "bar-total");
    });
    container.appendChild(svg);
    legend(container, cats, present);
  }

  /* One profiled step: devices as rows (a lane per thread or stream), events as rects. */
  function renderTimeline(container, tl, categories, tooltip) {
    var colors = {};
    categories.forEach(function (c) { colors[c.key] = c.color; });
    var labelW = 220, plotW = 760, laneH = 12, rowGap = 8, top = 4;
    var rowY = [], y = top;
    tl.rows.forEach(function (r) { rowY.push(y); y += Math.max(r.lanes, 1) * laneH + rowGap; });
    var height = y + 18, dur = tl.duration_us > 0 ? tl.duration_us : 1;
    var svg = el("svg", { width: labelW + plotW + 20, height: height, "class": "chart timeline-chart",
      role: "img", "aria-label": "timeline of one profiled step of " + tl.variant });
    axis(svg, labelW, plotW, height - 16, dur / 1e6);
    tl.rows.forEach(function (r, i) {
      text(svg, labelW - 8, rowY[i] + laneH * 0.85, r.label, "row-label", "end");
      el("rect", { x: labelW, y: rowY[i], width: plotW, height: Math.max(r.lanes, 1) * laneH,
        "class": "lane-bg" }, svg);
    });
    var group = el("g", { "class": "events" }, svg);
    tl.events.forEach(function (e, i) {
      // e = [row, lane, start_us, dur_us, name, category, bytes]
      var x = labelW + (e[2] / dur) * plotW, w = Math.max((e[3] / dur) * plotW, 0.6);
      el("rect", { x: x, y: rowY[e[0]] + e[1] * laneH + 1, width: w, height: laneH - 2,
        fill: colors[e[5]] || "#888", "class": "ev", "data-i": i }, group);
    });
    function show(evt) {
      var i = evt.target.getAttribute("data-i");
      if (i === null) { tooltip.style.display = "none"; return; }
      var e = tl.events[+i], lines = [e[4], (categoriesByKey[e[5]] || e[5]) + " · " + fmtSeconds(e[3] / 1e6)];
      var b = fmtBytes(e[6]);
      if (b) { lines.push(b); }
      lines.push(tl.rows[e[0]].label);
      tooltip.textContent = "";
      lines.forEach(function (line, k) {
        var div = document.createElement("div");
        if (k === 0) { div.className = "tip-title"; }
        div.textContent = line;
        tooltip.appendChild(div);
      });
      tooltip.style.display = "block";
      tooltip.style.left = (evt.pageX + 12) + "px";
      tooltip.style.top = (evt.pageY + 12) + "px";
    }
    var categoriesByKey = {};
    categories.forEach(function (c) { categoriesByKey[c.key] = c.label; });
    svg.addEventListener("mousemove", show);
    svg.addEventListener("mouseleave", function () { tooltip.style.display = "none"; });
    container.appendChild(svg);
    if (tl.truncated) {
      var note = document.createElement("p");
      note.className = "note";
      note.textContent = "Showing the " + tl.events.length + " longest of " + tl.total_events +
        " events of this step.";
      container.appendChild(note);
    }
  }

  function main() {
    var node = document.getElementById("report-data");
    if (!node) { return; }
    var data = JSON.parse(node.textContent);
    var tooltip = document.getElementById("tooltip");
    var bd = document.getElementById("breakdown-chart");
    if (bd && data.breakdown) { renderBreakdown(bd, data.breakdown); }
    (data.timelines || []).forEach(function (tl) {
      var box = document.getElementById("timeline-" + tl.id);
      if (box) { renderTimeline(box, tl, data.breakdown.categories, tooltip); }
    });
    document.documentElement.setAttribute("data-charts", "ready");
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", main);
  } else {
    main();
  }
})();
