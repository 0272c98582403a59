// The job page's GPU charts (utilization %, memory MiB per GPU), refreshed while it runs.
(function () {
  const card = document.getElementById("job-gpu");
  const chartsEl = document.getElementById("gpu-charts");
  const emptyEl = document.getElementById("gpu-empty");
  if (!card || !chartsEl || typeof uPlot === "undefined") return;
  const plots = {};
  const titles = { utilization: "GPU utilization (%)", memory: "GPU memory used (MiB)" };

  function draw(name, s) {
    if (!s.x.length) return;
    const data = [s.x, ...s.y];
    const old = plots[name];
    if (old && old.series.length === s.y.length + 1) {
      old.setData(data);
      return;
    }
    if (old) old.root.parentNode.remove();
    const box = document.createElement("div");
    box.className = "metric-chart";
    const h = document.createElement("div");
    h.className = "small fw-semibold";
    h.textContent = titles[name];
    box.appendChild(h);
    chartsEl.appendChild(box);
    const width = Math.max(300, (chartsEl.clientWidth || 800) / 2 - 16);
    plots[name] = new uPlot(
      {
        width: width,
        height: 200,
        scales: name === "utilization" ? { y: { range: [0, 100] } } : {},
        series: [{}, ...s.labels.map((label) => ({ label: label, spanGaps: true }))],
      },
      data,
      box,
    );
  }

  function load() {
    fetch(card.dataset.seriesUrl, { credentials: "same-origin" })
      .then((r) => (r.ok ? r.json() : null))
      .then((d) => {
        if (!d) return;
        draw("utilization", d.utilization);
        draw("memory", d.memory);
        if (emptyEl) emptyEl.classList.toggle("d-none", d.utilization.x.length > 0);
      })
      .catch(() => {});
  }
  load();
  if (card.dataset.live === "1") setInterval(load, 15000);
})();
