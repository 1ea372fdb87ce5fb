// durable-swarm console: fills the server's page shells from the JSON API.
// Everything shown from a run goes through textContent: run data is never parsed as HTML.
"use strict";

const STATUS_LABEL = {
  pending: "running",
  waiting_for_input: "waiting for input",
  waiting_for_approval: "waiting for approval",
  succeeded: "succeeded",
  failed: "failed",
  cancelled: "cancelled",
};
const FINISHED = ["succeeded", "failed", "cancelled"];
const BOOKKEEPING = ["event", "timer", "stream", "dbos"]; // DBOS's own steps, shown on request

async function api(path, body) {
  const options = { credentials: "same-origin", headers: { Accept: "application/json" } };
  if (body !== undefined) {
    options.method = "POST";
    options.headers["Content-Type"] = "application/json";
    options.body = JSON.stringify(body);
  }
  const response = await fetch(path, options);
  const data = await response.json().catch(() => ({}));
  if (response.status === 401) {
    window.location.href = "/login?next=" + encodeURIComponent(window.location.pathname);
  }
  if (!response.ok) throw new Error(data.error || `HTTP ${response.status}`);
  return data;
}

// Control characters, bidirectional marks and overrides and invisible format characters, shown
// as escapes (the CLI shows the same set, `_terminal.INVISIBLE`): a stored "\u202e" must not
// reorder, nor a zero-width or tag character hide, what an operator reads, an approval above all.
const UNSAFE = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u00ad\u061c\u180e\u200b\u200c\u200e\u200f\u2028-\u202e\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb\u{e0000}-\u{e007f}]/gu;

function visible(text) {
  return String(text).replace(UNSAFE, (c) => {
    const code = c.codePointAt(0).toString(16);
    return code.length > 4 ? `\\u{${code}}` : `\\u${code.padStart(4, "0")}`;
  });
}

function el(tag, props, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(props || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "text") node.textContent = visible(value);
    else if (key === "class") node.className = value;
    else node.setAttribute(key, value);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(visible(child)));
  }
  return node;
}

function when(iso) {
  if (!iso) return "";
  const date = new Date(iso);
  const seconds = (Date.now() - date.getTime()) / 1000;
  if (seconds < 60) return "just now";
  if (seconds < 3600) return `${Math.floor(seconds / 60)} min ago`;
  if (seconds < 86400) return `${Math.floor(seconds / 3600)} h ago`;
  return date.toLocaleString();
}

function statusBadge(status) {
  return el("span", { class: `status s-${status}`, text: STATUS_LABEL[status] || status });
}

function runLink(runId) {
  return el("a", { href: `/runs/${encodeURIComponent(runId)}`, class: "mono", text: runId });
}

// JSON text indented without parsing it: every token stays as it was written (a number's
// digits above all, which JSON.parse would round), since an approval is bound to that text.
// Text that is not JSON is returned as it is.
function indentJson(text) {
  try { JSON.parse(text); } catch (_) { return text; }
  return reflowJson(text, "  ");
}

// JSON text with its whitespace outside strings replaced: indented by `indent`, or none at all
// (indent null). One pass; an empty {} or [] stays whole.
function reflowJson(text, indent) {
  const out = [];
  let depth = 0, inString = false, escaped = false, opened = false;
  const newline = () => (indent === null ? "" : `\n${indent.repeat(depth)}`);
  for (const c of text) {
    if (inString) {
      out.push(c);
      if (escaped) escaped = false;
      else if (c === "\\") escaped = true;
      else if (c === '"') inString = false;
      continue;
    }
    if (/\s/.test(c)) continue;
    const closing = c === "}" || c === "]";
    if (closing) depth -= 1;
    if (opened && !closing) out.push(newline());  // the first item of a container
    else if (closing && !opened) out.push(newline());
    opened = c === "{" || c === "[";
    if (opened) depth += 1;
    if (c === '"') inString = true;
    out.push(c === ":" && indent !== null ? ": " : c);
    if (c === ",") out.push(newline());
  }
  return out.join("");
}

function pretty(value) {
  if (value === null || value === undefined) return "";
  if (typeof value === "string") return indentJson(value);
  return JSON.stringify(value, null, 2);
}

function compact(value) {
  if (typeof value === "string") {
    try { JSON.parse(value); } catch (_) { return value; }  // plain text
    return reflowJson(value, null);  // on one line, every token as written
  }
  return JSON.stringify(value);
}

