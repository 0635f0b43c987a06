"""docs/translate.html: the translation page, rendered from its template
(translate.html beside this module) with the translator (translator.js), the attention
view (attention_view.js, .css), the model file's schema (model_schema.json) and one
entry per model file in `<out>/translate/`, each checked as atkit/export.py's
read_model checks it. `python -m tools.export_model` writes it (`--page-only`: the page
alone, `make page`). Everything the pages run lies in this folder.
"""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

from atkit import export

HERE = Path(__file__).resolve().parent
TEMPLATE = HERE / "translate.html"


MODEL_NAME = re.compile(r"[a-z]+-[a-z]+\.js")


def model_files(out) -> list[Path]:
    """The model files in `<out>/translate/`: those named as a direction is (de-en.js;
    a copy such as de-en-backup.js is no model of the page)."""
    folder = Path(out) / "translate"
    return sorted(
        p for p in folder.glob("*-*.js") if MODEL_NAME.fullmatch(p.name) and p.is_file()
    )


def page_html(out) -> str:
    """docs/translate.html: the template with the translator's script, the attention
    view's script and style, and one entry per model file beside it."""
    out = Path(out)
    models = []
    for path in model_files(out):
        direction, manifest = export.read_manifest(path)  # checked: hash, shapes
        if direction != path.stem:
            raise export.ExportError(
                f"{path} holds the {direction} model; rename it {direction}.js (or "
                "move it out of the way)"
            )
        models.append(
            {
                "direction": path.stem,
                "src": f"translate/{path.name}",
                "bytes": path.stat().st_size,
                "manifest": manifest,
            }
        )
    parts = {
        "TRANSLATOR_JS": (HERE / "translator.js").read_text(encoding="utf-8"),
        "VIEW_JS": (HERE / "attention_view.js").read_text(encoding="utf-8"),
        "VIEW_CSS": (HERE / "attention_view.css").read_text(encoding="utf-8"),
        "SCHEMA_JSON": script_json(export.schema()),
        "MODELS_JSON": script_json(models),
        "MODELS_TEXT": html.escape(describe(models)),
    }
    for key in ("TRANSLATOR_JS", "VIEW_JS"):
        if "</script" in parts[key].lower():
            raise ValueError(f"{key} holds </script and cannot be inlined")
    page = TEMPLATE.read_text(encoding="utf-8")
    return re.sub(r"\{\{([A-Z_]+)\}\}", lambda m: parts[m.group(1)], page)


def script_json(value) -> str:
    """`value` as JSON to inline in a <script>: no <, > or & (as \\u escapes), so
    that no string in it (a run folder named `<!--<script`, say) can end the script
    or change how the HTML parser reads it."""
    text = json.dumps(value, ensure_ascii=True)
    for char in "<>&":
        text = text.replace(char, f"\\u{ord(char):04x}")
    return text


def weights_of(manifest) -> str:
    """Which snapshots the stored weights are, in words."""
    steps = manifest["averaged_steps"]
    if len(steps) == 1:
        return f"the snapshot of step {steps[0]}"
    return f"the average of the {len(steps)} snapshots of steps " + ", ".join(
        map(str, steps)
    )


def describe(models) -> str:
    """One line per model: what the weights are."""
    lines = []
    for m in models:
        man = m["manifest"]
        line = (
            f"{m['direction']}: preset {man['preset']} on {man['machine']}, "
            f"{weights_of(man)}"
        )
        if "bleu" in man:
            e = man["bleu"]["exported"]
            line += (
                f"; test_2016 BLEU {e['greedy']['bleu']:.2f} greedy, "
                f"{e['beam']['bleu']:.2f} beam {man['searches']['beam']['beam_size']}"
            )
        lines.append(line)
    return "\n".join(lines) or "no model exported yet"


def write_page(out) -> Path | None:
    """Render `<out>/translate.html` for the model files beside it (none: no page)."""
    if not model_files(out):
        return None
    path = Path(out) / "translate.html"
    export.write_if_changed(path, page_html(out))
    return path
