"""Faults: two runs into one folder, a resume with a changed setting or another number
of processes, a torchrun resume bit for bit, averaging across runs, full disks and
read-only folders, an errored results cell, a server that trickles or never answers,
and the small misuses that must fail early with a message naming the setting or file.

Runs are tiny (Part 5's copy task, a few steps); the torchrun runs use 2 CPU ranks on
gloo, as tests/test_distributed.py does. Mounting a small or read-only tmpfs needs
root: those tests are skipped, with the reason, elsewhere.
"""

import argparse
import copy
import hashlib
import http.server
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import nbformat
import pytest
import torch

from atkit import files
from tools import train as cli
from atkit import data as corpus
from atkit import launch as launcher
from conftest import DATA, ROOT, quiet
from tools import bench, readme_results

# --------------------------------------------------------------------- helpers

COPY = {"n_train": 120, "n_eval": 16, "max_tokens": 160, "N": 1, "d_model": 16,
        "d_ff": 32, "h": 2, "steps": 8, "eval_every": 4, "keep": 2, "warmup": 10,
        "P_drop": 0.1}  # fmt: skip


def copy_cfg(lib, **changes):
    return lib.run_config("ci", **{**COPY, **changes})


def copy_args(ckpt_dir, settings=COPY, *extra, out=None):
    args = ["--task", "copy", "--preset", "ci", "--device", "cpu",
            "--ckpt-dir", str(ckpt_dir),
            "--out", str(out or Path(ckpt_dir).parent / "results.json")]  # fmt: skip
    for key, value in settings.items():
        args += ["--set", f"{key}={value!r}"]
    return [*args, *map(str, extra)]


def mount_tmpfs(folder: Path, options: str) -> None:
    """Mount a tmpfs on `folder`, or skip the test saying why not."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root; this test runs as a user")
    folder.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(folder)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.strip()}")


@pytest.fixture
def small_disk(tmp_path):
    """A 64 KiB file system: a write that does not fit fails with ENOSPC."""
    disk = tmp_path / "small"
    mount_tmpfs(disk, "size=64k")
    yield disk
    subprocess.run(["umount", str(disk)], check=True)


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


def no_training(lib, monkeypatch):
    """Make any training or data preparation fail the test."""

    def fail(*args, **kwargs):
        pytest.fail("trained or prepared data before the error")

    for name in ("run_epoch", "prepare_data", "copy_task_data"):
        monkeypatch.setattr(lib, name, fail)


# ------------------------------------------- 1. one run per folder at a time

SLOW_AFTER_2 = (
    "import time, nbexport\n"
    "m = nbexport.load()\n"
    "n, original = [0], m.train_step\n"
    "def slow(*a, **k):\n"
    "    n[0] += 1\n"
    "    if n[0] > 2:\n"
    "        time.sleep(600)\n"
    "    return original(*a, **k)\n"
    "m.train_step = slow\n"
)


HOLD = (
    "import sys, time\n"
    "from atkit.files import FolderLock\n"
    "FolderLock(sys.argv[1]).acquire()\n"
    "print('held', flush=True)\n"
    "time.sleep(float(sys.argv[2]))\n"
)


def hold_lock(folder, seconds):
    """Another process that takes the folder's lock and keeps it `seconds`."""
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(folder), str(seconds)],
        env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    assert proc.stdout.readline() == "held\n"
    return proc


def test_folder_lock_keeps_other_processes_out(tmp_path):
    holder = hold_lock(tmp_path, 600)
    try:
        with pytest.raises(files.FolderBusyError, match=f"pid {holder.pid}"):
            files.FolderLock(tmp_path, "test run").acquire()
        start = time.monotonic()
        with pytest.raises(files.FolderBusyError, match="waited 0.3 s"):
            files.FolderLock(tmp_path).acquire(wait_s=0.3)
        assert time.monotonic() - start >= 0.3
    finally:
        holder.kill()  # SIGKILL: no chance to clean up
        holder.wait()
    with files.FolderLock(tmp_path):  # the kernel released it with the process
        with files.FolderLock(tmp_path):  # the holder may take it again
            pass
        assert (tmp_path / ".lock").read_text().startswith(f"pid {os.getpid()} ")
    holder = hold_lock(tmp_path, 0.5)
    files.FolderLock(tmp_path).acquire(wait_s=30).release()  # waits for the end
    holder.wait()


