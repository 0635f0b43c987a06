"""Multi30k task 1 and the steps around the notebook's vocabularies.

The second half of this module: spaCy's rule-based tokenizers (built once per
language), the tokenized splits (cached: the training split takes seconds and Part 4
needs it several times), framing with <s> and </s>, learning BPE pieces, the check of
the token budget, and each epoch's batch order. `pipeline.prepare_data` puts them
together with the notebook's vocabularies.

The files: the six raw files of the public multi30k
dataset repository, verified against their SHA-256 digests on every run.

A folder named by $MULTI30K_DIR is checked but never written to. Otherwise the files
are downloaded into the user's cache ($XDG_CACHE_HOME or ~/.cache) under a lock (two
notebooks starting together do not trip over each other); a download goes to a `.part`
file and is renamed only after its digest matches, so an interrupted or corrupted
download never sits under the final name, and `.part` files left by an interrupted
attempt are removed by the next one. The whole fetch has a deadline and reports its
progress; whatever could not be obtained is named in one error with the two ways out.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import os
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from atkit.files import FolderLock
from atkit.settings import ConfigError, check_setting

MULTI30K_URL = (
    "https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw"
)
MULTI30K_ENV = "MULTI30K_DIR"
MULTI30K_SHA256 = {
    "train.de.gz": "726e39b2fa9eb9ffb6dc763fb35a179f80fae06ffc5d28b6ace5faa883de28a6",
    "train.en.gz": "d79cfa999dd4c51d2cb42499b6796d5a882c3a8a961923c25a898c90f8bbd56f",
    "val.de.gz": "f0cba2f995189cf5770f29a8a9a537a3ad3f51657ad873405082ff6863a5e75a",
    "val.en.gz": "14f7d25ddd868909a9213e361768460edcacdd6ab9d1e77b92560dc10c10dc28",
    "test_2016_flickr.de.gz": (
        "9204244e408ccb38d2a55cfcd344df15005fc42a07a6e55ca6c52b6ababb8cc8"
    ),
    "test_2016_flickr.en.gz": (
        "611d361c6334bc7246101d48097c13cf5c4413c5befc793cc629934359d532d9"
    ),
}
SPLITS = ("train", "val", "test_2016_flickr")
EVAL_SPLITS = ("val", "test_2016_flickr")
LANGS = ("de", "en")
SPECIALS = ("<s>", "</s>", "<blank>", "<unk>")  # every vocabulary's first four ids
BOS, EOS, PAD, UNK = range(len(SPECIALS))


class DataUnavailableError(RuntimeError):
    """The Multi30k files could be neither found nor downloaded."""


def sha256sum(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def multi30k_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "annotated-transformer" / "multi30k"


def data_files() -> list[Path]:
    """The Multi30k files that a run would read, where fetch_multi30k looks for
    them ($MULTI30K_DIR, else the download cache), those that exist: what a program's
    output may not be written over (atkit.files.check_outputs). Nothing is fetched."""
    value = os.environ.get(MULTI30K_ENV)
    root = Path(value).expanduser() if value else multi30k_cache_dir()
    return [root / name for name in MULTI30K_SHA256 if (root / name).is_file()]


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def download_verified(
    url: str,
    dest: Path,
    sha256: str,
    *,
    timeout: float = 30,
    deadline: float | None = None,
    log=_stderr,
    every_s: float = 10.0,
) -> None:
    """Fetch `url` into `dest`, atomically, only if its SHA-256 is `sha256`.

    `timeout` bounds each wait for the server; `deadline` (a time.monotonic() value)
    bounds the whole download, also against a server that trickles bytes slowly or
    goes silent. A download that takes long says how far it got every `every_s`."""
    dest = Path(dest)
    fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=dest.name, suffix=".part")
    start = time.monotonic()

    def remaining() -> float:
        left = (
            timeout if deadline is None else min(timeout, deadline - time.monotonic())
        )
        if left <= 0:
            raise TimeoutError(f"{url}: the download's deadline passed")
        return left

    try:
        with os.fdopen(fd, "wb") as out:
            with urllib.request.urlopen(url, timeout=remaining()) as r:
                size, got = int(r.headers.get("Content-Length") or 0), 0
                sock = _socket_of(r)
                report = start + every_s
                while True:
                    wait = remaining()  # raises once the deadline has passed
                    if sock is not None:
                        sock.settimeout(wait)  # a silent server: no later than that
                    try:
                        chunk = r.read1(1 << 16)
                    except TimeoutError:
                        if deadline is not None and time.monotonic() > deadline - 0.1:
                            raise TimeoutError(
                                f"{url}: the download's deadline passed after "
                                f"{got} bytes"
                            ) from None
                        raise
                    if not chunk:
                        break
                    out.write(chunk)
                    got += len(chunk)
                    if time.monotonic() >= report:
                        report = time.monotonic() + every_s
                        of = f" of {size / 1e6:.2f}" if size else ""
                        log(
                            f"  {dest.name}: {got / 1e6:.2f}{of} MB after "
                            f"{time.monotonic() - start:.0f} s"
                        )
        digest = sha256sum(Path(tmp))
        if digest != sha256:
            raise ValueError(f"sha256 of {url} is {digest}, expected {sha256}")
        os.replace(tmp, dest)
        of = f" of {size / 1e6:.1f} MB" if size else ""
        log(
            f"downloaded {dest.name}: {got / 1e6:.1f} MB{of} in "
            f"{time.monotonic() - start:.1f} s"
        )
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def _socket_of(response):
    """The socket under an http.client response, if it can be reached (to tighten
    its timeout as the deadline nears); None otherwise."""
    raw = getattr(getattr(response, "fp", None), "raw", None)
    sock = getattr(raw, "_sock", None)
    return sock if hasattr(sock, "settimeout") else None


def verified_folder(root) -> Path:
    """`root` if it holds all six files with the right digests; else an error."""
    root = Path(root).expanduser()
    if not root.is_dir():
        problem = "a file, not a folder" if root.exists() else "no such folder"
    elif not os.access(root, os.X_OK):
        problem = "no permission to open the folder"
    else:
        missing, unreadable, corrupted = [], [], []
        for name, digest in MULTI30K_SHA256.items():
            if not (root / name).is_file():
                missing.append(name)
                continue
            try:
                if sha256sum(root / name) != digest:
                    corrupted.append(name)
            except OSError as err:
                unreadable.append(f"{name} ({err.strerror or err})")
        problem = "; ".join(
            f"{what} {names}"
            for what, names in (
                ("missing", missing),
                ("unreadable", unreadable),
                ("corrupted", corrupted),
            )
            if names
        )
    if problem:
        raise DataUnavailableError(
            f"{root}: {problem}. Point {MULTI30K_ENV} (or root=) at a folder with the "
            "Multi30k task-1 raw files, or unset it to download them."
        )
    return root


@functools.lru_cache(maxsize=8)
def _verified(root: str, stamp: tuple) -> Path:
    return verified_folder(root)  # hashing 3 MB once per folder and file state


def fetch_multi30k(
    base_url: str | None = None,
    cache_dir: Path | None = None,
    *,
    timeout: float = 30,
    deadline_s: float = 600,
    log=_stderr,
) -> Path:
    """Folder with verified Multi30k files: $MULTI30K_DIR, or the download cache."""
    if os.environ.get(MULTI30K_ENV):
        return data_root(os.environ[MULTI30K_ENV])
    check_setting("fetch_multi30k", "timeout", timeout, float, above=0)
    check_setting("fetch_multi30k", "deadline_s", deadline_s, float, above=0)
    base_url = base_url or MULTI30K_URL
    root = Path(cache_dir) if cache_dir else multi30k_cache_dir()
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise DataUnavailableError(
            f"the download cache {root} cannot be created ({err.strerror or err}); "
            f"set XDG_CACHE_HOME to a folder you may write, or {MULTI30K_ENV} to a "
            "folder that holds the Multi30k files"
        ) from err
    deadline = time.monotonic() + deadline_s
    failed = {}
    with FolderLock(root, "download of Multi30k").acquire(wait_s=deadline_s):
        for stale in root.glob("*.part"):  # an interrupted attempt's leftovers
            stale.unlink()
        for name, digest in MULTI30K_SHA256.items():
            path = root / name
            if path.is_file() and sha256sum(path) == digest:
                continue
            if time.monotonic() >= deadline:
                failed[name] = f"not tried: deadline_s={deadline_s} had passed"
                continue
            if any(isinstance(e, OSError) for e in failed.values()):
                failed[name] = "not tried: the server failed on the file before"
                continue
            log(f"downloading {name} from {base_url}")
            try:
                download_verified(
                    f"{base_url}/{name}",
                    path,
                    digest,
                    timeout=timeout,
                    deadline=deadline,
                    log=log,
                )
            except (OSError, ValueError) as err:  # URLError, TimeoutError: OSErrors
                failed[name] = err
    if failed:
        why = {
            k: v if isinstance(v, str) else f"{type(v).__name__}: {v}"
            for k, v in failed.items()
        }
        raise DataUnavailableError(
            f"could not download {sorted(failed)} from {base_url} into {root} "
            f"(timeout={timeout} s per wait, deadline_s={deadline_s} s in all): "
            f"{why}. Without internet access, set {MULTI30K_ENV} to a folder that "
            "holds these files."
        )
    return root


def data_root(root=None) -> Path:
    """A verified data folder: `root` if given (checked), else fetch_multi30k()."""
    if root is None:
        return fetch_multi30k()
    root = Path(root).expanduser()
    try:
        resolved = root.resolve()
    except (RuntimeError, OSError) as err:  # a loop of symbolic links
        raise DataUnavailableError(
            f"{root}: {err}; point {MULTI30K_ENV} (or root=) at a real folder with "
            "the Multi30k task-1 raw files"
        ) from err
    stamp = tuple(
        (p.stat().st_mtime_ns, p.stat().st_size) if p.is_file() else None
        for p in (root / n for n in MULTI30K_SHA256)
    )
    return _verified(str(resolved), stamp)


def read_split(split: str, root=None) -> tuple[list[str], list[str]]:
    """German and English sentences of `split` ('train', 'val', 'test_2016_flickr');
    line i of one language translates line i of the other."""
    check_setting("read_split", "split", split, str, choices=SPLITS)
    root = data_root(root)
    de, en = [], []
    for lang, lines in (("de", de), ("en", en)):
        with gzip.open(root / f"{split}.{lang}.gz", "rt", encoding="utf-8") as f:
            lines.extend(line.rstrip("\n") for line in f)
    if len(de) != len(en):
        raise ValueError(f"{split}: {len(de)} German but {len(en)} English lines")
    return de, en


# ------------------------------------------------------------------ the pipeline


@functools.cache
def tokenizer(lang: str):
    """spaCy's rule-based tokenizer of `lang` (`spacy.blank`: no model to download)."""
    import spacy

    return spacy.blank(lang).tokenizer


