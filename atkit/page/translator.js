/* The notebook's translation pipeline in the browser, for docs/translate.html.

   A model file written by atkit/export.py (one <script src> per direction) stores
   globalThis.atkitModels[direction]; `atkitTranslator.load(that object)` returns a
   Translator that does what the notebook does for one sentence:

   1. spaCy's tokenizer (spacy.blank(lang), Part 3's `tokenize_all`): the algorithm of
      spaCy's Tokenizer (tokenizer.pyx: whitespace split, special cases, prefixes and
      suffixes, URL match, infixes, then the special-case matcher), run on the rules
      exported from spaCy;
   2. sentencepiece's BPE encoding of the tokens joined by spaces (`SharedBPE.encode`;
      bpe_model.cc: merge the best-scored adjacent pair, leftmost first; unknown
      characters become <unk>, a run of them one <unk>), read from the model's proto;
   3. the Transformer of Part 1 (pre-norm or post-norm), decoding with a key/value
      cache (`CachedDecoderStepper`) greedily (`greedy_decode`) or with beam search
      (`beam_search`: 2k candidates, finished hypotheses ranked with the length
      penalty ((5 + |Y|) / 6)^alpha, the same stop rules), each output at most
      min(max_len, source ids + 50) tokens long (§6.1);
   4. sentencepiece's decoding, split on whitespace, and Part 3's `detokenize`;
   5. the attention weights of one teacher-forced pass over the output
      (`attention_maps`), for atkit/page/attention_view.js.

   Numbers are float32 in storage (as in PyTorch) with sums in float64; the tests
   compare tokens, pieces and greedy outputs with the notebook's code. */
