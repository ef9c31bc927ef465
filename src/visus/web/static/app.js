// The visus web chat. Messages go through the tether ingress of the default instance
// (images inline as tether images), answers stream from the tether SSE stream, and the
// conversation, usage, images and attachments are read from /web/api. Everything the
// page shows from the server is put in with textContent, never parsed as HTML.

import {
  ApiError,
  getJSON,
  postBytes,
  postJSON,
  postJSONWithProgress,
  readEvents,
  takeTokenFromURL,
  tokenRefused as storedTokenRefused,
  sendJSON,
  signIn,
} from "./api.js";
import { base64Of, human, isMessageImage, mb, refusal } from "./files.js";
import {
  $,
  el,
  followResizes,
  imageButton,
  renderConversation,
  renderDetails,
  renderSessions,
  renderText,
  userBubble,
} from "./view.js";

const state = {
  config: null,
  sid: "",
  conv: null,
  stream: null,
  tray: [],
  sending: false,
  pending: new Map(), // user msg_id -> {turn, bubble, text}
  // user msg_ids whose answer ended before their POST returned (a fast turn): the SSE
  // stream can beat the POST's own response, and such a turn must not wait forever.
  ended: new Map(), // msg_id -> the frame that ended its turn
  sessions: [],
  uploads: [], // attachments uploading now: {name, size, fraction, row}
  uploaded: [], // attachments stored since the last message: named in the next one
  storedNames: [], // their names, for the notice that says where they went
  // Send was pressed while files uploaded: the message goes when the last one is stored
  // (it names them), unless an upload failed, when it waits for the user.
  sendWhenUploaded: false,
};

// --- small helpers -------------------------------------------------------------------

/** `text` ending as a sentence does, so another sentence can follow it. */
function sentence(text) {
  return text.replace(/[.!?]?\s*$/, (end) => end.trim() || ".");
}

// A notice is an error (role alert, in the error colour) unless it only says how
// something went ("info": a stopped turn, where a file went), which is a plain status.
function notice(message, tone = "error") {
  const box = $("notice");
  $("notice-text").textContent = message || "";
  box.classList.toggle("info", tone === "info");
  box.setAttribute("role", tone === "info" ? "status" : "alert");
  box.hidden = !message;
}

// While a turn runs Send is disabled (a second message would only queue behind it on
// the server); the working bubble says for how long, and Stop ends the turn.
function syncBusy() {
  const busy = state.sending || state.pending.size > 0;
  $("send").disabled = busy;
  $("send").title = busy ? "Wait for the answer, or stop it" : "";
  document.body.dataset.busy = busy ? "true" : "";
}

// When each turn of this tab started (sessionStorage: a reload keeps it), so the
// working bubble counts the turn's true time, not the time since the page loaded.
function turnStarted(msgId) {
  const key = `visus.turn.${msgId}`;
  const known = Number(sessionStorage.getItem(key));
  if (known) return known;
  const now = Date.now();
  sessionStorage.setItem(key, String(now));
  return now;
}

function turnEnded(msgId) {
  sessionStorage.removeItem(`visus.turn.${msgId}`);
}

// The bubble of a turn in flight: what it does now (the phase an assistant.status frame
// names: "waiting for gpt-4.1", "viewing report.pdf page 4"), for how long, and Stop.
function workingBubble(msgId, phase = "") {
  const started = turnStarted(msgId);
  const work = { phase: phase || "Working…", tools: [] };
  const status = el("span", { class: "working-text" });
  const show = () => {
    status.textContent = `${work.phase} · ${Math.max(0, Math.round((Date.now() - started) / 1000))} s`;
  };
  show();
  const stop = el("button", { type: "button", class: "stop", text: "Stop", "aria-label": "Stop this answer" });
  stop.addEventListener("click", () => stopTurn(msgId, stop));
  const live = el("p", { class: "working", role: "status" }, el("span", { class: "spinner", "aria-hidden": "true" }), status, stop);
  const bubble = el("article", { class: "msg assistant streaming", "aria-label": "Assistant is answering", "aria-busy": "true" }, live);
  const timer = setInterval(() => {
    if (!bubble.isConnected && !state.pending.has(msgId)) {
      clearInterval(timer);
      return;
    }
    show();
  }, 1000);
  work.show = show;
  return { bubble, live, timer, work };
}