function notice(text, isError) {
  const box = document.getElementById("notice");
  if (!box) return;
  box.textContent = visible(text);
  box.className = isError ? "notice error" : "notice";
  box.hidden = !text;
}

async function refreshBadge() {
  const badge = document.getElementById("approval-count");
  try {
    const data = await api("/api/approvals?limit=1");
    badge.textContent = String(data.total);
    badge.hidden = data.total === 0;
  } catch (_) { badge.hidden = true; }
}

// --- the runs list ----------------------------------------------------------------------------

function runsPage() {
  const form = document.getElementById("filters");
  const body = document.getElementById("runs-body");
  const limit = 50;
  const params = new URLSearchParams(window.location.search);
  let offset = Number(params.get("offset") || 0);
  for (const name of ["status", "agent", "q"]) form.elements[name].value = params.get(name) || "";

  let applied = {};
  function apply() {
    applied = {};
    for (const name of ["status", "agent", "q"]) {
      const value = form.elements[name].value.trim();
      if (value) applied[name] = value;
    }
  }
  apply();

  function query() {
    const q = new URLSearchParams(applied);
    if (offset) q.set("offset", String(offset));
    return q;
  }

  // The page shown and its ETag: a poll sends it back and gets a 304 (nothing read, nothing
  // redrawn) while the page's runs have not changed.
  let shown = { url: null, etag: null };

  async function load() {
    const q = query();
    history.replaceState(null, "", q.toString() ? `/?${q}` : "/");
    q.set("limit", String(limit));
    const url = `/api/runs?${q}`;
    const headers = { Accept: "application/json" };
    if (shown.url === url && shown.etag) headers["If-None-Match"] = shown.etag;
    let data;
    try {
      const response = await fetch(url, { credentials: "same-origin", cache: "no-store", headers });
      if (response.status === 304) return;
      if (response.status === 401) {
        window.location.href = "/login?next=" + encodeURIComponent(window.location.pathname + window.location.search);
      }
      data = await response.json().catch(() => ({}));
      if (!response.ok) throw new Error(data.error || `HTTP ${response.status}`);
      shown = { url, etag: response.headers.get("ETag") };
    } catch (e) {
      shown = { url: null, etag: null };
      body.replaceChildren(el("tr", {}, el("td", { colspan: 7, class: "error", text: e.message })));
      return;
    }
    const rows = data.runs.map((run) => el("tr", { "data-run-id": run.run_id },
      el("td", {}, runLink(run.run_id), run.parent ? el("div", { class: "sub" }, "sub-agent of ", runLink(run.parent)) : null),
      el("td", {}, statusBadge(run.status)),
      el("td", { text: run.agent || "" }),
      el("td", { title: run.created_at, text: when(run.created_at) }),
      el("td", { title: run.updated_at, text: when(run.updated_at) }),
      el("td", { class: "num", text: run.model_calls }),
      el("td", { class: "num", text: run.tokens ? run.tokens.toLocaleString() : "–" }),
    ));
    if (!rows.length) rows.push(el("tr", {}, el("td", { colspan: 7, class: "muted", text: "No runs match." })));
    body.replaceChildren(...rows);
    const first = data.total ? offset + 1 : 0;
    document.getElementById("range").textContent = `${first}–${offset + data.runs.length} of ${data.total}`;
    document.getElementById("prev").disabled = offset === 0;
    document.getElementById("next").disabled = offset + data.runs.length >= data.total;
  }

  form.addEventListener("submit", (event) => { event.preventDefault(); apply(); offset = 0; load(); });
  form.elements.status.addEventListener("change", () => { apply(); offset = 0; load(); });
  document.getElementById("prev").addEventListener("click", () => { offset = Math.max(0, offset - limit); load(); });
  document.getElementById("next").addEventListener("click", () => { offset += limit; load(); });
  load();
  setInterval(() => { if (!document.hidden) load(); }, 2000);
  document.addEventListener("visibilitychange", () => { if (!document.hidden) load(); });
}

// --- one run ----------------------------------------------------------------------------------

function messageItem(message) {
  const role = message.role;
  const who = role === "assistant" ? (message.sender || "assistant") : role === "tool" ? `tool · ${message.tool_name || ""}` : role;
  const item = el("li", { class: `msg m-${role}` }, el("div", { class: "who", text: who }));
  if (message.content) item.append(el("div", { class: "content", text: message.content }));
  for (const call of message.tool_calls || []) {
    const fn = call.function || {};
    item.append(el("div", { class: "call" }, el("code", { text: fn.name }), el("pre", { class: "args", text: pretty(fn.arguments) })));
  }
  return item;
}

