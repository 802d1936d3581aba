// The heatmap and the per-host map of the report page: the figures they colour by,
// the colour scales, the per-host roll-up, the metric selector and the step-time hover.
// Not a script of its own: report/page_assets.py puts it into page.js at its "@MAPS@"
// line, inside the page script's closure (it uses C, P, ranks, cols, groups, ST, ...).

// the heatmap's figures. Each one's key is the URL hash that opens the page on it
// (report.html#idle) and the figure's JSON name without "_us". Per host, held and wait
// are summed (time the host's ranks cost the others, or lost waiting: it adds up); the
// step-time figures are the mean over the host's ranks that have the figure -- not the
// sum (eight ranks do not make a step eight times longer), not the maximum (it grows
// with a host's number of ranks by chance alone, so a quiet run's big hosts would look
// worst; one rank's outlier is in the rank map, and the host's hover names its largest).
var METRICS = [
  {key: "held", label: "how long the others waited for the rank", legend: "the others waited for this rank (held_us)", host: "sum"},
  {key: "wait", label: "the rank's own wait", legend: "this rank's own wait (wait_us)", host: "sum", scale: "share"},
  {key: "step", label: "step time", legend: "step time (step_time: step_us)", host: "mean", scale: "excess"},
  {key: "comm_exposed", label: "exposed communication", legend: "exposed communication (step_time: gpu.comm_exposed_us)", host: "mean", scale: "share", gpu: true},
  {key: "idle", label: "GPU idle", legend: "GPU idle (step_time: gpu.idle_us)", host: "mean", scale: "share", gpu: true},
  {key: "compute", label: "GPU compute", legend: "GPU compute (step_time: gpu.compute_us)", host: "mean", scale: "excess", gpu: true}
];
var METRIC = dict();
METRICS.forEach(function (m) { METRIC[m.key] = m; });
/** Why ``m`` is not offered ("": it is). */
function unavailable(m) {
  if (m.key === "held" || m.key === "wait") return "";
  if (!stepTimes) {
    return (P.trimmed || []).some(function (t) { return String(t).indexOf("step_time (every rank and step)") === 0; }) ?
      "left out of this page to keep it small" : "this tracefuse's JSON has no collectives.step_time";
  }
  if (!stepTimes.length) return "no profiled step";
  return m.gpu && !gpuAny ? "no GPU events in these traces: a CPU-only run" : "";
}
var asked = /^#(\w+)$/.exec(location.hash), askedKey = asked ? asked[1] : "", metric = "held";
try {  // the hash's figure where it is offered; else held (step time when no collective matched)
  metric = askedKey && METRIC[askedKey] && !unavailable(METRIC[askedKey]) ? askedKey :
    !steps.length && stepTimes && stepTimes.length ? "step" : "held";
} catch (e) { setupError = setupError || e; }
/** Rank ``r``'s figure ``key`` in the column of step key ``sk`` (undefined: none). */
function figure(key, sk, r) {
  var rk = String(r);
  if (key === "held" || key === "wait") { var row = stepByKey[sk], m = row && row[key + "_us"]; return m && has(m, rk) ? m[rk] : undefined; }
  var e = ST[rk] && ST[rk][sk];
  if (!e) return undefined;
  return key === "step" ? e.step_us : e.gpu ? e.gpu[key + "_us"] : undefined;
}
function val(col, r) { return figure(metric, col.key, r); }
var medians = dict();
/** The median of figure ``key`` over every rank and step that has it (the colours' reference). */
function median(key) {
  if (!has(medians, key)) {
    var a = [];
    cols.forEach(function (c) { ranks.forEach(function (r) { var v = figure(key, c.key, r); if (num(v)) a.push(v); }); });
    a.sort(function (x, y) { return x - y; });
    var n = a.length;
    medians[key] = !n ? undefined : n % 2 ? a[(n - 1) / 2] : (a[n / 2 - 1] + a[n / 2]) / 2;
  }
  return medians[key];
}
/** What the colour shows of value ``v``: the value, or its time above the median. */
function shade(v) { return num(v) && METRIC[metric].scale === "excess" ? v - (median(metric) || 0) : v; }