// Text so far, the tool calls started so far, then the live line (phase, time, Stop).
function redraw(pending) {
  pending.bubble.replaceChildren();
  if (pending.text) renderText(pending.bubble, pending.text);
  for (const line of pending.work.tools) pending.bubble.append(line);
  pending.bubble.append(pending.live);
  pending.bubble.setAttribute("aria-busy", "true");
}

async function stopTurn(msgId, button) {
  button.disabled = true;
  button.textContent = "Stopping…";
  try {
    await postJSON(
      `/v1/instances/${encodeURIComponent(state.config.instance)}/tether`,
      JSON.stringify({ v: 1, type: "turn.cancel", session: state.sid, payload: { target: msgId } }),
    );
  } catch (error) {
    // 404: the turn ended meanwhile; its answer is on its way.
    if (!(error instanceof ApiError && error.status === 404)) showError(error);
  }
}

function newSessionId() {
  const now = new Date().toISOString().replace(/[-:]/g, "").replace("T", "-").slice(0, 15);
  const random = Array.from(crypto.getRandomValues(new Uint8Array(3)))
    .map((b) => b.toString(16).padStart(2, "0"))
    .join("");
  return `web-${now}-${random}`;
}

function sessionFromHash() {
  const match = /^#s=([A-Za-z0-9][A-Za-z0-9._-]*)$/.exec(window.location.hash);
  return match ? match[1] : "";
}

function pickSession(sid) {
  openSession(sid).catch(showError);
  setPanel("nav", false);
}

async function refreshSessions() {
  state.sessions = (await getJSON("/web/api/sessions")).sessions;
  renderSessions(state, pickSession, sessionActions);
}

// --- rename and delete ----------------------------------------------------------------

function renameSession(session) {
  const dialog = $("rename-dialog");
  dialog.sid = session.id;
  $("rename-input").value = session.title;
  dialog.showModal();
  $("rename-input").select();
}

async function submitRename() {
  const sid = $("rename-dialog").sid;
  try {
    await sendJSON("PATCH", `/web/api/sessions/${encodeURIComponent(sid)}`, { title: $("rename-input").value });
    await refreshSessions();
  } catch (error) {
    showError(error);
  }
}

function deleteSession(session) {
  const dialog = $("delete-dialog");
  dialog.sid = session.id;
  $("delete-title").textContent = `Delete the chat "${session.title}"?`;
  dialog.showModal();
  $("delete-cancel").focus();
}

async function submitDelete() {
  const sid = $("delete-dialog").sid;
  try {
    await sendJSON("DELETE", `/web/api/sessions/${encodeURIComponent(sid)}`);
  } catch (error) {
    showError(error); // 409: a turn of it runs
    return;
  }
  await refreshSessions().catch(showError);
  if (sid === state.sid) {
    // The open chat went: show the most recent one left, or a new one.
    await openSession((state.sessions[0] && state.sessions[0].id) || newSessionId()).catch(showError);
  }
  notice("The chat was deleted, with its attached files.", "info");
}

const sessionActions = { rename: renameSession, remove: deleteSession };

async function refreshConversation() {
  const sid = state.sid;
  const conv = await getJSON(`/web/api/sessions/${encodeURIComponent(sid)}`);
  if (sid !== state.sid) return conv;
  state.conv = conv;
  renderConversation(state);
  renderDetails(state);
  renderUploads();
  return conv;
}

// --- the tether stream ------------------------------------------------------------------

class Stream {
  constructor(instance, session, after) {
    this.url = `/v1/instances/${encodeURIComponent(instance)}/tether/stream?session=${encodeURIComponent(session)}`;
    this.cursor = after;
    this.controller = new AbortController();
    this.run();
  }

  stop() {
    this.controller.abort();
  }

  async run() {
    const { signal } = this.controller;
    let broken = false;
    while (!signal.aborted) {
      try {
        if (broken) {
          // The server may have restarted with a new, empty ring whose seqs start
          // again from 0: take the cursor it gives now, and show what happened meanwhile.
          const conv = await refreshConversation();
          if (signal.aborted) return;
          if (conv.last_seq < this.cursor) this.cursor = 0;
          broken = false;
        }
        await readEvents(`${this.url}&after_seq=${this.cursor}`, {
          signal,
          onOpen: () => linkStatus("live"),
          onEvent: (event) => {
            if (event.id !== null) this.cursor = Number(event.id);
            if (event.event === "gap") return;
            onFrame(JSON.parse(event.data));
          },
        });
      } catch (error) {
        if (signal.aborted) return;
        if (error instanceof ApiError && error.status === 401) {
          askToken();
          return;
        }
      }
      broken = true;
      linkStatus("reconnecting");
      await new Promise((resolve) => setTimeout(resolve, 1000));
    }
  }
}