function stepItem(step, retry) {
  const head = el("div", { class: "step-head" },
    el("span", { class: "step-no", text: `#${step.step}` }),
    el("span", { class: `kind k-${step.kind}`, text: step.kind }),
    el("span", { class: "step-name", text: step.name }),
    retry ? el("span", { class: "chip retry", text: "retry" }) : null,
    step.error ? el("span", { class: "chip bad", text: "error" }) : null,
    el("span", { class: "step-meta" },
      step.tokens ? `${step.tokens} tokens · ` : "",
      step.duration_ms !== null && step.duration_ms !== undefined ? `${Math.round(step.duration_ms)} ms` : ""),
  );
  const tripped = step.kind === "guardrail" && typeof step.result === "string" && step.result.startsWith("tripped");
  if (tripped) head.insertBefore(el("span", { class: "chip bad", text: "tripped" }), head.querySelector(".step-meta"));
  const item = el("li", { class: `step${step.error ? " failed" : ""}`, "data-step": step.step, "data-kind": step.kind }, head);
  if (step.child_run_id) item.append(el("div", { class: "sub" }, "sub-agent run ", runLink(step.child_run_id)));
  if (step.error) item.append(el("pre", { class: "error-text", text: step.error }));
  const parts = [];
  if (step.arguments !== null && step.arguments !== undefined) parts.push(["arguments", step.arguments]);
  if (step.result !== null && step.result !== undefined) parts.push(["result", step.result]);
  for (const [label, value] of parts) {
    if (step.kind === "model" && label === "result") {
      if (value.content) item.append(el("div", { class: "content", text: value.content }));
      for (const call of value.tool_calls || []) {
        item.append(el("div", { class: "call" }, "calls ", el("code", { text: (call.function || {}).name })));
      }
      continue;
    }
    const text = compact(value);
    if (text.length > 120 || text.includes("\n")) {
      item.append(el("details", {}, el("summary", { text: label }), el("pre", { class: "args", text: pretty(value) })));
    } else {
      item.append(el("div", { class: "kv" }, el("span", { class: "k", text: label }), el("code", { text })));
    }
  }
  return item;
}