// the top of the colour scale: the data's maximum, but never below a floor tied to the
// run, so that a quiet run's noise stays pale (never dark red because it is all there
// is): "held" -- twice the largest threshold a rank had to pass to stand out (a rank at
// the threshold is orange); "wait" and the step's shares (exposed communication, GPU
// idle) -- a typical whole step (the threshold's: the median ProfilerStep; else the
// median step_us, else the busy step, else the threshold's floor); step time and GPU compute are
// coloured by the time above their median over every rank and step (every rank has a
// full step and most of it computing: from 0 every cell would be dark), the top at least
// a fifth of a typical step -- twice the 10% the imbalance verdict calls a spread. For
// the per-host sums the floor is multiplied by the largest host (the means need not).
function scaleFloor() {
  var T = C.threshold || {}, f = 0, M = METRIC[metric];
  if (metric === "held") {
    steps.forEach(function (row) { var m = row.threshold_us || {}; Object.keys(m).forEach(function (k) { if (num(m[k])) f = Math.max(f, m[k]); }); });
    if (!f && num(T.min_us)) f = T.min_us;
    return 2 * f;
  }
  var typ = num(T.typical_step_us) ? T.typical_step_us : num(median("step")) ? median("step") :
    num(T.busy_step_us) ? T.busy_step_us : num(T.min_us) ? 2 * T.min_us : 0;
  return M.scale === "excess" ? typ / 5 : typ;
}
var FLOOR_TEXT = {held: "twice the largest threshold", share: "a typical step", excess: "a fifth of a typical step"};
function legend(max, label) {
  var w = 220, M = METRIC[metric], plus = M.scale === "excess" ? "+" : "", s = '<div class="legend"><svg width="' + (w + 40) + '" height="30">';
  for (var i = 0; i < 44; i++) {
    var t = i / 43;
    s += '<rect x="' + (i * 5) + '" y="2" width="5" height="12" fill="' + colour(t * t * max, max) + '"/>';
  }
  s += '<text x="0" y="26">' + plus + '0</text><text x="' + (w / 2 - 14) + '" y="26">' + plus + esc(ms(max / 4)) + "</text>";
  s += '<text x="' + (w - 40) + '" y="26">' + plus + esc(ms(max)) + "</text>";
  var above = M.scale === "excess" ? "; the time above the median of every rank and step, " + ms(median(metric)) : "";
  s += '</svg><span class="sub">' + esc(label) + esc(above) + " (square-root scale; at least " + FLOOR_TEXT[M.key === "held" ? "held" : M.scale] +
    ": noise stays pale)</span></div>";
  return s;
}

/** The metric selector: a radio per figure, those not offered disabled, and why. */
function metricControls() {
  var off = [], why = dict();
  var radios = METRICS.map(function (m) {
    var no = unavailable(m);
    if (no) { if (!has(why, no)) { why[no] = []; off.push(no); } why[no].push(m.label); }
    return "<label" + (no ? ' class="off" title="' + esc(no) + '"' : "") + '><input type="radio" name="metric" value="' + m.key + '"' +
      (metric === m.key ? " checked" : "") + (no ? " disabled" : "") + "> " + esc(m.label) + "</label>";
  }).join("");
  var notes = off.map(function (no) { return esc(why[no].join(", ")) + ": " + na(no); });
  if (askedKey && askedKey !== metric && METRIC[askedKey]) {
    notes.unshift("#" + esc(askedKey) + " asks for " + esc(METRIC[askedKey].label) + ", not offered here: showing " + esc(METRIC[metric].label));
  }
  return '<div class="ctl" id="metric-ctl">colour: ' + radios + "</div>" + (notes.length ? '<div class="sub" id="metric-note">' + notes.join("<br>") + "</div>" : "");
}

