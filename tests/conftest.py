"""Shared test setup: the notebook's library cells, imported as one module, and the
fixtures and helpers that more than one test file uses.

The code under test lives only in annotated_transformer.md; nbexport.py writes its
non-demo cells to the module annotated_transformer_lib (the `lib` fixture), which the
pipeline (`pl`) runs. Tests run in the small `ci` preset (one torch thread, Setup's
rule for it). A test that reads Multi30k is in the `data` tier and finds it at
$MULTI30K_DIR (default: ../shared/data/multi30k beside the repository); the fast tier
reads none (`no_multi30k`) and gets its sentences, where it needs some, from
`toy_corpus`, made up here.

Helpers here: tiny runs (`tiny_run`, a trained Multi30k run shared by the session;
`COPY`, Part 5's copy task in a few steps), the training program's command line
(`run_program`, `refused`, `forbid`), other processes (`hold_lock`, `serve`), and file
systems that misbehave (`tmpfs`, `small_disk`, `read_only`, `fill_disk`,
`without_permission_override`). Mounting a tmpfs needs root: those tests are skipped,
with the reason, elsewhere.

The notebook executed as on Colab (`colab_run`, ci preset) starts in a process of its
own once the tests are collected; the tests that read it run last.

The page tests (test_page.py, test_attention_view.py) share one headless Chromium:
`browser`, session-wide, because Playwright's sync API runs one instance per thread.
"""

import contextlib
import errno
import functools
import http.server
import importlib
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import types
from pathlib import Path

import pytest

from tools import tier_coverage

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("AT_PRESET", "ci")
os.environ.setdefault(
    "MULTI30K_DIR", str((ROOT / ".." / "shared" / "data" / "multi30k").resolve())
)
# Multi30k's folder: the tests reach it through the `multi30k` fixture, which puts them
# in the `data` tier; the Colab-style run's kernel is told it here.
MULTI30K = Path(os.environ["MULTI30K_DIR"])
# Other runs' executed notebooks, which tests read (tests/test_claims.py): data, not
# notebooks for nbval to execute (`make test` hands it tests/ and the exercises).
collect_ignore = ["fixtures"]


COLLECTION_PROBES = ("_mock_name", "__test__", "__wrapped__", "__code__")


class _Lazy(types.ModuleType):
    """A module that is imported when one of its attributes is first read."""

    def __getattr__(self, attr):
        loaded = sys.modules.get(self.__name__)
        if loaded is None and attr in COLLECTION_PROBES or attr.startswith("__"):
            raise AttributeError(attr)  # what pytest asks of every name it collects
        return getattr(loaded or importlib.import_module(self.__name__), attr)

    def __setattr__(self, attr, value):
        raise TypeError(
            f"{self.__name__} is imported lazily here: change it by name, "
            f'monkeypatch.setattr("{self.__name__}.{attr}", ...)'
        )


def lazy(name: str) -> types.ModuleType:
    """The module `name`, imported at its first use: `torch = lazy("torch")` at the
    top of a test file keeps the collection of the tests from loading torch or the
    notebook (tests/test_structure.py checks that it loads neither). To change one
    of its attributes in a test, name it: monkeypatch.setattr("torch.compile", f)."""
    return _Lazy(name)


def inherited_pythonpath() -> list[str]:
    """This process's $PYTHONPATH entries outside the repository: where packages
    come from on a machine that installs them into a folder of their own (the GPU
    check's /tmp/site), not code of this checkout."""
    entries = os.environ.get("PYTHONPATH", "").split(os.pathsep)
    resolved = [Path(e).resolve() for e in entries if e]
    return [str(e) for e in resolved if e != ROOT and ROOT not in e.parents]


def clean_env(**extra) -> dict:
    """The environment of a child interpreter that must not inherit this one's
    settings: the ci preset, a plain PATH, the repository on PYTHONPATH, and only
    what locates installed packages and caches (the inherited PYTHONPATH entries,
    after the repository's; HOME and cache folders, so a child finds the caches,
    such as matplotlib's font list, that this process built, instead of building
    them again and saying so on stderr)."""
    env = {
        "AT_PRESET": "ci",
        "PATH": "/usr/bin:/bin",
        "PYTHONPATH": os.pathsep.join([str(ROOT), *inherited_pythonpath()]),
    }
    for name in ("HOME", "MPLCONFIGDIR", "XDG_CACHE_HOME"):
        if name in os.environ:
            env[name] = os.environ[name]
    return {**env, **extra}


