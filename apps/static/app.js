// The minions chat page: no build step, no framework. Everything from the server (answers, quotes, document
// names) is put in the page as text (textContent), never as HTML.
"use strict";

const $ = (sel) => document.querySelector(sel);
const state = { info: null, docs: [], conversations: [], current: null, busy: null };
const EXCLUDED_KEY = "minions.excluded";

// -- small helpers ------------------------------------------------------------------------------------------
function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") node.className = v;
    else if (k === "text") node.textContent = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else if (v !== null && v !== undefined && v !== false) node.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children) if (c !== null && c !== undefined) node.append(c);
  return node;
}

async function api(method, path, body) {
  const init = { method, headers: {} };
  if (body instanceof FormData) init.body = body;
  else if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const resp = await fetch(path, init);
  const data = await resp.json().catch(() => ({}));
  if (!resp.ok) throw new Error((data.error && data.error.message) || `${resp.status} ${resp.statusText}`);
  return data;
}

function setStatus(node, text, kind = "") {
  node.textContent = text;
  node.className = "status " + kind;
}

const fmtInt = (n) => Number(n || 0).toLocaleString("en-US");
function money(x) {
  if (x === null || x === undefined) return "–";
  if (x === 0) return "$0";
  const abs = Math.abs(x);
  return (x < 0 ? "-$" : "$") + (abs >= 0.01 ? abs.toFixed(2) : abs.toPrecision(2));
}
function size(bytes) {
  if (bytes < 1024) return `${bytes} B`;
  if (bytes < 1024 * 1024) return `${(bytes / 1024).toFixed(0)} KB`;
  return `${(bytes / 1024 / 1024).toFixed(1)} MB`;
}

// -- library ------------------------------------------------------------------------------------------------
function excluded() {
  try { return new Set(JSON.parse(localStorage.getItem(EXCLUDED_KEY) || "[]")); } catch { return new Set(); }
}
function setExcluded(set) { localStorage.setItem(EXCLUDED_KEY, JSON.stringify([...set])); }

async function loadDocs() {
  state.docs = (await api("GET", "/api/documents")).documents;
  renderDocs();
  // while the local model reads documents ahead of questions, follow its progress
  const reading = state.docs.some((d) => d.reading && ["queued", "reading"].includes(d.reading.state));
  clearTimeout(state.readingTimer);
  if (reading) state.readingTimer = setTimeout(() => loadDocs().catch(() => {}), 2000);
}

function readingText(r) {
  if (!r) return "";
  if (r.state === "ready") return "ready";
  if (r.state === "failed") return "not read ahead (questions still work)";
  return `reading\u2026 ${r.percent}%`;
}

function renderDocs() {
  const list = $("#doc-list");
  const off = excluded();
  list.replaceChildren(...state.docs.map((d) => {
    const box = el("input", { type: "checkbox", class: "doc-include", title: "Ask about this document" });
    box.checked = !off.has(d.id);
    box.addEventListener("change", () => {
      const set = excluded();
      if (box.checked) set.delete(d.id); else set.add(d.id);
      setExcluded(set);
    });
    const pages = d.pages ? `${d.pages} page${d.pages === 1 ? "" : "s"}` : `${fmtInt(d.chars)} characters`;
    const indexed = d.index_bytes ? ` · ${size(d.index_bytes)} indexed` : "";
    // chunks sent off this device to an embedding model on another machine (the library's own log)
    const sent = d.embeddings_sent ? ` · ${size(d.embeddings_sent.bytes)} sent to be embedded` : "";
    const meta = `${pages} · ${size(d.bytes)}${indexed}${sent}${d.source === "folder" ? " · from a folder" : ""}`;
    const reading = readingText(d.reading);
    return el("li", { class: "doc", "data-id": d.id },
      box,
      el("div", {}, el("span", { class: "doc-name", text: d.name }), el("span", { class: "doc-meta", text: meta }),
         ...(reading ? [el("span", { class: "doc-meta doc-reading", text: reading,
                                      title: "The local model reads each passage once, ahead of questions" })] : [])),
      el("button", { class: "doc-remove", type: "button", title: `Remove ${d.name} from the library`, text: "×",
                     onclick: () => removeDoc(d) }));
  }));
  if (!state.docs.length) list.append(el("li", { class: "doc-meta", text: "No documents yet." }));
}

