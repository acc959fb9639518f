// Lachesis dashboard: reads /ui/state once, then follows /ui/events (Server-Sent Events).
// Read-only; no external code. Every text from the service goes in through textContent.
"use strict";

const PALETTE = ["#4e79a7", "#59a14f", "#9c755f", "#e15759", "#76b7b2", "#edc948",
  "#b07aa1", "#ff9da7", "#8cd17d", "#499894", "#d37295", "#a0cbe8", "#79706e", "#f28e2b"];
let last = null;
let source = new URLSearchParams(location.search).get("source");
let events = null;

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v; else if (k === "style") e.style.cssText = v;
    else e.setAttribute(k, v);
  }
  for (const c of children) {
    if (c === null || c === undefined) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

function hash(s) {
  let h = 2166136261;
  for (let i = 0; i < s.length; i++) { h ^= s.charCodeAt(i); h = Math.imul(h, 16777619); }
  return h >>> 0;
}
// Tenants get distinct colours in name order (a hash would give two of a handful the same);
// jobs, too many to tell apart anyway, a hash.
let tenantColours = new Map();
function setTenants(names) {
  tenantColours = new Map([...new Set(names)].sort().map((t, i) => [t, PALETTE[i % PALETTE.length]]));
}
const colour = (key) => tenantColours.get(key) || PALETTE[hash(key) % PALETTE.length];
const pct = (x) => (100 * x).toFixed(1) + " %";
// Two units at most, the smaller left out when it is zero: "45 s", "50 min", "5 min 30 s",
// "2 h", "2 h 5 min".
function duration(ms) {
  const s = Math.round(ms / 1000);
  const two = (big, bigUnit, small, smallUnit) => big + " " + bigUnit + (small ? " " + small + " " + smallUnit : "");
  if (s < 60) return s + " s";
  if (s < 3600) return two(Math.floor(s / 60), "min", s % 60, "s");
  return two(Math.floor(s / 3600), "h", Math.floor((s % 3600) / 60), "min");
}
const micros = (us) => us < 1000 ? us + " µs" : (us / 1000).toFixed(1) + " ms";
const clock = (ms) => new Date(ms).toLocaleTimeString();

function card(value, key) {
  return el("div", { class: "card" }, el("div", { class: "v" }, value), el("div", { class: "k" }, key));
}

function fill(tbody, rows) {
  tbody.replaceChildren(...rows);
}

// ---- views ----

function renderSources(s) {
  const select = document.getElementById("source");
  const shown = s.cluster ? s.cluster.source : null;
  const options = s.sources.map((x) => el("option", { value: x.id }, x.label));
  if (options.length === 0) options.push(el("option", { value: "" }, "no cluster yet"));
  select.replaceChildren(...options);
  if (shown !== null) select.value = shown;
}

function gpuCell(g, by) {
  const title = [g.state + ", " + g.free_milli + "/1000 free"];
  for (const j of g.jobs) title.push(j.job + " (" + j.tenant + ", " + j.milli + " milli)");
  if (g.frag_milli > 0) title.push("fragment " + g.frag_milli.toFixed(0) + " milli");
  // A shared GPU whose free part is mostly unusable is hatched behind its fill.
  const frag = g.state === "shared" && g.frag_milli >= g.free_milli / 2 ? " fragmented" : "";
  const cell = el("span", { class: "gpu " + g.state + frag, title: title.join("\n") });
  let bottom = 0;
  for (const j of g.jobs) {
    const h = Math.min(100, j.milli / 10);
    cell.append(el("span", { class: "fill", style: "bottom:" + bottom + "%;height:" + h +
      "%;background:" + colour(by === "job" ? j.job : j.tenant) }));
    bottom += h;
  }
  return cell;
}

// The series over the service's clock: y from 0 to 100 %, x from the first point to the last
// (labelled with their times and the middle one's).
function renderSeries(points) {
  const svg = document.getElementById("series");
  const ns = "http://www.w3.org/2000/svg";
  svg.replaceChildren();
  for (const y of [2, 60, 118]) {
    const grid = document.createElementNS(ns, "line");
    for (const [k, v] of [["x1", 0], ["x2", 600], ["y1", y], ["y2", y]]) grid.setAttribute(k, v);
    grid.setAttribute("class", "grid");
    grid.setAttribute("vector-effect", "non-scaling-stroke");
    svg.append(grid);
  }
  const t0 = points.length ? points[0].unix_ms : 0;
  const t1 = points.length ? points[points.length - 1].unix_ms : 0;
  document.getElementById("series-x").replaceChildren(...(points.length
    ? [t0, (t0 + t1) / 2, t1].map((t) => el("span", {}, clock(t)))
    : [el("span", {}, "no data yet")]));
  const line = (key, stroke) => {
    if (points.length === 0) return;
    const span = Math.max(1, t1 - t0);
    const xy = points.map((p, i) => {
      const x = points.length === 1 ? 600 * i : 600 * (p.unix_ms - t0) / span;
      return x.toFixed(1) + "," + (118 - 116 * p[key]).toFixed(1);
    });
    if (points.length === 1) xy.push("600," + xy[0].split(",")[1]);
    const pl = document.createElementNS(ns, "polyline");
    pl.setAttribute("points", xy.join(" "));
    pl.setAttribute("fill", "none");
    pl.setAttribute("stroke", stroke);
    pl.setAttribute("stroke-width", "2");
    pl.setAttribute("vector-effect", "non-scaling-stroke");
    svg.append(pl);
  };
  line("alloc", "#2f6fde");
  line("frag", "#d9822b");
}

function renderCluster(s) {
  const c = s.cluster;
  const groups = document.getElementById("groups");
  const cards = document.getElementById("cards");
  if (!c) {
    cards.replaceChildren();
    groups.replaceChildren(el("div", { class: "empty" },
      "No cluster yet: the service has answered no request (or its sessions expired)."));
    renderSeries([]);
    document.getElementById("legend").replaceChildren();
    return;
  }
  const by = document.getElementById("colour-by").value;
  const all = c.groups.flatMap((g) => g.nodes.flatMap((n) => n.gpus));
  const now = c.series.length ? c.series[c.series.length - 1] : { alloc: 0, frag: 0 };
  const count = (st) => all.filter((g) => g.state === st).length;
  cards.replaceChildren(
    card(c.groups.reduce((a, g) => a + g.nodes.length, 0), "nodes"),
    card(all.length, "GPUs"),
    card(pct(now.alloc), "allocated"),
    card(pct(now.frag), "fragmented (FGD)"),
    card(count("busy") + " / " + count("shared") + " / " + count("fragmented") + " / " + count("free"),
      "busy / shared / fragmented / free"),
    card(c.running, "running jobs"),
    card(c.queue.length, "pending jobs"));
  renderSeries(c.series);
  const keys = by === "job"
    ? [...new Set(all.flatMap((g) => g.jobs.map((j) => j.job)))].sort()
    : c.tenants;
  document.getElementById("legend").replaceChildren(...keys.slice(0, 40).map((k) =>
    el("span", { class: "item" }, el("span", { class: "swatch", style: "background:" + colour(k) }), k)));
  groups.replaceChildren(...c.groups.map((g) => el("div", { class: "group" },
    el("h3", {}, g.gpu_model + " · " + g.nodes.length + " nodes"),
    el("div", { class: "nodes" }, ...g.nodes.map((n) => el("div", { class: "node", "data-node": n.name },
      el("div", { class: "name" }, n.name),
      el("div", { class: "gpus" }, ...n.gpus.map((gpu) => gpuCell(gpu, by)))))))));
}

function reasonClass(kind) {
  if (kind === "never-fits" || kind === "no-allowed-model" || kind === "infeasible") return "bad";
  if (kind === "fragmented" || kind === "preempted") return "warn";
  if (kind === "held" || kind === "behind") return "";
  return "warn";
}

function renderQueue(s) {
  const c = s.cluster;
  const tenant = document.getElementById("tenant");
  const chosen = tenant.value;
  const tenants = c ? [...new Set(c.queue.map((q) => q.tenant))].sort() : [];
  tenant.replaceChildren(el("option", { value: "" }, "all"),
    ...tenants.map((t) => el("option", { value: t }, t)));
  tenant.value = tenants.includes(chosen) ? chosen : "";
  const rows = c ? c.queue.filter((q) => !tenant.value || q.tenant === tenant.value) : [];
  document.getElementById("queue-count").textContent =
    rows.length + (c && rows.length !== c.queue.length ? " of " + c.queue.length : "") + " pending";
  fill(document.querySelector("#queue tbody"), rows.map((q) => el("tr", { "data-job": q.job },
    el("td", {}, q.job),
    el("td", {}, el("span", { class: "swatch", style: "background:" + colour(q.tenant) }), " ", q.tenant),
    el("td", { class: "num" }, q.gpu_milli < 1000 && q.gpus === 1 ? q.gpu_milli + " milli" : q.gpus),
    el("td", { class: "num" }, duration(q.wait_ms)),
    el("td", {}, el("span", { class: "badge " + reasonClass(q.kind) }, q.kind)),
    el("td", {}, q.message, q.blocked_by ? el("span", { class: "muted" }, " (behind " + q.blocked_by + ")") : null))));
}

function renderDecisions(s) {
  const r = s.routing;
  const shadowTotal = r.shadow_agree + r.shadow_disagree;
  const abTotal = r.ab_treatment_jobs + r.ab_control_jobs;
  const routing = [card(r.rerouted ? el("span", { class: "badge bad" }, r.mode + " (guard)") : r.mode, "routing")];
  if (r.following) {
    routing.push(card(r.following, "the guard's selector follows it: " + r.rerouted));
  } else if (r.rerouted) {
    routing.push(card("switched", "the guard holds routing on the baseline: " + r.rerouted
      + " (a reload or a restart switches back)"));
  } else if (r.guard_verdict) {
    routing.push(card(r.guard_verdict.split(":")[1].trim(), "guard: " + r.guard_verdict));
  }
  if (r.mode === "ab" || abTotal > 0) {
    routing.push(card(r.percent + " %", "A/B share to the model"),
      card(r.ab_treatment_jobs + " / " + r.ab_control_jobs, "A/B jobs treatment / control"));
  }
  if (r.mode === "shadow" || shadowTotal > 0) {
    routing.push(card(shadowTotal ? pct(r.shadow_disagree / shadowTotal) : "–", "shadow disagreement"),
      card(r.shadow_agree + " / " + r.shadow_disagree, "shadow agreed / disagreed"));
  }
  document.getElementById("routing").replaceChildren(...routing);
  fill(document.querySelector("#arms tbody"), s.arms.map((a) => el("tr", {},
    el("td", {}, a.arm), el("td", { class: "num" }, a.requests), el("td", { class: "num" }, a.placed),
    el("td", { class: "num" }, a.fallbacks), el("td", { class: "num" }, micros(a.p50_us)),
    el("td", { class: "num" }, micros(a.p95_us)))));
  fill(document.querySelector("#decisions tbody"), s.decisions.map((d) => el("tr", {},
    el("td", {}, clock(d.unix_ms)), el("td", {}, d.request_id), el("td", {}, d.session || "–"),
    el("td", {}, d.arm),
    el("td", {}, el("span", { class: "badge " + (d.decided_by.startsWith("model") ? "ok" : "") }, d.decided_by)),
    el("td", { class: "num" }, d.placed), el("td", { class: "num" }, d.preempted),
    el("td", { class: "num" }, d.pending), el("td", { class: "num" }, micros(d.decision_us)),
    el("td", {}, ...d.fallbacks.map((f) => el("div", {},
      el("span", { class: "badge warn" }, f.reason), " ", f.from, ": ",
      el("span", { class: "muted" }, f.detail)))))));
}

function renderModel(s) {
  const m = s.model;
  const items = [
    ["status", el("span", { class: "badge " + (m.status === "serving" ? "ok" : "warn") }, m.status)],
    ["version", m.version || "–"], ["path", m.path || "–"], ["detail", m.detail || "–"],
    ["feature schema", m.feature_schema || "–"], ["trained on", m.trained_on || "–"],
    ["git revision", m.git_revision || "–"],
    ["validation relative JCT", m.validation_relative_jct ? m.validation_relative_jct.toFixed(3) : "–"],
    ["loaded at", m.loaded_at_unix_s ? new Date(m.loaded_at_unix_s * 1000).toLocaleString() : "–"],
    ["deciding", m.deciding], ["routing", m.routing], ["baseline", m.baseline],
    ["fallback chain", (m.fallback_chain || []).join(" → ")],
    ["training card", s.card ? el("a", { href: s.card }, "MODEL_CARD.md") : "–"],
    ["last reload", s.reload
      ? el("span", {}, el("span", { class: "badge " + (s.reload.ok ? "ok" : "bad") }, s.reload.ok ? "ok" : "failed"),
        " " + clock(s.reload.unix_ms) + ": " + s.reload.message)
      : "none since start"],
  ];
  document.getElementById("model").replaceChildren(...items.flatMap(([k, v]) =>
    [el("dt", {}, k), el("dd", {}, v)]));
}

function render(s) {
  last = s;
  setTenants(s.cluster ? s.cluster.tenants.concat(s.cluster.queue.map((q) => q.tenant)) : []);
  renderSources(s);
  renderCluster(s);
  renderQueue(s);
  renderDecisions(s);
  renderModel(s);
  document.body.dataset.updated = String(s.unix_ms);
}

// ---- navigation and live updates ----

function showView() {
  const view = (location.hash || "#cluster").slice(1);
  for (const v of document.querySelectorAll(".view")) v.classList.toggle("active", v.id === "view-" + view);
  for (const a of document.querySelectorAll("#tabs a")) a.classList.toggle("active", a.dataset.view === view);
}

function query() {
  return source === null ? "" : "?source=" + encodeURIComponent(source);
}

function follow() {
  if (events) events.close();
  const live = document.getElementById("live");
  events = new EventSource("/ui/events" + query());
  events.addEventListener("state", (e) => {
    live.textContent = "live";
    live.classList.remove("off");
    render(JSON.parse(e.data));
  });
  events.onerror = () => {
    live.textContent = "reconnecting";
    live.classList.add("off");
  };
}

window.addEventListener("hashchange", showView);
document.getElementById("source").addEventListener("change", (e) => {
  source = e.target.value;
  follow();
});
document.getElementById("tenant").addEventListener("change", () => last && renderQueue(last));
document.getElementById("colour-by").addEventListener("change", () => last && renderCluster(last));
showView();
fetch("/ui/state" + query()).then((r) => r.json()).then(render).catch(() => {});
follow();
