// The dataset upload page: drag and drop of files and folders, a progress bar per file
// and overall, resumable after a network break or a reload. It speaks the protocol in
// datasets/api.py: with the filesystem backend parts go to Gantry (PUT .../part/), with
// S3 straight to the object store through presigned URLs. Each part's sha256 is sent
// along; the server (or, for S3, the commit) checks it.
(function () {
  "use strict";
  const root = document.getElementById("uploader");
  if (!root) return;
  const $ = (role) => root.querySelector(`[data-role="${role}"]`);
  const api = root.dataset.api; // .../api/v1/uploads/
  const datasetId = Number(root.dataset.dataset);
  const storageKey = `gantry-upload-${datasetId}`;
  const csrf = JSON.parse(document.body.getAttribute("hx-headers") || "{}")["X-CSRFToken"];
  const PARALLEL = 4;
  let picked = new Map(); // path -> File
  let session = null;
  let rows = new Map(); // path -> {bar, done, size}
  let busy = false;

  // --- picking files ------------------------------------------------------------------
  // A folder you choose (or drop alone) is the version's top level, as `gantry datasets
  // push DIR` makes it: digits_csv/train.csv arrives as train.csv. Folders dropped beside
  // other things keep their names.
  function add(file, path) {
    // NFKC: the server keeps names so, and answers with them.
    path = (path || file.webkitRelativePath || file.name).replace(/^\/+/, "").normalize("NFKC");
    picked.set(path, file);
  }
  function readEntry(entry, prefix, asRoot) {
    return new Promise((resolve) => {
      if (entry.isFile) {
        entry.file((f) => { add(f, prefix + entry.name); resolve(); }, () => resolve());
      } else if (entry.isDirectory) {
        const reader = entry.createReader();
        const all = [];
        const more = () => reader.readEntries((batch) => {
          if (!batch.length) {
            const inner = asRoot ? "" : `${prefix}${entry.name}/`;
            Promise.all(all.map((e) => readEntry(e, inner))).then(resolve);
          } else { all.push(...batch); more(); }
        }, () => resolve());
        more();
      } else resolve();
    });
  }
  const drop = $("drop");
  drop.addEventListener("dragover", (e) => { e.preventDefault(); drop.classList.add("bg-body-tertiary"); });
  drop.addEventListener("dragleave", () => drop.classList.remove("bg-body-tertiary"));
  drop.addEventListener("drop", async (e) => {
    e.preventDefault();
    drop.classList.remove("bg-body-tertiary");
    const entries = [...e.dataTransfer.items].map((i) => i.webkitGetAsEntry && i.webkitGetAsEntry()).filter(Boolean);
    if (entries.length === 1 && entries[0].isDirectory) await readEntry(entries[0], "", true);
    else if (entries.length) await Promise.all(entries.map((en) => readEntry(en, "")));
    else [...e.dataTransfer.files].forEach((f) => add(f));
    render();
  });
  function pickedFiles(input) { [...input.files].forEach((f) => add(f, f.name)); input.value = ""; render(); }
  function pickedFolder(input) {
    // webkitRelativePath starts with the chosen folder's own name: drop it.
    [...input.files].forEach((f) => add(f, f.webkitRelativePath.split("/").slice(1).join("/") || f.name));
    input.value = ""; render();
  }
  $("pick-files").addEventListener("change", (e) => pickedFiles(e.target));
  $("pick-folder").addEventListener("change", (e) => pickedFolder(e.target));
  $("clear").addEventListener("click", () => { if (!busy) { picked = new Map(); render(); } });

  // The one size rule (core/formatting.py), from gantry.js: the version page says the same.
  const human = (n) => window.gantryFormat.size(n);
  function render() {
    const body = $("files");
    body.replaceChildren();
    rows = new Map();
    let total = 0;
    for (const [path, file] of [...picked.entries()].sort()) {
      total += file.size;
      const tr = document.createElement("tr");
      const name = document.createElement("td"); name.className = "mono"; name.textContent = path;
      const size = document.createElement("td"); size.className = "text-end"; size.textContent = human(file.size);
      const cell = document.createElement("td");
      const progress = document.createElement("div"); progress.className = "progress"; progress.style.height = "1rem";
      const bar = document.createElement("div"); bar.className = "progress-bar"; bar.style.width = "0%";
      progress.append(bar); cell.append(progress); tr.append(name, size, cell); body.append(tr);
      rows.set(path, { bar, done: 0, size: file.size });
    }
    $("summary").textContent = picked.size ? `${picked.size} files, ${human(total)}` : "";
    $("start").disabled = busy || !picked.size;
  }
  function status(text, kind) {
    const el = $("status");
    el.className = `alert alert-${kind || "info"}`;
    el.textContent = text;
  }
  function progress() {
    let done = 0, total = 0;
    for (const row of rows.values()) {
      done += row.done; total += row.size;
      row.bar.style.width = `${row.size ? (100 * row.done) / row.size : 100}%`;
    }
    const pct = total ? Math.floor((100 * done) / total) : 100;
    $("overall").style.width = `${pct}%`;
    $("overall").textContent = `${pct}%`;
  }

  // --- talking to Gantry ----------------------------------------------------------------
  async function call(method, url, body) {
    const resp = await fetch(url, {
      method, credentials: "same-origin",
      headers: { "Content-Type": "application/json", "X-CSRFToken": csrf, Accept: "application/json" },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const data = await resp.json().catch(() => ({}));
    if (!resp.ok) {
      const err = new Error(explain(data) || `HTTP ${resp.status}`);
      err.status = resp.status;
      throw err;
    }
    return data;
  }
  function explain(data) {
    if (!data || typeof data !== "object") return "";
    if (data.detail) return data.detail;
    return Object.values(data).flat().map((v) => (typeof v === "object" ? JSON.stringify(v) : v)).join(" ");
  }
  function put(url, buf, headers, onProgress) {
    return new Promise((resolve, reject) => {
      const xhr = new XMLHttpRequest();
      xhr.open("PUT", url);
      for (const [k, v] of Object.entries(headers)) xhr.setRequestHeader(k, v);
      xhr.upload.onprogress = (e) => onProgress(e.loaded);
      xhr.onload = () => {
        if (xhr.status >= 200 && xhr.status < 300) resolve(xhr);
        else { const err = new Error(explainText(xhr) || `HTTP ${xhr.status}`); err.status = xhr.status; reject(err); }
      };
      xhr.onerror = () => reject(new Error("network error"));
      xhr.send(buf);
    });
  }
  function explainText(xhr) {
    try { return explain(JSON.parse(xhr.responseText)); } catch (e) { return ""; }
  }
  async function sha256hex(buf) {
    const digest = window.crypto && crypto.subtle
      ? new Uint8Array(await crypto.subtle.digest("SHA-256", buf))
      : sha256Fallback(new Uint8Array(buf));
    return [...digest].map((b) => b.toString(16).padStart(2, "0")).join("");
  }
  async function retrying(what, fn) {
    let delay = 500;
    for (let attempt = 1; ; attempt++) {
      try { return await fn(); } catch (err) {
        // 4xx other than 408/429 cannot succeed by trying again.
        if (err.status && err.status < 500 && err.status !== 408 && err.status !== 429) throw err;
        if (attempt >= 8) throw new Error(`${what}: ${err.message}; reload the page to resume.`);
        status(`${what}: ${err.message}; retrying…`, "warning");
        await new Promise((r) => setTimeout(r, delay));
        delay = Math.min(delay * 2, 15000);
      }
    }
  }

  async function sendPart(file, info, number) {
    const start = (number - 1) * session.part_size;
    const blob = file.slice(start, Math.min(start + session.part_size, file.size));
    const buf = await blob.arrayBuffer();
    const sha = await sha256hex(buf);
    const row = rows.get(info.path);
    const before = row.done;
    const onProgress = (n) => { row.done = before + n; progress(); };
    if (session.backend === "s3") {
      await retrying(`${info.path} part ${number}`, async () => {
        const signed = await call("POST", `${api}${session.id}/sign/`, { file: info.id, numbers: [number] });
        const xhr = await put(signed.urls[String(number)], buf, {}, onProgress);
        await call("POST", `${api}${session.id}/complete-part/`, {
          file: info.id, number, sha256: sha, etag: xhr.getResponseHeader("ETag") || "",
        });
      });
    } else {
      await retrying(`${info.path} part ${number}`, () => put(
        `${api}${session.id}/part/?file=${info.id}&number=${number}`, buf,
        { "Content-Type": "application/octet-stream", "X-CSRFToken": csrf, "X-Part-Sha256": sha },
        onProgress,
      ));
    }
    row.done = before + buf.byteLength;
    progress();
  }

  async function upload() {
    const work = [];
    for (const info of session.files) {
      const file = picked.get(info.path);
      const row = rows.get(info.path);
      if (!file || !row) continue;
      const have = new Set(info.parts);
      row.done = info.complete ? info.size : Math.min(info.size, have.size * session.part_size);
      for (let n = 1; n <= info.part_count; n++) if (!have.has(n)) work.push([file, info, n]);
    }
    progress();
    let next = 0;
    const worker = async () => { while (next < work.length) { const [f, i, n] = work[next++]; await sendPart(f, i, n); } };
    await Promise.all(Array.from({ length: PARALLEL }, worker));
  }

  async function commit() {
    status("All parts arrived; checking and committing…");
    await retrying("commit", () => call("POST", `${api}${session.id}/commit/`));
    for (;;) {
      await new Promise((r) => setTimeout(r, 1000));
      const s = await retrying("commit", () => call("GET", `${api}${session.id}/`));
      if (s.state === "committed") {
        localStorage.removeItem(storageKey);
        status("Committed.", "success");
        window.location.href = root.dataset.versionUrl.replace("/0/", `/${s.version}/`);
        return;
      }
      if (s.state === "open" && s.error) { session = s; throw new Error(s.error); }
    }
  }

  async function start() {
    busy = true; $("start").disabled = true;
    try {
      if (session) {
        // Resuming: the server says which parts it has; files must match path and size.
        session = await call("GET", `${api}${session.id}/`);
        const missing = session.files.filter((f) => !f.complete && !picked.has(f.path));
        if (missing.length) throw new Error(`Add these files again to resume: ${missing.slice(0, 5).map((f) => f.path).join(", ")}${missing.length > 5 ? "…" : ""}`);
        for (const f of session.files) {
          const file = picked.get(f.path);
          if (file && file.size !== f.size) throw new Error(`${f.path} is not the file that was being uploaded (size differs).`);
        }
      } else {
        const files = [...picked.entries()].map(([path, f]) => ({ path, size: f.size }));
        session = await call("POST", api, { dataset: datasetId, files, message: $("message").value });
        localStorage.setItem(storageKey, String(session.id));
      }
      status(`Uploading (upload #${session.id})…`);
      await upload();
      await commit();
    } catch (err) {
      status(err.message, err.status === 409 ? "info" : "danger"); // 409: nothing changed
    } finally {
      busy = false; $("start").disabled = !picked.size;
    }
  }
  $("start").addEventListener("click", start);

  // --- resuming after a reload ------------------------------------------------------------
  (async () => {
    const id = root.dataset.resume || localStorage.getItem(storageKey);
    if (!id) return;
    try {
      const s = await call("GET", `${api}${id}/`);
      if (s.state !== "open") { localStorage.removeItem(storageKey); return; }
      session = s;
      const left = s.files.filter((f) => !f.complete);
      const box = $("resume");
      box.classList.remove("d-none");
      box.textContent = `Upload #${s.id} was interrupted: ${left.length} of ${s.files.length} files still have parts to send. ` +
        "Drop the same files or folder again and press Upload: only the missing parts are sent." +
        (s.error ? ` Last error: ${s.error}` : "");
    } catch (e) { localStorage.removeItem(storageKey); }
  })();

  // --- SHA-256 for pages served over plain http (crypto.subtle needs a secure context) ----
  function sha256Fallback(bytes) {
    const K = new Uint32Array([
      0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
      0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
      0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
      0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
      0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
      0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
      0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
      0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2]);
    const H = new Uint32Array([0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19]);
    const len = bytes.length;
    const padded = new Uint8Array(((len + 9 + 63) >> 6) << 6);
    padded.set(bytes); padded[len] = 0x80;
    const view = new DataView(padded.buffer);
    view.setUint32(padded.length - 8, Math.floor(len / 0x20000000)); view.setUint32(padded.length - 4, (len << 3) >>> 0);
    const W = new Uint32Array(64);
    const rotr = (x, n) => (x >>> n) | (x << (32 - n));
    for (let off = 0; off < padded.length; off += 64) {
      for (let i = 0; i < 16; i++) W[i] = view.getUint32(off + 4 * i);
      for (let i = 16; i < 64; i++) {
        const s0 = rotr(W[i - 15], 7) ^ rotr(W[i - 15], 18) ^ (W[i - 15] >>> 3);
        const s1 = rotr(W[i - 2], 17) ^ rotr(W[i - 2], 19) ^ (W[i - 2] >>> 10);
        W[i] = (W[i - 16] + s0 + W[i - 7] + s1) >>> 0;
      }
      let [a, b, c, d, e, f, g, h] = H;
      for (let i = 0; i < 64; i++) {
        const t1 = (h + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + K[i] + W[i]) >>> 0;
        const t2 = ((rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c))) >>> 0;
        h = g; g = f; f = e; e = (d + t1) >>> 0; d = c; c = b; b = a; a = (t1 + t2) >>> 0;
      }
      H[0] += a; H[1] += b; H[2] += c; H[3] += d; H[4] += e; H[5] += f; H[6] += g; H[7] += h;
    }
    const out = new Uint8Array(32);
    const ov = new DataView(out.buffer);
    H.forEach((v, i) => ov.setUint32(4 * i, v));
    return out;
  }
  // Chosen before this script ran (the inputs work as soon as they are drawn): their
  // "change" fired with nobody listening; take them now (last: render needs
  // everything above).
  if ($("pick-files").files.length) pickedFiles($("pick-files"));
  if ($("pick-folder").files.length) pickedFolder($("pick-folder"));
})();