function linkStatus(status) {
  document.body.dataset.stream = status;
  const box = $("link-status");
  box.textContent = status === "live" ? "" : "Reconnecting to the server…";
  box.hidden = status === "live";
}

function pendingFor(frame) {
  // A server's answer names the message it answers in reply_to.
  return state.pending.get(frame.reply_to || frame.msg_id) || null;
}

async function onFrame(frame) {
  if (frame.session !== state.sid) return;
  const pending = pendingFor(frame);
  if (frame.type === "assistant.delta" && pending) {
    pending.text += frame.payload.text;
    redraw(pending); // the elapsed time and Stop stay under the text
    return;
  }
  if (frame.type === "assistant.status" && pending) {
    pending.work.phase = frame.payload.text;
    const tool = frame.payload.tool;
    if (tool) {
      // The call shows as it starts, as the record will show it once the turn ends.
      pending.work.tools.push(
        el("p", { class: "tool-call", text: `→ ${tool.name} ${JSON.stringify(tool.arguments)}` }),
      );
    }
    redraw(pending);
    pending.work.show();
    return;
  }
  if (frame.type === "assistant.done" || frame.type === "error") {
    const code = frame.type === "error" ? frame.payload.code : "";
    if (code === "cancelled") notice("Stopped. Send a new message to go on.", "info");
    else if (code === "turn_failed" && pending && giveBack(pending)) notice(givenBack(frame));
    else if (frame.type === "error") notice(`The agent reported an error: ${frame.payload.message}`);
    if (frame.type === "assistant.done" && frame.payload.stop_reason === "max_tokens") {
      notice("The answer was cut off at the model's output limit; ask it to continue.");
    }
    if (frame.type === "assistant.done" || code === "turn_failed" || code === "cancelled") {
      const id = frame.reply_to;
      if (id) turnEnded(id);
      if (pending) {
        clearInterval(pending.timer);
        state.pending.delete(id);
      } else if (id) {
        state.ended.set(id, frame); // send() reads it when its POST returns
        if (state.ended.size > 200) state.ended.delete(state.ended.keys().next().value);
      }
      syncBusy();
    }
    // The stored record shows everything the turn did, images the agent sent included
    // (send_image's result): the live view and a reload show the same things.
    await refreshConversation().catch(showError);
    await refreshSessions().catch(showError);
  }
}

// A turn that failed before any answer (an image the model cannot take, a provider that
// refused) gives its message back: the text to the box and its images to the tray, so
// nothing the user wrote or picked is lost. Only into an empty box and tray: never over
// what the user has started since, and not for a turn another page load sent.
function giveBack(pending) {
  const input = $("message");
  if (!pending.user || pending.text || input.value.trim() || state.tray.length) return false;
  input.value = pending.typed;
  state.tray.push(...pending.images);
  state.uploaded.push(...pending.mentions);
  renderTray();
  return true;
}

function givenBack(frame) {
  return `${sentence(frame.payload.message)} Your message is back in the box, to change and send again.`;
}

function lastTurn() {
  const turns = state.conv ? state.conv.turns : [];
  return turns.length ? turns[turns.length - 1].turn : 0;
}

// --- sessions ---------------------------------------------------------------------------

async function openSession(sid) {
  if (state.stream) state.stream.stop();
  state.sid = sid;
  for (const pending of state.pending.values()) clearInterval(pending.timer);
  state.pending.clear();
  state.ended.clear();
  state.uploaded = [];
  state.storedNames = [];
  state.sendWhenUploaded = false; // the typed message belonged to the other chat
  syncBusy();
  const url = new URL(window.location.href);
  url.hash = `s=${sid}`;
  history.replaceState(history.state, "", url);
  renderSessions(state, pickSession, sessionActions);
  const conv = await refreshConversation();
  state.stream = new Stream(state.config.instance, sid, conv.last_seq);
  resumeRunning(conv);
}

