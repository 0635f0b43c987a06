"""The trained model in one file that the browser and the notebook both read.

`write_model` stores a translation model for the page `docs/translate.html`: its
weights (each matrix as int8 with one float32 scale per row, or as float16; vectors as
float32; a tied matrix once), the run's sentencepiece model (the proto bytes
`SharedBPE.state()` holds) and spaCy's tokenizer rules for the source language (see
`spacy_rules`), with a manifest (the run's config, where the weights come from, the
preset, the machine, BLEU). The file is JavaScript: one statement that stores an
object in `globalThis.atkitModels[direction]`, so that a page opened from disk can
load it with a `<script src>` (Chromium refuses `fetch()` of file:// URLs). The bytes
are deflated and base64-encoded in that object. `read_model` gives the same content
back to Python; dequantized as the page dequantizes it, the weights load into the
notebook's `build_model` (see the notebook's `load_exported`).

The same content gives the same bytes: no time stamps, a fixed order, deflate at one
level, so the committed file changes only when the model does.

Nothing here imports the notebook: the caller hands in a state dict and plain data.
"""

from __future__ import annotations

import base64
import functools
import json
import re
import sys
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from atkit.files import write_text_atomic

FORMAT = 1
QUANTS = ("int8", "float16")
GLOBAL = "atkitModels"  # the page reads globalThis.atkitModels[direction]
_HEADER = (
    "/* The Annotated Transformer, rebuilt: the {direction} model of "
    "translate.html, written by `python -m tools.export_model`; do not edit. */\n"
)
_STATEMENT = re.compile(
    r'^\(globalThis\.atkitModels = globalThis\.atkitModels \|\| \{\}\)\["([a-z-]+)"\]'
    r" = (\{.*\});$",
    re.MULTILINE,
)


class ExportError(ValueError):
    """An exported model file that cannot be used; the message names the file."""


# ------------------------------------------------------------------ spaCy's rules


@functools.cache
def python_whitespace() -> str:
    """Every character for which Python's str.isspace() is true: where spaCy's
    tokenizer splits, and what Python's regex \\s matches."""
    return "".join(chr(c) for c in range(sys.maxunicode + 1) if chr(c).isspace())


def _class_of(chars: str) -> str:
    return "".join(f"\\u{{{ord(c):x}}}" for c in chars)


# Escapes that mean the same in Python's re and in a JavaScript RegExp with the u flag.
_JS_SYNTAX = set("^$\\.*+?()[]{}|/")


def js_regex(pattern: str) -> str:
    """A Python `re` pattern (spaCy's tokenizer rules) as a JavaScript RegExp source
    for the `u` flag, with the same matches: \\UXXXXXXXX becomes \\u{X}; \\w, \\d
    and \\s take Python's Unicode meaning; escaped punctuation that JavaScript's u mode
    refuses (\\', \\!, \\#) becomes the character itself; the inline (?u) goes.
    Anything this function does not know (other flags, \\b, named groups) is an error
    rather than a silent change of meaning."""
    space = _class_of(python_whitespace())
    word, digit = "\\p{L}\\p{N}_", "\\p{Nd}"
    out, i, in_class = [], 0, False
    if pattern.startswith("(?u)"):
        i = 4
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            nxt = pattern[i + 1]
            if nxt == "U":
                out.append(f"\\u{{{int(pattern[i + 2 : i + 10], 16):x}}}")
                i += 10
                continue
            if nxt in "ux":
                n = 4 if nxt == "u" else 2
                out.append(pattern[i : i + 2 + n])
                i += 2 + n
                continue
            known = {"w": word, "d": digit, "s": space}
            if nxt in known:
                out.append(known[nxt] if in_class else f"[{known[nxt]}]")
            elif nxt == "S" and not in_class:
                out.append(f"[^{space}]")
            elif nxt.isalnum():
                raise ValueError(f"js_regex: \\{nxt} is not supported ({pattern[:60]})")
            elif nxt in _JS_SYNTAX or (nxt == "-" and in_class):
                out.append(c + nxt)
            else:
                out.append(nxt)
            i += 2
            continue
        if c == "(" and pattern.startswith("(?", i):
            if not any(pattern.startswith(s, i) for s in ("(?:", "(?=", "(?!", "(?<")):
                raise ValueError(f"js_regex: {pattern[i : i + 4]!r} is not supported")
            if pattern.startswith("(?P", i):
                raise ValueError("js_regex: named groups are not supported")
        if c == "[" and not in_class:
            in_class = True
            out.append(c)
            if pattern.startswith("^", i + 1):
                out.append("^")
                i += 1
            if pattern.startswith("]", i + 1):  # a literal ] first in the class
                out.append("\\]")
                i += 1
            i += 1
            continue
        if c == "]" and in_class:
            in_class = False
        out.append(c)
        i += 1
    return "".join(out)


