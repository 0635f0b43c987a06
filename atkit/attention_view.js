/* Interactive attention view (atkit/attention_view.py): one instance per root element.
   Left column: queries; right column: keys; one line per (query, key), its opacity the
   weight, one colour per head. Hover (or focus) a word for its weights; click pins it.
   State for tests sits on the root: data-sentence, -kind, -layer, -head (0-based or
   "all"), -hover ("q3": query 3, "k5": key 5, "" none), -pinned, -ready. */
function atkitAttentionView(rootId, tries) {
  "use strict";
  // The first copy of this output not yet set up (data-ready is "0" while the data is
  // decoded, then "1"). None: the classic notebook runs output scripts before it
  // attaches the output, so look again a little later.
  const root = [...document.querySelectorAll(`[id="${rootId}"]`)].find((r) => !r.dataset.ready);
  if (!root) {
    if ((tries || 0) < 50) setTimeout(() => atkitAttentionView(rootId, (tries || 0) + 1), 100);
    return;
  }
  root.dataset.ready = "0";
  const spec = JSON.parse(root.querySelector("script.atv-data").textContent);
  const SVG = "http://www.w3.org/2000/svg";
  const KINDS = {
    encoder: { button: "Encoder self", name: "encoder self-attention", q: "src", k: "src" },
    decoder: { button: "Decoder self", name: "decoder self-attention", q: "tgt", k: "tgt" },
    cross: { button: "Decoder → source", name: "decoder–source attention", q: "tgt", k: "src" },
  };
  const SIDE = { src: "source", tgt: "target" };
  const PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                   "#8c564b", "#e377c2", "#17becf", "#bcbd22", "#7f7f7f"];
  const color = (h) => PALETTE[h] || `hsl(${(h * 137.5) % 360}, 65%, 42%)`;
  const ROW = 22, TOP = 40, SLOT = 31, GAP = 140, PAD = 8;
  const MIN_LINE = 0.01, MIN_LABEL = 0.005; // below these: no line / no number
  const state = { sentence: 0, kind: "encoder", layer: 0, head: "all", hover: null, pinned: false };
  let bytes = null; // all weights, one byte each (see AttentionView.spec)
  let offsets = []; // offsets[sentence][kind]: where that (N, h, rows, cols) block starts
  let view = null; // what render() drew, for hover()

  // ---------------------------------------------------------------- data
  function inflate() {
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
  function tokens(s, kind) {
    const sent = spec.sentences[s];
    return [sent[KINDS[kind].q], sent[KINDS[kind].k]];
  }
  function index() {
    let at = 0;
    offsets = spec.sentences.map((_, s) => {
      const off = {};
      for (const kind of Object.keys(KINDS)) {
        const [q, k] = tokens(s, kind);
        off[kind] = at;
        at += spec.layers[kind] * spec.heads * q.length * k.length;
      }
      return off;
    });
    if (at !== bytes.length) throw new Error(`data has ${bytes.length} bytes, shapes ${at}`);
  }
  // Weight of query i to key j in the current sentence, kind and layer.
  function weight(head, i, j) {
    const [q, k] = tokens(state.sentence, state.kind);
    const at = offsets[state.sentence][state.kind] +
      ((state.layer * spec.heads + head) * q.length + i) * k.length + j;
    return bytes[at] / spec.levels;
  }

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
  function buttons(g, items, pressed, onClick) {
    g.querySelectorAll("button").forEach((b) => b.remove());
    for (const [value, text, attrs] of items) {
      const b = el("button", Object.assign({ type: "button" }, attrs), text);
      b.dataset.value = value;
      b.setAttribute("aria-pressed", String(String(value) === String(pressed)));
      b.addEventListener("click", () => onClick(value));
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
  const caption = el("p", { class: "atv-caption" });
  const scroll = el("div", { class: "atv-scroll" });
  const svg = svgEl("svg", { class: "atv-svg", role: "group" });
  scroll.appendChild(svg);
  const rowOne = el("div", { class: "atv-row" });
  rowOne.append(sentLabel, kindGroup);
  const rowTwo = el("div", { class: "atv-row" });
  rowTwo.append(layerGroup, headGroup);
  controls.append(rowOne, rowTwo);

  function set(change) {
    Object.assign(state, change);
    state.layer = Math.min(state.layer, spec.layers[state.kind] - 1);
    render();
  }
  function drawControls() {
    buttons(kindGroup, Object.entries(KINDS).map(([k, v]) => [k, v.button, {}]), state.kind,
      (kind) => set({ kind }));
    const layers = [...Array(spec.layers[state.kind]).keys()];
    buttons(layerGroup, layers.map((l) => [l, String(l + 1), { "aria-label": `Layer ${l + 1}` }]),
      state.layer, (layer) => set({ layer }));
    const heads = [...Array(spec.heads).keys()].map((h) => [h, String(h + 1),
      { class: "atv-hbtn", style: `--atv-c: ${color(h)}`, "aria-label": `Head ${h + 1}` }]);
    buttons(headGroup, [["all", "All", { class: "atv-all", "aria-label": "All heads" }], ...heads],
      state.head, (head) => set({ head }));
    select.value = String(state.sentence);
  }

  // ---------------------------------------------------------------- drawing
  const measurer = document.createElement("canvas").getContext("2d");
  function textWidth(words, bold) {
    const family = getComputedStyle(root).fontFamily || "sans-serif";
    measurer.font = `${bold ? "600 " : ""}13px ${family}`;
    return Math.max(40, ...words.map((w) => measurer.measureText(w).width)) + 10;
  }

  function render() {
    const [qs, ks] = tokens(state.sentence, state.kind);
    const kind = KINDS[state.kind];
    const heads = state.head === "all" ? [...Array(spec.heads).keys()] : [state.head];
    const qW = textWidth(qs), kW = textWidth(ks), slots = heads.length * SLOT;
    const qHead = `${SIDE[kind.q]} (queries)`, kHead = `${SIDE[kind.k]} (keys)`;
    // Right edge of the query words; the column titles must fit too.
    const xQ = Math.max(PAD + slots + qW, PAD + textWidth([qHead], true));
    const xK = xQ + GAP; // left edge of the key words
    const width = Math.max(xK + kW + slots, xK + textWidth([kHead], true)) + PAD;
    const height = TOP + Math.max(qs.length, ks.length) * ROW + PAD;
    const y = (i) => TOP + i * ROW + ROW / 2;
    svg.textContent = "";
    svg.setAttribute("width", width);
    svg.setAttribute("height", height);
    svg.setAttribute("viewBox", `0 0 ${width} ${height}`);
    svg.setAttribute("aria-label", `Attention lines, ${kind.name}, layer ${state.layer + 1}`);
    svg.append(
      svgEl("text", { x: xQ - 5, y: 14, "text-anchor": "end", class: "atv-head-text" }, qHead),
      svgEl("text", { x: xK + 5, y: 14, class: "atv-head-text" }, kHead));
    // One line per (head, query, key) with a visible weight; indexed by row and column.
    const lines = svgEl("g", { class: "atv-lines" });
    const byRow = qs.map(() => []), byCol = ks.map(() => []);
    for (const h of heads) {
      for (let i = 0; i < qs.length; i++) {
        for (let j = 0; j < ks.length; j++) {
          const w = weight(h, i, j);
          if (w < MIN_LINE) continue;
          const line = svgEl("line", { x1: xQ + 4, y1: y(i), x2: xK - 4, y2: y(j),
            stroke: color(h), "stroke-width": heads.length > 1 ? 1.5 : 2.5,
            "stroke-opacity": w.toFixed(3), class: "atv-line" });
          lines.appendChild(line);
          byRow[i].push(line);
          byCol[j].push(line);
        }
      }
    }
    svg.appendChild(lines);
    const toks = (words, side, x, anchor) => words.map((word, i) => {
      const g = svgEl("g", { class: "atv-tok", "data-side": side, "data-index": i,
        tabindex: 0, role: "button", "aria-label": `${side === "q" ? "query" : "key"} ${i + 1}: ${word}` });
      const bg = svgEl("rect", { x: anchor === "end" ? x - qW : x, y: y(i) - ROW / 2 + 1,
        width: anchor === "end" ? qW : kW, height: ROW - 2, rx: 3, class: "atv-bg" });
      g.append(bg, svgEl("text", { x: anchor === "end" ? x - 5 : x + 5, y: y(i),
        "text-anchor": anchor, "dominant-baseline": "central" }, word));
      g.addEventListener("pointerenter", () => state.pinned || hover(side, i));
      g.addEventListener("pointerleave", () => state.pinned || hover(null));
      g.addEventListener("focus", () => state.pinned || hover(side, i));
      g.addEventListener("blur", () => state.pinned || hover(null));
      g.addEventListener("click", () => pin(side, i));
      g.addEventListener("keydown", (e) => {
        if (e.key === "Enter" || e.key === " ") { e.preventDefault(); pin(side, i); }
      });
      svg.appendChild(g);
      return { g, bg };
    });
    const labels = svgEl("g", { class: "atv-labels" });
    view = { heads, byRow, byCol, labels, y, xQ, xK, qW, kW, slots,
             q: toks(qs, "q", xQ, "end"), k: toks(ks, "k", xK, "start") };
    svg.appendChild(labels);
    drawControls();
    const who = state.head === "all" ? `all ${spec.heads} heads, one colour each` : `head ${state.head + 1}`;
    caption.textContent = `${kind.name[0].toUpperCase() + kind.name.slice(1)}, layer ` +
      `${state.layer + 1}, ${who}. A line joins a query (left) to a key (right); its ` +
      "opacity is the weight. Hover a word for its weights; click to pin it.";
    Object.assign(root.dataset, { sentence: state.sentence, kind: state.kind,
      layer: state.layer, head: state.head });
    const h = state.hover; // a pinned word stays selected if it still exists
    const keep = h && state.pinned && h.i < (h.side === "q" ? qs : ks).length;
    if (!keep) state.pinned = false;
    hover(keep ? h.side : null, keep ? h.i : 0);
  }

  // Highlight one word's row (query) or column (key) and write the weights beside the
  // words at the other end, one slot per head shown, each in its head's colour.
  function hover(side, i) {
    const v = view;
    v.labels.textContent = "";
    svg.querySelectorAll(".atv-on, .atv-active").forEach((e) => e.classList.remove("atv-on", "atv-active"));
    for (const t of [...v.q, ...v.k]) t.bg.removeAttribute("style");
    state.hover = side ? { side, i } : null;
    root.dataset.hover = side ? side + i : "";
    root.dataset.pinned = state.pinned ? "1" : "";
    svg.classList.toggle("atv-focus", Boolean(side));
    if (!side) return;
    (side === "q" ? v.byRow : v.byCol)[i].forEach((line) => line.classList.add("atv-on"));
    (side === "q" ? v.q : v.k)[i].g.classList.add("atv-active");
    const others = side === "q" ? v.k : v.q;
    const best = others.map(() => ({ w: 0, h: 0 }));
    v.heads.forEach((h, slot) => {
      // Query hovered: numbers right of the keys; key hovered: left of the queries.
      const x = side === "q" ? v.xK + v.kW + slot * SLOT + 4
        : v.xQ - v.qW - v.slots + (slot + 1) * SLOT - 4;
      const anchor = side === "q" ? "start" : "end";
      v.labels.appendChild(svgEl("text", { x, y: TOP - 8, "text-anchor": anchor,
        fill: color(h), class: "atv-slot" }, `h${h + 1}`));
      others.forEach((_, o) => {
        const [qi, kj] = side === "q" ? [i, o] : [o, i];
        const w = weight(h, qi, kj);
        if (w > best[o].w) best[o] = { w, h };
        if (w < MIN_LABEL) return;
        const label = svgEl("text", { x, y: v.y(o), "text-anchor": anchor,
          "dominant-baseline": "central", fill: color(h), class: "atv-w",
          "data-weight": String(w), "data-head": h, "data-query": qi, "data-key": kj },
          w.toFixed(2));
        v.labels.appendChild(label);
      });
    });
    others.forEach((t, o) => {
      if (best[o].w >= MIN_LINE) {
        t.bg.style.fill = color(best[o].h);
        t.bg.style.fillOpacity = (0.6 * best[o].w).toFixed(3);
      }
    });
  }

  function pin(side, i) {
    const same = state.hover && state.hover.side === side && state.hover.i === i;
    state.pinned = !(state.pinned && same);
    hover(side, i);
  }

  // ---------------------------------------------------------------- start
  inflate().then((data) => {
    bytes = data;
    index();
    root.querySelector(".atv-fallback").remove();
    root.append(controls, caption, scroll);
    render();
    root.dataset.ready = "1";
  }).catch((err) => {
    root.querySelector(".atv-fallback").textContent = `Attention view failed: ${err.message}`;
    console.error(err);
  });
}
