// The page of `nmt serve` (nmt/serve/page.py): plain JavaScript, no build step, nothing fetched but this
// server's own API (relative URLs, so the page also works behind a proxy under a sub-path):
//   GET languages       -> the source and target selectors
//   POST translate      -> the translation (LibreTranslate: q, source, target, alternatives), as you type
//   POST v1/translate   -> the cross-attention of one translated line (attention: true), as a heatmap
//   GET v1/info         -> the server's beam, so that the heatmap's search is the translation's
//   POST v1/explain     -> one line inside the model, drawn by the renderer of `nmt explain` (static/explain.js)
"use strict";

(function () {
  const DELAY_MS = 400;          // translate this long after the last keystroke
  const ALTERNATIVES = 2;        // LibreTranslate's alternatives: the n-best list's next ones
  const KEY_STORE = "nmt-serve-api-key";

  const $ = (id) => document.getElementById(id);
  const el = {
    text: $("source-text"), source: $("source-lang"), target: $("target-lang"), swap: $("swap"),
    detected: $("detected"), translation: $("translation"), alternatives: $("alternatives"), copy: $("copy"),
    clear: $("clear"), chars: $("chars"), status: $("status"), heatmap: $("heatmap"),
    caption: $("heatmap-caption"), settings: $("settings"), key: $("api-key"),
    inside: $("inside"), insideShow: $("inside-show"), insideCaption: $("inside-caption"),
    fileForm: $("file-form"), fileInput: $("file-input"), fileTranslate: $("file-translate"),
    fileStatus: $("file-status"), fileDownload: $("file-download"), fileFormats: $("file-formats"),
  };

  let languages = [];            // [{code, name, targets}] from GET languages
  let ready = false;             // the selectors are filled
  let autoWorks = true;          // false once the server refused source "auto": send the first language instead
  let alternatives = ALTERNATIVES;  // 0 once the server refused alternatives (a small serve.max_beam)
  let serverBeam = null;         // decode.beam of GET v1/info, when it answered
  let timer = null;
  let seq = 0;                   // the latest translation request; answers to older ones are ignored
  let controller = null;
  let heatSeq = 0;
  let heatController = null;
  let insideSeq = 0;
  let insideController = null;
  // what is shown: the source lines it is for, the best translation and the alternatives (swappable)
  let shown = null;              // {sourceLines: [...], best: "...", alternatives: [...]}
  let selectedLine = 0;          // the line whose attention the heatmap shows

  // ---------------------------------------------------------------- helpers

  function storage(key, value) {
    try {
      if (value === undefined) return window.localStorage.getItem(key) || "";
      if (value) window.localStorage.setItem(key, value); else window.localStorage.removeItem(key);
    } catch (e) { /* storage disabled: the key lasts as long as the page */ }
    return value;
  }

  function setStatus(message, isError) {
    el.status.textContent = message;
    el.status.classList.toggle("error", Boolean(isError));
  }

  const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

  function languageName(code) {
    const found = languages.find((l) => l.code === code);
    return found ? found.name : code;
  }

  // GET (body undefined) or POST JSON; the answer's JSON, or an Error with the server's one-line error and status
  async function api(path, body, signal) {
    const headers = {};
    const key = el.key.value.trim();
    if (key) headers.Authorization = "Bearer " + key;
    const init = { headers, signal };
    if (body !== undefined) {
      init.method = "POST";
      headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    const response = await fetch(path, init);
    let data = null;
    try {
      data = await response.json();
    } catch (e) { /* not JSON: the status says enough */ }
    if (!response.ok) {
      const error = new Error((data && data.error) || `HTTP ${response.status} ${response.statusText}`.trim());
      error.status = response.status;
      throw error;
    }
    return data;
  }

  function explain(error) {
    if (error.status === 403) {
      el.settings.open = true;
      return error.message + " — enter the key under Settings";
    }
    if (error instanceof TypeError) return "The server cannot be reached (" + error.message + ")";
    return error.message;
  }

  // ---------------------------------------------------------------- languages

  function sources() {
    return languages.filter((l) => l.targets && l.targets.length);
  }

  function targetsOf(code) {
    if (code === "auto") {
      const all = [];
      for (const l of sources()) for (const t of l.targets) if (!all.includes(t)) all.push(t);
      return all;
    }
    const found = languages.find((l) => l.code === code);
    return found ? found.targets : [];
  }

  function option(value, text) {
    const o = document.createElement("option");
    o.value = value;
    o.textContent = text;
    return o;
  }

  function fillTargets() {
    const before = el.target.value;
    el.target.replaceChildren(...targetsOf(el.source.value).map((code) => option(code, languageName(code))));
    if ([...el.target.options].some((o) => o.value === before)) el.target.value = before;
    updateSwap();
  }

  function updateSwap() {
    const from = el.source.value, to = el.target.value;
    el.swap.hidden = from === "auto" || !to || !targetsOf(to).includes(from);
  }

  async function loadLanguages() {
    for (let attempt = 0; ; attempt++) {
      try {
        languages = await api("languages");
        break;
      } catch (e) {
        // 503 while the model loads; no answer while the server starts: try again
        if (e.status === 503 || e instanceof TypeError) {
          setStatus(e.status === 503 ? "The model is loading…" : explain(e), e.status !== 503);
          await sleep(Math.min(1000 * (attempt + 1), 5000));
          continue;
        }
        setStatus("Could not load the languages: " + explain(e), true);
        return;
      }
    }
    const from = sources();
    el.source.replaceChildren(option("auto", "Detect language"), ...from.map((l) => option(l.code, l.name)));
    if (from.length) el.source.value = from[0].code;
    fillTargets();
    el.source.disabled = el.target.disabled = false;
    ready = true;
    setStatus(from.length ? "Ready" : "This server translates no language pair", !from.length);
    api("v1/info").then((info) => {
      serverBeam = info && info.decode && info.decode.beam;
    }).catch(() => { /* the heatmap then uses the server's search settings */ });
    if (el.text.value.trim()) translate();
  }

  // ---------------------------------------------------------------- translation

  function schedule() {
    clearTimeout(timer);
    timer = setTimeout(translate, DELAY_MS);
    countChars();
  }

  function countChars() {
    const text = el.text.value;
    const lines = text ? text.split("\n").length : 0;
    el.chars.textContent = text ? `${text.length} characters, ${lines} line${lines === 1 ? "" : "s"}` : "";
  }

  function clearOutput() {
    shown = null;
    el.translation.replaceChildren();
    delete el.translation.dataset.source;
    el.alternatives.replaceChildren();
    el.copy.disabled = true;
    el.detected.textContent = "";
    clearHeatmap("");
    clearInside();
  }

  async function translate() {
    clearTimeout(timer);
    if (!ready) return;
    const id = ++seq;
    if (controller) controller.abort();
    controller = null;
    const text = el.text.value;
    if (!text.trim()) {
      clearOutput();
      setStatus("Ready");
      return;
    }
    controller = new AbortController();
    const signal = controller.signal;
    const target = el.target.value;
    let source = el.source.value;
    if (source === "auto" && !autoWorks) source = sources()[0].code;
    setStatus("Translating…");
    el.translation.classList.add("busy");
    let data;
    try {
      for (;;) {
        try {
          data = await api("translate", { q: text, source, target, format: "text", alternatives }, signal);
          break;
        } catch (e) {
          if (e.status === 400 && source === "auto" && /auto|source/i.test(e.message)) {
            autoWorks = false;  // a server without detection: its model has one source language anyway
            source = sources()[0].code;
          } else if (e.status === 400 && alternatives && /alternatives/i.test(e.message)) {
            alternatives = 0;
          } else {
            throw e;
          }
        }
      }
    } catch (e) {
      if (id !== seq || e.name === "AbortError") return;
      el.translation.classList.remove("busy");
      setStatus(explain(e), true);
      return;
    }
    if (id !== seq) return;
    el.translation.classList.remove("busy");
    showDetected(data, source);
    const sourceLines = text.replace(/\r\n/g, "\n").split("\n");
    const alts = (data.alternatives || []).filter((a, i, all) => a !== data.translatedText && all.indexOf(a) === i);
    shown = { sourceLines, best: data.translatedText, alternatives: alts };
    if (!sourceLines[selectedLine] || !sourceLines[selectedLine].trim()) {
      selectedLine = Math.max(0, sourceLines.findIndex((l) => l.trim()));
    }
    render(text);
    setStatus("Translated " + sourceLines.filter((l) => l.trim()).length + " line(s)");
    if (el.heatmap.dataset.source !== sourceLines[selectedLine]) showAttention(selectedLine);
  }

  function showDetected(data, source) {
    const detected = data.detectedLanguage;
    if (el.source.value !== "auto") {
      el.detected.textContent = "";
    } else if (detected && detected.language) {
      let confidence = "";
      if (typeof detected.confidence === "number") {  // LibreTranslate's 0..100; a 0..1 fraction also reads right
        confidence = ` (${Math.round(detected.confidence <= 1 ? detected.confidence * 100 : detected.confidence)}%)`;
      }
      el.detected.textContent = "Detected: " + languageName(detected.language) + confidence;
    } else if (!autoWorks) {
      el.detected.textContent = "No detection on this server: from " + languageName(source);
    } else {
      el.detected.textContent = "";
    }
  }

  function render(sourceText) {
    const lines = shown.best.split("\n");
    const nodes = [];
    lines.forEach((line, i) => {
      if (i) nodes.push(document.createTextNode("\n"));
      const span = document.createElement("span");
      span.className = "line";
      span.textContent = line;
      span.dataset.line = String(i);
      if (line) {
        span.tabIndex = 0;
        span.setAttribute("role", "button");
        span.title = "Show the attention of line " + (i + 1);
      }
      if (i === selectedLine) span.classList.add("selected");
      nodes.push(span);
    });
    el.translation.replaceChildren(...nodes);
    el.translation.dataset.source = sourceText;
    el.copy.disabled = !shown.best;
    el.alternatives.replaceChildren(...shown.alternatives.map((alt, i) => {
      const li = document.createElement("li");
      const button = document.createElement("button");
      button.type = "button";
      button.className = "alternative";
      button.textContent = alt;
      button.title = "Use this translation";
      button.addEventListener("click", () => useAlternative(i));
      li.append(button);
      return li;
    }));
  }

  function useAlternative(i) {
    if (!shown) return;
    const alt = shown.alternatives[i];
    shown.alternatives[i] = shown.best;
    shown.best = alt;
    render(el.translation.dataset.source || "");
    setStatus("Alternative " + (i + 1) + " swapped in (the heatmap stays the model's best translation's)");
  }

  function selectLine(target) {
    const span = target.closest && target.closest(".line");
    if (!span || !shown || !span.textContent) return;
    selectedLine = Number(span.dataset.line);
    for (const s of el.translation.querySelectorAll(".line")) s.classList.toggle("selected", s === span);
    showAttention(selectedLine);
  }

  // ---------------------------------------------------------------- copy

  async function copy() {
    const text = shown ? shown.best : "";
    if (!text) return;
    let done = false;
    if (navigator.clipboard && window.isSecureContext) {
      try {
        await navigator.clipboard.writeText(text);
        done = true;
      } catch (e) { /* denied: the fallback below */ }
    }
    if (!done) {
      const area = document.createElement("textarea");
      area.value = text;
      area.setAttribute("readonly", "");
      area.className = "offscreen";
      document.body.append(area);
      area.select();
      try {
        done = document.execCommand("copy");
      } catch (e) {
        done = false;
      }
      area.remove();
    }
    setStatus(done ? "Copied to the clipboard" : "Could not copy: select the translation and copy it by hand", !done);
    if (done) {
      el.copy.textContent = "Copied ✓";
      setTimeout(() => { el.copy.textContent = "Copy"; }, 1500);
    }
  }

  // ---------------------------------------------------------------- the heatmap

  function clearHeatmap(caption) {
    heatSeq++;
    if (heatController) heatController.abort();
    heatController = null;
    el.heatmap.replaceChildren();
    delete el.heatmap.dataset.source;
    el.caption.textContent = caption;
  }

  async function showAttention(index) {
    if (!shown) return;
    updateInside();
    const sentence = shown.sourceLines[index] || "";
    if (!sentence.trim()) {
      clearHeatmap("Line " + (index + 1) + " is empty: nothing to show.");
      return;
    }
    const id = ++heatSeq;
    if (heatController) heatController.abort();
    heatController = new AbortController();
    // the search of the translation shown: LibreTranslate's `alternatives: k` is an n-best of k + 1 with the
    // server's beam, or k + 1 when that is smaller (nmt/serve/libretranslate.py)
    const body = { sentences: [sentence], attention: true };
    if (alternatives && serverBeam) {
      Object.assign(body, { beam: Math.max(serverBeam, alternatives + 1), nbest: alternatives + 1 });
    }
    let data;
    try {
      data = await api("v1/translate", body, heatController.signal);
    } catch (e) {
      if (id !== heatSeq || e.name === "AbortError") return;
      el.caption.textContent = "No attention for line " + (index + 1) + ": " + explain(e);
      return;
    }
    if (id !== heatSeq) return;
    const answer = data.translations && data.translations[0];
    if (!answer || !answer.attention) {
      clearHeatmap("No attention for line " + (index + 1) + ".");
      return;
    }
    drawHeatmap(answer.attention, sentence);
    el.caption.textContent = `Line ${index + 1}: “${sentence}” → “${answer.text}”. Each row is a target piece, ` +
      "each column a source piece: how much the decoder looked at it (the last layer, averaged over heads; " +
      "rows sum to 1).";
  }

  function piece(p) {
    const label = p.replace(/^\u2581/, "");
    return label === "" ? "␣" : label;
  }

  // white to dark blue (matplotlib's "Blues" ends), through a light blue
  const STOPS = [[247, 251, 255], [107, 174, 214], [8, 48, 107]];

  function color(w) {
    const x = Math.min(1, Math.max(0, w)) * (STOPS.length - 1);
    const i = Math.min(STOPS.length - 2, Math.floor(x));
    const f = x - i;
    const c = STOPS[i].map((v, k) => Math.round(v + (STOPS[i + 1][k] - v) * f));
    return `rgb(${c[0]}, ${c[1]}, ${c[2]})`;
  }

  function drawHeatmap(attention, sentence) {
    const src = attention.source.map(piece);
    const tgt = attention.target.map(piece);
    const table = document.createElement("table");
    const head = document.createElement("thead");
    const headRow = document.createElement("tr");
    const corner = document.createElement("th");
    corner.className = "corner";
    corner.textContent = "target ↓ source →";
    headRow.append(corner);
    for (const s of src) {
      const th = document.createElement("th");
      th.scope = "col";
      const label = document.createElement("span");
      label.textContent = s;
      th.append(label);
      headRow.append(th);
    }
    head.append(headRow);
    const body = document.createElement("tbody");
    attention.weights.forEach((row, t) => {
      const tr = document.createElement("tr");
      const th = document.createElement("th");
      th.scope = "row";
      th.textContent = tgt[t] === undefined ? "" : tgt[t];
      tr.append(th);
      row.forEach((w, s) => {
        const td = document.createElement("td");
        td.style.backgroundColor = color(w);
        td.title = `${tgt[t]} ← ${src[s]}: ${w.toFixed(3)}`;
        td.setAttribute("aria-label", td.title);
        tr.append(td);
      });
      body.append(tr);
    });
    table.append(head, body);
    el.heatmap.replaceChildren(table);
    el.heatmap.dataset.source = sentence;
  }

  // ---------------------------------------------------------------- inside the model

  // the search of the translation shown, as for the heatmap (an n-best of alternatives + 1 needs that beam)
  function shownBeam() {
    return alternatives && serverBeam ? Math.max(serverBeam, alternatives + 1) : undefined;
  }

  function clearInside() {
    insideSeq++;
    if (insideController) insideController.abort();
    insideController = null;
    el.inside.replaceChildren();
    delete el.inside.dataset.source;
    updateInside();
  }

  // the button names the selected line; a view already open follows the line clicked
  function updateInside() {
    const sentence = shown ? shown.sourceLines[selectedLine] || "" : "";
    el.insideShow.disabled = !sentence.trim() || !window.NmtExplain;
    el.insideShow.textContent = `Show line ${selectedLine + 1} inside the model`;
    if (sentence.trim() && el.inside.dataset.source && el.inside.dataset.source !== sentence) showInside();
  }

  async function showInside() {
    const index = selectedLine;
    const sentence = shown ? shown.sourceLines[index] || "" : "";
    if (!sentence.trim() || !window.NmtExplain) return;
    const id = ++insideSeq;
    if (insideController) insideController.abort();
    insideController = new AbortController();
    el.inside.dataset.source = sentence;
    el.insideCaption.textContent = `Line ${index + 1}: computing…`;
    let data;
    try {
      data = await api("v1/explain", { sentence, beam: shownBeam() }, insideController.signal);
    } catch (e) {
      if (id !== insideSeq || e.name === "AbortError") return;
      el.insideCaption.textContent = `Line ${index + 1} cannot be shown inside the model: ${explain(e)}`;
      return;
    }
    if (id !== insideSeq) return;
    window.NmtExplain.render(el.inside, data);
    el.insideCaption.textContent = `Line ${index + 1}: “${sentence}” → “${data.translation}”, step by step ` +
      "with the model's own numbers (what nmt explain writes as a page).";
  }

  // ---------------------------------------------------------------- wiring

  el.key.value = storage(KEY_STORE);
  el.key.addEventListener("change", () => {
    storage(KEY_STORE, el.key.value.trim());
    translate();
  });
  $("settings-form").addEventListener("submit", (e) => {  // Enter in the key field: keep it, translate
    e.preventDefault();
    storage(KEY_STORE, el.key.value.trim());
    translate();
  });
  el.text.addEventListener("input", schedule);
  el.text.addEventListener("keydown", (e) => {
    if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) {
      e.preventDefault();
      translate();
    }
  });
  el.source.addEventListener("change", () => {
    fillTargets();
    translate();
  });
  el.target.addEventListener("change", () => {
    updateSwap();
    translate();
  });
  el.swap.addEventListener("click", () => {
    const from = el.source.value, to = el.target.value;
    if (shown && shown.best) el.text.value = shown.best;
    el.source.value = to;
    fillTargets();
    el.target.value = from;
    updateSwap();
    countChars();
    translate();
  });
  el.clear.addEventListener("click", () => {
    el.text.value = "";
    countChars();
    translate();
    el.text.focus();
  });
  el.copy.addEventListener("click", copy);
  el.insideShow.addEventListener("click", showInside);
  el.translation.addEventListener("click", (e) => selectLine(e.target));
  el.translation.addEventListener("keydown", (e) => {
    if (e.key === "Enter" || e.key === " ") {
      e.preventDefault();
      selectLine(e.target);
    }
  });

  // ---------------------------------------------------------------- documents (POST translate_file)

  async function loadFileFormats() {
    try {
      const settings = await api("frontend/settings");
      const formats = (settings && settings.filesTranslation && settings.supportedFilesFormat) || [];
      el.fileFormats.textContent = formats.length ? formats.join(", ") : "not offered by this server";
      if (!formats.length) return;
      el.fileInput.accept = formats.join(",");
      el.fileInput.disabled = false;
    } catch (e) {
      el.fileFormats.textContent = explain(e);
    }
  }

  function fileStatus(message, isError) {
    el.fileStatus.textContent = message;
    el.fileStatus.classList.toggle("error", Boolean(isError));
  }

  async function translateFile(e) {
    e.preventDefault();
    const file = el.fileInput.files[0];
    if (!file) return;
    const data = new FormData();  // what LibreTranslate's page sends
    data.append("file", file);
    data.append("source", el.source.value);
    data.append("target", el.target.value);
    data.append("api_key", el.key.value.trim());
    el.fileTranslate.disabled = true;
    el.fileDownload.hidden = true;
    fileStatus("Translating " + file.name + "…");
    try {
      const response = await fetch("translate_file", { method: "POST", body: data });
      let answer = null;
      try { answer = await response.json(); } catch (err) { /* the status says enough */ }
      if (!response.ok || !answer || !answer.translatedFileUrl) {
        const error = new Error((answer && answer.error) || `HTTP ${response.status}`);
        error.status = response.status;
        throw error;
      }
      el.fileDownload.href = answer.translatedFileUrl;
      el.fileDownload.hidden = false;
      fileStatus("Translated " + file.name + ": the link works once");
    } catch (err) {
      fileStatus(explain(err), true);
    } finally {
      el.fileTranslate.disabled = !el.fileInput.files.length;
    }
  }

  el.fileInput.addEventListener("change", () => {
    el.fileTranslate.disabled = !el.fileInput.files.length;
    el.fileDownload.hidden = true;
    fileStatus("");
  });
  el.fileForm.addEventListener("submit", translateFile);
  el.fileDownload.addEventListener("click", () => {
    setTimeout(() => { el.fileDownload.hidden = true; }, 0);
  });

  countChars();
  loadLanguages();
  loadFileFormats();
})();
