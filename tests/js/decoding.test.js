"use strict";
// atkit/page/translator.js's Transformer and searches against the notebook's PyTorch code
// on the same int8 weights (tests/js/golden/cases.json): greedy_decode and beam_search
// (CachedDecoderStepper) of the golden model in its pre-norm and post-norm forms,
// with the default length limit (min(max_len, source + 50)) and with limits of 1, 2,
// 3 and 6; the page's whole pipeline for a few texts; attention_maps of one pair.
// Each check runs with the WebAssembly kernel and with the JavaScript loops.
const test = require("node:test");
const assert = require("node:assert/strict");
const { translator, json, modelData, withMeta, loadModel } = require("./golden.js");

const golden = json("cases.json");
const runSync = (gen) => {
  for (;;) {
    const r = gen.next();
    if (r.done) return r.value;
  }
};

async function models(wasm) {
  return { pre: await loadModel({ wasm }), post: await loadModel({ wasm, norm: "post" }) };
}

for (const wasm of [true, false]) {
  const kernel = wasm ? "WebAssembly" : "JavaScript";

  test(`greedy outputs are greedy_decode's, every norm and limit (${kernel})`, async () => {
    const m = await models(wasm);
    assert.equal(m.pre.model.kernel.wasm, wasm);
    assert.ok(m.post.model.pre === false && m.pre.model.pre === true);
    for (const c of golden.greedy) {
      const out = runSync(m[c.norm].model.greedy(c.src, c.limit));
      assert.deepEqual(out, c.out, `${c.norm}, limit ${c.limit}, source ${c.src}`);
      assert.ok(out.length <= Math.max(0, c.limit - 1), "at most limit - 1 tokens after <s>");
    }
    const lengths = new Set(golden.greedy.map((c) => c.out.length));
    assert.ok(lengths.size >= 8, `outputs of ${lengths.size} lengths only`);
    assert.ok(golden.greedy.some((c) => !c.ended && c.out.length === c.limit - 1), "a case stops at its limit");
  });

  test(`beam outputs are beam_search's: beam sizes, alphas, limits (${kernel})`, async () => {
    const m = await models(wasm);
    for (const c of golden.beam) {
      const out = runSync(m[c.norm].model.beam(c.src, c.limit, c.k, c.alpha));
      assert.deepEqual(out, c.out, `${c.norm}, k ${c.k}, alpha ${c.alpha}, limit ${c.limit}, source ${c.src}`);
    }
  });

  test(`the page's pipeline: words, ids, output, text, limit (${kernel})`, async () => {
    const tr = await loadModel({ wasm });
    for (const c of golden.translate) {
      const r = tr.translateSync(c.text);
      const got = { words: r.words, ids: r.ids, out: r.out, tokens: r.tokens, translation: r.text,
        limit: r.limit, hitLimit: r.hitLimit, unknown: r.unknown };
      const { text, ...want } = c;
      assert.deepEqual(got, want, JSON.stringify(text));
      assert.deepEqual(r.src, [0, ...c.ids, 1]);
      assert.ok(r.search === "greedy" && Object.keys(r.options).length === 0);
    }
    assert.ok(golden.translate.some((c) => c.hitLimit) && golden.translate.some((c) => !c.hitLimit));
    assert.ok(golden.translate.some((c) => c.unknown.length), "a text with unknown pieces");
  });

  test(`attention weights are attention_maps' (${kernel})`, async () => {
    const tr = await loadModel({ wasm });
    const a = golden.attention;
    const maps = tr.model.attentionMaps(a.src, a.tgt);
    for (const kind of ["encoder", "decoder", "cross"]) {
      const want = a[kind].flat(3);
      const got = maps[kind].flatMap((layer) => Array.from(layer));
      assert.equal(got.length, want.length, kind);
      const diff = Math.max(...got.map((g, i) => Math.abs(g - want[i])));
      assert.ok(diff < 1e-5, `${kind}: the weights differ by ${diff}`);
    }
  });
}

test("the length penalty matters in the golden beam cases", () => {
  // the same source and limit with alpha 0 and alpha 3 (k = 4) give other outputs
  const key = (c) => `${c.norm} ${c.src} ${c.limit} ${c.k}`;
  const by = new Map();
  for (const c of golden.beam) by.set(`${key(c)} ${c.alpha}`, c.out);
  const differ = golden.beam.filter((c) => c.alpha === 0 && c.k === 4 &&
    JSON.stringify(by.get(`${key(c)} 3`)) !== JSON.stringify(c.out));
  assert.ok(differ.length > 0, "no golden source changes its output with alpha");
  const one = golden.beam.filter((c) => c.k === 1);
  assert.ok(one.length > 0);
});