# ------------------------------------------------------------------ test tiers

# What a test needs beyond the notebook's code (the markers of pytest.ini): a test that
# uses one of these fixtures, directly or through another fixture, is marked with its
# tier. A fixture of a test module joins with @needs(tier) under @pytest.fixture; a
# test that trains, starts processes or reads Multi30k in its own body carries the
# marker itself. A test with none of them is in the fast tier (`make test-fast`), which
# reads no Multi30k: `no_multi30k` fails a test of it that tries.
FIXTURE_TIERS = {
    "multi30k": "data",
    "data": "data",
    "colab_run": "notebook",
    "trained": "training",
    "tiny_run": "training",
    "copy_model": "training",
    "browser": "browser",
    "chromium_path": "browser",
}
SHARED_TIERS = ("training", "notebook")  # a fixture of these is made once, grouped
TIERS = tier_coverage.tiers()  # pytest.ini's markers: a test with none is fast


def needs(tier: str):
    """@needs("training") under @pytest.fixture: the tests that use the fixture are
    in that tier."""

    def register(fixture):
        FIXTURE_TIERS[fixture.__name__] = tier
        return fixture

    return register


class Tiers:
    """Marks each collected test with the tiers of the fixtures it uses, and puts
    the tests that share a trained run (or the Colab-style run) in one group, which
    the scheduler below gives to one pytest-xdist worker: nothing is trained twice.
    A notebook's nbval cells are one group too: they run in order in one kernel."""

    @pytest.hookimpl(tryfirst=True)  # before -m selects by the markers
    def pytest_collection_modifyitems(self, config, items):
        groups = {}
        for item in items:
            names = getattr(item, "fixturenames", ())
            tiers = {FIXTURE_TIERS.get(f) for f in names}
            shared = [f for f in FIXTURE_TIERS if f in names]
            shared = [
                f for f in shared if FIXTURE_TIERS[f] in SHARED_TIERS and f != "trained"
            ]
            if item.path.suffix == ".ipynb":  # nbval executes the notebook's cells
                tiers.add("notebook")
                shared = [item.path.name]
            for tier in sorted(tiers - {None}):
                item.add_marker(tier)
            if shared:  # the first in FIXTURE_TIERS' order: colab_run before runs
                groups[item.nodeid] = shared[0]
        if hasattr(config, "workerinput"):  # for the scheduler (WorkGroups)
            # the groups first: a trained run's tests start early and the others
            # fill in around them (the Colab-style run's tests go last, below)
            items.sort(key=lambda item: item.nodeid not in groups)
            path = shared_tmp(config) / "groups.json"
            tmp = path.with_name(f"groups.{os.getpid()}.tmp")
            tmp.write_text(json.dumps(groups))
            os.replace(tmp, path)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(self, item, nextitem):
        """A test of the fast tier runs under `no_multi30k`, from the setup of its
        fixtures (a module's too) to their teardown."""
        if any(item.get_closest_marker(tier) for tier in TIERS):
            return (yield)
        with no_multi30k(item.nodeid, shared_tmp(item.config) / NO_MULTI30K):
            return (yield)


def pytest_configure(config):
    config.pluginmanager.register(Tiers(), "tiers")


NO_MULTI30K = "the-fast-tier-reads-no-Multi30k"  # $MULTI30K_DIR in the fast tier


@contextlib.contextmanager
def no_multi30k(nodeid: str, nowhere: Path):
    """While a test of the fast tier runs: $MULTI30K_DIR names `nowhere` (a folder
    that does not exist, so that a process the test starts cannot read the corpus
    either), and atkit.data refuses, with a pytest failure that says what to do, to
    hand out Multi30k's folder (`nowhere` or the real one) or to download it. The
    test fails the same way beside ../shared and in a clone without the data."""
    from atkit import data as corpus

    def refuse(what: str):
        pytest.fail(
            f"{nodeid} reads Multi30k ({what}), but it is in the fast tier, which "
            "needs no data: give it the `multi30k` fixture or @pytest.mark.data "
            "(pytest.ini; `make test` runs it, `make test-fast` leaves it out), or "
            "made-up sentences (`toy_corpus`, tests/conftest.py)"
        )

    blocked = {nowhere.resolve(), MULTI30K.resolve()}
    data_root, download = corpus.data_root, corpus.download_verified
    real_url = corpus.MULTI30K_URL

    def guarded_root(root=None):
        chosen = os.environ.get(corpus.MULTI30K_ENV) if root is None else root
        try:
            found = Path(chosen).expanduser().resolve() if chosen else None
        except (OSError, RuntimeError):  # a loop of links: data_root's own error
            found = None
        if found in blocked:
            refuse(f"atkit.data.data_root({root!r}) -> {chosen}")
        return data_root(root)

    def guarded_download(url, *args, **kwargs):
        if url.startswith(real_url):
            refuse(f"a download of {url}")
        return download(url, *args, **kwargs)

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(corpus.MULTI30K_ENV, str(nowhere))
        mp.setattr(corpus, "data_root", guarded_root)
        mp.setattr(corpus, "download_verified", guarded_download)
        yield


