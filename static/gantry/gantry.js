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
