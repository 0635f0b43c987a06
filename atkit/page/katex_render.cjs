// Typeset TeX with KaTeX for tools/render_page.py.
// stdin:  {"katex": "<dir of the katex package>", "items": [{"tex": "...", "display": true}]}
// stdout: [{"html": "..."} or {"error": "..."}], one entry per item, in order.
"use strict";
const fs = require("fs");
const path = require("path");

const input = JSON.parse(fs.readFileSync(0, "utf8"));
const katex = require(path.join(input.katex, "dist", "katex.js"));
const macros = {}; // shared, so a \gdef in one formula is seen by the later ones

const out = input.items.map(({ tex, display }) => {
  try {
    const html = katex.renderToString(tex, {
      displayMode: display,
      throwOnError: true,
      strict: "ignore",
      trust: false,
      macros,
    });
    return { html };
  } catch (err) {
    return { error: String((err && err.message) || err) };
  }
});
process.stdout.write(JSON.stringify(out));
