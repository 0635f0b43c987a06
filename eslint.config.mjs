// eslint for every JavaScript file of the repository (make lint runs it): the
// browser scripts (atkit/page/*.js: the pages' code is in that one folder), the inline
// scripts of the page templates (atkit/page/*.html, through the processor below), the
// Node scripts and tests. eslint's recommended rules (unused variables, undefined names, unreachable
// code...), and a few more that catch real mistakes: == instead of ===, var, a let
// never reassigned, an implicit global, a callback of map that returns nothing, a
// loop whose condition never changes, eval and its relatives.
import js from "@eslint/js";
import globals from "globals";

// The <script> elements of an HTML template without src, type or a {{PLACEHOLDER}}
// as their whole body, each as one block of JavaScript at its own line numbers (the
// lines before it left blank); {{NAME}} inside a script becomes null.
const inlineScripts = {
  meta: { name: "page-inline-scripts" },
  preprocess(text) {
    const blocks = [];
    for (const m of text.matchAll(/<script>([\s\S]*?)<\/script>/g)) {
      const body = m[1];
      if (/^\s*\{\{[A-Z_]+\}\}\s*$/.test(body)) continue; // a whole file inlined
      const line = text.slice(0, m.index + "<script>".length).split("\n").length - 1;
      const code = "\n".repeat(line) + body.replace(/\{\{[A-Z_]+\}\}/g, "null");
      blocks.push({ text: code, filename: `${blocks.length}.js` });
    }
    return blocks;
  },
  postprocess: (messages) => messages.flat(),
  supportsAutofix: false,
};

const rules = {
  ...js.configs.recommended.rules,
  "no-unused-vars": ["error", { args: "after-used", caughtErrors: "none" }],
  eqeqeq: ["error", "always"],
  "no-var": "error",
  "prefer-const": ["error", { destructuring: "all" }],
  "no-implicit-globals": "error", // a page's script shares the global scope
  "array-callback-return": "error",
  "no-unmodified-loop-condition": "error",
  "no-unreachable-loop": "error",
  "no-self-compare": "error",
  "no-template-curly-in-string": "error",
  "no-throw-literal": "error",
  "no-eval": "error",
  "no-implied-eval": "error",
  "no-new-func": "error",
};

export default [
  // docs/ holds rendered pages (their scripts are these files, inlined);
  // tests/js/golden/ the model file that tools/js_golden.py writes
  { ignores: ["build/", "docs/", "node_modules/", ".venv/", "runs/", "tests/js/golden/"] },
  {
    files: ["atkit/page/*.js"],
    languageOptions: {
      ecmaVersion: 2022,
      sourceType: "script",
      // module, require: the files export their API to Node when it loads them
      // (tests/js), and the translator reads its schema there with require
      globals: { ...globals.browser, module: "readonly", require: "readonly" },
    },
    rules,
  },
  {
    // the global function the view's script defines, for the pages that call it
    files: ["atkit/page/attention_view.js"],
    rules: { "no-implicit-globals": "off" },
  },
  {
    files: ["atkit/page/*.html"],
    plugins: { page: { processors: { inline: inlineScripts } } },
    processor: "page/inline",
  },
  {
    files: ["atkit/page/*.html/*.js"],
    languageOptions: {
      ecmaVersion: 2022,
      sourceType: "script",
      globals: { ...globals.browser, atkitTranslator: "readonly", atkitAttentionView: "readonly", atkitDomain: "readonly" },
    },
    rules,
  },
  {
    files: ["**/*.cjs", "tests/js/**/*.js"],
    languageOptions: { ecmaVersion: 2022, sourceType: "commonjs", globals: globals.node },
    rules,
  },
  {
    files: ["**/*.mjs"],
    languageOptions: { ecmaVersion: 2022, sourceType: "module", globals: globals.node },
    rules,
  },
];
