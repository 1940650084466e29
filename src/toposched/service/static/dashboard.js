// The toposched dashboard: plain DOM over the JSON API (docs/api.md, docs/dashboard.md).
// The token is entered once and kept in sessionStorage (this tab only); every call sends it
// as a bearer token. Data from the server is only ever put in the page as text.
"use strict";

const TOKEN_KEY = "toposched-token";
const REFRESH_MS = 5000;
const MAX_EVENTS = 100;
const state = { token: sessionStorage.getItem(TOKEN_KEY), admin: false, view: { level: "cluster", index: 0 }, timer: null, events: null, lastEvent: 0, job: null };

function $(id) { return document.getElementById(id); }

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (key === "class") node.className = value;
    else if (key === "style") node.style.cssText = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value);
  }
  for (const child of children) {
    if (child !== null && child !== undefined) node.append(child instanceof Node ? child : String(child));
  }
  return node;
}

function headers() {
  return state.token ? { Authorization: "Bearer " + state.token } : {};
}

async function api(path, options) {
  const answer = await fetch(path, { ...(options || {}), headers: headers() });
  if (!answer.ok) {
    let message = answer.status + " " + answer.statusText;
    try { message = (await answer.json()).error.message; } catch (e) { /* not the error shape */ }
    const error = new Error(message);
    error.status = answer.status;
    throw error;
  }
  return answer.json();
}

// --- colours -----------------------------------------------------------------------------------
const OTHER = "(other accounts)";
function colour(account) {
  if (account === OTHER) return "#9aa4ae";
  let hash = 0;
  for (const c of account) hash = (hash * 31 + c.charCodeAt(0)) >>> 0;
  return "hsl(" + (hash % 360) + ", 60%, 52%)";
}
const seenAccounts = new Set();

function bar(gpus, held, unavailable) {
  const node = el("div", { class: "bar" });
  const total = Math.max(gpus, 1);
  for (const [account, value] of Object.entries(held).sort((a, b) => b[1] - a[1])) {
    seenAccounts.add(account);
    node.append(el("span", { style: "width:" + (100 * value / total) + "%;background:" + colour(account), title: account + ": " + fmt(value) + " GPUs" }));
  }
  if (unavailable > 0) node.append(el("span", { class: "unavailable", style: "width:" + (100 * unavailable / total) + "%", title: fmt(unavailable) + " GPUs unavailable" }));
  return node;
}

function fmt(n) { return Number.isInteger(n) ? n.toLocaleString("en") : n.toLocaleString("en", { maximumFractionDigits: 1 }); }

function duration(seconds) {
  if (seconds < 90) return Math.round(seconds) + " s";
  if (seconds < 5400) return Math.round(seconds / 60) + " min";
  if (seconds < 172800) return (seconds / 3600).toFixed(1) + " h";
  return (seconds / 86400).toFixed(1) + " d";
}

// --- the map -----------------------------------------------------------------------------------
async function loadMap() {
  const view = await api("/v1/map?level=" + encodeURIComponent(state.view.level) + "&index=" + state.view.index);
  drawMap(view);
  if (window.firstMapDrawnAt === undefined) window.firstMapDrawnAt = performance.now();
}

function drawMap(view) {
  const crumbs = $("crumbs");
  crumbs.replaceChildren();
  view.path.forEach((step, i) => {
    if (i) crumbs.append(el("span", { class: "sep" }, "›"));
    const label = step.level === step.name ? step.name : step.level + " " + step.name;
    crumbs.append(el("button", { type: "button", onclick: () => zoom(step.level, step.index) }, label));
  });
  const map = $("map");
  const tiles = view.child_level === "node" ? view.children.map(nodeTile) : view.children.map((c) => domainTile(c, view.child_level));
  map.className = view.children.length > 60 ? "map small" : "map";
  map.replaceChildren(...tiles);
  let gpus = 0, free = 0;
  for (const child of view.children) { gpus += child.gpus; free += child.free_gpus; }
  $("map-summary").textContent = view.children.length.toLocaleString("en") + " " + view.child_level + (view.children.length === 1 ? "" : "s") + ", " + fmt(gpus) + " GPUs, " + fmt(free) + " free" + (view.child_level === "node" ? "" : " (click a " + view.child_level + " to open it)");
  drawLegend();
}