def pytest_xdist_make_scheduler(config, log):
    """pytest-xdist's loadscope scheduling with the groups of Tiers as its scopes (a
    test in no group is a scope of its own). xdist's own `--dist loadgroup` marks
    groups by renaming a test's node id, which pytest 9 no longer reads; the workers
    write the groups to a file instead, before they report their collection."""
    from xdist.scheduler import LoadScopeScheduling

    class WorkGroups(LoadScopeScheduling):
        """Scopes in the order of the collection (the groups first, the tests that
        await the Colab-style run last), not by their number of tests: a worker
        that waits for that run early would leave the other to do the rest."""

        groups = None

        def _split_scope(self, nodeid):
            if self.groups is None:
                path = shared_tmp(config) / "groups.json"
                self.groups = json.loads(path.read_text()) if path.exists() else {}
            return self.groups.get(nodeid, nodeid)

    config.option.loadscopereorder = False
    return WorkGroups(config, log)


@pytest.fixture(scope="session")
def lib():
    """The notebook's library code: the module annotated_transformer_lib (written
    again first if the notebook changed, so that the tests test the notebook)."""
    import nbexport

    nbexport.export()
    import annotated_transformer_lib as module

    module.torch.set_num_threads(module.runtime.torch_threads("ci"))
    return module


@pytest.fixture(scope="session")
def pl(lib):
    """The pipeline that runs the notebook's code: configs, data, resumable runs."""
    import pipeline

    return pipeline


@pytest.fixture(scope="session")
def multi30k() -> Path:
    """Multi30k's folder ($MULTI30K_DIR): a test that reads the corpus uses this
    fixture (or carries @pytest.mark.data), so it is in the `data` tier."""
    return MULTI30K


@pytest.fixture(scope="session")
def copy_model(lib):
    """Part 2's copy-task model, trained as the notebook trains it (to convergence)."""
    model, losses = lib.train_copy_task()
    return model, losses


def quiet(*args, **kwargs):
    """A `log` for train() that prints nothing."""


@pytest.fixture(scope="module")
def cfg(lib, request):
    """The ci preset with the calling test module's TINY settings."""
    import pipeline as pl

    return pl.run_config("ci", **request.module.TINY)


@pytest.fixture(scope="module")
def data(pl, cfg, multi30k):
    """Multi30k in the calling module's TINY settings."""
    return pl.prepare_data(cfg, multi30k)


# ------------------------------------------------------- made-up sentences

# For the tests that need sentence pairs, vocabularies or a data set but are about
# something else than Multi30k (the fast tier reads no Multi30k): 200 German-English
# pairs of one pattern, "Ein Hund läuft im Park." / "A dog runs in the park.", in a
# fixed shuffled order, split as Multi30k is. Made up here; no line of Multi30k.
TOY_WHO = [
    ("Ein Hund", "A dog"),
    ("Eine Frau", "A woman"),
    ("Ein Mann", "A man"),
    ("Ein Kind", "A child"),
    ("Ein Junge", "A boy"),
    ("Ein Mädchen", "A girl"),
    ("Eine Katze", "A cat"),
    ("Ein alter Mann", "An old man"),
]
TOY_DOES = [
    ("läuft", "runs"),
    ("sitzt", "sits"),
    ("spielt", "plays"),
    ("schläft", "sleeps"),
    ("wartet", "waits"),
]
TOY_WHERE = [
    ("auf der Wiese", "on the meadow"),
    ("im Park", "in the park"),
    ("am Strand", "on the beach"),
    ("vor dem Haus", "in front of the house"),
    ("neben dem roten Auto", "next to the red car"),
]
TOY_ROOT = Path("<made-up sentences: tests/conftest.py>")  # atkit.data's cache key
TOY_EVAL = 12  # pairs in val and in test_2016_flickr each


