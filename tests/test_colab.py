"""The notebook as Colab runs it: the .ipynb alone in an empty folder, its Setup cell
fetching the repository (a file:// clone of this working tree stands in for GitHub),
the `ci` preset, every cell executed in a fresh kernel (the `colab_run` fixture of
tests/conftest.py, whose executed notebook tests/test_page.py renders too)."""


def test_the_notebook_runs_alone_as_on_colab(colab_run):
    nb, colab = colab_run.nb, colab_run.folder
    errors = [
        o for c in nb.cells for o in c.get("outputs", []) if o.output_type == "error"
    ]
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
