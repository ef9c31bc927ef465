// What may be sent: the same bounds the server checks (it sends them in /web/api/config).
// Images of a type tether carries go into the message (one over tether's per-image
// bound, up to fit_max_bytes, is fitted on the server first); every other file goes to
// the session's attachments. The page decides by the browser's own file.type, never by
// sniffing bytes or by the name's extension. What is too big for either is pointed at
// the files folder, where the agent reads and views files of any size visus takes.

export function mb(bytes) {
  return `${(bytes / 1048576).toFixed(1)} MB`;
}

/** A size for people: bytes, KB or MB. */
export function human(bytes) {
  if (bytes < 1024) return `${bytes} bytes`;
  if (bytes < 1048576) return `${(bytes / 1024).toFixed(1)} KB`;
  return mb(bytes);
}

/** `bytes` for a message about `cap`: exact when both would read the same in MB. */
function sizeOf(bytes, cap) {
  if (mb(bytes) !== mb(cap)) return [mb(bytes), mb(cap)];
  const exact = (n) => `${n.toLocaleString("en")} bytes`;
  return [`${exact(bytes)} (${mb(bytes)})`, `${exact(cap)} (${mb(cap)})`];
}

export function isMessageImage(file, limits) {
  return limits.image_media_types.includes(file.type);
}

/** Whether an image is sent as it is or first fitted on the server. */
export function needsFitting(file, limits) {
  return isMessageImage(file, limits) && file.size > limits.max_image_bytes;
}

/** What a too-big file can do instead: the files folder the agent reads. */
function filesFolder(files) {
  const where = files && files.length ? ` (${files[0]})` : "";
  return ` Put it in the files folder${where} and name it in your message: the agent reads and views it there.`;
}

/**
 * Why `file` cannot join the tray (a message for the person), or null when it can.
 * `tray` is the list of items already waiting; `stored` the session's attachments.
 */
export function refusal(file, tray, limits, stored, files = []) {
  const name = `"${file.name || "pasted file"}"`;
  if (file.size === 0) return `${name} is empty, so it was not added.`;
  if (isMessageImage(file, limits)) {
    const images = tray.filter((t) => t.kind === "image");
    if (file.size > limits.fit_max_bytes) {
      const [got, cap] = sizeOf(file.size, limits.fit_max_bytes);
      return `${name} is ${got}; the page takes images up to ${cap}.${filesFolder(files)}`;
    }
    if (images.length + 1 > limits.max_images) {
      return (
        `A message carries at most ${limits.max_images} images; ${name} was not added.`
      );
    }
    // An image fitted on the server arrives at most at the per-image bound.
    const sent = (f) => Math.min(f.size, limits.max_image_bytes);
    const total = images.reduce((n, t) => n + sent(t.file), 0) + sent(file);
    if (total > limits.max_message_image_bytes) {
      return (
        `With ${name} the images would total ${mb(total)}, over the ` +
        `${mb(limits.max_message_image_bytes)} a message may carry. It was not added.`
      );
    }
    return null;
  }
  const waiting = tray.filter((t) => t.kind === "attachment");
  if (file.size > limits.attachment_max_file_bytes) {
    const [got, cap] = sizeOf(file.size, limits.attachment_max_file_bytes);
    return `${name} is ${got}; an attached file may be at most ${cap}.${filesFolder(files)}`;
  }
  if (stored.length + waiting.length + 1 > limits.attachment_max_files) {
    return (
      `This chat may hold at most ${limits.attachment_max_files} attached files; ${name} was not added.`
    );
  }
  const used =
    stored.reduce((n, a) => n + a.size, 0) + waiting.reduce((n, t) => n + t.file.size, 0);
  if (used + file.size > limits.attachment_max_session_bytes) {
    return (
      `With ${name} this chat's attached files would total ${mb(used + file.size)}, over ` +
      `the ${mb(limits.attachment_max_session_bytes)} a chat may hold. It was not added.`
    );
  }
  return null;
}

/** The file's bytes as standard base64 (no data: prefix). */
export function base64Of(file) {
  return new Promise((resolve, reject) => {
    const reader = new FileReader();
    reader.onerror = () => reject(reader.error || new Error(`cannot read ${file.name}`));
    reader.onload = () => {
      const url = String(reader.result);
      resolve(url.slice(url.indexOf(",") + 1));
    };
    reader.readAsDataURL(file);
  });
}

/** Bytes of base64 text as a Blob of `type` (for images an answer carries). */
export function blobOfBase64(data, type) {
  const raw = atob(data);
  const bytes = new Uint8Array(raw.length);
  for (let i = 0; i < raw.length; i += 1) bytes[i] = raw.charCodeAt(i);
  return new Blob([bytes], { type });
}