@functools.cache
def toy_splits() -> dict[str, tuple[list[str], list[str]]]:
    """{split: (German lines, English lines)} of the made-up corpus."""
    import random

    pairs = [
        (f"{de_who} {de_does} {de_where}.", f"{en_who} {en_does} {en_where}.")
        for de_who, en_who in TOY_WHO
        for de_does, en_does in TOY_DOES
        for de_where, en_where in TOY_WHERE
    ]
    random.Random(0).shuffle(pairs)
    cut = len(pairs) - 2 * TOY_EVAL
    parts = {
        "train": pairs[:cut],
        "val": pairs[cut : cut + TOY_EVAL],
        "test_2016_flickr": pairs[cut + TOY_EVAL :],
    }
    return {split: ([d for d, _ in p], [e for _, e in p]) for split, p in parts.items()}


@contextlib.contextmanager
def toy_corpus():
    """While it lasts, atkit.data reads the made-up corpus in place of Multi30k:
    `read_split`, and through it `prepare_data`, the programs and the exporter (each
    split's lines, as lists of their own). Yields the folder name that stands for it
    (TOY_ROOT)."""
    from atkit import data as corpus

    def read_split(split, root=None):
        de, en = toy_splits()[split]
        return list(de), list(en)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(corpus, "data_root", lambda root=None: TOY_ROOT)
        mp.setattr(corpus, "fetch_multi30k", lambda *args, **kwargs: TOY_ROOT)
        mp.setattr(corpus, "read_split", read_split)
        yield TOY_ROOT


@pytest.fixture
def on_toy_corpus():
    """The whole test reads the made-up corpus where it would read Multi30k."""
    with toy_corpus() as root:
        yield root


@pytest.fixture(scope="module")
def toy_data(pl, cfg):
    """`data` of the made-up corpus: prepare_data in the module's TINY settings."""
    with toy_corpus():
        return pl.prepare_data(cfg)


# ---------------------------------------------------------------- tiny runs

# A Multi30k run of Part 3 in a few seconds: 20 steps (about two epochs), evaluated at
# steps 8, 16 and 20, with prev.pt and the snapshots that averaging keeps.
RUN_TINY = {
    "n_train": 200,
    "n_eval": 16,
    "min_freq": 2,
    "max_tokens": 300,
    "N": 1,
    "d_model": 32,
    "d_ff": 64,
    "h": 2,
    "steps": 20,
    "eval_every": 8,
    "keep": 2,
    "warmup": 10,
    "max_len": 40,
    "max_sent_len": 40,
}


@pytest.fixture(scope="session")
def trained(lib, tmp_path_factory):
    """The factory of the small runs that tests share: `trained(task, max_steps,
    **settings)` trains the `ci` preset with `settings` changed on `task`
    ("multi30k" or Part 5's "copy"), stopped after `max_steps` if given, once per
    session for each distinct set of arguments, and returns cfg, data, folder,
    model and history. A test that changes the folder works on a copy (`copy_of`).
    The fixtures that name a run (tiny_run, stopped, ...) call it, and the tests that
    use one fixture go to one pytest-xdist worker (FIXTURE_TIERS)."""
    import pipeline as pl

    runs = {}

    def train(task="multi30k", max_steps=None, **settings):

        key = repr((task, max_steps, sorted(settings.items())))
        if key not in runs:
            cfg = pl.run_config("ci", **settings)
            data = lib.copy_task_data(cfg) if task == "copy" else pl.prepare_data(cfg)
            folder = tmp_path_factory.mktemp(f"trained-{task}") / "run"
            model, history = pl.train(
                cfg, data, folder, "cpu", max_steps=max_steps, log=quiet
            )
            runs[key] = types.SimpleNamespace(
                cfg=cfg, data=data, folder=folder, model=model, history=history
            )
        return runs[key]

    return train


@pytest.fixture(scope="session")
def tiny_run(trained):
    """The RUN_TINY run (cfg, data, folder, model, history)."""
    return trained(**RUN_TINY)


def copy_of(folder: Path, target: Path) -> Path:
    """A copy of a run's folder (without its lock file), to damage or resume."""
    shutil.copytree(folder, target, ignore=shutil.ignore_patterns(".lock"))
    return target


