"""The notebook as Colab runs it: the .ipynb alone in an empty folder, its Setup cell
fetching the repository (a file:// clone of this working tree stands in for GitHub),
the `ci` preset, every cell executed in a fresh kernel."""

import os
import shutil
import subprocess

import nbformat
import pytest
from nbclient import NotebookClient

from conftest import DATA, ROOT, inherited_pythonpath

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


def test_the_notebook_runs_alone_as_on_colab(tmp_path):
    repo = tmp_path / "github"
    repo.mkdir()
    snapshot_repository(repo)
    colab = tmp_path / "content"
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
    errors = [o for c in nb.cells for o in c.get("outputs", [])
              if o.output_type == "error"]  # fmt: skip
    assert not errors, f"{errors[0].ename}: {errors[0].evalue}"
    setup = next(c for c in nb.cells if c.cell_type == "code")
    assert "git" in setup.source and "AT_REPO_URL" in setup.source
    assert (colab / "at-repo" / "atkit").is_dir(), "the Setup cell did not fetch"
    assert (colab / "at-repo" / "checkpoints" / "ci" / "part3" / "last.pt").exists()
    figures = [c for c in nb.cells if "show_figure(" in c.source]
    assert figures and all(
        any("image/png" in o.get("data", {}) for o in c.outputs) for c in figures
    ), "a figure did not display"
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert cell.get("execution_count"), cell.source[:80]


@pytest.fixture(autouse=True)
def _git_available():
    if shutil.which("git") is None:
        pytest.fail("git is needed: the Setup cell clones the repository with it")