def spacy_rules(lang: str) -> dict:
    """spaCy's tokenizer for `lang` (`spacy.blank(lang).tokenizer`, the one Part 3
    uses) as data for the page: prefix, suffix and infix patterns and the URL pattern
    as JavaScript RegExp sources, the special cases (text -> token texts), and the
    characters spaCy splits on. atkit/translator.js runs spaCy's algorithm on them."""
    import spacy
    from spacy.attrs import ORTH

    tok = spacy.blank(lang).tokenizer
    if tok.token_match is not None:
        raise ValueError(f"spacy.blank({lang!r}) has a token_match; not supported")

    def source(fn):
        return None if fn is None else js_regex(fn.__self__.pattern)

    return {
        "spacy": spacy.__version__,
        "lang": lang,
        "prefix": source(tok.prefix_search),
        "suffix": source(tok.suffix_search),
        "infix": source(tok.infix_finditer),
        "url": source(tok.url_match),
        "faster_heuristics": bool(tok.faster_heuristics),
        "specials": {
            text: [t[ORTH] if ORTH in t else t["ORTH"] for t in tokens]
            for text, tokens in sorted(tok.rules.items())
        },
        "whitespace": python_whitespace(),
    }


# ------------------------------------------------------------------ the weights


def quantize_rows(w: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    """int8 codes and one float32 scale per row: w ~ codes * scale, |codes| <= 127."""
    w = w.detach().float().cpu()
    scale = w.abs().amax(dim=1) / 127
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))
    codes = torch.round(w / scale[:, None]).clamp(-127, 127).to(torch.int8)
    return codes.numpy(), scale.numpy().astype("<f4")


def dequantize_rows(codes: np.ndarray, scale: np.ndarray) -> torch.Tensor:
    """The float32 matrix the page computes with (one float32 product per entry)."""
    return torch.from_numpy(codes.astype(np.float32)) * torch.from_numpy(scale)[:, None]


def _aligned(blob: bytearray) -> int:
    blob.extend(b"\0" * (-len(blob) % 4))  # Float32Array views need 4-byte offsets
    return len(blob)


def pack_state(state: dict, quant: str = "int8") -> tuple[list, dict, bytearray]:
    """(tensor entries, aliases, blob): each distinct tensor of `state` once, in its
    order; a tensor under several names (a tied matrix) is stored under the first and
    the others are aliases of it. Matrices become `quant`, vectors float32."""
    if quant not in QUANTS:
        raise ValueError(f"quant={quant!r}: use one of {QUANTS}")
    entries, aliases, blob, seen = [], {}, bytearray(), {}
    for name, t in state.items():
        if not torch.is_tensor(t) or not t.is_floating_point():
            raise ValueError(f"{name}: only floating-point tensors can be exported")
        key = (t.untyped_storage().data_ptr(), t.storage_offset(), t.shape)
        if key in seen:
            aliases[name] = seen[key]
            continue
        seen[key] = name
        entry = {"name": name, "shape": list(t.shape)}
        if t.dim() == 2 and quant == "int8":
            codes, scale = quantize_rows(t)
            entry.update(dtype="int8", offset=_aligned(blob))
            blob.extend(codes.tobytes())
            entry["scales"] = _aligned(blob)
            blob.extend(scale.tobytes())
        elif t.dim() == 2:
            entry.update(dtype="float16", offset=_aligned(blob))
            blob.extend(t.detach().cpu().numpy().astype("<f2").tobytes())
        else:
            entry.update(dtype="float32", offset=_aligned(blob))
            blob.extend(t.detach().float().cpu().numpy().astype("<f4").tobytes())
        entries.append(entry)
    return entries, aliases, blob