function selectedDocIds() {
  if (!state.docs.length) return null; // the server then says what to do
  const off = excluded();
  return state.docs.filter((d) => !off.has(d.id)).map((d) => d.id);
}

// What was added reads in the page's neutral text colour; only what was not added reads as an error.
function reportAdded(result) {
  const added = result.added.map((d) => `${d.name}${d.pages ? ` (${d.pages} p.)` : ""}`);
  const lines = [];
  if (added.length) lines.push(el("span", { class: "line added", text: `Added ${added.join(", ")}.` }));
  for (const r of result.rejected) lines.push(el("span", { class: "line rejected", text: `Not added: ${r.error}` }));
  const node = $("#library-status");
  if (!lines.length) return setStatus(node, "Nothing to add.");
  setStatus(node, "");
  node.replaceChildren(...lines);
}

async function upload(files) {
  if (!files.length) return;
  const form = new FormData();
  for (const f of files) form.append("files", f, f.name);
  setStatus($("#library-status"), `Adding ${[...files].map((f) => f.name).join(", ")}…`);
  try {
    reportAdded(await api("POST", "/api/documents", form));
  } catch (err) {
    setStatus($("#library-status"), err.message, "error");
  }
  await loadDocs();
}

async function addFolder(event) {
  event.preventDefault();
  const path = $("#folder-path").value.trim();
  if (!path) return setStatus($("#library-status"), "Type the path of a folder on this machine.", "error");
  setStatus($("#library-status"), `Reading ${path}…`);
  // while the folder is read, say which file it is at (the request answers when all are done)
  const follow = setInterval(async () => {
    try {
      const { adding } = await api("GET", "/api/library/progress");
      if (adding) {
        const left = adding.files ? ` · ${adding.added} added${adding.skipped ? `, ${adding.skipped} skipped` : ""}` : "";
        setStatus($("#library-status"), `Adding ${adding.files + 1} of ${adding.files_total}: ${adding.file}${left}`);
      }
    } catch { /* the answer to the request itself says what went wrong */ }
  }, 700);
  try {
    reportAdded(await api("POST", "/api/folders", { path }));
    $("#folder-path").value = "";
  } catch (err) {
    setStatus($("#library-status"), err.message, "error");
  } finally {
    clearInterval(follow);
  }
  await loadDocs();
}

async function removeDoc(d) {
  if (!confirm(`Remove ${d.name} from the library?`)) return;
  try {
    await api("DELETE", `/api/documents/${encodeURIComponent(d.id)}`);
    setStatus($("#library-status"), `Removed ${d.name}.`, "ok");
  } catch (err) {
    setStatus($("#library-status"), err.message, "error");
  }
  await loadDocs();
}

// -- conversations ------------------------------------------------------------------------------------------
async function loadConversations() {
  state.conversations = (await api("GET", "/api/conversations")).conversations;
  renderConversations();
}

function renderConversations() {
  $("#conv-list").replaceChildren(...state.conversations.map((c) =>
    el("li", { class: "conv" + (c.id === state.current ? " active" : ""), "data-id": c.id, title: c.title,
               onclick: () => openConversation(c.id) },
      el("span", { text: c.title }),
      el("button", { class: "conv-del", type: "button", title: "Delete conversation", text: "×",
                     onclick: (e) => { e.stopPropagation(); deleteConversation(c); } }))));
}

async function openConversation(id) {
  if (state.busy) return;
  let conv;
  try {
    conv = await api("GET", `/api/conversations/${encodeURIComponent(id)}`);
  } catch (err) {
    state.current = null;
    history.replaceState(null, "", "#");
    renderThread([]);
    return;
  }
  state.current = id;
  history.replaceState(null, "", `#c=${id}`);
  renderThread(conv.messages);
  renderConversations();
}

