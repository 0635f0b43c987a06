/* Interactive attention view (atkit/attention_view.py): one head's weights as a heatmap.
   Rows are the queries, columns the keys, one cell per (query, key), darker for a
   larger weight (rows sum to 1). It opens on one head; the reader picks the sentence,
   the kind of attention, the layer and the head, or the average of the heads. Hovering
   (or tapping) a cell or a row's word lists that query's weights; a column's word, the
   weights on that key; a click pins the selection. Keyboard: focus the map, the arrow
   keys move, Enter pins, Escape lets go.

   Entry point, for a page that computes weights itself (e.g. an in-page translator):

     atkitAttentionView(target, spec)  ->  Promise of a controller

   target: an element, or the id of one; its content is replaced by the view (call it
   again with a new spec to show another sentence). spec: the object that
   AttentionView.spec() embeds ({heads, layers: {encoder, decoder, cross}, levels,
   encoding: "deflate" | "raw", data: base64 bytes, sentences: [{label, src, tgt}],
   start?: {kind, layer, head}}), or the same without `data`/`encoding`/`levels`,
   each sentence carrying its weights as nested arrays: encoder [N][h][S][S],
   decoder [N][h][T][T], cross [N][h][T][S] (rows: queries, columns: keys; src are the
   S source tokens, tgt the T decoder inputs, <s> first). Without spec, the spec is
   read from the target's <script type="application/json" class="atv-data"> (what the
   Python output holds). The page needs the view's style once (attention_view.css,
   every rule scoped to .atv); attention_view.assets() in Python returns the style and
   this script together. The controller: {element, state(), set({sentence, kind,
   layer, head}), hover(side, index)} (head: a 0-based number or "avg").
   atkitAttentionView.data(spec) is the same spec's data without a page: the decoded
   weights and the selection rules (defined at the end of this file).

   State for tests sits on the root element: data-sentence, -kind, -layer (0-based),
   -head (0-based or "avg"), -hover ("q3": query 3, "k5": key 5, "" none), -cell
   ("3,5" or ""), -pinned, -ready ("1" once drawn). */