def unpack_state(entries: list, aliases: dict, blob: bytes) -> dict:
    """The float32 state dict the page computes with: every name, aliases too."""
    out = {}
    for e in entries:
        shape, at = tuple(e["shape"]), e["offset"]
        n = int(np.prod(shape))
        if e["dtype"] == "int8":
            codes = np.frombuffer(blob, np.int8, n, at).reshape(shape).copy()
            scale = np.frombuffer(blob, "<f4", shape[0], e["scales"]).copy()
            out[e["name"]] = dequantize_rows(codes, scale)
        elif e["dtype"] == "float16":
            a = np.frombuffer(blob, "<f2", n, at).reshape(shape).astype(np.float32)
            out[e["name"]] = torch.from_numpy(a)
        else:
            a = np.frombuffer(blob, "<f4", n, at).reshape(shape).copy()
            out[e["name"]] = torch.from_numpy(a)
    for name, target in aliases.items():
        out[name] = out[target]
    return out


# ------------------------------------------------------------------ the file


@dataclass
class Exported:
    """What `read_model` found: the manifest, the float32 weights (every state-dict
    name), the sentencepiece model proto, spaCy's rules and the detokenizer's."""

    manifest: dict
    state_dict: dict
    spm_proto: bytes
    spacy: dict
    detokenize: list
    path: Path | None = None


def model_js(
    direction: str,
    manifest: dict,
    state: dict,
    spm_proto: bytes,
    spacy: dict,
    detokenize: list,
    quant: str = "int8",
) -> str:
    """The text of a model file (see the module docstring). `detokenize`: the
    notebook's detokenize as (JavaScript pattern, replacement) pairs, applied in
    order to the output tokens joined by spaces."""
    if not re.fullmatch(r"[a-z]+-[a-z]+", direction):
        raise ValueError(f"direction={direction!r}: like 'de-en'")
    entries, aliases, blob = pack_state(state, quant)
    proto_at = len(blob)
    blob.extend(spm_proto)
    payload = zlib.compress(bytes(blob), 9)
    obj = {
        "format": FORMAT,
        "direction": direction,
        "manifest": manifest,
        "quant": quant,
        "tensors": entries,
        "aliases": aliases,
        "sentencepiece": {"offset": proto_at, "size": len(spm_proto)},
        "spacy": spacy,
        "detokenize": detokenize,
        "encoding": "deflate",
        "size": len(blob),
        "data": base64.b64encode(payload).decode("ascii"),
    }
    body = json.dumps(obj, ensure_ascii=True, separators=(",", ":"))
    return (
        _HEADER.format(direction=direction)
        + f'(globalThis.{GLOBAL} = globalThis.{GLOBAL} || {{}})["{direction}"] = '
        + body
        + ";\n"
    )


def write_if_changed(path, text: str) -> bool:
    """Write `text` to `path` unless the file holds it already; True if written."""
    path = Path(path)
    if path.is_file() and path.read_text(encoding="utf-8") == text:
        return False
    write_text_atomic(path, text)
    return True


def read_model(path) -> Exported:
    """The content of a model file written by `write_model`."""
    path = Path(path)
    if not path.is_file():
        raise ExportError(
            f"{path}: no such exported model (make it with `python -m "
            "tools.export_model`)"
        )
    match = _STATEMENT.search(path.read_text(encoding="utf-8"))
    if not match:
        raise ExportError(f"{path}: not a model file of tools.export_model")
    try:
        obj = json.loads(match.group(2))
        if obj.get("format") != FORMAT:
            raise ExportError(f"{path}: format {obj.get('format')}, expected {FORMAT}")
        blob = zlib.decompress(base64.b64decode(obj["data"], validate=True))
        if len(blob) != obj["size"]:
            raise ExportError(f"{path}: {len(blob)} bytes of data, {obj['size']} said")
        sp = obj["sentencepiece"]
        proto = blob[sp["offset"] : sp["offset"] + sp["size"]]
        state = unpack_state(obj["tensors"], obj["aliases"], blob)
    except (KeyError, TypeError, ValueError, zlib.error) as err:
        if isinstance(err, ExportError):
            raise
        raise ExportError(
            f"{path}: damaged ({type(err).__name__}: {str(err)[:200]}); export it "
            "again with `python -m tools.export_model`"
        ) from None
    return Exported(
        obj["manifest"], state, proto, obj["spacy"], obj["detokenize"], path
    )
