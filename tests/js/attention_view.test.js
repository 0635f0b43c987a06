"use strict";
// atkit/page/attention_view.js's data, without a page (atkitAttentionView.data): specs that
// atkit.attention_view.AttentionView writes, read back as attention_view.decode reads
// them (tests/js/golden/attention.json): every weight of every sentence, kind, layer
// and head, the heads' average, the selection the view opens on and its changes.
const test = require("node:test");
const assert = require("node:assert/strict");
const { attentionView, json } = require("./golden.js");

const golden = json("attention.json").views;
const KINDS = ["encoder", "decoder", "cross"];

// Every weight of a spec as data.weight reads it, against Python's codes / levels.
function compare(data, spec, decoded) {
  let checked = 0;
  decoded.forEach((sentence, s) => {
    for (const kind of KINDS) {
      const { codes, average } = sentence[kind];
      codes.forEach((layer, l) => {
        const sel = { sentence: s, kind, layer: l };
        layer.forEach((rows, h) => rows.forEach((row, i) => row.forEach((code, j) => {
          const w = data.weight(sel, h, i, j);
          assert.ok(Math.abs(w - code / spec.levels) < 1e-7, `${kind} ${s} ${l} ${h} ${i} ${j}: ${w}`);
          checked++;
        })));
        average[l].forEach((row, i) => row.forEach((mean, j) => {
          const w = data.weight(sel, "avg", i, j);
          assert.ok(Math.abs(w - mean) < 1e-6, `average, ${kind} ${s} ${l} ${i} ${j}: ${w} vs ${mean}`);
        }));
      });
    }
  });
  return checked;
}

for (const [name, view] of Object.entries(golden)) {
  test(`the ${name} spec's weights are the ones attention_view.decode reads`, async () => {
    assert.equal(view.spec.encoding, name);
    const data = attentionView.data(view.spec);
    await data.load();
    const n = compare(data, view.spec, view.decoded);
    const bytes = Buffer.from(view.spec.data, "base64").length;
    assert.ok(n > 100 && (name === "deflate" || n === bytes), `${n} weights checked, ${bytes} bytes`);
  });
}

test("the queries and keys of each kind are the sentence's source or target tokens", () => {
  const spec = golden.deflate.spec;
  const data = attentionView.data(spec);
  spec.sentences.forEach((s, i) => {
    assert.deepEqual(data.tokens(i, "encoder"), [s.src, s.src]);
    assert.deepEqual(data.tokens(i, "decoder"), [s.tgt, s.tgt]);
    assert.deepEqual(data.tokens(i, "cross"), [s.tgt, s.src]);
  });
  assert.deepEqual(data.kinds, KINDS);
  assert.deepEqual(data.layers, { encoder: 2, decoder: 3, cross: 3 });
  assert.equal(data.heads, 3);
});

test("the view opens on spec.start, else on head 1 of the last decoder-source layer", () => {
  const { deflate, raw } = golden;
  // AttentionView(kind="decoder", layer=3, head="average"): 0-based in the spec
  assert.deepEqual(attentionView.data(deflate.spec).start(),
    { sentence: 0, kind: "decoder", layer: 2, head: "avg" });
  // Python's default opening (kind="cross", the last layer, head 1) is the view's own
  const python = attentionView.data(raw.spec).start();
  const { start, ...rest } = raw.spec;
  assert.deepEqual(start, { kind: "cross", layer: 1, head: 0 });
  assert.deepEqual(attentionView.data(rest).start(), python);
  assert.deepEqual(python, { sentence: 0, kind: "cross", layer: 1, head: 0 });
});

test("an opening layer out of range becomes the nearest layer; an unknown kind, cross", () => {
  const spec = golden.deflate.spec;
  const open = (start) => attentionView.data({ ...spec, start }).start();
  assert.equal(open({ kind: "encoder", layer: 7, head: 1 }).layer, 1);
  assert.equal(open({ kind: "encoder", layer: -3, head: 1 }).layer, 0);
  assert.deepEqual(open({ kind: "nonsense", head: 2 }), { sentence: 0, kind: "cross", layer: 2, head: 2 });
});

test("a change of the controls: strings become numbers, a layer stays within its kind", () => {
  const data = attentionView.data(golden.deflate.spec); // encoder 2 layers, decoder 3
  const at = { sentence: 0, kind: "decoder", layer: 2, head: "avg" };
  assert.deepEqual(data.select(at, { head: "1" }), { ...at, head: 1 });
  assert.deepEqual(data.select(at, { layer: "0" }), { ...at, layer: 0 });
  assert.deepEqual(data.select(at, { head: "avg" }), at);
  assert.deepEqual(data.select(at, { kind: "encoder" }), { ...at, kind: "encoder", layer: 1 });
  assert.deepEqual(data.select(at, { sentence: 1 }), { ...at, sentence: 1 });
  const hovering = { ...at, hover: { side: "q", i: 1, cell: null }, pinned: true };
  assert.deepEqual(data.select(hovering, { head: 0 }), { ...at, head: 0 }, "a selection, nothing else");
  assert.equal(hovering.head, "avg", "the given selection is left as it was");
});

test("weights as nested arrays (a page's own) read as the bytes do", async () => {
  const { spec, decoded } = golden.deflate;
  const nested = { ...spec, sentences: spec.sentences.map((s, i) => ({ ...s,
    ...Object.fromEntries(KINDS.map((k) => [k, decoded[i][k].codes.map((l) => l.map((h) => h.map((r) => r.map((c) => c / spec.levels))))])) })) };
  delete nested.data;
  delete nested.encoding;
  const data = attentionView.data(nested);
  await data.load();
  compare(data, spec, decoded);
});

test("weights that do not fit the tokens are refused with a message", async () => {
  const raw = golden.raw.spec;
  const short = { ...raw, data: Buffer.from(raw.data, "base64").subarray(1).toString("base64") };
  await assert.rejects(attentionView.data(short).load(), /data has \d+ bytes, shapes \d+/);
  const { spec, decoded } = golden.raw;
  const bad = { ...spec, sentences: [{ ...spec.sentences[0], encoder: [[[0.5]]],
    decoder: decoded[0].decoder.codes, cross: decoded[0].cross.codes }] };
  delete bad.data;
  await assert.rejects(attentionView.data(bad).load(), /sentence 0: encoder has 1 weights, expected 1x2x5x5/);
});