function newConversation() {
  if (state.busy) return;
  state.current = null;
  history.replaceState(null, "", "#");
  renderThread([]);
  renderConversations();
  $("#question").focus();
}

async function deleteConversation(c) {
  if (!confirm(`Delete the conversation "${c.title}"?`)) return;
  await api("DELETE", `/api/conversations/${encodeURIComponent(c.id)}`);
  if (state.current === c.id) newConversation();
  await loadConversations();
}

// -- messages -----------------------------------------------------------------------------------------------
function renderThread(messages) {
  const thread = $("#thread");
  thread.replaceChildren();
  if (!messages.length) thread.append($("#empty-template").content.cloneNode(true));
  for (const m of messages) thread.append(renderMessage(m));
  thread.scrollTop = thread.scrollHeight;
}

function renderMessage(m) {
  if (m.role === "user") {
    return el("div", { class: "msg user", "data-id": m.id }, el("div", { class: "bubble", text: m.content }));
  }
  const node = el("div", { class: `msg assistant ${m.status}`, "data-id": m.id, "data-status": m.status });
  const bubble = el("div", { class: "bubble" }, el("div", { class: "answer-text", text: m.content }));
  node.append(bubble);
  const meta = m.meta || {};
  const r = meta.result;
  if (!r) return node;
  if (m.status === "partial" || m.status === "cancelled") {
    const why = r.notes.join(" ") || "the run did not finish.";
    bubble.append(el("div", { class: "note", text: (m.status === "cancelled" ? "Stopped: " : "Incomplete: ") + why }));
  }
  const written = r.reading && r.reading.answer;
  if (written && written.replaced) {
    bubble.append(el("div", { class: "note", text: `The local model's written answer was replaced by its quote: ${written.why}.` }));
  }
  bubble.append(renderCitations(r.citations));
  bubble.append(renderCost(r, meta));
  bubble.append(el("div", { class: "summary-line", text: runSummary(r, meta) }));
  bubble.append(renderUsage(r));
  bubble.append(renderEgress(r, meta));
  return node;
}

function runSummary(r, meta) {
  const ok = r.jobs.filter((j) => j.ok).length;
  const parts = [`${r.protocol}`, `${r.rounds} round${r.rounds === 1 ? "" : "s"}`];
  if (r.jobs.length) parts.push(`${r.jobs.length} local job${r.jobs.length === 1 ? "" : "s"} (${ok} ok)`);
  if (r.reading && r.reading.chunks) parts.push(`read ${r.reading.read} of ${r.reading.chunks} passages`);
  const lib = r.reading && r.reading.library;
  if (lib && lib.routed) parts.push(`from ${lib.documents.join(", ")} (of ${lib.of} documents)`);
  parts.push(`local ${meta.local}`, `remote ${meta.remote || "none"}`);
  if (r.timings && r.timings.total_s) parts.push(`${r.timings.total_s.toFixed(1)} s`);
  return parts.join(" · ");
}

function renderCitations(citations) {
  const box = el("div", { class: "citations" });
  if (!citations.length) return box;
  const quotes = el("div", { class: "quotes" });
  citations.forEach((c, i) => {
    const quote = el("blockquote", { class: "quote", hidden: true, text: `“${c.text}” — ${c.label}` });
    const chip = el("button", { class: "citation", type: "button", title: c.text, text: `[${i + 1}] ${c.label}`,
                                onclick: () => {
                                  quote.hidden = !quote.hidden;
                                  chip.classList.toggle("open", !quote.hidden);
                                  if (!quote.hidden) showSource(c);
                                } });
    box.append(chip);
    quotes.append(quote);
  });
  return el("div", {}, box, quotes);
}

