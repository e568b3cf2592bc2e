// vaswani serve's page: a model picker, streamed translation and generation, and a heatmap of the
// attention of the last translation or prompt. Plain JavaScript, no build step, nothing fetched
// but this server's own /v1 endpoints.
"use strict";

const state = {
  apiKey: sessionStorage.getItem("vaswani-api-key") || "",
  models: [],
  attention: null, // the last /v1/attention answer
  running: null, // the AbortController of the request in flight
};

const $ = (id) => document.getElementById(id);

// --- talking to the server ----------------------------------------------------------------------

function headers() {
  const result = { "Content-Type": "application/json" };
  if (state.apiKey) result.Authorization = `Bearer ${state.apiKey}`;
  return result;
}

// The one line an error answer carries ({"error": {"message", "param"}}), else the HTTP status.
async function errorOf(response) {
  try {
    const body = await response.json();
    if (body.error && body.error.message) return body.error.message;
  } catch (ignored) {
    // not JSON: the status line says it
  }
  return `${response.status} ${response.statusText}`;
}

async function getJson(path) {
  const response = await fetch(path, { headers: headers() });
  if (!response.ok) throw new Error(await errorOf(response));
  return response.json();
}

async function postJson(path, body, signal) {
  const response = await fetch(path, { method: "POST", headers: headers(), body: JSON.stringify(body), signal });
  if (!response.ok) throw new Error(await errorOf(response));
  return response.json();
}

// POST `body` with stream: true and call onEvent(object) for each server-sent event, in order,
// until "data: [DONE]". The body is read with a stream reader, so each event is handled as it
// arrives; a UTF-8 character cut between two network chunks is joined by the TextDecoder.
async function postStream(path, body, onEvent, signal) {
  const response = await fetch(path, {
    method: "POST", headers: headers(), body: JSON.stringify({ ...body, stream: true }), signal,
  });
  if (!response.ok) throw new Error(await errorOf(response));
  const reader = response.body.getReader();
  const decoder = new TextDecoder("utf-8");
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    buffer += decoder.decode(value || new Uint8Array(), { stream: !done });
    let end;
    while ((end = buffer.search(/\r?\n\r?\n/)) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end).replace(/^\r?\n\r?\n/, "");
      const data = block.split(/\r?\n/).filter((line) => line.startsWith("data:"))
        .map((line) => line.slice(5).replace(/^ /, "")).join("\n");
      if (data === "[DONE]") return;
      if (data) onEvent(JSON.parse(data));
    }
    if (done) return;
  }
}

// The new text of one streamed chunk: a completion chunk's choices[0].text (OpenAI's shape), a
// translation chunk's text; an error event ends the stream with its message.
function pieceOf(event) {
  if (event.error) throw new Error(event.error.message);
  if (event.choices) return event.choices[0].text || "";
  return event.text || "";
}

// --- status and busy state ----------------------------------------------------------------------

function say(message, isError = false) {
  const status = $("status");
  status.textContent = message;
  status.classList.toggle("error", isError);
}

function setBusy(busy) {
  for (const id of ["translate-button", "generate-button"]) $(id).disabled = busy;
}

// Run `work(signal)`, one request at a time: a new one aborts the one in flight.
async function exclusive(work) {
  if (state.running) state.running.abort();
  const controller = new AbortController();
  state.running = controller;
  setBusy(true);
  try {
    await work(controller.signal);
  } catch (error) {
    if (error.name !== "AbortError") say(error.message, true);
  } finally {
    if (state.running === controller) {
      state.running = null;
      setBusy(false);
    }
  }
}

// --- models -------------------------------------------------------------------------------------

function selectedModel() {
  return state.models.find((card) => card.id === $("model").value);
}

function showPanels() {
  const card = selectedModel();
  const endpoints = card ? card.endpoints || [] : [];
  $("translate-panel").hidden = !endpoints.includes("/v1/translations");
  $("generate-panel").hidden = !endpoints.includes("/v1/completions");
  $("model-task").textContent = card ? `task: ${card.task}` : "";
}

async function loadModels() {
  try {
    const list = await getJson("/v1/models");
    state.models = list.data;
  } catch (error) {
    state.models = [];
    say(`${error.message}${state.apiKey ? "" : " (enter the API key above)"}`, true);
    $("key-box").open = true;
  }
  const picker = $("model");
  const previous = picker.value;
  picker.replaceChildren(...state.models.map((card) => new Option(`${card.id} (${card.task})`, card.id)));
  if (state.models.some((card) => card.id === previous)) picker.value = previous;
  showPanels();
  if (state.models.length) say(`${state.models.length} model(s) served`);
}

function useKey(event) {
  event.preventDefault();
  state.apiKey = $("api-key").value.trim();
  if (state.apiKey) sessionStorage.setItem("vaswani-api-key", state.apiKey);
  else sessionStorage.removeItem("vaswani-api-key");
  $("key-state").textContent = state.apiKey ? "set" : "none";
  loadModels();
}

// --- translation and generation -----------------------------------------------------------------

// Stream `body` to `path`, appending each piece to `output`; data-events counts the chunks that
// carried text and data-done is set when the stream has ended.
async function streamInto(output, path, body, signal) {
  output.textContent = "";
  output.dataset.events = "0";
  delete output.dataset.done;
  await postStream(path, body, (event) => {
    const piece = pieceOf(event);
    if (!piece) return;
    output.textContent += piece;
    output.dataset.events = String(Number(output.dataset.events) + 1);
  }, signal);
  output.dataset.done = "true";
}

