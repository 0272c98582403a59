// The sweep page: objective over trials (uPlot), parallel coordinates (a canvas, drawn
// here: one axis per parameter and one for the objective), and the sortable trial table.
(function () {
  "use strict";
  const source = document.getElementById("sweep-data");
  if (!source) return;
  const data = JSON.parse(source.textContent);
  const maximize = data.direction === "maximize";
  const scored = data.trials.filter((t) => t.objective !== null && (t.state === "complete" || t.state === "pruned"));

  function objectiveChart() {
    const el = document.getElementById("objective-chart");
    if (!el || !window.uPlot || !data.trials.length) {
      if (el) el.textContent = "No objective values yet.";
      return;
    }
    const xs = data.trials.map((t) => t.number);
    const complete = data.trials.map((t) => (t.state === "complete" ? t.objective : null));
    const pruned = data.trials.map((t) => (t.state === "pruned" ? t.objective : null));
    let best = null;
    const bestSoFar = data.trials.map((t) => {
      if (t.state === "complete" && t.objective !== null) {
        best = best === null ? t.objective : (maximize ? Math.max(best, t.objective) : Math.min(best, t.objective));
      }
      return best;
    });
    const points = { show: true, size: 8 };
    new uPlot({
      width: el.clientWidth || 500,
      height: 260,
      scales: { x: { time: false } },
      axes: [{ label: "trial" }, { label: data.objective }],
      series: [
        { label: "trial" },
        { label: "complete", stroke: "#198754", width: 0, points: { ...points, fill: "#198754" } },
        { label: "pruned (last value)", stroke: "#fd7e14", width: 0, points: { ...points, fill: "#fd7e14" } },
        { label: "best so far", stroke: "#0d6efd", width: 2, points: { show: false } },
      ],
    }, [xs, complete, pruned, bestSoFar], el);
  }

  function axisOf(name) {
    const spec = data.space[name] || {};
    if (spec.type === "categorical") {
      const choices = spec.choices.map(String);
      return { name, label: name, pos: (v) => (choices.length === 1 ? 0.5 : choices.indexOf(String(v)) / (choices.length - 1)), ticks: choices };
    }
    const log = spec.type === "loguniform";
    const f = (v) => (log ? Math.log(v) : v);
    const lo = f(spec.low), hi = f(spec.high);
    return { name, label: name, pos: (v) => (f(v) - lo) / (hi - lo || 1), ticks: [String(spec.low), String(spec.high)] };
  }

  function parallelChart() {
    const canvas = document.getElementById("parallel-chart");
    if (!canvas || !canvas.getContext) return;
    const ratio = window.devicePixelRatio || 1;
    const height = 260;
    canvas.style.height = `${height}px`; // fixed: the width attribute below must not rescale it
    const width = canvas.clientWidth || 500;
    canvas.width = width * ratio; canvas.height = height * ratio;
    const ctx = canvas.getContext("2d");
    ctx.scale(ratio, ratio);
    const values = scored.map((t) => t.objective);
    const lo = Math.min(...values), hi = Math.max(...values);
    const axes = data.params.map(axisOf);
    axes.push({ name: "__objective", label: data.objective, pos: (v) => (v - lo) / (hi - lo || 1), ticks: values.length ? [lo.toPrecision(3), hi.toPrecision(3)] : [] });
    const left = 40, right = 40, top = 24, bottom = 24;
    const x = (i) => left + (i * (width - left - right)) / Math.max(axes.length - 1, 1);
    const y = (p) => top + (1 - p) * (height - top - bottom);
    const fg = getComputedStyle(document.body).color;
    ctx.font = "11px sans-serif"; ctx.fillStyle = fg; ctx.strokeStyle = fg; ctx.textAlign = "center";
    axes.forEach((axis, i) => {
      ctx.globalAlpha = 0.6; ctx.beginPath(); ctx.moveTo(x(i), y(0)); ctx.lineTo(x(i), y(1)); ctx.stroke();
      ctx.globalAlpha = 1; ctx.fillText(axis.label, x(i), 12);
      if (axis.ticks.length) {
        ctx.fillText(axis.ticks[0], x(i), height - 6);
        ctx.fillText(axis.ticks[axis.ticks.length - 1], x(i), top - 2);
      }
    });
    // Worst first, so the best lines are drawn on top.
    const order = scored.slice().sort((a, b) => (maximize ? a.objective - b.objective : b.objective - a.objective));
    order.forEach((trial) => {
      const quality = hi > lo ? (trial.objective - lo) / (hi - lo) : 1;
      const good = maximize ? quality : 1 - quality;
      ctx.strokeStyle = trial.state === "pruned" ? "rgba(253,126,20,0.5)" : `rgba(13,110,253,${0.2 + 0.8 * good})`;
      ctx.lineWidth = 1 + good;
      ctx.beginPath();
      let drawn = false;
      axes.forEach((axis, i) => {
        const value = axis.name === "__objective" ? trial.objective : trial.params[axis.name];
        if (value === undefined) return; // a conditional parameter this trial lacks: pass it by
        const p = y(Math.min(Math.max(axis.pos(value), 0), 1));
        if (drawn) ctx.lineTo(x(i), p); else ctx.moveTo(x(i), p);
        drawn = true;
      });
      ctx.stroke();
    });
  }

  function sortableTable() {
    const table = document.getElementById("trial-table");
    if (!table) return;
    const body = table.tBodies[0];
    let current = null, ascending = true;
    table.querySelectorAll("th[data-sort]").forEach((th) => th.addEventListener("click", () => {
      const key = th.dataset.sort;
      ascending = current === key ? !ascending : true;
      current = key;
      const cell = (row) => {
        if (key.startsWith("param:")) {
          const td = row.querySelector(`td[data-param="${CSS.escape(key.slice(6))}"]`);
          return td ? td.textContent.trim() : "";
        }
        return row.dataset[key] || "";
      };
      const rows = Array.from(body.rows).filter((r) => r.dataset.number !== undefined);
      rows.sort((a, b) => {
        const va = cell(a), vb = cell(b);
        const na = parseFloat(va), nb = parseFloat(vb);
        let c;
        if (va === "" || vb === "") c = (va === "") - (vb === "");
        else if (!Number.isNaN(na) && !Number.isNaN(nb)) c = na - nb;
        else c = va.localeCompare(vb);
        return ascending ? c : -c;
      });
      rows.forEach((r) => body.appendChild(r));
      table.querySelectorAll("th[data-sort]").forEach((h) => h.removeAttribute("aria-sort"));
      th.setAttribute("aria-sort", ascending ? "ascending" : "descending");
    }));
  }

  objectiveChart();
  parallelChart();
  sortableTable();
})();