function runPage() {
  const runId = document.body.dataset.runId;
  const base = `/api/runs/${encodeURIComponent(runId)}`;
  let run = null;         // the run as last read, kept up to date by the stream's events
  let known = new Set();  // the step numbers in `run.steps`
  let failedNames = new Set();  // kind:name of steps that failed (a later one is a retry)
  let reconciling = null;
  let stream = null;

  function fact(label, ...value) {
    return [el("div", {}, el("dt", { text: label }), el("dd", {}, ...value))];
  }

  // Status, facts, banner, what the run waits for and the buttons: from `run`, no request.
  function renderHead() {
    document.getElementById("status").replaceWith(Object.assign(statusBadge(run.status), { id: "status" }));
    const facts = [
      ...fact("Agent", run.agent || "–"),
      ...fact("Started", el("span", { title: run.created_at, text: when(run.created_at) })),
      ...fact("Updated", el("span", { title: run.updated_at, text: when(run.updated_at) })),
      ...fact("Model calls", String(run.model_calls)),
      ...fact("Tokens", run.tokens ? run.tokens.toLocaleString() : "–"),
    ];
    if (run.cost_usd !== null && run.cost_usd !== undefined) facts.push(...fact("Cost", `$${run.cost_usd.toFixed(4)}`));
    if (run.parent) facts.push(...fact("Parent run", runLink(run.parent)));
    if (run.forked_from) facts.push(...fact("Forked from", runLink(run.forked_from)));
    const children = [...new Set(run.steps.map((s) => s.child_run_id).filter(Boolean))];
    if (children.length) facts.push(...fact("Sub-agent runs", ...children.map((c, i) => [i ? ", " : "", runLink(c)])));
    document.getElementById("facts").replaceChildren(...facts);

    const banner = document.getElementById("banner");
    const notes = [];
    if (run.recovery_attempts > 1) notes.push(`Resumed after a crash: another process took this run over (${run.recovery_attempts - 1} time${run.recovery_attempts > 2 ? "s" : ""}). Finished steps were not run again.`);
    if (run.error) notes.push(`Failed: ${run.error}`);
    if (run.rate_limit) notes.push(`Waiting for the rate limit of ${run.rate_limit.key} (a model call of ${run.rate_limit.agent}; it holds no worker slot)${run.rate_limit.paused_because ? `: paused by a ${run.rate_limit.paused_because}` : ""}.`);
    if (run.encrypted) notes.push(`Encrypted: this run's messages, context and step contents need the key "${run.encrypted}", which this console has not got (set DURABLE_SWARM_ENCRYPTION_KEY where it runs). Status, agents, times, usage and costs are shown.`);
    banner.textContent = visible(notes.join(" "));
    banner.className = run.error ? "banner bad" : "banner";
    banner.hidden = notes.length === 0;

    const waiting = run.waiting_for || {};
    const askInput = run.status === "waiting_for_input";
    const askApproval = run.status === "waiting_for_approval";
    document.getElementById("wait-input").hidden = !askInput;
    document.getElementById("wait-approval").hidden = !askApproval;
    if (askInput) document.getElementById("prompt").textContent = visible(waiting.prompt || "");
    if (askApproval) {
      const fn = (waiting.tool_call || {}).function || {};
      document.getElementById("approval-agent").textContent = visible(waiting.agent || "");
      document.getElementById("approval-tool").textContent = visible(fn.name || "");
      document.getElementById("approval-args").textContent = visible(pretty(fn.arguments));
    }
    document.getElementById("live").hidden = FINISHED.includes(run.status);
    document.getElementById("cancel").disabled = FINISHED.includes(run.status);
    document.getElementById("resume").disabled = !["failed", "cancelled"].includes(run.status);
    document.getElementById("fork-step").max = String(Math.max(1, ...run.steps.map((s) => s.step + 1)));
  }

  function renderMessages() {
    const messages = run.messages.map(messageItem);
    if (run.status === "succeeded" && messages.length) messages[messages.length - 1].classList.add("final");
    document.getElementById("messages").replaceChildren(...(messages.length ? messages : [el("li", { class: "muted", text: "No messages yet." })]));
  }

  function shownStep(step) {
    return document.getElementById("all-steps").checked || !BOOKKEEPING.includes(step.kind);
  }

  function stepNode(step) {
    const retry = failedNames.has(`${step.kind}:${step.name}`);
    if (step.error) failedNames.add(`${step.kind}:${step.name}`);
    return stepItem(step, retry);
  }

  // The whole timeline, drawn once (and again when the "DBOS steps too" box changes).
  function renderTimeline() {
    failedNames = new Set();
    const steps = run.steps.filter(shownStep).map(stepNode);
    document.getElementById("timeline").replaceChildren(...(steps.length ? steps : [el("li", { class: "muted", text: "No steps yet." })]));
  }

  // A step the stream sent: added to the run and appended to the timeline (and, for a model
  // or tool message, to the conversation); nothing is read again. Steps that change earlier
  // messages (a person's answer or decision, a sub-agent's answer) make the page read the
  // run once to show the conversation as the log tells it.
  function addStep(step, quiet) {
    if (known.has(step.step)) return;
    known.add(step.step);
    const later = run.steps.findIndex((s) => s.step > step.step);
    if (later === -1) run.steps.push(step); else run.steps.splice(later, 0, step);
    const timeline = document.getElementById("timeline");
    if (shownStep(step)) {
      timeline.querySelectorAll("li.muted").forEach((n) => n.remove());
      const node = stepNode(step);
      const next = [...timeline.children].find((n) => Number(n.dataset.step) > step.step);
      timeline.insertBefore(node, next || null);
    }
    if (quiet) return;  // the run was just read: its messages and facts are the log's
    if (step.kind === "model" && !step.error) {
      run.model_calls += 1;
      run.tokens += step.tokens || 0;
    }
    if (step.adds_message && step.kind === "model") {
      run.messages.push({ role: "assistant", sender: step.name, content: step.result.content, tool_calls: step.result.tool_calls });
    } else if (step.adds_message && step.kind === "tool") {
      run.messages.push({ role: "tool", tool_name: step.name, content: step.result });
    } else if (["wait", "join", "handoff", "guardrail"].includes(step.kind)) {
      reconcileSoon();
    }
    if (step.adds_message) {
      const list = document.getElementById("messages");
      list.querySelectorAll("li.muted").forEach((n) => n.remove());
      list.append(messageItem(run.messages[run.messages.length - 1]));
    }
  }

  function setStatus(status) {
    Object.assign(run, status);
    renderHead();
  }

  // Read the run once: the conversation and facts as the log tells them; the timeline only
  // gains the steps it lacks.
  async function reconcile() {
    try {
      const fresh = await api(base);
      for (const step of fresh.steps) addStep(step, true);
      fresh.steps = run.steps;  // the same steps, as the timeline shows them
      run = fresh;
      renderHead();
      renderMessages();
    } catch (e) { notice(e.message, true); }
  }

  function reconcileSoon() {
    if (reconciling) return;
    reconciling = setTimeout(() => { reconciling = null; reconcile(); }, 80);
  }

  async function load() {
    try {
      run = await api(base);
      known = new Set(run.steps.map((s) => s.step));
      renderHead();
      renderMessages();
      renderTimeline();
    } catch (e) { notice(e.message, true); }
  }

  function follow() {
    const after = Math.max(0, ...run.steps.map((s) => s.step));
    stream = new EventSource(`${base}/events?after=${after}`);
    stream.addEventListener("step", (event) => addStep(JSON.parse(event.data)));
    stream.addEventListener("status", (event) => setStatus(JSON.parse(event.data)));
    stream.addEventListener("end", () => { stream.close(); reconcile(); });
    stream.addEventListener("error", () => {
      if (stream.readyState !== EventSource.CLOSED) return;  // the browser reconnects by itself
      notice("Live updates stopped (the console refused the stream or went away); trying again in 10 s.", true);
      setTimeout(() => { if (stream.readyState === EventSource.CLOSED) { notice(""); follow(); } }, 10000);
    });
  }

  async function act(path, body, done) {
    notice("");
    try {
      const result = await api(`${base}/${path}`, body);
      if (done) done(result);
      if (stream && stream.readyState === EventSource.CLOSED) { await reconcile(); follow(); }
    } catch (e) { notice(e.message, true); }
  }

  document.getElementById("reply-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const box = document.getElementById("reply");
    act("input", { text: box.value }, () => { box.value = ""; notice("Answer sent."); });
  });
  const callId = () => ((run.waiting_for || {}).tool_call || {}).id;
  document.getElementById("approve").addEventListener("click", () =>
    act("approve", { tool_call_id: callId() }, () => notice("Approved.")));
  document.getElementById("reject").addEventListener("click", () =>
    act("reject", { tool_call_id: callId(), message: document.getElementById("reject-message").value || null }, () => notice("Rejected.")));
  document.getElementById("cancel").addEventListener("click", () => act("cancel", {}, () => notice("Cancelled.")));
  document.getElementById("resume").addEventListener("click", () => act("resume", {}, () => notice("Resumed.")));
  document.getElementById("fork-form").addEventListener("submit", (event) => {
    event.preventDefault();
    act("fork", { step: Number(document.getElementById("fork-step").value) }, (result) => {
      window.location.href = `/runs/${encodeURIComponent(result.run_id)}`;
    });
  });
  document.getElementById("all-steps").addEventListener("change", () => { if (run) renderTimeline(); });
  load().then(() => { if (run) follow(); });
}

