"""Multi30k's six files: verified against the notebook's digests wherever they come
from, downloaded once into the cache (under a lock, with a deadline, never left half
written), and every way of not getting them reported in one message that names the
files and the two ways out (MULTI30K_DIR, or a network).

Downloads are served from 127.0.0.1 (a copy of $MULTI30K_DIR, a server that trickles,
one that never answers); nothing here reaches the internet.
"""

import http.server
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
import types

import pytest

from atkit import data as corpus
from atkit import files
from atkit.settings import ConfigError
from conftest import (
    CLI_TINY,
    NO_TRAINING,
    ROOT,
    clean_env,
    error_line,
    forbid,
    hold_lock,
    quiet,
    refused,
    serve,
    without_permission_override,
)

FILES = [
    f"{s}.{lang}.gz"
    for s in ("train", "val", "test_2016_flickr")
    for lang in ("de", "en")
]


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """No MULTI30K_DIR; an empty cache under XDG_CACHE_HOME."""
    monkeypatch.delenv("MULTI30K_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    return tmp_path / "xdg" / "annotated-transformer" / "multi30k"


@pytest.fixture
def mirror(multi30k):
    server, url, log = serve(multi30k)
    yield url, log
    server.shutdown()
    server.server_close()


@pytest.fixture
def offline_url():
    with socket.socket() as s:  # a port that nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def copy_of_data(multi30k, folder):
    folder.mkdir(exist_ok=True)
    for name in FILES:
        shutil.copy(multi30k / name, folder / name)
    return folder


# ---------------------------------------------------------------- verified files


def test_shared_data_matches_notebook_digests(multi30k):
    assert sorted(corpus.MULTI30K_SHA256) == sorted(FILES)
    assert corpus.fetch_multi30k() == multi30k
    for name, digest in corpus.MULTI30K_SHA256.items():
        assert corpus.sha256sum(multi30k / name) == digest


def test_download_verifies_and_caches(cache, mirror, multi30k):
    url, log = mirror
    assert corpus.fetch_multi30k(base_url=url) == cache
    assert sorted(log) == sorted(FILES)
    for name in FILES:
        assert (cache / name).read_bytes() == (multi30k / name).read_bytes()
    assert corpus.fetch_multi30k(base_url=url) == cache
    assert len(log) == len(FILES), "a verified cache must not be downloaded again"
    names = sorted(p.name for p in cache.iterdir() if p.name != ".lock")
    assert names == sorted(FILES), "stray temp files"


def test_default_url_is_the_multi30k_repository(cache, mirror, monkeypatch):
    assert corpus.MULTI30K_URL.startswith("https://raw.githubusercontent.com/multi30k/")
    url, log = mirror
    monkeypatch.setattr(corpus, "MULTI30K_URL", url)
    assert corpus.fetch_multi30k() == cache and sorted(log) == sorted(FILES)


@pytest.mark.parametrize("damage", ["truncate", "flip"])
def test_corrupted_cache_is_fetched_again(cache, mirror, multi30k, damage):
    url, log = mirror
    corpus.fetch_multi30k(base_url=url)
    path = cache / "train.en.gz"
    blob = bytearray(path.read_bytes())
    if damage == "truncate":
        blob = blob[: len(blob) // 2]
    else:
        blob[len(blob) // 2] ^= 0xFF
    path.write_bytes(bytes(blob))
    log.clear()
    corpus.fetch_multi30k(base_url=url)
    assert log == ["train.en.gz"]
    assert path.read_bytes() == (multi30k / "train.en.gz").read_bytes()


def test_download_with_wrong_content_is_rejected(cache, multi30k, tmp_path):
    bad = copy_of_data(multi30k, tmp_path / "bad_mirror")
    (bad / "test_2016_flickr.de.gz").write_bytes(b"something else")
    server, url, _ = serve(bad)
    try:
        with pytest.raises(corpus.DataUnavailableError, match="test_2016_flickr.de.gz"):
            corpus.fetch_multi30k(base_url=url)
    finally:
        server.shutdown()
        server.server_close()
    assert not (cache / "test_2016_flickr.de.gz").exists()
    assert (cache / "train.de.gz").exists()


def test_an_explicit_data_folder_is_checked_too(lib, multi30k, tmp_path):
    import pipeline as pl

    folder = copy_of_data(multi30k, tmp_path / "data")
    blob = bytearray((folder / "val.en.gz").read_bytes())
    blob[len(blob) // 2] ^= 0xFF
    (folder / "val.en.gz").write_bytes(bytes(blob))
    cfg = pl.run_config("ci", n_train=50)
    with pytest.raises(corpus.DataUnavailableError, match="corrupted.*val.en.gz"):
        pl.prepare_data(cfg, root=folder)
    with pytest.raises(corpus.DataUnavailableError, match="val.en.gz"):
        corpus.read_split("val", root=folder)


def test_read_split_knows_its_splits(lib):
    with pytest.raises(ConfigError, match="split"):
        corpus.read_split("test_2017")


# ------------------------------------------------ no data: one message, two ways out


def test_offline_error_names_files_and_variable(cache, offline_url):
    with pytest.raises(corpus.DataUnavailableError) as err:
        corpus.fetch_multi30k(base_url=offline_url)
    message = str(err.value)
    assert "MULTI30K_DIR" in message
    for name in FILES:
        assert name in message
    left = [p.name for p in cache.iterdir() if p.name != ".lock"]
    assert not left, f"no partial files may be left behind: {left}"


def test_offline_with_corrupted_cache_is_an_error(cache, mirror, offline_url):
    url, _ = mirror
    corpus.fetch_multi30k(base_url=url)
    (cache / "val.de.gz").write_bytes(b"not gzip")
    with pytest.raises(corpus.DataUnavailableError) as err:
        corpus.fetch_multi30k(base_url=offline_url)
    message = str(err.value)
    assert "val.de.gz" in message and "MULTI30K_DIR" in message
    assert "train.de.gz" not in message, "only the damaged file is missing"


def test_local_folder_without_the_files(multi30k, tmp_path, monkeypatch):
    monkeypatch.setenv("MULTI30K_DIR", str(tmp_path))
    (tmp_path / "val.en.gz").write_bytes((multi30k / "val.en.gz").read_bytes())
    with pytest.raises(corpus.DataUnavailableError) as err:
        corpus.fetch_multi30k()
    message = str(err.value)
    assert "MULTI30K_DIR" in message and str(tmp_path) in message
    assert "train.de.gz" in message and "val.en.gz" not in message


def _file(t):
    (t / "data").write_text("x")
    return t / "data"


def _empty(t):
    (t / "data").mkdir()
    return t / "data"


def _loop(t):
    (t / "loop").symlink_to(t / "loop")
    return t / "loop"


@pytest.mark.parametrize(
    "make, words",
    [
        (_file, "a file, not a folder"),
        (_empty, "missing ['train.de.gz'"),
        (lambda t: t / "data", "no such folder"),
        (_loop, "loop"),  # issue 47
    ],
)
def test_a_multi30k_dir_without_the_data_is_refused(
    lib, tmp_path, monkeypatch, capsys, make, words
):
    folder = make(tmp_path)
    monkeypatch.setenv("MULTI30K_DIR", str(folder))
    forbid(lib, monkeypatch, *NO_TRAINING)
    args = ["--ckpt-dir", str(tmp_path / "run"), "--out", str(tmp_path / "r.json")]
    message = refused([*CLI_TINY, *args], capsys)
    for word in (str(folder), words, "MULTI30K_DIR"):
        assert word in message, (word, message)
    assert not (tmp_path / "run").exists()


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="no /proc here")
def test_a_cache_folder_that_cannot_be_made_is_refused(
    lib, tmp_path, monkeypatch, capsys
):
    """XDG_CACHE_HOME=/proc, MULTI30K_DIR unset (issue 47): the download cache
    cannot be created; the message names it and both ways out."""
    monkeypatch.delenv("MULTI30K_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", "/proc")
    forbid(lib, monkeypatch, *NO_TRAINING)
    args = ["--ckpt-dir", str(tmp_path / "run"), "--out", str(tmp_path / "r.json")]
    message = refused([*CLI_TINY, *args], capsys)
    for word in ("/proc/annotated-transformer/multi30k", "cannot be created"):
        assert word in message, (word, message)
    assert "XDG_CACHE_HOME" in message and "MULTI30K_DIR" in message


@pytest.mark.process
def test_data_files_without_read_permission_are_refused(multi30k, tmp_path):
    """Run as a program, so that the permission bits apply to root too."""
    folder = copy_of_data(multi30k, tmp_path / "data")
    (folder / "val.en.gz").chmod(0o000)
    argv = [sys.executable, "-m", "tools.train", *CLI_TINY]
    argv += ["--ckpt-dir", str(tmp_path / "run"), "--out", str(tmp_path / "r.json")]
    proc = subprocess.run(
        without_permission_override(argv),
        capture_output=True,
        text=True,
        env=clean_env(MULTI30K_DIR=str(folder)),
        cwd=ROOT,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 2, proc.stderr[-3000:]
    message = error_line(proc.stderr)
    for word in ("val.en.gz (Permission denied)", "MULTI30K_DIR"):
        assert word in message, (word, message)
    assert not (tmp_path / "r.json").exists()


# ------------------------------------------- a download with a deadline and progress


def start_server(handler):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_port}"


class Trickle(http.server.BaseHTTPRequestHandler):
    """Announces 1 MB and sends one byte every 0.2 s: never slow enough for a read
    timeout, never done."""

    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Length", "1000000")
        self.end_headers()
        try:
            for _ in range(3000):
                self.wfile.write(b"x")
                self.wfile.flush()
                time.sleep(0.2)
        except OSError:
            pass

    def log_message(self, *args):
        pass


@pytest.fixture
def trickle():
    server, url = start_server(Trickle)
    yield url
    server.shutdown()
    server.server_close()


@pytest.fixture
def silent():
    """A server that accepts connections and never answers: its url, and the
    connections it holds."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    held = []

    def accept():
        while True:
            try:
                held.append(sock.accept()[0])
            except OSError:
                return

    threading.Thread(target=accept, daemon=True).start()
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    yield types.SimpleNamespace(url=url, connections=held)
    sock.close()
    for conn in held:
        conn.close()


def test_a_trickling_server_is_cut_off_by_the_deadline(monkeypatch, tmp_path, trickle):
    monkeypatch.delenv("MULTI30K_DIR")
    cache, messages = tmp_path / "cache", []
    with pytest.raises(corpus.DataUnavailableError) as err:  # the deadline, not the
        corpus.fetch_multi30k(  # 5 s timeout: the server sends a byte at a time
            trickle, cache, timeout=5, deadline_s=1.5, log=messages.append
        )
    message = str(err.value)
    assert "deadline_s=1.5" in message and "MULTI30K_DIR" in message
    for name in corpus.MULTI30K_SHA256:
        assert name in message
    assert messages[0].startswith("downloading train.de.gz")
    assert not list(cache.glob("*.part")), "an interrupted download left a .part"


def test_a_slow_download_reports_its_progress(tmp_path, trickle):
    messages = []
    with pytest.raises(TimeoutError, match="deadline"):
        corpus.download_verified(
            f"{trickle}/train.de.gz",
            tmp_path / "train.de.gz",
            "0" * 64,
            timeout=5,
            deadline=time.monotonic() + 1.2,
            log=messages.append,
            every_s=0.3,
        )
    progress = [m for m in messages if "train.de.gz:" in m and "of 1.00 MB" in m]
    assert len(progress) >= 2, messages
    assert not list(tmp_path.iterdir())


def test_a_server_that_never_answers_fails_fast(monkeypatch, tmp_path, silent):
    monkeypatch.delenv("MULTI30K_DIR")
    cache, messages = tmp_path / "cache", []
    with pytest.raises(corpus.DataUnavailableError) as err:
        corpus.fetch_multi30k(
            silent.url, cache, timeout=0.5, deadline_s=60, log=messages.append
        )
    # the first file's timeout ends the attempt: one connection, not one per file
    assert len(silent.connections) == 1, silent.connections
    assert "timed out" in str(err.value)
    assert messages, "the attempt says what it is doing"
    for name in corpus.MULTI30K_SHA256:
        assert name in str(err.value)
    assert not list(cache.glob("*.part"))


def test_part_files_of_an_interrupted_download_are_removed(
    multi30k, monkeypatch, tmp_path
):
    monkeypatch.delenv("MULTI30K_DIR")
    cache = tmp_path / "cache"
    cache.mkdir()
    stale = [cache / "train.de.gzk3j2.part", cache / "val.en.gz_x.part"]
    for path in stale:
        path.write_bytes(b"half a download")
    server, url, _ = serve(multi30k)
    try:
        assert corpus.fetch_multi30k(url, cache, log=quiet) == cache
    finally:
        server.shutdown()
        server.server_close()
    assert not any(p.exists() for p in stale)
    assert sorted(p.name for p in cache.iterdir()) == sorted(
        [".lock", *corpus.MULTI30K_SHA256]
    )


def test_a_second_download_waits_for_the_first(monkeypatch, tmp_path):
    monkeypatch.delenv("MULTI30K_DIR")
    cache = tmp_path / "cache"
    holder = hold_lock(cache, 600)
    try:
        start = time.monotonic()
        with pytest.raises(files.FolderBusyError, match="download of Multi30k"):
            corpus.fetch_multi30k("http://127.0.0.1:9", cache, deadline_s=0.5)
        assert time.monotonic() - start >= 0.5
    finally:
        holder.kill()
        holder.wait()
