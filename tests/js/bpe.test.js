"use strict";
// atkit/page/translator.js's sentencepiece BPE against sentencepiece itself (SharedBPE's
// encode, pieces and decode, Part 3's detokenize; tests/js/golden/cases.json), on the
// golden model's sentencepiece model (160 pieces: most words are cut into several).
const test = require("node:test");
const assert = require("node:assert/strict");
const { json, loadModel, firstFailures } = require("./golden.js");

const golden = json("cases.json");
const UNK = 3;
const split = (pieces) => (pieces === "" ? [] : pieces.split(" "));

test("pieces and ids of spaCy's tokens joined are sentencepiece's", async () => {
  const tr = await loadModel();
  const encode = (c) => tr.bpe.encodePieces(c.words.join(" "));
  const wrong = firstFailures(golden.tokenize, (c) => {
    const got = encode(c);
    return JSON.stringify(got.map(([p]) => p)) === JSON.stringify(split(c.pieces)) &&
      JSON.stringify(got.map(([, id]) => id)) === JSON.stringify(c.ids);
  });
  assert.deepEqual(wrong.map((c) => [c.text, encode(c), c.pieces, c.ids]), []);
  for (const c of golden.tokenize) assert.deepEqual(tr.bpe.encode(c.words.join(" ")), c.ids);
});

test("raw text: spaces normalised, unknown characters, specials as plain text", async () => {
  const tr = await loadModel();
  for (const c of golden.bpe_raw) {
    assert.deepEqual(tr.bpe.encodePieces(c.text).map(([p]) => p), split(c.pieces), JSON.stringify(c.text));
    assert.deepEqual(tr.bpe.encode(c.text), c.ids, JSON.stringify(c.text));
  }
});

test("a run of unknown characters is one <unk>, as in sentencepiece", async () => {
  const tr = await loadModel();
  const runs = golden.tokenize.filter((c) => split(c.pieces).some((p, i) => c.ids[i] === UNK && [...p].length > 1));
  assert.ok(runs.length > 0, "no golden text has a run of unknown characters");
  for (const c of golden.tokenize) {
    assert.ok(!c.ids.some((id, i) => id === UNK && c.ids[i + 1] === UNK), c.text);
  }
  assert.deepEqual(tr.bpe.encodePieces("😀😀").map(([p, id]) => [p, id]), [["▁", tr.bpe.pieceToId("▁")], ["😀😀", UNK]]);
});

test("decoding ids gives sentencepiece's tokens and Part 3's detokenized text", async () => {
  const tr = await loadModel();
  for (const c of golden.decode) {
    const tokens = tr.bpe.decode(c.ids);
    assert.deepEqual(tokens, c.tokens, JSON.stringify(c.ids));
    assert.equal(tr.detokenize(tokens), c.text, JSON.stringify(c.ids));
  }
  assert.ok(golden.decode.some((c) => c.ids.includes(UNK)), "the cases decode <unk>");
});

test("the piece table read from the model's proto is sentencepiece's", async () => {
  const tr = await loadModel();
  assert.deepEqual(tr.bpe.pieces, golden.vocab);
  assert.deepEqual(tr.bpe.pieces.slice(0, 4), ["<s>", "</s>", "<blank>", "<unk>"]);
  assert.equal(tr.bpe.unkId, UNK);
});
