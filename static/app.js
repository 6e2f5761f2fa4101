// Small progressive enhancements; every page works without this file.
(function () {
  "use strict";
  // Refresh the dashboard panels in place every 10 s while the tab is visible.
  var panels = document.getElementById("panels");
  if (panels && panels.dataset.refresh) {
    setInterval(function () {
      if (document.hidden) return;
      fetch(panels.dataset.refresh, { credentials: "same-origin", headers: { "Accept": "text/html" } })
        .then(function (r) { return r.ok ? r.text() : null; })
        .then(function (html) {
          if (!html) return;
          var t = document.createElement("template");
          t.innerHTML = html.trim();
          var fresh = t.content.getElementById("panels");
          var current = document.getElementById("panels");
          if (fresh && current && !current.contains(document.activeElement)) current.replaceWith(fresh);
        })
        .catch(function () {});
    }, 10000);
  }
  // Show only the fields of the chosen authentication kind.
  var form = document.querySelector(".instance-form");
  var kind = document.getElementById("auth_kind");
  if (form && kind) {
    var apply = function () {
      form.className = form.className.replace(/\bkind-\S+/g, "").trim() + " kind-" + kind.value;
    };
    kind.addEventListener("change", apply);
    apply();
  } else if (form) {
    form.classList.add("noscript-auth");
  }
  // Confirm destructive buttons.
  document.addEventListener("click", function (e) {
    var b = e.target.closest("[data-confirm]");
    if (b && !window.confirm(b.getAttribute("data-confirm"))) e.preventDefault();
  });
})();
