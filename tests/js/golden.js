"use strict";
// What the tests in this folder share: the golden files that tools/js_golden.py writes
// from the notebook's Python code (tests/js/golden/), and the code under test, loaded
// as Node loads it (require: each file exports its API to Node, see its last lines).
const fs = require("node:fs");
const path = require("node:path");

const GOLDEN = path.join(__dirname, "golden");
const translator = require("../../atkit/translator.js");
const attentionView = require("../../atkit/attention_view.js");

function json(name) {
  return JSON.parse(fs.readFileSync(path.join(GOLDEN, name), "utf8"));
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
  const data = structuredClone(modelData());
  data.manifest.config.model.norm = norm;
  return translator.load(data, { wasm });
}

// Up to `n` failures of a comparison over many cases, for the assertion's message.
function firstFailures(cases, same, n = 3) {
  return cases.filter((c) => !same(c)).slice(0, n);
}

module.exports = { translator, attentionView, json, modelData, loadModel, firstFailures };
