"""The trained model in one file that the browser and the notebook both read.

`model_js` writes a translation model for the page `docs/translate.html`: its
weights (each matrix as int8 with one float32 scale per row, or as float16; vectors as
float32; a tied matrix once), the run's sentencepiece model (the proto bytes
`SharedBPE.state()` holds) and spaCy's tokenizer rules for the source language (see
`spacy_rules`), with a manifest (the run's config, where the weights come from, the
preset, the machine, BLEU). The file is JavaScript: one statement that stores an
object in `globalThis.atkitModels[direction]`, so that a page opened from disk can
load it with a `<script src>` (Chromium refuses `fetch()` of file:// URLs). The object
holds the direction, `meta` (the JSON text of everything but the bytes: the manifest,
where each tensor lies, spaCy's rules), `data` (the bytes, deflated and
base64-encoded) and `sha256`, the SHA-256 of "<direction>\n<meta>\n<data>": the page
(atkit/translator.js) and `read_model` refuse a file whose content does not match it,
or whose tensors do not have the shapes that its manifest's settings give, with a
message that says how to restore it. `read_model` gives the content back to Python;
dequantized as the page dequantizes it, the weights load into the notebook's
`build_model` (see the notebook's `load_exported`).

The same content gives the same bytes: no time stamps, a fixed order, deflate at one
level, so the committed file changes only when the model does.

Nothing here imports the notebook: the caller hands in a state dict and plain data.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import json
import re
import sys
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from atkit.files import write_text_atomic
from atkit.settings import current_config

if TYPE_CHECKING:
    import torch

FORMAT = 2  # 2: the content carries its SHA-256 (1 had none)
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


ROOT = Path(__file__).resolve().parents[1]
# the order of the fields in `meta`
META_KEYS = (
    "manifest",
    "quant",
    "tensors",
    "aliases",
    "sentencepiece",
    "spacy",
    "detokenize",
    "encoding",
    "size",
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
    import torch

    w = w.detach().float().cpu()
    scale = w.abs().amax(dim=1) / 127
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))
    codes = torch.round(w / scale[:, None]).clamp(-127, 127).to(torch.int8)
    return codes.numpy(), scale.numpy().astype("<f4")


def dequantize_rows(codes: np.ndarray, scale: np.ndarray) -> torch.Tensor:
    """The float32 matrix the page computes with (one float32 product per entry)."""
    import torch

    return torch.from_numpy(codes.astype(np.float32)) * torch.from_numpy(scale)[:, None]


def _aligned(blob: bytearray) -> int:
    blob.extend(b"\0" * (-len(blob) % 4))  # Float32Array views need 4-byte offsets
    return len(blob)


def pack_state(state: dict, quant: str = "int8") -> tuple[list, dict, bytearray]:
    """(tensor entries, aliases, blob): each distinct tensor of `state` once, in its
    order; a tensor under several names (a tied matrix) is stored under the first and
    the others are aliases of it. Matrices become `quant`, vectors float32."""
    import torch

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
    import torch

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


# ------------------------------------------------------------------ the shapes


def expected_shapes(config: dict) -> dict[str, list[int]]:
    """Every state-dict name of the notebook's model for a run config (a dict, as
    the manifest holds it) with its shape: what `build_model` makes for a shared
    BPE vocabulary of `bpe_size` pieces. atkit/translator.js has the same rule."""
    m = config["model"]
    n, d, ff, v = m["N"], m["d_model"], m["d_ff"], config["bpe_size"]
    out = {}
    for stack, sublayers in (("encoder", 2), ("decoder", 3)):
        for layer in range(n):
            p = f"{stack}.layers.{layer}."
            attention = ["self_attn"] + (["src_attn"] if stack == "decoder" else [])
            for a in attention:
                for w in ("w_q", "w_k", "w_v", "w_o"):
                    out[f"{p}{a}.{w}.weight"] = [d, d]
                    out[f"{p}{a}.{w}.bias"] = [d]
            out[p + "feed_forward.w_1.weight"] = [ff, d]
            out[p + "feed_forward.w_1.bias"] = [ff]
            out[p + "feed_forward.w_2.weight"] = [d, ff]
            out[p + "feed_forward.w_2.bias"] = [d]
            for i in range(sublayers):
                out[f"{p}sublayer.{i}.norm.gamma"] = [d]
                out[f"{p}sublayer.{i}.norm.beta"] = [d]
        if m["norm"] == "pre":  # the pre-norm stacks end in a norm of their own
            out[f"{stack}.norm.gamma"] = [d]
            out[f"{stack}.norm.beta"] = [d]
    out["src_embed.0.lut.weight"] = [v, d]
    out["tgt_embed.0.lut.weight"] = [v, d]
    out["generator.proj.weight"] = [v, d]
    out["generator.proj.bias"] = [v]
    return out


def shape_problems(manifest: dict, entries: list, aliases: dict) -> list[str]:
    """How the stored tensors (`entries`, `aliases`) differ from what the manifest's
    settings give (none: they agree), in words, the first few."""
    try:
        config = manifest["config"]
        m = config["model"]
        for key in ("N", "d_model", "d_ff", "h"):
            if not isinstance(m[key], int) or isinstance(m[key], bool) or m[key] < 1:
                return [f"config.model.{key}={m[key]!r} is not a size"]
        if m["d_model"] % m["h"]:
            return [f"d_model={m['d_model']} is not a multiple of h={m['h']}"]
        if config["vocab"] != "bpe":
            return [f"vocab={config['vocab']!r}: the page reads a shared BPE model"]
        want = expected_shapes(config)
    except KeyError as err:
        return [f"the manifest's config lacks {err}"]
    except TypeError as err:
        return [f"the manifest's config cannot be read ({err})"]
    have = {e["name"]: list(e["shape"]) for e in entries}
    have.update({name: have.get(target) for name, target in aliases.items()})
    problems = [f"{name} is missing" for name in want if name not in have]
    problems += [f"{name} is not in the model" for name in have if name not in want]
    problems += [
        f"{name} is {have[name]}, the settings give {shape}"
        for name, shape in want.items()
        if name in have and have[name] != shape
    ]
    return problems[:3]


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


def digest(direction: str, meta: str, data: str) -> str:
    """The SHA-256 that a model file carries: of its direction, `meta` and `data`."""
    text = f"{direction}\n{meta}\n{data}"
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def wrap(direction: str, meta: dict, data: str) -> str:
    """The text of a model file: `meta` (its fields in the order of META_KEYS) as
    JSON text, `data` (deflated, base64) and the hash of both."""
    meta_text = json.dumps(
        {key: meta[key] for key in META_KEYS}, ensure_ascii=True, separators=(",", ":")
    )
    obj = {
        "format": FORMAT,
        "direction": direction,
        "sha256": digest(direction, meta_text, data),
        "meta": meta_text,
        "data": data,
    }
    body = json.dumps(obj, ensure_ascii=True, separators=(",", ":"))
    return (
        _HEADER.format(direction=direction)
        + f'(globalThis.{GLOBAL} = globalThis.{GLOBAL} || {{}})["{direction}"] = '
        + body
        + ";\n"
    )


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
    problems = shape_problems(manifest, entries, aliases)
    if problems:
        raise ValueError(
            f"the weights do not fit the manifest's settings: {'; '.join(problems)}"
        )
    proto_at = len(blob)
    blob.extend(spm_proto)
    payload = zlib.compress(bytes(blob), 9)
    meta = {
        "manifest": manifest,
        "quant": quant,
        "tensors": entries,
        "aliases": aliases,
        "sentencepiece": {"offset": proto_at, "size": len(spm_proto)},
        "spacy": spacy,
        "detokenize": detokenize,
        "encoding": "deflate",
        "size": len(blob),
    }
    return wrap(direction, meta, base64.b64encode(payload).decode("ascii"))


def write_if_changed(path, text: str) -> bool:
    """Write `text` to `path` unless the file holds it already; True if written."""
    path = Path(path)
    if path.is_file() and path.read_text(encoding="utf-8") == text:
        return False
    write_text_atomic(path, text)
    return True


def restore_advice(path) -> str:
    """What to do about a missing or damaged model file: a committed one (in the
    repository's docs/translate/) comes back with git."""
    try:
        rel = Path(path).resolve().relative_to(ROOT)
    except (ValueError, OSError):
        rel = None
    again = "export it again with `python -m tools.export_model`"
    if rel is not None and rel.parts[:2] == ("docs", "translate"):
        return f"restore it with `git checkout {rel.as_posix()}` (or {again})"
    return again


def _open(path: Path) -> tuple[dict, dict]:
    """(the file's object, its meta) after checking the hash and the shapes."""
    if not path.is_file():
        what = "a folder, not" if path.is_dir() else "no such"
        raise ExportError(f"{path}: {what} exported model file; {restore_advice(path)}")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise ExportError(
            f"{path} is damaged (not UTF-8 text at byte {err.start}); "
            f"{restore_advice(path)}"
        ) from None
    match = _STATEMENT.search(text)
    if not match:
        raise ExportError(
            f"{path}: not a model file of tools.export_model; {restore_advice(path)}, "
            "or move it out of the way"
        )
    damaged = f"{path} is damaged"
    try:
        obj = json.loads(match.group(2))
        if not isinstance(obj, dict):
            raise TypeError("not an object")
        if obj.get("format") != FORMAT:
            raise ExportError(
                f"{path}: format {obj.get('format')!r}, this code reads {FORMAT} (a "
                f"file with a checksum); {restore_advice(path)}"
            )
        if obj["sha256"] != digest(obj["direction"], obj["meta"], obj["data"]):
            raise ExportError(
                f"{damaged}: its content does not match the SHA-256 it carries (it "
                f"was edited or cut short); {restore_advice(path)}"
            )
        meta = json.loads(obj["meta"])
        problems = shape_problems(meta["manifest"], meta["tensors"], meta["aliases"])
    except ExportError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError) as err:
        raise ExportError(
            f"{damaged} ({type(err).__name__}: {str(err)[:200]}); "
            f"{restore_advice(path)}"
        ) from None
    if problems:
        raise ExportError(
            f"{damaged}: its tensors do not fit its manifest's settings "
            f"({'; '.join(problems)}); {restore_advice(path)}"
        )
    return obj, meta


