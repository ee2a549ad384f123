// The openenv playground: one WebSocket session per page, driven through docs/protocol.md.
// Plain browser JavaScript, no build step and no dependency, so the server ships it as is.
"use strict";

(function () {
  // Everything is relative to the page (…/web/), so a proxy's path prefix is kept.
  const base = new URL("..", window.location.href);
  const wsBase = new URL(base.href);
  wsBase.protocol = base.protocol === "https:" ? "wss:" : "ws:";
  const KEY_STORE = "openenv-playground-key";
  const SUBPROTOCOL = "openenv.v1";
  const BEARER_PREFIX = "openenv.bearer.";
  const MAX_HISTORY = 500;

  const $ = (id) => document.getElementById(id);
  const renderers = [];
  const state = {
    socket: null, pending: new Map(), nextId: 1, schema: null, defs: {}, isMcp: false,
    history: [], step: 0, lastReply: null, sessionId: null, config: null,
  };

  // ---- public hook -------------------------------------------------------------------------
  // An environment's renderer.js calls openenvPlayground.registerRenderer(fn); fn(observation,
  // container, helpers) draws into container and returns true, or returns false to leave the
  // observation to the built-in views. helpers: {image, pre, json, el}.
  window.openenvPlayground = {
    registerRenderer(fn) { renderers.push(fn); if (state.lastReply) showReply(state.lastReply); },
    get lastReply() { return state.lastReply; },
    get sessionId() { return state.sessionId; },
  };

  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [name, value] of Object.entries(attrs || {})) {
      if (value === undefined || value === null || value === false) continue;
      if (name === "text") node.textContent = value;
      else if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
      else node.setAttribute(name, value === true ? "" : value);
    }
    for (const child of children) if (child != null) node.append(child);
    return node;
  }

  function setStatus(text, kind) { const s = $("status"); s.textContent = text; s.dataset.state = kind; }
  function showError(message) {
    const box = $("error");
    box.hidden = !message;
    box.textContent = message || "";
  }

  // ---- HTTP (schema, metadata) ---------------------------------------------------------------
  function apiKey() { return sessionStorage.getItem(KEY_STORE) || ""; }

  async function getJSON(path) {
    const headers = apiKey() ? { Authorization: "Bearer " + apiKey() } : {};
    const reply = await fetch(new URL(path, base), { headers });
    if (reply.status === 401) throw Object.assign(new Error("unauthorized"), { unauthorized: true });
    if (!reply.ok) throw new Error(path + ": HTTP " + reply.status);
    return reply.json();
  }

  function base64url(text) {
    const bytes = new TextEncoder().encode(text);
    let binary = "";
    for (const b of bytes) binary += String.fromCharCode(b);
    return btoa(binary).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
  }

  // ---- WebSocket session ---------------------------------------------------------------------
  function connect() {
    const protocols = [SUBPROTOCOL];
    if (apiKey()) protocols.push(BEARER_PREFIX + base64url(apiKey()));
    const socket = new WebSocket(new URL("ws", wsBase), protocols);
    state.socket = socket;
    setStatus("connecting…", "connecting");
    return new Promise((resolve, reject) => {
      socket.onmessage = (event) => {
        const frame = JSON.parse(event.data);
        if (frame.type === "session") {
          state.sessionId = frame.data.session_id;
          setStatus("session " + String(frame.data.session_id).slice(0, 8), "open");
          document.body.dataset.session = frame.data.session_id;
          resolve();
          return;
        }
        const waiter = state.pending.get(frame.id);
        if (waiter) { state.pending.delete(frame.id); waiter(frame); }
      };
      socket.onclose = (event) => {
        // An idle session is closed by the server (session timeout); a reload starts a new one.
        setStatus("disconnected" + (event.reason ? ": " + event.reason : "") + " (reload for a new session)", "closed");
        document.body.dataset.ready = "false";
        for (const waiter of state.pending.values()) {
          waiter({ type: "error", data: { message: "connection closed", code: "CONNECTION_LOST" } });
        }
        state.pending.clear();
        reject(new Error("the server refused the connection (API key or Origin?)"));
      };
    });
  }

  // Tests and tools wait on this counter: it grows once per answered reset, step or state.
  function answered() { document.body.dataset.replies = String(Number(document.body.dataset.replies || 0) + 1); }

  function request(type, data) {
    const id = state.nextId++;
    const frame = { type, id };
    if (data !== undefined) frame.data = data;
    return new Promise((resolve) => {
      state.pending.set(id, resolve);
      state.socket.send(JSON.stringify(frame));
    });
  }

  function errorText(data) {
    let text = (data.code ? data.code + ": " : "") + (data.detail || data.message || "error");
    if (data.category) text += " (" + data.category + ")";
    return text;
  }

  // ---- forms from JSON Schema ----------------------------------------------------------------
  function resolve(schema) {
    let current = schema || {};
    for (let hops = 0; current.$ref && hops < 32; hops++) {
      current = { ...state.defs[current.$ref.split("/").pop()], ...current, $ref: undefined };
    }
    const options = current.anyOf || current.oneOf;
    if (options) {
      const concrete = options.filter((option) => resolve(option).type !== "null");
      const nullable = concrete.length < options.length;
      if (concrete.length === 1) {
        return { ...current, ...resolve(concrete[0]), anyOf: undefined, oneOf: undefined, nullable };
      }
    }
    return current;
  }

  // Returns {node, read()}; read() gives the value or undefined (left empty).
  function fieldFor(name, rawSchema, required) {
    const schema = resolve(rawSchema);
    // The field's own title: a referenced model's title ("Point") would hide the field's name.
    const title = (rawSchema || {}).title || name.charAt(0).toUpperCase() + name.slice(1).replace(/_/g, " ");
    const desc = schema.description ? el("span", { class: "desc", text: schema.description }) : null;
    const inputId = "f-" + Math.random().toString(36).slice(2, 9);
    if (schema.const !== undefined) return { node: null, read: () => schema.const };
    if (schema.type === "object" && schema.properties) {
      const box = el("fieldset", { "data-field": name }, el("legend", { text: title }), desc);
      const fields = objectFields(schema, box);
      return { node: box, read: () => readObject(fields, required) };
    }
    let control;
    let read;
    const hasDefault = schema.default !== undefined && schema.default !== null;
    if (schema.enum) {
      control = el("select", { id: inputId, name });
      if (!required || schema.nullable) control.append(el("option", { value: "", text: "—" }));
      for (const value of schema.enum) {
        control.append(el("option", { value: JSON.stringify(value), text: String(value) }));
      }
      if (hasDefault) control.value = JSON.stringify(schema.default);
      read = () => (control.value === "" ? undefined : JSON.parse(control.value));
    } else if (schema.type === "boolean") {
      control = el("input", { id: inputId, name, type: "checkbox" });
      control.checked = Boolean(schema.default);
      read = () => control.checked;
      const label = el("label", { class: "check field", for: inputId }, control, title);
      return { node: el("div", { class: "field", "data-field": name }, label, desc), read };
    } else if (schema.type === "integer" || schema.type === "number") {
      const min = schema.minimum ?? (schema.exclusiveMinimum !== undefined ? schema.exclusiveMinimum : undefined);
      const max = schema.maximum ?? schema.exclusiveMaximum;
      control = el("input", {
        id: inputId, name, type: "number", min, max,
        step: schema.type === "integer" ? "1" : "any", list: inputId + "-choices",
      });
      if (hasDefault) control.value = schema.default;
      read = () => (control.value === "" ? undefined : Number(control.value));
    } else if (schema.type === "string") {
      const long = /message|code|text|prompt|content|answer|query|command/i.test(name) || (schema.maxLength || 0) > 200;
      control = long ? el("textarea", { id: inputId, name, rows: 3 })
        : el("input", { id: inputId, name, type: "text", list: inputId + "-choices", maxlength: schema.maxLength });
      if (hasDefault) control.value = schema.default;
      read = () => (control.value === "" && !required ? undefined : control.value);
    } else {
      // arrays, free-form objects, unions: JSON text
      control = el("textarea", { id: inputId, name, rows: 2, placeholder: schema.type === "array" ? "[ … ]" : "{ … }" });
      if (hasDefault) control.value = JSON.stringify(schema.default);
      read = () => {
        if (control.value.trim() === "") return undefined;
        try { return JSON.parse(control.value); } catch (err) { throw new Error(name + ": not JSON (" + err.message + ")"); }
      };
    }
    const choices = el("datalist", { id: inputId + "-choices" });
    const label = el("label", { for: inputId }, title + (required ? " *" : ""), control);
    const node = el("div", { class: "field", "data-field": name }, label, desc, choices);
    node.setChoices = (values, labels) => {
      const label = (value) => (Array.isArray(labels) && Number.isInteger(value) ? labels[value] : undefined);
      choices.replaceChildren(...values.slice(0, 500).map((value) => el("option", { value: String(value), label: label(value) })));
    };
    return { node, read };
  }

  function objectFields(schema, container) {
    const fields = [];
    const required = new Set(schema.required || []);
    for (const [name, prop] of Object.entries(schema.properties || {})) {
      if (name === "metadata") continue; // the protocol's own field, not the agent's choice
      const field = fieldFor(name, prop, required.has(name));
      if (field.node) container.append(field.node);
      fields.push({ name, ...field });
    }
    return fields;
  }

  function readObject(fields) {
    const value = {};
    for (const field of fields) {
      const item = field.read();
      if (item !== undefined) value[field.name] = item;
    }
    return value;
  }

  // ---- actions -------------------------------------------------------------------------------
  let actionFields = [];

  function buildActionForm(schema) {
    const form = $("action-form");
    form.replaceChildren();
    actionFields = objectFields(resolve(schema), form);
    form.append(el("button", { id: "step", type: "submit", text: "Step" }));
    form.onsubmit = (event) => {
      event.preventDefault();
      let action;
      try { action = readObject(actionFields); } catch (err) { showError(err.message); return; }
      step(action);
    };
  }

  // Offer the observation's legal choices (legal_actions, legal_moves, …) for the action's field.
  function offerChoices(observation) {
    const legal = Object.entries(observation || {}).find(([key, value]) => /^legal_/.test(key) && Array.isArray(value));
    if (!legal) return;
    const target = actionFields.find((field) => field.node && field.node.setChoices);
    if (target) target.node.setChoices(legal[1], observation.action_meanings);
  }

  async function buildTools() {
    const reply = await request("mcp", { jsonrpc: "2.0", id: state.nextId, method: "tools/list", params: {} });
    const tools = (reply.data && reply.data.result && reply.data.result.tools) || [];
    const box = $("tools");
    box.replaceChildren();
    for (const tool of tools) {
      const form = el("form", { class: "tool", "data-tool": tool.name });
      form.append(el("h3", { text: tool.name }), tool.description ? el("p", { text: tool.description }) : null);
      const schema = tool.inputSchema || tool.input_schema || { type: "object", properties: {} };
      const saved = state.defs;
      state.defs = { ...saved, ...(schema.$defs || schema.definitions || {}) };
      const fields = objectFields(schema, form);
      state.defs = saved;
      form.append(el("button", { type: "submit", text: "Call" }));
      form.onsubmit = (event) => {
        event.preventDefault();
        let args;
        try { args = readObject(fields); } catch (err) { showError(err.message); return; }
        step({ type: "call_tool", tool_name: tool.name, arguments: args });
      };
      box.append(form);
    }
    $("tools-panel").hidden = false;
    $("action-panel").hidden = true;
  }

  async function reset() {
    const seed = $("seed").value;
    const data = seed === "" ? {} : { seed: Number(seed) };
    const reply = await request("reset", data);
    answered();
    if (reply.type === "error") { showError(errorText(reply.data)); return; }
    showError("");
    state.history = [];
    state.step = 0;
    addHistory({ kind: "reset", label: seed === "" ? "reset" : "reset seed=" + seed, reply: reply.data });
    showReply(reply.data);
  }

  async function step(action) {
    const reply = await request("step", action);
    answered();
    if (reply.type === "error") { showError(errorText(reply.data)); return; }
    showError("");
    state.step += 1;
    addHistory({ kind: "step", label: JSON.stringify(action), reply: reply.data });
    showReply(reply.data);
  }

  async function showState() {
    const reply = await request("state");
    answered();
    if (reply.type === "error") { showError(errorText(reply.data)); return; }
    $("raw").textContent = JSON.stringify(reply.data, null, 2);
    $("raw").parentElement.open = true;
  }

  // ---- history -------------------------------------------------------------------------------
  function addHistory(entry) {
    state.history.push(entry);
    if (state.history.length > MAX_HISTORY) state.history.shift();
    const body = $("history").tBodies[0];
    if (entry.kind === "reset") body.replaceChildren();
    const row = el("tr", { "data-kind": entry.kind },
      el("td", { text: entry.kind === "reset" ? "0" : String(state.step) }),
      el("td", { class: "action", text: entry.label }),
      el("td", { text: formatReward(entry.reply.reward) }),
      el("td", { text: entry.reply.done ? "yes" : "" }));
    row.addEventListener("click", () => showReply(entry.reply));
    body.prepend(row);
    while (body.rows.length > MAX_HISTORY) body.deleteRow(body.rows.length - 1);
  }

  function formatReward(reward) {
    if (reward === null || reward === undefined) return "—";
    return typeof reward === "number" ? String(Math.round(reward * 1e4) / 1e4) : String(reward);
  }

  // ---- observation views ---------------------------------------------------------------------
  function pre(text, className) { return el("pre", { class: className || "mono", text }); }
  function json(value) { return pre(JSON.stringify(value, null, 2)); }

  // A frame as a picture: values is a flat row-major array, shape [h, w] or [h, w, channels].
  function image(values, shape, scale) {
    const [height, width, channels = 1] = shape;
    const canvas = el("canvas", { class: "frame", width, height });
    canvas.style.width = width * (scale || 2) + "px";
    const context = canvas.getContext("2d");
    const pixels = context.createImageData(width, height);
    for (let i = 0, n = width * height; i < n; i++) {
      const at = i * channels;
      const r = values[at], g = channels >= 3 ? values[at + 1] : r, b = channels >= 3 ? values[at + 2] : r;
      pixels.data.set([r, g, b, 255], i * 4);
    }
    context.putImageData(pixels, 0, 0);
    return canvas;
  }

  function product(shape) { return shape.reduce((a, b) => a * b, 1); }
  function isShape(value) { return Array.isArray(value) && (value.length === 2 || value.length === 3) && value.every(Number.isInteger); }

  function decodeBase64(text) {
    const binary = atob(text);
    const bytes = new Uint8Array(binary.length);
    for (let i = 0; i < binary.length; i++) bytes[i] = binary.charCodeAt(i);
    return bytes;
  }

  // Finds frames: `x` with `x_shape`, `screen` with `screen_shape`, or base64 `frame_b64` / `frame_bytes`.
  function frames(observation) {
    const found = [];
    for (const [name, value] of Object.entries(observation)) {
      const shape = observation[name + "_shape"];
      if (Array.isArray(value) && value.length && isShape(shape) && product(shape) === value.length) {
        found.push({ name, values: value, shape, uses: [name, name + "_shape"] });
      }
    }
    if (typeof observation.frame_b64 === "string" && observation.frame_format === "base64" && isShape(observation.frame_shape)) {
      found.push({ name: "frame", values: decodeBase64(observation.frame_b64), shape: observation.frame_shape,
        uses: ["frame_b64", "frame_shape", "frame_format", "frame_dtype"] });
    }
    // Raw-bytes frames reach this page (no binary frames negotiated) as base64 text.
    if (typeof observation.frame_bytes === "string" && observation.frame_format === "bytes" && isShape(observation.frame_shape)) {
      found.push({ name: "frame", values: decodeBase64(observation.frame_bytes), shape: observation.frame_shape,
        uses: ["frame_bytes", "frame_shape", "frame_format", "frame_dtype"] });
    }
    return found;
  }

  function isBoard(value) {
    return Array.isArray(value) && value.length > 1 && value.every((row) => Array.isArray(row) && row.length === value[0].length
      && row.every((cell) => cell === null || ["string", "number", "boolean"].includes(typeof cell)));
  }

  function view(name, value) {
    if (typeof value === "string") {
      if (/^data:image\//.test(value)) return el("img", { src: value, alt: name });
      if (value.includes("\n") || value.length > 80) return pre(value);
      return el("span", { class: "mono", text: value });
    }
    if (isBoard(value)) {
      const width = Math.max(...value.flat().map((cell) => String(cell ?? ".").length));
      return pre(value.map((row) => row.map((cell) => String(cell ?? ".").padStart(width)).join(" ")).join("\n"), "board");
    }
    if (value === null || typeof value !== "object") return el("span", { class: "mono", text: String(value) });
    if (Array.isArray(value) && value.every((item) => item === null || typeof item !== "object")) {
      return pre(JSON.stringify(value));  // a short list of scalars reads best on one line
    }
    return json(value);
  }

  function renderObservation(observation, container) {
    const helpers = { image, pre, json, el, view };
    const failures = [];
    for (const renderer of renderers) {
      try {
        if (renderer(observation, container, helpers)) return;
      } catch (err) {
        failures.push(el("div", { class: "error", text: "custom renderer failed: " + err.message }));
      }
      container.replaceChildren(...failures);
    }
    const used = new Set(["metadata", "reward", "done"]);
    for (const frame of frames(observation)) {
      frame.uses.forEach((name) => used.add(name));
      container.append(el("div", { class: "obs-field", "data-field": frame.name },
        el("div", { class: "obs-name", text: frame.name }), image(frame.values, frame.shape)));
    }
    for (const [name, value] of Object.entries(observation)) {
      if (used.has(name) || value === null || value === "" || (Array.isArray(value) && !value.length)) continue;
      container.append(el("div", { class: "obs-field", "data-field": name },
        el("div", { class: "obs-name", text: name }), view(name, value)));
    }
  }

  function showReply(reply) {
    state.lastReply = reply;
    const observation = reply.observation || {};
    const container = $("observation");
    container.replaceChildren();
    renderObservation(observation, container);
    const metadata = reply.metadata || observation.metadata || {};
    const components = metadata.reward_components || (observation.info && observation.info.reward_signals);
    const summary = $("summary");
    summary.replaceChildren(
      el("div", {}, el("b", { id: "reward", text: formatReward(reply.reward) }), el("span", { text: "reward" })),
      el("div", {}, el("b", { id: "done", text: reply.done ? "yes" : "no" }), el("span", { text: "done" })),
      el("div", {}, el("b", { id: "steps", text: String(state.step) }), el("span", { text: "steps" })));
    if (components && Object.keys(components).length) {
      const list = Object.entries(components).map(([key, value]) => key + " " + formatReward(value)).join(" · ");
      summary.append(el("div", { class: "components", id: "reward-components", text: list }));
    }
    $("raw").textContent = JSON.stringify(reply, null, 2);
    offerChoices(observation);
  }

  // ---- start ---------------------------------------------------------------------------------
  async function start() {
    try {
      state.config = await getJSON("web/config.json");
      document.title = state.config.title;
      $("title").textContent = state.config.title;
      const schema = await getJSON("schema");
      state.schema = schema;
      state.defs = schema.action.$defs || {};
      const props = resolve(schema.action).properties || {};
      state.isMcp = "tool_name" in props && props.type && resolve(props.type).const === "call_tool";
      buildActionForm(schema.action);
      await connect();
      if (state.isMcp) await buildTools();
      $("auth").hidden = true;
      $("main").hidden = false;
      $("reset-form").onsubmit = (event) => { event.preventDefault(); reset(); };
      $("state").onclick = showState;
      document.body.dataset.ready = "true";
    } catch (err) {
      if (err.unauthorized) {
        sessionStorage.removeItem(KEY_STORE);
        $("auth").hidden = false;
        setStatus("API key needed", "closed");
        return;
      }
      setStatus(err.message, "closed");
      showError(err.message);
      $("main").hidden = false;
    }
  }

  $("auth-form").onsubmit = (event) => {
    event.preventDefault();
    sessionStorage.setItem(KEY_STORE, $("api-key").value);
    start();
  };
  start();
})();