// Turns still running when the page was (re)loaded work on: each gets its working
// bubble with Stop, and Send waits, as if this page had sent them. Their answers come
// on the stream opened at conv.last_seq, which was read before the running list.
function resumeRunning(conv) {
  if (conv.id !== state.sid) return;
  for (const msgId of conv.running || []) {
    if (state.pending.has(msgId) || state.ended.has(msgId)) continue;
    // The phase the server's last status named (a reload mid-turn shows the step).
    const { bubble, live, timer, work } = workingBubble(msgId, (conv.phases || {})[msgId]);
    state.pending.set(msgId, { turn: lastTurn(), user: null, bubble, live, timer, work, text: "" });
  }
  if (state.pending.size) {
    syncBusy();
    renderConversation(state);
    renderDetails(state); // no usage row for the turn found running
    renderSessions(state, pickSession, sessionActions);
  }
}

// --- the composer -----------------------------------------------------------------------

function renderTray() {
  const tray = $("tray");
  tray.replaceChildren();
  for (const item of state.tray) {
    const label = item.file.name || "pasted image";
    const remove = el("button", {
      type: "button",
      class: "remove",
      text: "×",
      "aria-label": `Remove ${label}`,
    });
    remove.addEventListener("click", () => {
      const index = state.tray.indexOf(item);
      state.tray.splice(index, 1);
      if (item.url) URL.revokeObjectURL(item.url);
      renderTray();
      const buttons = $("tray").querySelectorAll("button.remove");
      (buttons[Math.min(index, buttons.length - 1)] || $("message")).focus();
    });
    const preview = item.kind === "image"
      ? el("img", { src: item.url, alt: label })
      : el("span", { class: "file-icon", text: (label.split(".").pop() || "file").slice(0, 4) });
    tray.append(
      el("li", { class: `tray-item ${item.kind}`, "data-kind": item.kind },
        preview,
        el("span", { class: "name", text: label }),
        el("span", { class: "meta", text: `${human(item.file.size)} · ${trayWhere(item)}` }),
        remove),
    );
  }
  tray.hidden = !state.tray.length;
}

function trayWhere(item) {
  if (item.kind !== "image") return "attachment";
  if (!item.fitted) return "checking on the server…";
  return item.fitted.size !== item.file.size || item.fitted.type !== item.file.type
    ? "in message, fitted on the server"
    : "in message";
}

// Every image is fitted for the model on the server as it is added (up to the size
// `visus view` reads): one the model cannot take (a 20000 x 20000 PNG, a broken file)
// is refused now, naming it, not after Send; the message carries what comes back.
function checkImage(item) {
  item.check = postBytes("/web/api/fit", item.file).then((blob) => {
    item.fitted = blob;
  });
  return item.check;
}

async function imageToSend(item) {
  try {
    await item.check;
  } catch (error) {
    if (error instanceof ApiError && error.status === 401) throw error;
    throw new Error(`${labelOf(item.file)} cannot be sent: ${sentence(error.message)}`);
  }
  return item.fitted || item.file;
}

function labelOf(file) {
  return `"${file.name || "pasted image"}"`;
}

async function addFiles(files) {
  const problems = [];
  const checks = [];
  for (const file of files) {
    const stored = state.conv ? state.conv.attachments : [];
    const why = refusal(file, state.tray, state.config.limits, stored, state.config.files);
    if (why) {
      problems.push(why);
      continue;
    }
    if (isMessageImage(file, state.config.limits)) {
      const item = { file, kind: "image", url: URL.createObjectURL(file), fitted: null };
      state.tray.push(item);
      checks.push(
        checkImage(item).catch((error) => {
          if (error instanceof ApiError && error.status === 401) throw error;
          state.tray = state.tray.filter((t) => t !== item);
          URL.revokeObjectURL(item.url);
          problems.push(`${labelOf(file)} was not added: ${sentence(error.message)}`);
        }),
      );
    } else {
      upload(file).catch(showError); // other files go to the attachments at once
    }
  }
  renderTray();
  notice(problems.join(" "));
  if (!checks.length) return;
  // Every file refused, said at once when the last check is back.
  try {
    await Promise.all(checks);
  } catch (error) {
    showError(error);
    return;
  }
  renderTray();
  // Only what these checks found: another drop's notice, shown meanwhile (one file
  // over the image count, say), stays until the person acts.
  if (problems.length) notice(problems.join(" "));
}

