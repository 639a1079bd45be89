// trainop ui: plain JavaScript, no build step. Every piece of data (job names, labels, log lines,
// metric names, parameters) reaches the document through textContent or an attribute set with
// setAttribute on a known name; nothing is ever parsed as HTML. The page keeps no store of its
// own: each view reads the server's answers (which read TrainingClient) and drops them on leaving.
"use strict";

const CSRF = document.querySelector('meta[name="trainop-csrf"]').getAttribute("content");
const MAX_LOG_LINES = 2000; // the log view never holds more lines than this
const MAX_POINTS = 2000; // per curve: past this, every other point is dropped (the shape stays)
const MAX_CHARTS = 24; // per job: a replica printing thousands of metric names draws the first 24
const CHART_WIDTH = 560;
const CHART_HEIGHT = 240;
// Axis numbers that stay readable for small values (a loss of 0.0002 is not "0").
const number = (v) => (v === null || v === undefined ? "" : Math.abs(v) < 1e-3 && v !== 0 ? v.toExponential(1) : String(+v.toPrecision(4)));
const yAxis = (label) => ({ label, size: 70, values: (u, splits) => splits.map(number) });
const COLORS = ["#2d6cdf", "#e4572e", "#17a398", "#a23b72", "#f3a712", "#3b1f2b", "#6c8ead", "#76b041"];

// --- building the document without markup ---------------------------------------------------
function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (name === "text") node.textContent = String(value);
    else if (name === "onclick" || name === "oninput" || name === "onchange") node.addEventListener(name.slice(2), value);
    else node.setAttribute(name, String(value));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function table(headers, rows, attrs) {
  return el("table", attrs || {},
    el("thead", {}, el("tr", {}, headers.map((h) => el("th", { text: h })))),
    el("tbody", {}, rows));
}

function jobHref(namespace, name) {
  return "#/job/" + encodeURIComponent(namespace) + "/" + encodeURIComponent(name);
}

function jobApi(namespace, name) {
  return "/api/jobs/" + encodeURIComponent(namespace) + "/" + encodeURIComponent(name);
}

function stateCell(state) {
  return el("td", { class: "state state-" + String(state).replace(/[^A-Za-z]/g, ""), text: state });
}

function labelChips(labels) {
  return el("span", { class: "labels" }, Object.entries(labels || {}).map(([k, v]) => el("span", { text: k + "=" + v })));
}

async function getJSON(url) {
  const answer = await fetch(url, { credentials: "same-origin" });
  const body = await answer.json().catch(() => ({ error: answer.status + " " + answer.statusText }));
  if (!answer.ok) throw new Error(body.error || answer.statusText);
  return body;
}

// --- views: each returns a function that stops what it started --------------------------------
let stopView = () => {};
const main = document.getElementById("main");
const live = document.getElementById("live");

function setLive(on, text) {
  live.textContent = text;
  live.classList.toggle("on", on);
}

function stream(url, handlers) {
  const source = new EventSource(url);
  source.addEventListener("open", () => setLive(true, "live"));
  source.addEventListener("error", () => setLive(false, source.readyState === EventSource.CLOSED ? "disconnected" : "reconnecting"));
  for (const [name, handler] of Object.entries(handlers)) {
    source.addEventListener(name, (message) => handler(JSON.parse(message.data)));
  }
  return source;
}

function route() {
  stopView();
  main.replaceChildren();
  const parts = location.hash.replace(/^#\/?/, "").split("/").map((part) => {
    try { return decodeURIComponent(part); } catch (err) { return part; } // a malformed %-escape
  });
  if (parts[0] === "job" && parts.length === 3) stopView = jobView(parts[1], parts[2]);
  else if (parts[0] === "studies") stopView = studiesView();
  else if (parts[0] === "study" && parts.length === 2) stopView = studyView(parts[1]);
  else stopView = jobsView();
}

