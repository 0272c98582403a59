// The usage report's chart: allocated and used GPU-hours per period (uPlot, bars).
(function () {
  const dataEl = document.getElementById("usage-chart-data");
  const el = document.getElementById("usage-chart");
  if (!dataEl || !el || typeof uPlot === "undefined") return;
  const d = JSON.parse(dataEl.textContent);
  const bars = uPlot.paths && uPlot.paths.bars ? uPlot.paths.bars({ size: [0.6, 60] }) : undefined;
  new uPlot(
    {
      width: Math.max(320, el.clientWidth || 800),
      height: 240,
      scales: { x: { time: true } },
      axes: [{}, { label: "GPU-hours" }],
      series: [
        {},
        { label: "allocated", stroke: "#6c757d", fill: "rgba(108,117,125,0.25)", paths: bars },
        { label: "used", stroke: "#0d6efd", fill: "rgba(13,110,253,0.45)", paths: bars },
      ],
    },
    [d.x, d.allocated, d.used],
    el,
  );
})();