// The original of each image sent goes to the session's attachments too (within their
// caps), under its name: "look at sign.png" finds it afterwards, and a region of it
// reads the source's pixels, not the fitted copy the message carries.
async function keepOriginal(sid, item) {
  const file = item.file;
  const limits = state.config.limits;
  if (item.kept && item.kept.sid === sid) return item.kept.mention; // a message given back
  if (file.size > limits.attachment_max_file_bytes) return null;
  try {
    const body = JSON.stringify({
      filename: file.name || "image.png",
      contentBase64: await base64Of(file),
      mimeType: file.type,
    });
    const info = await postJSON(`/web/api/sessions/${encodeURIComponent(sid)}/attachments`, body);
    item.kept = { sid, mention: `${info.name} (${info.mime_type}, ${info.size} bytes)` };
    return item.kept.mention;
  } catch (error) {
    if (error instanceof ApiError && error.status === 401) throw error;
    return null; // the attachments are full: the message still goes, fitted
  }
}

// A file that is not a message image is stored in the session's attachments as soon as
// it is added: it shows in the attachments panel at once, with its upload progress.
async function upload(file) {
  const sid = state.sid;
  const name = file.name || "attachment";
  const bar = el("progress", { max: 1, value: 0, "aria-label": `Uploading ${name}` });
  const label = el("span", { class: "upload-text", text: `${name} (${human(file.size)}) · reading…` });
  const row = el("li", { class: "uploading" }, label, bar);
  const item = { name, size: file.size, row };
  state.uploads.push(item);
  renderUploads();
  try {
    const body = JSON.stringify({ filename: name, contentBase64: await base64Of(file), mimeType: file.type });
    label.textContent = `${name} (${human(file.size)}) · uploading`;
    const info = await postJSONWithProgress(
      `/web/api/sessions/${encodeURIComponent(sid)}/attachments`,
      body,
      (fraction) => {
        bar.value = fraction;
        label.textContent = `${name} (${human(file.size)}) · uploading ${Math.round(fraction * 100)}%`;
      },
    );
    if (sid === state.sid) {
      state.uploaded.push(`${info.name} (${info.mime_type}, ${info.size} bytes)`);
      state.storedNames.push(info.name);
      notice(storedNotice(state.storedNames), "info");
    }
  } catch (error) {
    if (state.sendWhenUploaded) {
      state.sendWhenUploaded = false;
      error.message = `${sentence(error.message)} Your message was not sent: press Send again to send it anyway.`;
    }
    throw error;
  } finally {
    state.uploads.splice(state.uploads.indexOf(item), 1);
    if (sid === state.sid) await refreshConversation().catch(showError);
    renderUploads();
    if (!state.uploads.length && state.sendWhenUploaded) {
      state.sendWhenUploaded = false;
      if (sid === state.sid) send();
    }
  }
}

// Every file stored since the last message, each named (two dropped together: both).
function storedNotice(names) {
  const list = names.length === 1
    ? names[0]
    : `${names.slice(0, -1).join(", ")} and ${names[names.length - 1]}`;
  const are = names.length === 1 ? "is" : "are";
  const it = names.length === 1 ? "it" : "them";
  return (
    `${list} ${are} in this chat's attached files (see Attachments); your next message names ${it}, ` +
    `and the agent opens ${it} with its attachment tools.`
  );
}

function renderUploads() {
  const list = $("attachment-list");
  list.querySelectorAll("li.uploading").forEach((li) => li.remove());
  if (state.uploads.length) list.querySelectorAll("li.help").forEach((li) => li.remove());
  for (const item of state.uploads) list.prepend(item.row);
}

function showError(error) {
  if (error instanceof ApiError && error.status === 401) {
    askToken();
    return;
  }
  notice(error instanceof Error ? error.message : String(error));
}