def tokenize_all(lang: str, texts: list[str]) -> list[list[str]]:
    """Tokenize many sentences at once; runs of spaces are not tokens."""
    return [
        [t.text for t in doc if not t.is_space]
        for doc in tokenizer(lang).pipe(texts, batch_size=1000)
    ]


@functools.lru_cache(maxsize=16)
def tokenized(split: str, lang: str, n: int | None, root: str) -> list[list[str]]:
    """spaCy tokens of the first n sentences of one side of a split (cached)."""
    de, en = read_split(split, root)
    return tokenize_all(lang, {"de": de, "en": en}[lang][:n])


@dataclass
class TranslationData:
    vocab_src: object
    vocab_tgt: object
    train: list[tuple[list[int], list[int]]]  # framed (source, target) ids
    val: list[tuple[list[int], list[int]]]  # the same, for the validation loss
    sources: dict[str, list[list[int]]]  # framed source ids of val and test
    text: dict[str, tuple[list[str], list[str]]]  # raw (source, reference) lines
    src_lang: str = "de"


def check_itos(itos) -> list[str]:
    """A vocabulary's list of tokens, checked: the specials first, no duplicates."""
    itos = list(itos)
    if tuple(itos[: len(SPECIALS)]) != SPECIALS:
        raise ValueError(f"a vocabulary starts with the specials {SPECIALS}")
    if len(set(itos)) != len(itos):
        raise ValueError("a vocabulary has no duplicates")
    return itos


