// The zonesync console: reads /zonesync/api/v1 with the Airflow session's cookie and draws
// the zones, the ZSID map, the lag chart, the runs, locked rows and alerts, every 5 s.
"use strict";
const API = "/zonesync/api/v1";
const SVG = "http://www.w3.org/2000/svg";
const PALETTE = ["#3182ce", "#38a169", "#805ad5", "#319795", "#d53f8c", "#2c5282", "#718096", "#276749"]; // no red or amber: BLOCK, RESHARDING
const colours = {};
let runsShown = 25; // "older runs" shows 25 more (up to the API's 500 a page)

function colour(key) {
  if (!(key in colours)) colours[key] = PALETTE[Object.keys(colours).length % PALETTE.length];
  return colours[key];
}

async function get(path) {
  const resp = await fetch(API + path, { credentials: "same-origin" });
  if (!resp.ok) throw new Error(`${path}: ${resp.status} ${(await resp.json().catch(() => ({}))).detail || ""}`);
  return resp.json();
}

function el(tag, attrs = {}, ...children) {
  const node = tag.startsWith("svg:") ? document.createElementNS(SVG, tag.slice(4)) : document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) if (v !== null && v !== undefined) node.setAttribute(k, v);
  for (const c of children) node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return node;
}

function seconds(s) {
  if (s === null || s === undefined) return "";
  if (s < 1) return `${Math.round(s * 1000)} ms`;
  if (s < 120) return `${s.toFixed(1)} s`;
  return `${Math.round(s / 60)} min`;
}

function drawZones(zones) {
  for (const z of zones) colour(`zone ${z.zone}`); // each zone's colour by its id order, the same on every page
  const box = document.getElementById("zones");
  box.replaceChildren(...zones.map((z) => {
    const rep = z.replicator;
    return el("div", { class: "card", "data-zone": z.zone, "data-health": z.health },
      el("h3", {}, `zone ${z.zone} `, el("span", { class: `badge ${z.health}` }, z.health)),
      el("div", {}, `guards ${z.guards.healthy}/${z.guards.total} healthy, versions ${z.guards.versions.join(", ") || "-"}`),
      el("div", {}, `replicator ${rep.holder || "none"}${rep.behind_seconds !== undefined ? `, capture ${seconds(rep.behind_seconds)} behind` : ""}`),
      el("div", {}, `${z.open_alerts} open alerts`),
      el("ul", {}, ...z.problems.map((p) => el("li", {}, p))));
  }));
}

function drawMap(map) {
  const svg = document.getElementById("zone-map");
  const width = svg.clientWidth || 900;
  document.getElementById("rules-version").textContent =
    map.version === null ? "(no rules published)" : `(rules version ${map.version}, meta head ${map.head})`;
  svg.replaceChildren();
  if (map.version === null) return;
  const span = map.zsid_max - map.zsid_min + 1;
  const x = (zsid) => ((zsid - map.zsid_min) / span) * width;
  for (const r of map.ranges) {
    const fill = r.status === "ACTIVE" ? colour(`zone ${r.zone}`) : r.status === "BLOCK" ? "#c53030" : "#d69e2e";
    const rect = el("svg:rect", { x: x(r.lo), y: 8, width: Math.max(1, x(r.hi + 1) - x(r.lo)), height: 34, fill,
      "data-range": `${r.lo}-${r.hi}`, "data-zone": r.zone, "data-status": r.status });
    rect.append(el("svg:title", {}, `ZSIDs ${r.lo}-${r.hi}: zone ${r.zone}, ${r.status}`));
    svg.append(rect);
    if (x(r.hi + 1) - x(r.lo) > 60) {
      svg.append(el("svg:text", { x: x(r.lo) + 4, y: 30, fill: "#fff", "font-size": 12 },
        `${r.zone} ${r.lo}-${r.hi}${r.status === "ACTIVE" ? "" : " " + r.status}`));
    }
  }
  for (const m of map.moving) {
    svg.append(el("svg:rect", { x: x(m.lo), y: 4, width: Math.max(2, x(m.hi + 1) - x(m.lo)), height: 42, fill: "none",
      stroke: "#1a202c", "stroke-width": 3, "stroke-dasharray": "6 3", "data-moving": `${m.lo}-${m.hi}`,
      "data-run": m.run_id }));
    svg.append(el("svg:text", { x: x(m.lo), y: 62, "font-size": 12 }, `moving ${m.lo}-${m.hi}: ${m.from} → ${m.to}`));
  }
  const zones = [...new Set(map.ranges.map((r) => r.zone))].sort();
  drawZoneRows(map, zones, x, width);
  document.getElementById("map-legend").replaceChildren(...zones.map((z) =>
    el("span", {}, el("span", { class: "swatch", style: `background:${colour(`zone ${z}`)}` }), `zone ${z}`)),
    el("span", {}, el("span", { class: "swatch", style: "background:#c53030" }), "BLOCK"),
    el("span", {}, el("span", { class: "swatch", style: "background:#d69e2e" }), "RESHARDING"));
}

