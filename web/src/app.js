/**
 * The demo page: inspect a local file, load a model URL with a progress bar, chat with it,
 * and manage the shard cache. All work happens in the worker (client.js); this file only
 * renders. Settings come from `site/config.json` (written by `apr web` and by `apr compile
 * --target web`) and the query string (`?pyodide=314|017&indexURL=…&model=…`).
 */
import { AprClient } from "./client.js";

const $ = (id) => document.getElementById(id);
const apr = new AprClient();
window.apr = apr;  // for scripting and the browser tests

const fmtBytes = (n) => {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  for (; n >= 1024 && i < units.length - 1; i++) n /= 1024;
  return `${i ? n.toFixed(1) : n} ${units[i]}`;
};
const fmtNum = (x) => (x === undefined || x === null ? "" : Math.abs(x) >= 1e4 || (x !== 0 && Math.abs(x) < 1e-3) ? x.toExponential(3) : x.toFixed(4));
const el = (tag, attrs = {}, ...children) => {
  const node = document.createElement(tag);
  Object.assign(node, attrs);
  for (const child of children) node.append(child);
  return node;
};

async function loadConfig() {
  let config = {};
  try {
    const response = await fetch("site/config.json");
    if (response.ok) config = await response.json();
  } catch (err) { /* no site config: defaults */ }
  const query = new URLSearchParams(location.search);
  if (query.get("pyodide")) config.flavor = query.get("pyodide");
  if (query.get("indexURL")) config.indexURL = query.get("indexURL");
  if (query.get("numpy")) config.numpy = query.get("numpy") === "1";
  if (query.get("kernels")) config.kernels = query.get("kernels");
  if (query.get("backend")) config.backend = query.get("backend");   // webgpu | cpu | auto
  if (query.get("threads")) config.threads = Number(query.get("threads"));  // default: every core
  if (query.get("hfEndpoint")) config.hfEndpoint = query.get("hfEndpoint");  // else apr web --hf-endpoint
  for (const key of ["chunkSize", "maxBytes"]) {  // shard cache settings (see shard_cache.js)
    if (query.get(key)) config.cache = { ...(config.cache || {}), [key]: Number(query.get(key)) };
  }
  config.defaultModel = query.get("model") || config.defaultModel || (config.models || [])[0]?.url || "";
  return config;
}

function showError(err) {
  $("error").textContent = err ? (err.code ? `${err.message}` : String(err)) : "";
  $("error").dataset.code = err && err.code || "";
  $("error").classList.toggle("hidden", !err);
}

// ------------------------------------------------------------------ tabs

for (const tab of document.querySelectorAll(".tab")) {
  tab.addEventListener("click", () => {
    document.querySelectorAll(".tab").forEach((t) => t.classList.toggle("active", t === tab));
    document.querySelectorAll(".panel").forEach((p) => p.classList.toggle("active", p.id === `tab-${tab.dataset.tab}`));
    if (tab.dataset.tab === "cache") renderCache();
  });
}

// ------------------------------------------------------------------ loading + progress

const shardItems = new Map();
apr.on("progress", (p) => {
  $("load-status").classList.remove("hidden");
  $("load-bar").style.width = `${p.total ? (100 * p.loaded) / p.total : 0}%`;
  $("load-numbers").textContent = `${fmtBytes(p.loaded)} of ${fmtBytes(p.total)}`;
  $("load-title").textContent = p.phase === "cache" ? "Loading from this device's cache" : "Downloading";
  if (p.shard) {
    let item = shardItems.get(p.shard);
    if (!item) {
      item = el("li");
      shardItems.set(p.shard, item);
      $("shard-list").append(item);
    }
    const pct = p.shardTotal ? Math.round((100 * p.shardLoaded) / p.shardTotal) : 0;
    item.textContent = `${p.shard} · ${p.fromCache ? "cached" : `${pct}%`}`;
    item.className = p.fromCache ? "cached" : pct === 100 ? "done" : "";
  }
});

// An hf:// reference names one file of a Hub repository: show which, at which commit.
apr.on("resolved", (r) => {
  $("load-status").classList.remove("hidden");
  const sha = r.sha256 ? ` · sha256 ${r.sha256.slice(0, 12)}…` : "";
  $("shard-list").append(el("li", { className: "resolved",
    textContent: `${r.reference} → ${r.repo}/${r.file} @ ${r.commit.slice(0, 12)}${sha}` }));
});