def test_a_second_run_into_the_folder_of_a_running_one_stops_at_once(
    lib, tmp_path, capsys, monkeypatch
):
    """Run A trains into a folder (and sits in its third step); run B into the same
    folder fails at once naming A's process, --fresh deletes nothing of A's, and once
    A is killed B resumes A's run (a killed run leaves no stuck lock)."""
    run = tmp_path / "run"
    args = copy_args(run, {**COPY, "eval_every": 2})
    a = subprocess.Popen(
        [sys.executable, "-c", SLOW_AFTER_2 + launcher.WORKER_CODE, *args],
        env={**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"},
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    )  # fmt: skip
    try:
        give_up = time.monotonic() + 120
        while not (run / "last.pt").exists():
            assert a.poll() is None, a.stderr.read()[-2000:]
            assert time.monotonic() < give_up, "run A wrote no last.pt"
            time.sleep(0.2)
        before = {p.name: p.read_bytes() for p in run.glob("*.pt")}
        assert sorted(before) == ["last.pt", "step000002.pt"]
        with monkeypatch.context() as m:
            no_training(lib, m)
            for extra in ([], ["--fresh"]):
                start = time.monotonic()
                assert cli.train_cli([*args, *extra]) == 2
                err = capsys.readouterr().err
                assert f"pid {a.pid}" in err and str(run) in err, err
                assert time.monotonic() - start < 30
            with pytest.raises(files.FolderBusyError, match=f"pid {a.pid}"):
                lib.train(copy_cfg(lib), None, run, "cpu", log=quiet)
        assert {p.name: p.read_bytes() for p in run.glob("*.pt")} == before
        assert a.poll() is None, "run A should still be running"
    finally:
        os.killpg(a.pid, signal.SIGKILL)
        a.wait()
    assert cli.train_cli([*args, "--max-steps", "4"]) == 0
    state = lib.checkpoints.load_checkpoint(run / "last.pt")
    assert state["progress"]["step"] == 4
    assert state["history"]["steps"] == [2, 4], "B should resume A's run"


def test_fresh_deletes_nothing_while_another_process_holds_the_folder(
    lib, tmp_path, capsys
):
    run = tmp_path / "run"
    lib.train(copy_cfg(lib), lib.copy_task_data(copy_cfg(lib)), run, "cpu",
              max_steps=2, log=quiet)  # fmt: skip
    before = sorted(p.name for p in run.iterdir())
    holder = hold_lock(run, 600)
    try:
        assert cli.train_cli([*copy_args(run, COPY), "--fresh"]) == 2
    finally:
        holder.kill()
        holder.wait()
    assert "one training run at a time" in capsys.readouterr().err
    assert sorted(p.name for p in run.iterdir()) == before


# ------------------------------ 2. a resume with changed settings: refused by name


@pytest.fixture(scope="module")
def stopped(lib, tmp_path_factory):
    """A copy-task run stopped after 3 of 8 steps (dropout on)."""
    folder = tmp_path_factory.mktemp("stopped")
    cfg = copy_cfg(lib)
    lib.train(cfg, lib.copy_task_data(cfg), folder, "cpu", max_steps=3, log=quiet)
    return folder


@pytest.fixture
def stopped_copy(stopped, tmp_path):
    target = tmp_path / "run"
    shutil.copytree(stopped, target)
    return target


@pytest.mark.parametrize(
    "change, named",
    [
        ({"n_eval": 20}, "n_eval"),  # the validation set
        ({"n_train": 100}, "n_train"),
        ({"max_tokens": 200}, "max_tokens"),
        ({"seed": 1}, "seed"),
        ({"P_drop": 0.2}, "model.P_drop"),
        ({"steps": 12}, "steps"),  # with a cool-down, steps shape the schedule
        ({"cooldown": 0.0}, "cooldown"),
        ({"eval_every": 2}, "eval_every"),
    ],
)
def test_a_resume_with_a_changed_setting_is_refused_naming_it(
    lib, stopped_copy, change, named
):
    before = {p.name: p.read_bytes() for p in stopped_copy.glob("*.pt")}
    cfg = copy_cfg(lib, **change)
    with pytest.raises(lib.ConfigError, match="other settings") as err:
        lib.train(cfg, lib.copy_task_data(cfg), stopped_copy, "cpu", log=quiet)
    assert f"'{named}'" in str(err.value) and str(stopped_copy) in str(err.value)
    after = {p.name: p.read_bytes() for p in stopped_copy.glob("*.pt")}
    assert after == before


def test_settings_that_change_no_number_may_change_on_resume(lib, tmp_path):
    """decode_tokens may change; so may steps without a cool-down, and bpe_size in a
    word-level run, which never reads it. The resumed run equals one that had the new
    settings from the start, and its snapshots (saved under both configs) are still
    one run's for averaging."""
    base = copy_cfg(lib, cooldown=0.0, keep=3)
    assert base.vocab == "words"
    more = base.updated(steps=12, decode_tokens=50, bpe_size=base.bpe_size + 1)
    data = lib.copy_task_data(base)
    lib.train(base, data, tmp_path / "resumed", "cpu", max_steps=5, log=quiet)
    model, history = lib.train(more, data, tmp_path / "resumed", "cpu", log=quiet)
    ref, ref_history = lib.train(more, data, tmp_path / "straight", "cpu", log=quiet)
    assert history["val_loss"] == ref_history["val_loss"]
    for name, value in ref.state_dict().items():
        assert torch.equal(model.state_dict()[name], value), name
    snapshots = [tmp_path / "resumed" / f"step{s:06d}.pt" for s in (4, 8, 12)]
    configs = [lib.checkpoints.load_checkpoint(p)["config"] for p in snapshots]
    assert configs[0]["steps"] == 8 != configs[-1]["steps"]  # saved before/after
    lib.average_checkpoints(snapshots)  # no error: one run


# ------------------------ 2. a torchrun resume, bit for bit; another process count

DDP = {**COPY, "n_train": 240, "n_eval": 40, "d_model": 32, "d_ff": 64, "h": 2,
       "steps": 12, "eval_every": 4, "warmup": 100, "factor": 1.0, "P_drop": 0.1,
       "keep": 3}  # fmt: skip

# Each worker logs the batches it trains (a digest of the source ids), one file per
# rank, so that a test can tell which batches an interrupted run trained.
BATCH_LOG = (
    "import hashlib, os, nbexport\n"
    "m = nbexport.load()\n"
    "original = m.train_step\n"
    "def logged(model, batch, *a, **k):\n"
    "    micro = list(batch) if isinstance(batch, (list, tuple)) else [batch]\n"
    "    path = os.environ['BATCH_LOG'] + '.' + os.environ.get('RANK', '0')\n"
    "    with open(path, 'a') as f:\n"
    "        for b in micro:\n"
    "            f.write(hashlib.sha1(b.src.numpy().tobytes()).hexdigest() + '\\n')\n"
    "    return original(model, batch, *a, **k)\n"
    "m.train_step = logged\n"
)


def batch_digest(b) -> str:
    return hashlib.sha1(b.src.numpy().tobytes()).hexdigest()


def torchrun(folder, log, *extra, nproc=2):
    rc, out = launcher.launch_torchrun(
        copy_args(folder, DDP, *extra), nproc=nproc, code=BATCH_LOG +
        launcher.WORKER_CODE, timeout_s=240, check=False, echo=False,
        env={"OMP_NUM_THREADS": "1", "BATCH_LOG": str(log)},
    )  # fmt: skip
    assert rc == 0, out[-3000:]
    return out


def logged(log) -> list[str]:
    return [
        line
        for path in sorted(Path(log).parent.glob(Path(log).name + ".*"))
        for line in path.read_text().split()
    ]


@pytest.fixture(scope="module")
def ddp(lib, tmp_path_factory):
    """2-rank runs of 12 steps (7 per epoch; dropout on): uninterrupted; stopped in
    the middle of epoch 0 (step 3) and resumed; stopped at an evaluation in epoch 1
    (step 8) and resumed. The folder stopped at step 3 is copied before its resume,
    for the resume with one process."""
    root = tmp_path_factory.mktemp("ddp")
    torchrun(root / "full", root / "full.log")
    torchrun(root / "mid", root / "mid.log", "--max-steps", 3)
    shutil.copytree(root / "mid", root / "mid-for-1")
    torchrun(root / "mid", root / "mid-resumed.log")
    torchrun(root / "eval", root / "eval.log", "--max-steps", 8)
    assert (root / "eval" / "step000008.pt").exists()
    eval_out = torchrun(root / "eval", root / "eval-resumed.log")
    return root, eval_out


def load(folder):
    return torch.load(Path(folder) / "last.pt", weights_only=True)


def assert_same_tensors(a, b, where=""):
    """Equal nested structures of tensors, numbers and strings; tensors bit for bit."""
    if torch.is_tensor(a):
        assert torch.is_tensor(b) and a.dtype == b.dtype and a.shape == b.shape, where
        assert torch.equal(a, b), f"{where} differs"
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for k in a:
            assert_same_tensors(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, list | tuple):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_same_tensors(x, y, f"{where}[{i}]")
    else:
        assert a == b, f"{where}: {a!r} != {b!r}"


@pytest.mark.parametrize("stopped_at", ["mid", "eval"])
def test_a_torchrun_resume_is_bit_identical_with_dropout(ddp, stopped_at):
    root, _ = ddp
    full, resumed = load(root / "full"), load(root / stopped_at)
    assert full["progress"]["step"] == resumed["progress"]["step"] == 12
    assert full["config"]["model"]["P_drop"] == 0.1
    for key in ("model", "optimizer", "scheduler", "progress"):
        assert_same_tensors(full[key], resumed[key], key)
    # every rank's own random state: the ranks drew different numbers (different
    # batch shapes), so restoring one rank's state on both would be caught
    assert len(full["ranks"]) == 2
    assert not torch.equal(full["ranks"][0]["rng"]["torch"],
                           full["ranks"][1]["rng"]["torch"])  # fmt: skip
    assert_same_tensors(full["ranks"], resumed["ranks"], "ranks")
    h, g = full["history"], resumed["history"]
    for key in ("steps", "val_loss", "tokens", "best_step", "world_size"):
        assert h[key] == g[key], key
    # the training loss is summed in float64 in another grouping after a resume
    assert g["train_loss"] == pytest.approx(h["train_loss"], rel=1e-12)
    # and the snapshots kept are the same files' weights
    for step in (8, 12):
        a = torch.load(root / "full" / f"step{step:06d}.pt", weights_only=True)
        b = torch.load(root / stopped_at / f"step{step:06d}.pt", weights_only=True)
        assert_same_tensors(a["model"], b["model"], f"step {step}")


def test_the_interrupted_runs_trained_the_same_batches(ddp):
    root, _ = ddp
    full = logged(root / "full.log")
    assert len(full) == 24 and len(set(full)) == 14, "12 steps x 2 ranks, 14 batches"
    for name in ("mid", "eval"):
        parts = logged(root / f"{name}.log") + logged(root / f"{name}-resumed.log")
        assert sorted(parts) == sorted(full), name


def test_a_resume_with_one_process_trains_the_rest_of_the_epoch_once(
    lib, ddp, monkeypatch, capsys
):
    """Saved by 2 ranks after 3 steps (6 of epoch 0's 14 batches), resumed by one
    process for 8 more steps: it deals the rest of the epoch to itself, so that each
    of the 14 batches is trained once and the epoch ends exactly at step 11."""
    root, _ = ddp
    folder = root / "mid-for-1"
    cfg = lib.run_config("ci", **DDP)
    batches = lib.make_batches(lib.copy_task_data(cfg).train, cfg, "cpu")
    epoch0 = [batch_digest(b) for b in batches]
    assert len(set(epoch0)) == len(epoch0) == 14
    saved = load(folder)
    assert saved["progress"]["batch"] == 6 and len(saved["ranks"]) == 2
    ranks_part = logged(root / "mid.log")
    assert len(ranks_part) == 6

    one_process, original = [], lib.train_step

    def log_batches(model, batch, *args, **kwargs):
        one_process.extend(batch_digest(b) for b in batch)
        return original(model, batch, *args, **kwargs)

    monkeypatch.setattr(lib, "train_step", log_batches)
    assert cli.train_cli([*copy_args(folder, DDP), "--max-steps", "11"]) == 0
    assert "resuming with 1 process(es) a run saved by 2" in capsys.readouterr().out
    assert len(one_process) == 8
    assert sorted(ranks_part + one_process) == sorted(epoch0), "each batch once"
    state = load(folder)
    p = state["progress"]
    assert (p["step"], p["epoch"], p["batch"]) == (11, 1, 0)
    # every label token of the epoch is counted once in the loss bookkeeping
    counted = state["history"]["tokens"] + p["ntokens"]
    assert counted == sum(int(b.ntokens) for b in batches)
    assert state["history"]["world_size"] == 1 and len(state["ranks"]) == 1


# ------------------------------------------- 3. averaging refuses other runs


@pytest.fixture(scope="module")
def two_runs(lib, tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    for name, seed in (("a", 0), ("b", 1)):
        cfg = copy_cfg(lib, seed=seed, steps=4, eval_every=2)
        lib.train(cfg, lib.copy_task_data(cfg), root / name, "cpu", log=quiet)
    return root


def test_averaging_checkpoints_of_different_runs_is_refused(lib, two_runs):
    a, b = two_runs / "a" / "step000004.pt", two_runs / "b" / "step000004.pt"
    with pytest.raises(lib.checkpoints.CheckpointError, match="different runs") as e:
        lib.average_checkpoints([a, b])
    assert str(a) in str(e.value) and str(b) in str(e.value)
    assert "'seed'" in str(e.value)
    # the same run's snapshots average
    lib.average_checkpoints([two_runs / "a" / "step000002.pt", a])


def test_averaging_compares_the_vocabularies(lib, two_runs, tmp_path):
    a = two_runs / "a" / "step000004.pt"
    state = lib.checkpoints.load_checkpoint(a)
    itos = list(state["vocab_tgt"]["itos"])
    itos[-2], itos[-1] = itos[-1], itos[-2]  # same size, same config, other words
    other = tmp_path / "other.pt"
    torch.save({**state, "vocab_tgt": {**state["vocab_tgt"], "itos": itos}}, other)
    with pytest.raises(lib.checkpoints.CheckpointError, match="target vocabulary"):
        lib.average_checkpoints([a, other])


def test_averaged_model_refuses_a_foreign_snapshot_in_the_folder(
    lib, two_runs, tmp_path
):
    folder = tmp_path / "a"
    shutil.copytree(two_runs / "a", folder)
    shutil.copy(two_runs / "b" / "step000002.pt", folder / "step000002.pt")
    history = lib.checkpoints.load_checkpoint(folder / "last.pt")["history"]
    history = {**history, "best_step": 4}
    with pytest.raises(lib.checkpoints.CheckpointError, match="step000002.pt"):
        lib.averaged_model(folder, history, "cpu", 2)
    with pytest.raises(lib.ConfigError, match="n_avg"):
        lib.averaged_model(folder, history, "cpu", 0)


# ------------------------- 4. files written whole: README, results JSON, checkpoints


def results_notebook(path: Path, text: str, error: bool = False) -> Path:
    nb = nbformat.v4.new_notebook()
    setup = nbformat.v4.new_code_cell("print('preset=ci')")
    setup.outputs = [
        nbformat.v4.new_output("stream", name="stdout", text="preset=ci\n")
    ]
    cell = nbformat.v4.new_code_cell("print(results)", metadata={"tags": ["results"]})
    cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=text)]
    if error:
        cell.outputs.append(nbformat.v4.new_output(
            "error", ename="RuntimeError", evalue="training diverged",
            traceback=["RuntimeError: training diverged"],
        ))  # fmt: skip
    nb.cells = [nbformat.v4.new_markdown_cell("## Part 3"), setup, cell]
    nbformat.write(nb, path)
    return path


