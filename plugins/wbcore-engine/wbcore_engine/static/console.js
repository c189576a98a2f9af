// wbx engine console: progressive enhancement only (every page works without it).
// An element with data-sse="<url>" follows that Server-Sent Events stream and adds what
// arrives: session steps to the steps list, audit decisions to the audit table (filtered
// like the page). The browser's EventSource sends the login cookie; the stream is the API's.
"use strict";
(function () {
  var MAX_ROWS = 500; // a page never grows without bound: the oldest live rows drop off

  function text(value) {
    return typeof value === "string" ? value : JSON.stringify(value, null, 1);
  }
  function clip(s) {
    return s.length > 4000 ? s.slice(0, 4000) + "… (" + (s.length - 4000) + " more characters)" : s;
  }
  function cell(row, value, cls) {
    var td = document.createElement("td");
    td.textContent = value === undefined || value === null ? "" : String(value);
    if (cls) td.className = cls;
    row.appendChild(td);
  }
  function when(ts) {
    return ts ? new Date(ts * 1000).toISOString().replace("T", " ").slice(0, 19) : "";
  }

  function stepItem(type, ev) {
    var li = document.createElement("li");
    li.className = "step " + type;
    li.dataset.seq = ev.seq;
    var kind = document.createElement("span");
    kind.className = "kind";
    kind.textContent = type;
    var seq = document.createElement("span");
    seq.className = "seq muted";
    seq.textContent = " #" + ev.seq + " " + when(ev.t);
    li.appendChild(kind);
    li.appendChild(seq);
    var data = ev.data, calls = data && data.tool_calls;
    if (type === "step" && data && data.text) {
      var p = document.createElement("p");
      p.className = "model-text";
      p.textContent = clip(data.text);
      li.appendChild(p);
    }
    if (type === "step" && calls && calls.length) {
      // the agent loop's step: tool_calls [{id, name, arguments}], results [{id, ok, text, ms}]
      var results = {};
      (data.results || []).forEach(function (r) { if (r.id !== undefined) results[r.id] = r; });
      var table = document.createElement("table");
      table.className = "calls";
      calls.forEach(function (c) {
        var r = results[c.id] || {};
        var tr = document.createElement("tr");
        cell(tr, c.name);
        cell(tr, clip(text(c.arguments || {})), "mono");
        cell(tr, clip(text(r.text || "")), r.ok === false ? "mono bad" : "mono");
        cell(tr, r.ms !== undefined ? r.ms + " ms" : "");
        table.appendChild(tr);
      });
      li.appendChild(table);
    } else if (type !== "step" || !data || !data.text) {
      var pre = document.createElement("pre");
      pre.className = "data";
      pre.textContent = clip(text(data));
      li.appendChild(pre);
    }
    return li;
  }

  function followSteps(list) {
    var es = new EventSource(list.dataset.sse);
    var live = document.getElementById("live");
    var status = document.getElementById("status");
    function add(type) {
      return function (msg) {
        var ev = JSON.parse(msg.data);
        if (list.querySelector('[data-seq="' + ev.seq + '"]')) return; // already rendered by the server
        list.appendChild(stepItem(type, ev));
        while (list.children.length > MAX_ROWS) list.removeChild(list.firstElementChild);
        if (type === "step" && ev.data && ev.data.step !== undefined) {
          var step = document.getElementById("step");
          if (step) step.textContent = ev.data.step;
        }
      };
    }
    // "text" deltas are not shown one by one: the step that follows carries the model's whole text
    ["started", "step", "review", "review-decision", "tool", "error"].forEach(function (t) {
      es.addEventListener(t, add(t));
    });
    es.addEventListener("end", function (msg) {
      var ev = JSON.parse(msg.data);
      var st = ev.status || (ev.data && ev.data.status);
      if (status && st) status.textContent = st;
      if (live) live.textContent = "ended";
      var cancel = document.getElementById("cancel");
      if (cancel) cancel.remove();
      es.close();
    });
  }

  function followAudit(body) {
    var es = new EventSource(body.dataset.sse);
    var want = {
      toolkit: body.dataset.filterToolkit || "",
      cap: body.dataset.filterCap || "",
      outcome: body.dataset.filterOutcome || "",
    };
    es.addEventListener("audit", function (msg) {
      var e = JSON.parse(msg.data);
      if (want.toolkit && (e.principal || "").indexOf(want.toolkit) < 0 && (e.target || "").indexOf(want.toolkit) < 0) return;
      if (want.cap && e.cap !== want.cap) return;
      if (want.outcome && e.outcome !== want.outcome) return;
      var empty = body.querySelector("tr.empty");
      if (empty) empty.remove();
      var tr = document.createElement("tr");
      tr.className = (e.outcome || "") + " live";
      [e.seq, when(e.ts), e.principal, e.cap, e.op, e.outcome, e.target, e.reason || e.kind, e.ms].forEach(function (v, i) {
        cell(tr, v, i === 6 ? "mono" : "");
      });
      body.insertBefore(tr, body.firstChild);
      while (body.children.length > MAX_ROWS) body.removeChild(body.lastElementChild);
    });
    es.addEventListener("end", function () { es.close(); });
  }

  document.addEventListener("DOMContentLoaded", function () {
    if (!window.EventSource) return;
    document.querySelectorAll("[data-sse]").forEach(function (el) {
      if (el.id === "steps") followSteps(el);
      else followAudit(el);
    });
  });
})();