function drawMaps() {
  drawHeat();
  drawHosts();
}

function drawHeat() {
  var n = ranks.length, ns = cols.length;
  if (!n || !ns) {
    el("heat").innerHTML = '<div class="muted">no ranks and steps to draw (no matched collective, no step-time figure)</div>';
    el("heat-legend").innerHTML = "";
    return;
  }
  var rowH = n <= 48 ? 14 : n <= 128 ? 5 : n <= 512 ? 2 : 1;
  var gap = groups.length > 1 ? (rowH >= 5 ? 3 : 1) : 0;
  var cellW = Math.max(8, Math.min(72, Math.floor(640 / ns)));
  var labW = rowH >= 12 ? 200 : 160, top = 30, x0 = labW, barX = x0 + ns * cellW + 14, barW = 130;
  var max = 0, totals = dict(), tmax = 0;
  cols.forEach(function (col) { ranks.forEach(function (r) { var v = val(col, r); if (num(v)) { max = Math.max(max, shade(v)); totals[r] = (totals[r] || 0) + v; } }); });
  ranks.forEach(function (r) { tmax = Math.max(tmax, totals[r] || 0); });
  max = Math.max(max, scaleFloor());
  var s = [], y = top, lastLab = -100, marks = [], bars = [], barsS = [];  // the totals: two paths, not 2 x n rects
  rowTops = [];
  var k = 1;
  var gh0 = groups.length ? groups[0].ranks.length * rowH + gap : 10;
  if (gh0 < 11) k = Math.ceil(11 / gh0);
  cols.forEach(function (col, j) {
    var lx = x0 + j * cellW + cellW / 2;
    if (ns <= 24 || j % Math.ceil(ns / 24) === 0) {
      s.push('<text x="' + lx + '" y="' + (top - 8) + '" text-anchor="middle">' + esc(col.step === null ? "out" : col.step) + "</text>");
    }
  });
  s.push('<text x="' + (x0 - 6) + '" y="' + (top - 8) + '" text-anchor="end" font-weight="600">host / rank \u2193  step \u2192</text>');
  s.push('<text x="' + barX + '" y="' + (top - 8) + '" font-weight="600">all steps</text>');
  groups.forEach(function (g, gi) {
    var gh = g.ranks.length * rowH;
    var hasStr = g.ranks.some(function (r) { return strSet[r]; });
    var forced = hasStr;
    if ((gi % k === 0 || forced) && (forced || y - lastLab >= 11)) {
      var ty = Math.max(y + Math.min(gh, 11) - 2, lastLab + 11);
      s.push('<text x="' + (x0 - (rowH >= 12 ? 44 : 6)) + '" y="' + ty + '" text-anchor="end"' + (hasStr ? ' fill="#a50026" font-weight="600"' : "") + ">" +
        esc(g.host) + (rowH >= 12 ? "" : " (" + rangesShort(g.ranks) + ")") + "</text>");
      lastLab = ty;
    }
    if (groups.length > 1) s.push('<rect x="' + (x0 - 4) + '" y="' + y + '" width="2" height="' + Math.max(gh, 1) + '" fill="' + (gi % 2 ? "#999" : "#555") + '"/>');
    g.ranks.forEach(function (r) {
      if (rowH >= 12) s.push('<text x="' + (x0 - 8) + '" y="' + (y + rowH - 3) + '" text-anchor="end"' + (strSet[r] ? ' fill="#a50026" font-weight="600"' : "") + ">" + r + "</text>");
      cols.forEach(function (col, j) {
        var v = val(col, r), st = ((col.row || {}).stragglers || []).indexOf(r) >= 0;
        s.push('<rect ' + (st && rowH >= 5 ? 'class="s" ' : "") + 'x="' + (x0 + j * cellW) + '" y="' + y + '" width="' + (cellW - (cellW > 12 ? 1 : 0)) +
          '" height="' + rowH + '" fill="' + colour(shade(v), max) + '" data-rank="' + r + '" data-step="' + col.key + '"' + (num(v) ? ' data-value="' + v + '"' : "") +
          (st ? ' data-straggler="1"' : "") + "/>");
      });
      var t = totals[r] || 0;
      var bw = tmax > 0 ? Math.max(0, t / tmax * barW) : 0, bh = Math.max(rowH - (rowH >= 5 ? 1 : 0), 1);
      if (bw > 0) (strSet[r] ? barsS : bars).push("M" + barX + " " + y + "h" + bw.toFixed(1) + "v" + bh + "h-" + bw.toFixed(1) + "z");
      rowTops.push([y, r]);
      if (strSet[r]) {
        var lb = marks.length ? marks[marks.length - 1] : null;
        if (lb && y - lb.last < 11) { lb.ranks.push(r); lb.last = y; } else { marks.push({y: y, last: y, ranks: [r], t: t}); }
      }
      y += rowH;
    });
    y += gap;
  });
  s.push('<path id="totals" d="' + bars.join("") + '" fill="#8d99ae"/><path id="totals-s" d="' + barsS.join("") + '" fill="#a50026"/>');
  s.push('<rect id="totals-hit" x="' + barX + '" y="' + top + '" width="' + barW + '" height="' + (y - top) + '" fill="transparent"/>');
  marks.forEach(function (m) {
    s.push('<text x="' + (barX + barW + 6) + '" y="' + (m.y + 9) + '" fill="#a50026" font-weight="600">\u25c0 ' + (m.ranks.length > 1 ? (ranges(m.ranks).length <= 16 ? "ranks " + ranges(m.ranks) : m.ranks.length + " stragglers") :
      "rank " + m.ranks[0] + " (" + esc(ms(m.t)) + ")") + "</text>");
  });
  var W = barX + barW + 130, H = y + 6;
  el("heat").innerHTML = '<svg id="heatmap" data-metric="' + metric + '" width="' + W + '" height="' + H + '" viewBox="0 0 ' + W + " " + H + '">' +
    "<style>.s{stroke:#000;stroke-width:1.2}</style>" + s.join("") + "</svg>";
  var M = METRIC[metric], V = C.step_time_verdicts;
  var grey = M.key === "held" || M.key === "wait" ? "the rank has no collective in that step" : M.gpu ? "no GPU figure (no GPU events on the rank, or the step not profiled)" :
    "no step-time figure (the step not profiled on the rank)";
  el("heat-legend").innerHTML = legend(max, M.legend) +
    '<div class="sub">' + (rowH >= 5 ? "outlined: the step's straggler(s); " : "") + "grey-blue: " + grey + "; right: the rank's sum over the steps; hover a cell for rank, host, step and figures</div>" +
    (M.host === "mean" && Array.isArray(V) ? '<div class="sub" id="imbalance">imbalance: ' + (V.length ? esc(V.join("; ")) : "none named") + "</div>" : "");
}

