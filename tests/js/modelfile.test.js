"use strict";
// The model file read by the page (atkit/page/translator.js's load), against the same
// hostile files that tests/test_translate.py reads with atkit/export.py's read_model
// (tests/js/hostile_model_files.json): the golden model file edited by each case's
// steps (its text, or its meta with the hash made anew as an export would), and what
// both readers must say: "ok", "damaged" (with the git checkout advice), "foreign"
// (not a model file) or "format" (another format), the message holding `words`.
// Then the options of the API, checked as the notebook's make_search checks them,
// and the tokenizer's time on long texts.
const test = require("node:test");
const assert = require("node:assert/strict");
const crypto = require("node:crypto");
const fs = require("node:fs");
const path = require("node:path");
const { translator, modelBytes, modelData, withMeta, loadModel } = require("./golden.js");

const CASES = JSON.parse(fs.readFileSync(path.join(__dirname, "hostile_model_files.json"), "utf8"));
const SHA_FIELD = '"sha256":"';

// A file's text with its hash made to match the rest of it again.
function rehash(text) {
  const at = text.indexOf(SHA_FIELD) + SHA_FIELD.length;
  const rest = Buffer.from(text.slice(0, at) + text.slice(at + 64), "latin1");
  return text.slice(0, at) + crypto.createHash("sha256").update(rest).digest("hex") + text.slice(at + 64);
}

// The steps of a case on the golden file's text (see tests/test_translate.py's twin).
const TEXT_STEPS = {
  append: (t, s) => t + s,
  prepend: (t, s) => s + t,
  conflict: (t) => `<<<<<<< HEAD\n${t}=======\n${t}>>>>>>> theirs\n`,
  cut: (t, f) => (f < 0 ? t.slice(0, f) : t.slice(0, Math.floor(t.length * f))),
  replace: (t, a, b) => t.replace(a, () => b),
  replace_all: (t, a, b) => t.split(a).join(b),
  set_text: (t, s) => s,
  upper_sha: (t) => { const at = t.indexOf(SHA_FIELD) + SHA_FIELD.length; return t.slice(0, at) + t.slice(at, at + 64).toUpperCase() + t.slice(at + 64); },
  flip_sha: (t) => { const at = t.indexOf(SHA_FIELD) + SHA_FIELD.length; return t.slice(0, at) + (t[at] === "0" ? "1" : "0") + t.slice(at + 1); },
  cut_data: (t, n) => t.slice(0, t.length - 4 - n) + t.slice(t.length - 4),
  extend_data: (t, s) => t.slice(0, t.length - 4) + s + t.slice(t.length - 4),
  rehash,
};

function metaStep(meta, [op, where, value]) {
  const keys = [...where], last = keys.pop();
  const parent = keys.reduce((o, k) => o[k], meta);
  if (op === "set") parent[last] = value;
  else if (op === "add") parent[last] += value;
  else if (op === "delete") delete parent[last];
  else throw new Error(`unknown step ${op}`);
}

function hostileText(c) {
  if (c.meta) return withMeta(modelData(), (meta) => c.meta.forEach((step) => metaStep(meta, step)));
  let text = Buffer.from(modelBytes()).toString("latin1");
  for (const [op, ...args] of c.text) text = TEXT_STEPS[op](text, ...args);
  return text;
}

const KINDS = { damaged: /is damaged: /, foreign: /is not a model file/, format: /has format \d+/ };

test(`${CASES.length} hostile model files: what the page says of each`, async () => {
  const wrong = [];
  for (const c of CASES) {
    let said = "ok";
    try {
      await translator.load(hostileText(c), { wasm: false, direction: "de-en" });
    } catch (err) {
      said = err.message;
    }
    const kind = said === "ok" ? "ok" : Object.keys(KINDS).find((k) => KINDS[k].test(said)) || "unexpected";
    const advice = said === "ok" || said.includes("git checkout docs/translate/de-en.js");
    if (kind !== c.want || !said.includes(c.words) || !advice) wrong.push(`${c.name}: ${said}`);
  }
  assert.deepEqual(wrong, [], `${wrong.length} of ${CASES.length} cases:\n${wrong.join("\n")}`);
  assert.ok(CASES.filter((c) => c.want !== "ok").length >= 80, "the hostile cases");
});