function drawZoneRows(map, zones, x, width) {
  // a row per zone: the ranges it owns, in its colour (BLOCK / RESHARDING as on the bar)
  const rows = document.getElementById("zone-rows");
  rows.setAttribute("height", String(zones.length * 18 + 4));
  rows.replaceChildren(...zones.flatMap((zone, i) => [
    el("svg:text", { x: 0, y: i * 18 + 14, "font-size": 11 }, `zone ${zone}`),
    ...map.ranges.filter((r) => r.zone === zone).map((r) => el("svg:rect", {
      x: 48 + (x(r.lo) * (width - 48)) / width, y: i * 18 + 4, height: 12, "data-zone-row": zone,
      width: Math.max(1, ((x(r.hi + 1) - x(r.lo)) * (width - 48)) / width),
      fill: r.status === "ACTIVE" ? colour(`zone ${zone}`) : r.status === "BLOCK" ? "#c53030" : "#d69e2e" })),
  ]));
}

function drawEvents(history, t0, t1, width) {
  // events behind per pair over the same hour (no target: the seconds chart has it)
  const svg = document.getElementById("events-chart");
  const height = 110, left = 48, bottom = 16;
  const top = Math.max(10, ...history.pairs.flatMap((p) => p.points.map((pt) => pt[1])));
  const x = (t) => left + ((t - t0) / Math.max(1, t1 - t0)) * (width - left - 8);
  const y = (n) => height - bottom - (n / top) * (height - bottom - 10);
  svg.replaceChildren(
    el("svg:line", { x1: left, y1: y(0), x2: width, y2: y(0), stroke: "#a0aec0" }),
    el("svg:text", { x: 2, y: y(top) + 4, "font-size": 11 }, `${top} ev`),
    el("svg:text", { x: 2, y: y(0), "font-size": 11 }, "0"));
  for (const p of history.pairs) {
    if (!p.points.length) continue;
    const key = `${p.source} → ${p.target}`;
    svg.append(el("svg:polyline", { fill: "none", stroke: colour(key), "stroke-width": 1.5, "data-events-pair": key,
      points: p.points.map((pt) => `${x(pt[0])},${y(pt[1])}`).join(" ") }));
  }
}

