"""The pages' code, in this one folder: the translation page (translate.html, its
renderer translate.py, the translator translator.js and the model file's schema
model_schema.json), the attention view (attention_view.js, .css; atkit.attention_view
puts it into the notebook), and the blog page's template, script and style
(templates/atpage, page.js, style.css, katex_render.cjs; tools/render_page.py renders
it). eslint lints every script here (eslint.config.mjs).
"""