# Part 5's copy task: no corpus to read, a run of a few steps in a second or two.
COPY = {
    "n_train": 120,
    "n_eval": 16,
    "max_tokens": 160,
    "N": 1,
    "d_model": 16,
    "d_ff": 32,
    "h": 2,
    "steps": 8,
    "eval_every": 4,
    "keep": 2,
    "warmup": 10,
    "P_drop": 0.1,
}


def copy_cfg(lib, **changes):
    import pipeline as pl

    return pl.run_config("ci", **{**COPY, **changes})


def copy_args(ckpt_dir, settings=COPY, *extra, out=None) -> list[str]:
    """tools.train's arguments for a copy-task run into `ckpt_dir`; its results go
    to `out`, by default <ckpt_dir's name>.json beside it (one file per run folder:
    the program refuses a results file that another run's results hold)."""
    ckpt_dir = Path(ckpt_dir)
    args = ["--task", "copy", "--preset", "ci", "--device", "cpu"]
    args += ["--ckpt-dir", str(ckpt_dir)]
    args += ["--out", str(out or ckpt_dir.parent / f"{ckpt_dir.name}.json")]
    for key, value in settings.items():
        args += ["--set", f"{key}={value!r}"]
    return [*args, *map(str, extra)]


# ------------------------------------------------- the training program's command line


def forbid(lib, monkeypatch, *names):
    """Make each of the library's functions `names` fail the test when called (a
    dotted name is an attribute of a module the library imports, such as
    "kvcache.X"; "pipeline.X" is the pipeline's): NO_TRAINING forbids training;
    NO_DATA forbids reading the data too."""

    def fail(*args, **kwargs):
        pytest.fail(f"called one of {names} before the error")

    import pipeline

    for name in names:
        *path, attr = name.split(".")
        owner = pipeline if path[:1] == ["pipeline"] else lib
        for part in path[1:] if owner is pipeline else path:
            owner = getattr(owner, part)
        monkeypatch.setattr(owner, attr, fail)


# A Multi30k run of the ci preset in two steps, for the command line.
CLI_TINY = ["--preset", "ci", "--set", "n_train=100", "--set", "steps=2"]
CLI_TINY += ["--set", "eval_every=2"]
NO_TRAINING = ("run_epoch",)  # Part 2's loop, which every run trains in
NO_DATA = (*NO_TRAINING, "pipeline.prepare_data", "copy_task_data")


def run_program(argv, capsys) -> tuple[int, str, str]:
    """tools.train's program (`main`) on `argv`: (exit status, stdout, stderr).
    argparse's own errors leave it as SystemExit, whose code is the status."""
    from tools import train

    capsys.readouterr()
    try:
        status = train.main(argv)
    except SystemExit as err:
        status = err.code
    out, err = capsys.readouterr()
    return status, out, err


def error_line(err: str) -> str:
    """The one `error:` line a program ended with, after `error: `; fails unless
    there is exactly one and no traceback."""
    lines = [line for line in err.splitlines() if "error:" in line]
    assert len(lines) == 1, err[-3000:]
    assert "Traceback" not in err, err[-3000:]
    return lines[0].split("error: ", 1)[1]


def refused(argv, capsys, status=2) -> str:
    """Run the program, which must refuse `argv` with exit status `status` and one
    `error:` line; returns that line's message."""
    code, _, err = run_program(argv, capsys)
    assert code == status, (code, err[-3000:])
    return error_line(err)


# ------------------------------------------------------------ other processes

HOLD = (
    "import sys, time\n"
    "from atkit.files import FolderLock\n"
    "lock = FolderLock(sys.argv[1]).acquire()  # held while `lock` lives\n"
    "print('held', flush=True)\n"
    "time.sleep(float(sys.argv[2]))\n"
)


def hold_lock(folder, seconds):
    """Another process that takes the folder's lock and keeps it `seconds`."""
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(folder), str(seconds)],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout.readline() == "held\n"
    return proc


def serve(directory: Path):
    """Start an HTTP server for `directory`; returns (server, base url, request log)."""
    log = []

    class Handler(http.server.SimpleHTTPRequestHandler):
        def do_GET(self):
            log.append(self.path.lstrip("/"))
            super().do_GET()

        def log_message(self, *args):
            pass

    handler = functools.partial(Handler, directory=str(directory))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_port}", log


# ---------------------------------------------- file systems that misbehave


