"""The test tiers (pytest.ini's markers, tests/conftest.py): the fast tier is every
test without a marker, in the Makefile and in tools.tier_coverage alike, and it reads
no Multi30k: a test of it that tries fails saying what to do, and a clone without
the data passes it."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from atkit import data as corpus
from conftest import MULTI30K, NO_MULTI30K, ROOT, TIERS, clean_env
from tools import tier_coverage


def test_the_fast_tier_is_every_test_without_a_marker(request):
    """pytest.ini's markers (before pytest's and its plugins'), the Makefile's FAST
    and tools.tier_coverage's agree."""
    names = [line.split(":")[0].strip() for line in request.config.getini("markers")]
    assert names[: len(TIERS)] == TIERS
    assert "data" in TIERS, "a test that reads Multi30k has a tier of its own"
    fast = f"not ({' or '.join(TIERS)})"
    (makefile,) = re.findall(r"^FAST := (.*)$", (ROOT / "Makefile").read_text(), re.M)
    assert makefile == fast == tier_coverage.FAST


def test_a_fast_test_that_reads_multi30k_fails_saying_what_to_do(
    pl, request, tmp_path, monkeypatch
):
    """This test is in the fast tier: $MULTI30K_DIR names a folder that does not
    exist, and every way to the corpus (the library's, a program's, the real folder
    named outright, a download) ends in a failure that names the test and the ways
    out. A folder of a test's own is still checked as before."""
    assert not any(request.node.get_closest_marker(t) for t in TIERS)
    nowhere = Path(os.environ["MULTI30K_DIR"])
    assert nowhere.name == NO_MULTI30K and not nowhere.exists()
    cfg = pl.run_config("ci", n_train=20, n_eval=4)
    for read in (
        lambda: corpus.read_split("val"),
        lambda: corpus.read_split("val", MULTI30K),
        lambda: corpus.fetch_multi30k(),
        lambda: pl.prepare_data(cfg),
        lambda: pl.prepare_data(cfg, MULTI30K),
    ):
        with pytest.raises(pytest.fail.Exception) as err:
            read()
        message = str(err.value)
        for words in (
            f"{request.node.nodeid} reads Multi30k",
            "fast tier",
            "the `multi30k` fixture or @pytest.mark.data",
            "`toy_corpus`",
        ):
            assert words in message, (words, message)
    monkeypatch.delenv("MULTI30K_DIR")  # the download cache, then the internet
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    with pytest.raises(
        pytest.fail.Exception, match=f"a download of {corpus.MULTI30K_URL}"
    ):
        corpus.fetch_multi30k(log=lambda line: None)
    with pytest.raises(corpus.DataUnavailableError, match="no such folder"):
        corpus.read_split("val", tmp_path / "mine")


@pytest.mark.process
def test_the_fast_tier_passes_without_multi30k(tmp_path):
    """The fast tier of the test files that mix both kinds, in a pytest process
    whose $MULTI30K_DIR is an empty folder, as in a clone with no data beside it:
    the tests that need the corpus are left out, the others pass."""
    empty = tmp_path / "no-data"
    empty.mkdir()
    files = ["tests/test_multi30k.py", "tests/test_heads.py", "tests/test_tiers.py"]
    argv = [sys.executable, "-m", "pytest", *files, "-m", tier_coverage.FAST, "-q"]
    argv += ["-p", "no:cacheprovider", "--basetemp", str(tmp_path / "pytest")]
    proc = subprocess.run(
        argv,
        capture_output=True,
        text=True,
        env=clean_env(MULTI30K_DIR=str(empty)),
        cwd=ROOT,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    summary = proc.stdout.strip().splitlines()[-1]
    counts = {word: int(n) for n, word in re.findall(r"(\d+) (\w+)", summary)}
    assert counts.get("passed", 0) > 10 and counts.get("deselected", 0) > 5, summary
    assert not {"failed", "error", "errors"} & set(counts), summary
