// The job page's terminal (templates/interactive/_job_terminal.html): xterm.js over the
// terminal websocket (interactive/terminal_consumers.py). Binary frames are terminal bytes both
// ways; text frames are JSON: ours {"resize": [cols, rows]}, the server's {"error"} and
// {"exit"}. The Open button is enabled while the job runs (live.js keeps #job-state's
// data-state current).
(function () {
  "use strict";
  const card = document.getElementById("job-terminal");
  if (!card || typeof Terminal === "undefined") return;
  const screen = document.getElementById("terminal-screen");
  const openBtn = document.getElementById("terminal-open");
  const closeBtn = document.getElementById("terminal-close");
  const status = document.getElementById("terminal-status");
  const workerSel = document.getElementById("terminal-worker");
  const stateEl = document.getElementById("job-state");
  const encoder = new TextEncoder();
  let term = null, fit = null, socket = null, onResize = null;

  function running() { return !stateEl || stateEl.dataset.state === "running"; }

  function syncButton() {
    if (socket) return;
    openBtn.disabled = !running();
    if (!running()) status.textContent = stateEl && ["succeeded", "failed", "cancelled", "timed_out", "lost"].includes(stateEl.dataset.state) ? "the job has ended" : "available once the job runs";
    else if (status.textContent.startsWith("available")) status.textContent = "";
  }

  function finish(text) {
    status.textContent = text;
    openBtn.classList.remove("d-none");
    closeBtn.classList.add("d-none");
    if (onResize) window.removeEventListener("resize", onResize);
    socket = null;
    syncButton();
  }

  function open() {
    if (socket) return;
    screen.classList.remove("d-none");
    if (!term) {
      term = new Terminal({ cursorBlink: true, fontSize: 13, scrollback: 5000, convertEol: false });
      fit = new FitAddon.FitAddon();
      term.loadAddon(fit);
      term.open(screen);
      term.onData((data) => { if (socket && socket.readyState === 1) socket.send(encoder.encode(data)); });
      term.onResize(({ cols, rows }) => { if (socket && socket.readyState === 1) socket.send(JSON.stringify({ resize: [cols, rows] })); });
    } else {
      term.reset();
    }
    fit.fit();
    const worker = workerSel ? workerSel.value : "0";
    const scheme = window.location.protocol === "https:" ? "wss:" : "ws:";
    const query = new URLSearchParams({ worker: worker, cols: term.cols, rows: term.rows });
    socket = new WebSocket(`${scheme}//${window.location.host}${card.dataset.wsPath}?${query}`);
    socket.binaryType = "arraybuffer";
    let exitCode = null, error = null;
    status.textContent = "connecting…";
    openBtn.classList.add("d-none");
    closeBtn.classList.remove("d-none");
    socket.onopen = () => { status.textContent = `worker ${worker}`; term.focus(); };
    socket.onmessage = (event) => {
      if (typeof event.data !== "string") { term.write(new Uint8Array(event.data)); return; }
      const msg = JSON.parse(event.data);
      if ("exit" in msg) exitCode = msg.exit;
      if (msg.error) { error = msg.error; term.write(`\r\n\x1b[31m${msg.error}\x1b[0m\r\n`); }
    };
    socket.onclose = (event) => {
      if (error) finish(error);
      else if (exitCode !== null) finish(`exited with code ${exitCode}`);
      else finish(event.code === 1000 ? "closed" : `disconnected (${event.code})`);
    };
    onResize = () => fit.fit();
    window.addEventListener("resize", onResize);
  }

  openBtn.addEventListener("click", open);
  closeBtn.addEventListener("click", () => { if (socket) socket.close(1000); });
  if (stateEl) new MutationObserver(syncButton).observe(stateEl, { attributes: true, attributeFilter: ["data-state"] });
  syncButton();
})();
