"use strict";
// atkit/page/translator.js's spaCy tokenizer against spaCy itself (Part 3's tokenize_all
// with spacy.blank("de"), in tests/js/golden/cases.json), on the golden model's rules.
const test = require("node:test");
const assert = require("node:assert/strict");
const { json, loadModel, firstFailures } = require("./golden.js");

const cases = json("cases.json").tokenize;

test("the tokens of every golden text are spaCy's", async () => {
  const tr = await loadModel();
  const wrong = firstFailures(cases, (c) => {
    try {
      assert.deepEqual(tr.tokenizer.words(c.text), c.words);
      return true;
    } catch {
      return false;
    }
  });
  assert.deepEqual(wrong.map((c) => [c.text, tr.tokenizer.words(c.text), c.words]), []);
  assert.ok(cases.length >= 60, `only ${cases.length} texts`);
});

test("the golden texts reach spaCy's special cases, URLs, affixes and infixes", () => {
  const words = new Set(cases.flatMap((c) => c.words));
  for (const w of ["z.B.", "usw.", "Dr.", "https://example.org/a/b?x=1&y=2", "„", "km", "!", "-"]) {
    assert.ok(words.has(w), `no golden text gives the token ${JSON.stringify(w)}`);
  }
  assert.ok(cases.some((c) => c.text && !c.words.length), "a text of whitespace alone");
});

test("tokenize keeps whitespace tokens that words drops", async () => {
  const tr = await loadModel();
  const text = "Tab\tund\nneue Zeile";
  const all = tr.tokenizer.tokenize(text);
  assert.ok(all.includes("\t") && all.includes("\n"), JSON.stringify(all));
  assert.deepEqual(tr.tokenizer.words(text), all.filter((t) => t.trim() !== ""));
});