async function loadModel(url) {
  showError(null);
  shardItems.clear();
  $("shard-list").replaceChildren();
  $("load-button").disabled = true;
  $("chat").classList.add("hidden");
  try {
    await booted;
    const info = await apr.load(url, { backend: $("backend").value });
    $("load-title").textContent = "Ready";
    $("load-bar").style.width = "100%";
    // WebGPU's adapter, or the CPU kernels with the reason there is no GPU
    device = info.adapter ? `WebGPU (${info.adapter})` : `CPU, ${info.kernels}` +
      ($("backend").value === "cpu" || !info.gpu_reason ? "" : ` (no WebGPU: ${info.gpu_reason})`);
    document.body.dataset.backend = info.adapter ? "webgpu" : "cpu";
    $("model-info").textContent = `${url} · ${info.arch} · ${info.layers} layers · vocabulary ${info.vocab} · ${device}`;
    $("messages").replaceChildren();
    conversation.length = 0;
    $("chat").classList.remove("hidden");
    $("prompt").focus();
    document.body.dataset.model = "ready";
  } catch (err) {
    $("load-status").classList.add("hidden");
    showError(err);
    document.body.dataset.model = "error";
  } finally {
    $("load-button").disabled = false;
  }
}

$("load-form").addEventListener("submit", (event) => {
  event.preventDefault();
  const url = $("model-url").value.trim();
  if (url) loadModel(url);
});

// ------------------------------------------------------------------ chat

const conversation = [];
let streaming = null;
let device = "";   // where the loaded model runs, shown next to the speed
apr.on("token", (t) => {
  if (!streaming) return;
  streaming.textContent += t.text;
  $("messages").scrollTop = $("messages").scrollHeight;
});

async function send(text) {
  conversation.push({ role: "user", content: text });
  $("messages").append(el("div", { className: "msg user", textContent: text }));
  streaming = el("div", { className: "msg assistant streaming" });
  $("messages").append(streaming);
  $("send").disabled = true;
  document.body.dataset.chat = "busy";
  try {
    const result = await apr.chat(conversation, { maxTokens: 96 });
    streaming.textContent = result.text;
    conversation.push({ role: "assistant", content: result.text });
    const speed = result.decode_tok_s ? ` · ${result.decode_tok_s.toFixed(1)} tokens/s` : "";
    $("speed").textContent = `${result.tokens} tokens${speed} · prompt ${result.prompt_tokens} tokens in ${result.prefill_s.toFixed(2)} s`;
    apr.memory().then((held) => {   // the weights' memory and Python's, next to the speed
      const mb = (n) => (n / 2 ** 20).toFixed(0);
      const weights = held.gpu ? `${mb(held.gpu)} MB GPU` : `${mb(held.kernels)} MB weights`;
      $("speed").textContent += ` · memory ${weights} + ${mb(held.python)} MB Python · ${device}` +
        (held.gpu ? "" : runtimeInfo.threads > 1 ? ` · ${runtimeInfo.threads} threads` : " · 1 thread");
    }, () => {});
  } catch (err) {
    showError(err);
  } finally {
    streaming.classList.remove("streaming");
    streaming = null;
    $("send").disabled = false;
    document.body.dataset.chat = "done";
  }
}

$("chat-form").addEventListener("submit", (event) => {
  event.preventDefault();
  const text = $("prompt").value.trim();
  if (!text || streaming) return;
  $("prompt").value = "";
  send(text);
});

// ------------------------------------------------------------------ inspect a local file

function renderSummary(info) {
  const stat = (label, value) => el("div", { className: "stat" }, el("span", { className: "muted small", textContent: label }), el("b", { textContent: value }));
  const flags = el("div", { className: "stat" }, el("span", { className: "muted small", textContent: "flags" }),
    el("span", {}, ...(info.flags.length ? info.flags : ["none"]).map((f) => el("span", { className: "badge", textContent: f }))));
  const bytes = info.tensors.reduce((sum, t) => sum + t.stored, 0);
  $("summary").replaceChildren(stat("file", info.name), stat("format", info.format), stat("tensors", String(info.tensors.length)),
    stat("parameters", info.parameters.toLocaleString()), stat("tensor data", fmtBytes(bytes)), flags);
  const rows = Object.entries(info.metadata).map(([key, value]) => {
    const text = value && value.preview ? `${JSON.stringify(value.preview).slice(0, 300)} … (${value.length} items)` : JSON.stringify(value);
    return el("tr", {}, el("td", { textContent: key }), el("td", { textContent: text.length > 600 ? `${text.slice(0, 600)} …` : text }));
  });
  $("meta-table").replaceChildren(...rows);
  const body = $("tensor-table").tBodies[0];
  body.replaceChildren(...info.tensors.map((t) => {
    const row = el("tr", { id: `t-${t.name}` }, el("td", { className: "mono", textContent: t.name }), el("td", { textContent: t.dtype }),
      el("td", { textContent: `[${t.shape.join(", ")}]` }), el("td", { className: "num", textContent: fmtBytes(t.stored) }));
    for (let i = 0; i < 4; i++) row.append(el("td", { className: "num muted", textContent: "…" }));
    return row;
  }));
}