// --- the job list --------------------------------------------------------------------------------
function jobsView() {
  let rows = [];
  const filter = el("input", { type: "search", id: "filter", placeholder: "filter: name, kind, state, namespace, label" });
  const body = el("div", { id: "jobs" });
  main.append(el("h1", { text: "Jobs" }), el("div", { class: "toolbar" }, filter), body);

  function matches(row, words) {
    const labels = Object.entries(row.labels).map(([k, v]) => k + "=" + v);
    const hay = [row.name, row.kind, row.state, row.namespace, ...labels].join(" ").toLowerCase();
    return words.every((w) => hay.includes(w));
  }

  function render() {
    const words = filter.value.toLowerCase().split(/\s+/).filter(Boolean);
    const shown = rows.filter((row) => matches(row, words));
    const progress = rows.some((row) => row.progress !== null);
    const message = rows.some((row) => row.message);
    const headers = ["Namespace", "Name", "Kind", "State", "Age", "Replicas", ...(progress ? ["Progress"] : []), ...(message ? ["Message"] : []), "Labels"];
    const lines = shown.map((row) => el("tr", { "data-job": row.namespace + "/" + row.name },
      el("td", { text: row.namespace }),
      el("td", {}, el("a", { href: jobHref(row.namespace, row.name), class: "job-link", text: row.name })),
      el("td", { text: row.kind }),
      stateCell(row.state),
      el("td", { class: "num", text: row.age }),
      el("td", { text: row.replicas }),
      progress ? el("td", { text: row.progress || "" }) : null,
      message ? el("td", { text: row.message }) : null,
      el("td", {}, labelChips(row.labels))));
    body.replaceChildren(shown.length ? table(headers, lines, { id: "job-table" })
      : el("p", { class: "muted", text: rows.length ? "No job matches the filter." : "No jobs." }));
  }

  filter.addEventListener("input", render);
  const source = stream("/api/jobs/watch", {
    snapshot: (data) => { rows = data; render(); },
    failed: (e) => body.replaceChildren(el("p", { class: "error", id: "jobs-error", text: e.error })),
  });
  return () => source.close();
}

// --- one job -------------------------------------------------------------------------------------
function jobView(namespace, name) {
  const api = jobApi(namespace, name);
  let stop = () => {};
  let left = false;
  getJSON(api).then((job) => { if (!left) stop = showJob(namespace, name, job); })
    .catch((err) => main.replaceChildren(el("h1", { text: "Job" }), el("p", { class: "error", id: "job-error", text: String(err.message) })));
  return () => { left = true; stop(); };
}