function domainTile(child, level) {
  const held = child.held;
  let used = 0;
  for (const value of Object.values(held)) used += value;
  const unavailable = Math.max(0, child.gpus - used - child.free_gpus);
  const unhealthy = child.nodes - child.health.healthy;
  return el("button", {
    type: "button", class: "tile" + (unhealthy ? " unhealthy" : ""), "data-name": child.name,
    title: child.name + ": " + fmt(child.free_gpus) + " of " + fmt(child.gpus) + " GPUs free; " + child.health.healthy + " of " + child.nodes + " nodes healthy",
    onclick: () => zoom(level, child.index),
  }, el("div", {}, child.name), el("div", { class: "muted" }, fmt(child.free_gpus) + "/" + fmt(child.gpus) + " free"), bar(child.gpus, held, unavailable));
}

function nodeTile(node) {
  const held = {};
  let used = 0;
  for (const job of node.jobs) { held[job.account] = (held[job.account] || 0) + job.gpus; used += job.gpus; }
  const unavailable = node.health === "healthy" ? 0 : Math.max(0, node.gpus - used);
  const jobs = el("div", { class: "jobs" }, ...node.jobs.map((job) => el("div", {}, (job.id || "a job") + " (" + job.account + ", " + fmt(job.gpus) + " GPUs)")));
  const tile = el("div", { class: "tile node" + (node.health === "healthy" ? "" : " unhealthy"), "data-name": node.name },
    el("div", {}, node.name + " ", el("span", { class: "health health-" + node.health }, node.health)),
    el("div", { class: "muted" }, node.free_gpus + "/" + node.gpus + " GPUs free"), bar(node.gpus, held, unavailable), jobs);
  if (state.admin) {
    const actions = el("div", { class: "actions" });
    const verbs = node.health === "healthy" ? ["drain", "cordon"] : node.health === "down" ? ["up"] : ["uncordon"];
    for (const verb of verbs) actions.append(el("button", { type: "button", onclick: () => nodeAction(node.name, verb) }, verb));
    tile.append(actions);
  }
  return tile;
}

async function nodeAction(name, verb) {
  try {
    await api("/v1/nodes/" + encodeURIComponent(name) + "/" + verb, { method: "POST" });
  } catch (error) {
    alert(verb + " " + name + ": " + error.message);
  }
  await refresh();
}

function zoom(level, index) {
  state.view = { level, index };
  loadMap().catch(showError);
}

function drawLegend() {
  const legend = $("legend");
  legend.replaceChildren(
    ...[...seenAccounts].sort().map((a) => el("span", {}, el("i", { style: "background:" + colour(a) }), a)),
    el("span", {}, el("i", { style: "background:var(--idle);border:1px solid var(--line)" }), "idle"),
    el("span", {}, el("i", { class: "unavailable", style: "background:#555" }), "unavailable (drained, cordoned, down)"),
  );
}

// --- tables ------------------------------------------------------------------------------------
function row(...cells) {
  return el("tr", {}, ...cells.map((cell) => (cell instanceof Node && cell.tagName === "TD") ? cell : el("td", {}, cell)));
}
function num(value) { return el("td", { class: "num" }, value); }

async function loadQueue() {
  const queue = (await api("/v1/queue")).queue;
  const now = Date.now() / 1000;
  $("queue-count").textContent = "(" + queue.length + ")";
  $("queue").tBodies[0].replaceChildren(...queue.slice(0, 200).map((job) => {
    const tr = row(num(job.position), job.id, job.account, num(fmt(job.gpus)), duration(now - job.submit_time), sortKey(job.sort_key), job.reason);
    tr.dataset.job = job.id;
    return tr;
  }));
}

function sortKey(key) {
  // [tier, owed, standing, priority]: the standing's words go in the tooltip
  const [tier, owed, standing, priority] = key;
  return el("td", { class: "key", title: "fair-share standing: " + standing }, tier + (owed ? ", owed" : "") + ", priority " + priority);
}

async function loadRunning() {
  const jobs = (await api("/v1/jobs?state=running&limit=200")).jobs;
  const now = Date.now() / 1000;
  $("running-count").textContent = "(" + jobs.length + (jobs.length === 200 ? "+" : "") + ")";
  $("running").tBodies[0].replaceChildren(...jobs.map((job) => {
    const nodes = job.nodes.length > 4 ? job.nodes.slice(0, 4).join(", ") + " +" + (job.nodes.length - 4) : job.nodes.join(", ");
    const tr = row(job.id, job.account, num(fmt(job.gpus)), job.start_time ? duration(now - job.start_time) : "starting", nodes, job.unallocated ? "unallocated work: " + job.reason : job.reason);
    tr.dataset.job = job.id;
    return tr;
  }));
}

