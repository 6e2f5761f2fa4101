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
  // The instance page's Test button: poll through the API and show each
  // group's result and extracted values in place (without script, the form
  // posts and the page comes back with the same results).
  var testForm = document.querySelector("form.instance-test");
  if (testForm && window.fetch) {
    var el = function (tag, text, cls) {
      var n = document.createElement(tag);
      if (text !== undefined) n.textContent = text;
      if (cls) n.className = cls;
      return n;
    };
    var labelsOf = function (labels) {
      var keys = Object.keys(labels || {}).sort();
      if (!keys.length) return "";
      return "{" + keys.map(function (k) { return k + "=" + JSON.stringify(labels[k]); }).join(", ") + "}";
    };
    var showResult = function (r) {
      var box = el("div", undefined, "test-result");
      box.setAttribute("data-group", r.group);
      var h = el("h3", r.group + " ");
      h.appendChild(el("span", r.ok ? "OK" : "failed", r.ok ? "badge ok" : "badge open"));
      box.appendChild(h);
      var summary = r.ok
        ? "OK, HTTP " + r.status + " in " + r.durationMs + " ms"
        : (r.error ? r.error.category + " error" + (r.status ? ", HTTP " + r.status : "") + ": " + r.error.message : "failed") + " (" + r.durationMs + " ms)";
      box.appendChild(el("p", summary));
      if (r.values) {
        if (!r.values.length) {
          box.appendChild(el("p", "The rules extracted no values.", "muted"));
        } else {
          var table = el("table", undefined, "values");
          var head = el("tr");
          ["Metric", "Labels", "Value"].forEach(function (t) {
            var th = el("th", t);
            th.setAttribute("scope", "col");
            if (t === "Value") th.className = "num";
            head.appendChild(th);
          });
          table.appendChild(el("thead")).appendChild(head);
          var body = table.appendChild(el("tbody"));
          r.values.forEach(function (v) {
            var tr = el("tr");
            tr.appendChild(el("td", v.metric, "metric"));
            tr.appendChild(el("td", labelsOf(v.labels), "labels"));
            tr.appendChild(el("td", String(v.value), "num"));
            body.appendChild(tr);
          });
          box.appendChild(table);
        }
      }
      if (r.valueErrors && r.valueErrors.length) {
        box.appendChild(el("p", "Skipped samples:"));
        var ul = el("ul", undefined, "value-errors");
        r.valueErrors.forEach(function (e) { ul.appendChild(el("li", e.metric + ": " + e.reason + " × " + e.count)); });
        box.appendChild(ul);
      }
      return box;
    };
    testForm.addEventListener("submit", function (e) {
      e.preventDefault();
      var out = document.getElementById("test-results");
      var button = testForm.querySelector("button");
      var meta = document.querySelector('meta[name="csrf-token"]');
      button.disabled = true;
      out.textContent = "Testing…";
      fetch(testForm.getAttribute("data-api"), {
        method: "POST",
        credentials: "same-origin",
        headers: { "Accept": "application/json", "X-CSRF-Token": meta ? meta.content : "" }
      })
        .then(function (r) { return r.json().then(function (doc) { return { ok: r.ok, doc: doc }; }); })
        .then(function (res) {
          out.textContent = "";
          if (!res.ok) {
            out.appendChild(el("p", (res.doc.error && res.doc.error.message) || "The test failed.", "error"));
            return;
          }
          (res.doc.results || []).forEach(function (r) { out.appendChild(showResult(r)); });
        })
        .catch(function () { out.textContent = "The test could not be run; try again."; })
        .then(function () { button.disabled = false; });
    });
  }
  // Confirm destructive buttons.
  document.addEventListener("click", function (e) {
    var b = e.target.closest("[data-confirm]");
    if (b && !window.confirm(b.getAttribute("data-confirm"))) e.preventDefault();
  });
})();
