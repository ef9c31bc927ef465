// Rendering: the conversation, the details panel and the session list, built with DOM
// calls and textContent only (nothing from the server is ever parsed as HTML).

import { objectURL } from "./api.js";
import { human } from "./files.js";

export const $ = (id) => document.getElementById(id);
export const el = (tag, props = {}, ...children) => {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(props)) {
    if (key === "class") node.className = value;
    else if (key === "text") node.textContent = value;
    else if (key.startsWith("data-") || key.startsWith("aria-") || key === "role") {
      node.setAttribute(key, value);
    } else node[key] = value;
  }
  for (const child of children) if (child) node.append(child);
  return node;
};

export function when(seconds) {
  const date = new Date(seconds * 1000);
  return date.toLocaleString(undefined, { dateStyle: "medium", timeStyle: "short" });
}

export function money(usd) {
  return `$${(usd || 0).toFixed(4)}`;
}

export function renderText(container, text) {
  // Fenced code blocks become <pre>; the rest keeps its line breaks.
  const chunks = String(text).split("```");
  chunks.forEach((chunk, i) => {
    if (i % 2 === 1) {
      const nl = chunk.indexOf("\n");
      const lang = nl >= 0 ? chunk.slice(0, nl).trim() : "";
      const code = (nl >= 0 ? chunk.slice(nl + 1) : chunk).replace(/\n$/, "");
      const pre = el("pre", { class: "code", tabIndex: 0 }, el("code", { text: code }));
      if (lang) pre.setAttribute("data-lang", lang);
      pre.setAttribute("aria-label", `${lang || "code"} block`);
      container.append(pre);
    } else {
      const body = chunk.replace(/^\n+|\n+$/g, "");
      if (body) container.append(el("p", { class: "text", text: body }));
    }
  });
}

// --- images ------------------------------------------------------------------------

export function imageButton(url, label, { local = false, className = "thumb" } = {}) {
  const img = el("img", { alt: label, loading: "lazy", decoding: "async" });
  const button = el("button", { type: "button", class: className, "aria-label": `Open ${label} full size` }, img);
  const ready = local ? Promise.resolve(url) : objectURL(url);
  ready
    .then((src) => {
      img.src = src;
      button.addEventListener("click", () => openLightbox(src, label, button));
    })
    .catch(() => {
      button.replaceWith(el("span", { class: "missing", text: `[${label} could not be loaded]` }));
    });
  return button;
}

export function openLightbox(src, label, opener) {
  const dialog = $("lightbox");
  $("lightbox-img").src = src;
  $("lightbox-img").alt = label;
  $("lightbox-title").textContent = label;
  $("lightbox-open").href = src;
  dialog.returnFocus = opener;
  dialog.showModal();
  $("lightbox-close").focus();
}

// --- conversation --------------------------------------------------------------------

export function imageLabel(image, who) {
  const source = image.source ? ` ${image.source}` : "";
  return `${who} image${source} (${image.width}×${image.height})`;
}

// The line the page adds to a message for the model, naming the files it kept in the
// session's attachments (app.js, send): shown as a quiet note under the message, not as
// bracketed text the person did not type.
const ATTACHED_NOTE = /\s*\[attached to this session: ([^\]\n]*)\]\s*$/;

export function userBubble(text, images) {
  const bubble = el("article", { class: "msg user", "aria-label": "You said" });
  const note = ATTACHED_NOTE.exec(text || "");
  const typed = note ? text.slice(0, note.index) : text;
  if (typed) renderText(bubble, typed);
  if (images.length) {
    const row = el("div", { class: "images" });
    for (const image of images) row.append(image);
    bubble.append(row);
  }
  if (note) {
    bubble.append(el("p", { class: "attached-note", text: `In this chat's attachments: ${note[1]}` }));
  }
  return bubble;
}

function toolBlock(message, elided) {
  const sent = message.tool_name === "send_image";
  const block = el("article", {
    class: `msg tool${message.is_error ? " error" : ""}${sent ? " sent" : ""}`,
    "aria-label": `Result of ${message.tool_name}`,
  });
  block.append(el("p", { class: "tool-name", text: `${message.tool_name} result${message.is_error ? " (error)" : ""}` }));
  if (message.text) block.append(el("pre", { class: "tool-result", tabIndex: 0, text: message.text }));
  if (message.images.length) {
    const row = el("div", { class: "images" });
    for (const image of message.images) {
      const button = imageButton(image.url, imageLabel(image, sent ? "Sent" : "Viewed"));
      if (elided.has(`${message.turn}:${image.digest}`)) {
        row.append(
          el("figure", { class: "elided" }, button,
            el("figcaption", { text: "elided: the model now sees a note; it can view it again" })),
        );
      } else row.append(button);
    }
    block.append(row);
  }
  return block;
}