async function loadTeams() {
  const accounts = (await api("/v1/accounts")).accounts;
  $("teams").tBodies[0].replaceChildren(...accounts.map((a) => {
    const scale = Math.max(a.budget_gpus, a.running_gpus, 1);
    const usage = el("div", { class: "usage", title: fmt(a.running_gpus) + " running of a " + fmt(a.budget_gpus) + " GPU budget" },
      el("span", { style: "width:" + (100 * a.running_gpus / scale) + "%;background:" + colour(a.account) }),
      el("b", { style: "left:" + (100 * a.budget_gpus / scale) + "%" }));
    const share = (100 * a.fair_share).toFixed(1) + "%";
    const tr = row(a.account, el("td", {}, usage), num(fmt(a.running_gpus)), num(fmt(Math.round(a.budget_gpus * 10) / 10)), num(fmt(Math.round(a.usage_gpu_hours * 10) / 10)), num(share), a.standing || "-", num(a.pending), num(a.running),
      num(gpuHours(a.owed_gpu_hours)), num(gpuHours(a.delivered_gpu_hours)), el("td", { class: "met" }, owedMet(a)));
    tr.dataset.account = a.account;
    return tr;
  }));
}

// GPU-hours with two decimals below 10 (a fresh window), one above.
function gpuHours(value) {
  return value < 10 ? value.toFixed(2) : fmt(Math.round(value * 10) / 10);
}

// The share of the owed GPU-hours delivered: a bar and its percentage ("-" when nothing is owed).
function owedMet(a) {
  if (a.owed_met === null) return "-";
  const percent = Math.round(100 * a.owed_met) + "%";
  const title = a.delivered_within_owed_gpu_hours.toFixed(2) + " of " + a.owed_gpu_hours.toFixed(2) + " owed GPU-hours delivered";
  return el("span", { title: title },
    el("span", { class: "met-bar" }, el("span", { style: "width:" + (100 * a.owed_met) + "%" })), " " + percent);
}

// --- a job's page ------------------------------------------------------------------------------
async function showJob(id) {
  const path = "/v1/jobs/" + encodeURIComponent(id);
  const [job, why] = await Promise.all([api(path), api(path + "/explain")]);
  state.job = id;
  $("job-title").textContent = job.id;
  const facts = [
    ["state", job.state + " (" + why.code + ")"], ["account", job.account], ["GPUs", fmt(job.gpus) + " in " + job.pods + " pods"],
    ["priority", job.priority], ["why", why.reason],
  ];
  if (why.position) facts.push(["position", why.position.overall + " in the queue, " + why.position.account + " in its account"]);
  if (why.sort_key) facts.push(["sort key", JSON.stringify(why.sort_key)]);
  if (why.reservation) facts.push(["reserved", new Date(why.reservation.start_time * 1000).toLocaleString() + " in " + why.reservation.domain]);
  if (job.nodes.length) facts.push(["placement", job.nodes.slice(0, 24).join(", ") + (job.nodes.length > 24 ? " and " + (job.nodes.length - 24) + " more nodes" : "")]);
  facts.push(["attempts", job.attempts + ", preempted " + job.preemptions + " times"]);
  $("job-facts").replaceChildren(...facts.flatMap(([name, value]) => [el("dt", {}, name), el("dd", {}, value)]));
  $("job-history").replaceChildren(...why.history.map((event) => {
    let text = new Date(event.time * 1000).toLocaleString() + " " + event.event;
    if (event.nodes) text += " on " + event.nodes.slice(0, 4).join(", ") + (event.nodes.length > 4 ? " +" + (event.nodes.length - 4) : "");
    if (event.preemptor) text += " for " + event.preemptor + (event.rule ? " (" + event.rule + ")" : "");
    if (event.lost_gpu_seconds !== undefined) text += ", " + lostWork(event.lost_gpu_seconds);
    if (event.detail) text += ": " + event.detail;
    return el("li", {}, text);
  }));
  $("job-log").hidden = true;
  $("job-section").hidden = false;
  $("job-section").scrollIntoView({ block: "nearest" });
}