def mount_tmpfs(folder: Path, options: str) -> None:
    """Mount a tmpfs on `folder`, or skip the test saying why not."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root; this test runs as a user")
    folder.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(folder)],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.strip()}")


@pytest.fixture
def tmpfs(tmp_path):
    """tmpfs(name, size): a small file system of its own under tmp_path (a write
    that does not fit fails with ENOSPC), unmounted after the test."""
    mounted = []

    def make(name="disk", size="256k", read_only=False):
        folder = tmp_path / name
        mount_tmpfs(folder, f"size={size}" + (",ro" if read_only else ""))
        mounted.append(folder)
        return folder

    yield make
    for folder in reversed(mounted):
        subprocess.run(["umount", str(folder)], check=True)


@pytest.fixture
def small_disk(tmpfs):
    """A 64 KiB file system."""
    return tmpfs("small", "64k")


def fill_disk(folder: Path) -> Path:
    """Fill the file system of `folder` with one file until a write fails for want
    of space; returns that file."""
    filler = folder / "filler"
    with open(filler, "wb", buffering=0) as f:
        try:
            while True:
                f.write(b"\0" * 4096)
        except OSError as err:
            assert err.errno == errno.ENOSPC, err
    return filler


@pytest.fixture
def read_only(tmp_path):
    """A folder that cannot be written: a read-only tmpfs as root (root ignores
    permission bits), else a folder without write permission that already holds a
    writable `.lock` (so that taking the lock does not fail first)."""
    folder = tmp_path / "ro"
    if os.geteuid() == 0:
        mount_tmpfs(folder, "size=64k,ro")
        yield folder
        subprocess.run(["umount", str(folder)], check=True)
    else:
        folder.mkdir()
        (folder / ".lock").write_text("")
        (folder / ".lock").chmod(0o666)
        folder.chmod(0o555)
        yield folder
        folder.chmod(0o755)


def without_permission_override(argv: list[str]) -> list[str]:
    """`argv` run so that permission bits apply: as root, without the capabilities
    that let root read and write past them (setpriv); as a user, as it is."""
    if os.geteuid() != 0:
        return argv
    if not shutil.which("setpriv"):
        pytest.skip("root ignores permission bits, and setpriv is not here to stop it")
    return ["setpriv", "--bounding-set=-dac_override,-dac_read_search", *argv]


# ------------------------------------------- the notebook executed as on Colab

NOTEBOOK = ROOT / "annotated_transformer.ipynb"


def snapshot_repository(target):
    """A git repository holding this working tree's files (committed or not, ignored
    files left out): what the notebook's Setup cell clones."""
    listed = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split("\0")
    for name in filter(None, listed):
        if (ROOT / name).is_file():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, target / name)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(target)]
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "snapshot"]):
        subprocess.run(git + args, check=True)


# The run takes minutes on one core (the ci preset trains with one thread), and most
# other tests use one core too: it starts in a process of its own as soon as the tests
# are collected, and the tests that read it run last, so that the two share the cores.
EXECUTE = """
import os
import sys

import nbformat
from nbclient import NotebookClient

notebook, out, folder, status = sys.argv[1:]
nb = nbformat.read(notebook, as_version=4)
client = NotebookClient(
    nb, timeout=900, kernel_name="python3", resources={"metadata": {"path": folder}}
)
code = 1
try:
    client.execute()
    code = 0
finally:
    nbformat.write(nb, out)
    with open(status + ".tmp", "w") as f:
        f.write(str(code))
    os.replace(status + ".tmp", status)
"""


COLAB = pytest.StashKey()  # the run, once it has started


def shared_tmp(config) -> Path:
    """A folder that every process of this test session sees: pytest's base
    temporary folder, or with pytest-xdist (`make test` runs two workers) the one
    above the workers' own."""
    base = config._tmp_path_factory.getbasetemp()
    return base.parent if hasattr(config, "workerinput") else base


def once(config, name: str) -> tuple[Path, bool]:
    """(a folder named `name` in shared_tmp, whether this process made it first):
    of several pytest processes, the first does the work and the others wait."""
    folder = shared_tmp(config) / name
    try:
        folder.mkdir()
        return folder, True
    except FileExistsError:
        return folder, False