def readme_with_markers(path: Path, filler: int = 0) -> bytes:
    text = (
        "# Title\n\n" + "x" * filler + "\n"
        f"{readme_results.START}\nold results\n{readme_results.END}\nend\n"
    )
    path.write_text(text)
    return path.read_bytes()


def test_readme_results_copies_the_block(tmp_path):
    nb = results_notebook(tmp_path / "nb.ipynb", "BLEU 30.0\n")
    readme = tmp_path / "README.md"
    readme_with_markers(readme)
    assert readme_results.main(["--notebook", str(nb), "--readme", str(readme)]) == 0
    assert "BLEU 30.0" in readme.read_text() and "old results" not in readme.read_text()


def test_results_blocks_under_one_heading_are_told_apart(tmp_path):
    nb = nbformat.read(results_notebook(tmp_path / "nb.ipynb", "BLEU 30.0\n"), 4)
    more = nbformat.v4.new_code_cell("print(spread)", metadata={"tags": ["results"]})
    more.outputs = [nbformat.v4.new_output("stream", name="stdout", text="range 1\n")]
    lead = nbformat.v4.new_markdown_cell("**How much a score moves.** A paragraph.")
    nb.cells += [lead, more]
    nbformat.write(nb, tmp_path / "nb.ipynb")
    block = readme_results.results_block(tmp_path / "nb.ipynb")
    assert "**Part 3**\n\n```text\nBLEU 30.0" in block
    assert "**Part 3: How much a score moves**\n\n```text\nrange 1" in block


