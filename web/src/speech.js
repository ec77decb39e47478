/**
 * The speech page: load a Whisper APR file, then drop/pick an audio file or record with the
 * microphone. The browser decodes the sound (WebAudio `decodeAudioData`, any format it
 * plays) and resamples it to mono 16 kHz float32 (an OfflineAudioContext); the worker
 * (speech_worker.js) runs apr_core's Whisper on the samples. Shows the text, the segments
 * with their times and the real-time factor. Settings: `site/config.json` (written by
 * `apr web`) and the query string (`?pyodide=017|314&indexURL=…&model=…&kernels=simd|numpy`).
 */
import { AprClient } from "./client.js";

export const SAMPLE_RATE = 16000;  // Whisper's input rate

const $ = (id) => document.getElementById(id);
const speech = new AprClient(new URL("./speech_worker.js", import.meta.url));
window.speech = speech;  // for scripting and the browser tests

const el = (tag, attrs = {}, ...children) => {
  const node = document.createElement(tag);
  Object.assign(node, attrs);
  for (const child of children) node.append(child);
  return node;
};
const fmtTime = (s) => {
  const m = Math.floor(s / 60);
  return `${m}:${(s - 60 * m).toFixed(2).padStart(5, "0")}`;
};

async function loadConfig() {
  let config = {};
  try {
    const response = await fetch("site/config.json");
    if (response.ok) config = await response.json();
  } catch (err) { /* no site config: defaults */ }
  const query = new URLSearchParams(location.search);
  // Whisper needs numpy, which only Pyodide 0.17 ships offline: 017 unless asked otherwise.
  config.flavor = query.get("pyodide") || "017";
  if (query.get("indexURL")) config.indexURL = query.get("indexURL");
  if (query.get("kernels")) config.kernels = query.get("kernels");  // simd (default) | simd-exact | simd-f32 | numpy
  if (query.get("threads")) config.threads = Number(query.get("threads"));
  const speechModels = (config.models || []).filter((m) => m.kind === "speech");
  config.defaultModel = query.get("model") || (speechModels[0] || {}).url || "";
  config.speechModels = speechModels;
  return config;
}

function showError(err) {
  $("error").textContent = err ? (err.code ? err.message : String(err)) : "";
  $("error").dataset.code = (err && err.code) || "";
  $("error").classList.toggle("hidden", !err);
}

/**
 * Any audio the browser can decode -> Float32Array of mono samples at 16 kHz. Decoding
 * with a 16 kHz context resamples once; more than one channel is mixed down by rendering
 * through a one-channel OfflineAudioContext (WebAudio's speaker down-mix: the mean).
 */
export async function decodeToMono16k(arrayBuffer) {
  const decoder = new OfflineAudioContext(1, 1, SAMPLE_RATE);
  const decoded = await decoder.decodeAudioData(arrayBuffer);
  if (decoded.numberOfChannels === 1 && decoded.sampleRate === SAMPLE_RATE) {
    return decoded.getChannelData(0).slice();
  }
  const frames = Math.max(1, Math.ceil(decoded.duration * SAMPLE_RATE));
  const mixer = new OfflineAudioContext(1, frames, SAMPLE_RATE);
  const source = mixer.createBufferSource();
  source.buffer = decoded;
  source.connect(mixer.destination);
  source.start();
  return (await mixer.startRendering()).getChannelData(0).slice();
}

// ------------------------------------------------------------------ model

speech.on("progress", (p) => {
  $("load-status").classList.remove("hidden");
  $("load-bar").style.width = `${p.total ? (100 * p.loaded) / p.total : 0}%`;
  $("load-numbers").textContent = `${(p.loaded / 2 ** 20).toFixed(1)} of ${(p.total / 2 ** 20).toFixed(1)} MiB`;
});

const KERNEL_LABELS = { "wasm-simd": "SIMD block kernels", "wasm-simd-f32": "SIMD float32 matmul" };

