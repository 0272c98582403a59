// The job page's live parts: log viewer, metric charts and status, over one websocket
// (jobs/consumers.py documents the messages). No framework; uPlot draws the charts.
(function () {
  "use strict";

  const page = document.getElementById("job-page");
  if (!page) return;

  const DOM_MAX = 5000; // lines kept on screen
  const BUFFER_MAX = 200000; // lines kept in memory (search and scrollback)
  const EARLIER_PAGE = 1000;

  // --- ANSI SGR colours ---------------------------------------------------------------
  const SGR = /\x1b\[([0-9;]*)m/g;
  const OTHER_ESCAPES = /\x1b\[[0-9;?]*[A-Za-ln-z]|\x1b\][^\x07]*\x07|\r/g;

  function color256(n) {
    if (n < 16) return null;
    if (n >= 232) {
      const v = 8 + (n - 232) * 10;
      return `rgb(${v},${v},${v})`;
    }
    n -= 16;
    const c = (x) => (x ? 55 + x * 40 : 0);
    return `rgb(${c(Math.floor(n / 36))},${c(Math.floor(n / 6) % 6)},${c(n % 6)})`;
  }

  function applyCodes(style, codes) {
    for (let i = 0; i < codes.length; i++) {
      const c = codes[i];
      if (c === 0) Object.assign(style, { fg: null, bg: null, fgRGB: null, bgRGB: null, bold: false, dim: false, italic: false, underline: false });
      else if (c === 1) style.bold = true;
      else if (c === 2) style.dim = true;
      else if (c === 3) style.italic = true;
      else if (c === 4) style.underline = true;
      else if (c === 22) style.bold = style.dim = false;
      else if (c === 23) style.italic = false;
      else if (c === 24) style.underline = false;
      else if (c >= 30 && c <= 37) { style.fg = c - 30; style.fgRGB = null; }
      else if (c >= 90 && c <= 97) { style.fg = c - 90 + 8; style.fgRGB = null; }
      else if (c === 39) style.fg = style.fgRGB = null;
      else if (c >= 40 && c <= 47) { style.bg = c - 40; style.bgRGB = null; }
      else if (c >= 100 && c <= 107) { style.bg = c - 100; style.bgRGB = null; }
      else if (c === 49) style.bg = style.bgRGB = null;
      else if ((c === 38 || c === 48) && codes[i + 1] === 5) {
        const n = codes[i + 2];
        const rgb = color256(n);
        if (c === 38) { style.fg = rgb ? null : n; style.fgRGB = rgb; } else { style.bg = rgb ? null : n % 8; style.bgRGB = rgb; }
        i += 2;
      } else if ((c === 38 || c === 48) && codes[i + 1] === 2) {
        const rgb = `rgb(${codes[i + 2] | 0},${codes[i + 3] | 0},${codes[i + 4] | 0})`;
        if (c === 38) { style.fg = null; style.fgRGB = rgb; } else { style.bg = null; style.bgRGB = rgb; }
        i += 4;
      }
    }
  }

  function styledSpan(text, style) {
    const span = document.createElement("span");
    span.textContent = text;
    const cls = [];
    if (style.fg !== null) cls.push(`ansi-fg-${style.fg}`);
    if (style.bg !== null) cls.push(`ansi-bg-${style.bg}`);
    if (style.bold) cls.push("ansi-bold");
    if (style.dim) cls.push("ansi-dim");
    if (style.italic) cls.push("ansi-italic");
    if (style.underline) cls.push("ansi-underline");
    if (cls.length) span.className = cls.join(" ");
    if (style.fgRGB) span.style.color = style.fgRGB;
    if (style.bgRGB) span.style.backgroundColor = style.bgRGB;
    return span;
  }

  // Appends `text` to `parent`, turning SGR escapes into spans; never uses innerHTML.
  function renderAnsi(parent, text) {
    text = text.replace(OTHER_ESCAPES, "");
    if (text.indexOf("\x1b[") < 0) {
      parent.appendChild(document.createTextNode(text));
      return;
    }
    const style = { fg: null, bg: null, fgRGB: null, bgRGB: null, bold: false, dim: false, italic: false, underline: false };
    let last = 0;
    SGR.lastIndex = 0;
    let m;
    while ((m = SGR.exec(text)) !== null) {
      if (m.index > last) parent.appendChild(styledSpan(text.slice(last, m.index), style));
      applyCodes(style, m[1] === "" ? [0] : m[1].split(";").map((x) => parseInt(x || "0", 10)));
      last = SGR.lastIndex;
    }
    if (last < text.length) parent.appendChild(styledSpan(text.slice(last), style));
  }

  const stripAnsi = (text) => text.replace(SGR, "").replace(OTHER_ESCAPES, "");

  // --- the log view: a capped window over an in-memory buffer --------------------------
  const view = document.getElementById("log-view");
  const linesEl = document.getElementById("log-lines");
  const emptyEl = document.getElementById("log-empty");
  const earlierBtn = document.getElementById("log-earlier");
  const followBtn = document.getElementById("log-follow");
  const pausedEl = document.getElementById("log-paused");
  const countEl = document.getElementById("log-count");
  const searchEl = document.getElementById("log-search");
  const searchCountEl = document.getElementById("log-search-count");
  const workerEl = document.getElementById("log-worker");
  const downloadEl = document.getElementById("log-download");
  const liveStatusEl = document.getElementById("live-status");

  const log = {
    worker: page.dataset.worker, // "all" or a rank
    buffer: [], // line objects in display order; gaps are {gap: true, text}
    windowStart: 0, // buffer index of the first line in the DOM
    follow: true,
    pendingRender: false,
    lastSeq: {}, // worker -> highest seq received
    earliest: {}, // worker -> seq before which lines exist that are not loaded
    query: "",
    matches: [],
    current: -1,
  };

  function lineElement(line) {
    const div = document.createElement("div");
    if (line.gap) {
      div.className = "log-gap";
      div.textContent = line.text;
      return div;
    }
    div.className = `log-line stream-${line.stream}`;
    div.dataset.seq = line.seq;
    if (log.worker === "all" && Number(page.dataset.workers) > 1) {
      const w = document.createElement("span");
      w.className = "log-worker";
      w.textContent = `[${line.worker}] `;
      div.appendChild(w);
    }
    renderAnsi(div, line.text);
    if (log.query && line.plain.includes(log.query)) div.classList.add("log-match");
    return div;
  }

  function renderWindow(start) {
    start = Math.max(0, Math.min(start, Math.max(0, log.buffer.length - DOM_MAX)));
    log.windowStart = start;
    const frag = document.createDocumentFragment();
    const end = Math.min(log.buffer.length, start + DOM_MAX);
    for (let i = start; i < end; i++) frag.appendChild(lineElement(log.buffer[i]));
    linesEl.replaceChildren(frag);
  }

  function scheduleRender() {
    if (log.pendingRender) return;
    log.pendingRender = true;
    requestAnimationFrame(() => {
      log.pendingRender = false;
      updateCounts();
      if (!log.follow) return;
      const domEnd = log.windowStart + linesEl.childElementCount;
      const fresh = log.buffer.length - domEnd;
      if (fresh > DOM_MAX / 2 || domEnd < log.windowStart || fresh < 0) {
        renderWindow(log.buffer.length - DOM_MAX);
      } else if (fresh > 0) {
        const frag = document.createDocumentFragment();
        for (let i = domEnd; i < log.buffer.length; i++) frag.appendChild(lineElement(log.buffer[i]));
        linesEl.appendChild(frag);
        let extra = linesEl.childElementCount - DOM_MAX;
        while (extra-- > 0) {
          linesEl.firstElementChild.remove();
          log.windowStart++;
        }
      }
      view.scrollTop = view.scrollHeight;
    });
  }

  function trimBuffer() {
    const over = log.buffer.length - BUFFER_MAX;
    if (over <= 0) return;
    const dropped = log.buffer.splice(0, over);
    log.windowStart = Math.max(0, log.windowStart - over);
    for (const line of dropped) {
      if (!line.gap && (log.earliest[line.worker] || 0) <= line.seq) log.earliest[line.worker] = line.seq + 1;
    }
    if (log.query) runSearch();
    earlierBtn.classList.remove("d-none");
  }

  function addLines(lines) {
    let added = 0;
    for (const line of lines) {
      const last = log.lastSeq[line.worker] || 0;
      if (line.seq <= last) continue; // already shown (a resume or a backfill overlap)
      line.plain = stripAnsi(line.text).toLowerCase();
      log.lastSeq[line.worker] = line.seq;
      log.buffer.push(line);
      if (log.query && line.plain.includes(log.query)) log.matches.push(log.buffer.length - 1);
      added++;
    }
    if (!added) return;
    emptyEl.classList.add("d-none");
    trimBuffer();
    scheduleRender();
  }

  function updateCounts() {
    countEl.textContent = `(${log.buffer.length.toLocaleString()} loaded${log.buffer.length > DOM_MAX ? `, last ${DOM_MAX.toLocaleString()} on screen` : ""})`;
    if (!log.follow) {
      const hidden = log.buffer.length - (log.windowStart + linesEl.childElementCount);
      pausedEl.querySelector("span").textContent = hidden > 0 ? `Paused: ${hidden.toLocaleString()} new lines below.` : "Paused.";
    }
    if (log.query) searchCountEl.textContent = `${log.current + 1}/${log.matches.length}`;
  }

  function setFollow(on) {
    log.follow = on;
    followBtn.classList.toggle("active", on);
    followBtn.setAttribute("aria-pressed", String(on));
    pausedEl.classList.toggle("d-none", on);
    if (on) {
      renderWindow(log.buffer.length - DOM_MAX);
      view.scrollTop = view.scrollHeight;
    }
    updateCounts();
  }

  followBtn.addEventListener("click", () => setFollow(!log.follow));
  document.getElementById("log-resume").addEventListener("click", () => setFollow(true));
  view.addEventListener("wheel", (e) => { if (e.deltaY < 0 && log.follow) setFollow(false); }, { passive: true });
  view.addEventListener("keydown", (e) => { if (["ArrowUp", "PageUp", "Home"].includes(e.key) && log.follow) setFollow(false); });

  // Search within the loaded log (the buffer, not only the DOM window).
  function runSearch() {
    log.query = searchEl.value.trim().toLowerCase();
    log.matches = [];
    log.current = -1;
    if (log.query) {
      log.buffer.forEach((line, i) => { if (!line.gap && line.plain.includes(log.query)) log.matches.push(i); });
    } else {
      searchCountEl.textContent = "";
    }
    for (const el of linesEl.children) {
      const line = log.buffer[log.windowStart + Array.prototype.indexOf.call(linesEl.children, el)];
      el.classList.toggle("log-match", Boolean(log.query && line && line.plain && line.plain.includes(log.query)));
    }
    updateCounts();
  }

  function jump(delta) {
    if (!log.matches.length) return;
    setFollow(false);
    log.current = (log.current + delta + log.matches.length) % log.matches.length;
    const index = log.matches[log.current];
    if (index < log.windowStart || index >= log.windowStart + linesEl.childElementCount) {
      renderWindow(index - DOM_MAX / 2);
    }
    const el = linesEl.children[index - log.windowStart];
    linesEl.querySelectorAll(".log-current").forEach((x) => x.classList.remove("log-current"));
    if (el) {
      el.classList.add("log-current");
      el.scrollIntoView({ block: "center" });
    }
    updateCounts();
  }

  let searchTimer = null;
  searchEl.addEventListener("input", () => { clearTimeout(searchTimer); searchTimer = setTimeout(runSearch, 200); });
  searchEl.addEventListener("keydown", (e) => { if (e.key === "Enter") { e.preventDefault(); jump(e.shiftKey ? -1 : 1); } });
  document.getElementById("log-search-next").addEventListener("click", () => jump(1));
  document.getElementById("log-search-prev").addEventListener("click", () => jump(-1));

  // "Load earlier lines": the API pages backwards from the oldest loaded seq.
  async function loadEarlier() {
    const workers = Object.keys(log.earliest).filter((w) => log.earliest[w] > 1);
    if (!workers.length) return;
    earlierBtn.disabled = true;
    try {
      const pages = await Promise.all(workers.map(async (w) => {
        const url = `${page.dataset.logsApi}?worker=${w}&before=${log.earliest[w]}&limit=${EARLIER_PAGE}`;
        const response = await fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } });
        if (!response.ok) throw new Error(`HTTP ${response.status}`);
        const body = await response.json();
        log.earliest[w] = body.complete ? 0 : body.next_before;
        return body.results;
      }));
      let earlier = [].concat(...pages);
      if (pages.length > 1) earlier.sort((a, b) => (a.ts || 0) - (b.ts || 0));
      earlier.forEach((line) => { line.plain = stripAnsi(line.text).toLowerCase(); });
      log.buffer.unshift(...earlier);
      setFollow(false);
      renderWindow(0);
      view.scrollTop = 0;
      if (log.query) runSearch();
      if (!Object.values(log.earliest).some((s) => s > 1)) earlierBtn.classList.add("d-none");
    } catch (err) {
      earlierBtn.textContent = `Could not load earlier lines (${err.message}); try again`;
    } finally {
      earlierBtn.disabled = false;
      updateCounts();
    }
  }
  earlierBtn.addEventListener("click", loadEarlier);

  // --- metric charts ---------------------------------------------------------------------
  const chartsEl = document.getElementById("metric-charts");
  const metricEmptyEl = document.getElementById("metric-empty");
  const PALETTE = ["#0d6efd", "#dc3545", "#198754", "#fd7e14", "#6f42c1", "#20c997", "#d63384", "#6c757d"];
  const charts = new Map(); // name -> {points: Map(worker -> Map(x -> y)), plot, el, dirty}
  const metricSeq = {};
  let chartTimer = null;

  // Metric values with four significant digits (as the pages' `metric` filter), not 16.
  function formatMetric(v) {
    if (v === null || v === undefined || !Number.isFinite(v)) return "—";
    if (v === 0) return "0";
    const a = Math.abs(v);
    if (a >= 1e15 || a < 1e-3) return v.toExponential(3).replace(/\.?0+e/, "e");
    if (a >= 1000) return Math.round(v).toLocaleString("en-US");
    return String(Number(v.toPrecision(4)));
  }

  // A series with one point (or a few far apart) has no line to draw: show its points,
  // and give a single x value a range around it.
  function showPoints(u, seriesIdx) {
    const ys = u.data[seriesIdx] || [];
    let n = 0;
    for (const y of ys) if (y !== null && y !== undefined) n++;
    return n <= 30;
  }
  function padSingle(u, min, max) {
    return min === max ? [min - 1, max + 1] : [min, max];
  }

  function addPoints(points) {
    for (const p of points) {
      if (p.seq <= (metricSeq[p.worker] || 0)) continue;
      metricSeq[p.worker] = p.seq;
      if (/^gpu\d+\//.test(p.name)) continue; // GPU telemetry: its own panel (telemetry/)
      let chart = charts.get(p.name);
      if (!chart) {
        chart = { points: new Map(), plot: null, el: null, dirty: true };
        charts.set(p.name, chart);
      }
      if (!chart.points.has(p.worker)) chart.points.set(p.worker, new Map());
      chart.points.get(p.worker).set(p.step === null ? p.seq : p.step, p.value);
      chart.dirty = true;
    }
    if (!chartTimer) chartTimer = setTimeout(drawCharts, 250);
  }

  function chartData(chart) {
    const workers = [...chart.points.keys()].sort((a, b) => a - b);
    const xs = new Set();
    for (const series of chart.points.values()) for (const x of series.keys()) xs.add(x);
    const x = [...xs].sort((a, b) => a - b);
    const ys = workers.map((w) => { const s = chart.points.get(w); return x.map((v) => (s.has(v) ? s.get(v) : null)); });
    return { workers, data: [x, ...ys] };
  }

  function drawCharts() {
    chartTimer = null;
    if (typeof uPlot === "undefined") return;
    for (const [name, chart] of [...charts.entries()].sort()) {
      if (!chart.dirty) continue;
      chart.dirty = false;
      const { workers, data } = chartData(chart);
      const width = Math.max(300, (chartsEl.clientWidth || 800) / (charts.size > 1 ? 2 : 1) - 16);
      if (chart.plot && chart.plot.series.length !== workers.length + 1) {
        chart.plot.destroy();
        chart.plot = null;
      }
      if (!chart.plot) {
        if (!chart.el) {
          chart.el = document.createElement("div");
          chart.el.className = "metric-chart";
          chart.el.dataset.metric = name;
          const h = document.createElement("h3");
          h.textContent = name;
          chart.last = document.createElement("span");
          chart.last.className = "metric-last text-muted ms-2";
          h.appendChild(chart.last);
          chart.el.appendChild(h);
          chartsEl.appendChild(chart.el);
        }
        chart.plot = new uPlot({
          width, height: 220,
          scales: { x: { time: false, range: padSingle } },
          series: [{ label: "step" }, ...workers.map((w, i) => ({ label: workers.length > 1 ? `worker ${w}` : name, stroke: PALETTE[i % PALETTE.length], width: 1.5, spanGaps: true, value: (u, v) => formatMetric(v), points: { show: showPoints, size: 7, fill: PALETTE[i % PALETTE.length] } }))],
          axes: [{}, { values: (u, ticks) => ticks.map(formatMetric) }],
          legend: { show: workers.length > 1 },
        }, data, chart.el);
      } else {
        chart.plot.setData(data);
      }
      chart.el.dataset.points = String(data[0].length);
      // The latest value of the first worker's series: rounded, the full value on hover.
      const ys = data[1] || [];
      let lastValue = null;
      for (let i = ys.length - 1; i >= 0; i--) if (ys[i] !== null) { lastValue = ys[i]; break; }
      if (chart.last && lastValue !== null) {
        chart.last.textContent = `last ${formatMetric(lastValue)}`;
        chart.last.title = String(lastValue);
      }
    }
    metricEmptyEl.classList.toggle("d-none", charts.size > 0);
  }
  window.addEventListener("resize", () => {
    for (const chart of charts.values()) {
      if (chart.plot) chart.plot.setSize({ width: Math.max(300, chartsEl.clientWidth / (charts.size > 1 ? 2 : 1) - 16), height: 220 });
    }
  });

  // --- status ------------------------------------------------------------------------------
  const stateEl = document.getElementById("job-state");
  const reasonEl = document.getElementById("job-reason");
  let lastEvent = Number(page.dataset.lastEvent || 0);
  let terminal = false;
  let shown = { state: stateEl.dataset.state || null, reason: reasonEl.textContent };

  function applyStatus(msg) {
    stateEl.className = `badge fs-6 ${msg.badge}`;
    stateEl.textContent = msg.label;
    stateEl.dataset.state = msg.state;
    reasonEl.textContent = msg.reason;
    // The live panel's refresh (HTMX, below) replaces the timeline with the stored one;
    // until it arrives, the event is shown from the message, once.
    const timelineEl = document.getElementById("job-timeline");
    for (const e of msg.events) {
      if (e.id <= lastEvent) continue;
      lastEvent = e.id;
      if (timelineEl && timelineEl.querySelector(`[data-event="${e.id}"]`)) continue;
      const li = document.createElement("li");
      li.className = "list-group-item";
      li.dataset.event = String(e.id);
      const at = document.createElement("span");
      at.className = "text-muted";
      at.textContent = new Date(e.at).toISOString().replace("T", " ").slice(0, 19);
      const change = document.createElement("strong");
      change.textContent = e.from !== e.to ? ` ${e.from || "—"} → ${e.to} ` : " ";
      li.append(at, change, document.createTextNode(e.reason + (e.actor ? ` (${e.actor})` : "")));
      if (timelineEl) timelineEl.appendChild(li);
    }
    if (msg.terminal && !terminal) document.querySelectorAll("[data-live-hide-when-terminal]").forEach((el) => el.classList.add("d-none"));
    terminal = msg.terminal;
    // A new step, or a new reason (admission rewrites a queued job's): the live panel
    // (templates/jobs/_job_live.html) refetches itself, with the buttons and outputs.
    const changed = msg.events.length || msg.state !== shown.state || msg.reason !== shown.reason;
    shown = { state: msg.state, reason: msg.reason };
    if (changed) document.body.dispatchEvent(new CustomEvent("job-status", { detail: msg }));
  }

  // A panel an app above jobs adds to the page (checkpoints) listens for `job-panel-<name>`
  // on the body and refetches itself (HTMX).
  function refreshPanel(name) {
    document.body.dispatchEvent(new CustomEvent(`job-panel-${name}`));
  }

  // --- the socket: reconnects and resumes from the last seq ------------------------------------
  let socket = null;
  let connectedOnce = false;
  let retryDelay = 500;
  let generation = 0;

  function cursorParam(map) {
    return Object.entries(map).map(([w, s]) => `${w}:${s}`).join(",");
  }

  function setLiveStatus(text, cls) {
    liveStatusEl.textContent = text;
    liveStatusEl.className = `ms-auto small ${cls}`;
    page.dataset.live = text;
  }

  function connect() {
    const gen = ++generation;
    const params = new URLSearchParams({ worker: log.worker, events_after: String(lastEvent) });
    if (connectedOnce) {
      const after = {};
      const ranks = log.worker === "all" ? [...Array(Number(page.dataset.workers)).keys()] : [Number(log.worker)];
      for (const w of ranks) after[w] = log.lastSeq[w] || 0;
      params.set("after", cursorParam(after));
      const mafter = {};
      for (const w of [...Array(Number(page.dataset.workers)).keys()]) mafter[w] = metricSeq[w] || 0;
      params.set("metrics_after", cursorParam(mafter));
    }
    const scheme = location.protocol === "https:" ? "wss:" : "ws:";
    socket = new WebSocket(`${scheme}//${location.host}${page.dataset.wsPath}?${params}`);
    socket.onmessage = (event) => {
      if (gen !== generation) return;
      const msg = JSON.parse(event.data);
      if (msg.type === "lines") addLines(msg.lines);
      else if (msg.type === "metrics") addPoints(msg.points);
      else if (msg.type === "status") applyStatus(msg);
      else if (msg.type === "panel") refreshPanel(msg.panel);
      else if (msg.type === "truncated") {
        const had = log.lastSeq[msg.worker] || 0;
        if (had && had < msg.before - 1) {
          log.buffer.push({ gap: true, worker: msg.worker, text: `… lines ${had + 1}–${msg.before - 1}${log.worker === "all" ? ` of worker ${msg.worker}` : ""} were skipped here; the download has them` });
        } else if (!had) {
          log.earliest[msg.worker] = msg.before;
          earlierBtn.classList.remove("d-none");
        }
        log.lastSeq[msg.worker] = Math.max(had, msg.before - 1);
      } else if (msg.type === "caught_up") {
        // Back after a drop: a panel may have changed while nobody was listening.
        if (connectedOnce) document.querySelectorAll("[data-live-panel]").forEach((el) => refreshPanel(el.dataset.livePanel));
        connectedOnce = true;
        retryDelay = 500;
        setLiveStatus("live", "text-success");
      }
    };
    socket.onclose = (event) => {
      if (gen !== generation) return;
      if ([4400, 4401, 4403, 4404].includes(event.code)) {
        const why = { 4401: "signed out: reload the page", 4403: "access removed" };
        setLiveStatus(why[event.code] || "not available", "text-danger");
        return;
      }
      setLiveStatus("reconnecting…", "text-warning");
      setTimeout(() => { if (gen === generation) connect(); }, retryDelay);
      retryDelay = Math.min(retryDelay * 2, 5000);
    };
  }

  if (workerEl) {
    workerEl.addEventListener("change", () => {
      log.worker = workerEl.value;
      log.buffer = [];
      log.lastSeq = {};
      log.earliest = {};
      log.windowStart = 0;
      linesEl.replaceChildren();
      earlierBtn.classList.add("d-none");
      emptyEl.classList.remove("d-none");
      downloadEl.href = `${page.dataset.download}?worker=${log.worker}`;
      connectedOnce = false; // a fresh tail for the new selection; metrics are kept
      generation++;
      if (socket) socket.close();
      for (const w of Object.keys(metricSeq)) delete metricSeq[w];
      connect();
    });
  }

  // Tests and the benchmark drop the socket to check the resume.
  page.addEventListener("live:drop", () => { if (socket) socket.close(); });
  setFollow(true);
  connect();
})();