function assistantBubble(message) {
  const bubble = el("article", { class: "msg assistant", "aria-label": "Assistant said" });
  if (message.text) renderText(bubble, message.text);
  for (const call of message.tool_calls) {
    bubble.append(
      el("p", { class: "tool-call", text: `→ ${call.name} ${JSON.stringify(call.arguments)}` }),
    );
  }
  return bubble;
}

export function renderConversation(state) {
  const box = $("conversation");
  box.replaceChildren();
  const conv = state.conv;
  if ((!conv || !conv.messages.length) && !state.pending.size) {
    box.append(
      el("p", {
        class: "empty",
        text: "Start by asking something. Drop, paste or pick images to ask about them; " +
          "other files become attachments the agent can list, read and grep.",
      }),
    );
  }
  const usage = new Map(finishedTurns(state).map((t) => [t.turn, t]));
  const elided = new Set(
    (conv ? conv.images : []).filter((im) => !im.live).map((im) => `${im.turn}:${im.digest}`),
  );
  const messages = conv ? conv.messages : [];
  messages.forEach((message, i) => {
    if (message.kind === "user") {
      const images = message.images.map((im) => imageButton(im.url, imageLabel(im, "Your")));
      box.append(userBubble(message.text, images));
    } else if (message.kind === "assistant") {
      if (message.text || message.tool_calls.length) box.append(assistantBubble(message));
    } else {
      box.append(toolBlock(message, elided));
    }
    const next = messages[i + 1];
    if (!next || next.turn !== message.turn) {
      const t = usage.get(message.turn);
      if (t) {
        const u = t.usage;
        box.append(
          el("p", {
            class: "turn-usage",
            text: `turn ${t.turn} · ${u.input_tokens} in / ${u.output_tokens} out · ${money(u.cost_usd)}`,
          }),
        );
      }
    }
  });
  for (const pending of state.pending.values()) {
    // A turn resumed after a reload has its user message in the record already.
    if (pending.user) box.append(pending.user);
    box.append(pending.bubble);
  }
  scrollToEnd(box);
}

// Images take their height only once loaded, after the scroll to the end: while the
// reader has not scrolled away, each image that loads keeps the end in view.
function scrollToEnd(box) {
  if (!box.dataset.follows) {
    box.dataset.follows = "true";
    box.addEventListener("scroll", () => {
      box.dataset.atEnd = box.scrollTop + box.clientHeight >= box.scrollHeight - 8 ? "true" : "";
    });
    box.addEventListener(
      "load",
      (event) => {
        if (event.target instanceof HTMLImageElement && box.dataset.atEnd) {
          box.scrollTop = box.scrollHeight;
        }
      },
      true, // load does not bubble; capture sees every image in the conversation
    );
  }
  box.scrollTop = box.scrollHeight;
  box.dataset.atEnd = "true";
}

// The newest message stays in view when the window or the conversation box changes
// size (a phone rotating, the keyboard opening, a panel closing), unless the reader
// scrolled away from the end.
export function followResizes(box) {
  let end = true;
  box.addEventListener("scroll", () => {
    end = box.scrollTop + box.clientHeight >= box.scrollHeight - 8;
  });
  const follow = () => {
    if (end) box.scrollTop = box.scrollHeight;
  };
  new ResizeObserver(follow).observe(box);
  // What is added or changed inside the box after the scroll to the end (a usage line,
  // a re-rendered table, text laid out late on a loaded machine) grows it without
  // resizing the box itself, which the ResizeObserver alone would miss.
  new MutationObserver(follow).observe(box, { childList: true, subtree: true, characterData: true });
}

// One row of the usage table: input tokens, the part the provider's prompt cache read
// and wrote (billed at their own prices, which the cost includes), output, cost.
function usageRow(label, u) {
  return el("tr", {},
    el("th", { scope: "row", text: label }),
    el("td", { text: String(u.input_tokens) }),
    el("td", { text: `${u.cache_read_tokens ?? 0} / ${u.cache_write_tokens ?? 0}` }),
    el("td", { text: String(u.output_tokens) }),
    el("td", { text: money(u.cost_usd) }));
}