(function (root) {
  "use strict";

  const BOS = 0, EOS = 1; // the notebook's SPECIALS: <s>, </s>, <blank>, <unk>
  const f32 = Math.fround;

  class InputError extends Error {} // bad input: a message for the reader

  // ------------------------------------------------------------------ bytes
  function fromBase64(text) {
    const bin = atob(text);
    const out = new Uint8Array(bin.length);
    for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
    return out;
  }

  async function inflate(bytes) {
    if (typeof DecompressionStream === "undefined") {
      throw new Error("this browser has no DecompressionStream (Chromium 80+, Firefox 113+, Safari 16.4+)");
    }
    const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("deflate"));
    const out = new Uint8Array(await new Response(stream).arrayBuffer());
    // a zlib stream ends in the Adler-32 of what it holds: bytes after it (which
    // Chromium refuses, and Node's DecompressionStream passes over) end otherwise
    let a = 1, b = 0;
    for (let i = 0; i < out.length; i++) { a = (a + out[i]) % 65521; b = (b + a) % 65521; }
    const n = bytes.length, tail = ((bytes[n - 4] << 24) | (bytes[n - 3] << 16) | (bytes[n - 2] << 8) | bytes[n - 1]) >>> 0;
    if (n < 4 || tail !== ((b << 16) | a) >>> 0) throw new Error("the deflated data has bytes after its end");
    return out;
  }

  // ------------------------------------------------------------------ protobuf
  // The fields of a message: [number, wire type, value or [start, end)].
  function protoFields(bytes, start, end) {
    const out = [];
    let pos = start;
    const varint = () => {
      let x = 0, mul = 1, b;
      do { b = bytes[pos++]; x += (b & 0x7f) * mul; mul *= 128; } while (b & 0x80);
      return x;
    };
    while (pos < end) {
      const key = varint(), num = Math.floor(key / 8), wire = key % 8;
      if (wire === 0) out.push([num, wire, varint()]);
      else if (wire === 1) { out.push([num, wire, [pos, pos + 8]]); pos += 8; }
      else if (wire === 2) { const n = varint(); out.push([num, wire, [pos, pos + n]]); pos += n; }
      else if (wire === 5) { out.push([num, wire, [pos, pos + 4]]); pos += 4; }
      else throw new Error(`sentencepiece model: wire type ${wire} is not supported`);
    }
    return out;
  }

  // ------------------------------------------------------------------ sentencepiece
  const NORMAL = 1, UNKNOWN = 2, CONTROL = 3, USER_DEFINED = 4, UNUSED = 5;
  const SPACE = "\u2581"; // sentencepiece's ▁

  class SentencePieceBPE {
    constructor(bytes, whitespace) {
      const text = new TextDecoder("utf-8");
      const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
      const str = ([s, e]) => text.decode(bytes.subarray(s, e));
      this.pieces = []; this.scores = []; this.types = [];
      const norm = { addDummyPrefix: true, removeExtra: true, escape: true, charsmap: 0 };
      let modelType = 1, suffix = false, byteFallback = false;
      this.unkSurface = " \u2047 ";
      for (const [num, , v] of protoFields(bytes, 0, bytes.length)) {
        if (num === 1) {
          let piece = "", score = 0, type = NORMAL;
          for (const [n, , w] of protoFields(bytes, v[0], v[1])) {
            if (n === 1) piece = str(w);
            else if (n === 2) score = view.getFloat32(w[0], true);
            else if (n === 3) type = w;
          }
          this.pieces.push(piece); this.scores.push(score); this.types.push(type);
        } else if (num === 2) {
          for (const [n, , w] of protoFields(bytes, v[0], v[1])) {
            if (n === 3) modelType = w;
            else if (n === 24) suffix = Boolean(w);
            else if (n === 35) byteFallback = Boolean(w);
            else if (n === 44) this.unkSurface = str(w);
          }
        } else if (num === 3) {
          for (const [n, , w] of protoFields(bytes, v[0], v[1])) {
            if (n === 2) norm.charsmap = w[1] - w[0];
            else if (n === 3) norm.addDummyPrefix = Boolean(w);
            else if (n === 4) norm.removeExtra = Boolean(w);
            else if (n === 5) norm.escape = Boolean(w);
          }
        }
      }
      if (modelType !== 2 || suffix || byteFallback || norm.charsmap) {
        throw new Error("sentencepiece model: only BPE with the identity normalisation, " +
                        "no byte fallback and whitespace as prefix is supported");
      }
      this.norm = norm;
      this.whitespace = new Set(whitespace);
      this.normal = new Map(); // NORMAL, USER_DEFINED, UNUSED pieces: what may merge
      this.reserved = new Map(); // control and unknown pieces
      this.unkId = -1;
      this.pieces.forEach((p, i) => {
        const t = this.types[i];
        if (t === USER_DEFINED) throw new Error("sentencepiece model: user-defined symbols are not supported");
        (t === NORMAL || t === UNUSED ? this.normal : this.reserved).set(p, i);
        if (t === UNKNOWN) this.unkId = i;
      });
      if (this.unkId < 0) throw new Error("sentencepiece model: no <unk> piece");
      // The most U+2581 (word starts) one piece holds; Infinity when U+2581 is no piece
      // of its own (then runs of unknown pieces, which merge, may hold several).
      this.spacesPerPiece = !this.normal.has(SPACE) ? Infinity
        : Math.max(1, ...[...this.normal.keys()].map((p) => p.split(SPACE).length - 1));
    }

    pieceToId(p) {
      const r = this.reserved.get(p);
      if (r !== undefined) return r;
      const n = this.normal.get(p);
      return n === undefined ? this.unkId : n;
    }

    // normalizer.cc with an empty charsmap: only ' ' is whitespace here.
    normalize(text) {
      const { addDummyPrefix, removeExtra, escape } = this.norm;
      const chars = [...text];
      let i = 0;
      if (removeExtra) while (i < chars.length && chars[i] === " ") i++;
      if (i === chars.length) return [];
      const space = escape ? SPACE : " ";
      const out = addDummyPrefix ? [space] : [];
      let prevSpace = removeExtra;
      for (; i < chars.length; i++) {
        const c = chars[i];
        if (!(prevSpace && c === " ")) {
          out.push(c === " " && escape ? SPACE : c);
          prevSpace = c === " ";
        }
        if (!removeExtra) prevSpace = false;
      }
      if (removeExtra) while (out.length && out[out.length - 1] === space) out.pop();
      return out;
    }

    // sentencepiece's encode: [piece, id] pairs; a run of unknown pieces is one
    // <unk> (sentencepiece_processor.cc, PopulateSentencePieceText).
    encodePieces(text) {
      const out = [];
      let prevUnk = false;
      for (const [piece, id] of this.bpePieces(text)) {
        const unk = this.types[id] === UNKNOWN;
        if (unk && prevUnk) out[out.length - 1][0] += piece;
        else out.push([piece, id]);
        prevUnk = unk;
      }
      return out;
    }

    encode(text) { return this.encodePieces(text).map(([, id]) => id); }

    // bpe_model.cc's Model::SampleEncode without dropout: [piece, id] pairs.
    bpePieces(text) {
      const chars = this.normalize(text);
      const sym = chars.map((c, i) => ({ piece: c, prev: i - 1, next: i + 1 < chars.length ? i + 1 : -1 }));
      if (!sym.length) return [];
      const heap = []; // pairs, best first: higher score, then the leftmost
      const better = (a, b) => a.score > b.score || (a.score === b.score && a.left < b.left);
      const push = (item) => {
        heap.push(item);
        for (let i = heap.length - 1; i > 0;) {
          const p = (i - 1) >> 1;
          if (!better(heap[i], heap[p])) break;
          [heap[i], heap[p]] = [heap[p], heap[i]]; i = p;
        }
      };
      const pop = () => {
        const top = heap[0], last = heap.pop();
        if (heap.length) {
          heap[0] = last;
          for (let i = 0; ;) {
            const l = 2 * i + 1, r = l + 1;
            let m = i;
            if (l < heap.length && better(heap[l], heap[m])) m = l;
            if (r < heap.length && better(heap[r], heap[m])) m = r;
            if (m === i) break;
            [heap[i], heap[m]] = [heap[m], heap[i]]; i = m;
          }
        }
        return top;
      };
      const revMerge = new Map();
      const addPair = (left, right) => {
        if (left === -1 || right === -1) return;
        const piece = sym[left].piece + sym[right].piece;
        const id = this.normal.get(piece);
        if (id === undefined) return;
        push({ left, right, score: this.scores[id], size: piece.length });
        if (this.types[id] === UNUSED) revMerge.set(piece, [sym[left].piece, sym[right].piece]);
      };
      for (let i = 1; i < sym.length; i++) addPair(i - 1, i);
      while (heap.length) {
        const top = pop();
        const L = sym[top.left], R = sym[top.right];
        if (!L.piece || !R.piece || L.piece.length + R.piece.length !== top.size) continue;
        L.piece += R.piece;
        L.next = R.next;
        if (R.next >= 0) sym[R.next].prev = top.left;
        R.piece = "";
        addPair(L.prev, top.left);
        addPair(top.left, L.next);
      }
      const out = [];
      const resegment = (w) => {
        const id = this.pieceToId(w);
        const split = this.types[id] === UNUSED ? revMerge.get(w) : undefined;
        if (!split) { out.push([w, id]); return; }
        resegment(split[0]); resegment(split[1]);
      };
      for (let i = 0; i !== -1; i = sym[i].next) resegment(sym[i].piece);
      return out;
    }

    // `SharedBPE.decode`: sentencepiece's text of the ids, split on whitespace.
    decode(ids) {
      let text = "";
      for (const id of ids) {
        const t = this.types[id];
        if (t === CONTROL) continue;
        text += t === UNKNOWN ? this.unkSurface : this.pieces[id];
      }
      text = text.split(SPACE).join(" ");
      const words = [];
      let word = "";
      for (const c of text) {
        if (this.whitespace.has(c)) { if (word) words.push(word); word = ""; } else word += c;
      }
      if (word) words.push(word);
      return words;
    }
  }

  // ------------------------------------------------------------------ spaCy
  class TooManyTokens extends Error {}

  // The top-level alternatives of a pattern of the schema's grammar, each with the
  // most characters it can match (Infinity: a repetition without bound); out.behind:
  // the most characters a lookbehind of it reads.
  function alternatives(src) {
    const out = [];
    out.behind = 0;
    const groupWidths = [];
    let depth = 0, start = 0, width = 0, alt = [], last = 0, i = 0;
    const atom = (w) => { last = w; width += w; };
    while (i < src.length) {
      const c = src[i];
      if (c === "\\") {
        const m = /^\\(u\{[0-9a-fA-F]+\}|u[0-9a-fA-F]{4}|x[0-9a-fA-F]{2}|p\{[A-Za-z]+\}|[\s\S])/.exec(src.slice(i, i + 12));
        atom(1); i += m[0].length; continue;
      }
      if (c === "[") {
        let j = i + 1;
        if (src[j] === "^") j++;
        if (src[j] === "]") j++;
        while (j < src.length && src[j] !== "]") j += src[j] === "\\" ? 2 : 1;
        atom(1); i = j + 1; continue;
      }
      if (c === "(") {
        const look = /^\(\?<?[=!]/.test(src.slice(i, i + 4)), behind = look && src[i + 2] === "<";
        groupWidths.push({ width, alt, look, behind });
        width = 0; alt = []; depth++;
        i += look ? (src[i + 2] === "<" ? 4 : 3) : src.startsWith("(?:", i) ? 3 : 1;
        continue;
      }
      if (c === ")") {
        const inner = Math.max(width, ...alt), g = groupWidths.pop();
        if (g.behind) out.behind = Math.max(out.behind, inner);
        width = g.width; alt = g.alt; depth--;
        atom(g.look ? 0 : inner); i++; continue;
      }
      if (c === "|") {
        if (depth === 0) { out.push({ src: src.slice(start, i), width }); start = i + 1; width = 0; }
        else { alt.push(width); width = 0; }
        i++; continue;
      }
      const q = /^(?:[*+?]|\{(\d+)(?:(,)(\d*))?\})\??/.exec(src.slice(i, i + 12));
      if (q) {
        const times = q[0][0] === "?" ? 1 : q[0][0] === "{" ? (q[2] ? (q[3] ? Number(q[3]) : Infinity) : Number(q[1])) : Infinity;
        width += last * times - last; i += q[0].length; continue;
      }
      atom(c === "^" || c === "$" ? 0 : 1);
      if (c >= "\ud800" && c <= "\udbff") i++; // a character outside the BMP is two units
      i++;
    }
    out.push({ src: src.slice(start), width });
    return out;
  }

  // The suffix pattern as its alternatives of bounded length (one regex, and the
  // longest match it can make) and the others (each a regex): null unless every
  // alternative ends with $ and none holds ^ (then a window of the text's end holds
  // every bounded match and what it can look behind at).
  function suffixParts(src) {
    if (!src) return null;
    let alts;
    try { alts = alternatives(src); } catch (e) { return null; }
    if (alts.some((a) => !a.src.endsWith("$") || a.src.endsWith("\\$") || /(^|[^\\])\^/.test(a.src))) return null;
    const bounded = alts.filter((a) => Number.isFinite(a.width));
    const width = Math.max(0, ...bounded.map((a) => a.width));
    if (!Number.isFinite(alts.behind)) return null;
    return {
      width, behind: alts.behind,
      bounded: bounded.length ? new RegExp(bounded.map((a) => a.src).join("|"), "u") : null,
      unbounded: alts.filter((a) => !Number.isFinite(a.width)).map((a) => new RegExp(a.src, "u")),
      sticky: alts.filter((a) => !Number.isFinite(a.width)).map((a) => new RegExp(a.src, "uy")),
    };
  }

  class SpacyTokenizer {
    constructor(rules) {
      const re = (src, flags) => (src ? new RegExp(src, flags) : null);
      this.prefix = re(rules.prefix, "u");
      this.suffix = re(rules.suffix, "u");
      this.suffixParts = suffixParts(rules.suffix);
      this.infix = re(rules.infix, "gu");
      this.url = re(rules.url, "uy"); // Python's .match: anchored at the start
      this.space = new Set(rules.whitespace);
      this.specials = new Map(Object.entries(rules.specials));
      this.longestSpecial = Math.max(0, ...[...this.specials.keys()].map((k) => k.length));
      this.phraseDepth = 1; // the most tokens that the special cases merge into one
      // The special-case matcher: a trie over token texts of the rules that
      // spaCy gives its PhraseMatcher (add_special_case, faster_heuristics).
      this.phrases = new Map();
      for (const text of this.specials.keys()) {
        if (rules.faster_heuristics && !(this.findPrefix(text) || this.findInfix(text).length ||
            this.findSuffix(text) || text.includes(" "))) continue;
        let node = this.phrases;
        const parts = this.tokenizeAffixes(text, false);
        this.phraseDepth = Math.max(this.phraseDepth, parts.length);
        for (const t of parts) {
          if (!node.has(t.text)) node.set(t.text, new Map());
          node = node.get(t.text);
        }
        node.terminal = true;
      }
    }

    isSpace(c) { return this.space.has(c); }
    findPrefix(s) { const m = this.prefix && this.prefix.exec(s); return m ? m[0].length : 0; }
    // The suffix regex's match (Python's re.search): every alternative ends with $, so
    // any match runs to the end and the leftmost start decides. The alternatives of
    // bounded length are searched in the text's last few characters only, the others
    // in all of it: a search costs about the length of the suffix, not of the text
    // (a span of 100,000 characters with an affix at each end no longer takes a
    // search over all of it per affix).
    findSuffix(s, memo) {
      if (!this.suffix) return 0;
      const parts = this.suffixParts;
      if (!parts || s.length <= 2 * (parts.width + parts.behind) + 2) {
        const m = this.suffix.exec(s);
        return m ? m[0].length : 0;
      }
      // UTF-16 units: two per character, and the characters a lookbehind reads
      let from = s.length - 2 * (parts.width + parts.behind);
      if (from > 0 && s.charCodeAt(from) >= 0xdc00 && s.charCodeAt(from) <= 0xdfff) from--;
      const near = parts.bounded && parts.bounded.exec(s.slice(from));
      return Math.max(near ? near[0].length : 0, this.farSuffix(s, memo));
    }

    // The longest match of the unbounded alternatives (the leftmost: all end at the
    // end). memo: the last search's { len, best } when `s` is that search's text less
    // some characters at its front (splitAffixes took a prefix only): a start `near`
    // or more units into `s` sees what it saw then (a lookbehind reads at most
    // parts.behind characters), so only the starts before it are tried anew, unless
    // the last match started before them.
    farSuffix(s, memo) {
      const parts = this.suffixParts, near = Math.max(1, 2 * parts.behind);
      let best = -1;
      if (memo && memo.len >= s.length) {
        if (memo.best === 0 || s.length - memo.best >= near) {
          best = memo.best;
          for (let i = 0; i < near && i < s.length; i++) {
            const c = s.charCodeAt(i);
            if (c >= 0xdc00 && c <= 0xdfff) continue; // the second half of a character
            for (const re of parts.sticky) {
              re.lastIndex = i;
              if (re.test(s)) best = Math.max(best, s.length - i);
            }
          }
        }
      }
      if (best < 0) {
        best = 0;
        for (const re of parts.unbounded) {
          const m = re.exec(s);
          if (m && m[0].length > best) best = m[0].length;
        }
      }
      if (memo) { memo.len = s.length; memo.best = best; }
      return best;
    }
    findInfix(s) { return this.infix ? [...s.matchAll(this.infix)] : []; }
    urlMatch(s) { if (!this.url) return false; this.url.lastIndex = 0; return this.url.test(s); }

    // Tokenizer.__call__: the tokens' texts, whitespace tokens included. `cap`: a
    // TooManyTokens error as soon as the affixes and spans make more than `cap` tokens
    // of text that is not whitespace (before the special cases merge some), so that a
    // text far longer than a model reads is refused in time linear in its length.
    tokenize(text, cap = Infinity) {
      this.cap = cap;
      this.made = 0;
      try {
        return this.applySpecialCases(this.tokenizeAffixes(text, true)).map((t) => t.text);
      } finally {
        this.cap = Infinity;
      }
    }

    // Part 3's tokenize_all: the tokens that are not whitespace.
    words(text, cap) {
      return this.tokenize(text, cap).filter((t) => ![...t].every((c) => this.isSpace(c)));
    }

    count(n) {
      this.made += n;
      if (this.made > this.cap) throw new TooManyTokens(`more than ${this.cap} tokens`);
    }

    // Tokenizer._tokenize_affixes: split on whitespace (a single ' ' is no token).
    tokenizeAffixes(string, withSpecial) {
      const tokens = [];
      if (!string.length) return tokens;
      let start = 0, inWs = this.isSpace(string[0]);
      for (let i = 0; i < string.length; i++) {
        const uc = string[i];
        if (this.isSpace(uc) !== inWs) {
          if (start < i) this.tokenizeSpan(string.slice(start, i), tokens, withSpecial);
          if (uc === " ") { tokens[tokens.length - 1].spacy = true; start = i + 1; } else start = i;
          inWs = !inWs;
        }
      }
      if (start < string.length) {
        this.tokenizeSpan(string.slice(start), tokens, withSpecial);
        tokens[tokens.length - 1].spacy = string.endsWith(" ") && !inWs;
      }
      return tokens;
    }

    pushSpecial(tokens, text) {
      for (const t of this.specials.get(text)) { this.count(1); tokens.push({ text: t, spacy: false }); }
    }

    isSpecial(s) { return s.length <= this.longestSpecial && this.specials.has(s); }

    tokenizeSpan(span, tokens, withSpecial) {
      if (withSpecial && this.isSpecial(span)) { this.pushSpecial(tokens, span); return; }
      const prefixes = [], suffixes = [];
      const core = this.splitAffixes(span, prefixes, suffixes, withSpecial);
      this.attachTokens(tokens, core, prefixes, suffixes, withSpecial);
    }

    // Tokenizer._split_affixes
    splitAffixes(string, prefixes, suffixes, withSpecial) {
      const special = (s) => withSpecial && this.isSpecial(s);
      let lastSize = 0;
      const memo = { len: -1, best: 0 }; // findSuffix's, while only prefixes go
      while (string && string.length !== lastSize) {
        if (special(string)) break;
        lastSize = string.length;
        const preLen = this.findPrefix(string);
        let prefix = "", minusPre = "", suffix = "", minusSuf = "";
        if (preLen !== 0) {
          prefix = string.slice(0, preLen);
          minusPre = string.slice(preLen);
          if (minusPre && special(minusPre)) { string = minusPre; prefixes.push(prefix); this.count(1); break; }
        }
        const sufLen = this.findSuffix(string.slice(preLen), memo);
        if (sufLen !== 0) {
          suffix = string.slice(string.length - sufLen);
          minusSuf = string.slice(0, string.length - sufLen);
          if (minusSuf && special(minusSuf)) { string = minusSuf; suffixes.push(suffix); this.count(1); break; }
        }
        if (sufLen) memo.len = -1; // a suffix goes (or may): the end moves
        if (preLen && sufLen && preLen + sufLen <= string.length) {
          string = string.slice(preLen, string.length - sufLen);
          prefixes.push(prefix); this.count(1); suffixes.push(suffix); this.count(1);
        } else if (preLen) { string = minusPre; prefixes.push(prefix); this.count(1); }
        else if (sufLen) { string = minusSuf; suffixes.push(suffix); this.count(1); }
      }
      return string;
    }

    // Tokenizer._attach_tokens
    attachTokens(tokens, string, prefixes, suffixes, withSpecial) {
      const push = (text) => tokens.push({ text, spacy: false });
      const pushNew = (text) => { this.count(1); push(text); }; // prefixes and suffixes: counted
      prefixes.forEach(push);
      if (string) {
        if (withSpecial && this.isSpecial(string)) this.pushSpecial(tokens, string);
        else if (this.urlMatch(string)) pushNew(string);
        else {
          const matches = this.findInfix(string);
          if (!matches.length) pushNew(string);
          else {
            let start = 0;
            for (const m of matches) {
              const a = m.index, b = m.index + m[0].length;
              if (a === 0) continue; // an infix at the very start is no split
              if (a !== start) pushNew(string.slice(start, a));
              if (a !== b) pushNew(string.slice(a, b));
              start = b;
            }
            if (string.slice(start)) pushNew(string.slice(start));
          }
        }
      }
      for (let i = suffixes.length - 1; i >= 0; i--) push(suffixes[i]);
    }

    // Tokenizer._apply_special_cases: rules whose text spans several tokens.
    applySpecialCases(tokens) {
      const matches = [];
      for (let s = 0; s < tokens.length; s++) {
        let node = this.phrases;
        for (let e = s; e < tokens.length; e++) {
          node = node.get(tokens[e].text);
          if (!node) break;
          if (node.terminal) matches.push([s, e + 1]);
        }
      }
      if (!matches.length) return tokens;
      matches.sort((a, b) => (b[1] - b[0]) - (a[1] - a[0]) || a[0] - b[0]);
      const seen = new Set(), spans = new Map();
      for (const [s, e] of matches) {
        if (!seen.has(s) && !seen.has(e - 1)) spans.set(s, e);
        for (let i = s; i < e; i++) seen.add(i);
      }
      const out = [];
      for (let i = 0; i < tokens.length;) {
        const e = spans.get(i);
        if (e === undefined) { out.push(tokens[i]); i++; continue; }
        const span = tokens.slice(i, e);
        const text = span.map((t, j) => t.text + (t.spacy && j < span.length - 1 ? " " : "")).join("");
        if (this.specials.has(text)) {
          const last = span[span.length - 1].spacy;
          const repl = this.specials.get(text).map((t) => ({ text: t, spacy: false }));
          repl[repl.length - 1].spacy = last;
          out.push(...repl);
        } else out.push(...span);
        i = e;
      }
      return out;
    }
  }

  // ------------------------------------------------------------------ the model
  function halfToFloat(h) {
    const s = h & 0x8000 ? -1 : 1, e = (h >> 10) & 0x1f, m = h & 0x3ff;
    if (e === 0) return s * m * 2 ** -24;
    if (e === 31) return m ? NaN : s * Infinity;
    return s * (1 + m / 1024) * 2 ** (e - 15);
  }

  // The float32 weights pipeline.load_exported gives PyTorch.
  function unpackWeights(entries, aliases, blob) {
    const buf = blob.buffer, base = blob.byteOffset, W = {};
    for (const e of entries) {
      const n = e.shape.reduce((a, b) => a * b, 1);
      let out;
      if (e.dtype === "int8") {
        const codes = new Int8Array(buf, base + e.offset, n);
        const scales = new Float32Array(buf, base + e.scales, e.shape[0]);
        const cols = e.shape[1];
        out = new Float32Array(n);
        for (let r = 0; r < e.shape[0]; r++) {
          const s = scales[r];
          for (let c = 0; c < cols; c++) out[r * cols + c] = codes[r * cols + c] * s;
        }
      } else if (e.dtype === "float16") {
        const half = new Uint16Array(buf, base + e.offset, n);
        out = new Float32Array(n);
        for (let i = 0; i < n; i++) out[i] = halfToFloat(half[i]);
      } else {
        out = new Float32Array(buf.slice(base + e.offset, base + e.offset + 4 * n));
      }
      W[e.name] = out;
    }
    for (const [name, target] of Object.entries(aliases)) W[name] = W[target];
    return W;
  }

  // y (n x dout) = x (n x din) W^T + b, W as PyTorch stores it: (dout, din).
  function linearJS(x, n, din, w, b, dout) {
    const y = new Float32Array(n * dout);
    for (let o = 0; o < dout; o++) {
      const wo = o * din, bias = b ? b[o] : 0;
      for (let r = 0; r < n; r++) {
        const xr = r * din;
        let a0 = 0, a1 = 0, a2 = 0, a3 = 0, i = 0;
        for (; i + 3 < din; i += 4) {
          a0 += x[xr + i] * w[wo + i]; a1 += x[xr + i + 1] * w[wo + i + 1];
          a2 += x[xr + i + 2] * w[wo + i + 2]; a3 += x[xr + i + 3] * w[wo + i + 3];
        }
        for (; i < din; i++) a0 += x[xr + i] * w[wo + i];
        y[r * dout + o] = a0 + a1 + a2 + a3 + bias;
      }
    }
    return y;
  }

  // The same product in WebAssembly with 128-bit SIMD (about six times the speed of
  // the loops above in Chromium here), assembled from these bytes. One function,
  // matmul(w, x, y, rows, cols, n), addresses in bytes, cols a multiple of 8:
  //   for o in 0..rows: for r in 0..n:          (a row of w serves all n inputs)
  //     a, b = 0 (f32x4 each)
  //     for i in 0..cols step 8: a += w[o,i:i+4] * x[r,i:i+4]; b += w[o,i+4:i+8] * x[r,i+4:i+8]
  //     y[r,o] = sum of the lanes of a + b           (float32 sums, as PyTorch's)
  function matmulModule() {
    const leb = (n) => { const out = []; do { let b = n & 0x7f; n >>>= 7; if (n) b |= 0x80; out.push(b); } while (n); return out; };
    const vec = (bytes) => [...leb(bytes.length), ...bytes];
    const name = (t) => vec([...t].map((c) => c.charCodeAt(0)));
    const get = (i) => [0x20, i], set = (i) => [0x21, i], tee = (i) => [0x22, i], c32 = (n) => [0x41, n];
    const simd = (op) => [0xfd, ...leb(op)];
    const load = (off) => [...simd(0x00), 2, off], zero = [...simd(0x0c), ...new Array(16).fill(0)];
    const mul = simd(0xe6), add = simd(0xe4), lane = (k) => [...simd(0x1f), k];
    const F32_ADD = 0x92, ADD = 0x6a, MUL = 0x6c, LT_U = 0x49, LOOP = [0x03, 0x40], END = 0x0b, BR_IF = 0x0d;
    // params 0 w, 1 x, 2 y, 3 rows, 4 cols, 5 n; locals 6 o, 7 r, 8 i, 9 p (in w),
    // 10 q (x's row r), 11 a, 12 b
    const body = [2, 5, 0x7f, 2, 0x7b,
      ...get(3), 0x45, 0x04, 0x40, 0x0f, END, // rows == 0: return
      ...c32(0), ...set(6),
      ...LOOP, // o
      ...c32(0), ...set(7), ...get(1), ...set(10),
      ...LOOP, // r
      ...zero, ...set(11), ...zero, ...set(12), ...c32(0), ...set(8),
      ...get(0), ...get(6), ...get(4), MUL, ...c32(4), MUL, ADD, ...set(9),
      ...LOOP, // i
      ...get(11), ...get(9), ...load(0), ...get(10), ...get(8), ADD, ...load(0), ...mul, ...add, ...set(11),
      ...get(12), ...get(9), ...load(16), ...get(10), ...get(8), ADD, ...load(16), ...mul, ...add, ...set(12),
      ...get(9), ...c32(32), ADD, ...set(9),
      ...get(8), ...c32(32), ADD, ...tee(8), ...get(4), ...c32(4), MUL, LT_U, BR_IF, 0, END,
      ...get(2), ...get(7), ...get(3), MUL, ...get(6), ADD, ...c32(4), MUL, ADD, // &y[r, o]
      ...get(11), ...get(12), ...add, ...tee(11), ...lane(0), ...get(11), ...lane(1), F32_ADD,
      ...get(11), ...lane(2), F32_ADD, ...get(11), ...lane(3), F32_ADD, 0x38, 2, 0, // f32.store
      ...get(10), ...get(4), ...c32(4), MUL, ADD, ...set(10),
      ...get(7), ...c32(1), ADD, ...tee(7), ...get(5), LT_U, BR_IF, 0, END,
      ...get(6), ...c32(1), ADD, ...tee(6), ...get(3), LT_U, BR_IF, 0, END,
      END];
    const section = (id, bytes) => [id, ...vec(bytes)];
    return new Uint8Array([0, 0x61, 0x73, 0x6d, 1, 0, 0, 0,
      ...section(1, [1, 0x60, ...vec([0x7f, 0x7f, 0x7f, 0x7f, 0x7f, 0x7f]), 0]),
      ...section(2, [1, ...name("env"), ...name("mem"), 0x02, 0, 1]),
      ...section(3, [1, 0]),
      ...section(7, [1, ...name("matmul"), 0, 0]),
      ...section(10, [1, ...vec(body)])]);
  }

  // Matrix products for one model: its matrices copied into WebAssembly memory when
  // the browser can (SIMD), else JavaScript loops over the Float32Arrays.
  class Kernel {
    constructor(matrices, maxRows, useWasm) {
      this.ptr = new Map();
      const bytes = matmulModule();
      this.wasm = useWasm !== false && typeof WebAssembly !== "undefined" && WebAssembly.validate(bytes) &&
        matrices.every((m) => m.cols % 8 === 0);
      if (!this.wasm) return;
      let floats = 0;
      for (const m of matrices) floats += m.data.length;
      const maxIn = Math.max(...matrices.map((m) => m.cols)), maxOut = Math.max(...matrices.map((m) => m.rows));
      this.xAt = floats * 4; this.yAt = this.xAt + maxRows * maxIn * 4;
      const total = this.yAt + maxRows * maxOut * 4;
      this.mem = new WebAssembly.Memory({ initial: Math.ceil(total / 65536) });
      this.matmul = new WebAssembly.Instance(new WebAssembly.Module(bytes), { env: { mem: this.mem } }).exports.matmul;
      this.heap = new Float32Array(this.mem.buffer);
      let at = 0;
      for (const m of matrices) {
        this.heap.set(m.data, at);
        m.view = this.heap.subarray(at, at + m.data.length); // the weights, once
        this.ptr.set(m.view, at * 4);
        at += m.data.length;
      }
      this.maxRows = maxRows;
    }

    linear(x, n, din, w, b, dout) {
      const ptr = this.wasm ? this.ptr.get(w) : undefined;
      if (ptr === undefined || n > this.maxRows) return linearJS(x, n, din, w, b, dout);
      this.heap.set(x.subarray(0, n * din), this.xAt / 4);
      this.matmul(ptr, this.xAt, this.yAt, dout, din, n);
      const y = this.heap.slice(this.yAt / 4, this.yAt / 4 + n * dout);
      if (b) for (let r = 0; r < n; r++) for (let o = 0; o < dout; o++) y[r * dout + o] += b[o];
      return y;
    }
  }

  function layerNorm(x, n, d, gamma, beta, eps) {
    const y = new Float32Array(n * d);
    for (let r = 0; r < n; r++) {
      let mean = 0, v = 0;
      for (let i = 0; i < d; i++) mean += x[r * d + i];
      mean = f32(mean / d);
      for (let i = 0; i < d; i++) { const c = x[r * d + i] - mean; v += c * c; }
      const den = f32(Math.sqrt(f32(f32(v / d) + eps)));
      for (let i = 0; i < d; i++) {
        y[r * d + i] = f32(f32(gamma[i] * f32(x[r * d + i] - mean)) / den) + beta[i];
      }
    }
    return y;
  }

  function addInPlace(x, y) { for (let i = 0; i < x.length; i++) x[i] += y[i]; }

  function sinusoidalTable(maxLen, d) {
    const pe = new Float32Array(maxLen * d);
    for (let pos = 0; pos < maxLen; pos++) {
      for (let i2 = 0; i2 < d; i2 += 2) {
        const angle = pos / 10000 ** (i2 / d);
        pe[pos * d + i2] = Math.sin(angle);
        pe[pos * d + i2 + 1] = Math.cos(angle);
      }
    }
    return pe;
  }

  // Attention of queries q (nq x d) over keys/values (nk x d), h heads, weights kept
  // in `probs` (h x nq x nk) when given; causal: query i sees keys 0..i only.
  function attend(q, nq, k, v, nk, d, h, causal, probs) {
    const dk = d / h, scale = Math.sqrt(dk), out = new Float32Array(nq * d);
    const s = new Float64Array(nk);
    for (let head = 0; head < h; head++) {
      const off = head * dk;
      for (let i = 0; i < nq; i++) {
        const seen = causal ? i + 1 : nk;
        let max = -Infinity;
        for (let j = 0; j < seen; j++) {
          let a = 0;
          for (let c = 0; c < dk; c++) a += q[i * d + off + c] * k[j * d + off + c];
          s[j] = f32(f32(a) / scale);
          if (s[j] > max) max = s[j];
        }
        let sum = 0;
        for (let j = 0; j < seen; j++) { s[j] = f32(Math.exp(s[j] - max)); sum += s[j]; }
        sum = f32(sum);
        for (let j = 0; j < seen; j++) {
          const p = f32(s[j] / sum);
          if (probs) probs[(head * nq + i) * nk + j] = p;
          for (let c = 0; c < dk; c++) out[i * d + off + c] += p * v[j * d + off + c];
        }
      }
    }
    return out;
  }

  class Transformer {
    constructor(config, W, shapes, useWasm) {
      const m = config.model;
      Object.assign(this, { N: m.N, d: m.d_model, h: m.h, dff: m.d_ff, maxLen: m.max_len, pre: m.norm === "pre" });
      this.V = W["generator.proj.bias"].length;
      this.pe = sinusoidalTable(this.maxLen, this.d);
      this.eps = 1e-6;
      const matrices = new Map(); // each 2-d tensor once (a tied one has three names)
      for (const [name, data] of Object.entries(W)) {
        if (shapes[name].length === 2 && !matrices.has(data)) {
          matrices.set(data, { data, rows: shapes[name][0], cols: shapes[name][1] });
        }
      }
      this.kernel = new Kernel([...matrices.values()], this.maxLen, useWasm);
      this.W = {};
      for (const [name, data] of Object.entries(W)) this.W[name] = matrices.has(data) && matrices.get(data).view || data;
      this.emb = this.W["src_embed.0.lut.weight"]; this.tgtEmb = this.W["tgt_embed.0.lut.weight"];
    }

    embed(lut, ids, from) {
      const d = this.d, x = new Float32Array(ids.length * d), sq = Math.sqrt(d);
      ids.forEach((id, r) => {
        for (let i = 0; i < d; i++) x[r * d + i] = f32(lut[id * d + i] * sq) + this.pe[(from + r) * d + i];
      });
      return x;
    }

    norm(x, n, name) {
      return layerNorm(x, n, this.d, this.W[name + ".gamma"], this.W[name + ".beta"], this.eps);
    }

    proj(x, n, name, dout) {
      return this.kernel.linear(x, n, x.length / n, this.W[name + ".weight"], this.W[name + ".bias"], dout);
    }

    // SublayerConnection: pre-norm x + f(LN(x)), post-norm LN(x + f(x)).
    sublayer(x, n, name, f) {
      if (this.pre) { const y = f(this.norm(x, n, name + ".norm")); addInPlace(x, y); return x; }
      const y = f(x); addInPlace(x, y); return this.norm(x, n, name + ".norm");
    }

    feedForward(x, n, name) {
      const hdn = this.proj(x, n, name + ".w_1", this.dff);
      for (let i = 0; i < hdn.length; i++) if (hdn[i] < 0) hdn[i] = 0;
      return this.proj(hdn, n, name + ".w_2", this.d);
    }

    mha(name, xq, nq, xkv, nk, causal, probs) {
      const d = this.d;
      const q = this.proj(xq, nq, name + ".w_q", d), k = this.proj(xkv, nk, name + ".w_k", d);
      const v = this.proj(xkv, nk, name + ".w_v", d);
      return this.proj(attend(q, nq, k, v, nk, d, this.h, causal, probs), nq, name + ".w_o", d);
    }

    // memory (S x d) of the source ids; maps.encoder[l] gets (h x S x S) weights.
    encode(src, maps) {
      const S = src.length;
      let x = this.embed(this.emb, src, 0);
      for (let l = 0; l < this.N; l++) {
        const p = `encoder.layers.${l}`, probs = maps ? (maps.encoder[l] = new Float32Array(this.h * S * S)) : null;
        x = this.sublayer(x, S, p + ".sublayer.0", (y) => this.mha(p + ".self_attn", y, S, y, S, false, probs));
        x = this.sublayer(x, S, p + ".sublayer.1", (y) => this.feedForward(y, S, p + ".feed_forward"));
      }
      return this.pre ? this.norm(x, S, "encoder.norm") : x;
    }

    // A teacher-forced pass (attention_maps): weights of every layer and kind.
    attentionMaps(src, tgt) {
      const S = src.length, T = tgt.length, h = this.h;
      const maps = { encoder: [], decoder: [], cross: [] };
      const memory = this.encode(src, maps);
      let x = this.embed(this.tgtEmb, tgt, 0);
      for (let l = 0; l < this.N; l++) {
        const p = `decoder.layers.${l}`;
        const self = (maps.decoder[l] = new Float32Array(h * T * T));
        const cross = (maps.cross[l] = new Float32Array(h * T * S));
        x = this.sublayer(x, T, p + ".sublayer.0", (y) => this.mha(p + ".self_attn", y, T, y, T, true, self));
        x = this.sublayer(x, T, p + ".sublayer.1", (y) => this.mha(p + ".src_attn", y, T, memory, S, false, cross));
        x = this.sublayer(x, T, p + ".sublayer.2", (y) => this.feedForward(y, T, p + ".feed_forward"));
      }
      return maps;
    }

    // CachedDecoderStepper: `rows` hypotheses decoded one position at a time.
    stepper(memory, S, rows) {
      const d = this.d, model = this;
      const memKV = [];
      for (let l = 0; l < this.N; l++) {
        const p = `decoder.layers.${l}.src_attn`;
        memKV.push([this.proj(memory, S, p + ".w_k", d), this.proj(memory, S, p + ".w_v", d)]);
      }
      // cache[l][row]: keys and values of that row's earlier positions
      let cache = memKV.map(() => Array.from({ length: rows }, () => ({ k: [], v: [] })));
      return {
        // the decoder's output (rows x d) for the newest token of each row
        step(tokens, pos) {
          const n = tokens.length, sq = Math.sqrt(d);
          let x = new Float32Array(n * d);
          for (let r = 0; r < n; r++) {
            for (let i = 0; i < d; i++) x[r * d + i] = f32(model.tgtEmb[tokens[r] * d + i] * sq) + model.pe[pos * d + i];
          }
          for (let l = 0; l < model.N; l++) {
            const p = `decoder.layers.${l}`;
            x = model.sublayer(x, n, p + ".sublayer.0", (y) => {
              const q = model.proj(y, n, p + ".self_attn.w_q", d), k = model.proj(y, n, p + ".self_attn.w_k", d);
              const v = model.proj(y, n, p + ".self_attn.w_v", d), o = new Float32Array(n * d);
              for (let r = 0; r < n; r++) {
                const c = cache[l][r];
                c.k.push(k.subarray(r * d, (r + 1) * d)); c.v.push(v.subarray(r * d, (r + 1) * d));
                const t = c.k.length, K = new Float32Array(t * d), V = new Float32Array(t * d);
                for (let j = 0; j < t; j++) { K.set(c.k[j], j * d); V.set(c.v[j], j * d); }
                o.set(attend(q.subarray(r * d, (r + 1) * d), 1, K, V, t, d, model.h, false, null), r * d);
              }
              return model.proj(o, n, p + ".self_attn.w_o", d);
            });
            x = model.sublayer(x, n, p + ".sublayer.1", (y) => {
              const q = model.proj(y, n, p + ".src_attn.w_q", d), o = new Float32Array(n * d);
              for (let r = 0; r < n; r++) {
                o.set(attend(q.subarray(r * d, (r + 1) * d), 1, memKV[l][0], memKV[l][1], S, d, model.h, false, null), r * d);
              }
              return model.proj(o, n, p + ".src_attn.w_o", d);
            });
            x = model.sublayer(x, n, p + ".sublayer.2", (y) => model.feedForward(y, n, p + ".feed_forward"));
          }
          return model.pre ? model.norm(x, n, "decoder.norm") : x;
        },
        // keep only `keep` (row indices), in that order
        reorder(keep) {
          cache = cache.map((layer) => keep.map((r) => ({ k: layer[r].k.slice(), v: layer[r].v.slice() })));
        },
      };
    }

    logits(x, n) {
      return this.kernel.linear(x, n, this.d, this.W["generator.proj.weight"], this.W["generator.proj.bias"], this.V);
    }

    // greedy_decode for one sentence: the ids after <s>, up to </s> (excluded).
    * greedy(src, limit) {
      const memory = this.encode(src), st = this.stepper(memory, src.length, 1);
      const out = [];
      let last = BOS;
      for (let t = 1; t < limit; t++) {
        const z = this.logits(st.step([last], t - 1), 1);
        let best = 0;
        for (let i = 1; i < z.length; i++) if (z[i] > z[best]) best = i;
        if (best === EOS) break;
        out.push(best);
        last = best;
        if (t + 1 >= limit) break;
        yield t;
      }
      return out;
    }

    // beam_search for one sentence (B = 1): k beams, length penalty alpha.
    * beam(src, limit, k, alpha) {
      const lp = (n) => ((5 + n) / 6) ** alpha;
      const memory = this.encode(src), st = this.stepper(memory, src.length, k), V = this.V;
      let ys = Array.from({ length: k }, () => [BOS]);
      let score = new Float32Array(k).fill(-Infinity);
      score[0] = 0;
      const finished = [];
      const topLp = f32(f32((5 + (limit - 1)) / 6) ** alpha);
      for (let t = 1; t < limit; t++) {
        const z = this.logits(st.step(ys.map((y) => y[y.length - 1]), t - 1), k);
        // log_softmax per beam, then the best 2k of score + logp over all beams: the
        // best 2k logits of each beam hold them (score and logsumexp are one number
        // per beam), so only those k * 2k candidates are added up exactly
        const size = Math.min(2 * k, k * V), cand = [];
        for (let b = 0; b < k; b++) {
          if (score[b] === -Infinity && V >= size) continue; // beams not yet started
          let max = -Infinity, sum = 0;
          const row = z.subarray(b * V, (b + 1) * V);
          for (let i = 0; i < V; i++) if (row[i] > max) max = row[i];
          for (let i = 0; i < V; i++) sum += Math.exp(row[i] - max);
          const lse = max + Math.log(sum);
          const best = []; // indices of the largest logits of this beam, largest first
          for (let i = 0; i < V; i++) {
            const v = row[i];
            if (best.length === size && !(v > row[best[size - 1]])) continue;
            let at = best.length;
            while (at > 0 && v > row[best[at - 1]]) at--;
            best.splice(at, 0, i);
            if (best.length > size) best.pop();
          }
          for (const i of best) cand.push({ c: f32(score[b] + f32(row[i] - lse)), beam: b, token: i });
        }
        cand.sort((a, b) => b.c - a.c || a.beam - b.beam || a.token - b.token);
        const top = cand.slice(0, size);
        const ends = top.map((e) => e.token === EOS || limit <= t + 1);
        for (let r = 0; r < Math.min(k, top.length); r++) {
          if (ends[r] && top[r].c > -Infinity) finished.push([top[r].c / lp(t), [...ys[top[r].beam], top[r].token]]);
        }
        const order = top.map((_, j) => j).sort((a, b) => (a + (ends[a] ? top.length : 0)) - (b + (ends[b] ? top.length : 0)));
        const keep = order.slice(0, k);
        score = Float32Array.from(keep, (j) => top[j].c);
        ys = keep.map((j) => [...ys[top[j].beam], top[j].token]);
        st.reorder(keep.map((j) => top[j].beam));
        const hope = f32(Math.max(...score) / topLp);
        const best = finished.reduce((m, f) => Math.max(m, f[0]), -Infinity);
        if (finished.length >= k || hope < best || t + 1 >= limit) break;
        yield t;
      }
      let bestHyp = [BOS];
      let bestScore = -Infinity;
      for (const [s, ids] of finished) if (s > bestScore) { bestScore = s; bestHyp = ids; }
      const out = bestHyp.slice(1);
      const end = out.indexOf(EOS);
      return end >= 0 ? out.slice(0, end) : out;
    }
  }

  // ------------------------------------------------------------------ the pipeline
  function runSync(gen) {
    for (;;) { const r = gen.next(); if (r.done) return r.value; }
  }

  // Run a decoding generator, letting the page repaint every `sliceMs`.
  async function runAsync(gen, sliceMs) {
    let start = performance.now();
    for (;;) {
      const r = gen.next();
      if (r.done) return r.value;
      if (performance.now() - start > sliceMs) {
        await new Promise((res) => {
          const c = new MessageChannel(); // closed once used: an open port keeps Node running
          c.port1.onmessage = () => { c.port1.close(); res(); };
          c.port2.postMessage(0);
        });
        start = performance.now();
      }
    }
  }

  // The searches this page implements, with the options each reads from the manifest
  // and their bounds: the schema's `searches` (atkit/page/model_schema.json, which
  // tools/model_schema.py writes from its one list of them and from the bounds of the
  // notebook's SEARCHES records).
  function pageSearches() {
    const s = modelSchema().properties.manifest.properties.searches.properties;
    return Object.fromEntries(Object.entries(s).map(([name, rec]) => [name, rec.properties]));
  }

  // An option of a search checked as the notebook's check_setting checks it: the
  // type of its default (an integer, or a finite number) within the record's bounds.
  function optionProblem(name, key, value, bounds) {
    const ok = typeOk(value, bounds.type) && !(value < bounds.minimum) && !(value > bounds.maximum) &&
      !(value <= bounds.exclusiveMinimum);
    if (ok) return null;
    const limits = [["minimum", ">="], ["exclusiveMinimum", ">"], ["maximum", "<="]]
      .filter(([k]) => k in bounds).map(([k, op]) => `${op} ${bounds[k]}`);
    const kind = bounds.type === "integer" ? "an integer" : "a finite number";
    const shown = typeof value === "string" ? JSON.stringify(value) : String(value);
    return `${name}.${key}=${shown}: must be ${kind}${limits.length ? " " + limits.join(" and ") : ""}`;
  }

  const TRANSLATE_OPTIONS = ["search", "options", "sliceMs"];

  class Translator {
    constructor(data, blob, options) {
      this.data = data;
      this.manifest = data.manifest;
      this.direction = data.direction;
      const sp = data.sentencepiece;
      this.bpe = new SentencePieceBPE(blob.subarray(sp.offset, sp.offset + sp.size), data.spacy.whitespace);
      this.tokenizer = new SpacyTokenizer(data.spacy);
      const shapes = {};
      for (const e of data.tensors) shapes[e.name] = e.shape;
      for (const [name, target] of Object.entries(data.aliases)) shapes[name] = shapes[target];
      this.model = new Transformer(data.manifest.config, unpackWeights(data.tensors, data.aliases, blob), shapes,
                                   options && options.wasm);
      const det = data.detokenize;
      this.detok = det.map(([src, repl]) => [new RegExp(src, "gu"), repl]);
    }

    // Part 3's detokenize
    detokenize(tokens) {
      let text = tokens.join(" ");
      for (const [re, repl] of this.detok) text = text.replace(re, repl);
      return text;
    }

    // The notebook's Translator before decoding: spaCy tokens, BPE ids, framed.
    source(text) {
      if (typeof text !== "string") throw new InputError("the input must be text");
      const limit = this.model.maxLen - 2;
      const tooLong = (pieces) => new InputError(`The text is ${pieces} subword pieces long; this model reads ` +
        `at most ${limit} (its positional encoding covers ${this.model.maxLen} positions, <s> and </s> ` +
        "included). Split it into sentences.");
      // Each word's U+2581 lies in a piece that holds at most spacesPerPiece of them, and
      // the special cases make one word of at most phraseDepth tokens; whitespace tokens
      // are at most one more than the others: past `cap` tokens, more than `limit` pieces.
      const cap = 2 * (limit * this.bpe.spacesPerPiece + 1) * this.tokenizer.phraseDepth + 1;
      let words;
      try {
        words = this.tokenizer.words(text, cap);
      } catch (err) {
        if (err instanceof TooManyTokens) throw tooLong(`more than ${limit}`);
        throw err;
      }
      if (!words.length) throw new InputError("Nothing to translate: type a sentence first.");
      const joined = words.join(" ");
      const pieces = this.bpe.encodePieces(joined), ids = pieces.map(([, id]) => id);
      if (ids.length > limit) throw tooLong(ids.length);
      const unknown = pieces.filter(([, id]) => id === this.bpe.unkId).map(([p]) => p);
      return { words, ids, src: [BOS, ...ids, EOS], unknown };
    }

    // The settings of search `name` (opts.search, default greedy): the manifest's, as
    // the notebook's SEARCHES record gave them at export; opts.options may change
    // some (the tests do; the page never does), each checked against the record's
    // bounds as make_search checks it. A search this page does not implement, one the
    // model file records no settings for, an option the search lacks or a value out
    // of its bounds is refused with a message.
    searchOptions(name, opts) {
      if (opts !== undefined && (opts === null || typeof opts !== "object" || Array.isArray(opts))) {
        throw new InputError(`The options must be an object such as { search: "beam" }, not ${String(opts)}.`);
      }
      const unknownOpts = Object.keys(opts || {}).filter((k) => !TRANSLATE_OPTIONS.includes(k));
      if (unknownOpts.length) {
        throw new InputError(`translate has no option ${unknownOpts.join(", ")}; its options: ` +
                             `${TRANSLATE_OPTIONS.join(", ")} (a search's own go in options, ` +
                             "e.g. { search: \"beam\", options: { beam_size: 4 } }).");
      }
      if (opts && "sliceMs" in opts && !(typeOk(opts.sliceMs, "number") && opts.sliceMs >= 0)) {
        throw new InputError(`sliceMs=${String(opts.sliceMs)}: must be a finite number >= 0 (milliseconds).`);
      }
      const searches = pageSearches();
      if (typeof name !== "string" || !Object.hasOwn(searches, name)) {
        throw new InputError(`This page does not implement the search "${String(name)}"; it implements ` +
                             `${Object.keys(searches).join(" and ")}.`);
      }
      const recorded = this.manifest.searches[name];
      if (!recorded) {
        throw new InputError(`The ${this.direction} model file records no settings for the search "${name}" ` +
                             "(its manifest's searches); export it again with python -m tools.export_model.");
      }
      const given = opts && opts.options;
      if (given !== undefined && (given === null || typeof given !== "object" || Array.isArray(given))) {
        throw new InputError(`options must be an object such as { beam_size: 4 }, not ${String(given)}.`);
      }
      const options = Object.assign({}, recorded, given);
      const bounds = searches[name];
      const unknown = Object.keys(options).filter((k) => !Object.hasOwn(bounds, k));
      if (unknown.length) {
        throw new InputError(`The search "${name}" has no option ${unknown.join(", ")}; its options: ` +
                             `${Object.keys(bounds).join(", ") || "none"}.`);
      }
      for (const [key, value] of Object.entries(options)) {
        const problem = optionProblem(name, key, value, bounds[key]);
        if (problem) throw new InputError(problem);
      }
      return options;
    }

    * decode(text, opts) {
      const t0 = performance.now();
      const search = opts && opts.search !== undefined ? opts.search : "greedy";
      const options = this.searchOptions(search, opts);
      const s = this.source(text);
      const limit = Math.min(this.model.maxLen, s.src.length + this.manifest.max_extra); // §6.1, per sentence
      const out = yield* (search === "beam" ? this.model.beam(s.src, limit, options.beam_size, options.alpha)
        : this.model.greedy(s.src, limit));
      const tokens = this.bpe.decode(out);
      return Object.assign(s, { out, tokens, text: this.detokenize(tokens), limit, search, options,
                                 hitLimit: out.length + 1 >= limit, ms: performance.now() - t0 });
    }

    translateSync(text, opts) { return runSync(this.decode(text, opts)); }
    translate(text, opts) {
      return runAsync(this.decode(text, opts), opts && typeof opts.sliceMs === "number" ? opts.sliceMs : 40);
    }

    // attention_maps over the translation: decoder input <s> + output.
    attention(result) {
      const tgt = [BOS, ...result.out];
      const maps = this.model.attentionMaps(result.src, tgt);
      return { maps, src: result.src.map((i) => this.bpe.pieces[i]), tgt: tgt.map((i) => this.bpe.pieces[i]) };
    }
  }

  // ------------------------------------------------------------------ loading
  // SHA-256 (FIPS 180-4) of bytes, as hex: the model file carries the hash of its
  // content (atkit/export.py), checked here before anything in it is used.
  const SHA_K = new Uint32Array([
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2]);

  function sha256Hex(bytes) {
    const n = bytes.length, padded = new Uint8Array(((n + 9 + 63) >> 6) << 6);
    padded.set(bytes);
    padded[n] = 0x80;
    const view = new DataView(padded.buffer);
    view.setUint32(padded.length - 8, Math.floor(n / 0x20000000)); // the length in bits
    view.setUint32(padded.length - 4, (n << 3) >>> 0);
    const H = new Uint32Array([0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                               0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19]);
    const w = new Uint32Array(64), rot = (x, r) => (x >>> r) | (x << (32 - r));
    for (let at = 0; at < padded.length; at += 64) {
      for (let i = 0; i < 16; i++) w[i] = view.getUint32(at + 4 * i);
      for (let i = 16; i < 64; i++) {
        const a = w[i - 15], b = w[i - 2];
        const s0 = rot(a, 7) ^ rot(a, 18) ^ (a >>> 3), s1 = rot(b, 17) ^ rot(b, 19) ^ (b >>> 10);
        w[i] = w[i - 16] + s0 + w[i - 7] + s1;
      }
      let [a, b, c, d, e, f, g, h] = H;
      for (let i = 0; i < 64; i++) {
        const t1 = (h + (rot(e, 6) ^ rot(e, 11) ^ rot(e, 25)) + ((e & f) ^ (~e & g)) + SHA_K[i] + w[i]) >>> 0;
        const t2 = ((rot(a, 2) ^ rot(a, 13) ^ rot(a, 22)) + ((a & b) ^ (a & c) ^ (b & c))) >>> 0;
        h = g; g = f; f = e; e = (d + t1) >>> 0; d = c; c = b; b = a; a = (t1 + t2) >>> 0;
      }
      H[0] += a; H[1] += b; H[2] += c; H[3] += d; H[4] += e; H[5] += f; H[6] += g; H[7] += h;
    }
    return Array.from(H, (x) => x.toString(16).padStart(8, "0")).join("");
  }

  // Every state-dict name with the shape the manifest's settings give (atkit/export.py's
  // expected_shapes): a file whose tensors differ is refused, not computed with.
  function shapeProblems(meta) {
    const config = meta.manifest && meta.manifest.config, m = config && config.model;
    if (!m) return ["the manifest has no config.model"];
    for (const key of ["N", "d_model", "d_ff", "h"]) {
      if (!Number.isInteger(m[key]) || m[key] < 1) return [`config.model.${key}=${m[key]} is not a size`];
    }
    if (m.d_model % m.h) return [`d_model=${m.d_model} is not a multiple of h=${m.h}`];
    if (config.vocab !== "bpe") return [`vocab=${config.vocab}: the page reads a shared BPE model`];
    const d = m.d_model, ff = m.d_ff, v = config.bpe_size, want = {};
    for (const [stack, sublayers] of [["encoder", 2], ["decoder", 3]]) {
      for (let l = 0; l < m.N; l++) {
        const p = `${stack}.layers.${l}.`;
        for (const a of stack === "decoder" ? ["self_attn", "src_attn"] : ["self_attn"]) {
          for (const w of ["w_q", "w_k", "w_v", "w_o"]) { want[`${p}${a}.${w}.weight`] = [d, d]; want[`${p}${a}.${w}.bias`] = [d]; }
        }
        Object.assign(want, { [p + "feed_forward.w_1.weight"]: [ff, d], [p + "feed_forward.w_1.bias"]: [ff],
                              [p + "feed_forward.w_2.weight"]: [d, ff], [p + "feed_forward.w_2.bias"]: [d] });
        for (let i = 0; i < sublayers; i++) { want[`${p}sublayer.${i}.norm.gamma`] = [d]; want[`${p}sublayer.${i}.norm.beta`] = [d]; }
      }
      if (m.norm === "pre") { want[`${stack}.norm.gamma`] = [d]; want[`${stack}.norm.beta`] = [d]; }
    }
    Object.assign(want, { "src_embed.0.lut.weight": [v, d], "tgt_embed.0.lut.weight": [v, d],
                          "generator.proj.weight": [v, d], "generator.proj.bias": [v] });
    const have = {};
    for (const e of meta.tensors) have[e.name] = e.shape;
    for (const [name, target] of Object.entries(meta.aliases)) have[name] = have[target];
    const same = (a, b) => Array.isArray(a) && a.length === b.length && a.every((x, i) => x === b[i]);
    const problems = [
      ...Object.keys(want).filter((k) => !(k in have)).map((k) => `${k} is missing`),
      ...Object.keys(have).filter((k) => !(k in want)).map((k) => `${k} is not in the model`),
      ...Object.keys(want).filter((k) => k in have && !same(have[k], want[k]))
        .map((k) => `${k} is [${have[k]}], the settings give [${want[k]}]`),
    ];
    return problems.slice(0, 3);
  }

  // Where the tensors and the sentencepiece model lie in the data, against its size
  // (atkit/export.py's layout_problems): each within it, an int8 matrix with its
  // scales, an alias of a tensor.
  function layoutProblems(meta) {
    const size = meta.size, problems = [], width = { int8: 1, float16: 2, float32: 4 };
    const names = new Set(meta.tensors.map((e) => e.name));
    for (const e of meta.tensors) {
      const n = e.shape.reduce((a, b) => a * b, 1);
      if (e.offset + n * width[e.dtype] > size) problems.push(`${e.name} lies beyond the ${size} bytes of data`);
      if (e.dtype === "int8" && e.shape.length !== 2) problems.push(`${e.name} is int8 but not a matrix`);
      else if (e.dtype === "int8" && !("scales" in e)) problems.push(`${e.name} is int8 without its scales`);
      else if (e.dtype === "int8" && e.scales + 4 * e.shape[0] > size) {
        problems.push(`${e.name}'s scales lie beyond the ${size} bytes of data`);
      }
    }
    for (const [name, target] of Object.entries(meta.aliases)) {
      if (!names.has(target)) problems.push(`the alias ${name} names no tensor (${target})`);
    }
    const sp = meta.sentencepiece;
    if (sp.offset + sp.size > size) problems.push(`the sentencepiece model lies beyond the ${size} bytes of data`);
    return problems.slice(0, 3);
  }

  // How far a source is from what the model was trained on, for the translation
  // page's note: the manifest's `domain` (tools/export_model.py's `domain`, which
  // computes the same for the validation captions). The source ids group into words
  // (a piece that starts with U+2581 starts one); a word is unfamiliar when the
  // vocabulary has no single piece for it or one of its pieces is rare in training.
  // far: more unfamiliar words than `note_above` of them, and at least `min_words`.
  function unfamiliar(pieces, ids, domain) {
    const rare = fromBase64(domain.rare);
    const isRare = (id) => ((rare[id >> 3] >> (id & 7)) & 1) === 1;
    const words = [];
    ids.forEach((id, k) => {
      if (k === 0 || pieces[id].startsWith("\u2581")) words.push([]);
      words[words.length - 1].push(id);
    });
    const odd = words.filter((w) => w.length > 1 || w.some(isRare));
    const share = words.length ? odd.length / words.length : 0;
    return {
      words: words.length, unfamiliar: odd.length, share,
      far: odd.length >= domain.min_words && share > domain.note_above,
      examples: odd.map((w) => w.map((id) => pieces[id]).join("").replace(/\u2581/g, "")),
    };
  }
  root.atkitDomain = { unfamiliar };

  // ------------------------------------------------------------------ the schema
  // The schema of a model file's meta (atkit/page/model_schema.json, written by
  // python -m tools.model_schema), which atkit/export.py checks with the jsonschema
  // package: the page inlines it before this script (globalThis.atkitModelSchema),
  // Node reads the file beside this one.
  function modelSchema() {
    if (root.atkitModelSchema) return root.atkitModelSchema;
    if (typeof module === "object" && typeof require === "function") {
      root.atkitModelSchema = require("./model_schema.json");
      return root.atkitModelSchema;
    }
    throw new Error("this page lacks the model file's schema (atkit/page/model_schema.json): render it again " +
                    "with python -m tools.export_model --page-only");
  }

  function typeOk(value, type) {
    switch (type) {
      case "object": return value !== null && typeof value === "object" && !Array.isArray(value);
      case "array": return Array.isArray(value);
      case "string": return typeof value === "string";
      case "integer": return Number.isInteger(value);
      case "number": return typeof value === "number" && Number.isFinite(value);
      case "boolean": return typeof value === "boolean";
      case "null": return value === null;
      default: return false;
    }
  }

  const BASE64 = /^[A-Za-z0-9+/]*={0,2}$/;
  const isBase64 = (s) => s.length % 4 === 0 && BASE64.test(s);
  const FORMATS = {
    "js-regex": (s) => { try { new RegExp(s, "u"); return true; } catch (e) { return false; } },
    base64: isBase64,
  };
  const FORMAT_WORDS = { "js-regex": "is not a pattern the page can compile", base64: "is not base64" };
  const patterns = new Map();

  function where(path) {
    return path.map((p) => (typeof p === "number" ? `[${p}]` : `.${p}`)).join("").replace(/^\./, "") || "meta";
  }

  function short(value) {
    const text = JSON.stringify(value);
    return text.length <= 40 ? text : text.slice(0, 37) + "...";
  }

  // The first thing in `value` that breaks schema `s` (null: nothing), in the words
  // of atkit/export.py's _error_words. The keywords the schema uses: type, const,
  // enum, the bounds of numbers, strings, arrays and objects, pattern, format,
  // required, properties, additionalProperties, prefixItems, items, anyOf, $ref.
  function schemaProblem(value, s, path, defs) {
    if (s.$ref) return schemaProblem(value, defs[s.$ref.replace("#/$defs/", "")], path, defs);
    const at = where(path), shown = () => `${at}=${short(value)}`;
    if (s.anyOf) {
      const found = s.anyOf.map((branch) => schemaProblem(value, branch, path, defs));
      if (found.some((f) => f === null)) return null;
      const typed = s.anyOf.findIndex((b) => !b.type || typeOk(value, b.type));
      return found[typed >= 0 ? typed : 0];
    }
    if ("const" in s && value !== s.const) return `${shown()}: must be ${short(s.const)}`;
    if (s.enum && !s.enum.includes(value)) return `${shown()}: must be one of ${short(s.enum)}`;
    if (s.type && !typeOk(value, s.type)) return `${shown()} is not of type ${s.type}`;
    if (typeof value === "number") {
      if (value < s.minimum) return `${shown()}: must be >= ${s.minimum}`;
      if (value > s.maximum) return `${shown()}: must be <= ${s.maximum}`;
      if (value <= s.exclusiveMinimum) return `${shown()}: must be > ${s.exclusiveMinimum}`;
      if (s.multipleOf && value % s.multipleOf !== 0) return `${shown()}: must be a multiple of ${s.multipleOf}`;
    }
    if (typeof value === "string") {
      const length = s.minLength !== undefined || s.maxLength !== undefined ? [...value].length : 0;
      if (length < s.minLength) return `${shown()}: must be at least ${s.minLength} characters long`;
      if (length > s.maxLength) return `${shown()}: must be at most ${s.maxLength} characters long`;
      if (s.pattern) {
        if (!patterns.has(s.pattern)) patterns.set(s.pattern, new RegExp(s.pattern, "u"));
        if (!patterns.get(s.pattern).test(value)) return `${shown()}: is not of the form the exporter writes`;
      }
      if (s.format && !FORMATS[s.format](value)) return `${shown()}: ${FORMAT_WORDS[s.format]}`;
    }
    if (Array.isArray(value)) {
      if (value.length < s.minItems) return `${shown()}: must have at least ${s.minItems} items`;
      if (value.length > s.maxItems) return `${shown()}: must have at most ${s.maxItems} items`;
      const first = s.prefixItems || [];
      for (let i = 0; i < value.length; i++) {
        const item = i < first.length ? first[i] : s.items;
        const found = item && schemaProblem(value[i], item, [...path, i], defs);
        if (found) return found;
      }
    }
    if (typeOk(value, "object")) {
      for (const key of s.required || []) if (!Object.hasOwn(value, key)) return `${at}.${key} is missing`;
      const props = s.properties || {};
      for (const [key, sub] of Object.entries(props)) {
        const found = Object.hasOwn(value, key) && schemaProblem(value[key], sub, [...path, key], defs);
        if (found) return found;
      }
      for (const key of Object.keys(value)) {
        if (Object.hasOwn(props, key) || [undefined, true].includes(s.additionalProperties)) continue;
        if (s.additionalProperties === false) return `${at}.${key} is not a field of a model file`;
        const found = schemaProblem(value[key], s.additionalProperties, [...path, key], defs);
        if (found) return found;
      }
      const n = Object.keys(value).length;
      if (n < s.minProperties) return `${shown()}: must have at least ${s.minProperties} fields`;
      if (n > s.maxProperties) return `${shown()}: must have at most ${s.maxProperties} fields`;
    }
    return null;
  }

  // ------------------------------------------------------------------ the file
  // A model file is exactly one text (atkit/export.py's file_text): its header line,
  // then one statement that stores {"format", "direction", "sha256", "meta", "data"}
  // in globalThis.atkitModels[direction], meta written as JSON.stringify writes a
  // string; sha256 is the SHA-256 of every other byte of the file.
  const FORMAT = 3;
  const headerLine = (d) => `/* The Annotated Transformer, rebuilt: the ${d} model of translate.html, ` +
    "written by `python -m tools.export_model`; do not edit. */\n";
  const statementStart = (d) => `(globalThis.atkitModels = globalThis.atkitModels || {})["${d}"] = ` +
    `{"format":${FORMAT},"direction":"${d}","sha256":"`;
  const HEADER = /^\/\* The Annotated Transformer, rebuilt: the ([a-z]+-[a-z]+) model of translate\.html, written by `python -m tools\.export_model`; do not edit\. \*\/\n/;
  const OTHER_FORMAT = /^\(globalThis\.atkitModels = globalThis\.atkitModels \|\| \{\}\)\["[a-z-]+"\] = \{"format":(\d+),/;
  const CONFLICT = /^(<{7}|={7}|>{7})( |$)/m;
  const META = '","meta":', DATA = ',"data":"', END = '"};\n';

  // A model file that cannot be used: kind "damaged", "foreign" (not a model file)
  // or "format" (another format); the message says why, the caller adds what to do.
  class ModelFileError extends Error {
    constructor(kind, why) { super(why); this.kind = kind; }
  }
  const damaged = (why) => new ModelFileError("damaged", why);

  // JSON.parse that refuses numbers JSON cannot hold exactly (1e400 is Infinity).
  function parseFinite(text) {
    return JSON.parse(text, (key, value) => {
      if (typeof value === "number" && !Number.isFinite(value)) throw new SyntaxError(`${key}: not a finite number`);
      return value;
    });
  }

  // { direction, data, meta } of a model file's bytes (a Uint8Array, or a string of
  // its characters), checked as atkit/export.py's parse_model_text checks them, in
  // the same order; else a ModelFileError saying why.
  function parseModelText(source) {
    const bytes = typeof source === "string" ? null : source;
    const n = bytes ? bytes.length : source.length;
    for (let i = 0; i < n; i++) {
      if ((bytes ? bytes[i] : source.charCodeAt(i)) > 127) {
        throw damaged(`byte ${i} is not ASCII, and a model file is ASCII text`);
      }
    }
    const text = bytes ? new TextDecoder("latin1").decode(bytes) : source;
    if (CONFLICT.test(text)) throw damaged("it holds git's conflict markers (a merge left unfinished)");
    const head = HEADER.exec(text);
    if (!head) {
      if (!text.includes("atkitModels")) throw new ModelFileError("foreign", "not a model file of tools.export_model");
      throw damaged("its first line is not a model file's");
    }
    const direction = head[1], start = statementStart(direction);
    let at = head[0].length;
    if (!text.startsWith(start, at)) {
      const other = OTHER_FORMAT.exec(text.slice(at, at + 200));
      if (other && Number(other[1]) !== FORMAT) {
        throw new ModelFileError("format", `format ${other[1]}, this code reads ${FORMAT} (a file whose hash covers every byte)`);
      }
      throw damaged("its statement does not start as a model file's does");
    }
    const shaAt = at + start.length, sha = text.slice(shaAt, shaAt + 64);
    if (!/^[0-9a-f]{64}$/.test(sha) || !text.startsWith(META, shaAt + 64)) {
      throw damaged("its SHA-256 is not where a model file has it");
    }
    if (!text.endsWith(END)) throw damaged("it does not end where its statement does (cut short, or text after it)");
    at = shaAt + 64 + META.length;
    const dataAt = text.lastIndexOf(DATA), data = text.slice(dataAt + DATA.length, text.length - END.length);
    if (dataAt < at || !isBase64(data)) throw damaged("its data is not where a model file has it, as base64");
    const rest = new Uint8Array(n - 64);
    if (bytes) { rest.set(bytes.subarray(0, shaAt)); rest.set(bytes.subarray(shaAt + 64), shaAt); }
    else for (let i = 0, j = 0; i < n; i++) if (i < shaAt || i >= shaAt + 64) rest[j++] = text.charCodeAt(i);
    if (sha256Hex(rest) !== sha) {
      throw damaged("its content does not match the SHA-256 it carries (it was edited or cut short)");
    }
    const literal = text.slice(at, dataAt);
    let metaText;
    try { metaText = JSON.parse(literal); } catch (e) { metaText = null; }
    if (typeof metaText !== "string" || JSON.stringify(metaText) !== literal) {
      throw damaged("its meta is not one JSON string as the exporter writes it");
    }
    for (let i = 0; i < metaText.length; i++) {
      if (metaText.charCodeAt(i) > 127) throw damaged("its meta is not ASCII text");
    }
    let meta;
    try { meta = parseFinite(metaText); } catch (e) { throw damaged(`its meta is not JSON (${String(e.message).slice(0, 100)})`); }
    const schema = modelSchema();
    const problem = schemaProblem(meta, schema, [], schema.$defs || {});
    if (problem) throw damaged(`its content breaks the model file's schema: ${problem}`);
    let problems = shapeProblems(meta);
    if (problems.length) throw damaged(`its tensors do not fit its manifest's settings (${problems.join("; ")})`);
    problems = layoutProblems(meta);
    if (problems.length) throw damaged(`its data does not hold its tensors (${problems.join("; ")})`);
    return { direction, data, meta };
  }

  // The text of a model file: the meta's JSON text (ASCII: JSON.stringify's with every
  // other character as a \u escape, as Python's json.dumps writes it) and the data,
  // with the SHA-256 of the rest (atkit/export.py's file_text; tests/js make files
  // with it).
  function modelFileText(direction, metaText, data) {
    const head = headerLine(direction) + statementStart(direction);
    const tail = META + JSON.stringify(metaText) + DATA + data + END;
    const sha = sha256Hex(new TextEncoder().encode(head + tail));
    return head + sha + tail;
  }

  function asciiJSON(value) {
    return JSON.stringify(value).replace(/[\u0080-\uffff]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`);
  }

  // The text of the file whose statement stored `object` (the page opened from disk
  // runs the file as a script: the browser lets it read no file's bytes there).
  function textOfObject(object) {
    const fields = ["direction", "sha256", "meta", "data"];
    if (object && typeof object === "object" && Number.isInteger(object.format) && object.format !== FORMAT) {
      throw new ModelFileError("format", `format ${object.format}, this code reads ${FORMAT} (a file whose hash covers every byte)`);
    }
    if (!object || typeof object !== "object" || object.format !== FORMAT ||
        fields.some((f) => typeof object[f] !== "string")) {
      throw damaged("it does not store a model file's object");
    }
    return headerLine(object.direction) + statementStart(object.direction) + object.sha256 + META +
      JSON.stringify(object.meta) + DATA + object.data + END;
  }

  // What to tell a reader about a model file that cannot be used (a ModelFileError,
  // or a reason in words), with how to restore it.
  function fileError(direction, err) {
    const file = `The ${direction ? direction + " model" : "model"} file`;
    const restore = `restore it with git checkout docs/translate/${direction || "<direction>"}.js ` +
      "(or export it again with python -m tools.export_model)";
    if (typeof err === "string") err = damaged(err);
    if (err.kind === "foreign") return new Error(`${file} is ${err.message}; ${restore}, or move it out of the way.`);
    if (err.kind === "format") return new Error(`${file} has ${err.message}; ${restore}.`);
    return new Error(`${file} is damaged: ${err.message}; ${restore}.`);
  }

  // The direction a model file names (its header line, or its object's), if any.
  function directionOf(source) {
    if (source instanceof Uint8Array) source = new TextDecoder("latin1").decode(source.subarray(0, 200));
    if (typeof source === "string") { const m = HEADER.exec(source); return m ? m[1] : null; }
    return source && typeof source.direction === "string" && /^[a-z]+-[a-z]+$/.test(source.direction)
      ? source.direction : null;
  }

  // `source`: the model file's bytes (a Uint8Array, as fetch() or Node's readFileSync
  // give them), its text, or the object its statement stored (globalThis.atkitModels[
  // direction], the page opened from disk). Every check of parseModelText, then the
  // data inflated and measured. options.direction: the direction the caller expects
  // (the page's messages name it); options.wasm = false: JavaScript loops only (the
  // page's fallback, for tests).
  async function load(source, options) {
    const expected = options && options.direction;
    let parsed;
    try {
      const text = typeof source === "string" || source instanceof Uint8Array ? source : textOfObject(source);
      parsed = parseModelText(text);
    } catch (err) {
      if (err instanceof ModelFileError) throw fileError(expected || directionOf(source), err);
      throw err;
    }
    const { direction, data, meta } = parsed;
    if (expected && expected !== direction) {
      throw fileError(expected, `it holds the ${direction} model`);
    }
    let blob;
    try {
      blob = await inflate(fromBase64(data));
    } catch (err) {
      throw fileError(direction, `its deflated data cannot be read (${err.message})`);
    }
    if (blob.length !== meta.size) throw fileError(direction, `${blob.length} bytes of data, ${meta.size} said`);
    return new Translator(Object.assign({ format: FORMAT, direction }, meta), blob, options);
  }

  root.atkitTranslator = {
    load, fileError, modelFileText, asciiJSON, InputError, searches: pageSearches, SpacyTokenizer, SentencePieceBPE, Transformer, fromBase64,
    inflate,
  };
})(typeof globalThis !== "undefined" ? globalThis : this);

// Node (the unit tests in tests/js) loads this file as a CommonJS module: the same API.
if (typeof module === "object" && module.exports) module.exports = globalThis.atkitTranslator;
