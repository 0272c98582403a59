// Dark mode follows the system: Bootstrap's data-bs-theme from prefers-color-scheme.
// Loaded in <head>, before the first paint (a file, not an inline script: CSP), and it
// follows a change of the system setting while the page is open.
(function () {
  const query = window.matchMedia("(prefers-color-scheme: dark)");
  const apply = () => document.documentElement.setAttribute("data-bs-theme", query.matches ? "dark" : "light");
  apply();
  if (query.addEventListener) query.addEventListener("change", apply);
})();