@pytest.mark.parametrize("check", [False, True])
def test_an_errored_results_cell_is_never_copied(tmp_path, check):
    nb = results_notebook(tmp_path / "nb.ipynb", "BLEU 0.0 (partial)\n", error=True)
    readme = tmp_path / "README.md"
    before = readme_with_markers(readme)
    argv = ["--notebook", str(nb), "--readme", str(readme)] + ["--check"] * check
    with pytest.raises(SystemExit, match="ended in an error") as err:
        readme_results.main(argv)
    assert "RuntimeError" in str(err.value) and "Part 3" in str(err.value)
    assert readme.read_bytes() == before


@pytest.mark.parametrize("markers", ["reversed", "doubled", "missing"])
def test_results_markers_out_of_order_are_a_clear_error(tmp_path, markers):
    start, end = readme_results.START, readme_results.END
    text = {
        "reversed": f"a\n{end}\nold\n{start}\nb\n",
        "doubled": f"{start}\n{end}\n{start}\n{end}\n",
        "missing": f"a\n{start}\nold\n",
    }[markers]
    with pytest.raises(SystemExit, match="marker"):
        readme_results.replace_block(text, "new\n")


def test_a_full_disk_leaves_readme_as_it_was(small_disk, tmp_path):
    readme = small_disk / "README.md"
    before = readme_with_markers(readme, filler=30_000)
    nb = results_notebook(tmp_path / "nb.ipynb", "BLEU 30.0\n" * 4_000)  # 40 kB
    with pytest.raises(OSError) as err:
        readme_results.main(["--notebook", str(nb), "--readme", str(readme)])
    assert err.value.errno == 28  # ENOSPC: the write did not fit
    assert readme.read_bytes() == before
    assert [p.name for p in small_disk.iterdir()] == ["README.md"], "temp file left"


