/* The renderer of `nmt explain` (nmt/explain.py builds its data): one sentence through the Transformer, panel by
   panel in the order of "Attention Is All You Need". Shared by the standalone page (nmt/explain_page.py inlines
   it) and the web page of `nmt serve` (served as static/explain.js). Fetches nothing; draws with the DOM and canvas
   only, so it runs under a Content-Security-Policy without 'unsafe-inline'.
   Usage: NmtExplain.render(element, data). */
(function (global) {
  "use strict";
  const MAX_ROWS = 12; // token rows shown in the tables of vectors

  // ---- small DOM helpers
  function h(tag, props, ...kids) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(props || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (k === "class") e.className = v;
      else if (k === "text") e.textContent = v;
      else e.setAttribute(k, v);
    }
    for (const kid of kids.flat()) if (kid !== null && kid !== undefined) e.append(kid instanceof Node ? kid : String(kid));
    return e;
  }
  function fmt(x) {
    if (x === null || x === undefined) return "−∞";
    if (x === 0) return "0";
    const a = Math.abs(x);
    return a >= 1e5 || a < 1e-3 ? x.toExponential(2) : String(+x.toPrecision(4));
  }
  const vec = (v) => "[" + v.map(fmt).join(", ") + ", …]";
  const shape = (dims) => "[" + dims.join(" × ") + "]";
  const para = (...kids) => h("p", {}, ...kids);
  const formula = (text) => h("div", { class: "nx-formula" }, text);
  const code = (text) => h("code", {}, text);

  function panel(id, title, ref, ...body) {
    return h("section", { class: "nx-panel", id: id },
      h("h2", {}, title, " ", h("span", { class: "nx-ref" }, ref)), ...body);
  }
  function sub(title, ref, ...body) {
    return h("div", { class: "nx-sub" }, h("h4", {}, title, " ", h("span", { class: "nx-ref" }, ref)), ...body);
  }
  function table(head, rows, cls) {
    return h("div", { class: "nx-scroll" }, h("table", { class: "nx-table " + (cls || "") },
      h("thead", {}, h("tr", {}, head.map((c) => h("th", { scope: "col" }, c)))),
      h("tbody", {}, rows.map((r) => h("tr", {}, r.map((c, i) => (i === 0 ? h("th", { scope: "row" }, c) : h("td", {}, c))))))));
  }
  function fewRows(rows) {
    return rows.length > MAX_ROWS ? rows.slice(0, MAX_ROWS).concat([["…", `${rows.length - MAX_ROWS} more rows`]]) : rows;
  }

  // ---- pictures
  function unpack(q) { // bytes 0..255 of [lo, hi] (nmt.explain_model.quantized) -> Float32Array
    const bin = atob(q.b64), out = new Float32Array(bin.length), step = (q.hi - q.lo) / 255;
    for (let i = 0; i < bin.length; i++) out[i] = q.lo + bin.charCodeAt(i) * step;
    return out;
  }
  function color(v, diverging) { // v in [0, 1] (or [-1, 1] when diverging): white -> blue (or blue/white/red)
    if (diverging) {
      const t = Math.min(1, Math.abs(v)), c = Math.round(255 * (1 - t));
      return v >= 0 ? `rgb(255,${c},${c})` : `rgb(${c},${c},255)`;
    }
    const t = Math.min(1, Math.max(0, v));
    return `rgb(${Math.round(255 - 225 * t)},${Math.round(255 - 170 * t)},${Math.round(255 - 60 * t)})`;
  }
  // A rows x cols grid of values[offset + r * cols + c] on a canvas, labelled when the labels fit; hovering a cell
  // says what it is.
  function heatmap(values, offset, rows, cols, rowLabels, colLabels, opts) {
    opts = opts || {};
    const labelled = rowLabels && colLabels && rowLabels.length === rows && colLabels.length === cols;
    const cw = opts.cellW || Math.max(2, Math.min(18, Math.floor((opts.width || 260) / cols)));
    const ch = opts.cellH || Math.max(2, Math.min(18, Math.floor((opts.height || 260) / rows)));
    const left = labelled ? 70 : 4, top = labelled ? 60 : 4;
    const canvas = h("canvas", { class: "nx-heatmap", width: left + cols * cw + 4, height: top + rows * ch + 4,
      role: "img", "aria-label": opts.title || "heatmap" });
    const g = canvas.getContext("2d");
    for (let r = 0; r < rows; r++) {
      for (let c = 0; c < cols; c++) {
        g.fillStyle = color(values[offset + r * cols + c], opts.diverging);
        g.fillRect(left + c * cw, top + r * ch, cw, ch);
      }
    }
    if (labelled) {
      g.fillStyle = "#333"; g.font = "10px sans-serif"; g.textBaseline = "middle";
      g.textAlign = "right";
      rowLabels.forEach((l, r) => g.fillText(String(l).slice(0, 11), left - 3, top + r * ch + ch / 2));
      g.textAlign = "left";
      colLabels.forEach((l, c) => {
        g.save(); g.translate(left + c * cw + cw / 2, top - 3); g.rotate(-Math.PI / 3);
        g.fillText(String(l).slice(0, 11), 0, 0); g.restore();
      });
    }
    const tip = h("div", { class: "nx-tip" }, opts.hint || "Point at a cell to read it.");
    canvas.addEventListener("mousemove", (ev) => {
      const box = canvas.getBoundingClientRect();
      const c = Math.floor((ev.clientX - box.left - left) / cw), r = Math.floor((ev.clientY - box.top - top) / ch);
      if (r < 0 || c < 0 || r >= rows || c >= cols) return;
      const name = (labels, i) => (labels && labels.length > i ? ` (${labels[i]})` : "");
      tip.textContent = `${opts.rowName || "row"} ${r}${name(rowLabels, r)} → ${opts.colName || "column"} ${c}` +
        `${name(colLabels, c)}: ${fmt(values[offset + r * cols + c])}`;
    });
    return h("figure", { class: "nx-figure" }, opts.title ? h("figcaption", {}, opts.title) : null, canvas, tip);
  }
  function curves(series, labels, count) { // sin/cos curves of PE dimensions over positions 0..count-1, a pair per plot
    const W = 640, H = 90, pad = 6, colors = ["#d62728", "#1f77b4"];
    const fig = h("figure", { class: "nx-figure" });
    for (let i = 0; i < series.length; i += 2) {
      const canvas = h("canvas", { class: "nx-curves", width: W, height: H, role: "img", "aria-label": labels.slice(i, i + 2).join(", ") });
      const g = canvas.getContext("2d");
      g.strokeStyle = "#bbb"; g.beginPath(); g.moveTo(pad, H / 2); g.lineTo(W - pad, H / 2); g.stroke();
      series.slice(i, i + 2).forEach((ys, j) => {
        g.strokeStyle = colors[j]; g.lineWidth = 1.5; g.beginPath();
        ys.forEach((y, p) => g.lineTo(pad + (p * (W - 2 * pad)) / (count - 1), H / 2 - y * (H / 2 - pad)));
        g.stroke();
      });
      const legend = h("ul", { class: "nx-legend" }, labels.slice(i, i + 2).map((l, j) => {
        const dot = h("span", { class: "nx-swatch" }); dot.style.background = colors[j];
        return h("li", {}, dot, l);
      }));
      fig.append(canvas, legend);
    }
    fig.append(h("figcaption", {}, `positions 0 to ${count - 1} (x axis), values −1 to 1 (y axis)`));
    return fig;
  }

  // ---- the panels, in the paper's order
  function overview(d) {
    const m = d.model, dec = d.decode;
    return h("header", { class: "nx-overview" },
      h("h1", {}, "Inside the Transformer: one sentence, step by step"),
      h("dl", {},
        h("dt", {}, "Sentence"), h("dd", {}, d.sentence),
        h("dt", {}, "Translation"), h("dd", { class: "nx-translation", "data-translation": d.translation }, d.translation || "(empty)"),
        h("dt", {}, "Model"), h("dd", {}, `d_model ${m.d_model}, ${m.n_heads} heads of d_k = ${m.d_head}, d_ff ${m.d_ff}, ` +
          `${m.encoder_layers} encoder + ${m.decoder_layers} decoder layers, vocabulary ${m.vocab[1]}, ` +
          `${m.pre_norm ? "pre-norm" : "post-norm (the paper's)"}, ${m.activation}, ${m.precision}`),
        h("dt", {}, "Search"), h("dd", {}, `beam ${dec.beam}, length penalty α = ${dec.length_penalty} (${dec.length_penalty_type}), ` +
          `at most ${dec.max_len_a} × source length + ${dec.max_len_b} tokens`)),
      d.notes.map((n) => h("p", { class: "nx-note" }, "Note: " + n)),
      para(`Every number on this page is the model's own, computed by its own modules for this sentence. Vectors show ` +
        `their first ${m.show} of ${m.d_model} dimensions ("…" marks the rest). The shapes leave out the batch dimension.`));
  }

  function tokens(d) {
    const rows = d.source.pieces.map((p, i) => [String(i), p, String(d.source.ids[i])]);
    return panel("nx-tokens", "1. Tokens: text → pieces → ids", "input of §3.4",
      para("SentencePiece cuts the sentence into pieces from a fixed vocabulary; ", code("▁"), " marks the start of a word. " +
        "Each piece has an id, its row in the embedding matrix. The source ends with the end-of-sentence token ", code("</s>"), "."),
      table(["position", "piece", "id"], rows, "nx-narrow"),
      para(`Source length S = ${d.source.pieces.length}.`));
  }

  function embeddings(d) {
    const e = d.src_embedding, m = d.model, pe = d.positions;
    const rows = d.source.pieces.map((p, i) => [p, vec(e.embed[i]), vec(e.scaled[i]), vec(e.pe[i]), vec(e.x[i])]);
    const pairs = pe.curve_dims.map((dim) => (pe.layout === "halves" ? `dim ${dim}` : `dim ${dim} (${dim % 2 ? "cos" : "sin"}, i = ${dim >> 1})`));
    return panel("nx-embed", "2. Embeddings and positional encoding", "§3.4, §3.5",
      formula(`x = E[id] × √d_model + PE(pos)      √${m.d_model} = ${fmt(e.scale)}`),
      formula("PE(pos, 2i) = sin(pos / 10000^(2i/d_model))      PE(pos, 2i+1) = cos(pos / 10000^(2i/d_model))"),
      para("The embedding E[id] says what the piece is; it is multiplied by √d_model so that it is not drowned by the " +
        "positional encoding PE, which says where the piece is. Attention itself ignores order: PE is the only place " +
        `where word order enters. Shape of x: ${shape(e.shape)}.`),
      table(["piece", "E[id]", "× √d_model", "PE(pos)", "x = sum"], fewRows(rows)),
      heatmap(unpack(pe.picture), 0, pe.count, pe.d_model, null, null, { title: `PE as a picture: positions 0..${pe.count - 1} (rows) × ` +
        `${pe.d_model} dimensions (columns); red +1, blue −1`, diverging: true, width: 640, height: 200,
        rowName: "position", colName: "dimension" }),
      para((pe.layout === "halves" ? "The first half of the dimensions are sines, the second half cosines of the same " +
        "frequencies. " : "Even dimensions are sines, odd ones cosines: dimensions 2i and 2i+1 share one frequency. ") +
        "The frequency falls from dimension to dimension, so the left columns change fast with the position and the " +
        "right ones slowly: every position gets its own pattern, and nearby positions get similar ones."),
      curves(pe.curves, pairs, pe.curve_count));
  }

  function example(ex, queries, keys, title) {
    const n = ex.q.length, sum = new Array(n).fill(0);
    ex.weights.forEach((w, j) => ex.v[j].forEach((v, i) => { sum[i] += (w || 0) * v; }));
    const rows = keys.map((k, j) => [`${j} ${k}`, vec(ex.k[j]), ex.masked[j] && ex.weights[j] === 0 ? "masked" : fmt(ex.dot[j]),
      ex.masked[j] && ex.weights[j] === 0 ? "−∞" : fmt(ex.scaled[j]), fmt(ex.weights[j]), vec(ex.v[j])]);
    return sub(title, "§3.2.1, eq. 1",
      formula("Attention(Q, K, V) = softmax(Q Kᵀ / √d_k) V"),
      para(`One query, worked out by hand: head ${ex.head}, query position ${ex.query} (${queries[ex.query]}), d_k = ${ex.d_k}. ` +
        `The query q = ${vec(ex.q)} is compared with every key k_j by a dot product (over all ${ex.d_k} dimensions), ` +
        `divided by √d_k = ${fmt(Math.sqrt(ex.d_k))} so that the softmax does not saturate; the softmax turns the scores ` +
        "into weights that sum to 1; the output is the weighted sum of the values v_j."),
      table(["key j", "k_j", "q·k_j", "÷ √d_k", "softmax weight", "v_j"], fewRows(rows), "nx-example"),
      h("p", { class: "nx-sum" }, "Σ_j weight_j × v_j = ", h("strong", { class: "nx-sum-js" }, vec(sum.map((x) => +x.toPrecision(4)))),
        "; the model's output for this head: ", h("strong", { class: "nx-sum-model" }, vec(ex.output)), " (equal up to rounding)."));
  }

  function heads(att, rowLabels, colLabels, what) {
    const [H, T, S] = att.weights.shape, values = unpack(att.weights);
    const grid = h("div", { class: "nx-grid" });
    for (let i = 0; i < H; i++) {
      grid.append(heatmap(values, i * T * S, T, S, rowLabels, colLabels, { title: `head ${i + 1}`, rowName: "query",
        colName: "key", width: 200, height: 200 }));
    }
    return sub(`${what}: every head`, "§3.2.2",
      formula("MultiHead(Q, K, V) = Concat(head_1, …, head_h) W^O,   head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V)"),
      para(`Row = a query (${att.cross ? "a target position" : "a position"}), column = a key` +
        `${att.cross ? " (a source position)" : ""}; darker = more weight; each row sums to 1. ` +
        `Q ${shape(att.shapes.q)}, K ${shape(att.shapes.k)}, V ${shape(att.shapes.v)} (heads × positions × d_k); ` +
        `weights ${shape(att.shapes.scores)}; the heads' outputs are concatenated and projected by W^O back to ` +
        `${shape(att.shapes.out)}.` + (att.weights.pooled ? " (Long input: cells are averages of blocks.)" : "")),
      grid);
  }

  function residual(r, what) {
    const f = r.pre_norm ? "x + Sublayer(LayerNorm(x))   (pre-norm)" : "LayerNorm(x + Sublayer(x))   (post-norm, the paper's)";
    return sub(`Residual connection and LayerNorm around ${what}`, "§3.1",
      formula(f), formula("LayerNorm(z) = γ ⊙ (z − mean(z)) / std(z) + β   (over the d_model numbers of one position)"),
      table(["", "first dimensions"], [["x (input)", vec(r.x)], ["Sublayer output", vec(r.sub)], ["x + Sublayer", vec(r.sum)],
        [`mean, std of ${r.pre_norm ? "x" : "the sum"}`, `${fmt(r.mean)}, ${fmt(r.std)}`], ["γ", vec(r.gamma)], ["β", vec(r.beta)],
        ["LayerNorm(…)", vec(r.normed)], ["output", vec(r.out)]]),
      para("The residual path lets each layer add a correction to its input instead of replacing it; LayerNorm keeps " +
        "the numbers of every position at a steady scale."));
  }

  function ffn(f, m) {
    return sub("Position-wise feed-forward network", "§3.3, eq. 2",
      formula(`FFN(x) = ${m.activation === "relu" ? "max(0, x W₁ + b₁)" : m.activation + "(x W₁ + b₁)"} W₂ + b₂`),
      para(`The same two-layer network for every position: W₁ ${shape(f.w1_shape)} widens each vector to d_ff = ${m.d_ff}, ` +
        `W₂ ${shape(f.w2_shape)} brings it back. Hidden ${shape(f.hidden_shape)}, output ${shape(f.out_shape)}.`),
      table(["", "first dimensions"], [["input", vec(f.in)], ["hidden", vec(f.hidden)], ["output", vec(f.out)]]),
      para(`For this position ${fmt(100 * f.zero_fraction)}% of the ${m.d_ff} hidden units are exactly 0` +
        `${m.activation === "relu" ? " (ReLU cut them)" : ""}.`),
      residual(f.residual, "the FFN"));
  }

  function encoder(d) {
    const src = d.source.pieces;
    const layers = d.encoder.map((layer, i) => h("details", { class: "nx-layer", open: i === 0 ? "" : null },
      h("summary", {}, `Encoder layer ${i + 1} of ${d.encoder.length}`),
      example(layer.self_attn.example, src, src, "Self-attention for one query"),
      heads(layer.self_attn, src, src, "Self-attention"),
      residual(layer.self_attn.residual, "self-attention"),
      ffn(layer.ffn, d.model)));
    const mem = d.memory.rows.map((r, i) => [src[i], vec(r)]);
    return panel("nx-encoder", "3. The encoder", "§3.1, §3.2, §3.3",
      para(`${d.encoder.length} identical layers. Each: multi-head self-attention (every source position looks at every ` +
        "other), then a feed-forward network, each wrapped in a residual connection and LayerNorm. The worked example " +
        `follows one query; the heatmaps show all.`),
      layers,
      sub("The encoder output (the memory the decoder reads)", "§3.1",
        para(`Shape ${shape(d.memory.shape)}: one vector per source position.`), table(["piece", "first dimensions"], fewRows(mem))));
  }

  function decoder(d) {
    const src = d.source.pieces, tgt = d.target.pieces, T = tgt.length;
    const mask = new Float32Array(T * T);
    for (let i = 0; i < T; i++) for (let j = 0; j <= i; j++) mask[i * T + j] = 1;
    const layers = d.decoder.map((layer, i) => h("details", { class: "nx-layer", open: i === 0 ? "" : null },
      h("summary", {}, `Decoder layer ${i + 1} of ${d.decoder.length}`),
      heads(layer.self_attn, tgt, tgt, "Masked self-attention"),
      example(layer.cross_attn.example, tgt, src, "Cross-attention for one query"),
      heads(layer.cross_attn, tgt, src, "Cross-attention (encoder-decoder attention)"),
      residual(layer.cross_attn.residual, "cross-attention"),
      ffn(layer.ffn, d.model)));
    return panel("nx-decoder", "4. The decoder", "§3.1, §3.2.3",
      para("The decoder reads the translation so far, shifted right: it starts with ", code("<s>"), " and position t must " +
        "predict the piece at t + 1. Here it reads the chosen translation all at once (teacher forcing); the causal " +
        "mask makes this equal to reading it one piece at a time, as the search did."),
      table(["position", "input piece", "predicts"], tgt.map((p, i) => [String(i), p, d.target.next[i]]), "nx-narrow"),
      sub("Decoder input embeddings", "§3.4, §3.5", para("The same rule as for the source: x = E[id] × √d_model + PE(pos)."),
        table(["piece", "E[id]", "× √d_model", "PE(pos)", "x = sum"], fewRows(tgt.map((p, i) => {
          const e = d.tgt_embedding;
          return [p, vec(e.embed[i]), vec(e.scaled[i]), vec(e.pe[i]), vec(e.x[i])];
        })))),
      sub("The causal mask", "§3.2.3",
        para("Query i may look at keys j ≤ i only: the other scores are set to −∞ before the softmax, so their weight is 0."),
        heatmap(mask, 0, T, T, tgt, tgt, { title: "1 = may attend (blue), 0 = masked (white)", rowName: "query", colName: "key" })),
      layers);
  }

  function outputs(d) {
    const o = d.output;
    const steps = o.steps.map((s, t) => {
      const bars = s.top.map(([piece, , p]) => {
        const bar = h("span", { class: "nx-bar" }); bar.style.width = `${Math.max(0.1, 8 * p).toFixed(2)}em`;
        return h("li", { class: piece === s.chosen ? "nx-chosen" : null }, h("span", { class: "nx-piece" }, piece), bar, fmt(p));
      });
      return h("div", { class: "nx-step" }, h("h4", {}, `step ${t}: after ${d.target.pieces.slice(0, t + 1).join(" ")}`),
        h("ol", { class: "nx-top" }, bars),
        para(`chosen: ${s.chosen}, probability ${fmt(s.prob)} (rank ${s.rank}), log-probability ${fmt(s.logprob)}`));
    });
    return panel("nx-output", "5. Output softmax at each step", "§3.4",
      formula("P(next piece) = softmax(x E^T)   (E: the embedding matrix, shared with the output layer)"),
      para(`Logits ${shape(o.shape)}: one score per vocabulary piece at each position. The top ${o.steps[0] ? o.steps[0].top.length : 0} ` +
        "pieces by probability (search never picks <pad> or <s>). The chosen pieces' log-probabilities add up to " +
        `${fmt(o.logprob)}; the search computed ${fmt(d.search_logprob)} for the same translation step by step.`),
      h("div", { class: "nx-steps" }, steps));
  }

  function beamPanel(d) {
    const b = d.beam;
    let beams = [[]];
    const steps = b.steps.map((s) => {
      const kept = [];
      const rows = s.candidates.map(([parent, piece, score, status], rank) => {
        const text = beams[parent].concat([piece]).join(" ");
        if (status === "kept") kept.push(beams[parent].concat([piece]));
        return [String(rank + 1), String(parent), text, fmt(score), status];
      });
      beams = kept;
      const t = table(["rank", "from beam", "hypothesis", "log P (sum)", "status"], rows, "nx-beam");
      t.querySelectorAll("tbody tr").forEach((tr, i) => tr.classList.add("nx-" + s.candidates[i][3]));
      return h("details", { class: "nx-beam-step", open: s.step < 3 ? "" : null },
        h("summary", {}, `step ${s.step}${s.done ? " (search ends here)" : ""}`), t);
    });
    const lp = b.kind === "gnmt" ? `lp(Y) = ((5 + |Y|) / 6)^α,  α = ${b.alpha}` : `lp(Y) = |Y|^α,  α = ${b.alpha}`;
    const fin = b.finished.map((f, i) => [f.pieces.concat(["</s>"]).join(" "), String(f.length), fmt(f.logprob), fmt(f.divisor),
      fmt(f.score), (f.chosen ? "chosen" : "") + (i === b.by_logprob ? (f.chosen ? ", " : "") + "best log P" : "")]);
    const finTable = table(["hypothesis", "|Y|", "log P", "lp(Y)", "score = log P / lp", ""], fin, "nx-finished");
    finTable.querySelectorAll("tbody tr").forEach((tr, i) => { if (b.finished[i].chosen) tr.classList.add("nx-chosen"); });
    const flip = b.by_logprob !== null && b.chosen !== null && b.by_logprob !== b.chosen;
    return panel("nx-beam", "6. Beam search", "§6.1; length penalty of Wu et al. 2016 (GNMT)",
      para(`At each step every one of the ${d.decode.beam} beams is extended by every piece; the best 2 × beam candidates by total ` +
        "log-probability are looked at: an </s> among the best beam ones finishes a hypothesis, the best beam others are kept " +
        "as the next step's beams (kept), the rest are pruned. A search stops when no kept beam can beat its finished ones."),
      steps,
      sub("The length penalty picks the final translation", "§6.1", formula("score(Y) = log P(Y) / lp(Y),   " + lp),
        para("Every piece adds a negative log-probability, so without a penalty short hypotheses would win. Dividing by lp(Y) " +
          (flip ? "changes the winner here: the hypothesis with the best raw log P is not the chosen one." :
            "does not change the winner here: the best raw log P is also the best score.")),
        finTable, para("Translation: ", h("strong", { class: "nx-final" }, d.translation || "(empty)"))));
  }

  function render(root, d) {
    root.textContent = "";
    root.classList.add("nx-root");
    const nav = h("nav", { class: "nx-nav" }, [["nx-tokens", "tokens"], ["nx-embed", "embeddings"], ["nx-encoder", "encoder"],
      ["nx-decoder", "decoder"], ["nx-output", "softmax"], ["nx-beam", "beam search"]].map(([id, t]) => h("a", { href: "#" + id }, t)));
    root.append(overview(d), nav, tokens(d), embeddings(d), encoder(d), decoder(d), outputs(d), beamPanel(d));
  }

  global.NmtExplain = { render: render, unpack: unpack };
})(window);