async function showLog() {
  const answer = await fetch("/v1/jobs/" + encodeURIComponent(state.job) + "/pods/0/log?tail=200", { headers: headers() });
  $("job-log").textContent = answer.ok ? await answer.text() : "no log: this backend keeps none, or the pod has not run";
  $("job-log").hidden = false;
}

function onJobClick(event) {
  const tr = event.target.closest("tr[data-job]");
  if (tr) showJob(tr.dataset.job).catch(showError);
}

// --- events (server-sent events read with fetch, which can send the token) ---------------------
async function followEvents() {
  if (state.events) state.events.abort();
  const controller = new AbortController();
  state.events = controller;
  try {
    const answer = await fetch("/v1/events?after=" + state.lastEvent, { headers: headers(), signal: controller.signal });
    const reader = answer.body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += value;
      let end;
      while ((end = buffer.indexOf("\n\n")) >= 0) {
        const block = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        const data = block.split("\n").filter((l) => l.startsWith("data: ")).map((l) => l.slice(6)).join("\n");
        if (data) { const event = JSON.parse(data); state.lastEvent = event.id; showEvent(event); }
      }
    }
  } catch (error) {
    if (controller.signal.aborted) return;
  }
  setTimeout(() => { if (state.events === controller) followEvents(); }, 3000);
}

// The work an eviction throws away: GPU-seconds since the victim's last checkpoint.
function lostWork(gpuSeconds) {
  const hours = gpuSeconds / 3600;
  const shown = hours >= 10 ? fmt(Math.round(hours)) : hours.toLocaleString("en", { maximumSignificantDigits: 2 });
  return "lost " + shown + " GPU-hours";
}

function showEvent(event) {
  const list = $("events");
  const time = new Date(event.time * 1000).toLocaleTimeString();
  let text = time + " " + event.kind;
  if (event.job) text += " " + event.job;
  if (event.node) text += " " + event.node + " " + event.health;
  if (event.nodes) text += " on " + event.nodes.slice(0, 3).join(", ") + (event.nodes.length > 3 ? " +" + (event.nodes.length - 3) : "");
  if (event.preemptor) text += " for " + event.preemptor + (event.rule ? " (" + event.rule + ")" : "");
  if (event.lost_gpu_seconds !== undefined) text += ", " + lostWork(event.lost_gpu_seconds);
  if (event.detail) text += ": " + event.detail;
  list.prepend(el("li", { class: event.kind === "evicting" ? "preemption" : "" }, text));
  while (list.children.length > MAX_EVENTS) list.lastChild.remove();
}

// --- start -------------------------------------------------------------------------------------
function showError(error) {
  if (error.status === 401) { logout("the token was refused"); return; }
  $("map-summary").textContent = "error: " + error.message;
}

async function refresh() {
  await Promise.all([loadMap(), loadQueue(), loadRunning(), loadTeams()]).catch(showError);
}

async function start() {
  let me;
  try {
    me = await api("/v1/whoami");
  } catch (error) {
    logout(error.message);
    return;
  }
  if (me.role === null) { logout(""); return; }
  state.admin = me.role === "admin";
  $("who").textContent = me.name + " (" + me.role + (me.accounts.length ? ": " + me.accounts.join(", ") : "") + ")";
  $("login").hidden = true;
  $("logout").hidden = !state.token;
  $("main").hidden = false;
  await refresh();
  followEvents();
  clearInterval(state.timer);
  state.timer = setInterval(refresh, REFRESH_MS);
}

function logout(message) {
  sessionStorage.removeItem(TOKEN_KEY);
  state.token = null;
  clearInterval(state.timer);
  if (state.events) state.events.abort();
  $("main").hidden = true;
  $("logout").hidden = true;
  $("who").textContent = "";
  $("login").hidden = false;
  $("login-error").textContent = message || "";
}

$("login").addEventListener("submit", (event) => {
  event.preventDefault();
  state.token = $("token").value.trim();
  $("token").value = "";
  sessionStorage.setItem(TOKEN_KEY, state.token);
  start();
});
$("logout").addEventListener("click", () => logout(""));
$("queue").addEventListener("click", onJobClick);
$("running").addEventListener("click", onJobClick);
$("job-close").addEventListener("click", () => { $("job-section").hidden = true; });
$("job-log-button").addEventListener("click", () => showLog().catch(showError));
start();