def fake_results(lib, out):
    n = 5_000  # a history whose JSON is far larger than the disk
    history = {"steps": list(range(n)), "train_loss": [0.123456789] * n,
               "val_loss": [0.987654321] * n, "time_s": [1.5] * n,
               "train_time_s": 1.0, "tokens": 100, "best_step": None,
               "world_size": 1}  # fmt: skip
    args = argparse.Namespace(task="copy", out=out, ckpt_dir=out.parent)
    return args, history


def test_a_full_disk_leaves_the_results_json_as_it_was(lib, small_disk, capsys):
    out = small_disk / "results.json"
    out.write_text(json.dumps({"old": "results"}))
    before = out.read_bytes()
    args, history = fake_results(lib, out)
    with pytest.raises(OSError) as err:
        cli.write_results(lib, args, "ci", lib.run_config("ci"), None,
                          torch.nn.Linear(2, 2), history, "cpu")  # fmt: skip
    assert err.value.errno == 28
    assert out.read_bytes() == before
    assert [p.name for p in small_disk.iterdir()] == ["results.json"]


def test_a_full_disk_keeps_the_last_checkpoint(lib, small_disk):
    path = small_disk / "last.pt"
    lib.checkpoints.save_rotating({"w": torch.ones(100)}, path)
    before = path.read_bytes()
    with pytest.raises((OSError, RuntimeError), match="No space|unexpected pos"):
        lib.checkpoints.save_rotating({"w": torch.ones(40_000)}, path)  # 160 kB
    assert path.read_bytes() == before, "last.pt must stay the last good state"
    assert not (small_disk / "prev.pt").exists(), "rotated although the save failed"
    with pytest.raises((OSError, RuntimeError), match="No space|unexpected pos"):
        lib.checkpoints.save_checkpoint({"w": torch.ones(40_000)}, path)
    assert path.read_bytes() == before
    assert sorted(p.name for p in small_disk.iterdir()) == ["last.pt"]