function atkitAttentionView(target, spec, tries) {
  "use strict";
  let root = target;
  if (typeof target === "string") {
    // The first copy of this output not yet set up. None: the classic notebook runs
    // output scripts before it attaches the output, so look again a little later.
    root = [...document.querySelectorAll(`[id="${target}"]`)].find((r) => !r.dataset.ready);
    if (!root) {
      if ((tries || 0) < 50) {
        return new Promise((resolve) => setTimeout(
          () => resolve(atkitAttentionView(target, spec, (tries || 0) + 1)), 100));
      }
      return Promise.resolve(null);
    }
  }
  if (!spec) {
    const holder = root.querySelector("script.atv-data");
    spec = JSON.parse(holder.textContent);
  } else {
    if (root._atvStop) root._atvStop();
    root.textContent = "";
  }
  root.classList.add("atv");
  root.dataset.ready = "0";
  const SVG = "http://www.w3.org/2000/svg";
  const KINDS = {
    encoder: { button: "Encoder self", name: "encoder self-attention" },
    decoder: { button: "Decoder self", name: "decoder self-attention" },
    cross: { button: "Decoder → source", name: "decoder–source attention" },
  };
  const LEGEND = {
    encoder: ["the source tokens, as queries", "the source tokens, as keys",
      "Row i is what source token i draws on to build its new representation."],
    decoder: ["the decoder's inputs, as queries (<s>, then the translation so far: " +
      "the row of a word is the step that writes the word after it)",
      "the same inputs, as keys",
      "Cells right of the diagonal are masked: a step never sees later words."],
    cross: ["the decoder's inputs, as queries (<s>, then the translation so far: " +
      "the row of a word is the step that writes the word after it)",
      "the source tokens, as keys", ""],
  };
  // A light-to-dark blue ramp (weight 0 to 1), the same in the cells and the scale.
  const RAMP = [[247, 251, 255], [198, 219, 239], [107, 174, 214], [33, 113, 181], [8, 48, 107]];
  const colour = (w) => {
    const x = Math.max(0, Math.min(1, w)) * (RAMP.length - 1);
    const i = Math.min(RAMP.length - 2, Math.floor(x)), f = x - i;
    const c = RAMP[i].map((v, k) => Math.round(v + (RAMP[i + 1][k] - v) * f));
    return `rgb(${c.join(",")})`;
  };
  const FONT = 12, MIN_PITCH = 14, MAX_PITCH = 24, PAD = 6;
  const MIN_LABEL = 0.005; // a weight below this gets no number in the readout
  const data = atkitAttentionView.data(spec);
  const N = data.layers, H = data.heads;
  const state = Object.assign(data.start(), {
    hover: null, // {side: "q" | "k", i, cell: j or null}
    pinned: false,
  });
  let view = null; // what draw() made, for hover()
  const tokens = data.tokens;
  const weight = (head, i, j) => data.weight(state, head, i, j);

  // ---------------------------------------------------------------- DOM helpers
  function el(tag, attrs, text, ns) {
    const e = ns ? document.createElementNS(SVG, tag) : document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
    if (text !== undefined) e.textContent = text;
    return e;
  }
  const svgEl = (tag, attrs, text) => el(tag, attrs, text, true);
  function group(label, cls) {
    const g = el("div", { role: "group", "aria-label": label, class: "atv-group " + cls });
    g.appendChild(el("span", { class: "atv-name", "aria-hidden": "true" }, label));
    return g;
  }
  function buttons(g, items, pressed) {
    g.querySelectorAll("button").forEach((b) => b.remove());
    for (const [value, text, attrs] of items) {
      const b = el("button", Object.assign({ type: "button" }, attrs), text);
      b.dataset.value = value;
      b.setAttribute("aria-pressed", String(String(value) === String(pressed)));
      b.addEventListener("click", () => set({ [g.dataset.key]: value }));
      g.appendChild(b);
    }
  }

  // ---------------------------------------------------------------- controls
  const controls = el("div", { class: "atv-controls" });
  const sentLabel = el("label", { class: "atv-group" });
  sentLabel.appendChild(el("span", { class: "atv-name" }, "Sentence"));
  const select = el("select", { class: "atv-sentence", "aria-label": "Sentence" });
  spec.sentences.forEach((s, i) => select.appendChild(el("option", { value: i }, s.label)));
  select.addEventListener("change", () => set({ sentence: Number(select.value) }));
  sentLabel.appendChild(select);
  const kindGroup = group("Attention", "atv-kind");
  const layerGroup = group("Layer", "atv-layer");
  const headGroup = group("Head", "atv-head");
  kindGroup.dataset.key = "kind";
  layerGroup.dataset.key = "layer";
  headGroup.dataset.key = "head";
  const rowOne = el("div", { class: "atv-row" });
  rowOne.append(sentLabel, kindGroup);
  const rowTwo = el("div", { class: "atv-row" });
  rowTwo.append(layerGroup, headGroup);
  controls.append(rowOne, rowTwo);
  const caption = el("p", { class: "atv-caption" });
  const legend = el("p", { class: "atv-legend" });
  const help = el("p", { class: "atv-help" });
  const scale = el("p", { class: "atv-scale", "aria-hidden": "true" });
  scale.append(el("span", {}, "weight: 0"),
    el("span", { class: "atv-ramp", style: `background: linear-gradient(to right, ${
      RAMP.map((c, i) => `rgb(${c.join(",")}) ${(100 * i) / (RAMP.length - 1)}%`).join(", ")})` }),
    el("span", {}, "1"));
  const figure = el("div", { class: "atv-map" });
  const svg = svgEl("svg", { class: "atv-svg", role: "application", tabindex: 0 });
  figure.appendChild(svg);
  const readout = el("p", { class: "atv-readout", "aria-live": "polite" });

  function set(change) {
    Object.assign(state, data.select(state, change));
    render();
  }
  function drawControls() {
    buttons(kindGroup, Object.entries(KINDS).map(([k, v]) => [k, v.button, {}]), state.kind);
    const layers = [...Array(N[state.kind]).keys()];
    buttons(layerGroup, layers.map((l) => [l, String(l + 1), { "aria-label": `Layer ${l + 1}` }]),
      state.layer);
    const heads = [...Array(H).keys()].map((h) => [h, String(h + 1), { "aria-label": `Head ${h + 1}` }]);
    buttons(headGroup, [...heads, ["avg", "Average", { class: "atv-avg",
      "aria-label": `Average of the ${H} heads` }]], state.head);
    select.value = String(state.sentence);
  }

  // ---------------------------------------------------------------- drawing
  const measurer = document.createElement("canvas").getContext("2d");
  function textWidth(words, size) {
    const family = getComputedStyle(root).fontFamily || "sans-serif";
    measurer.font = `${size}px ${family}`;
    return Math.max(0, ...words.map((w) => measurer.measureText(w).width));
  }

  function render() {
    drawControls();
    const kind = KINDS[state.kind];
    const who = state.head === "avg" ? `the average of the ${H} heads` : `head ${state.head + 1}`;
    caption.textContent = `${kind.name[0].toUpperCase() + kind.name.slice(1)}, layer ` +
      `${state.layer + 1}, ${who}.`;
    const [rows, cols, note] = LEGEND[state.kind];
    legend.textContent = "";
    legend.append(el("b", {}, "Rows: "), rows + ". ", el("b", {}, "Columns: "), cols + ". ",
      (note ? note + " " : "") + "Each row sums to 1.");
    help.textContent = "Hover or tap a cell, or a word, to list its weights under the " +
      "map (a row's word: where that query looks; a column's word: what looks at that " +
      "key); click or tap to pin. Keyboard: focus the map, move with the arrow keys, " +
      "Enter pins.";
    Object.assign(root.dataset, { sentence: state.sentence, kind: state.kind,
      layer: state.layer, head: state.head });
    draw();
  }

  function draw() {
    const [qs, ks] = tokens(state.sentence, state.kind);
    const width = root.clientWidth || 640;
    const corner = ["keys →", "queries ↓"];
    const rowWidth = (words) =>
      Math.ceil(Math.max(textWidth(words, FONT), textWidth(corner, FONT - 1))) + 10;
    // Too narrow for the map at its smallest (a phone): long words are cut to 9
    // letters and an ellipsis (the readout and a tooltip give them whole).
    const narrow = rowWidth(qs) + ks.length * MIN_PITCH + PAD > width;
    const cut = (w) => (narrow && w.length > 10 ? w.slice(0, 9) + "…" : w);
    const rowW = rowWidth(qs.map(cut));
    const pitch = Math.max(MIN_PITCH, Math.min(MAX_PITCH,
      Math.floor((width - rowW - PAD) / ks.length)));
    // A word's box is 1.17 of its size tall: neighbours at one pitch never touch.
    const colFont = Math.min(FONT, Math.floor(pitch / 1.17));
    const colH = Math.ceil(Math.max(textWidth(ks.map(cut), colFont), 2 * FONT + 8)) + 10;
    const W = rowW + ks.length * pitch + PAD, Hh = colH + qs.length * pitch + PAD;
    svg.textContent = "";
    svg.setAttribute("viewBox", `0 0 ${W} ${Hh}`);
    svg.setAttribute("width", W);
    svg.setAttribute("height", Hh);
    svg.style.maxWidth = "100%";
    svg.style.height = "auto";
    svg.setAttribute("aria-label", `${caption.textContent} Heatmap of ${qs.length} ` +
      `queries by ${ks.length} keys; arrow keys move, Enter pins.`);
    svg.append(
      svgEl("text", { x: rowW - 6, y: colH - FONT - 10, "text-anchor": "end",
        class: "atv-axis", style: `font-size: ${FONT - 1}px` }, corner[0]),
      svgEl("text", { x: rowW - 6, y: colH - 6, "text-anchor": "end", class: "atv-axis",
        style: `font-size: ${FONT - 1}px` }, corner[1]));
    const cells = svgEl("g", { class: "atv-cells" });
    const masked = state.kind === "decoder";
    const grid = qs.map((_, i) => ks.map((_, j) => {
      const w = weight(state.head, i, j);
      const r = svgEl("rect", { x: rowW + j * pitch, y: colH + i * pitch, width: pitch - 1,
        height: pitch - 1, fill: masked && j > i ? "#ececec" : colour(w), class: "atv-cell",
        "data-query": i, "data-key": j, "data-weight": String(w) });
      r.addEventListener("pointerenter", () => state.pinned || hover("q", i, j));
      r.addEventListener("click", () => pin("q", i, j));
      cells.appendChild(r);
      return r;
    }));
    svg.appendChild(cells);
    const label = (word, side, i) => {
      const attrs = side === "q"
        ? { x: rowW - 6, y: colH + i * pitch + pitch / 2, "text-anchor": "end",
            "dominant-baseline": "central", style: `font-size: ${FONT}px` }
        : { x: 0, y: 0, "dominant-baseline": "central", style: `font-size: ${colFont}px`,
            transform: `translate(${rowW + i * pitch + pitch / 2 - 0.5},${colH - 6}) rotate(-90)` };
      const g = svgEl("g", { class: "atv-tok", "data-side": side, "data-index": i });
      const t = svgEl("text", attrs, cut(word));
      if (cut(word) !== word) t.appendChild(svgEl("title", {}, word));
      g.appendChild(t);
      g.addEventListener("pointerenter", () => state.pinned || hover(side, i, null));
      g.addEventListener("click", () => pin(side, i, null));
      svg.appendChild(g);
      return g;
    };
    const q = qs.map((w, i) => label(w, "q", i));
    const k = ks.map((w, j) => label(w, "k", j));
    const band = svgEl("g", { class: "atv-bands" });
    svg.appendChild(band);
    svg.onpointerleave = () => state.pinned || hover(null);
    view = { qs, ks, grid, q, k, band, rowW, colH, pitch };
    const h = state.hover; // a pinned selection stays if it still exists
    const keep = h && state.pinned && h.i < (h.side === "q" ? qs : ks).length &&
      (h.cell === null || h.cell < (h.side === "q" ? ks : qs).length);
    if (!keep) state.pinned = false;
    if (keep) hover(h.side, h.i, h.cell);
    else hover(null);
  }

  // The selection: a query (row), a key (column), or a cell (its row, one key marked).
  function hover(side, i, cell) {
    const v = view;
    v.band.textContent = "";
    svg.querySelectorAll(".atv-active").forEach((e) => e.classList.remove("atv-active"));
    state.hover = side ? { side, i, cell: cell === undefined ? null : cell } : null;
    root.dataset.hover = side ? side + i : "";
    root.dataset.cell = side && cell !== null && cell !== undefined ? `${i},${cell}` : "";
    root.dataset.pinned = state.pinned ? "1" : "";
    readout.textContent = "";
    if (!side) {
      readout.append(el("span", { class: "atv-hint" },
        "Hover or tap a cell, or a word, to read its weights here."));
      return;
    }
    const n = side === "q" ? v.ks.length : v.qs.length;
    const box = side === "q"
      ? { x: v.rowW, y: v.colH + i * v.pitch, width: n * v.pitch, height: v.pitch }
      : { x: v.rowW + i * v.pitch, y: v.colH, width: v.pitch, height: n * v.pitch };
    v.band.appendChild(svgEl("rect", Object.assign({ class: "atv-band" }, box, {
      x: box.x - 1, y: box.y - 1, width: box.width + 1, height: box.height + 1 })));
    if (cell !== null && cell !== undefined) {
      v.band.appendChild(svgEl("rect", { class: "atv-band atv-band-cell",
        x: v.rowW + cell * v.pitch - 1, y: v.colH + i * v.pitch - 1,
        width: v.pitch + 1, height: v.pitch + 1 }));
      v.k[cell].classList.add("atv-active");
    }
    (side === "q" ? v.q : v.k)[i].classList.add("atv-active");
    const word = (side === "q" ? v.qs : v.ks)[i];
    const who = state.head === "avg" ? "average of the heads" : `head ${state.head + 1}`;
    if (cell !== null && cell !== undefined) {
      const w = weight(state.head, i, cell);
      readout.append(el("span", { class: "atv-cellw" }, `“${word}” → “${v.ks[cell]}”: `),
        el("b", { class: "atv-cell-weight", "data-weight": String(w) }, w.toFixed(2)),
        el("br"));
    }
    readout.append(el("span", { class: "atv-what" }, side === "q"
      ? `Query ${i + 1} “${word}” (row ${i + 1}, ${who}) draws on:`
      : `Key ${i + 1} “${word}” (column ${i + 1}, ${who}) is drawn on by:`));
    const items = [];
    for (let o = 0; o < n; o++) {
      const [qi, kj] = side === "q" ? [i, o] : [o, i];
      const w = weight(state.head, qi, kj);
      if (w >= MIN_LABEL) items.push({ o, qi, kj, w });
    }
    items.sort((a, b) => b.w - a.w || a.o - b.o);
    for (const it of items) {
      const pair = el("span", { class: "atv-pair" + (it.o === cell ? " atv-marked" : "") });
      pair.append(el("span", { class: "atv-word" }, (side === "q" ? v.ks : v.qs)[it.o]), " ",
        el("span", { class: "atv-w", "data-weight": String(it.w), "data-head": String(state.head),
          "data-query": it.qi, "data-key": it.kj }, it.w.toFixed(2)));
      readout.append(" ", pair);
    }
    if (!items.length) readout.append(" nothing (every weight below 0.005).");
  }

  function pin(side, i, cell) {
    const h = state.hover;
    const same = h && h.side === side && h.i === i && h.cell === cell;
    state.pinned = !(state.pinned && same);
    hover(side, i, cell);
  }

  // Keyboard: a cursor cell on the map.
  svg.addEventListener("keydown", (e) => {
    const v = view;
    const h = state.hover && state.hover.side === "q" ? state.hover : { i: 0, cell: -1 };
    let i = h.i, j = h.cell === null ? 0 : h.cell;
    const moves = { ArrowUp: [-1, 0], ArrowDown: [1, 0], ArrowLeft: [0, -1], ArrowRight: [0, 1] };
    if (moves[e.key]) {
      e.preventDefault();
      if (!state.hover || state.hover.side !== "q") return hover("q", 0, 0); // start
      i = Math.max(0, Math.min(v.qs.length - 1, i + moves[e.key][0]));
      j = Math.max(0, Math.min(v.ks.length - 1, (j < 0 ? 0 : j) + moves[e.key][1]));
      hover("q", i, j);
    } else if (e.key === "Enter" || e.key === " ") {
      e.preventDefault();
      pin("q", i, Math.max(0, j));
    } else if (e.key === "Escape") {
      state.pinned = false;
      hover(null);
    }
  });
  svg.addEventListener("blur", () => state.pinned || hover(null));

  // ---------------------------------------------------------------- start
  return data.load().then(() => {
    const fallback = root.querySelector(".atv-fallback");
    if (fallback) fallback.remove();
    root.append(controls, caption, legend, help, scale, figure, readout);
    render();
    // Redraw when the width changes (a phone turned; a deep dive opened: a view in a
    // closed <details> has no width until then).
    let lastWidth = root.clientWidth;
    const watcher = typeof ResizeObserver === "undefined" ? null : new ResizeObserver(() => {
      if (root.clientWidth !== lastWidth && root.clientWidth > 0) {
        lastWidth = root.clientWidth;
        draw();
      }
    });
    if (watcher) watcher.observe(root);
    root._atvStop = () => watcher && watcher.disconnect();
    root.dataset.ready = "1";
    return {
      element: root,
      state: () => Object.assign({}, state),
      set,
      hover: (side, i, cell) => hover(side, i, cell === undefined ? null : cell),
    };
  }).catch((err) => {
    const fallback = root.querySelector(".atv-fallback") || root.appendChild(el("p", {}));
    fallback.textContent = `Attention view failed: ${err.message}`;
    console.error(err);
    if (typeof target !== "string") throw err; // a caller of the entry point hears of it
  });
}

