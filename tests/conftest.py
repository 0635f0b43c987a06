"""Shared test setup: the notebook's library cells, imported as one module, and the
fixtures and helpers that more than one test file uses.

The code under test lives only in annotated_transformer.md; `nbexport.load` writes its
non-demo cells to build/annotated_transformer_lib.py and imports that file. Tests run
in the small `ci` preset (one torch thread, Setup's rule for it) and read Multi30k from
$MULTI30K_DIR (default: ../shared/data/multi30k beside the repository).

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

import errno
import functools
import http.server
import os
import re
import shutil
import subprocess
import sys
import threading
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("AT_PRESET", "ci")
os.environ.setdefault(
    "MULTI30K_DIR", str((ROOT / ".." / "shared" / "data" / "multi30k").resolve())
)
DATA = Path(os.environ["MULTI30K_DIR"])


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


@pytest.fixture(scope="session")
def lib():
    """The notebook's library code as a module."""
    import nbexport

    module = nbexport.load()
    module.torch.set_num_threads(module.runtime.torch_threads("ci"))
    return module


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
    return lib.run_config("ci", **request.module.TINY)


@pytest.fixture(scope="module")
def data(lib, cfg):
    return lib.prepare_data(cfg)


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
def tiny_run(lib, tmp_path_factory):
    """The RUN_TINY run, trained once per session: cfg, data, folder, model, history.
    A test that changes the folder works on a copy (`copy_of`)."""
    cfg = lib.run_config("ci", **RUN_TINY)
    data = lib.prepare_data(cfg)
    folder = tmp_path_factory.mktemp("tiny-run")
    model, history = lib.train(cfg, data, folder, "cpu", log=quiet)
    return types.SimpleNamespace(
        cfg=cfg, data=data, folder=folder, model=model, history=history
    )


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
    return lib.run_config("ci", **{**COPY, **changes})


def copy_args(ckpt_dir, settings=COPY, *extra, out=None) -> list[str]:
    """tools.train's arguments for a copy-task run into `ckpt_dir`."""
    args = ["--task", "copy", "--preset", "ci", "--device", "cpu"]
    args += ["--ckpt-dir", str(ckpt_dir)]
    args += ["--out", str(out or Path(ckpt_dir).parent / "results.json")]
    for key, value in settings.items():
        args += ["--set", f"{key}={value!r}"]
    return [*args, *map(str, extra)]


# ------------------------------------------------- the training program's command line


def forbid(lib, monkeypatch, *names):
    """Make each of the library's functions `names` fail the test when called:
    ("run_epoch",) forbids training; add "prepare_data" and "copy_task_data" to
    forbid reading the data too."""

    def fail(*args, **kwargs):
        pytest.fail(f"called one of {names} before the error")

    for name in names:
        monkeypatch.setattr(lib, name, fail)


# A Multi30k run of the ci preset in two steps, for the command line.
CLI_TINY = ["--preset", "ci", "--set", "n_train=100", "--set", "steps=2"]
CLI_TINY += ["--set", "eval_every=2"]
NO_TRAINING = ("run_epoch",)
NO_DATA = ("run_epoch", "prepare_data", "copy_task_data")


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
import sys

import nbformat
from nbclient import NotebookClient

notebook, out, folder = sys.argv[1:]
nb = nbformat.read(notebook, as_version=4)
client = NotebookClient(
    nb, timeout=900, kernel_name="python3", resources={"metadata": {"path": folder}}
)
try:
    client.execute()
finally:
    nbformat.write(nb, out)
"""


COLAB = pytest.StashKey()  # the run, once it has started


@pytest.hookimpl(trylast=True)  # after -k and -m have deselected what they do
def pytest_collection_modifyitems(session, config, items):
    """Tests that read `colab_run` go last; the run itself starts now."""
    late = [item for item in items if "colab_run" in getattr(item, "fixturenames", ())]
    if not late or config.option.collectonly:
        return
    items[:] = [item for item in items if item not in late] + late
    run = start_colab_run(config._tmp_path_factory.mktemp("colab"))
    config.stash[COLAB] = run
    config.add_cleanup(lambda: stop(run))


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
        MULTI30K_DIR=str(DATA),
    )
    return env


def start_colab_run(tmp):
    """The .ipynb executed as Colab runs it, in a process of its own: the file alone
    in an empty folder, its Setup cell cloning this working tree from a file:// URL,
    every cell in a fresh kernel, the ci preset."""
    if shutil.which("git") is None:
        pytest.fail("git is needed: the Setup cell clones the repository with it")
    repo = tmp / "github"
    repo.mkdir()
    snapshot_repository(repo)
    colab = tmp / "content"
    colab.mkdir()
    shutil.copy(NOTEBOOK, colab / NOTEBOOK.name)
    env = colab_env(repo)
    executed = tmp / "executed.ipynb"
    args = [NOTEBOOK.name, str(executed), str(colab)]
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
    return types.SimpleNamespace(
        proc=proc, folder=colab, repo=repo, executed=executed, log=log
    )


@pytest.fixture(scope="session")
def colab_run(request):
    """The Colab-style run, started when the tests were collected, awaited here.
    Returns `nb` (the executed notebook), `folder` (Colab's /content: the
    notebook, and the clone in at-repo/) and `repo` (what it cloned)."""
    import nbformat

    run = request.config.stash.get(COLAB, None)
    if run is None:  # the fixture asked for in another way: start it now
        run = start_colab_run(request.config._tmp_path_factory.mktemp("colab"))
        request.config.stash[COLAB] = run
    if run.proc.wait():
        output = run.log.read_text(errors="replace")
        pytest.fail(f"the Colab-style run failed:\n{output[-4000:]}")
    nb = nbformat.read(run.executed, 4)
    return types.SimpleNamespace(nb=nb, folder=run.folder, repo=run.repo)


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


@pytest.fixture(scope="session")
def chromium_path() -> str:
    path = _find_chromium()
    if path:
        return path
    if os.geteuid() != 0:
        pytest.fail("Chromium is missing; install it: sudo apt-get install -y chromium")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for cmd in (
        ["apt-get", "update", "-q"],
        ["apt-get", "install", "-y", "-q", "chromium"],
    ):
        proc = subprocess.run(
            cmd,
            check=False,
            stdin=subprocess.DEVNULL,
            env=env,
            capture_output=True,
            text=True,
        )
        if proc.returncode != 0:
            pytest.fail(f"`{' '.join(cmd)}` failed:\n{proc.stderr[-2000:]}")
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
