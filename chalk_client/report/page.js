// The results table of a Chalk report: filter, sort, page through, open a job.
// Every value from the results is put in the page as text (textContent), never as markup:
// a student's output is untrusted.
"use strict";
(function () {
  const rows = JSON.parse(document.getElementById("rows").textContent);
  const CAUSES = JSON.parse(document.getElementById("causes").textContent);
  const body = document.getElementById("results-body");
  const shown = document.getElementById("shown");
  const more = document.getElementById("more");
  const inputs = {
    q: document.getElementById("filter-text"),
    status: document.getElementById("filter-status"),
    cause: document.getElementById("filter-cause"),
    group: document.getElementById("filter-group"),
  };
  const PAGE = 200;
  let limit = PAGE;
  let sortKey = null;
  let sortDir = 1;

  function el(tag, text, cls) {
    const node = document.createElement(tag);
    if (text !== undefined && text !== null) node.textContent = String(text);
    if (cls) node.className = cls;
    return node;
  }

  function fmtScore(value) {
    return value === null || value === undefined ? "" : Number(value).toFixed(4).replace(/0+$/, "").replace(/\.$/, "");
  }

  function testsTable(step) {
    const wrap = el("div");
    const listed = step.ts.length < step.tn ? " (the first " + step.ts.length + ")" : "";
    wrap.append(el("h5", "Tests: " + step.tn + listed));
    const table = el("table", null, "tests");
    const head = el("tr");
    for (const name of ["#", "verdict", "CPU s", "wall s", "MiB", "exit", "detail"]) {
      head.append(el("th", name));
    }
    table.append(head);
    step.ts.forEach((test, index) => {
      const [verdict, cpu, wall, memory, exit, retried, detail] = test;
      const tr = el("tr", null, verdict === "AC" ? "ok" : "bad");
      tr.append(
        el("td", index + 1),
        el("td", verdict),
        el("td", fmtSeconds(cpu)),
        el("td", fmtSeconds(wall)),
        el("td", memory === null ? "" : Number(memory).toFixed(1)),
        el("td", exit === null ? "" : exit),
        el("td", (retried ? "(ran twice) " : "") + (detail || "")),
      );
      table.append(tr);
    });
    wrap.append(table);
    return wrap;
  }

  function fmtSeconds(value) {
    return value === null || value === undefined ? "" : Number(value).toFixed(3);
  }

  function haystack(row) {
    const parts = [row.id, row.st, row.ca || "", row.g || "", row.e || "", row.w || "", row.md];
    for (const step of row.steps) {
      parts.push(step.out, step.err);
      for (const key in step.m) parts.push(key, step.m[key]);
      if (step.ts) for (const test of step.ts) parts.push(test[0], test[6] || "");
    }
    return parts.join("\n").toLowerCase();
  }
  for (const row of rows) row._text = haystack(row);

  function matches(row) {
    const q = inputs.q.value.trim().toLowerCase();
    if (q && !row._text.includes(q)) return false;
    if (inputs.status.value && row.st !== inputs.status.value) return false;
    if (inputs.cause.value) {
      if (inputs.cause.value === "any" ? !row.ca : row.ca !== inputs.cause.value) return false;
    }
    if (inputs.group && inputs.group.value && row.g !== inputs.group.value) return false;
    return true;
  }

  function compare(a, b) {
    const x = a[sortKey];
    const y = b[sortKey];
    if (x === y) return 0;
    if (x === null || x === undefined) return 1;
    if (y === null || y === undefined) return -1;
    return (x < y ? -1 : 1) * sortDir;
  }

  function detail(row) {
    const box = el("div", null, "detail-box");
    const facts = el("dl");
    const add = (name, value) => {
      if (value === null || value === undefined || value === "") return;
      facts.append(el("dt", name), el("dd", value));
    };
    add("job", row.id);
    add("status", row.st);
    add("score", fmtScore(row.sc));
    add("cause", row.ca ? row.ca + " - " + (CAUSES[row.ca] || "") : "");
    add("attempts", row.a);
    add("worker", row.w);
    add("seconds", fmtSeconds(row.t));
    box.append(facts);
    if (row.e) {
      box.append(el("h4", "Error"), el("pre", row.e, "error"));
    }
    row.steps.forEach((step, index) => {
      const head = "Step " + (index + 1) + ": score " + fmtScore(step.sc) +
        (step.ct ? ", continues" : ", stops") + (step.ca ? ", " + step.ca : "");
      box.append(el("h4", head));
      const keys = Object.keys(step.m);
      if (keys.length) {
        const table = el("table", null, "reasons");
        for (const key of keys) {
          const tr = el("tr");
          tr.append(el("th", key), el("td", step.m[key]));
          table.append(tr);
        }
        box.append(table);
      }
      if (step.out) box.append(el("h5", "stdout"), el("pre", step.out));
      if (step.err) box.append(el("h5", "stderr"), el("pre", step.err));
      if (step.cp) {
        const how = step.cp.c ? "taken from the build cache" : fmtSeconds(step.cp.s) + " s";
        box.append(el("h5", "Compile: " + (step.cp.ok ? "ok" : "failed") + ", " + how));
        if (step.cp.e) box.append(el("pre", step.cp.e, step.cp.ok ? null : "error"));
      }
      if (step.ts) box.append(testsTable(step));
    });
    box.append(el("h4", "Job metadata"), el("pre", row.md));
    return box;
  }

  function toggle(tr, row) {
    const next = tr.nextSibling;
    if (next && next.classList && next.classList.contains("detail")) {
      next.remove();
      tr.classList.remove("open");
      return;
    }
    const holder = el("tr", null, "detail");
    const cell = el("td");
    cell.colSpan = 7;
    cell.append(detail(row));
    holder.append(cell);
    tr.after(holder);
    tr.classList.add("open");
  }

  function render() {
    let found = rows.filter(matches);
    if (sortKey) found = found.slice().sort(compare);
    body.replaceChildren();
    for (const row of found.slice(0, limit)) {
      const tr = el("tr", null, "result " + row.st + (row.ca === "grader_error" ? " grader" : ""));
      tr.dataset.id = row.id;
      tr.append(
        el("td", row.id, "id"),
        el("td", row.st),
        el("td", fmtScore(row.sc), "num"),
        el("td", row.ca || ""),
        el("td", row.g === null ? "" : row.g),
        el("td", fmtSeconds(row.t), "num"),
        el("td", row.e || (row.steps.length ? row.steps.length + " step(s)" : ""), "note"),
      );
      tr.addEventListener("click", () => toggle(tr, row));
      body.append(tr);
    }
    shown.textContent = Math.min(found.length, limit) + " shown of " + found.length +
      " matching (" + rows.length + " jobs)";
    shown.dataset.matching = String(found.length);
    more.hidden = found.length <= limit;
  }

  function toHash() {
    const params = new URLSearchParams();
    for (const name in inputs) {
      if (inputs[name] && inputs[name].value) params.set(name, inputs[name].value);
    }
    const text = params.toString();
    history.replaceState(null, "", text ? "#" + text : location.pathname + location.search);
  }

  function fromHash() {
    const params = new URLSearchParams(location.hash.slice(1));
    for (const name in inputs) {
      if (inputs[name]) inputs[name].value = params.get(name) || "";
    }
  }

  function changed() {
    limit = PAGE;
    toHash();
    render();
  }

  for (const name in inputs) {
    if (!inputs[name]) continue;
    inputs[name].addEventListener(name === "q" ? "input" : "change", changed);
  }
  more.addEventListener("click", () => {
    limit += PAGE;
    render();
  });
  for (const th of document.querySelectorAll("th[data-sort]")) {
    th.addEventListener("click", () => {
      const key = th.dataset.sort;
      sortDir = sortKey === key ? -sortDir : 1;
      sortKey = key;
      render();
    });
  }
  for (const link of document.querySelectorAll("[data-cause]")) {
    link.addEventListener("click", (event) => {
      event.preventDefault();
      inputs.cause.value = link.dataset.cause;
      changed();
      document.getElementById("results").scrollIntoView();
    });
  }
  window.addEventListener("hashchange", () => {
    fromHash();
    render();
  });
  fromHash();
  render();
  document.body.dataset.ready = "true";
})();