# ---------------------------------------- 5. a download with a deadline and progress


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
    """A server that accepts connections and never answers."""
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
    yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    sock.close()
    for conn in held:
        conn.close()


def test_a_trickling_server_is_cut_off_by_the_deadline(monkeypatch, tmp_path, trickle):
    monkeypatch.delenv("MULTI30K_DIR")
    cache, messages = tmp_path / "cache", []
    start = time.monotonic()
    with pytest.raises(corpus.DataUnavailableError) as err:
        corpus.fetch_multi30k(trickle, cache, timeout=5, deadline_s=1.5,
                              log=messages.append)  # fmt: skip
    seconds = time.monotonic() - start
    assert seconds < 5, f"took {seconds:.1f} s against a 1.5 s deadline"
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
            f"{trickle}/train.de.gz", tmp_path / "train.de.gz", "0" * 64, timeout=5,
            deadline=time.monotonic() + 1.2, log=messages.append, every_s=0.3,
        )  # fmt: skip
    progress = [m for m in messages if "train.de.gz:" in m and "of 1.00 MB" in m]
    assert len(progress) >= 2, messages
    assert not list(tmp_path.iterdir())


def test_a_server_that_never_answers_fails_fast(monkeypatch, tmp_path, silent):
    monkeypatch.delenv("MULTI30K_DIR")
    cache, messages = tmp_path / "cache", []
    start = time.monotonic()
    with pytest.raises(corpus.DataUnavailableError) as err:
        corpus.fetch_multi30k(silent, cache, timeout=0.5, deadline_s=60,
                              log=messages.append)  # fmt: skip
    seconds = time.monotonic() - start
    assert seconds < 2.5, f"took {seconds:.1f} s: one 0.5 s timeout, not six"
    assert "timed out" in str(err.value)
    assert messages, "the attempt says what it is doing"
    for name in corpus.MULTI30K_SHA256:
        assert name in str(err.value)
    assert not list(cache.glob("*.part"))


def test_part_files_of_an_interrupted_download_are_removed(monkeypatch, tmp_path):
    from test_multi30k import serve

    monkeypatch.delenv("MULTI30K_DIR")
    cache = tmp_path / "cache"
    cache.mkdir()
    stale = [cache / "train.de.gzk3j2.part", cache / "val.en.gz_x.part"]
    for path in stale:
        path.write_bytes(b"half a download")
    server, url, _ = serve(DATA)
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


# --------------------------------------------------- 6. early, clear errors