async function send() {
  if (state.sending || state.pending.size) return;
  const input = $("message");
  const text = input.value.trim();
  const items = [...state.tray];
  if (state.uploads.length) {
    // Sent by upload() once the last file is stored, so the message can name it.
    state.sendWhenUploaded = true;
    notice("Sending when the files have uploaded (see Attachments).");
    return;
  }
  if (!text && !items.length && !state.uploaded.length) {
    notice("Write a message or add an image first.");
    return;
  }
  // Checked again as a whole: the tray may have been filled before limits changed.
  const limits = state.config.limits;
  for (let i = 0; i < items.length; i += 1) {
    const why = refusal(items[i].file, items.slice(0, i), limits, state.conv ? state.conv.attachments : [], state.config.files);
    if (why) {
      notice(why);
      return;
    }
  }
  state.sending = true;
  syncBusy();
  notice("");
  try {
    const sid = state.sid;
    const images = items.filter((t) => t.kind === "image");
    const files = [];
    for (const item of images) files.push(await imageToSend(item)); // checked, fitted
    const kept = [];
    for (const item of images) {
      const mention = await keepOriginal(sid, item);
      if (mention) kept.push(mention);
    }
    const uploaded = state.uploaded.filter(() => sid === state.sid);
    const mentions = [...uploaded, ...kept];
    state.uploaded = [];
    state.storedNames = [];
    const payload = { text };
    if (mentions.length) {
      payload.text = `${text}${text ? "\n\n" : ""}[attached to this session: ${mentions.join(", ")}]`;
    }
    if (images.length) {
      payload.images = [];
      for (const file of files) {
        payload.images.push({ media_type: file.type, data: await base64Of(file) });
      }
    }
    const body = JSON.stringify({ v: 1, type: "user.message", session: sid, payload });
    const size = new Blob([body]).size;
    if (size > limits.max_wire_bytes) {
      throw new Error(`This message is ${mb(size)} as sent, over the ${mb(limits.max_wire_bytes)} a message may be.`);
    }
    const accepted = await postJSON(
      `/v1/instances/${encodeURIComponent(state.config.instance)}/tether`,
      body,
    );
    const thumbs = images.map((item) => imageButton(item.url, `Your image ${item.file.name}`, { local: true }));
    // What the page keeps of the message while its turn runs: shown under the record,
    // and given back to the box if the turn fails before any answer.
    const sent = { user: userBubble(payload.text, thumbs), text: "", typed: text, images, mentions: uploaded };
    state.tray = state.tray.filter((t) => !images.includes(t));
    renderTray();
    input.value = "";
    const early = state.ended.get(accepted.msg_id);
    if (early) {
      // Its turn ended before this POST returned (the stream can be faster): nothing to
      // wait for; a fast failure (a refused image) still gives the message back.
      state.ended.delete(accepted.msg_id);
      if (early.type === "error" && early.payload.code === "turn_failed" && giveBack(sent)) {
        notice(givenBack(early));
      }
      refreshConversation().catch(showError);
    } else {
      const { bubble, live, timer, work } = workingBubble(accepted.msg_id);
      state.pending.set(accepted.msg_id, {
        work,
        ...sent,
        turn: lastTurn() + state.pending.size + 1,
        bubble,
        live,
        timer,
      });
    }
    renderConversation(state);
    renderSessions(state, pickSession, sessionActions); // this turn counts in the list
    if (mentions.length) refreshConversation().catch(showError);
  } catch (error) {
    showError(error);
  } finally {
    state.sending = false;
    syncBusy();
  }
}

// --- panels (phone-sized screens) ------------------------------------------------------------

function setPanel(which, open) {
  const toggle = $(which === "nav" ? "toggle-nav" : "toggle-details");
  document.body.classList.toggle(`${which}-open`, open);
  toggle.setAttribute("aria-expanded", String(open));
  if (open) $(which).querySelector("button, [tabindex], a")?.focus();
}

// --- auth -------------------------------------------------------------------------------

// The server refused the last token given (in the address, or in the dialog).
let tokenRefused = false;

function askToken() {
  const dialog = $("token-dialog");
  // Asked again after a refusal: say so, or the dialog just comes back as if the click
  // had done nothing.
  $("token-error").hidden = !(tokenRefused || storedTokenRefused());
  if (!dialog.open) dialog.showModal();
  $("token-input").select();
}

// --- wiring -----------------------------------------------------------------------------