function renderCost(r, meta) {
  const remote = r.usage.remote || {};
  const local = r.usage.local || {};
  const box = el("div", { class: "cost" },
    el("span", {}, "Cost ", el("b", { class: "cost-total", text: money(r.cost_usd) })),
    el("span", { text: `local ${fmtInt((local.prompt_tokens || 0) + (local.completion_tokens || 0))} tokens` }),
    el("span", { text: `remote ${fmtInt((remote.prompt_tokens || 0) + (remote.completion_tokens || 0))} tokens` }));
  if (r.saving_usd !== null && r.saving_usd !== undefined && meta.remote_leaves_device) {
    const est = r.remote_only_estimate ? money(r.remote_only_estimate.cost_usd) : "–";
    const text = r.saving_usd >= 0
      ? `saved ${money(r.saving_usd)} vs sending the documents to the remote model (${est})`
      : `${money(-r.saving_usd)} more than sending the documents to the remote model (${est})`;
    box.append(el("span", { class: r.saving_usd >= 0 ? "saving" : "saving negative", text }));
  } else if (!meta.remote_leaves_device && !r.local_egress && !r.embed_egress) {
    box.append(el("span", { class: "saving", text: "everything ran on this device" }));
  }
  return box;
}

function renderUsage(r) {
  const rows = Object.entries(r.usage).map(([role, u]) => el("tr", {},
    el("td", { text: role }), el("td", { text: fmtInt(u.calls) }), el("td", { text: fmtInt(u.prompt_tokens) }),
    el("td", { text: fmtInt(u.completion_tokens) }), el("td", { text: (u.seconds || 0).toFixed(1) }),
    el("td", { text: money(u.cost_usd) })));
  if (r.remote_only_estimate) {
    const e = r.remote_only_estimate;
    rows.push(el("tr", { class: "estimate" }, el("td", { text: "remote only (estimate)" }), el("td", { text: "1" }),
      el("td", { text: fmtInt(e.prompt_tokens) }), el("td", { text: "–" }), el("td", { text: "–" }),
      el("td", { text: money(e.cost_usd) })));
  }
  const head = el("tr", {}, ...["role", "calls", "prompt", "completion", "seconds", "cost"].map((h) => el("th", { text: h })));
  return el("details", { class: "more usage-details" }, el("summary", { text: "Usage by model" }),
    el("table", { class: "usage" }, el("thead", {}, head), el("tbody", {}, ...rows)));
}

function renderEgress(r, meta) {
  const records = r.egress || [];
  // "local": a local model on another machine; "embed": the question, to an embedding model on another machine
  const remote = records.filter((e) => e.step !== "local" && e.step !== "embed");
  const chars = remote.reduce((n, e) => n + e.chars, 0);
  const said = [];
  if (remote.length) {
    said.push(`${remote.length} message${remote.length === 1 ? "" : "s"}, ${fmtInt(chars)} characters left this device (to ${remote[0].backend})`);
  }
  if (r.local_egress) said.push(r.local_egress);
  if (r.embed_egress) said.push(r.embed_egress);
  const label = said.length
    ? `Egress: ${said.join("; ")}`
    : `Egress: nothing left this device${meta.remote && !meta.remote_leaves_device ? ` (the remote model ${meta.remote} runs on this device)` : ""}`;
  const details = el("details", { class: "more egress" }, el("summary", { text: label }));
  for (const e of records) {
    details.append(el("div", { class: "egress-record" },
      el("header", { text: `round ${e.round} · ${e.step} · ${e.backend}${e.host ? ` at ${e.host}` : ""} · ${fmtInt(e.chars)} characters`
        + (e.bytes !== undefined ? ` · ${fmtInt(e.bytes)} bytes · ${fmtInt(e.tokens)} tokens` : "") }),
      el("pre", { text: e.text })));
  }
  return details;
}