def frame(ids: list[int]) -> list[int]:
    return [BOS, *ids, EOS]


def other_lang(lang: str) -> str:
    return LANGS[1 - LANGS.index(lang)]


def learn_bpe(lines: list[str], vocab_size: int) -> bytes:
    """A sentencepiece BPE model (its bytes) of `vocab_size` pieces learnt from
    `lines` in memory: every character kept (character_coverage=1.0), the text as it
    is (no normalisation), the specials at their ids, one thread (the same pieces on
    every machine). Too many pieces for the text is a ConfigError naming bpe_size."""
    import io

    import sentencepiece as spm

    out = io.BytesIO()
    try:
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(lines),
            model_writer=out,
            model_type="bpe",
            vocab_size=vocab_size,
            character_coverage=1.0,
            normalization_rule_name="identity",
            bos_id=BOS,
            eos_id=EOS,
            pad_id=PAD,
            unk_id=UNK,
            bos_piece=SPECIALS[BOS],
            eos_piece=SPECIALS[EOS],
            pad_piece=SPECIALS[PAD],
            unk_piece=SPECIALS[UNK],
            num_threads=1,
            minloglevel=2,
        )
    except RuntimeError as err:  # e.g. more pieces asked for than the text allows
        raise ConfigError(
            f"bpe_size={vocab_size}: sentencepiece could not learn that many pieces "
            f"from this text ({err}); choose another bpe_size"
        ) from None
    return out.getvalue()