// The view's data, apart from the page (tests/js runs it in Node): the tokens that are
// the queries and the keys of each kind, the weights of `spec` decoded (`load`), one
// weight of one head or the heads' average, the selection the view opens on and the
// selection after a change of the controls. A selection: {sentence, kind, layer, head},
// layer and head 0-based, head a number or "avg".
atkitAttentionView.data = function (spec) {
  "use strict";
  const AXES = { encoder: ["src", "src"], decoder: ["tgt", "tgt"], cross: ["tgt", "src"] };
  const N = spec.layers, H = spec.heads;
  let weights = null; // Float32Array of all weights, in AttentionView.spec's order
  let offsets = []; // offsets[sentence][kind]: where that (N, h, rows, cols) block starts

  function bytesOf() {
    const bin = atob(spec.data);
    const raw = new Uint8Array(bin.length);
    for (let i = 0; i < bin.length; i++) raw[i] = bin.charCodeAt(i);
    if (spec.encoding === "raw") return Promise.resolve(raw);
    if (typeof DecompressionStream === "undefined") {
      return Promise.reject(new Error("this browser has no DecompressionStream"));
    }
    const stream = new Blob([raw]).stream().pipeThrough(new DecompressionStream("deflate"));
    return new Response(stream).arrayBuffer().then((b) => new Uint8Array(b));
  }
  // [queries, keys]: the token lists of sentence s for one kind
  function tokens(s, kind) {
    const sent = spec.sentences[s];
    return AXES[kind].map((side) => sent[side]);
  }
  function load() {
    let at = 0;
    offsets = spec.sentences.map((_, s) => {
      const off = {};
      for (const kind of Object.keys(AXES)) {
        const [q, k] = tokens(s, kind);
        off[kind] = at;
        at += N[kind] * H * q.length * k.length;
      }
      return off;
    });
    if (spec.data !== undefined) {
      return bytesOf().then((bytes) => {
        if (at !== bytes.length) throw new Error(`data has ${bytes.length} bytes, shapes ${at}`);
        weights = Float32Array.from(bytes, (b) => b / spec.levels);
      });
    }
    weights = new Float32Array(at); // nested arrays [N][h][q][k] per sentence and kind
    for (let s = 0; s < spec.sentences.length; s++) {
      for (const kind of Object.keys(AXES)) {
        const flat = [spec.sentences[s][kind]].flat(4);
        const [q, k] = tokens(s, kind);
        if (flat.length !== N[kind] * H * q.length * k.length) {
          return Promise.reject(new Error(`sentence ${s}: ${kind} has ${flat.length} ` +
            `weights, expected ${N[kind]}x${H}x${q.length}x${k.length}`));
        }
        weights.set(flat, offsets[s][kind]);
      }
    }
    return Promise.resolve();
  }
  // Weight of query i to key j in the selection's sentence, kind and layer, for one
  // head or the average of the heads.
  function weight(sel, head, i, j) {
    const [q, k] = tokens(sel.sentence, sel.kind);
    const base = offsets[sel.sentence][sel.kind] + sel.layer * H * q.length * k.length;
    const one = (h) => weights[base + (h * q.length + i) * k.length + j];
    if (head !== "avg") return one(head);
    let sum = 0;
    for (let h = 0; h < H; h++) sum += one(h);
    return sum / H;
  }
  // spec.start, else the last layer's decoder-source attention, head 1; the layer
  // within the kind's layers.
  function start() {
    const s = spec.start || {};
    const kind = AXES[s.kind] ? s.kind : "cross";
    const layer = s.layer === undefined ? N.cross - 1 : s.layer;
    return { sentence: 0, kind, layer: Math.max(0, Math.min(layer, N[kind] - 1)),
      head: s.head === undefined ? 0 : s.head };
  }
  // The selection after `change` (values as the controls hold them, strings too);
  // a layer beyond the kind's last becomes its last.
  function select(sel, change) {
    const out = { sentence: sel.sentence, kind: sel.kind, layer: sel.layer, head: sel.head };
    Object.assign(out, change);
    if ("head" in change && change.head !== "avg") out.head = Number(change.head);
    if ("layer" in change) out.layer = Number(change.layer);
    out.layer = Math.min(out.layer, N[out.kind] - 1);
    return out;
  }
  return { heads: H, layers: N, kinds: Object.keys(AXES), tokens, load, weight, start, select };
};

// Node (the unit tests in tests/js) loads this file as a CommonJS module.
if (typeof module === "object" && module.exports) module.exports = atkitAttentionView;
