"use strict";
// What the tests in this folder share: the golden files that tools/js_golden.py writes
// from the notebook's Python code (tests/js/golden/), and the code under test, loaded
// as Node loads it (require: each file exports its API to Node, see its last lines).
const fs = require("node:fs");
const path = require("node:path");

const GOLDEN = path.join(__dirname, "golden");
const translator = require("../../atkit/page/translator.js");
const attentionView = require("../../atkit/page/attention_view.js");

function json(name) {
  return JSON.parse(fs.readFileSync(path.join(GOLDEN, name), "utf8"));
}

// The golden model file's bytes, as the page fetches them.
function modelBytes() {
  return new Uint8Array(fs.readFileSync(path.join(GOLDEN, "de-en.js")));
}

// The golden model file's object, as a page's <script src> stores it.
function modelData() {
  require(path.join(GOLDEN, "de-en.js"));
  return globalThis.atkitModels["de-en"];
}

// A Translator of the golden model: its matrix products in WebAssembly (wasm: true)
// or in JavaScript loops; norm: "pre" (as the file says) or "post" (the same weights
// in the post-norm Transformer, as tools/js_golden.py computes its cases).
function loadModel({ wasm = true, norm = "pre" } = {}) {
  return translator.load(withNorm(modelData(), norm), { wasm });
}

// A model file's text (as an export would write it: its SHA-256 made anew) with the
// golden file's data and its meta changed by `edit(meta)`.
function withMeta(data, edit) {
  const meta = JSON.parse(data.meta);
  edit(meta);
  return translator.modelFileText(data.direction, translator.asciiJSON(meta), data.data);
}

// The same weights in the post-norm Transformer (norm "post"), which has no final
// LayerNorm after each stack: those vectors are left out of its tensor list.
function withNorm(data, norm) {
  if (norm === "pre") return data;
  const final = (name) => /^(encoder|decoder)\.norm\./.test(name);
  return withMeta(data, (meta) => {
    meta.manifest.config.model.norm = norm;
    meta.tensors = meta.tensors.filter((e) => !final(e.name));
  });
}

// Up to `n` failures of a comparison over many cases, for the assertion's message.
function firstFailures(cases, same, n = 3) {
  return cases.filter((c) => !same(c)).slice(0, n);
}

module.exports = {
  translator, attentionView, json, modelBytes, modelData, withMeta, loadModel, firstFailures,
};