def pair_lengths(pairs) -> list[tuple[int, int]]:
    """(source, target) lengths as the model sees them: the decoder's input and its
    labels are the target without its last and without its first id."""
    return [(len(s), len(t) - 1) for s, t in pairs]


def check_token_budget(cfg, pairs) -> None:
    """A budget that the longest training pair alone exceeds is an error: that pair
    would be a batch of its own, over the budget, in every epoch."""
    m = cfg.pad_multiple
    longest = max((-(-max(n) // m) * m for n in pair_lengths(pairs)), default=0)
    if longest > cfg.max_tokens:
        raise ConfigError(
            f"RunConfig.max_tokens={cfg.max_tokens} is less than the longest "
            f"training sentence, {longest} ids"
            + (f" (padded to a multiple of pad_multiple={m})" if m > 1 else "")
            + f": give max_tokens >= {longest}, or a smaller max_sent_len "
            f"(now {cfg.max_sent_len}) to leave the longer sentences out"
        )


def epoch_order(n_batches: int, seed: int, epoch: int) -> list[int]:
    """A permutation of range(n_batches) drawn from (seed, epoch) alone: the same
    after a restart without being stored, and in every process of a run."""
    import torch

    gen = torch.Generator().manual_seed((seed * 100_003 + epoch) % 2**63)
    return torch.randperm(n_batches, generator=gen).tolist()


def padding_fraction(pairs, batches) -> float:
    """The share of padding among the positions the model computes on, over both
    sides of `batches` (index lists into `pairs`)."""
    real = padded = 0
    for batch in batches:
        for side in (0, 1):
            lengths = [len(pairs[i][side]) for i in batch]
            real, padded = real + sum(lengths), padded + len(lengths) * max(lengths)
    return 1 - real / padded