@pytest.mark.parametrize(
    "extra, env, words",
    [
        (["--set", "seed=10**30"], {}, ["seed", "int"]),
        (["--set", f"seed={10**30}"], {}, ["seed", "at most"]),
        (["--set", "seed=4294967296"], {}, ["seed", "<="]),
        (["--set", "model=None"], {}, ["model settings by name"]),
        (["--timeout-s", "0"], {}, ["timeout_s", "> 0"]),
        (["--max-steps", "0"], {}, ["max_steps", ">= 1"]),
        (["--set", "vocab='bpe'"], {}, ["copy task", "vocab"]),
        (["--set", "src_lang='en'"], {}, ["copy task", "src_lang"]),
        ([], {"WORLD_SIZE": "2"}, ["LOCAL_RANK", "torchrun"]),
    ],
)
def test_cli_misuse_fails_before_any_data_or_training(
    lib, tmp_path, monkeypatch, capsys, extra, env, words
):
    no_training(lib, monkeypatch)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    with pytest.raises(SystemExit) as err:
        cli.train_cli([*copy_args(tmp_path / "run", {}), *extra])
    assert err.value.code == 2
    message = capsys.readouterr().err
    for word in words:
        assert word in message, (word, message)
    assert not (tmp_path / "run").exists()


def test_device_cuda_without_cuda_fails_early(lib, tmp_path, monkeypatch, capsys):
    no_training(lib, monkeypatch)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(SystemExit):
        cli.train_cli([*copy_args(tmp_path / "run", {}), "--device", "cuda"])
    assert "no CUDA device" in capsys.readouterr().err


def test_out_and_ckpt_dir_are_checked_first(lib, tmp_path, monkeypatch, capsys):
    no_training(lib, monkeypatch)
    cases = [
        (["--ckpt-dir", ""], "--ckpt-dir is empty"),
        (["--out", str(tmp_path)], "is a folder"),
    ]
    (tmp_path / "file").write_text("x")
    cases.append((["--ckpt-dir", str(tmp_path / "file")], "is a file"))
    for extra, words in cases:
        with pytest.raises(SystemExit):
            cli.train_cli([*copy_args(tmp_path / "run", {}), *extra])
        assert words in capsys.readouterr().err
    monkeypatch.chdir(tmp_path)
    for empty in ("", "."):
        with pytest.raises(ValueError, match="ckpt_dir is empty"):
            lib.train(copy_cfg(lib), None, empty, "cpu", log=quiet)
    assert not (tmp_path / ".lock").exists(), "nothing may be written into the cwd"


def test_a_read_only_folder_fails_before_training(
    lib, read_only, tmp_path, monkeypatch, capsys
):
    no_training(lib, monkeypatch)
    for extra in (["--ckpt-dir", str(read_only / "run")],
                  ["--ckpt-dir", str(read_only)],
                  ["--out", str(read_only / "results.json")]):  # fmt: skip
        with pytest.raises(SystemExit):
            cli.train_cli([*copy_args(tmp_path / "run", {}), *extra])
        assert "cannot be written" in capsys.readouterr().err
    for folder in (read_only, read_only / "run"):
        with pytest.raises(PermissionError, match=str(read_only)):
            lib.train(copy_cfg(lib), None, folder, "cpu", log=quiet)


def test_max_steps_at_or_below_the_steps_done_is_an_error(lib, tmp_path, capsys):
    run, out = tmp_path / "run", tmp_path / "r.json"
    args = copy_args(run, {"steps": 4, "eval_every": 2, "n_train": 60}, out=out)
    assert cli.train_cli([*args, "--max-steps", "2"]) == 0
    for max_steps in ("2", "1"):
        assert cli.train_cli([*args, "--max-steps", max_steps]) == 2
        assert "max_steps" in capsys.readouterr().err
    assert cli.train_cli(args) == 0  # finish the run
    written = out.read_bytes()
    assert cli.train_cli([*args, "--max-steps", "3"]) == 2, "finished at 4 steps"
    assert "has done 4 steps" in capsys.readouterr().err
    assert out.read_bytes() == written


@pytest.mark.parametrize("edit", ["shape", "missing", "rank state", "nan"])
def test_an_edited_last_pt_is_reported_by_name(lib, stopped_copy, edit):
    last = stopped_copy / "last.pt"
    state = lib.checkpoints.load_checkpoint(last)
    if edit == "shape":
        state["model"]["generator.proj.bias"] = torch.zeros(3)
    elif edit == "missing":
        del state["model"]["generator.proj.bias"]
    elif edit == "rank state":
        del state["ranks"][0]["rng"]
    else:
        state["model"]["generator.proj.bias"][0] = float("nan")
    torch.save(state, last)
    (stopped_copy / "prev.pt").unlink(missing_ok=True)
    cfg = copy_cfg(lib)
    with pytest.raises(lib.checkpoints.CheckpointError, match=str(last)):
        lib.train(cfg, lib.copy_task_data(cfg), stopped_copy, "cpu", log=quiet)
    if edit in ("shape", "nan"):
        with pytest.raises(lib.checkpoints.CheckpointError, match=str(last)):
            lib.model_from_checkpoint(last)