/** Host group ``g``'s figure in column ``col``: the sum over its ranks (held, wait) or
 * the mean over those that have the figure (the step-time figures; see METRICS); ``n``
 * the ranks counted, ``hi`` / ``lo`` the largest and smallest rank. */
function rollup(g, col) {
  var t = 0, n = 0, hi = null, lo = null;
  g.ranks.forEach(function (r) {
    var v = val(col, r);
    if (!num(v)) return;
    t += v;
    n++;
    if (!hi || v > hi.v) hi = {v: v, r: r};
    if (!lo || v < lo.v) lo = {v: v, r: r};
  });
  return {v: n ? (METRIC[metric].host === "mean" ? t / n : t) : undefined, n: n, hi: hi, lo: lo};
}
var HOST_HOW = {
  sum: "the same figures summed over the ranks of each host (time its ranks cost the others, or lost waiting: it adds up)",
  mean: "the mean over the ranks of each host that have the figure: not the sum (eight ranks do not make a step eight times longer), " +
    "not the maximum (it grows with a host's number of ranks by chance alone; one rank's outlier shows in the map above, and a host's hover names its largest)"
};

function drawHosts() {
  var ns = cols.length, M = METRIC[metric];
  el("host-how").textContent = HOST_HOW[M.host];
  if (!groups.length || !ns) { el("hosts").innerHTML = ""; el("host-table").innerHTML = ""; el("host-legend").innerHTML = ""; return; }
  var sums = groups.map(function (g) {
    var per = cols.map(function (col) { return rollup(g, col); });
    var held = 0, wait = 0, all = 0, cnt = 0;
    g.ranks.forEach(function (r) { var i = rankInfo[r] || {}; held += num(i.held_us) ? i.held_us : 0; wait += num(i.wait_us) ? i.wait_us : 0; });
    per.forEach(function (p) { if (num(p.v)) { all += p.v * p.n; cnt += p.n; } });
    return {g: g, per: per, held: held, wait: wait, all: cnt ? all / cnt : undefined};
  });
  var max = 0;
  sums.forEach(function (x) { x.per.forEach(function (p) { if (num(p.v)) max = Math.max(max, shade(p.v)); }); });
  var biggest = 1;
  groups.forEach(function (g) { biggest = Math.max(biggest, g.ranks.length); });
  max = Math.max(max, scaleFloor() * (M.host === "sum" ? biggest : 1));
  var nh = groups.length, rowH = nh <= 40 ? 13 : nh <= 128 ? 5 : 3;
  var cellW = Math.max(8, Math.min(72, Math.floor(640 / ns))), x0 = 200, top = 22, s = [];
  var k = rowH >= 11 ? 1 : Math.ceil(11 / rowH);
  cols.forEach(function (col, j) {
    if (ns <= 24 || j % Math.ceil(ns / 24) === 0) s.push('<text x="' + (x0 + j * cellW + cellW / 2) + '" y="' + (top - 8) + '" text-anchor="middle">' + esc(col.step === null ? "out" : col.step) + "</text>");
  });
  sums.forEach(function (x, i) {
    var y = top + i * rowH, hasStr = x.g.ranks.some(function (r) { return strSet[r]; });
    if (i % k === 0 || hasStr) s.push('<text x="' + (x0 - 6) + '" y="' + (y + Math.min(rowH, 11) - 2) + '" text-anchor="end"' + (hasStr ? ' fill="#a50026" font-weight="600"' : "") + ">" + esc(x.g.host) + " (" + rangesShort(x.g.ranks) + ")</text>");
    x.per.forEach(function (p, j) {
      s.push('<rect x="' + (x0 + j * cellW) + '" y="' + y + '" width="' + (cellW - (cellW > 12 ? 1 : 0)) + '" height="' + Math.max(rowH - (rowH >= 5 ? 1 : 0), 1) + '" fill="' + colour(shade(p.v), max) +
        '" data-host="' + esc(x.g.host) + '" data-step="' + cols[j].key + '"' + (num(p.v) ? ' data-value="' + p.v + '" data-n="' + p.n + '"' : "") + "/>");
    });
  });
  var W = x0 + ns * cellW + 20, H = top + nh * rowH + 6;
  el("hosts").innerHTML = '<svg id="hostmap" data-metric="' + metric + '" data-rollup="' + M.host + '" width="' + W + '" height="' + H + '">' + s.join("") + "</svg>";
  el("host-legend").innerHTML = legend(max, (M.host === "mean" ? "the mean over the host's ranks: " : "summed over the host's ranks: ") + M.legend);
  var mean = M.host === "mean";
  var order = sums.slice().sort(function (a, b) { return b.held - a.held || a.g.ranks[0] - b.g.ranks[0]; });
  var rows = order.map(function (x) {
    var st = x.g.ranks.filter(function (r) { return strSet[r]; });
    return "<tr><td class=\"l\">" + esc(x.g.host) + '</td><td class="l">' + ranges(x.g.ranks) + "</td><td>" + x.g.ranks.length + "</td><td>" + esc(ms(x.held)) +
      "</td><td>" + esc(ms(x.wait)) + (mean ? "</td><td>" + esc(ms(x.all)) : "") + '</td><td class="l">' + (st.length ? (st.length > 1 ? "ranks " : "rank ") + ranges(st) : "") + "</td></tr>";
  });
  var head = '<table id="host-sums"><tr><th class="l">host</th><th class="l">ranks</th><th>n</th><th>others waited for its ranks</th><th>its ranks\' own wait</th>' +
    (mean ? "<th>" + esc(M.label) + ": mean of its ranks' steps</th>" : "") + '<th class="l">stragglers</th></tr>';
  var shown = 16;
  el("host-table").innerHTML = head + rows.slice(0, shown).join("") + "</table>" +
    (rows.length > shown ? "<details><summary>all " + rows.length + " hosts</summary>" + head + rows.slice(shown).join("") + "</table></details>" : "");
}

