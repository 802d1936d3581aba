(function () {
"use strict";
var t0 = performance.now();
var errs = [];
function done() {
  var b = document.body;
  b.setAttribute("data-errors", String(errs.length));
  if (errs.length) b.setAttribute("data-error-text", errs.join(" | ").slice(0, 2000));
  b.setAttribute("data-rendered", errs.length ? "error" : "ok");
  b.setAttribute("data-render-ms", (performance.now() - t0).toFixed(1));
  b.setAttribute("data-since-start-ms", performance.now().toFixed(1));  // from the navigation's start
}
window.addEventListener("error", function (e) { errs.push(String(e.message || e)); done(); });
var cerr = console.error;
console.error = function () { errs.push(Array.prototype.join.call(arguments, " ")); done(); return cerr.apply(console, arguments); };

function esc(s) {
  return String(s).replace(/[&<>"']/g, function (c) {
    return {"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"}[c];
  });
}
function num(v) { return typeof v === "number" && isFinite(v); }
function ms(us) {
  if (!num(us)) return "\u2013";
  var m = us / 1000, a = Math.abs(m);
  return (a >= 100 ? m.toFixed(1) : a >= 1 ? m.toFixed(2) : m.toFixed(3)) + " ms";
}
function fix(v, d) { return num(v) ? v.toFixed(d) : "\u2013"; }
function bytes(b) {
  if (!num(b)) return "\u2013";
  var u = ["B", "KB", "MB", "GB"], i = 0;
  while (Math.abs(b) >= 1024 && i < 3) { b /= 1024; i++; }
  return (i ? b.toFixed(1) : b) + " " + u[i];
}
function ranges(list) {
  var a = list.slice().sort(function (x, y) { return x - y; }), out = [], i = 0;
  while (i < a.length) {
    var j = i;
    while (j + 1 < a.length && a[j + 1] === a[j] + 1) j++;
    out.push(j > i ? a[i] + "-" + a[j] : String(a[i]));
    i = j + 1;
  }
  return out.join(",");
}
function rangesShort(list, max) {  // "24-31", or "8 ranks" when the list does not fit
  var t = ranges(list);
  return t.length <= (max || 14) ? t : list.length + " ranks";
}
function na(what) { return '<span class="na">not available</span>' + (what ? ' <span class="muted">(' + esc(what) + ")</span>" : ""); }
function stepLabel(s) { return s === null || s === undefined ? "outside steps" : "#" + s; }
function stepKey(s) { return s === null || s === undefined ? "outside" : String(s); }
function el(id) { return document.getElementById(id); }
function has(o, k) { return o && Object.prototype.hasOwnProperty.call(o, k); }
// every map keyed by the data (hosts, ranks, steps) has no prototype: a host named
// "__proto__" or "constructor" is a key like any other (it blanked the page)
function dict() { return Object.create(null); }

// colour: sqrt scale from light grey through orange to dark red
var STOPS = [[0, [244, 244, 244]], [0.5, [253, 174, 97]], [1, [165, 0, 38]]];
function mix(t) {
  for (var i = 1; i < STOPS.length; i++) {
    if (t <= STOPS[i][0]) {
      var a = STOPS[i - 1], b = STOPS[i], f = (t - a[0]) / (b[0] - a[0]);
      return "rgb(" + [0, 1, 2].map(function (k) { return Math.round(a[1][k] + f * (b[1][k] - a[1][k])); }).join(",") + ")";
    }
  }
  return "rgb(165,0,38)";
}
var PALETTE = [];
for (var pi = 0; pi <= 255; pi++) PALETTE.push(mix(pi / 255));
function colour(v, max) {
  if (!num(v)) return "#d8d8e8";
  var t = max > 0 ? Math.sqrt(Math.max(0, Math.min(1, v / max))) : 0;
  return PALETTE[Math.round(t * 255)];
}
var setupError = null;  // thrown while the data is read: shown like an error while drawing
try {
var doc = JSON.parse(el("tracefuse-report").textContent);
var C = doc.collectives || {}, P = doc.page || {};
var hostOf = dict();
Object.keys(P.hosts || {}).forEach(function (k) { hostOf[k] = P.hosts[k]; });
Object.keys(C.hosts || {}).forEach(function (k) { hostOf[k] = C.hosts[k]; });
var rankRows = C.ranks || [];
var ranks = rankRows.map(function (r) { return r.rank; }).sort(function (a, b) { return a - b; });
var rankInfo = dict();
rankRows.forEach(function (r) { rankInfo[r.rank] = r; });
var steps = C.by_step || [];
var stepByKey = dict();
steps.forEach(function (s, i) { stepByKey[stepKey(s.step)] = s; });
var stragglers = C.stragglers || [];
var strSet = dict();
stragglers.forEach(function (s) { strSet[s.rank] = true; });
// where every rank's step goes (collectives.step_time; absent from an older tracefuse's
// JSON or left out of a page past its budget): rank -> step key -> entry
// past the page's budget, step_time comes as columns of what the heatmap draws
// (report/page.py COLUMNS): the entries made back, the same figures
var stepTimes = Array.isArray(C.step_time) ? C.step_time :
  C.step_time && Array.isArray(C.step_time.rank) ? (function (t) {
    var out = [];
    for (var i = 0; i < t.rank.length; i++) {
      out.push({rank: t.rank[i], step: t.step[i], step_us: t.step_us[i],
        gpu: t.gpu[i] ? {compute_us: t.compute_us[i], comm_exposed_us: t.comm_exposed_us[i], idle_us: t.idle_us[i]} : null});
    }
    return out;
  })(C.step_time) : null;
var ST = dict(), gpuAny = false;
(stepTimes || []).forEach(function (e) {
  var rk = String(e.rank);
  if (!ST[rk]) ST[rk] = dict();
  ST[rk][stepKey(e.step)] = e;
  if (e.gpu) gpuAny = true;
});
// the heatmap's columns: by_step's steps and any step with step-time figures only (no
// matched collective in it), in by_step's order (numbers up, "outside" last)
var cols = [], colByKey = dict();
function addCol(s, row) {
  var k = stepKey(s);
  if (!colByKey[k]) { colByKey[k] = {step: s === undefined ? null : s, key: k, row: row || null}; cols.push(colByKey[k]); }
}
steps.forEach(function (row) { addCol(row.step, row); });
(stepTimes || []).forEach(function (e) { addCol(e.step, null); });
cols.sort(function (a, b) { return (a.step === null) - (b.step === null) || (a.step === null ? 0 : a.step - b.step); });
var known = dict();
ranks.forEach(function (r) { known[r] = true; });
(stepTimes || []).forEach(function (e) { if (!known[e.rank]) { known[e.rank] = true; ranks.push(e.rank); } });
ranks.sort(function (a, b) { return a - b; });
} catch (e) { setupError = e; }
function inRange(s) { return !P.steps || (s !== null && s >= P.steps[0] && s <= P.steps[1]); }
function host(r) { var h = hostOf[String(r)]; return h === null || h === undefined || h === "" ? "(host unknown)" : String(h); }
var groups = [], gIndex = dict();
try {
  ranks.forEach(function (r) {
    var h = host(r);
    if (!has(gIndex, h)) { gIndex[h] = groups.length; groups.push({host: h, ranks: []}); }
    groups[gIndex[h]].ranks.push(r);
  });
} catch (e) { setupError = setupError || e; }
var rowTops = [];  // [y, rank] of the heatmap's rows, top to bottom (for the totals' hover)
function rankAtY(yy) {
  var lo = 0, hi = rowTops.length - 1, best = null;
  while (lo <= hi) { var mid = (lo + hi) >> 1; if (rowTops[mid][0] <= yy) { best = rowTops[mid][1]; lo = mid + 1; } else hi = mid - 1; }
  return best;
}
// @MAPS@ -- report/page_maps.js goes here (report/page_assets.py): the heatmap and the per-host map

function render() {
  var app = el("app"), h = [];
  h.push("<h1>tracefuse report</h1>");
  var nh = groups.length;
  h.push('<div class="sub">' + ranks.length + " ranks on " + nh + " host" + (nh === 1 ? "" : "s") + ", " + steps.length +
    " step" + (steps.length === 1 ? "" : "s") + ", " + (C.instances ? C.instances.length + " matched collective instances" : "") +
    (P.cycle !== null && P.cycle !== undefined && (P.cycles || []).length > 1 ? ", cycle " + esc(P.cycle) + " of " + P.cycles.length : "") +
    (P.steps ? ", ProfilerSteps " + esc(P.steps[0] + ":" + P.steps[1]) + " only" : "") + "</div>");
  h.push('<div class="sub">made by <code>' + esc(P.command || "tracefuse report") + "</code>" + (P.tool ? " (" + esc(P.tool) + ")" : "") + "</div>");
  (P.broken || []).forEach(function (b) { h.push('<div class="warn">BROKEN ' + esc(b.path) + ": " + esc(b.broken) + "</div>"); });
  (P.warnings || []).forEach(function (w) { h.push('<div class="warn">warning: ' + esc(w) + "</div>"); });
  if (C.step_cap) h.push('<div class="warn" id="step-cap">' + esc(C.step_cap.text) + "</div>");  // never a silent cut
  if (P.trimmed && P.trimmed.length) {
    h.push('<div class="sub warn">left out of this page to keep it small (<code>info --collectives --json</code> has them): ' +
      esc(P.trimmed.join("; ")) + "</div>");
  }
  h.push(verdictHtml());
  if (doc.diff) h.push('<h2 id="h-diff">Against the base run</h2><div id="diff"></div>');
  h.push('<h2 id="h-heat">Ranks \u00d7 steps</h2>' + metricControls() + '<div id="heat-legend"></div><div id="heat"></div>');
  h.push('<h2 id="h-hosts">Per host</h2><div class="sub" id="host-how"></div>' +
    '<div id="host-legend"></div><div id="hosts"></div><div id="host-table"></div>');
  h.push('<h2 id="h-root">Root cause across ranks</h2><div class="lazy" id="rootcause"></div>');
  h.push('<h2 id="h-why">Why the straggler is late</h2><div class="lazy" id="why"></div>');
  h.push('<h2 id="h-coll">Per collective</h2><div class="lazy" id="per-collective"></div>');
  h.push('<h2 id="h-unmatched">Unmatched instances</h2><div class="lazy" id="unmatched"></div>');
  h.push('<h2 id="h-defs">Definitions and notes</h2><div class="lazy" id="defs"></div>');
  app.innerHTML = h.join("");
  if (doc.diff) drawDiff(doc.diff);
  drawMaps();
  drawRootCause();
  drawWhy();
  drawPerCollective();
  drawUnmatched();
  drawDefs();
  Array.prototype.forEach.call(document.querySelectorAll('input[name="metric"]'), function (inp) {
    inp.addEventListener("change", function () {
      metric = inp.value;
      try { history.replaceState(null, "", metric === "held" ? "#" : "#" + metric); } catch (e) { /* file:// may refuse */ }
      drawMaps();
    });
  });
  tooltips();
  var probe = /^#probe=(\d+):(\w+)$/.exec(location.hash);
  if (probe) el("app").insertAdjacentHTML("beforeend", '<pre id="probe">' + esc(cellText(probe[1], probe[2])) + "</pre>");
}

function verdictHtml() {
  var V = C.verdict, text, ev, cls = "";
  // a second straggler the first hides (analyze/rootcause.py off_path): said with the verdict, as the text's "also" line does
  var off = stragglers.filter(function (s) { return s.on_critical_path === false; }).map(function (s) { return s.rank; });
  if (V && V.text) {
    text = esc(V.text) + (off.length ? " Off the critical path: rank" + (off.length > 1 ? "s " : " ") + esc(ranges(off)) + " (another straggler sets the step)." : "");
    ev = "evidence: <b>" + esc(V.evidence || "not stated") + "</b>" +
      (num(V.p_chance) ? " (chance of this pattern with nobody slow: p = " + esc(V.p_chance_text || String(V.p_chance)) + ")" : "") +
      (V.one_step ? (P.steps ? " \u00b7 one step selected" : " \u00b7 one step profiled") : "");
    if (!stragglers.length) cls = "none";
  } else {
    if (!(C.instances || []).length && !steps.length) {
      text = "No collective instance was matched across ranks: there is nothing to judge.";
      cls = "none";
    } else if (stragglers.length) {
      var sr = stragglers.map(function (x) { return x.rank; }), first = stragglers[0];
      var stepsOf = dict();
      stragglers.forEach(function (x) { (x.steps || []).forEach(function (st) { stepsOf[stepKey(st)] = st; }); });
      var ss = Object.keys(stepsOf).map(function (k) { return stepsOf[k]; });
      var where = steps.length === 1 ? (P.steps ? "in the one step selected" : "in the one step profiled") : steps.length > 1 && ss.length === steps.length ? "in every step" :
        "in step" + (ss.length === 1 ? " " : "s ") + ss.map(stepLabel).join(", ");
      var hs = [];
      groups.forEach(function (g) {
        var mine = g.ranks.filter(function (r) { return strSet[r]; });
        if (mine.length) hs.push((mine.length === g.ranks.length && g.ranks.length > 1 ? "all of host " : "host ") + esc(g.host));
      });
      var held = stragglers.map(function (x) { return x.held_us; }).filter(num);
      text = (sr.length > 1 ? "Stragglers: ranks " + ranges(sr) : "Straggler: rank " + sr[0]) + " (" + hs.join(", ") + ") " + where +
        ": the others waited " + (sr.length > 1 ? esc(ms(Math.min.apply(null, held))) + " to " + esc(ms(Math.max.apply(null, held))) + " for each" : esc(ms(first.held_us)) + " for it") +
        (sr.length > 1 ? " (rank " + first.rank + " most, " : ", ") + (where === "in every step" || steps.length === 1 ? "" : "over every step ") +
        "last to arrive in " + first.last_arrivals + " of " + first.instances + " instances" + (sr.length > 1 ? ")." : ".");
    } else {
      text = "No rank stands out: nobody is named.";
      cls = "none";
    }
    ev = "evidence: " + na("this tracefuse's JSON has no collectives.verdict");
  }
  if (P.not_assessed) {  // could not assess: said first, never in the all-clear colour
    var same = !(C.instances || []).length && V && V.text === "no collective instance matched across ranks";  // said once
    text = "<b>" + esc(P.not_assessed.charAt(0).toUpperCase() + P.not_assessed.slice(1)) + ".</b>" + (same ? "" : " " + text);
    cls = "unassessed";
  }
  var cmd = P.merge_command || C.merge_command;
  return '<div id="verdict" class="' + cls + '">' + text + '</div><div id="evidence" class="sub">' + ev + "</div>" +
    '<h3>The worst step in Perfetto</h3>' + (cmd ? '<pre id="merge-cmd">' + esc(cmd) + "</pre>" :
    '<div id="merge-cmd" class="muted">no merge command: no step to show</div>');
}

// tracefuse diff (report NEW --against BASE; the diff --json object, docs/diff.md): the
// ranked changes as bars (red: slower, green: faster) and a ranks x steps heatmap of the
// step-time change (new minus base, per matched step pair; diverging, same scale both ways)
function signed(us) { return (us > 0 ? "+" : us < 0 ? "\u2212" : "") + ms(Math.abs(us)); }
function diverging(v, max) {
  if (!num(v)) return "#d8d8e8";
  var t = max > 0 ? Math.sqrt(Math.min(1, Math.abs(v) / max)) : 0, a = [244, 244, 244];
  var b = v > 0 ? [165, 0, 38] : [26, 120, 60];
  return "rgb(" + [0, 1, 2].map(function (k) { return Math.round(a[k] + t * (b[k] - a[k])); }).join(",") + ")";
}
function drawDiff(D) {
  var st = D.step_time || {}, h = [], ch = D.changes || [], every = (D.ranks || []).length;
  h.push('<div id="diff-summary" class="' + (D.significant ? "" : "none") + '"><b>' + esc(D.summary || "") + "</b>: step time " +
    esc(ms(st.base_us)) + " \u2192 " + esc(ms(st.new_us)) + " per step (" + esc(signed(st.delta_us)) + ", p " + esc(st.p_value_text || String(st.p_value)) + ")" +
    (num(st.explained_us) && st.delta_us ? "; the changes below explain " + Math.round(100 * st.explained_us / st.delta_us) + "%" : "") + "</div>");
  h.push('<div class="sub">base: ' + esc((D.base && D.base.inputs || []).join(" ")) + " \u00b7 ranks " + esc(ranges(D.ranks || [])) +
    " \u00b7 steps " + esc((D.steps && D.steps.pairs || []).map(function (p) { return p[0] === p[1] ? String(p[0]) : p[0] + "\u2192" + p[1]; }).join(", ")) + "</div>");
  var S = D.stragglers || {};
  h.push('<div class="sub">stragglers: BASE ' + esc((S.base || {}).verdict || "") + " \u00b7 NEW " + esc((S.new || {}).verdict || "") +
    ((S.came || []).length ? ' \u00b7 <b class="warn">new straggler: rank ' + esc(ranges(S.came)) + "</b>" : "") + "</div>");
  var shown = ch.slice(0, 25), max = 0;
  shown.forEach(function (c) { max = Math.max(max, Math.abs(c.delta_us)); });
  if (shown.length) {
    var W = 760, LW = 330, row = 18, H = shown.length * row + 4, bars = [];
    shown.forEach(function (c, i) {
      var w = max > 0 ? Math.max(1, (W - LW - 90) * Math.abs(c.delta_us) / max) : 1, y = i * row + 2;
      var where = c.ranks === "all" ? "all " + every + " ranks" : "rank" + (c.ranks.length > 1 ? "s " : " ") + ranges(c.ranks);
      var tip = c.name + " (" + c.kind + ", " + c["class"] + (c.how ? ", " + c.how : "") + (c.waiting ? ", waiting for other ranks" : "") +
        ")\n" + where + ": " + signed(c.delta_us) + " per step (" + ms(c.base_us) + " \u2192 " + ms(c.new_us) + "), p " + (c.p_value_text || String(c.p_value));
      bars.push('<g class="diff-bar" data-kind="' + esc(c.kind) + '" data-class="' + esc(c["class"]) + '"><title>' + esc(tip) + "</title>" +
        '<text x="0" y="' + (y + 12) + '">' + esc((c.name.length > 44 ? c.name.slice(0, 43) + "\u2026" : c.name) + " \u00b7 " + where) + "</text>" +
        '<rect x="' + LW + '" y="' + y + '" width="' + w.toFixed(1) + '" height="' + (row - 4) + '" fill="' + (c.delta_us > 0 ? "#b2182b" : "#1a7840") +
        '" fill-opacity="' + (c.waiting ? "0.4" : "1") + '"/><text x="' + (LW + w + 4).toFixed(1) + '" y="' + (y + 12) + '">' + esc(signed(c.delta_us)) + "</text></g>");
    });
    h.push('<h3>What changed, most time first</h3><div class="sub">per step, on the ranks named; pale: time waiting for other ranks' +
      (ch.length > shown.length ? "; the first " + shown.length + " of " + ch.length : "") + '</div><svg id="diff-bars" width="' + W + '" height="' + H + '">' + bars.join("") + "</svg>");
  }
  var heat = st.delta_by_step_us || {}, pairs = D.steps && D.steps.pairs || [], hr = Object.keys(heat).sort(function (a, b) { return a - b; });
  var hmax = 0;
  hr.forEach(function (r) { heat[r].forEach(function (v) { if (num(v)) hmax = Math.max(hmax, Math.abs(v)); }); });
  if (hr.length && pairs.length) {
    var cw = Math.max(14, Math.min(60, Math.floor(700 / pairs.length))), chh = hr.length > 64 ? 4 : 16, X0 = 60, Y0 = 16, cellsOut = [];
    pairs.forEach(function (p, j) { cellsOut.push('<text x="' + (X0 + j * cw + 2) + '" y="12">' + esc(p[0] === p[1] ? "#" + p[0] : p[0] + "\u2192" + p[1]) + "</text>"); });
    hr.forEach(function (r, i) {
      if (chh >= 10) cellsOut.push('<text x="0" y="' + (Y0 + i * chh + 12) + '">rank ' + esc(r) + "</text>");
      heat[r].forEach(function (v, j) {
        cellsOut.push('<rect data-rank="' + esc(r) + '" data-pair="' + j + '" x="' + (X0 + j * cw) + '" y="' + (Y0 + i * chh) + '" width="' + (cw - 1) + '" height="' + (chh - 1) +
          '" fill="' + diverging(v, hmax) + '"><title>rank ' + esc(r) + ", step " + esc(pairs[j][0]) + " \u2192 " + esc(pairs[j][1]) + ": " + esc(signed(v)) + "</title></rect>");
      });
    });
    h.push('<h3>Step-time change, ranks \u00d7 steps</h3><div class="sub">new minus base step time (red: slower, green: faster; up to ' + esc(signed(hmax)) +
      ')</div><svg id="diff-heat" width="' + (X0 + pairs.length * cw + 10) + '" height="' + (Y0 + hr.length * chh + 4) + '">' + cellsOut.join("") + "</svg>");
  }
  el("diff").innerHTML = h.join("");
}

var KIND = {op: "op", outside_ops: "outside ops", kernel: "kernel", gpu_idle: "GPU idle", entered_late: "entered the step late"};
function drawRootCause() {  // analyze/graph.py: what fixing saves, who is only delayed, the critical path
  var box = el("rootcause");
  if (!has(C, "critical_path")) { box.innerHTML = na("this tracefuse's JSON has no collectives.critical_path"); return; }
  var h = [];
  function whatIf(list, who) {  // one line per rank (or set of ranks): every step's saving
    var order = [], by = {};
    list.filter(function (w) { return inRange(w.step); }).forEach(function (w) {
      var k = who(w);
      if (!has(by, k)) { by[k] = []; order.push(k); }
      by[k].push(w);
    });
    order.forEach(function (k) {
      var ws = by[k], best = ws[0];
      if (ws.some(function (w) { return w.estimated === false; })) {  // the graph cannot follow the others' waits (send/recv without a peer)
        h.push('<div class="what-if">fixing ' + esc(k) + ' would save: not estimated <span class="muted">(the others waited for it in send/recv not linked to a peer)</span></div>');
        return;
      }
      ws.forEach(function (w) { if (w.saves_us > best.saves_us) best = w; });
      // as the text (report/rootcause.py): ~0 because another straggler still holds up the step
      var others = num(best.rank) ? (C.stragglers || []).map(function (s) { return s.rank; }).filter(function (r) { return r !== best.rank; }) : [];
      var alone = others.length && num(best.step_us) && best.saves_us * 20 < best.step_us ? ' <span class="muted">alone: rank(s) ' + esc(ranges(others)) + " would still hold up the step</span>" : "";
      h.push('<div class="what-if">fixing ' + esc(k) + " would save ~" + esc(ms(best.saves_us)) + (num(best.step_us) ? " of the " + esc(ms(best.step_us)) + " step" : "") +
        " in step " + esc(stepLabel(best.step)) + (ws.length > 1 ? ' <span class="muted">(' + ws.map(function (w) { return esc(stepLabel(w.step)) + " " + esc(ms(w.saves_us)); }).join(", ") + ")</span>" : "") + alone + "</div>");
    });
  }
  whatIf(C.what_if || [], function (w) { return "rank " + w.rank; });
  whatIf(C.what_if_together || [], function (w) { return "ranks " + ranges(w.ranks) + " together"; });
  (C.delayed || []).filter(function (d) { return inRange(d.step); }).forEach(function (d) {
    h.push('<div class="delayed">rank ' + esc(d.rank) + " is delayed, not a straggler: in step " + esc(stepLabel(d.step)) + " it waited " +
      esc(ms(d.wait_us)) + " for rank " + esc(d.by_rank) + (d.waits > 1 ? " in " + esc(d.waits) + " waits, the longest" : "") + " at " + esc(d.collective) + " (group " + esc(d.group) + ": ranks " + esc(ranges(d.group_ranks || [])) +
      "), then arrived late at " + esc(d.late_at) + (d.origin !== d.by_rank ? "; the cascade starts at rank " + esc(d.origin) : "") + "</div>");
  });
  (C.step_skew || []).filter(function (k) { return inRange(k.step) && num(k.counted_us) && k.counted_us > 0; }).forEach(function (k) {
    h.push('<div class="delayed">rank ' + esc(k.rank) + " entered step " + esc(stepLabel(k.step)) + " " + esc(ms(k.counted_us)) + " after the others</div>");
  });
  var paths = (C.critical_path || []).filter(function (c) { return inRange(c.step) && (c.segments || []).length; });
  var worst = null;
  paths.forEach(function (c) { if (!worst || c.step_us > worst.step_us) worst = c; });
  if (worst) {
    h.push("<h3>Critical path of step " + esc(stepLabel(worst.step)) + " (" + esc(ms(worst.step_us)) + ")</h3>" +
      '<table class="path"><tr><th>rank</th><th>what</th><th>leads to</th><th>from</th><th>lasts</th></tr>' +
      worst.segments.slice(0, 40).map(function (g) {
        return "<tr><td>" + esc(g.rank) + "</td><td>" + esc(g.kind === "own" ? "own work" : (KIND[g.kind] || g.kind)) + "</td><td>" + esc(g.name) +
          "</td><td>" + esc(ms(g.start_us)) + "</td><td>" + esc(ms(g.dur_us)) + "</td></tr>";
      }).join("") + "</table>" + (worst.segments.length > 40 ? '<div class="muted">' + (worst.segments.length - 40) + " more segment(s) in the JSON</div>" : ""));
  }
  box.innerHTML = h.length ? h.join("") : '<div class="muted">no straggler, no delayed rank, no critical path</div>';
}
function drawWhy() {
  var box = el("why");
  if (!has(C, "why")) { box.innerHTML = na("this tracefuse's JSON has no collectives.why"); return; }
  var list = (C.why || []).filter(function (w) { return inRange(w.step); });
  if (!list.length) { box.innerHTML = '<div class="muted">no rank stands out: nothing to explain</div>'; return; }
  var order = [], byRank = dict();
  list.forEach(function (w) {
    if (!has(byRank, w.rank)) { byRank[w.rank] = []; order.push(w.rank); }
    byRank[w.rank].push(w);
  });
  box.innerHTML = order.map(function (r) {  // a rank's first two steps open, the others one click away
    var cards = byRank[r].map(whyCard);
    return cards.slice(0, 2).join("") + (cards.length > 2 ? "<details><summary>rank " + esc(r) + ": " + (cards.length - 2) +
      " more step(s)</summary>" + cards.slice(2).join("") + "</details>" : "");
  }).join("");
}
function whyCard(w) {
  var cs = (w.contributors || []).slice(), top = cs.slice(0, 12), rest = cs.slice(12);
  // the share is of what the why explains (analyze/why.py ``explains``): its own extra time when that reached the others before the collective
  var own = w.explains === "own_lateness" && num(w.own_lateness_us), target = own ? w.own_lateness_us : w.lateness_us;
  var share = num(w.share) ? " (" + Math.round(100 * w.share) + "%)" : num(target) && target > 0 && num(w.explained_us) ? " (" + Math.round(100 * w.explained_us / target) + "%)" : "";
  var late = own ? "own extra time " + esc(ms(w.own_lateness_us)) + " (reached the others before, in send/recv or other groups; late by " + esc(ms(w.lateness_us)) + " at the collective)" : "late by " + esc(ms(w.lateness_us));
  var head = "<h3>rank " + esc(w.rank) + " (host " + esc(host(w.rank)) + "), step " + esc(stepLabel(w.step)) + ": " + late +
    ", explained " + esc(ms(w.explained_us)) + share + "</h3>" +
    '<div class="sub">against the median of the other ranks' + (w.reference_rank !== undefined && w.reference_rank !== null ? " (reference rank " + esc(w.reference_rank) + ")" : "") +
    (w.collective ? ", up to its arrival at " + esc(w.collective) : "") + "</div>";
  if (num(w.unexplained_us) && num(w.share) && (w.share < 0.8 || w.share > 1.2)) {
    // as the text (report/why_text.py): less elsewhere because the reference also waited for other ranks
    var waited = w.unexplained_us < 0 && !own && num(w.own_lateness_us) && w.own_lateness_us - w.lateness_us >= Math.max(50, -0.5 * w.unexplained_us);
    head += '<div class="sub">' + esc(ms(Math.abs(w.unexplained_us))) + (w.unexplained_us < 0 ? " less elsewhere" : " unexplained") +
      (waited ? ": reference rank " + esc(w.reference_rank) + " also waited for other ranks before that; own extra time " + esc(ms(w.own_lateness_us)) : "") + "</div>";
  }
  if ((w.cpu_side || []).length) {
    head += '<div class="sub">CPU side: ' + w.cpu_side.slice(0, 3).map(function (c) { return esc((KIND[c.kind] || c.kind) + " " + c.name) + " +" + esc(ms(c.extra_us)); }).join("; ") + "</div>";
  }
  if (!top.length) return '<div class="card why-card">' + head + '<div class="muted">no contributor</div></div>';
  var max = 0;
  top.forEach(function (c) { [c.rank_us, c.others_us, Math.abs(c.extra_us || 0)].forEach(function (v) { if (num(v)) max = Math.max(max, v); }); });
  var labW = 330, barW = 380, rh = 24, s = [];
  top.forEach(function (c, i) {
    var y = 4 + i * rh, name = (KIND[c.kind] || c.kind || "?") + ": " + (c.name || "") + (c.where ? " in " + c.where : "");
    var short = name.length > 52 ? name.slice(0, 51) + "\u2026" : name;
    s.push('<g class="contrib"><title>' + esc(name) + "</title>");
    s.push('<text x="' + (labW - 6) + '" y="' + (y + 13) + '" text-anchor="end">' + esc(short) + "</text>");
    var both = num(c.rank_us) && num(c.others_us);
    if (both) {
      s.push('<rect x="' + labW + '" y="' + y + '" width="' + (max > 0 ? c.rank_us / max * barW : 0).toFixed(1) + '" height="9" fill="#a50026"/>');
      s.push('<rect x="' + labW + '" y="' + (y + 10) + '" width="' + (max > 0 ? c.others_us / max * barW : 0).toFixed(1) + '" height="9" fill="#9aa5b8"/>');
    } else {
      s.push('<rect x="' + labW + '" y="' + (y + 4) + '" width="' + (max > 0 ? Math.abs(c.extra_us || 0) / max * barW : 0).toFixed(1) + '" height="11" fill="' + ((c.extra_us || 0) >= 0 ? "#a50026" : "#2f8f46") + '"/>');
    }
    var counts = num(c.count) || num(c.others_count) ? " \u00b7 " + (num(c.count) ? c.count : "\u2013") + " vs " + (num(c.others_count) ? c.others_count : "\u2013") + " calls" : "";
    s.push('<text x="' + (labW + barW + 8) + '" y="' + (y + 13) + '">' + ((c.extra_us || 0) >= 0 ? "+" : "") + esc(ms(c.extra_us)) + esc(counts) + "</text></g>");
  });
  var H = 10 + top.length * rh + 16, W = labW + barW + 230;
  s.push('<rect x="' + labW + '" y="' + (H - 12) + '" width="10" height="8" fill="#a50026"/><text x="' + (labW + 14) + '" y="' + (H - 4) + '">rank ' + esc(w.rank) + "</text>");
  s.push('<rect x="' + (labW + 90) + '" y="' + (H - 12) + '" width="10" height="8" fill="#9aa5b8"/><text x="' + (labW + 104) + '" y="' + (H - 4) + '">median of the others</text>');
  s.push('<text x="' + (labW + barW) + '" y="' + (H - 4) + '" text-anchor="end">' + esc(ms(max)) + "</text>");
  var more = rest.length ? '<div class="sub">' + rest.length + " more contributor(s), " + esc(ms(rest.reduce(function (a, c) { return a + (c.extra_us || 0); }, 0))) + " together</div>" : "";
  return '<div class="card why-card" data-rank="' + esc(w.rank) + '" data-why-step="' + stepKey(w.step) + '">' + head +
    '<svg width="' + W + '" height="' + H + '">' + s.join("") + "</svg>" + more + "</div>";
}

function drawPerCollective() {
  var box = el("per-collective");
  if (!has(C, "per_collective")) { box.innerHTML = na("this tracefuse's JSON has no collectives.per_collective"); return; }
  var list = C.per_collective || [];
  if (!list.length) { box.innerHTML = '<div class="muted">no collective</div>'; return; }
  var h = ['<table><tr><th class="l">collective</th><th>group size</th><th class="l">dtype</th><th>elements</th><th>size</th><th>count</th>' +
    "<th>shortest</th><th>start skew</th><th>end skew</th><th>algbw GB/s</th><th>busbw GB/s</th><th class=\"l\">first to arrive</th></tr>"];
  list.forEach(function (p) {
    var fa = p.first_arrivals || {}, top = Object.keys(fa).sort(function (a, b) { return fa[b] - fa[a] || a - b; }).slice(0, 3);
    h.push('<tr><td class="l">' + esc(p.name) + "</td><td>" + esc(p.group_size === undefined || p.group_size === null ? "\u2013" : p.group_size) + '</td><td class="l">' + esc(p.dtype || "\u2013") +
      "</td><td>" + esc(num(p.nelems) ? p.nelems : "\u2013") + "</td><td>" + esc(bytes(p.bytes)) + "</td><td>" + esc(num(p.count) ? p.count : "\u2013") + "</td><td>" + esc(ms(p.min_duration_us)) +
      "</td><td>" + esc(ms(p.start_skew_us)) + "</td><td>" + esc(ms(p.end_skew_us)) + "</td><td>" + esc(fix(p.algbw_gbps, 2)) + "</td><td>" + esc(fix(p.busbw_gbps, 2)) +
      '</td><td class="l">' + esc(top.map(function (r) { return "rank " + r + " \u00d7" + fa[r]; }).join(", ")) + "</td></tr>");
  });
  box.innerHTML = h.join("") + "</table>";
}

function drawUnmatched() {
  var box = el("unmatched"), U = C.unmatched;
  if (!U) { box.innerHTML = na("no collectives.unmatched"); return; }
  var list = U.by_reason || [];
  var h = ['<div class="sub">' + esc(num(U.total) ? U.total : list.length) + " instance(s) could not be matched across ranks and count in no wait</div>"];
  if (list.length) {
    h.push('<table id="unmatched-table"><tr><th class="l">kind</th><th class="l">name</th><th class="l">group</th><th>instances</th><th class="l">reason</th></tr>');
    list.forEach(function (u) {
      h.push('<tr><td class="l">' + esc(u.kind) + '</td><td class="l">' + esc(u.name) + '</td><td class="l">' + esc(u.group === null || u.group === undefined ? "?" : u.group) +
        "</td><td>" + esc(u.instances) + '</td><td class="l">' + esc(u.reason) + "</td></tr>");
    });
    h.push("</table>");
  }
  box.innerHTML = h.join("");
}

function drawDefs() {
  var h = [];
  h.push("<h3>Definitions</h3>" + (C.definitions ? "<div>" + esc(C.definitions) + "</div>" : na("this tracefuse's JSON has no collectives.definitions")));
  var T = C.threshold;
  h.push("<h3>Threshold</h3>" + (T && T.rule ? "<div>" + esc(T.rule) + "</div>" : na()));
  if ((C.notes || []).length) h.push("<h3>Notes</h3><ul>" + C.notes.map(function (n) { return "<li>" + esc(n) + "</li>"; }).join("") + "</ul>");
  h.push('<h3>Inputs</h3><div class="sub">' + esc((P.inputs || []).join(" ")) + (P.files ? " (" + P.files + " files)" : "") + "</div>");
  h.push('<div class="sub">The data of this page is the <code>info --collectives --json</code> object, embedded in the ' +
    '<code>&lt;script type="application/json" id="tracefuse-report"&gt;</code> element; each heatmap cell is a <code>rect</code> with <code>data-rank</code> and <code>data-step</code>.</div>');
  el("defs").innerHTML = h.join("");
}

/** The hover text of the heatmap cell of rank ``r`` in step ``sk`` (a data-step value). */
function cellText(r, sk) {
  var row = stepByKey[sk] || {}, rk = String(r), col = colByKey[sk];
  var lines = ["rank " + r + " \u00b7 host " + host(+r), "step " + stepLabel(col ? col.step : row.step),
    "the others waited for it: " + ms((row.held_us || {})[rk]), "its own wait: " + ms((row.wait_us || {})[rk])];
  if (row.threshold_us && has(row.threshold_us, rk)) lines.push("threshold: " + ms(row.threshold_us[rk]));
  if (row.last_rank === +r) lines.push("last to arrive in this step");
  if ((row.stragglers || []).indexOf(+r) >= 0) lines.push("straggler of this step");
  return lines.concat(stepTimeLines(ST[rk] && ST[rk][sk])).join("\n");
}
window.tracefuseCellText = cellText;  // for a user's script (and the page's tests: report.html#probe=RANK:STEP)
window.tracefuseHostText = hostText;

function tooltips() {
  var tip = el("tip");
  function show(e, text) {
    tip.textContent = text;
    tip.style.display = "block";
    var x = e.clientX + 14, y = e.clientY + 14;
    if (x + tip.offsetWidth > window.innerWidth - 4) x = e.clientX - tip.offsetWidth - 10;
    if (y + tip.offsetHeight > window.innerHeight - 4) y = e.clientY - tip.offsetHeight - 10;
    tip.style.left = x + "px";
    tip.style.top = y + "px";
  }
  document.addEventListener("mousemove", function (e) {
    var t = e.target;
    if (!t || !t.getAttribute) { tip.style.display = "none"; return; }
    var r = t.getAttribute("data-rank"), sk = t.getAttribute("data-step"), hh = t.getAttribute("data-host"), tr = null;
    if (t.id === "totals-hit") {
      var box = t.ownerSVGElement.getBoundingClientRect(), rr = rankAtY(e.clientY - box.top);
      tr = rr === null ? null : String(rr);
    }
    if (r !== null && sk !== null && t.tagName.toLowerCase() === "rect") {
      show(e, cellText(r, sk));
    } else if (hh !== null && sk !== null) {
      show(e, hostText(hh, sk));
    } else if (tr !== null) {
      var i = rankInfo[tr] || {};
      show(e, "rank " + tr + " \u00b7 host " + host(+tr) + "\nall steps: the others waited " + ms(i.held_us) + " for it\nits own wait " + ms(i.wait_us) +
        "\nlast to arrive in " + (i.last_arrivals === undefined ? "?" : i.last_arrivals) + " of " + (i.instances === undefined ? "?" : i.instances) + " instances");
    } else {
      tip.style.display = "none";
    }
  });
}

if (window.requestAnimationFrame) {  // the first frame after drawing: layout and paint included
  requestAnimationFrame(function () {
    setTimeout(function () { document.body.setAttribute("data-painted-ms", performance.now().toFixed(1)); }, 0);
  });
}
try {
  if (setupError) throw setupError;
  render();
} catch (e) {
  errs.push(String((e && e.stack) || e));
  var app = document.getElementById("app");
  if (app) app.insertAdjacentHTML("afterbegin", '<pre class="warn">the page could not draw itself: ' + esc(String(e)) + "</pre>");
}
done();
})();