function drawLag(history, now) {
  const svg = document.getElementById("lag-chart");
  const width = svg.clientWidth || 900, height = 180, left = 48, bottom = 20;
  const t0 = history.from, t1 = Math.floor(Date.now() / 1000);
  const top = Math.max(0.1, ...history.pairs.flatMap((p) => p.points.map((pt) => pt[2])));
  const x = (t) => left + ((t - t0) / Math.max(1, t1 - t0)) * (width - left - 8);
  const y = (s) => height - bottom - (s / top) * (height - bottom - 10);
  svg.replaceChildren(
    el("svg:line", { x1: left, y1: y(0), x2: width, y2: y(0), stroke: "#a0aec0" }),
    el("svg:line", { x1: left, y1: y(0.05), x2: width, y2: y(0.05), stroke: "#c53030", "stroke-dasharray": "4 4",
      "data-target-line": "0.05" }),
    el("svg:text", { x: 2, y: y(top) + 4, "font-size": 11 }, seconds(top)),
    el("svg:text", { x: 2, y: y(0), "font-size": 11 }, "0"),
    el("svg:text", { x: left, y: height - 4, "font-size": 11 }, new Date(t0 * 1000).toLocaleTimeString()),
    el("svg:text", { x: width - 60, y: height - 4, "font-size": 11 }, "now"));
  for (const p of history.pairs) {
    const key = `${p.source} → ${p.target}`;
    if (!p.points.length) continue;
    svg.append(el("svg:polyline", { fill: "none", stroke: colour(key), "stroke-width": 1.5, "data-pair": key,
      "data-points": p.points.length, points: p.points.map((pt) => `${x(pt[0])},${y(pt[2])}`).join(" ") }));
  }
  drawEvents(history, t0, t1, width);
  document.getElementById("lag-legend").replaceChildren(...history.pairs.map((p) => {
    const key = `${p.source} → ${p.target}`;
    return el("span", {}, el("span", { class: "swatch", style: `background:${colour(key)}` }), `${key} (${p.points.length})`);
  }));
  document.querySelector("#lag-now tbody").replaceChildren(...now.pairs.map((p) =>
    el("tr", { "data-pair": `${p.source}-${p.target}` }, el("td", {}, `${p.source} → ${p.target}`),
      el("td", {}, p.behind_events), el("td", {}, seconds(p.behind_seconds)),
      el("td", {}, `${p.reported_s_ago} s ago${p.stale ? " (STALE)" : ""}`))));
}

function stageCell(p) {
  // a migration: its stage of the run, the stage's chunks (stock copy, verify check), the run's ETA
  const chunks = p.total ? `: ${p.done}/${p.total} chunks${p.rate_rows_s ? `, ${Math.round(p.rate_rows_s)} rows/s` : ""}` : "";
  const pct = p.total ? Math.round((100 * p.done) / p.total) : p.stage_no ? Math.round((100 * (p.stage_no - 1)) / p.stages.length) : 0;
  return el("td", { "data-progress": p.total ? `${p.done}/${p.total}` : "", "data-stage": p.stage },
    el("span", { class: "bar" }, el("div", { style: `width:${pct}%` })),
    ` stage ${p.stage_no || "-"}/${p.stages.length} ${p.stage}${chunks}`,
    el("div", { class: "note", "data-eta": p.eta_s === null ? "" : String(Math.round(p.eta_s)) },
      p.eta_s === null ? p.eta_note : `ETA ${seconds(p.eta_s)} (${p.eta_note})`));
}

function progressCell(run) {
  const p = run.progress;
  if (!p) return el("td", {}, run.status === "running" ? run.phase : "");
  if (p.stage) return stageCell(p);
  const pct = p.total ? Math.round((100 * p.done) / p.total) : 0;
  return el("td", { "data-progress": `${p.done}/${p.total}` },
    el("span", { class: "bar" }, el("div", { style: `width:${pct}%` })),
    ` ${p.done}/${p.total} ${p.unit || "chunks"}${p.drained ? " (drained)" : ""}${p.rate_rows_s ? `, ${Math.round(p.rate_rows_s)} ${p.unit === "events" ? "events" : "rows"}/s` : ""}${p.eta_s ? `, ETA ${seconds(p.eta_s)}` : ""}`);
}

function runRow(run) {
  const links = [el("a", { href: run.airflow_url, target: "_top" }, "Airflow run")];
  if (run.report_url) links.push(" · ", el("a", { href: run.report_url, target: "_blank", "data-report": run.run_id }, "report"));
  if (run.data_docs_url) {
    links.push(" · ", el("a", { href: run.data_docs_url, target: "_blank", "data-docs": run.run_id }, "Data Docs"));
  }
  return el("tr", { "data-run": run.run_id, "data-kind": run.kind, "data-status": run.status },
    el("td", {}, run.created_at.slice(0, 19).replace("T", " ")),
    el("td", {}, run.kind),
    el("td", {}, run.what),
    el("td", {}, el("span", { class: `badge ${run.status}` }, run.status), ` ${run.phase}`),
    progressCell(run),
    el("td", {}, run.window_ms === null ? "" : `${Math.round(run.window_ms)} ms`),
    el("td", {}, `${run.actor}: ${run.reason}`),
    el("td", {}, ...links));
}

