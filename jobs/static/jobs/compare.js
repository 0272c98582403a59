// The metric compare page: one uPlot chart, one series per job, aligned on the step.
(function () {
  "use strict";
  const el = document.getElementById("compare-chart");
  const source = document.getElementById("compare-series");
  if (!el || !source || typeof uPlot === "undefined") return;
  const series = JSON.parse(source.textContent);
  const PALETTE = ["#0d6efd", "#dc3545", "#198754", "#fd7e14", "#6f42c1", "#20c997", "#d63384", "#6c757d"];
  // Four significant digits, as the pages' `metric` filter (core/formatting.py).
  function formatMetric(v) {
    if (v === null || v === undefined || !Number.isFinite(v)) return "—";
    if (v === 0) return "0";
    const a = Math.abs(v);
    if (a >= 1e15 || a < 1e-3) return v.toExponential(3).replace(/\.?0+e/, "e");
    if (a >= 1000) return Math.round(v).toLocaleString("en-US");
    return String(Number(v.toPrecision(4)));
  }
  const steps = new Set();
  const maps = series.map((s) => {
    const m = new Map();
    for (const [step, value] of s.points) { m.set(step, value); steps.add(step); }
    return m;
  });
  const x = [...steps].sort((a, b) => a - b);
  const data = [x, ...maps.map((m) => x.map((step) => (m.has(step) ? m.get(step) : null)))];
  // A job with one point (or a few) has no line to draw: its points are shown instead.
  const sparse = (u, i) => u.data[i].filter((v) => v !== null).length <= 30;
  const plot = new uPlot({
    width: el.clientWidth || 900,
    height: 400,
    scales: { x: { time: false, range: (u, min, max) => (min === max ? [min - 1, max + 1] : [min, max]) } },
    axes: [{}, { values: (u, ticks) => ticks.map(formatMetric) }],
    series: [{ label: "step" }, ...series.map((s, i) => ({
      label: s.label,
      stroke: PALETTE[i % PALETTE.length],
      width: 1.5,
      spanGaps: true,
      value: (u, v) => formatMetric(v),
      points: { show: sparse, size: 8, fill: PALETTE[i % PALETTE.length] },
    }))],
  }, data, el);
  el.dataset.series = String(series.length);
  el.dataset.points = String(x.length);
  window.addEventListener("resize", () => plot.setSize({ width: el.clientWidth, height: 400 }));
})();