// -- the source viewer --------------------------------------------------------------------------------------
async function showSource(c) {
  const doc = state.docs.find((d) => d.name === c.document);
  const page = c.pages.length ? c.pages[0] : 1;
  $("#viewer").hidden = false;
  $("#viewer-title").textContent = c.pages.length ? `${c.document}, page ${page}` : c.document;
  const box = $("#viewer-text");
  if (!doc) {
    box.replaceChildren(el("p", { text: `${c.document} is no longer in the library. The quote:` }),
      el("mark", { text: c.text }));
    return;
  }
  box.textContent = "Loading…";
  try {
    const data = await api("GET", `/api/documents/${encodeURIComponent(doc.id)}/pages/${page}`);
    box.replaceChildren(...highlight(data.text, c.text));
    const mark = box.querySelector("mark");
    // Scroll the page text only (scrollIntoView would scroll the panel around it too).
    if (mark) box.scrollTop = Math.max(0, mark.offsetTop - box.clientHeight / 3);
  } catch (err) {
    box.textContent = err.message;
  }
}

function highlight(text, quote) {
  // Exact match first, else one that ignores case and runs of whitespace (PDF text breaks lines anywhere).
  let start = text.indexOf(quote), end = start + quote.length;
  if (start < 0) {
    const words = quote.trim().split(/\s+/).map((w) => w.replace(/[.*+?^${}()|[\]\\]/g, "\\$&"));
    const m = words.length ? new RegExp(words.join("\\s+"), "i").exec(text) : null;
    if (m) { start = m.index; end = start + m[0].length; }
  }
  if (start < 0) return [el("p", { class: "doc-meta", text: "(quote not found on this page)" }), text];
  return [text.slice(0, start), el("mark", { text: text.slice(start, end) }), text.slice(end)];
}

// -- asking -------------------------------------------------------------------------------------------------
function progressView() {
  const bar = el("span");
  const view = {
    node: el("div", { class: "msg assistant pending" }),
    rounds: {},
    started: Date.now(),
    head: el("div", {}, el("span", { class: "spinner" }), el("span", { class: "progress-head", text: "Starting…" })),
    bar: el("div", { class: "bar" }, bar),
    log: el("div", { class: "log" }),
    fill: bar,
  };
  view.node.append(el("div", { class: "bubble progress" }, view.head, view.bar, view.log));
  view.timer = setInterval(() => updateHead(view), 1000);
  return view;
}

function updateHead(view, text) {
  if (text) view.text = text;
  const secs = Math.round((Date.now() - view.started) / 1000);
  view.head.querySelector(".progress-head").textContent = `${view.text || "Working…"} (${secs} s)`;
}

function onProgress(view, ev) {
  const r = ev.round !== undefined ? (view.rounds[ev.round] ||= { jobs: 0, done: 0, failed: 0 }) : null;
  if (ev.kind === "plan_ready") {
    r.jobs = ev.jobs;
    updateHead(view, `Round ${ev.round}: ${ev.jobs} local job${ev.jobs === 1 ? "" : "s"} planned`);
    const list = el("ol", {}, ...ev.instructions.map((i) => el("li", { text: i })));
    view.log.append(el("div", { text: `Round ${ev.round} plan:` }), list);
  } else if (ev.kind === "job_finished" || (ev.kind === "job_failed" && !ev.will_retry)) {
    if (ev.kind === "job_finished") r.done++; else r.failed++;
    const finished = r.done + r.failed;
    updateHead(view, `Round ${ev.round}: ${finished} of ${r.jobs} jobs done${r.failed ? `, ${r.failed} failed` : ""}`);
    view.fill.style.width = `${r.jobs ? (100 * finished) / r.jobs : 0}%`;
  } else if (ev.kind === "round_done") {
    const next = ev.decision === "final" ? "writing the answer" : ev.decision ? `decision: ${ev.decision}` : "";
    view.log.append(el("div", { text: `Round ${ev.round} done: ${ev.jobs_ok} answered, ${ev.jobs_failed} failed${next ? " → " + next : ""}` }));
    updateHead(view, ev.decision === "final" ? "Writing the answer" : `Round ${ev.round} done`);
  } else if (ev.kind === "notice") {
    view.log.append(el("div", { class: "notice", text: `⚠ ${ev.message}` }));
  } else if (ev.kind === "answer_token") {
    // the local model writes its answer: shown as it comes; the checked answer replaces the whole view
    if (!view.draft) {
      view.draft = el("div", { class: "answer-text draft" });
      view.log.after(view.draft);
      updateHead(view, "Writing the answer");
    }
    view.draft.textContent += ev.text;
  } else if (ev.kind === "final") {
    updateHead(view, "Answer ready");
  }
  const thread = $("#thread");
  thread.scrollTop = thread.scrollHeight;
}