async function loadModel(url) {
  showError(null);
  $("load-button").disabled = true;
  $("speech").classList.add("hidden");
  document.body.dataset.model = "loading";
  try {
    await booted;
    $("load-title").textContent = "Downloading";
    const info = await speech.call("load", new URL(url, location.href).href);
    $("load-title").textContent = `Ready · ${info.fromCache ? "from the browser's cache · " : ""}loaded in ${info.load_s.toFixed(1)} s · ${KERNEL_LABELS[info.kernels] || "numpy matmul"}`;
    document.body.dataset.kernels = info.kernels;
    document.body.dataset.modelSource = info.fromCache ? "cache" : "network";
    $("load-bar").style.width = "100%";
    $("speech").classList.remove("hidden");
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

// ------------------------------------------------------------------ transcription

function renderResult(result) {
  $("transcript").textContent = result.text.trim();
  $("segments").tBodies[0].replaceChildren(...result.segments.map((s) => el("tr", {},
    el("td", { className: "num", textContent: fmtTime(s.start) }),
    el("td", { className: "num", textContent: fmtTime(s.end) }),
    el("td", { textContent: s.text.trim() }))));
  const language = result.language ? ` · language ${result.language}` : "";
  $("rtf").textContent = `${result.audio_s.toFixed(1)} s of audio in ${result.wall_s.toFixed(1)} s · ` +
    `real-time factor ${result.rtf.toFixed(2)}×${language}`;
  $("result").classList.remove("hidden");
}

/** Decode, send the samples to the worker, show the result (window.lastSpeech keeps it). */
async function transcribeAudio(arrayBuffer) {
  showError(null);
  document.body.dataset.speech = "busy";
  $("rtf").textContent = "transcribing…";
  try {
    const samples = await decodeToMono16k(arrayBuffer);
    window.lastSamples = samples.slice();  // tests compare these with native apr
    const options = { language: $("language").value.trim() || null, task: $("task").value };
    const result = await speech.call("transcribe", samples.buffer, options);
    window.lastSpeech = result;
    renderResult(result);
    document.body.dataset.speech = "done";
  } catch (err) {
    showError(err);
    document.body.dataset.speech = "error";
  }
}

$("audio-file").addEventListener("change", async () => {
  const file = $("audio-file").files[0];
  if (file) await transcribeAudio(await file.arrayBuffer());
  $("audio-file").value = "";
});

const drop = $("drop");
drop.addEventListener("dragover", (event) => event.preventDefault());
drop.addEventListener("drop", async (event) => {
  event.preventDefault();
  const file = event.dataTransfer.files[0];
  if (file) await transcribeAudio(await file.arrayBuffer());
});

// The microphone: MediaRecorder's chunks (webm/opus in Chromium) decode like a file.
let recorder = null;
$("record").addEventListener("click", async () => {
  if (recorder) {
    recorder.stop();
    return;
  }
  try {
    const stream = await navigator.mediaDevices.getUserMedia({ audio: true });
    const chunks = [];
    recorder = new MediaRecorder(stream);
    recorder.ondataavailable = (event) => chunks.push(event.data);
    recorder.onstop = async () => {
      stream.getTracks().forEach((track) => track.stop());
      recorder = null;
      $("record").textContent = "● Record";
      const blob = new Blob(chunks, { type: chunks[0] ? chunks[0].type : "audio/webm" });
      await transcribeAudio(await blob.arrayBuffer());
    };
    recorder.start();
    $("record").textContent = "■ Stop";
  } catch (err) {
    showError(new Error(`cannot record: ${err.message || err}`));
  }
});

// ------------------------------------------------------------------ boot

const booted = (async () => {
  const config = await loadConfig();
  $("model-url").value = config.defaultModel;
  $("model-list").replaceChildren(...config.speechModels.map((m) => el("option", { value: m.url, label: m.name || m.url })));
  try {
    const info = await speech.call("boot", { base: location.href, ...config });
    const simd = info.kernels === "wasm-simd" ? ` · SIMD · ${info.threads} thread${info.threads > 1 ? "s" : ""}` : "";
    $("runtime").textContent = `Python ${info.python}${info.numpy ? " · numpy" : ""}${simd} · Pyodide ${info.flavor === "017" ? "0.17" : "314"}`;
    $("runtime").className = "pill pill-ok";
    document.body.dataset.runtime = "ready";
  } catch (err) {
    $("runtime").textContent = "Python failed to start";
    $("runtime").className = "pill pill-bad";
    showError(err);
    document.body.dataset.runtime = "error";
    throw err;
  }
})();