apr.on("stats", (s) => {
  const row = document.getElementById(`t-${s.name}`);
  if (!row) return;
  const cells = row.querySelectorAll("td");
  [s.min, s.max, s.mean, s.std].forEach((v, i) => {
    cells[4 + i].textContent = s.error ? "—" : fmtNum(v);
    cells[4 + i].classList.remove("muted");
  });
  if (s.nan || s.inf) row.title = `${s.nan} NaN, ${s.inf} Inf`;
});

$("file").addEventListener("change", async () => {
  const file = $("file").files[0];
  if (!file) return;
  showError(null);
  try {
    await booted;
    const info = await apr.inspect(file);
    renderSummary(info);
    $("inspect-out").classList.remove("hidden");
    if (runtimeInfo.numpy) await apr.stats(file.name);
  } catch (err) {
    showError(err);
    document.querySelector('[data-tab="chat"]').click();
  }
});

$("tensor-filter").addEventListener("input", () => {
  const needle = $("tensor-filter").value.toLowerCase();
  for (const row of $("tensor-table").tBodies[0].rows) row.hidden = !row.cells[0].textContent.toLowerCase().includes(needle);
});

// ------------------------------------------------------------------ cache

async function renderCache() {
  await booted;
  const models = await apr.cacheModels();
  $("cache-table").tBodies[0].replaceChildren(...(models.length ? models.map((m) => el("tr", {},
    el("td", { className: "mono", textContent: m.model }), el("td", { className: "num", textContent: String(m.shards) }),
    el("td", { className: "num", textContent: fmtBytes(m.bytes) }), el("td", { textContent: new Date(m.lastUsed).toLocaleString() }),
    el("td", { textContent: m.complete ? "verified" : "partial download" }))) : [el("tr", {}, el("td", { colSpan: 5, className: "muted", textContent: "Nothing cached yet." }))]));
}

$("clear-cache").addEventListener("click", async () => {
  await apr.cacheClear();
  renderCache();
});

// ------------------------------------------------------------------ boot

let runtimeInfo = {};
const booted = (async () => {
  const config = await loadConfig();
  $("model-url").value = config.defaultModel;
  if (config.backend) $("backend").value = config.backend;
  $("model-list").replaceChildren(...(config.models || []).map((m) => el("option", { value: m.url, label: m.name || m.url })));
  try {
    runtimeInfo = await apr.boot(config);
    const threads = runtimeInfo.threads > 1 ? ` · ${runtimeInfo.threads} threads`
      : runtimeInfo.kernels === "wasm-simd" && !runtimeInfo.isolated ? " · 1 thread (page not cross-origin isolated)" : "";
    const simd = runtimeInfo.kernels === "wasm-simd"
      ? (runtimeInfo.precision === "relaxed" ? " · relaxed SIMD" : " · SIMD") + threads : "";
    const gpu = runtimeInfo.gpu ? ` · WebGPU ${runtimeInfo.gpu}` : "";
    $("runtime").textContent = `Python ${runtimeInfo.python}${runtimeInfo.numpy ? " · numpy" : ""}${simd}${gpu} · Pyodide ${runtimeInfo.flavor === "017" ? "0.17" : "314"}`;
    $("runtime").title = runtimeInfo.gpu ? "Python runtime; WebGPU adapter" : `Python runtime; no WebGPU: ${runtimeInfo.gpuReason}`;
    $("runtime").className = "pill pill-ok";
    document.body.dataset.runtime = "ready";
    // A compiled site (apr compile --target web) names its bundled model: load it on open.
    if (config.autoload && config.defaultModel) loadModel(config.defaultModel);
  } catch (err) {
    $("runtime").textContent = "Python failed to start";
    $("runtime").className = "pill pill-bad";
    showError(err);
    document.body.dataset.runtime = "error";
    throw err;
  }
})();