async function ask(event) {
  event.preventDefault();
  const question = $("#question").value.trim();
  if (!question || state.busy) return;
  try {
    if (!state.current) {
      const conv = await api("POST", "/api/conversations");
      state.current = conv.id;
      history.replaceState(null, "", `#c=${conv.id}`);
      renderThread([]);
    }
  } catch (err) {
    alert(err.message);
    return;
  }
  const thread = $("#thread");
  const empty = thread.querySelector(".empty");
  if (empty) empty.remove();
  const asked = renderMessage({ role: "user", content: question });
  const view = progressView();
  thread.append(asked, view.node);
  thread.scrollTop = thread.scrollHeight;
  $("#question").value = "";
  const controller = new AbortController();
  state.busy = controller;
  setBusy(true);
  let answered = false;
  try {
    const resp = await fetch(`/api/conversations/${encodeURIComponent(state.current)}/messages`, {
      method: "POST", headers: { "Content-Type": "application/json" }, signal: controller.signal,
      body: JSON.stringify({ question, document_ids: selectedDocIds() }),
    });
    if (!resp.ok) {
      const data = await resp.json().catch(() => ({}));
      throw new Error((data.error && data.error.message) || `${resp.status} ${resp.statusText}`);
    }
    await readEvents(resp, (data) => {
      if (data.type === "question") asked.setAttribute("data-id", data.message.id);
      else if (data.type === "progress") onProgress(view, data.event);
      else if (data.type === "answer") {
        answered = true;
        view.node.replaceWith(renderMessage(data.message));
      }
    });
    if (!answered) throw new Error("The connection closed before the answer came. Reload to see whether it was saved.");
  } catch (err) {
    if (!answered) {
      const stopped = controller.signal.aborted;
      const text = stopped ? "Stopping… the answer so far is being saved." : err.message;
      view.node.replaceWith(renderMessage({ role: "assistant", status: stopped ? "cancelled" : "error", content: text }));
      if (stopped) waitForAnswer(state.current);
    }
  } finally {
    clearInterval(view.timer);
    state.busy = null;
    setBusy(false);
    thread.scrollTop = thread.scrollHeight;
    loadConversations();
  }
}

async function waitForAnswer(id, tries = 120) {
  // A stopped run finishes its current batch of local jobs, then the server stores what it has.
  for (let i = 0; i < tries; i++) {
    await new Promise((resolve) => setTimeout(resolve, 1000));
    if (state.current !== id || state.busy) return; // the user moved on
    let conv;
    try { conv = await api("GET", `/api/conversations/${encodeURIComponent(id)}`); } catch { return; }
    const last = conv.messages[conv.messages.length - 1];
    if (last && last.role === "assistant" && state.current === id && !state.busy) {
      renderThread(conv.messages);
      return;
    }
  }
}

async function readEvents(resp, onData) {
  const reader = resp.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    buffer += decoder.decode(value, { stream: true });
    let cut;
    while ((cut = buffer.indexOf("\n\n")) >= 0) {
      const frame = buffer.slice(0, cut);
      buffer = buffer.slice(cut + 2);
      const data = frame.split("\n").filter((l) => l.startsWith("data: ")).map((l) => l.slice(6)).join("\n");
      if (data) onData(JSON.parse(data));
    }
  }
}

function setBusy(busy) {
  $("#ask").hidden = busy;
  $("#stop").hidden = !busy;
  $("#question").disabled = busy;
  if (!busy) $("#question").focus();
}