function showJob(namespace, name, first) {
  const api = jobApi(namespace, name);
  const head = el("div", { id: "job-head" });
  const actions = el("div", { class: "toolbar" });
  const facts = el("div", { id: "job-facts" });
  const yaml = el("pre", { class: "yaml", id: "yaml", hidden: true });
  const charts = el("div", { class: "charts", id: "charts" });
  const replicaSelect = el("select", { id: "replica" }, el("option", { value: "", text: "all replicas" }));
  const log = el("div", { class: "log", id: "log" });
  main.append(head, actions, yaml, facts,
    el("h2", { text: "Metrics" }), charts,
    el("h2", { text: "Log" }), el("div", { class: "toolbar" }, replicaSelect, el("span", { class: "muted", text: "the newest " + MAX_LOG_LINES + " lines are kept" })), log);

  const del = el("button", { class: "danger", id: "delete", text: "Delete" });
  let armed = false;
  del.addEventListener("click", async () => {
    if (!armed) { armed = true; del.textContent = "Really delete " + name + "?"; del.classList.add("confirm"); return; }
    del.disabled = true;
    const answer = await fetch(api + "/delete", { method: "POST", headers: { "X-Trainop-CSRF": CSRF }, credentials: "same-origin" });
    if (answer.ok) location.hash = "#/";
    else { del.disabled = false; facts.prepend(el("p", { class: "error", text: "delete failed: " + (await answer.text()) })); }
  });
  const showYaml = el("button", { id: "show-yaml", text: "YAML" });
  showYaml.addEventListener("click", async () => {
    if (!yaml.hidden) { yaml.hidden = true; return; }
    const answer = await fetch(api + "/yaml", { credentials: "same-origin" });
    yaml.textContent = await answer.text();
    yaml.hidden = false;
  });
  actions.append(showYaml, el("a", { class: "button", href: api + "/yaml", target: "_blank", rel: "noopener", text: "open YAML" }), del);

  let replicasKnown = "";
  function renderDetail(job) {
    head.replaceChildren(el("h1", { id: "job-name", text: job.name }),
      el("div", { class: "meta" },
        el("span", {}, el("b", { text: "kind" }), job.kind),
        el("span", {}, el("b", { text: "namespace" }), job.namespace),
        el("span", {}, el("b", { text: "state" }), el("span", { class: "state state-" + job.state.replace(/[^A-Za-z]/g, ""), id: "job-state", text: job.state })),
        el("span", {}, el("b", { text: "age" }), job.age),
        el("span", {}, el("b", { text: "replicas" }), job.replicas),
        job.progress !== null ? el("span", {}, el("b", { text: "progress" }), job.progress) : null,
        job.message ? el("span", {}, el("b", { text: "queue" }), job.message) : null),
      labelChips(job.labels));
    const pods = job.pods.map((p) => el("tr", {},
      el("td", { text: p.replica }), stateCell(p.phase), el("td", { class: "num", text: p.restarts }),
      el("td", { class: "num", text: p.exitCode === null ? "" : p.exitCode }), el("td", { text: p.reason }), el("td", { text: p.message })));
    const counts = Object.entries(job.replicaStatuses).map(([type, s]) => el("tr", {},
      el("td", { text: type }), el("td", { class: "num", text: s.active || 0 }), el("td", { class: "num", text: s.succeeded || 0 }), el("td", { class: "num", text: s.failed || 0 })));
    const conditions = job.conditions.map((c) => el("tr", {},
      el("td", { text: c.type }), el("td", { text: c.status }), el("td", { text: c.reason }), el("td", { text: c.message }), el("td", { text: c.lastTransitionTime })));
    const events = job.events.map((e) => el("tr", {},
      el("td", { text: e.time }), el("td", { text: e.type }), el("td", { text: e.reason }), el("td", { text: e.message })));
    facts.replaceChildren(
      el("h2", { text: "Replicas" }),
      pods.length ? table(["Replica", "Phase", "Restarts", "Exit code", "Reason", "Message"], pods, { id: "pods" }) : el("p", { class: "muted", text: "No replica has started yet." }),
      counts.length ? table(["Replica type", "Active", "Succeeded", "Failed"], counts, { id: "counts" }) : null,
      el("h2", { text: "Conditions" }),
      table(["Type", "Status", "Reason", "Message", "Since"], conditions, { id: "conditions" }),
      el("h2", { text: "Events" }),
      events.length ? table(["Time", "Type", "Reason", "Message"], events, { id: "events" }) : el("p", { class: "muted", text: "No events." }));
    const ids = job.replicaIds.join(",");
    if (ids !== replicasKnown) {
      replicasKnown = ids;
      const chosen = replicaSelect.value;
      replicaSelect.replaceChildren(el("option", { value: "", text: "all replicas" }), ...job.replicaIds.map((r) => el("option", { value: r, text: r })));
      replicaSelect.value = job.replicaIds.includes(chosen) ? chosen : "";
    }
  }

  renderDetail(first);
  const sources = [];
  sources.push(stream(api + "/watch", {
    snapshot: renderDetail,
    failed: (e) => facts.prepend(el("p", { class: "error", text: e.error })),
    gone: () => { facts.prepend(el("p", { class: "error", id: "gone", text: "This job no longer exists." })); },
  }));

  // The log: the last lines of each replica, then what it writes, bounded in the page.
  let logSource = null;
  function followLog() {
    if (logSource) logSource.close();
    log.replaceChildren();
    const replica = replicaSelect.value;
    const url = api + "/logs" + (replica ? "?replica=" + encodeURIComponent(replica) : "");
    logSource = stream(url, {
      lines: (batch) => {
        const stick = log.scrollTop + log.clientHeight >= log.scrollHeight - 4;
        log.append(...batch.map(([r, text]) => el("div", { class: "line" }, replica ? null : el("span", { class: "r", text: r }), text)));
        while (log.childElementCount > MAX_LOG_LINES) log.firstElementChild.remove();
        if (stick) log.scrollTop = log.scrollHeight;
      },
      end: () => { log.append(el("div", { class: "muted end", text: "--- the job has finished: end of log ---" })); logSource.close(); },
      failed: (e) => { log.append(el("div", { class: "error", text: e.error })); logSource.close(); },
    });
  }
  replicaSelect.addEventListener("change", followLog);
  followLog();

  // Metric curves: one chart per metric, one series per replica.
  const curves = new MetricCurves(charts);
  const metricSource = stream(api + "/metrics", {
    points: (batch) => curves.add(batch),
    end: () => metricSource.close(),
    failed: () => metricSource.close(),
  });
  sources.push(metricSource);
  return () => { sources.forEach((s) => s.close()); if (logSource) logSource.close(); curves.destroy(); };
}

// Bounded series: past MAX_POINTS, every other point is dropped and only every `stride`-th new
// point is kept, so a curve keeps its whole shape in a fixed amount of memory.
class Series {
  constructor() { this.xs = []; this.ys = []; this.stride = 1; this.seen = 0; }
  add(x, y) {
    if (this.seen++ % this.stride !== 0) return;
    this.xs.push(x); this.ys.push(y);
    if (this.xs.length > MAX_POINTS) {
      this.xs = this.xs.filter((_, i) => i % 2 === 0); this.ys = this.ys.filter((_, i) => i % 2 === 0);
      this.stride *= 2;
    }
  }
}