// The turns whose usage is known: answered at least once and not running. A running
// turn's usage comes when it ends (under its answer, and in the table), never as a row
// of zeros, whether this page sent it or found it running after a reload.
function finishedTurns(state) {
  const running = new Set([...state.pending.values()].map((p) => p.turn));
  return (state.conv ? state.conv.turns : []).filter((t) => t.steps && !running.has(t.turn));
}

const USAGE_FIELDS = [
  "input_tokens", "cache_read_tokens", "cache_write_tokens", "output_tokens", "cost_usd",
];

export function renderDetails(state) {
  const conv = state.conv;
  $("model-name").textContent = conv ? conv.model : state.config.model;
  const body = $("usage").tBodies[0];
  body.replaceChildren();
  const turns = finishedTurns(state);
  const total = Object.fromEntries(USAGE_FIELDS.map((k) => [k, 0]));
  for (const t of turns) {
    body.append(usageRow(String(t.turn), t.usage));
    for (const k of USAGE_FIELDS) total[k] += t.usage[k] || 0;
  }
  const foot = $("usage").tFoot;
  foot.replaceChildren();
  if (turns.length) {
    foot.append(usageRow("All", total)); // the rows above, summed
  }
  const list = $("image-list");
  list.replaceChildren();
  const images = conv ? conv.images : [];
  $("images-help").textContent = images.length
    ? `Live images reach the model as pixels; elided ones are a short note it can re-view.`
    : "No images in this session yet.";
  for (const image of images) {
    const status = image.live ? "live" : "elided";
    const label = imageLabel(image, image.origin === "attachment" ? "Your" : "Viewed");
    list.append(
      el("li", { class: `image-item ${status}` },
        imageButton(image.url, label),
        el("span", { class: `status ${status}`, text: status }),
        el("span", { class: "meta", text: `turn ${image.turn} · ~${image.tokens} tokens` })),
    );
  }
  const attachments = $("attachment-list");
  attachments.replaceChildren();
  for (const a of conv ? conv.attachments : []) {
    attachments.append(el("li", { text: `${a.name} (${human(a.size)}, ${a.mime_type || "no type"})` }));
  }
  if (!attachments.children.length) attachments.append(el("li", { class: "help", text: "None yet." }));
}

// The title of the open chat before the server lists it: while its first turn runs,
// what the server will call it (its first message's first line), not "New chat".
function newChatTitle(state) {
  const first = [...state.pending.values()].find((p) => p.typed !== undefined);
  if (!first) return "New chat";
  const line = first.typed.trim().split("\n")[0].trim();
  return line || (first.images && first.images.length ? "(image)" : "New chat");
}

export function renderSessions(state, onPick, actions = {}) {
  const list = $("session-list");
  list.replaceChildren();
  const known = new Set(state.sessions.map((s) => s.id));
  const rows = known.has(state.sid) || !state.sid
    ? state.sessions
    : [{ id: state.sid, title: newChatTitle(state), turns: 0, modified: Date.now() / 1000 }, ...state.sessions];
  // The open chat counts the turns it runs now (its first one too, before it is listed).
  const runningTurns = [...state.pending.values()].map((p) => p.turn);
  for (const s of rows) {
    const turns = s.id === state.sid ? Math.max(s.turns, ...runningTurns) : s.turns;
    const button = el("button", { type: "button", class: "session" },
      el("span", { class: "title", text: s.title }),
      el("span", { class: "meta", text: `${turns} turn${turns === 1 ? "" : "s"} · ${when(s.modified)}` }));
    button.dataset.sid = s.id;
    if (s.id === state.sid) button.setAttribute("aria-current", "true");
    button.addEventListener("click", () => onPick(s.id));
    const row = el("li", { class: "session-row" }, button);
    if (known.has(s.id)) {
      // A chat the server holds can be renamed or deleted (a new one has nothing yet).
      const rename = el("button", { type: "button", class: "ghost small rename", text: "Rename", "aria-label": `Rename chat ${s.title}` });
      const remove = el("button", { type: "button", class: "ghost small delete", text: "Delete", "aria-label": `Delete chat ${s.title}` });
      rename.addEventListener("click", () => actions.rename && actions.rename(s));
      remove.addEventListener("click", () => actions.remove && actions.remove(s));
      row.append(el("span", { class: "session-actions" }, rename, remove));
    }
    list.append(row);
  }
}
