// The job form's code upload: a folder (chosen or dropped) becomes a code snapshot through
// /api/v1/snapshots/ (contract items 1-3): every file's sha256 is computed here
// (crypto.subtle), the manifest is sent, only the contents the lab does not hold yet are
// uploaded (in tars of up to 4 MB / 500 files), and the snapshot is selected in the form. Also: filters for searchable selects.
(function () {
  "use strict";

  document.querySelectorAll("input[data-filters]").forEach(function (box) {
    var select = document.getElementById(box.dataset.filters);
    if (!select) return;
    box.addEventListener("input", function () {
      var words = box.value.toLowerCase().split(/\s+/).filter(Boolean);
      Array.prototype.forEach.call(select.options, function (option) {
        var text = option.text.toLowerCase();
        option.hidden = !option.selected && !words.every(function (w) { return text.indexOf(w) >= 0; });
      });
    });
  });

  var box = document.getElementById("code-upload");
  if (!box) return;
  var form = box.closest("form");
  var select = document.getElementById("id_code_snapshot");
  var picker = document.getElementById("code-folder");
  var drop = document.getElementById("code-drop");
  var progress = box.querySelector(".progress");
  var bar = box.querySelector(".progress-bar");
  var status = document.getElementById("code-status");
  var csrf = form.querySelector("[name=csrfmiddlewaretoken]").value;
  var busy = false;

  function size(n) {
    var units = ["B", "KiB", "MiB", "GiB"], i = 0;
    if (n < 1024) return n + " B";
    while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
    return n.toFixed(1) + " " + units[i];
  }
  function say(text, kind) {
    status.textContent = text;
    status.className = "small mt-1" + (kind ? " text-" + kind : "");
  }
  function show(fraction) {
    progress.classList.remove("d-none");
    var pct = Math.round(fraction * 100);
    bar.style.width = pct + "%";
    progress.setAttribute("aria-valuenow", pct);
  }

  // Ignore rules: .git/ always; a top-level .gitignore / .gantryignore, simple patterns.
  function globToRegExp(glob) {
    var out = "";
    for (var i = 0; i < glob.length; i++) {
      var c = glob[i];
      if (c === "*" && glob[i + 1] === "*") { out += ".*"; i++; if (glob[i + 1] === "/") i++; }
      else if (c === "*") out += "[^/]*";
      else if (c === "?") out += "[^/]";
      else out += c.replace(/[.+^${}()|[\]\\]/g, "\\$&");
    }
    return out;
  }
  function parseIgnore(text) {
    var rules = [];
    text.split(/\r?\n/).forEach(function (line) {
      line = line.replace(/\s+$/, "");
      if (!line || line[0] === "#" || line[0] === "!") return;
      var dirOnly = line.endsWith("/");
      if (dirOnly) line = line.slice(0, -1);
      var anchored = line.indexOf("/") >= 0;
      if (line[0] === "/") line = line.slice(1);
      var body = globToRegExp(line);
      var head = anchored ? "^" : "(^|/)";
      rules.push(new RegExp(head + body + (dirOnly ? "/" : "(/|$)")));
    });
    return rules;
  }
  function ignored(rel, rules) {
    if (/(^|\/)\.git(\/|$)/.test(rel)) return true;
    return rules.some(function (r) { return r.test(rel); });
  }

  function readEntry(entry, out) {
    return new Promise(function (resolve, reject) {
      if (entry.isFile) {
        entry.file(function (file) {
          out.push({ file: file, path: entry.fullPath.replace(/^\//, "") });
          resolve();
        }, reject);
      } else if (entry.isDirectory) {
        var reader = entry.createReader(), children = [];
        var more = function () {
          reader.readEntries(function (batch) {
            if (!batch.length) {
              Promise.all(children.map(function (c) { return readEntry(c, out); })).then(resolve, reject);
            } else { children = children.concat(batch); more(); }
          }, reject);
        };
        more();
      } else resolve();
    });
  }

  async function hex(file) {
    var digest = await crypto.subtle.digest("SHA-256", await file.arrayBuffer());
    return Array.from(new Uint8Array(digest)).map(function (b) { return b.toString(16).padStart(2, "0"); }).join("");
  }

  // Small files travel many to a request: a tar whose members are named by their sha256
  // (POST /api/v1/snapshots/<id>/blobs); one request per file costs more than its bytes.
  var BATCH_BYTES = 4 * 1024 * 1024, BATCH_FILES = 500;
  function tarHeader(name, length) {
    var h = new Uint8Array(512);
    function put(text, offset) { for (var i = 0; i < text.length; i++) h[offset + i] = text.charCodeAt(i); }
    put(name, 0);
    put("0000644\0", 100); put("0000000\0", 108); put("0000000\0", 116);
    put(length.toString(8).padStart(11, "0") + "\0", 124);
    put("00000000000\0", 136);
    put("        ", 148);
    put("0", 156);
    put("ustar\0", 257); put("00", 263);
    var sum = h.reduce(function (a, b) { return a + b; }, 0);
    put(sum.toString(8).padStart(6, "0") + "\0 ", 148);
    return h;
  }
  function tarOf(batch) {
    var parts = [];
    batch.forEach(function (it) {
      parts.push(tarHeader(it.sha256, it.file.size), it.file);
      var pad = (512 - (it.file.size % 512)) % 512;
      if (pad) parts.push(new Uint8Array(pad));
    });
    parts.push(new Uint8Array(1024));
    return new Blob(parts, { type: "application/x-tar" });
  }
  function batchesOf(items) {
    var out = [], current = [], bytes = 0;
    items.forEach(function (it) {
      current.push(it);
      bytes += it.file.size;
      if (bytes >= BATCH_BYTES || current.length >= BATCH_FILES) { out.push(current); current = []; bytes = 0; }
    });
    if (current.length) out.push(current);
    return out;
  }

  async function api(method, url, body, type) {
    var headers = { "X-CSRFToken": csrf, "Accept": "application/json" };
    if (type) headers["Content-Type"] = type;
    var response = await fetch(url, { method: method, headers: headers, body: body, credentials: "same-origin" });
    var data = response.status === 204 ? {} : await response.json().catch(function () { return {}; });
    if (!response.ok) throw new Error(data.detail || JSON.stringify(data) || ("HTTP " + response.status));
    return data;
  }

  async function upload(items) {
    if (busy || !items.length) return;
    if (!window.crypto || !crypto.subtle) {
      say("This page needs HTTPS (or localhost) to fingerprint files; upload with the gantry CLI instead.", "danger");
      return;
    }
    busy = true;
    try {
      var first = items[0].path;
      var root = first.indexOf("/") >= 0 ? first.split("/")[0] + "/" : "";
      var rules = [];
      for (var name of [".gitignore", ".gantryignore"]) {
        var found = items.find(function (it) { return it.path === root + name; });
        if (found) rules = rules.concat(parseIgnore(await found.file.text()));
      }
      var files = items.filter(function (it) { return !ignored(it.path.slice(root.length), rules); });
      var total = files.reduce(function (n, it) { return n + it.file.size; }, 0);
      var hashed = 0;
      for (var it of files) {
        say("Fingerprinting " + it.path + "…");
        it.sha256 = await hex(it.file);
        hashed += it.file.size;
        show(0.3 * (total ? hashed / total : 1));
      }
      var manifest = files.map(function (it) { return { path: it.path, size: it.file.size, sha256: it.sha256, mode: 420 }; });
      say("Sending the list of " + files.length + " files…");
      var snapshot = await api("POST", box.dataset.api, JSON.stringify({ project: Number(box.dataset.project), files: manifest, git: null }), "application/json");
      var bySha = {};
      files.forEach(function (it) { bySha[it.sha256] = it; });
      var missingItems = snapshot.missing.map(function (sha) { return bySha[sha]; });
      var todo = batchesOf(missingItems), sent = 0, sentBytes = 0;
      var missingBytes = missingItems.reduce(function (n, it) { return n + it.file.size; }, 0);
      async function worker() {
        while (todo.length) {
          var batch = todo.shift();
          await api("POST", box.dataset.api + snapshot.id + "/blobs", tarOf(batch), "application/x-tar");
          sent += batch.length;
          sentBytes += batch.reduce(function (n, it) { return n + it.file.size; }, 0);
          say("Uploaded " + sent + " of " + missingItems.length + " new files (" + size(sentBytes) + ")");
          show(0.3 + 0.7 * (missingBytes ? sentBytes / missingBytes : 1));
        }
      }
      await Promise.all([worker(), worker(), worker()]);
      if (snapshot.state !== "ready") snapshot = await api("POST", box.dataset.api + snapshot.id + "/finalize");
      show(1);
      var option = new Option("Code #" + snapshot.id + ": " + snapshot.file_count + " files, " + size(snapshot.size) + " (just uploaded)", snapshot.id, true, true);
      select.add(option, 1);
      select.value = String(snapshot.id);
      var skipped = items.length - files.length;
      say("Code #" + snapshot.id + " is ready: " + files.length + (files.length === 1 ? " file, " : " files, ") + size(snapshot.size) +
          (snapshot.missing.length ? ", " + snapshot.missing.length + " sent" : ", nothing new to send") +
          (skipped ? "; " + skipped + " ignored" : "") + ".", "success");
      box.dataset.ready = String(snapshot.id);
    } catch (err) {
      say("Upload failed: " + err.message, "danger");
    } finally {
      busy = false;
    }
  }

  function uploadPicked() {
    upload(Array.from(picker.files).map(function (f) { return { file: f, path: f.webkitRelativePath || f.name }; }));
  }
  picker.addEventListener("change", uploadPicked);
  // A folder chosen before this script ran (a slow page: the input is usable as soon as it
  // is drawn) fired its "change" with nobody listening; upload it now.
  if (picker.files && picker.files.length) uploadPicked();
  ["dragenter", "dragover"].forEach(function (type) {
    drop.addEventListener(type, function (e) { e.preventDefault(); drop.classList.add("dragging"); });
  });
  drop.addEventListener("dragleave", function () { drop.classList.remove("dragging"); });
  drop.addEventListener("drop", async function (e) {
    e.preventDefault();
    drop.classList.remove("dragging");
    var out = [], entries = Array.from(e.dataTransfer.items).map(function (i) { return i.webkitGetAsEntry && i.webkitGetAsEntry(); });
    await Promise.all(entries.filter(Boolean).map(function (entry) { return readEntry(entry, out); }));
    upload(out);
  });
  form.addEventListener("submit", function (e) {
    if (busy) { e.preventDefault(); say("Wait for the upload to finish, then submit.", "warning"); }
  });
})();