// --- the approvals inbox ----------------------------------------------------------------------

function approvalsPage() {
  const list = document.getElementById("approvals");
  let shown = null;

  async function decide(approval, approved, reason) {
    notice("");
    const path = `/api/runs/${encodeURIComponent(approval.run_id)}/${approved ? "approve" : "reject"}`;
    const body = approved ? { tool_call_id: approval.tool_call_id } : { tool_call_id: approval.tool_call_id, message: reason || null };
    try {
      await api(path, body);
      notice(`${approved ? "Approved" : "Rejected"} ${approval.tool} in run ${approval.run_id}.`);
    } catch (e) { notice(e.message, true); }
    load();
    refreshBadge();
  }

  async function load() {
    let data;
    try { data = await api("/api/approvals"); } catch (e) { notice(e.message, true); return; }
    const key = JSON.stringify(data.approvals.map((a) => [a.run_id, a.tool_call_id]));
    if (key === shown) return;
    shown = key;
    if (!data.approvals.length) {
      list.replaceChildren(el("li", { class: "muted", text: "Nothing waits for approval." }));
      return;
    }
    const more = data.total > data.approvals.length
      ? [el("li", { class: "muted", text: `…and ${data.total - data.approvals.length} more, longest waiting first.` })] : [];
    list.replaceChildren(...data.approvals.map((a) => {
      const reason = el("input", { placeholder: "Reason (if you reject)", "aria-label": "Reason for rejecting" });
      const approve = el("button", { type: "button", class: "primary", text: "Approve" });
      const reject = el("button", { type: "button", class: "danger", text: "Reject" });
      approve.addEventListener("click", () => decide(a, true));
      reject.addEventListener("click", () => decide(a, false, reason.value));
      return el("li", { class: "card approval", "data-run-id": a.run_id },
        el("div", { class: "approval-head" }, el("code", { class: "tool", text: a.tool }), el("span", { class: "muted" }, "asked by ", a.agent || "?", " · ", when(a.since))),
        el("div", { class: "sub" }, "run ", runLink(a.run_id)),
        el("pre", { class: "args", text: pretty(a.arguments) }),
        el("div", { class: "buttons" }, reason, approve, reject));
    }), ...more);
  }

  load();
  setInterval(load, 3000);
}

