// Gantry's small amount of page behaviour. No inline scripts anywhere (CSP-friendly).
document.addEventListener("change", (event) => {
  const el = event.target;
  if (el.matches("[data-autosubmit]")) el.form.requestSubmit();
});
document.addEventListener("click", (event) => {
  const button = event.target.closest("[data-copy]");
  if (!button) return;
  const target = document.getElementById(button.dataset.copy);
  navigator.clipboard.writeText(target.value || target.textContent).then(() => {
    button.innerHTML = '<i class="bi bi-check2"></i> Copied';
  });
});
// Widths computed on the server (progress bars): `data-width="42"` instead of a style
// attribute, which the Content-Security-Policy blocks. Setting el.style is allowed.
function applyWidths(root) {
  root.querySelectorAll("[data-width]").forEach((el) => { el.style.width = `${el.dataset.width}%`; });
}
if (window.htmx) htmx.onLoad(applyWidths); else document.addEventListener("DOMContentLoaded", () => applyWidths(document));
// The one size rule of core/formatting.py (format_size), for pages that count bytes in
// the browser (uploads): binary units, one decimal above 1 KiB. Same bytes, same words.
window.gantryFormat = {
  size(bytes) {
    if (bytes === null || bytes === undefined || !Number.isFinite(Number(bytes))) return "—";
    const units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let n = Math.abs(Number(bytes));
    const sign = Number(bytes) < 0 ? "-" : "";
    if (n < 1024) return `${sign}${Math.round(n)} B`;
    let unit = 0;
    while (n >= 1024 && unit < units.length - 1) { n /= 1024; unit++; }
    const tenths = (x) => Math.floor(x * 10 + 0.5) / 10;  // as core/formatting.py's _tenths
    if (tenths(n) >= 1024 && unit < units.length - 1) { n /= 1024; unit++; }
    return `${sign}${tenths(n).toFixed(1)} ${units[unit]}`;
  },
};
// A polled panel (hx-trigger="every …") does not refresh under an open dialog: the swap
// would throw away the confirmation the user is reading.
document.addEventListener("htmx:beforeRequest", (event) => {
  const el = event.detail.elt;
  if (el && el.querySelector && el.querySelector(".modal.show")) event.preventDefault();
});
// MLflow's client prints "View run at <tracking URI>/#/experiments/<id>/runs/<run id>": a
// route of MLflow's own UI, after the '#', which never reaches the server. Opened on
// Gantry's home page (the tracking URI), it goes on to the experiment's page, which
// sends `?run=` on to the run's. Signed out, the sign-in form carries it as its `next`.
(function () {
  const route = /^#\/experiments\/(\d{1,18})(?:\/runs\/([0-9A-Za-z-]{1,64}))?\/?$/.exec(location.hash);
  const body = document.body;
  if (!route || !body.dataset.experimentUrl) return;
  let target = body.dataset.experimentUrl.replace(/0\/$/, `${route[1]}/`);
  if (route[2]) target += `?run=${encodeURIComponent(route[2])}`;
  const next = document.querySelector("form input[name=next]");
  if (location.pathname === body.dataset.home) location.replace(target);
  else if (next && (next.value === body.dataset.home || next.value === "")) next.value = target;
})();