@pytest.hookimpl(trylast=True)  # after -k and -m have deselected what they do
def pytest_collection_modifyitems(session, config, items):
    """Tests that read `colab_run` go last, and the run starts now (in one process
    of the session); so does the installation of Chromium, where it is missing."""
    if config.option.collectonly:
        return
    if any(item.get_closest_marker("browser") for item in items):
        start_chromium_install(config)
    late = [item for item in items if "colab_run" in getattr(item, "fixturenames", ())]
    if not late:
        return
    items[:] = [item for item in items if item not in late] + late
    folder, first = once(config, "colab")
    if first:
        run = start_colab_run(folder)
        config.stash[COLAB] = run
        config.add_cleanup(lambda: stop(run))
    else:
        config.stash[COLAB] = types.SimpleNamespace(proc=None, folder=folder)


def pytest_sessionfinish(session, exitstatus):
    """A run that another process of the session may still read is awaited, unless
    the tests were stopped (then the cleanup stops it)."""
    run = session.config.stash.get(COLAB, None)
    finished = exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED)
    if run is not None and run.proc is not None and finished and not session.shouldstop:
        run.proc.wait()


def stop(run):
    """The run stopped if the tests end before it does (stopped, or failed with -x)."""
    if run.proc.poll() is None:
        os.killpg(run.proc.pid, 9)
        run.proc.wait()