function drawRuns(page) {
  document.querySelector("#runs tbody").replaceChildren(...page.runs.map(runRow));
  document.getElementById("older").hidden = !page.next_before || runsShown >= 500;
}

function post(path, body) {
  return fetch(API + path, { method: "POST", credentials: "same-origin", headers: { "Content-Type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body) });
}

function resolveButton(zone, lock) {
  // as `zonesync locks resolve`: repair the row first when its lock came from a mismatch
  const button = el("button", { "data-resolve": `${zone}:${lock.table}:${JSON.stringify(lock.pk)}` }, "resolve");
  button.addEventListener("click", async () => {
    if (!window.confirm(`Resolve the lock of ${lock.table} ${JSON.stringify(lock.pk)} in zone ${zone}?`)) return;
    const resp = await post(`/locks/${zone}/resolve`, { table: lock.table, pk: JSON.stringify(lock.pk) });
    showError(resp.ok ? "" : `resolve: ${(await resp.json().catch(() => ({}))).detail || resp.status}`);
    refresh();
  });
  return button;
}

function drawLocks(locks) {
  document.querySelector("#locks tbody").replaceChildren(...locks.zones.flatMap((z) => z.error
    ? [el("tr", {}, el("td", {}, z.zone), el("td", { colspan: 5, class: "error" }, z.error))]
    : z.locks.map((l) => el("tr", { "data-lock": `${z.zone}:${l.table}:${JSON.stringify(l.pk)}` },
      el("td", {}, z.zone), el("td", {}, l.table), el("td", {}, JSON.stringify(l.pk)), el("td", {}, l.held_events),
      el("td", {}, l.reason), el("td", {}, el("code", {}, l.resolve), " ", resolveButton(z.zone, l))))));
}

function alertHelp(a) {
  // what settles the alert (console/alert_help.py): its command, filled in, or the runbook step
  return el("div", { class: "alert-help", "data-alert-help": a.id },
    ...(a.resolve ? [el("code", { "data-alert-resolve": a.id }, a.resolve), el("br")] : []),
    el("span", { "data-alert-hint": a.id }, a.hint), " ", el("span", { class: "alert-doc" }, `(${a.doc})`));
}

function drawAlerts(alerts) {
  document.querySelector("#alerts tbody").replaceChildren(...alerts.alerts.map((a) => {
    const ack = el("button", { "data-ack": a.id }, "acknowledge");
    ack.addEventListener("click", async () => {
      const resp = await post(`/alerts/${a.id}/ack`);
      if (resp.ok) refresh(); else showError(`ack ${a.id}: ${(await resp.json().catch(() => ({}))).detail || resp.status}`);
    });
    return el("tr", { "data-alert": a.id, "data-kind": a.kind }, el("td", {}, a.id),
      el("td", {}, a.at.slice(0, 19).replace("T", " ")), el("td", {}, a.zone), el("td", {}, a.kind),
      el("td", {}, alertHelp(a), el("div", { class: "alert-detail" }, JSON.stringify(a.detail))), el("td", {}, ack));
  }));
}

function showError(text) {
  const e = document.getElementById("error");
  e.textContent = text;
  e.hidden = !text;
}

async function refresh() {
  try {
    const [zones, map, history, now, runs, locks, alerts] = await Promise.all([
      get("/zones"), get("/rules"), get("/lag/history?minutes=60"), get("/lag"), get(`/runs?limit=${runsShown}`),
      get("/locks"), get("/alerts?limit=100")]);
    drawZones(zones.zones);
    drawMap(map);
    drawLag(history, now);
    drawRuns(runs);
    drawLocks(locks);
    drawAlerts(alerts);
    showError("");
    document.getElementById("updated").textContent = `updated ${new Date().toLocaleTimeString()}`;
    document.body.dataset.loaded = String(Date.now());
  } catch (err) {
    showError(String(err.message || err));
  }
}

document.getElementById("older").addEventListener("click", () => {
  runsShown = Math.min(500, runsShown + 25);
  refresh();
});
refresh();
setInterval(refresh, 5000);
