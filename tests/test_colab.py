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
        any("image/svg+xml" in o.get("data", {}) for o in c.outputs) for c in figures
    ), "a figure did not display"
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert cell.get("execution_count"), cell.source[:80]


def _texts(cell) -> list[str]:
    """A cell's outputs as text, the way nbval compares them (images aside; the
    pieces of one stream in a row joined, however the kernel happened to flush)."""
    texts, last = [], None
    for o in cell.get("outputs", []):
        if o.output_type == "stream" and last == o.name:
            texts[-1] += o.text
        elif o.output_type == "stream":
            texts.append(f"{o.name}: {o.text}")
        elif o.output_type in ("execute_result", "display_data"):
            texts.append(o.get("data", {}).get("text/plain", ""))
        last = o.name if o.output_type == "stream" else None
    return texts


def test_checked_cells_print_their_committed_outputs(colab_run):
    """Cells tagged `nbval-check-output` (masks, shapes, positional-encoding values)
    print in the fresh run exactly what the committed notebook holds: nbval's check,
    made on this run so that `make test` executes the notebook once."""
    import nbformat

    from conftest import NOTEBOOK

    committed = nbformat.read(NOTEBOOK, as_version=4)
    pairs = [
        (mine, fresh)
        for mine, fresh in zip(committed.cells, colab_run.nb.cells, strict=True)
        if "nbval-check-output" in mine.metadata.get("tags", [])
    ]
    assert len(pairs) >= 10, "the tagged cells went missing"
    for mine, fresh in pairs:
        assert _texts(fresh) == _texts(mine), mine.source[:80]


def test_a_restarted_session_reuses_its_clone_and_updates_it(colab_run):
    """Colab's "Restart session" keeps the disk. Setup, run again in a fresh kernel in
    the same folder, finds at-repo/ (a second clone would fail there), fast-forwards
    it to the newer commit that GitHub has by then, says so in one line, and the
    cells after it run; the run that part 3 saved is still found to resume from."""
    import subprocess

    from conftest import add_commit, cell_errors, restarted_session

    clone = colab_run.folder / "at-repo"
    before = subprocess.run(
        ["git", "-C", str(clone), "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    newer = add_commit(colab_run.repo, "NEWER.md", "pushed while Colab restarted\n")
    code = [c.source for c in colab_run.nb.cells if c.cell_type == "code"]
    resumes = (
        "from atkit import checkpoints\n"
        "root = runtime.checkpoint_root(RUNTIME.preset)\n"
        "print(checkpoints.resume_state(root / 'part3')[0])"
    )
    again = restarted_session(colab_run.folder, colab_run.repo, [*code[:8], resumes])
    errors = cell_errors(again)
    assert not errors, f"{len(errors)} of {len(again.cells)} cells failed: {errors[:3]}"
    (setup,) = [c for c in again.cells if "runtime.setup(" in c.source]  # it says so
    said = [o.text for o in setup.outputs if o.output_type == "stream"]
    assert said == [
        f"at-repo, kept from before the restart: updated from commit {before} to "
        f"{newer}; your checkpoints stay\n"
    ], said
    assert (clone / "NEWER.md").is_file()
    found = again.cells[-1].outputs[0].text.strip()
    assert found == "checkpoints/ci/part3/last.pt", found
