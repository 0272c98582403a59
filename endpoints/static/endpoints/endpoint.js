// The endpoint page: the "try it" form (through the gateway, with the page's session and
// CSRF token) and the per-minute charts (vendored uPlot).
(function () {
  "use strict";
  const form = document.getElementById("try-form");
  if (form) {
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      const answer = document.getElementById("try-answer");
      answer.textContent = "…";
      const started = performance.now();
      try {
        const response = await fetch(form.dataset.url, {
          method: "POST",
          credentials: "same-origin",
          headers: {
            "Content-Type": "application/json",
            "X-CSRFToken": form.querySelector("[name=csrfmiddlewaretoken]").value,
          },
          body: form.querySelector("[name=payload]").value,
        });
        const text = await response.text();
        const took = Math.round(performance.now() - started);
        const version = response.headers.get("Gantry-Model-Version") || "-";
        let shown = text;
        try { shown = JSON.stringify(JSON.parse(text), null, 2); } catch (e) { /* not JSON */ }
        answer.textContent = `${response.status} from ${version} in ${took} ms\n${shown}`;
      } catch (error) {
        answer.textContent = String(error);
      }
    });
  }
  const data = JSON.parse(document.getElementById("endpoint-chart").textContent || "{}");
  const names = Object.keys(data);
  if (!names.length || typeof uPlot === "undefined") return;
  const minutes = [...new Set(names.flatMap((n) => data[n].map((p) => p.minute)))].sort();
  const xs = minutes.map((m) => Date.parse(m) / 1000);
  function draw(id, field) {
    const target = document.getElementById(id);
    const series = names.map((n) => {
      const by = Object.fromEntries(data[n].map((p) => [p.minute, p[field]]));
      return minutes.map((m) => (m in by ? by[m] : null));
    });
    const colors = ["#0d6efd", "#fd7e14", "#198754", "#6f42c1"];
    new uPlot({
      width: target.clientWidth || 500, height: 220,
      series: [{}, ...names.map((n, i) => ({ label: n, stroke: colors[i % colors.length], spanGaps: true }))],
    }, [xs, ...series], target);
  }
  draw("requests-chart", "requests");
  draw("latency-chart", "p50_ms");
})();