def test_nan_weights_in_last_pt_fall_back_to_prev_pt(lib, tmp_path):
    cfg = copy_cfg(lib)
    data = lib.copy_task_data(cfg)
    lib.train(cfg, data, tmp_path, "cpu", max_steps=5, log=quiet)  # 4: eval, 5: stop
    assert (tmp_path / "prev.pt").exists()
    state = lib.checkpoints.load_checkpoint(tmp_path / "last.pt")
    state["model"]["generator.proj.bias"][0] = float("inf")
    torch.save(state, tmp_path / "last.pt")
    messages = []
    lib.train(cfg, data, tmp_path, "cpu", log=messages.append)
    assert any("inf or NaN" in m and "prev.pt" in m for m in messages), messages


@pytest.fixture(scope="module")
def weak_model(lib, stopped):
    """An under-trained model: its outputs run to the length limit."""
    return lib.model_from_checkpoint(stopped / "last.pt")


def test_decoding_entry_points_refuse_the_beam_factory(lib, weak_model):
    model, _, vs, vt = weak_model
    with pytest.raises(TypeError, match=r"beam\(4, 0.6\)"):
        lib.Translator(model, vs, vt, search=lib.beam)
    with pytest.raises(TypeError, match=r"beam\(4, 0.6\)"):
        lib.translate_ids(model, [[lib.BOS, 5, lib.EOS]], search=lib.beam)
    with pytest.raises(TypeError, match="search="):
        lib.translate_texts(model, ["s1"], vs, vt, search="beam")
    assert lib.translate_ids(model, [[lib.BOS, 5, lib.EOS]], search=lib.beam(2, 0.6))


def test_translate_texts_takes_any_iterable_and_refuses_empty_text(lib, weak_model):
    model, _, vs, vt = weak_model
    texts = ["s1 s2 s3", "s4 s5"]
    assert lib.translate_texts(model, (t for t in texts), vs, vt) == \
        lib.translate_texts(model, texts, vs, vt)  # fmt: skip
    for bad in ([""], ["s1", "  "]):
        with pytest.raises(ValueError, match="empty"):
            lib.translate_texts(model, bad, vs, vt)
    with pytest.raises(ValueError, match="empty"):
        lib.Translator(model, vs, vt)("")


@pytest.mark.parametrize("search", ["greedy", "beam"])
def test_output_length_does_not_depend_on_the_batch(lib, weak_model, search):
    """Each output is capped at its own source length + 50 (§6.1), so a sentence's
    translation is the same in any batch. The model here never ends a sentence (the
    end symbol's logit is pushed down), so every output runs to its cap."""
    model = copy.deepcopy(weak_model[0])
    with torch.no_grad():
        model.generator.proj.bias[lib.EOS] = -1e4
    search = lib.greedy_decode if search == "greedy" else lib.beam(2, 0.6)
    gen = torch.Generator().manual_seed(0)
    sources = [[lib.BOS, *torch.randint(4, 16, (n,), generator=gen).tolist(), lib.EOS]
               for n in (2, 9, 3, 10, 1, 6)]  # fmt: skip
    together = lib.translate_ids(model, sources, decode_tokens=1000, search=search)
    alone = lib.translate_ids(model, sources, decode_tokens=1, search=search)
    assert [len(out) - len(src) for out, src in zip(together, sources, strict=True)
            ] == [49] * len(sources)  # fmt: skip
    assert together == alone


def test_the_copy_task_honours_tie(lib):
    """The copy task has one vocabulary, so every `tie` is possible and is applied;
    vocab and src_lang have no meaning there and are refused."""
    counts = {}
    for tie in ("none", "tgt", "all"):
        cfg = copy_cfg(lib, tie=tie)
        data = lib.copy_task_data(cfg)
        model = lib.training_parts(cfg, len(data.vocab_src), len(data.vocab_tgt),
                                   "cpu")[0]  # fmt: skip
        counts[tie] = sum(p.numel() for p in model.parameters())
    assert counts["none"] > counts["tgt"] > counts["all"]
    for change in ({"vocab": "bpe"}, {"src_lang": "en"}):
        with pytest.raises(lib.ConfigError, match="copy task"):
            lib.copy_task_data(copy_cfg(lib, **change))


@pytest.mark.parametrize(
    "argv, words",
    [
        (["--steps", "0"], "--steps"),
        (["--rounds", "-1"], "--rounds"),
        (["--batches", "x"], "--batches"),
        (["--threads", "0"], "--threads"),
        (["--paths", "bogus"], "--paths"),
        (["--paths", "fast,fast"], "--paths"),
        (["--set", "P_drop=1.5"], "P_drop"),
    ],
)
def test_bench_validates_its_flags(lib, capsys, argv, words):
    with pytest.raises(SystemExit) as err:
        bench.parse_args(lib, argv)
    assert err.value.code == 2 and words in capsys.readouterr().err