function wire() {
  followResizes($("conversation"));
  $("notice-dismiss").addEventListener("click", () => {
    notice("");
    $("message").focus();
  });
  $("composer").addEventListener("submit", (event) => {
    event.preventDefault();
    send();
  });
  $("message").addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      send();
    }
  });
  $("attach").addEventListener("click", () => $("file-input").click());
  $("file-input").addEventListener("change", (event) => {
    addFiles([...event.target.files]);
    event.target.value = "";
  });
  document.addEventListener("paste", (event) => {
    const files = [...(event.clipboardData ? event.clipboardData.files : [])];
    if (!files.length) return;
    if (!event.clipboardData.types.includes("text/plain")) event.preventDefault();
    addFiles(files);
  });
  const overlay = $("drop-overlay");
  let depth = 0;
  const carriesFiles = (event) => event.dataTransfer && [...event.dataTransfer.types].includes("Files");
  document.addEventListener("dragenter", (event) => {
    if (!carriesFiles(event)) return;
    event.preventDefault();
    depth += 1;
    overlay.hidden = false;
  });
  document.addEventListener("dragover", (event) => {
    if (!carriesFiles(event)) return;
    event.preventDefault();
    event.dataTransfer.dropEffect = "copy";
  });
  document.addEventListener("dragleave", () => {
    depth = Math.max(0, depth - 1);
    if (!depth) overlay.hidden = true;
  });
  document.addEventListener("drop", (event) => {
    if (!carriesFiles(event)) return;
    event.preventDefault();
    depth = 0;
    overlay.hidden = true;
    addFiles([...event.dataTransfer.files]);
    $("message").focus();
  });
  $("new-chat").addEventListener("click", () => {
    openSession(newSessionId()).catch(showError);
    setPanel("nav", false);
    $("message").focus();
  });
  $("toggle-nav").addEventListener("click", () => {
    setPanel("details", false);
    setPanel("nav", !document.body.classList.contains("nav-open"));
  });
  $("toggle-details").addEventListener("click", () => {
    setPanel("nav", false);
    setPanel("details", !document.body.classList.contains("details-open"));
  });
  document.addEventListener("keydown", (event) => {
    if (event.key !== "Escape") return;
    for (const which of ["nav", "details"]) {
      if (document.body.classList.contains(`${which}-open`)) {
        setPanel(which, false);
        $(which === "nav" ? "toggle-nav" : "toggle-details").focus();
      }
    }
  });
  // The address bar's #s=<session> keeps the open session across reloads: the skip
  // link moves focus without touching it, and an edited hash opens that session.
  document.querySelector(".skip-link").addEventListener("click", (event) => {
    event.preventDefault();
    $("message").focus();
  });
  window.addEventListener("hashchange", () => {
    const wanted = sessionFromHash();
    if (wanted && wanted !== state.sid && state.config) openSession(wanted).catch(showError);
  });
  $("lightbox-close").addEventListener("click", () => $("lightbox").close());
  $("lightbox").addEventListener("click", (event) => {
    if (event.target === $("lightbox")) $("lightbox").close();
  });
  $("lightbox").addEventListener("close", () => {
    const opener = $("lightbox").returnFocus;
    if (opener && opener.isConnected) opener.focus();
  });
  $("rename-form").addEventListener("submit", () => submitRename());
  $("rename-cancel").addEventListener("click", () => $("rename-dialog").close());
  $("delete-form").addEventListener("submit", () => submitDelete());
  $("delete-cancel").addEventListener("click", () => $("delete-dialog").close());
  $("token-form").addEventListener("submit", async () => {
    try {
      tokenRefused = !(await signIn($("token-input").value.trim()));
    } catch (error) {
      showError(error);
      return;
    }
    if (tokenRefused) askToken();
    else start();
  });
}

// The offline reference model, said once where the model is named: what it is (one
// sentence and a link) and how to switch to a real one.
function showModelNote(config) {
  const box = $("model-note");
  box.replaceChildren();
  box.hidden = !config.reference;
  if (!config.reference) return;
  box.append(
    `${config.model} is visus's offline reference model: it reads the words, positions and colours of images and nothing more (`,
    el("a", { href: "/web/static/reference.html", target: "_blank", rel: "noopener", text: "what it is" }),
    "). For real answers restart visus serve with a provider key (OPENAI_API_KEY, ANTHROPIC_API_KEY, " +
      "GEMINI_API_KEY or OPENROUTER_API_KEY) or with --model provider:model.",
  );
}

async function start() {
  try {
    state.config = await getJSON("/web/api/config");
  } catch (error) {
    showError(error);
    return;
  }
  $("model-badge").textContent = state.config.model;
  $("model-name").textContent = state.config.model;
  showModelNote(state.config);
  try {
    await refreshSessions();
    const wanted = sessionFromHash() || (state.sessions[0] && state.sessions[0].id) || newSessionId();
    await openSession(wanted);
    document.body.dataset.ready = "true";
  } catch (error) {
    showError(error);
  }
}

takeTokenFromURL();
wire();
renderTray();
start();