// --- sessions ---------------------------------------------------------------------------------

function sessionLink(name) {
  return el("a", { href: `/sessions/${encodeURIComponent(name)}`, text: name });
}

function sessionsPage() {
  const body = document.querySelector("#sessions tbody");

  async function load() {
    let data;
    try { data = await api("/api/sessions"); } catch (e) { notice(e.message, true); return; }
    if (!data.sessions.length) {
      body.replaceChildren(el("tr", {}, el("td", { colspan: 6, class: "muted", text: "No sessions yet: a run with session=NAME makes one." })));
      return;
    }
    body.replaceChildren(...data.sessions.map((s) => el("tr", { "data-session": s.name },
      el("td", {}, sessionLink(s.name), s.compacted ? el("span", { class: "chip", text: "compacted" }) : null),
      el("td", { text: String(s.message_count) }),
      el("td", { text: String(s.runs) }),
      el("td", {}, s.last_run ? runLink(s.last_run) : "—"),
      el("td", {}, s.held_by ? runLink(s.held_by) : "—"),
      el("td", { text: when(s.updated_at) }))));
  }

  load();
  setInterval(() => { if (!document.hidden) load(); }, 5000);
}

function sessionPage() {
  const name = document.body.dataset.session;
  const path = `/api/sessions/${encodeURIComponent(name)}`;
  const facts = document.getElementById("facts");
  const held = document.getElementById("held");
  const list = document.getElementById("messages");

  async function load() {
    let s;
    try { s = await api(path); } catch (e) { notice(e.message, true); return; }
    held.textContent = s.held_by ? "held by a run" : "free";
    held.className = `status ${s.held_by ? "s-pending" : "s-succeeded"}`;
    facts.replaceChildren(
      el("dt", { text: "Messages" }), el("dd", { text: String(s.message_count) }),
      el("dt", { text: "Runs" }), el("dd", { text: String(s.runs) }),
      el("dt", { text: "Last run" }), el("dd", {}, s.last_run ? runLink(s.last_run) : "—"),
      el("dt", { text: "Held by" }), el("dd", {}, s.held_by ? runLink(s.held_by) : "—"),
      el("dt", { text: "Updated" }), el("dd", { text: when(s.updated_at) }));
    list.replaceChildren(...(s.messages.length ? s.messages.map(messageItem) : [el("li", { class: "muted", text: "No messages: the next run starts afresh." })]));
  }

  async function change(action, question) {
    if (!window.confirm(question)) return;
    notice("");
    try {
      await api(`${path}/${action}`, {});
      if (action === "delete") { window.location.href = "/sessions"; return; }
      notice("Cleared.");
    } catch (e) { notice(e.message, true); }
    load();
  }

  document.getElementById("clear").addEventListener("click", () => change("clear", `Clear the conversation of session ${name}?`));
  document.getElementById("delete").addEventListener("click", () => change("delete", `Delete session ${name}?`));
  load();
}

document.addEventListener("DOMContentLoaded", () => {
  const page = document.body.dataset.page;
  if (page === "login") return;
  refreshBadge();
  setInterval(() => { if (!document.hidden) refreshBadge(); }, 10000);
  if (page === "runs") runsPage();
  else if (page === "run") runPage();
  else if (page === "approvals") approvalsPage();
  else if (page === "sessions") sessionsPage();
  else if (page === "session") sessionPage();
});