class MetricCurves {
  constructor(container) {
    this.container = container; this.metrics = new Map(); this.plots = new Map(); this.timer = null;
    this.skipped = new Set(); // names past MAX_CHARTS, counted (at most MAX_CHARTS + 1 kept)
    container.append(el("p", { class: "muted", id: "no-metrics", text: "No metric lines yet (name=value, e.g. loss=0.12 step=3)." }));
  }
  add(batch) {
    for (const point of batch) {
      for (const [metric, value] of Object.entries(point.values)) {
        if (!this.metrics.has(metric)) {
          if (this.metrics.size >= MAX_CHARTS) { if (this.skipped.size <= MAX_CHARTS) this.skipped.add(metric); continue; }
          this.metrics.set(metric, new Map());
        }
        const byReplica = this.metrics.get(metric);
        if (!byReplica.has(point.replica)) byReplica.set(point.replica, new Series());
        const series = byReplica.get(point.replica);
        // Without a printed step, the n-th value of this metric from this replica is step n.
        series.add(point.step === null ? series.seen + 1 : point.step, value);
      }
    }
    if (!this.timer) this.timer = setTimeout(() => { this.timer = null; this.draw(); }, 250);
  }
  draw() {
    if (typeof uPlot === "undefined") return;
    const none = document.getElementById("no-metrics");
    if (none && this.metrics.size) none.remove();
    if (this.skipped.size && !document.getElementById("charts-capped")) {
      this.container.prepend(el("p", { class: "muted", id: "charts-capped", text: "Only the first " + MAX_CHARTS + " metrics are drawn; this job prints more." }));
    }
    for (const [metric, byReplica] of this.metrics) {
      const replicas = [...byReplica.keys()].sort();
      const xs = [...new Set(replicas.flatMap((r) => byReplica.get(r).xs))].sort((a, b) => a - b);
      const columns = replicas.map((r) => {
        const s = byReplica.get(r); const at = new Map(s.xs.map((x, i) => [x, s.ys[i]]));
        return xs.map((x) => (at.has(x) ? at.get(x) : null));
      });
      const key = replicas.join(",");
      let entry = this.plots.get(metric);
      if (entry && entry.key !== key) { entry.plot.destroy(); entry.box.remove(); entry = null; }
      if (!entry) {
        const box = el("div", { class: "chart", "data-metric": metric }, el("h3", { text: metric }));
        this.container.append(box);
        const opts = {
          width: CHART_WIDTH, height: CHART_HEIGHT, spanGaps: true,
          scales: { x: { time: false } },
          axes: [{ label: "step" }, yAxis("")],
          series: [{ label: "step" }, ...replicas.map((r, i) => ({ label: r, stroke: COLORS[i % COLORS.length], width: 2, points: { show: xs.length < 60 } }))],
        };
        entry = { key, box, plot: new uPlot(opts, [xs, ...columns], box) };
        this.plots.set(metric, entry);
      } else {
        entry.plot.setData([xs, ...columns]);
      }
    }
  }
  destroy() { clearTimeout(this.timer); for (const { plot } of this.plots.values()) plot.destroy(); }
}

// --- tuning studies ------------------------------------------------------------------------------
function studiesView() {
  const body = el("div", { id: "studies" });
  main.append(el("h1", { text: "Tuning studies" }), body);
  getJSON("/api/studies").then((data) => {
    const rows = data.studies.map((s) => el("tr", {},
      el("td", {}, el("a", { href: "#/study/" + encodeURIComponent(s.name), class: "study-link", text: s.name })),
      el("td", { text: s.kind }), el("td", { text: s.template }), el("td", { text: s.metric + " (" + s.mode + ")" }),
      el("td", { text: Object.entries(s.params).map(([k, v]) => k + "=" + v).join(" ") }),
      el("td", { text: s.started ? new Date(s.started * 1000).toLocaleString() : "" })));
    body.replaceChildren(el("p", { class: "muted", text: "from " + data.root + " (trainop ui --studies DIR)" }),
      rows.length ? table(["Study", "Kind", "Template", "Objective", "Search space", "Started"], rows, { id: "study-table" })
        : el("p", { class: "muted", text: "No study of `trainop tune` there yet." }));
    setLive(true, "loaded");
  }).catch((err) => body.replaceChildren(el("p", { class: "error", text: String(err.message) })));
  return () => {};
}

