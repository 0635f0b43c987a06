"""Shared test setup: the notebook's library cells, imported as one module.

The code under test lives only in annotated_transformer.md; `nbexport.load` writes its
non-demo cells to build/annotated_transformer_lib.py and imports that file. Tests run
in the small `ci` preset (one torch thread, Setup's rule for it) and read Multi30k from
$MULTI30K_DIR (default: ../shared/data/multi30k beside the repository).

The page tests (test_page.py, test_attention_view.py) share one headless Chromium:
`browser`, session-wide, because Playwright's sync API runs one instance per thread.
"""

import os
import re
import shutil
import subprocess
import sys
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
    entries = [Path(e).resolve() for e in os.environ.get("PYTHONPATH", "").split(
        os.pathsep) if e]  # fmt: skip
    return [str(e) for e in entries if e != ROOT and ROOT not in e.parents]


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


# ------------------------------------------- the notebook executed as on Colab

NOTEBOOK = ROOT / "annotated_transformer.ipynb"


def snapshot_repository(target):
    """A git repository holding this working tree's files (committed or not, ignored
    files left out): what the notebook's Setup cell clones."""
    listed = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT,
        capture_output=True, text=True, check=True,
    ).stdout.split("\0")  # fmt: skip
    for name in filter(None, listed):
        if (ROOT / name).is_file():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, target / name)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(target)]
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "snapshot"]):
        subprocess.run(git + args, check=True)


@pytest.fixture(scope="session")
def colab_run(tmp_path_factory):
    """The .ipynb executed as Colab runs it, once per session: the file alone in an
    empty folder, its Setup cell cloning this working tree from a file:// URL, every
    cell in a fresh kernel, the ci preset. Returns `nb` (the executed notebook) and
    `folder` (Colab's /content: the notebook, and the clone in at-repo/)."""
    import nbformat
    from nbclient import NotebookClient

    if shutil.which("git") is None:
        pytest.fail("git is needed: the Setup cell clones the repository with it")
    tmp = tmp_path_factory.mktemp("colab")
    repo = tmp / "github"
    repo.mkdir()
    snapshot_repository(repo)
    colab = tmp / "content"
    colab.mkdir()
    shutil.copy(NOTEBOOK, colab / NOTEBOOK.name)
    nb = nbformat.read(colab / NOTEBOOK.name, as_version=4)
    # the checkout must not be importable (the Setup cell fetches it); packages stay
    # where this machine keeps them (the GPU check's /tmp/site is on PYTHONPATH)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if inherited_pythonpath():
        env["PYTHONPATH"] = os.pathsep.join(inherited_pythonpath())
    env.update(
        AT_REPO_URL=f"file://{repo}", AT_PRESET="ci", AT_PROGRESS="0",
        MULTI30K_DIR=str(DATA),
    )  # fmt: skip
    client = NotebookClient(
        nb, timeout=900, kernel_name="python3", resources={"metadata": {"path": colab}}
    )
    client.execute(cwd=str(colab), env=env)
    return types.SimpleNamespace(nb=nb, folder=colab)


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
            cmd, check=False, stdin=subprocess.DEVNULL, env=env,
            capture_output=True, text=True,
        )  # fmt: skip
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
