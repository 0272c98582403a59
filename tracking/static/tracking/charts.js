// The run and compare pages' charts: one uPlot chart a metric, one line a run, on the
// step axis. The data is the page's `run-charts` JSON: [{key, series: [{label, points}]}].
(function () {
  "use strict";
  const grid = document.getElementById("run-charts-grid");
  const source = document.getElementById("run-charts");
  if (!grid || !source || typeof uPlot === "undefined") return;
  const charts = JSON.parse(source.textContent);
  const PALETTE = ["#0d6efd", "#dc3545", "#198754", "#fd7e14", "#6f42c1", "#20c997", "#d63384", "#6c757d", "#0dcaf0", "#ffc107"];
  // Four significant digits, as the pages' `metric` filter (core/formatting.py).
  function formatMetric(v) {
    if (v === null || v === undefined || !Number.isFinite(v)) return "—";
    if (v === 0) return "0";
    const a = Math.abs(v);
    if (a >= 1e15 || a < 1e-3) return v.toExponential(3).replace(/\.?0+e/, "e");
    if (a >= 1000) return Math.round(v).toLocaleString("en-US");
    return String(Number(v.toPrecision(4)));
  }
  const plots = [];
  for (const chart of charts) {
    const box = document.createElement("div");
    box.className = "metric-chart";
    const title = document.createElement("h3");
    title.textContent = chart.key;
    box.appendChild(title);
    const el = document.createElement("div");
    box.appendChild(el);
    grid.appendChild(box);
    const steps = new Set();
    const maps = chart.series.map((s) => {
      const m = new Map();
      for (const [step, value] of s.points) { m.set(step, value); steps.add(step); }
      return m;
    });
    const x = [...steps].sort((a, b) => a - b);
    const data = [x, ...maps.map((m) => x.map((step) => (m.has(step) ? m.get(step) : null)))];
    // A run with a few points has no line to speak of: its points are shown instead.
    const sparse = (u, i) => u.data[i].filter((v) => v !== null).length <= 30;
    plots.push([el, new uPlot({
      width: el.clientWidth || grid.clientWidth || 400,
      height: 240,
      legend: { show: chart.series.length > 1 },
      scales: { x: { time: false, range: (u, min, max) => (min === max ? [min - 1, max + 1] : [min, max]) } },
      axes: [{}, { values: (u, ticks) => ticks.map(formatMetric), size: 60 }],
      series: [{ label: "step" }, ...chart.series.map((s, i) => ({
        label: s.label,
        stroke: PALETTE[i % PALETTE.length],
        width: 1.5,
        spanGaps: true,
        value: (u, v) => formatMetric(v),
        points: { show: sparse, size: 6, fill: PALETTE[i % PALETTE.length] },
      }))],
    }, data, el)]);
  }
  grid.dataset.charts = String(plots.length);
  window.addEventListener("resize", () => {
    for (const [el, plot] of plots) plot.setSize({ width: el.clientWidth, height: 240 });
  });
})();
