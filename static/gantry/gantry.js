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