function translate(event) {
  event.preventDefault();
  const model = $("model").value;
  const input = $("source").value;
  exclusive(async (signal) => {
    say("translating…");
    await streamInto($("translation"), "/v1/translations", { model, input }, signal);
    say("");
    await showAttention(model, input, signal);
  });
}

// A number field's value, or undefined when it is empty.
function numberOf(id) {
  const text = $(id).value.trim();
  return text === "" ? undefined : Number(text);
}

function generateText(event) {
  event.preventDefault();
  const model = $("model").value;
  const prompt = $("prompt").value;
  const body = {
    model, prompt,
    temperature: numberOf("temperature"),
    top_p: numberOf("top-p"),
    max_tokens: numberOf("max-tokens"),
    seed: numberOf("seed"),
  };
  exclusive(async (signal) => {
    say("generating…");
    await streamInto($("completion"), "/v1/completions", body, signal);
    say("");
    await showAttention(model, prompt, signal);
  });
}

// --- the attention view -------------------------------------------------------------------------

// The attention maps of `input` from /v1/attention, with the answer's title over them.
async function showAttention(model, input, signal) {
  state.attention = await postJson("/v1/attention", { model, input }, signal);
  const maps = state.attention.maps;
  $("attention-of").textContent = state.attention.title;
  $("attention-kind").replaceChildren(...maps.map((map, i) => new Option(map.name, String(i))));
  $("attention-panel").hidden = false;
  pickMap();
}

// Layers and heads are numbered from 0, as vaswani's PNGs, its --layers/--heads flags, the code and
// Hugging Face's outputs number them: the same head has the same number everywhere.
function numbered(select, count) {
  const previous = Number(select.value) || 0;
  select.replaceChildren(...Array.from({ length: count }, (_, i) => new Option(String(i), String(i))));
  select.value = String(Math.min(previous, count - 1));
}

function pickMap() {
  const map = state.attention.maps[Number($("attention-kind").value)];
  numbered($("attention-layer"), map.weights.length);
  numbered($("attention-head"), map.weights[0].length);
  drawAttention();
}

const SVG = "http://www.w3.org/2000/svg";
const CELL = 40;

function svgElement(name, attributes, text) {
  const element = document.createElementNS(SVG, name);
  for (const [key, value] of Object.entries(attributes)) element.setAttribute(key, String(value));
  if (text !== undefined) element.textContent = text;
  return element;
}

// The width in pixels of the longest of `labels` in the view's font.
function labelWidth(labels) {
  const context = document.createElement("canvas").getContext("2d");
  context.font = `13px ${getComputedStyle(document.body).fontFamily}`;
  return Math.max(0, ...labels.map((label) => context.measureText(label).width));
}

// White to the accent blue as the weight goes from 0 to 1.
function colour(weight) {
  const w = Math.max(0, Math.min(1, weight));
  const mix = (from, to) => Math.round(from + (to - from) * w);
  return `rgb(${mix(255, 31)}, ${mix(255, 95)}, ${mix(255, 174)})`;
}

// The chosen layer and head of the chosen map as an SVG heatmap: one rect per (query, key) with a
// <title> (the browser's hover text) naming both tokens and the weight; keys on top, queries left.
function drawAttention() {
  const map = state.attention.maps[Number($("attention-kind").value)];
  const layer = Number($("attention-layer").value);
  const head = Number($("attention-head").value);
  const grid = map.weights[layer][head];
  const caption = `rows: ${map.query_axis}; columns: ${map.key_axis}`;
  const left = labelWidth(map.queries) + 12;
  const top = labelWidth(map.keys) * 0.75 + 24;
  const width = left + Math.max(CELL * map.keys.length, labelWidth([caption])) + 8;
  const height = top + CELL * map.queries.length + 24;
  const svg = svgElement("svg", {
    width, height, viewBox: `0 0 ${width} ${height}`, role: "img",
    "aria-label": `${map.name} attention, layer ${layer}, head ${head}`,
  });
  map.keys.forEach((key, j) => {
    const x = left + CELL * j + CELL / 2;
    svg.append(svgElement("text", { x, y: top - 6, transform: `rotate(-50 ${x} ${top - 6})` }, key));
  });
  map.queries.forEach((query, i) => {
    const y = top + CELL * i + CELL / 2 + 4;
    svg.append(svgElement("text", { x: left - 6, y, "text-anchor": "end" }, query));
    grid[i].forEach((weight, j) => {
      const cell = svgElement("rect", {
        class: "cell", x: left + CELL * j, y: top + CELL * i, width: CELL - 1, height: CELL - 1,
        fill: colour(weight), "data-weight": weight,
      });
      const line = `${query} → ${map.keys[j]}: ${weight.toFixed(3)}`;
      cell.append(svgElement("title", {}, line));
      cell.addEventListener("mouseenter", () => { $("attention-weight").textContent = line; });
      svg.append(cell);
    });
  });
  svg.append(svgElement("text", { class: "axis", x: left, y: height - 6 }, caption));
  $("attention-view").replaceChildren(svg);
}

// --- start --------------------------------------------------------------------------------------

document.addEventListener("DOMContentLoaded", () => {
  $("api-key").value = state.apiKey;
  $("key-state").textContent = state.apiKey ? "set" : "none";
  $("key-form").addEventListener("submit", useKey);
  $("model").addEventListener("change", showPanels);
  $("translate-form").addEventListener("submit", translate);
  $("generate-form").addEventListener("submit", generateText);
  $("attention-kind").addEventListener("change", pickMap);
  $("attention-layer").addEventListener("change", drawAttention);
  $("attention-head").addEventListener("change", drawAttention);
  loadModels();
});