def colab_env(repo) -> dict:
    """The environment of a kernel that runs a notebook as Colab does, cloning `repo`
    (a file:// stand-in for GitHub): the checkout is not importable (the Setup cell
    fetches it); packages stay where this machine keeps them (the GPU check's
    /tmp/site is on PYTHONPATH); the ci preset."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if inherited_pythonpath():
        env["PYTHONPATH"] = os.pathsep.join(inherited_pythonpath())
    env.update(
        AT_REPO_URL=f"file://{repo}",
        AT_PRESET="ci",
        AT_PROGRESS="0",
        MULTI30K_DIR=str(MULTI30K),
    )
    return env


def start_colab_run(tmp, notebook=NOTEBOOK):
    """The .ipynb `notebook` executed as Colab runs it, in a process of its own: the
    file alone in an empty folder, its Setup cell cloning this working tree from a
    file:// URL, every cell in a fresh kernel, the ci preset. When it ends it writes
    its exit status to `status` in `tmp` (for the other processes of the session)."""
    if shutil.which("git") is None:
        pytest.fail("git is needed: the Setup cell clones the repository with it")
    repo = tmp / "github"
    repo.mkdir()
    snapshot_repository(repo)
    colab = tmp / "content"
    colab.mkdir()
    shutil.copy(notebook, colab / notebook.name)
    env = colab_env(repo)
    executed = tmp / "executed.ipynb"
    args = [notebook.name, str(executed), str(colab), str(tmp / "status")]
    log = tmp / "run.log"
    with log.open("w") as out:  # a file, not a pipe that could fill and block it
        proc = subprocess.Popen(
            [sys.executable, "-c", EXECUTE, *args],
            cwd=colab,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its kernel goes with it if the tests are stopped
        )
    (tmp / "pid").write_text(str(proc.pid))
    return types.SimpleNamespace(proc=proc, folder=tmp)


def wait_for_status(folder: Path, what: str) -> int:
    """The exit status that another process's run wrote to folder/status, once it
    has; fails the test if that process is gone without writing one."""
    status, pid = folder / "status", folder / "pid"
    while not status.exists():
        if pid.exists() and not Path(f"/proc/{pid.read_text().strip()}").exists():
            if not status.exists():
                pytest.fail(
                    f"{what} (process {pid.read_text()}) ended without a status"
                )
        time.sleep(1)
    return int(status.read_text().strip() or 1)


@pytest.fixture(scope="session")
def colab_run(request):
    """The Colab-style run, started when the tests were collected, awaited here.
    Returns `nb` (the executed notebook), `folder` (Colab's /content: the
    notebook, and the clone in at-repo/) and `repo` (what it cloned)."""
    import nbformat

    config = request.config
    run = config.stash.get(COLAB, None)
    if run is None:  # the fixture asked for in another way: start it now
        folder, first = once(config, "colab")
        run = types.SimpleNamespace(proc=None, folder=folder)
        if first:
            run = start_colab_run(folder)
            config.add_cleanup(lambda: stop(run))
        config.stash[COLAB] = run
    if run.proc is not None:
        run.proc.wait()
    if wait_for_status(run.folder, "the Colab-style run"):
        output = (run.folder / "run.log").read_text(errors="replace")
        pytest.fail(f"the Colab-style run failed:\n{output[-4000:]}")
    return types.SimpleNamespace(
        nb=nbformat.read(run.folder / "executed.ipynb", 4),
        folder=run.folder / "content",
        repo=run.folder / "github",
    )


def add_commit(repo, name: str, text: str) -> str:
    """A new commit in the stand-in for GitHub (a file written); its short hash."""
    (Path(repo) / name).write_text(text)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(repo)]
    for args in (["add", name], ["commit", "-q", "-m", f"add {name}"]):
        subprocess.run(git + args, check=True)
    head = subprocess.run(
        git + ["rev-parse", "--short", "HEAD"], capture_output=True, text=True
    )
    return head.stdout.strip()


def restarted_session(folder, repo, cells, timeout=600):
    """`cells` (code) run in a fresh kernel in `folder`, as after Colab's "Restart
    session": the disk, with at-repo/ and its checkpoints, is as the last session
    left it. Returns the executed notebook."""
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.v4.new_notebook(
        cells=[nbformat.v4.new_code_cell(source) for source in cells],
        metadata={"kernelspec": {"name": "python3", "display_name": "Python 3"}},
    )
    client = NotebookClient(
        nb,
        timeout=timeout,
        kernel_name="python3",
        allow_errors=True,  # every cell runs; the caller counts the errors
        resources={"metadata": {"path": folder}},
    )
    client.execute(cwd=str(folder), env=colab_env(repo))
    return nb


def cell_errors(nb) -> list[str]:
    """Each error output of an executed notebook, as 'Name: value'."""
    return [
        f"{o.ename}: {o.evalue}"
        for c in nb.cells
        for o in c.get("outputs", [])
        if o.output_type == "error"
    ]


# ----------------------------------------------- headless Chromium (page tests)

CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def _pinned(package: str) -> str:
    req = ROOT / "requirements.txt"
    if req.is_file():
        for line in req.read_text().splitlines():
            name = re.split(r"[=<>!~\[; ]", line.strip(), maxsplit=1)[0]
            if name.lower() == package:
                return line.split("#")[0].strip()
    pytest.fail(f"{package} is not importable and not pinned in requirements.txt")


def _find_chromium() -> str | None:
    for name in (os.environ.get("CHROMIUM"), "chromium", "chromium-browser"):
        if name and (path := shutil.which(name)):
            return path
    return None


APT = (["apt-get", "update", "-q"], ["apt-get", "install", "-y", "-q", "chromium"])
CHROMIUM = pytest.StashKey()  # the folder of the installation, once it has started


def start_chromium_install(config) -> None:
    """Where Chromium is missing and this is root, its installation with apt-get
    starts as the tests are collected, in one process of the session, so that it
    downloads while other tests run (about a minute and a half on a fresh machine)."""
    if _find_chromium() or os.geteuid() != 0 or shutil.which("apt-get") is None:
        return
    folder, first = once(config, "chromium")
    config.stash[CHROMIUM] = folder
    if not first:
        return
    script = " && ".join(" ".join(cmd) for cmd in APT)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    log = (folder / "apt.log").open("w")
    proc = subprocess.Popen(
        [
            "bash",
            "-c",
            f"{script}; echo $? > {folder}/status.tmp; "
            f"mv {folder}/status.tmp {folder}/status",
        ],
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
        start_new_session=True,
    )
    (folder / "pid").write_text(str(proc.pid))


@pytest.fixture(scope="session")
def chromium_path(request) -> str:
    path = _find_chromium()
    if path:
        return path
    if os.geteuid() != 0:
        pytest.fail("Chromium is missing; install it: sudo apt-get install -y chromium")
    folder = request.config.stash.get(CHROMIUM, None)
    if folder is None:  # not started at collection: install it now
        start_chromium_install(request.config)
        folder = request.config.stash[CHROMIUM]
    if wait_for_status(folder, "apt-get install chromium"):
        log = (folder / "apt.log").read_text(errors="replace")
        pytest.fail(f"installing Chromium with apt-get failed:\n{log[-2000:]}")
    path = _find_chromium()
    assert path, "apt-get installed chromium but it is not on PATH"
    return path


@pytest.fixture(scope="session")
def browser(chromium_path):
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pin = _pinned("playwright")
        subprocess.run(
            [sys.executable, "-m", "pip", "install", "-q", pin],
            check=True,
            stdin=subprocess.DEVNULL,
        )
        from playwright.sync_api import sync_playwright
    with sync_playwright() as pw:
        chrome = pw.chromium.launch(executable_path=chromium_path, args=CHROMIUM_FLAGS)
        yield chrome
        chrome.close()