test("a beam of one is greedy decoding", async () => {
  const tr = await loadModel();
  for (const c of golden.greedy.filter((g) => g.norm === "pre")) {
    assert.deepEqual(runSync(tr.model.beam(c.src, c.limit, 1, 0.6)), c.out, `source ${c.src}`);
  }
});

test("translate (in slices, awaited) gives translateSync's result", async () => {
  const tr = await loadModel();
  for (const c of golden.translate.slice(0, 4)) {
    const [a, b] = [await tr.translate(c.text, { sliceMs: 0 }), tr.translateSync(c.text)];
    assert.deepEqual(a.out, b.out);
    const beam = await tr.translate(c.text, { search: "beam", options: { beam_size: 2, alpha: 1 } });
    assert.equal(beam.search, "beam");
    assert.deepEqual(beam.options, { beam_size: 2, alpha: 1 });
  }
});

test("the decoding settings come from the manifest: beam size, alpha, the length rule", async () => {
  const edit = (change) => translator.load(withMeta(modelData(), (meta) => change(meta.manifest)), { wasm: false });
  const text = golden.translate[0].text;
  const base = (await loadModel({ wasm: false })).translateSync(text, { search: "beam" });
  assert.deepEqual(base.options, { beam_size: 4, alpha: 0.6 }, "the golden file's manifest");
  const tr = await edit((m) => { m.searches.beam = { beam_size: 1, alpha: 2.5 }; m.max_extra = 3; });
  const r = tr.translateSync(text, { search: "beam" });
  assert.deepEqual(r.options, { beam_size: 1, alpha: 2.5 });
  assert.equal(r.limit, Math.min(tr.model.maxLen, r.src.length + 3));
  const greedy = tr.translateSync(text);
  assert.deepEqual(r.out, greedy.out, "a beam of one (from the manifest) is greedy");
  assert.ok(greedy.out.length <= r.limit - 1);
});

test("a search the page does not implement, or the file does not record, is refused", async () => {
  const tr = await loadModel({ wasm: false });
  assert.throws(() => tr.translateSync("Ein Hund.", { search: "sample" }), (e) =>
    e instanceof translator.InputError && /does not implement the search "sample"; it implements greedy and beam/.test(e.message));
  assert.throws(() => tr.translateSync("Ein Hund.", { search: "beam", options: { width: 3 } }),
    /has no option width/);
  const noBeam = await translator.load(withMeta(modelData(), (meta) => { delete meta.manifest.searches.beam; }));
  assert.throws(() => noBeam.translateSync("Ein Hund.", { search: "beam" }), (e) =>
    e instanceof translator.InputError && /records no settings for the search "beam"/.test(e.message));
  assert.deepEqual(noBeam.translateSync("Ein Hund.").search, "greedy");
  for (const [change, field] of [[(m) => { delete m.max_extra; }, "manifest.max_extra is missing"],
    [(m) => { delete m.searches; }, "manifest.searches is missing"],
    [(m) => { m.searches.beam = { alpha: 0.6 }; }, "manifest.searches.beam.beam_size is missing"]]) {
    await assert.rejects(translator.load(withMeta(modelData(), (meta) => change(meta.manifest))),
      new RegExp(`The de-en model file is damaged: its content breaks the model file's schema: ${field}; ` +
                 "restore it with git checkout docs/translate/de-en.js"));
  }
});

test("input the model cannot read is refused with a message", async () => {
  const tr = await loadModel();
  for (const text of ["", "   ", "\n\t"]) {
    assert.throws(() => tr.translateSync(text), (e) => e instanceof translator.InputError &&
      /Nothing to translate/.test(e.message));
  }
  assert.throws(() => tr.translateSync(42), translator.InputError);
  const long = "Hund ".repeat(40);
  assert.throws(() => tr.translateSync(long), (e) => e instanceof translator.InputError &&
    /at most 30 \(its positional encoding covers 32 positions/.test(e.message));
});

test("load refuses what is not a model file, and damaged data", async () => {
  await assert.rejects(translator.load({ format: 2 }), /model file has format 2, this code reads 3/);
  await assert.rejects(translator.load(null), /model file is damaged: it does not store a model file's object/);
  await assert.rejects(translator.load("var x = 1;\n"), /model file is not a model file of tools.export_model/);
  const cut = { ...modelData(), data: modelData().data.slice(0, -4) };
  await assert.rejects(translator.load(cut), /de-en model file is damaged: its content does not match the SHA-256/);
  const sized = withMeta(modelData(), (meta) => { meta.size += 1; });
  await assert.rejects(translator.load(sized), /de-en model file is damaged: \d+ bytes of data, \d+ said/);
});
