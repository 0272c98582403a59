// The metric compare page: one uPlot chart, one series per job, aligned on the step.
(function () {
  "use strict";
  const el = document.getElementById("compare-chart");
  const source = document.getElementById("compare-series");
  if (!el || !source || typeof uPlot === "undefined") return;
  const series = JSON.parse(source.textContent);
  const PALETTE = ["#0d6efd", "#dc3545", "#198754", "#fd7e14", "#6f42c1", "#20c997", "#d63384", "#6c757d"];
  const steps = new Set();
  const maps = series.map((s) => {
    const m = new Map();
    for (const [step, value] of s.points) { m.set(step, value); steps.add(step); }
    return m;
  });
  const x = [...steps].sort((a, b) => a - b);
  const data = [x, ...maps.map((m) => x.map((step) => (m.has(step) ? m.get(step) : null)))];
  const plot = new uPlot({
    width: el.clientWidth || 900,
    height: 400,
    scales: { x: { time: false } },
    series: [{ label: "step" }, ...series.map((s, i) => ({ label: s.label, stroke: PALETTE[i % PALETTE.length], width: 1.5, spanGaps: true }))],
  }, data, el);
  el.dataset.series = String(series.length);
  window.addEventListener("resize", () => plot.setSize({ width: el.clientWidth, height: 400 }));
})();
