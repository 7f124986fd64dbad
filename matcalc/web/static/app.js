// matcalc's page: a thin client of POST /api/symbols and POST /api/derive (or /api/hessian,
// /api/jacobian in those modes) on this machine.
"use strict";
(() => {
  const $ = (id) => document.getElementById(id);
  const state = { symbols: [], selected: [], pendingWrt: null, seq: 0, controller: null, examples: [],
                  mode: "gradient" };
  const CODE_LABELS = { numpy_source: "NumPy", torch_source: "PyTorch", jax_source: "JAX" };
  const MODES = ["gradient", "hessian", "jacobian"];
  const ENDPOINTS = { gradient: "/api/derive", hessian: "/api/hessian", jacobian: "/api/jacobian" };

  function setMode(mode) {
    state.mode = MODES.includes(mode) ? mode : "gradient";
    for (const r of document.querySelectorAll("input[name=mode]")) r.checked = r.value === state.mode;
    $("lhs-label").textContent = state.mode === "jacobian" ? "F =" : "λ =";
    document.body.dataset.mode = state.mode;
  }
  let timer = null;

  const TYPESET_CHARS = 60000;  // longer LaTeX would keep the page busy for seconds: show text

  function tex(el, src) {
    if (src.length > TYPESET_CHARS) {
      el.textContent = `(${src.length} characters of LaTeX: too long to typeset here; see the text form)`;
      el.classList.add("muted");
    } else if (window.katex) {
      // maxExpand: KaTeX stops at 1000 macro expansions (a guard against \def loops, which this
      // LaTeX never has); a large Hessian's derivation needs more than that
      window.katex.render(src, el, { displayMode: true, throwOnError: false, strict: "ignore", maxExpand: 1e6 });
    } else {
      el.textContent = src;
    }
  }

  function question() {
    const q = { expr: $("expr").value };
    const shapes = $("shapes").value.trim();
    const defs = $("defs").value.trim();
    const syntax = $("syntax").value;
    if (shapes) q.shapes = shapes;
    if (defs) q.definitions = defs;
    if (syntax && syntax !== "matcalc") q.syntax = syntax;
    return q;
  }

  async function post(path, body, signal) {
    const r = await fetch(path, {
      method: "POST", headers: { "Content-Type": "application/json" },
      body: JSON.stringify(body), signal,
    });
    let data;
    try {
      data = await r.json();
    } catch (e) {
      data = { error: `the server answered ${r.status} ${r.statusText} without a message` };
    }
    return { ok: r.ok, status: r.status, data };
  }

  function setStatus(text) { $("status").textContent = text; }

  function showError(data) {
    const msg = (data && data.error) || "refused";
    $("error-text").textContent = msg;
    // a Hessian of an array-valued F: offer its Jacobian
    $("error-switch").hidden = !(state.mode === "hessian" && msg.includes("use jacobian"));
    $("error").hidden = false;
    $("results").replaceChildren();
    $("expr").setAttribute("aria-invalid", "true");
  }

  function hideError() {
    $("error").hidden = true;
    $("expr").removeAttribute("aria-invalid");
  }

  function schedule(delay) {
    clearTimeout(timer);
    timer = setTimeout(() => run(false), delay === undefined ? 350 : delay);
  }

  async function run(check) {
    clearTimeout(timer);
    const q = question();
    if (!q.expr.trim()) {
      hideError();
      $("results").replaceChildren();
      setStatus("");
      return;
    }
    const seq = ++state.seq;
    if (state.controller) state.controller.abort();
    const controller = new AbortController();
    state.controller = controller;
    document.body.classList.add("busy");
    setStatus(check ? "checking…" : "deriving…");
    const t0 = performance.now();
    try {
      const mode = state.mode;
      const sym = await post("/api/symbols", Object.assign({}, q, mode === "gradient" ? {} : { mode }),
                             controller.signal);
      if (seq !== state.seq) return;
      if (!sym.ok) {
        showError(sym.data);
        setStatus("");
        return;
      }
      updateWrt(sym.data.symbols || []);
      const body = Object.assign({}, q, { wrt: state.selected, check: !!check });
      body.backends = ["torch", "jax"];  // the PyTorch and JAX tabs
      const res = await post(ENDPOINTS[mode], body, controller.signal);
      if (seq !== state.seq) return;
      if (!res.ok) {
        showError(res.data);
        setStatus("");
        return;
      }
      hideError();
      render(res.data, mode);
      updatePermalink(q);
      const ms = Math.round(performance.now() - t0);
      setStatus(`${check ? "derived and checked" : "derived"} in ${ms} ms`);
    } catch (e) {
      if (e.name === "AbortError") return;
      showError({ error: `the matcalc server could not be reached (${e.message}); is matcalc serve still running?` });
      setStatus("");
    } finally {
      if (seq === state.seq) document.body.classList.remove("busy");
    }
  }

  function updateWrt(symbols) {
    state.symbols = symbols;
    if (!symbols.length && $("wrt-text")) {  // keep the box the user is typing in
      state.selected = $("wrt-text").value.split(/[\s,;]+/).filter(Boolean);
      state.pendingWrt = null;
      return;
    }
    const names = symbols.map((s) => s.name);
    let wanted = state.pendingWrt || state.selected;
    state.pendingWrt = null;
    let sel = names.filter((n) => wanted.includes(n));
    if (!sel.length && symbols.length) {
      const matrix = symbols.find((s) => s.shape.length === 2);
      sel = [(matrix || symbols[0]).name];
    }
    state.selected = sel;
    const box = $("wrt");
    box.replaceChildren();
    if (!symbols.length) {  // not listed (another syntax, say): type the names
      const input = document.createElement("input");
      input.type = "text";
      input.id = "wrt-text";
      input.placeholder = "names, like W, c";
      input.setAttribute("aria-label", "with respect to");
      input.value = wanted.join(", ");
      state.selected = wanted.slice();
      input.addEventListener("input", () => {
        state.selected = input.value.split(/[\s,;]+/).filter(Boolean);
        schedule();
      });
      box.append(input);
    }
    for (const s of symbols) {
      const label = document.createElement("label");
      label.className = "chip" + (sel.includes(s.name) ? " on" : "");
      const box_ = document.createElement("input");
      box_.type = "checkbox";
      box_.value = s.name;
      box_.checked = sel.includes(s.name);
      box_.addEventListener("change", () => {
        const on = new Set([...$("wrt").querySelectorAll("input:checked")].map((i) => i.value));
        state.selected = state.symbols.map((x) => x.name).filter((n) => on.has(n));
        label.classList.toggle("on", box_.checked);
        schedule(0);
      });
      const name = document.createElement("span");
      name.textContent = s.name;
      const dims = document.createElement("span");
      dims.className = "dims";
      dims.textContent = s.shape_text;
      label.append(box_, name, dims);
      box.append(label);
    }
  }

  function copyButton(button, getText) {
    button.addEventListener("click", async () => {
      const text = getText();
      try {
        await navigator.clipboard.writeText(text);
      } catch (e) {  // no clipboard permission: select and copy
        const area = document.createElement("textarea");
        area.value = text;
        document.body.append(area);
        area.select();
        document.execCommand("copy");
        area.remove();
      }
      const old = button.textContent;
      button.textContent = "copied";
      setTimeout(() => { button.textContent = old; }, 1200);
    });
  }

  function checkText(c) {
    const err = c.max_rel_error === null ? "not finite" : Number(c.max_rel_error).toExponential(2);
    const sizes = Object.entries(c.sizes || {}).map(([k, v]) => `${k}=${v}`).join(", ");
    if (c.ok) {
      return `✓ agrees with central finite differences: max relative error ${err} (tolerance ${c.tolerance}), ` +
             `${c.entries_checked} entries on ${c.draws} random draws` + (sizes ? ` with ${sizes}` : "");
    }
    return `✗ the numerical check failed: max relative error ${err} (tolerance ${c.tolerance})` +
           (c.message ? `; ${c.message}` : "");
  }

  function renderGradient(card, obj) {
    const lhs = `\\frac{\\partial ${obj.objective_latex || "\\lambda"}}{\\partial ${obj.wrt_latex || obj.wrt}}`;
    tex(card.querySelector(".result"), `${lhs} = ${obj.latex}`);
    if (obj.short_gradient && obj.short_gradient !== obj.gradient) {
      const where = Object.entries(obj.definitions_latex || {}).map(([k, v]) => `${k} = ${v}`).join(",\\; ");
      const short = card.querySelector(".short");
      tex(short, `= ${obj.short_latex}` + (where ? `\\qquad \\text{where } ${where}` : ""));
      short.hidden = false;
    }
    card.querySelector(".shape").textContent = `shape ${obj.shape_text}: ${obj.shape_reason}`;
    card.querySelector(".gradient-text").textContent = obj.gradient;
    copyButton(card.querySelector(".copy-text"), () => obj.gradient);
    if (obj.numerator_layout) {
      const n = obj.numerator_layout;
      const dims = n.shape.length ? `(${n.shape.join(", ")}${n.shape.length === 1 ? "," : ""})` : "scalar";
      card.querySelector(".layout").textContent =
        `numerator layout (the transpose): ${n.gradient}, shape ${dims}`;
    }
  }

  function renderSecondOrder(card, obj, mode) {
    // H[dW] or dF typeset, its vec (Kronecker) form, the dense matrix's shape
    tex(card.querySelector(".result"), `${obj.lhs_latex} = ${obj.latex}`);
    const where = Object.entries(obj.definitions_latex || {}).map(([k, v]) => `${k} = ${v}`).join(",\\; ");
    if (where) {  // the names (u1, u2, …) of shared parts of a map too large to write out
      const short = card.querySelector(".short");
      tex(short, `\\text{where } ${where}`);
      short.hidden = false;
    }
    const vec = card.querySelector(".vec");
    if (obj.kron_latex) {
      tex(vec, `${obj.vec_lhs_latex} = ${obj.kron_latex}`);
      vec.hidden = false;
    } else {
      const none = card.querySelector(".vec-none");
      none.textContent = "no Kronecker (vec) form can be written for this map; " +
        `the dense matrix comes from the ${mode === "hessian" ? "Hessian-vector" : "Jacobian-vector"} products`;
      none.hidden = false;
    }
    card.querySelector(".shape").textContent = obj.shape_reason;  // it names the dense matrix's shape
    const text = obj[mode];
    card.querySelector(".gradient-text").textContent = text;
    copyButton(card.querySelector(".copy-text"), () => text);
    if (obj.kron) card.querySelector(".layout").textContent = `vec form: ${obj.kron}`;
  }

  function render(list, mode) {
    mode = mode || "gradient";
    const out = $("results");
    out.replaceChildren();
    for (const obj of list) {
      const card = $("card").content.firstElementChild.cloneNode(true);
      card.dataset.wrt = Array.isArray(obj.wrt) ? obj.wrt.join(",") : obj.wrt;
      card.dataset.mode = mode;
      if (mode !== "gradient") {
        renderSecondOrder(card, obj, mode);
      } else {
        renderGradient(card, obj);
      }
      if (obj.notes && obj.notes.length) {  // (A*B where @ was likely meant, the Jacobian of a scalar)
        const n = card.querySelector(".notes");
        n.textContent = "note: " + obj.notes.join("; ");
        n.hidden = false;
      }
      if (obj.check) {
        const c = card.querySelector(".check-result");
        c.textContent = checkText(obj.check);
        c.classList.add(obj.check.ok ? "ok" : "bad");
        c.hidden = false;
      }
      tex(card.querySelector(".steps-math"), obj.steps_latex || "");
      const diff = (obj.steps || []).find((st) => /^differential( of the gradient)?: /.test(st.identity));
      if (diff) {
        card.querySelector(".rules").textContent =
          "rules of the differential used: " + diff.identity.slice(diff.identity.indexOf(": ") + 2);
      }
      card.querySelector(".steps-text").textContent = (obj.derivation || []).join("\n");
      // NumPy first, then PyTorch and JAX (a backend matcalc could not write shows why)
      const order = ["numpy", "torch", "jax"];
      const sources = Object.keys(obj)
        .filter((k) => /_(source|error)$/.test(k) && typeof obj[k] === "string")
        .filter((k) => !(k.endsWith("_error") && obj[k.replace(/_error$/, "_source")]))
        .sort((a, b) => order.indexOf(a.split("_")[0]) - order.indexOf(b.split("_")[0]));
      const tabs = card.querySelector(".tabs");
      const code = card.querySelector(".source");
      let current = sources[0];
      const show = (key) => {
        current = key;
        code.textContent = key.endsWith("_error") ? `# ${obj[key]}` : obj[key];
        for (const b of tabs.children) b.setAttribute("aria-selected", String(b.dataset.key === key));
      };
      for (const key of sources) {
        const b = document.createElement("button");
        b.type = "button";
        b.dataset.key = key;
        b.setAttribute("role", "tab");
        const sourceKey = key.replace(/_error$/, "_source");
        b.textContent = CODE_LABELS[sourceKey] || sourceKey.replace(/_source$/, "");
        b.addEventListener("click", () => show(key));
        tabs.append(b);
      }
      if (current) show(current);
      copyButton(card.querySelector(".copy-code"), () => obj[current] || "");
      out.append(card);
    }
  }

  function updatePermalink(q) {
    const p = new URLSearchParams();
    if (state.mode !== "gradient") p.set("mode", state.mode);
    p.set("expr", q.expr);
    if (state.selected.length) p.set("wrt", state.selected.join(","));
    if (q.shapes) p.set("shapes", q.shapes);
    if (q.definitions) p.set("defs", q.definitions);
    if (q.syntax) p.set("syntax", q.syntax);
    const url = `${location.pathname}?${p.toString()}`;
    history.replaceState(null, "", url);
    $("permalink").href = url;
  }

  function loadExample(ex) {
    setMode(ex.mode || "gradient");
    $("expr").value = ex.expr;
    $("shapes").value = ex.shapes || "";
    $("defs").value = ex.definitions || "";
    $("syntax").value = "matcalc";
    state.pendingWrt = ex.wrt || null;
    run(false);
  }

  async function start() {
    $("question").addEventListener("submit", (e) => { e.preventDefault(); run(false); });
    for (const id of ["expr", "shapes", "defs"]) $(id).addEventListener("input", () => schedule());
    $("syntax").addEventListener("change", () => schedule(0));
    $("check").addEventListener("click", () => run(true));
    for (const r of document.querySelectorAll("input[name=mode]")) {
      r.addEventListener("change", () => { if (r.checked) { setMode(r.value); schedule(0); } });
    }
    $("to-jacobian").addEventListener("click", () => { setMode("jacobian"); run(false); });
    $("examples").addEventListener("change", (e) => {
      const ex = state.examples[Number(e.target.value)];
      e.target.value = "";
      if (ex) loadExample(ex);
    });
    try {
      const r = await fetch("/api/info");
      const info = await r.json();
      $("version").textContent = info.version || "";
      state.examples = info.examples || [];
      state.examples.forEach((ex, i) => {
        const o = document.createElement("option");
        o.value = String(i);
        o.textContent = ex.name;
        o.title = ex.note || ex.expr;
        $("examples").append(o);
      });
      for (const s of info.syntaxes || []) {
        if (s === "matcalc") continue;
        const o = document.createElement("option");
        o.value = s;
        o.textContent = s === "matlab" ? "matrixcalculus.org (matlab)" : s;
        $("syntax").append(o);
      }
    } catch (e) {
      setStatus("could not read /api/info");
    }
    const p = new URLSearchParams(location.search);
    setMode(p.get("mode") || "gradient");
    if (p.get("expr")) {
      $("expr").value = p.get("expr");
      $("shapes").value = p.get("shapes") || "";
      $("defs").value = p.get("defs") || "";
      if (p.get("syntax")) $("syntax").value = p.get("syntax");
      if (p.get("shapes") || p.get("defs") || p.get("syntax")) $("more").open = true;
      state.pendingWrt = (p.get("wrt") || "").split(",").filter(Boolean);
      run(false);
    } else if (state.examples.length) {
      loadExample(state.examples[0]);
    }
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