function studyView(name) {
  const body = el("div", { id: "study" });
  main.append(el("h1", { id: "study-name", text: name }), body);
  let timer = null; let stopped = false; let plots = [];
  const paramSelect = el("select", { id: "param" });
  let last = null;

  function scatter(study) {
    const param = paramSelect.value;
    const points = study.trials.filter((t) => typeof t.params[param] === "number" && t.metric !== null)
      .map((t) => [t.params[param], t.metric]).sort((a, b) => a[0] - b[0]);
    const box = el("div", { class: "chart", id: "scatter" }, el("h3", { text: study.metric + " against " + param }));
    if (typeof uPlot === "undefined" || !points.length) return box;
    const log = points.every(([x]) => x > 0) && points[points.length - 1][0] / points[0][0] > 50;
    const opts = {
      width: CHART_WIDTH, height: CHART_HEIGHT,
      scales: { x: { time: false, distr: log ? 3 : 1 } },
      axes: [{ label: param, values: (u, splits) => splits.map(number) }, yAxis(study.metric)],
      series: [{ label: param }, { label: study.metric, stroke: COLORS[0], paths: () => null, points: { show: true, size: 9, fill: COLORS[0] } }],
    };
    plots.push(new uPlot(opts, [points.map((p) => p[0]), points.map((p) => p[1])], box));
    return box;
  }

  function curves(study) {
    const box = el("div", { class: "chart", id: "trial-curves" }, el("h3", { text: study.metric + " per report, by trial" }));
    const trials = study.trials.filter((t) => t.history.length);
    if (typeof uPlot === "undefined" || !trials.length) return box;
    const xs = [...new Set(trials.flatMap((t) => t.history.map((p) => p[0])))].sort((a, b) => a - b);
    const columns = trials.map((t) => { const at = new Map(t.history); return xs.map((x) => (at.has(x) ? at.get(x) : null)); });
    const opts = {
      width: CHART_WIDTH, height: CHART_HEIGHT, spanGaps: true, scales: { x: { time: false } },
      axes: [{ label: "report" }, yAxis("")],
      series: [{ label: "report" }, ...trials.map((t, i) => ({ label: t.id, stroke: COLORS[i % COLORS.length], width: 2 }))],
    };
    plots.push(new uPlot(opts, [xs, ...columns], box));
    return box;
  }

  function render(study) {
    plots.forEach((p) => p.destroy()); plots = [];
    const names = [...new Set(study.trials.flatMap((t) => Object.keys(t.params)))].sort();
    const chosen = paramSelect.value;
    paramSelect.replaceChildren(...names.map((n) => el("option", { value: n, text: n })));
    if (names.includes(chosen)) paramSelect.value = chosen;
    const rows = study.trials.map((t) => el("tr", { "data-trial": t.id },
      el("td", {}, t.best ? el("span", { class: "best", title: "best", text: "★ " }) : null, t.id),
      el("td", {}, t.job ? el("a", { href: jobHref(study.namespace, t.job), text: t.job }) : ""),
      el("td", { text: Object.entries(t.params).map(([k, v]) => k + "=" + v).join(" ") }),
      stateCell(t.state),
      el("td", { class: "num", text: t.metric === null ? "-" : Number(t.metric).toPrecision(6) }),
      el("td", { text: t.reason })));
    body.replaceChildren(
      el("div", { class: "meta" },
        el("span", {}, el("b", { text: "template" }), study.template + " (" + study.kind + ")"),
        el("span", {}, el("b", { text: "objective" }), study.metric + " (" + study.mode + ")"),
        el("span", {}, el("b", { text: "search space" }), Object.entries(study.params).map(([k, v]) => k + "=" + v).join(" "))),
      el("h2", { text: "Trials" }),
      study.trials.length ? table(["Trial", "Job", "Parameters", "State", study.metric, "Reason"], rows, { id: "trials" })
        : el("p", { class: "muted", text: "No trial saved yet: Ray Tune saves the study every few seconds." }),
      el("h2", { text: "Parameter against objective" }), el("div", { class: "toolbar" }, paramSelect),
      el("div", { class: "charts" }, scatter(study), curves(study)));
  }
  paramSelect.addEventListener("change", () => last && render(last));

  async function refresh() {
    try {
      last = await getJSON("/api/studies/" + encodeURIComponent(name));
      render(last);
      const running = !last.trials.length || last.trials.some((t) => ["Pending", "Running", "Paused"].includes(t.state));
      setLive(running, running ? "live" : "finished");
      if (running && !stopped) timer = setTimeout(refresh, 2000);
    } catch (err) {
      body.replaceChildren(el("p", { class: "error", text: String(err.message) }));
    }
  }
  refresh();
  return () => { stopped = true; clearTimeout(timer); plots.forEach((p) => p.destroy()); };
}

window.addEventListener("hashchange", route);
route();