/** The hover lines of one ``step_time`` entry: each figure in ms and its share of the step. */
function stepTimeLines(e) {
  if (!e) return [];
  function of(v) { return ms(v) + (num(v) && num(e.step_us) && e.step_us > 0 ? " (" + Math.round(100 * v / e.step_us) + "% of the step)" : ""); }
  function above(key, v) {
    var m = median(key);
    return metric === key && num(v) && num(m) ? ", " + signed(v - m) + " against the median " + ms(m) : "";
  }
  var out = ["step time: " + ms(e.step_us) + above("step", e.step_us)], g = e.gpu;
  if (!g) return out.concat(["GPU: no GPU events on this rank"]);
  out.push("GPU compute: " + of(g.compute_us) + above("compute", g.compute_us), "exposed communication: " + of(g.comm_exposed_us));
  if (has(g, "memcpy_us")) out.push("exposed copies: " + of(g.memcpy_us));
  out.push("GPU idle: " + of(g.idle_us) + (num(g.idle_host_wait_us) ? " \u2013 host wait " + ms(g.idle_host_wait_us) + ", kernel wait " +
    ms(g.idle_kernel_wait_us) + ", step edges " + ms(g.idle_other_us) : ""));
  if (num(g.overlap_pct)) out.push("communication hidden by compute: " + g.overlap_pct + "%");
  return out;
}
/** The hover text of the per-host cell of host ``hh`` in step key ``sk``. */
function hostText(hh, sk) {
  var g = groups[gIndex[hh]], col = colByKey[sk], row = stepByKey[sk] || {}, held = 0, wait = 0, M = METRIC[metric];
  (g ? g.ranks : []).forEach(function (q) { held += (row.held_us || {})[q] || 0; wait += (row.wait_us || {})[q] || 0; });
  var lines = ["host " + hh + " (ranks " + (g ? ranges(g.ranks) : "?") + ")", "step " + stepLabel(col ? col.step : row.step),
    "the others waited for its ranks: " + ms(held), "its ranks' own wait: " + ms(wait)];
  if (M.host === "mean" && g && col) {
    var p = rollup(g, col);
    lines.push(p.n ? M.label + ": " + ms(p.v) + ", the mean of " + p.n + " rank" + (p.n > 1 ? "s" : "") + " (largest " + ms(p.hi.v) + " on rank " + p.hi.r +
      ", smallest " + ms(p.lo.v) + " on rank " + p.lo.r + ")" : M.label + ": no rank of the host has the figure");
  }
  return lines.join("\n");
}