// -- settings -----------------------------------------------------------------------------------------------
// Protocols other than local need a remote model: without one they are shown disabled, with the reason.
function syncProtocols() {
  const select = $("#set-protocol");
  const hasRemote = $("#set-remote").value.trim() !== "";
  const defaults = state.info.default_protocol;
  for (const option of select.options) {
    const p = state.info.protocols.find((q) => q.name === option.value);
    option.disabled = p.needs_remote && !hasRemote;
    option.textContent = option.disabled ? `${p.name} (${state.info.remote_needed})` : p.name;
    option.title = option.disabled ? state.info.remote_needed : "";
  }
  // Without a remote model local was the only choice; with one, the default is the protocol that uses it.
  if (select.selectedOptions[0]?.disabled) select.value = defaults.without_remote;
  else if (hasRemote && select.dataset.hadRemote === "" && select.value === defaults.without_remote) {
    select.value = defaults.with_remote;
  }
  select.dataset.hadRemote = hasRemote ? "1" : "";
}

async function loadSettings() {
  const s = await api("GET", "/api/settings");
  $("#set-protocol").replaceChildren(...state.info.protocols.map((p) => el("option", { value: p.name, text: p.name })));
  $("#set-local").value = s.local || "";
  $("#set-remote").value = s.remote || "";
  $("#set-protocol").value = s.protocol;
  syncProtocols();
  $("#set-max-rounds").value = s.max_rounds;
  $("#set-answer").value = s.answer || "auto";
  $("#set-budget-tokens").value = s.budget_tokens ?? "";
  $("#set-budget-usd").value = s.budget_usd ?? "";
  $("#set-redact").checked = !!s.redact;
}

async function saveSettings(event) {
  event.preventDefault();
  const num = (id) => ($(id).value === "" ? null : Number($(id).value));
  const body = {
    local: $("#set-local").value.trim(), remote: $("#set-remote").value.trim() || null,
    protocol: $("#set-protocol").value, max_rounds: num("#set-max-rounds"), answer: $("#set-answer").value,
    budget_tokens: num("#set-budget-tokens"), budget_usd: num("#set-budget-usd"), redact: $("#set-redact").checked,
  };
  try {
    await api("PUT", "/api/settings", body);
    setStatus($("#settings-status"), "Saved. The next question uses these settings.", "ok");
  } catch (err) {
    setStatus($("#settings-status"), err.message, "error");
  }
}

// -- start --------------------------------------------------------------------------------------------------
async function start() {
  const empty = $("#empty");
  const template = el("template", { id: "empty-template" });
  template.content.append(empty.cloneNode(true));
  document.body.append(template);

  $("#doc-upload").addEventListener("change", (e) => { upload(e.target.files); e.target.value = ""; });
  const zone = $("#drop-zone");
  zone.addEventListener("dragover", (e) => { e.preventDefault(); zone.classList.add("over"); });
  zone.addEventListener("dragleave", () => zone.classList.remove("over"));
  zone.addEventListener("drop", (e) => { e.preventDefault(); zone.classList.remove("over"); upload(e.dataTransfer.files); });
  $("#folder-form").addEventListener("submit", addFolder);
  $("#conv-new").addEventListener("click", newConversation);
  $("#ask-form").addEventListener("submit", ask);
  $("#question").addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey) { e.preventDefault(); $("#ask-form").requestSubmit(); }
  });
  $("#stop").addEventListener("click", () => state.busy && state.busy.abort());
  $("#settings-form").addEventListener("submit", saveSettings);
  $("#set-remote").addEventListener("input", syncProtocols);
  $("#viewer-close").addEventListener("click", () => { $("#viewer").hidden = true; });

  try {
    state.info = await api("GET", "/api/info");
    $("#doc-upload").accept = state.info.accepted.join(","); // the server's supported files, not a list of our own
    await Promise.all([loadDocs(), loadSettings(), loadConversations()]);
  } catch (err) {
    setStatus($("#library-status"), `Cannot reach the server: ${err.message}`, "error");
    return;
  }
  const wanted = (location.hash.match(/^#c=([\w-]+)$/) || [])[1] || (state.conversations[0] || {}).id;
  if (wanted) await openConversation(wanted);
  document.body.dataset.ready = "1";
}

start();