test("the file's bytes, its text and the object its statement stores load alike", async () => {
  const bytes = modelBytes(), text = Buffer.from(bytes).toString("latin1");
  const outs = [];
  for (const source of [bytes, text, modelData()]) {
    const tr = await translator.load(source, { wasm: false });
    outs.push(tr.translateSync("Ein Hund läuft.", { search: "beam" }).out);
  }
  assert.deepEqual(outs[0], outs[1]);
  assert.deepEqual(outs[0], outs[2]);
  // the object of a file run as a script, checked as the text it comes from: an
  // edited manifest with the hash kept is damaged
  const edited = { ...modelData(), meta: modelData().meta.replace('"preset":"ci"', '"preset":"cpu"') };
  await assert.rejects(translator.load(edited), /de-en model file is damaged: its content does not match the SHA-256/);
  await assert.rejects(translator.load({ ...modelData(), format: 2 }), /has format 2, this code reads 3/);
  await assert.rejects(translator.load(null), /is damaged: it does not store a model file's object/);
  await assert.rejects(translator.load(modelBytes(), { direction: "en-de" }),
    /en-de model file is damaged: it holds the de-en model/);
});

test("the API refuses options as make_search does, each with a message", async () => {
  const tr = await loadModel({ wasm: false });
  const refused = (opts, words) => assert.throws(() => tr.translateSync("Ein Hund.", opts), (e) =>
    e instanceof translator.InputError && words.test(e.message), JSON.stringify(opts));
  for (const [value, shown] of [[0, "0"], [NaN, "NaN"], [null, "null"], [-1, "-1"], [257, "257"], [2.5, "2.5"],
    ["4", '"4"'], [Infinity, "Infinity"], [true, "true"]]) {
    refused({ search: "beam", options: { beam_size: value } },
      new RegExp(`^beam\\.beam_size=${shown.replace(/[.]/g, "\\.")}: must be an integer >= 1 and <= 256$`));
  }
  for (const value of [-0.5, NaN, null, Infinity, "0.6"]) {
    refused({ search: "beam", options: { alpha: value } }, /^beam\.alpha=.*: must be a finite number >= 0$/);
  }
  refused({ beam_size: 0 }, /translate has no option beam_size; its options: search, options, sliceMs/);
  refused({ search: "beam", options: { width: 3 } }, /The search "beam" has no option width; its options: beam_size, alpha/);
  refused({ search: "greedy", options: { beam_size: 2 } }, /The search "greedy" has no option beam_size; its options: none/);
  refused({ search: 5 }, /does not implement the search "5"/);
  refused({ search: "beam", options: 4 }, /options must be an object/);
  refused("beam", /The options must be an object/);
  refused({ sliceMs: -1 }, /sliceMs=-1: must be a finite number >= 0/);
  const ok = tr.translateSync("Ein Hund.", { search: "beam", options: { beam_size: 256, alpha: 0 } });
  assert.deepEqual(ok.options, { beam_size: 256, alpha: 0 });
  await assert.rejects(tr.translate("Ein Hund.", { search: "beam", options: { beam_size: 0 } }),
    /beam\.beam_size=0: must be an integer/);
});

test("100,000 characters through the API take well under two seconds, whatever they are", async () => {
  const tr = await loadModel({ wasm: false });
  const n = 100000;
  const texts = {
    sentences: "Ein Hund rennt über die Wiese. ".repeat(n / 31 + 1).slice(0, n),
    letters: "x".repeat(n), dots: ".".repeat(n), brackets: "(".repeat(n), quotes: "'".repeat(n),
    commas: "a,".repeat(n / 2), url: "http://" + "a".repeat(n), words: " a".repeat(n / 2),
    emoji: "😀".repeat(n / 2), affixes: "(Hund)- z.B. 'a' ".repeat(n / 20),
  };
  for (const [name, text] of Object.entries(texts)) {
    const t0 = performance.now();
    assert.throws(() => tr.translateSync(text), (e) => e instanceof translator.InputError &&
      /subword pieces long; this model reads at most 30 .*Split it into sentences/.test(e.message), name);
    const seconds = (performance.now() - t0) / 1000;
    assert.ok(seconds < 2, `${name}: ${seconds.toFixed(2)} s for ${text.length} characters`);
  }
  // the tokenizer alone, without the API's early stop, grows with the length, not
  // with its square: ten times the text takes less than thirty times the time
  const once = (text) => { const t0 = performance.now(); tr.tokenizer.words(text); return performance.now() - t0; };
  const time = (text) => Math.min(once(text), once(text), once(text)); // the least of three
  for (const unit of ["(", "😀", "'", " a"]) {
    const small = time(unit.repeat(2000)), large = time(unit.repeat(20000));
    assert.ok(large < 30 * Math.max(small, 10), `${JSON.stringify(unit)}: ${small.toFixed(0)} ms, then ${large.toFixed(0)} ms`);
  }
});
