// Small behaviours of the dataset pages (no inline scripts: CSP).
document.querySelectorAll("[data-fraction]").forEach((bar) => {
  const [used, total] = bar.dataset.fraction.split("/").map(Number);
  bar.style.width = `${total > 0 ? Math.min(100, (100 * used) / total) : 100}%`;
});