def read_manifest(path) -> tuple[str, dict]:
    """(direction, manifest) of a model file, checked (hash, shapes), its weights
    not decoded."""
    obj, meta = _open(Path(path))
    return obj["direction"], meta["manifest"]


def read_model(path) -> Exported:
    """The content of a model file written by `model_js`, checked: a file whose
    content does not match its hash, or whose tensors do not fit its manifest's
    settings, is an ExportError that says so and how to restore it."""
    path = Path(path)
    obj, meta = _open(path)
    try:
        blob = zlib.decompress(base64.b64decode(obj["data"], validate=True))
        if len(blob) != meta["size"]:
            raise ValueError(f"{len(blob)} bytes of data, {meta['size']} said")
        sp = meta["sentencepiece"]
        proto = blob[sp["offset"] : sp["offset"] + sp["size"]]
        state = unpack_state(meta["tensors"], meta["aliases"], blob)
    except (KeyError, TypeError, ValueError, zlib.error) as err:
        raise ExportError(
            f"{path} is damaged ({type(err).__name__}: {str(err)[:200]}); "
            f"{restore_advice(path)}"
        ) from None
    current_config(meta["manifest"].get("config"))  # an earlier notebook's settings
    return Exported(
        meta["manifest"], state, proto, meta["spacy"], meta["detokenize"], path
    )
