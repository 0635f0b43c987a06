"""A run's folder over its life: one run at a time (the lock), --fresh, the checks of
the folder, resuming exactly where a run stopped (and refusing a resume that would
compute something else), damaged or edited checkpoints, a full disk, and results that
are never lost.

The notebook's `train` does all of it through `atkit.resume.run_folder`, the one gate
of a run's folder; tools.train's command line adds only the results file. Runs here
are tiny: `tiny_run` (tests/conftest.py, a Multi30k run of 20 steps, shared by the
session) or Part 5's copy task in a few steps. Tests that need a small or read-only
file system mount a tmpfs, which needs root; elsewhere they are skipped saying so.
"""

import errno
import gc
import json
import math
import os
import pickle
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from atkit import files, launch, schedule
from atkit.settings import ConfigError
from conftest import (
    COPY,
    NO_TRAINING,
    ROOT,
    clean_env,
    copy_args,
    copy_cfg,
    copy_of,
    error_line,
    fill_disk,
    forbid,
    hold_lock,
    lazy,
    needs,
    quiet,
    refused,
    run_program,
    without_permission_override,
)
from tools import train as cli

torch = lazy("torch")
resume = lazy("atkit.resume")


def params(model):
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def same_weights(a, b) -> bool:
    a, b = params(a), params(b)
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def pt_files(folder) -> dict:
    return {p.name: p.read_bytes() for p in Path(folder).glob("*.pt")}


@pytest.fixture
def run_dir(tiny_run, tmp_path):
    """A copy of the session's finished tiny run, to change."""
    return copy_of(tiny_run.folder, tmp_path / "run")


@pytest.fixture(scope="module")
@needs("training")
def stopped(trained):
    """A copy-task run stopped after 3 of 8 steps (dropout on)."""
    return trained("copy", 3, **COPY).folder


@pytest.fixture
def stopped_copy(stopped, tmp_path):
    return copy_of(stopped, tmp_path / "run")


# ------------------------------------------------------ one run per folder at a time


def test_folder_lock_keeps_every_other_holder_out(tmp_path):
    """Another process, and (a plain lock) this one too; the kernel releases the lock
    when its holder ends, however it ends, and when the FolderLock object goes."""
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
    with files.FolderLock(tmp_path) as lock:  # the kernel released it
        assert (tmp_path / ".lock").read_text().startswith(f"pid {os.getpid()} ")
        with pytest.raises(files.FolderBusyError, match=f"pid {os.getpid()}"):
            files.FolderLock(tmp_path).acquire()
        with pytest.raises(RuntimeError, match="held already"):
            lock.acquire()
    files.FolderLock(tmp_path).acquire()  # not kept: released with the object
    gc.collect()
    files.FolderLock(tmp_path).acquire().release()
    holder = hold_lock(tmp_path, 0.5)
    files.FolderLock(tmp_path).acquire(wait_s=30).release()  # waits for the end
    holder.wait()


SLOW_AFTER_2 = (
    "import time\n"
    "import annotated_transformer_lib as m\n"
    "n, original = [0], m.train_step\n"
    "def slow(*a, **k):\n"
    "    n[0] += 1\n"
    "    if n[0] > 2:\n"
    "        time.sleep(600)\n"
    "    return original(*a, **k)\n"
    "m.train_step = slow  # what Part 2's run_epoch calls\n"
)


@pytest.mark.process
def test_a_second_run_into_the_folder_of_a_running_one_stops_at_once(
    lib, tmp_path, capsys, monkeypatch
):
    """Run A trains into a folder (and sits in its third step); run B into the same
    folder fails at once naming A's process, --fresh deletes nothing of A's, and once
    A is killed B resumes A's run (a killed run leaves no stuck lock)."""
    import pipeline as pl

    run = tmp_path / "run"
    args = copy_args(run, {**COPY, "eval_every": 2})
    a = subprocess.Popen(
        [sys.executable, "-c", SLOW_AFTER_2 + launch.worker_code("tools.train"), *args],
        env={**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        give_up = time.monotonic() + 120
        while not (run / "last.pt").exists():
            assert a.poll() is None, a.stderr.read()[-2000:]
            assert time.monotonic() < give_up, "run A wrote no last.pt"
            time.sleep(0.2)
        before = pt_files(run)
        assert sorted(before) == ["last.pt", "step000002.pt"]
        with monkeypatch.context() as m:
            forbid(lib, m, *NO_TRAINING)
            for extra in ([], ["--fresh"]):
                start = time.monotonic()
                message = refused([*args, *extra], capsys)
                assert f"pid {a.pid}" in message and str(run) in message, message
                assert time.monotonic() - start < 30
            with pytest.raises(files.FolderBusyError, match=f"pid {a.pid}"):
                pl.train(copy_cfg(lib), None, run, "cpu", log=quiet)
        assert pt_files(run) == before
        assert a.poll() is None, "run A should still be running"
    finally:
        os.killpg(a.pid, signal.SIGKILL)
        a.wait()
    assert run_program([*args, "--max-steps", "4"], capsys)[0] == 0
    state = lib.checkpoints.load_checkpoint(run / "last.pt")
    assert state["progress"]["step"] == 4
    assert state["history"]["steps"] == [2, 4], "B should resume A's run"


# ------------------------------------------------------------------ --fresh


def test_fresh_removes_only_run_files(lib, run_dir):
    (run_dir / "notes.txt").write_text("mine")
    (run_dir / "sub").mkdir()
    (run_dir / "sub" / "last.pt").write_bytes(b"not ours to delete")
    removed = lib.checkpoints.remove_run_files(run_dir)
    assert "last.pt" in removed and "prev.pt" in removed and "step000020.pt" in removed
    assert sorted(p.name for p in run_dir.iterdir()) == ["notes.txt", "sub"]
    assert (run_dir / "sub" / "last.pt").read_bytes() == b"not ours to delete"


def test_fresh_on_a_folder_that_is_not_a_run_keeps_everything(lib, tmp_path):
    (tmp_path / "report.pdf").write_bytes(b"%PDF")
    assert lib.checkpoints.remove_run_files(tmp_path) == []
    assert (tmp_path / "report.pdf").exists()


def test_fresh_trains_the_run_again_from_step_0(lib, tmp_path):
    import pipeline as pl

    cfg = copy_cfg(lib, steps=4, eval_every=2)
    data = lib.copy_task_data(cfg)
    model, _ = pl.train(cfg, data, tmp_path, "cpu", log=quiet)
    (tmp_path / "notes.txt").write_text("mine")
    n = len(list(tmp_path.glob("*.pt")))
    said = []
    again, history = pl.train(cfg, data, tmp_path, "cpu", fresh=True, log=said.append)
    assert said[0] == f"fresh: removed {n} checkpoint file(s) of an earlier run", said
    assert not any("finished" in m for m in said), "loaded instead of trained"
    assert history["steps"] == [2, 4] and same_weights(model, again)
    assert (tmp_path / "notes.txt").read_text() == "mine"


def test_fresh_deletes_nothing_while_another_process_holds_the_folder(
    lib, tmp_path, capsys
):
    import pipeline as pl

    run = tmp_path / "run"
    cfg = copy_cfg(lib)
    pl.train(cfg, lib.copy_task_data(cfg), run, "cpu", max_steps=2, log=quiet)
    before = sorted(p.name for p in run.iterdir())
    holder = hold_lock(run, 600)
    try:
        message = refused([*copy_args(run, COPY), "--fresh"], capsys)
    finally:
        holder.kill()
        holder.wait()
    assert "one training run at a time" in message
    assert sorted(p.name for p in run.iterdir()) == before


def test_fresh_with_a_bad_setting_deletes_nothing(lib, run_dir, capsys):
    before = pt_files(run_dir)
    message = refused(
        ["--preset", "ci", "--fresh", "--ckpt-dir", str(run_dir)]
        + ["--set", "P_drop=1.5"],
        capsys,
    )
    assert "P_drop=1.5" in message
    assert pt_files(run_dir) == before


# ---------------------------------------------------- the checks of the folder


def test_train_names_a_checkpoint_folder_it_cannot_use(lib, tmp_path, monkeypatch):
    """The notebook's train(), as the command line: no bare FileNotFoundError or
    FileExistsError from deep inside pathlib, nothing trained, nothing written into
    the working folder."""
    import pipeline as pl

    cfg = copy_cfg(lib)
    data = lib.copy_task_data(cfg)
    forbid(lib, monkeypatch, *NO_TRAINING)
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    with pytest.raises(NotADirectoryError, match="symbolic link"):
        pl.train(cfg, data, tmp_path / "loop", "cpu", log=quiet)
    if Path("/proc/self").is_dir():
        with pytest.raises(PermissionError, match="/proc/x.*cannot"):
            pl.train(cfg, data, "/proc/x", "cpu", log=quiet)
    (tmp_path / "a-file").write_text("x")
    with pytest.raises(NotADirectoryError, match="a-file is a file"):
        pl.train(cfg, data, tmp_path / "a-file", "cpu", log=quiet)
    (tmp_path / "run" / "last.pt").mkdir(parents=True)
    with pytest.raises(lib.checkpoints.CheckpointError, match="last.pt is a folder"):
        pl.train(cfg, data, tmp_path / "run", "cpu", log=quiet)
    long = tmp_path / ("a" * 300)
    with pytest.raises(OSError, match=os.strerror(errno.ENAMETOOLONG)):
        pl.train(cfg, data, long, "cpu", log=quiet)
    monkeypatch.chdir(tmp_path)
    for empty in ("", ".", None):
        with pytest.raises(ValueError, match="ckpt_dir is empty"):
            pl.train(cfg, data, empty, "cpu", log=quiet)
    assert not (tmp_path / ".lock").exists(), "nothing may be written into the cwd"


def test_a_read_only_folder_fails_before_training(
    lib, read_only, tmp_path, monkeypatch, capsys
):
    import pipeline as pl

    forbid(lib, monkeypatch, *NO_TRAINING)
    for extra in (
        ["--ckpt-dir", str(read_only / "run")],
        ["--ckpt-dir", str(read_only)],
        ["--out", str(read_only / "results.json")],
    ):
        message = refused([*copy_args(tmp_path / "run", {}), *extra], capsys)
        assert "cannot be written" in message and str(read_only) in message
    for folder in (read_only, read_only / "run"):
        with pytest.raises(PermissionError, match=str(read_only)):
            pl.train(copy_cfg(lib), None, folder, "cpu", log=quiet)


@pytest.mark.process
def test_a_folder_without_read_permission_is_refused(tmp_path):
    """A checkpoint folder that can be written but not listed: --fresh would find
    nothing to delete, and say nothing. Run as a program, so that the permission
    bits apply to root too."""
    run = tmp_path / "run"
    run.mkdir()
    run.chmod(0o300)  # write and enter, not list
    argv = [sys.executable, "-m", "tools.train", *copy_args(run, COPY)]
    try:
        proc = subprocess.run(
            without_permission_override(argv),
            capture_output=True,
            text=True,
            env=clean_env(),
            cwd=ROOT,
            timeout=300,
            check=False,
        )
    finally:
        run.chmod(0o755)
    assert proc.returncode == 2, proc.stderr[-3000:]
    message = error_line(proc.stderr)
    assert f"--ckpt-dir {run} cannot be read" in message and "chmod u+r" in message
    assert not (tmp_path / "run.json").exists()


def test_relative_paths_are_fine_everywhere(lib, tmp_path, monkeypatch):
    import pipeline as pl

    monkeypatch.chdir(tmp_path)
    cfg = copy_cfg(lib, steps=2, eval_every=2)
    pl.train(cfg, lib.copy_task_data(cfg), Path("runs") / "a", "cpu", log=quiet)
    assert (tmp_path / "runs" / "a" / "last.pt").exists()


def test_orphaned_temporary_files_are_removed(lib, run_dir):
    orphans = [run_dir / ".last.pt.abc123.tmp", run_dir / ".write-test.x1.tmp"]
    for orphan in orphans:
        orphan.write_bytes(b"half a checkpoint")
    lib.checkpoints.prepare_ckpt_dir(run_dir)
    assert not any(orphan.exists() for orphan in orphans)


def test_checkpoints_are_written_whole_and_readable_like_other_files(lib, tmp_path):
    path = tmp_path / "c.pt"
    lib.checkpoints.save_checkpoint({"a": torch.ones(2)}, path)
    umask = os.umask(0)
    os.umask(umask)
    assert path.stat().st_mode & 0o777 == 0o666 & ~umask
    with pytest.raises((AttributeError, pickle.PicklingError)):
        lib.checkpoints.save_checkpoint({"a": lambda: 0}, path)  # cannot be pickled
    assert torch.equal(lib.checkpoints.load_checkpoint(path)["a"], torch.ones(2))
    assert [p.name for p in tmp_path.iterdir()] == ["c.pt"]


# ------------------------------------------------------------------ resuming


def test_a_checkpoint_is_plain_data_of_one_format(lib, tiny_run):
    import pipeline as pl

    cfg, ckpt_dir, model, history = (
        tiny_run.cfg,
        tiny_run.folder,
        tiny_run.model,
        tiny_run.history,
    )
    ckpt = torch.load(ckpt_dir / "last.pt", weights_only=True)
    assert ckpt["progress"]["step"] == history["steps"][-1] == cfg.steps
    assert ckpt["vocab_src"]["kind"] == "words"
    assert isinstance(ckpt["vocab_src"]["itos"], list)
    parts = {"optimizer", "scheduler", "ranks", "config", "progress", "history"}
    assert parts <= set(ckpt)
    loaded, saved_cfg, vs, vt = pl.model_from_checkpoint(ckpt)
    assert saved_cfg == cfg == pl.config_from_dict(ckpt["config"])
    assert vs.itos == ckpt["vocab_src"]["itos"]
    assert len(vt) == model.generator.proj.out_features
    assert same_weights(model, loaded)
    evals = -(-cfg.steps // cfg.eval_every)
    assert len(history["train_loss"]) == len(history["val_loss"]) == evals
    assert all(loss > 0 for loss in history["val_loss"])
    best = history["steps"].index(history["best_step"])
    assert history["val_loss"][best] == min(history["val_loss"])
    # the snapshots kept are those averaging may need, in the same format
    kept = sorted(int(p.stem[4:]) for p in ckpt_dir.glob("step*.pt"))
    assert kept == sorted(resume.kept_steps(history, cfg.keep))
    assert len(kept) <= 2 * cfg.keep
    for step in kept:
        snap = pl.model_from_checkpoint(resume.snapshot_path(ckpt_dir, step))
        assert snap[1] == cfg


def test_resume_gives_the_same_parameters(lib, tiny_run, tmp_path):
    import pipeline as pl

    cfg, data, model = tiny_run.cfg, tiny_run.data, tiny_run.model
    history = tiny_run.history
    per_epoch = len(lib.make_batches(data.train, cfg, "cpu"))
    k = per_epoch + per_epoch // 2  # in the middle of the second epoch
    assert cfg.eval_every < k < cfg.steps and k % per_epoch and k % cfg.eval_every
    pl.train(cfg, data, tmp_path, "cpu", max_steps=k, log=quiet)
    state = lib.checkpoints.load_checkpoint(tmp_path / "last.pt")
    assert state["progress"]["step"] == k
    assert len(state["history"]["val_loss"]) == k // cfg.eval_every
    resumed, resumed_history = pl.train(cfg, data, tmp_path, "cpu", log=quiet)
    assert same_weights(model, resumed)
    assert resumed_history["run_id"] == state["history"]["run_id"]  # the same run
    assert resumed_history["val_loss"] == history["val_loss"]
    assert resumed_history["train_loss"] == history["train_loss"]
    torch.manual_seed(cfg.seed)
    untrained = lib.build_model(cfg.model, len(data.vocab_src), len(data.vocab_tgt))
    assert not same_weights(untrained, resumed), "nothing trained"


def test_resume_every_writes_last_pt_less_often_and_keeps_what_it_needs(
    lib, tiny_run, tmp_path, monkeypatch
):
    """With resume_every=2, last.pt is written at every second evaluation and at the
    end; a run stopped in between resumes from the older last.pt, finds every
    snapshot its history needs, and ends as the uninterrupted run."""
    import pipeline as pl

    cfg, data = tiny_run.cfg, tiny_run.data
    sparse = cfg.updated(resume_every=2)
    saves, save_run = [], resume.save_run

    def spy(run, world):
        saves.append(run.progress["step"])
        return save_run(run, world)

    monkeypatch.setattr("atkit.resume.save_run", spy)
    pl.train(sparse, data, tmp_path, "cpu", log=quiet)
    monkeypatch.undo()
    steps = tiny_run.history["steps"]
    assert saves == [steps[1], steps[2]], saves  # last.pt at evaluations 2 and 3
    cut = tmp_path / "cut"
    pl.train(sparse, data, cut, "cpu", max_steps=cfg.eval_every + 2, log=quiet)
    state = lib.checkpoints.load_checkpoint(cut / "last.pt")
    assert state["progress"]["step"] == cfg.eval_every + 2
    resumed, h = pl.train(sparse, data, cut, "cpu", log=quiet)
    assert same_weights(tiny_run.model, resumed)
    for step in resume.kept_steps(h, cfg.keep):
        assert resume.snapshot_path(cut, step).exists(), step


def test_a_finished_run_is_loaded_and_left_unchanged(
    lib, tiny_run, run_dir, monkeypatch
):
    import pipeline as pl

    before = (run_dir / "last.pt").read_bytes()
    forbid(lib, monkeypatch, *NO_TRAINING)
    messages = []
    loaded, again = pl.train(
        tiny_run.cfg, tiny_run.data, run_dir, "cpu", log=messages.append
    )
    history = tiny_run.history
    assert "finished" in messages[0] and again == history
    lines = [lib.runner.history_line(history, i) for i in range(len(history["steps"]))]
    assert messages[1:] == lines
    assert (run_dir / "last.pt").read_bytes() == before, "a rerun changed last.pt"
    assert same_weights(tiny_run.model, loaded)


def test_a_branch_shares_the_first_steps_and_ends_as_a_run_from_step_0(
    lib, tiny_run, tmp_path
):
    """Part 4's eq. 3 run branches off the full recipe's run where its cool-down
    begins: both must end exactly as if each had been trained on its own."""
    import pipeline as pl

    cfg, data = tiny_run.cfg, tiny_run.data
    eq3 = cfg.updated(cooldown=0.0)
    at = schedule.cooldown_start(cfg)
    assert 0 < at < cfg.steps and at % cfg.eval_every  # between two evaluations
    alone, alone_history = pl.train(eq3, data, tmp_path / "alone", "cpu", log=quiet)
    src, dst = tmp_path / "src", tmp_path / "dst"
    trained_to = []

    def train_src(n):
        import pipeline as pl

        trained_to.append(n)
        pl.train(cfg, data, src, "cpu", max_steps=n, log=quiet)

    assert resume.share_steps(train_src, src, dst, eq3, at, {"cooldown"}, quiet)
    assert trained_to == [at]
    full, full_history = pl.train(cfg, data, src, "cpu", log=quiet)
    branch, branch_history = pl.train(eq3, data, dst, "cpu", log=quiet)
    assert same_weights(full, tiny_run.model) and same_weights(branch, alone)
    assert full_history["val_loss"] == tiny_run.history["val_loss"]
    assert branch_history["val_loss"] == alone_history["val_loss"]
    assert not same_weights(branch, full)
    # a run of its own, whose snapshots (those copied from src too) carry its id
    assert branch_history["run_id"] != full_history["run_id"]
    for step in resume.kept_steps(branch_history, eq3.keep):
        resume.load_snapshot(dst, branch_history, step)
    # a second call finds the branch; a source past the step has nothing to share
    assert not resume.share_steps(train_src, src, dst, eq3, at, {"cooldown"}, quiet)
    said = []
    assert not resume.share_steps(
        train_src, src, tmp_path / "late", eq3, at, {"cooldown"}, said.append
    )
    assert trained_to == [at] and "trains from step 0" in said[0]
    # only the named settings may differ
    with pytest.raises(ConfigError, match="differ"):
        other = eq3.updated(eps_ls=0.2)
        resume.share_steps(
            train_src,
            tmp_path / "alone",
            tmp_path / "other",
            other,
            cfg.steps,
            {"cooldown"},
            quiet,
        )


@pytest.mark.parametrize(
    "change, named",
    [
        ({"n_eval": 20}, "n_eval"),  # the validation set
        ({"n_train": 100}, "n_train"),
        ({"max_tokens": 200}, "max_tokens"),
        ({"seed": 1}, "seed"),
        ({"P_drop": 0.2}, "model.P_drop"),
        ({"d_model": 32}, "model.d_model"),
        ({"steps": 12}, "steps"),  # with a cool-down, steps shape the schedule
        ({"cooldown": 0.0}, "cooldown"),
        ({"eval_every": 2}, "eval_every"),
    ],
)
def test_a_resume_with_a_changed_setting_is_refused_naming_it(
    lib, stopped_copy, change, named
):
    import pipeline as pl

    before = pt_files(stopped_copy)
    cfg = copy_cfg(lib, **change)
    with pytest.raises(ConfigError, match="other settings") as err:
        pl.train(cfg, lib.copy_task_data(cfg), stopped_copy, "cpu", log=quiet)
    assert f"'{named}'" in str(err.value) and str(stopped_copy) in str(err.value)
    assert pt_files(stopped_copy) == before


def test_a_resumed_run_must_have_the_same_vocabulary(lib, tiny_run, run_dir):
    import pipeline as pl

    other = pl.prepare_data(tiny_run.cfg.updated(n_train=100))
    with pytest.raises(ConfigError, match="another vocabulary"):
        pl.train(tiny_run.cfg, other, run_dir, "cpu", log=quiet)


def test_settings_that_change_no_number_may_change_on_resume(lib, tmp_path):
    """decode_tokens may change; so may steps without a cool-down, and bpe_size in a
    word-level run, which never reads it. The resumed run equals one that had the new
    settings from the start, and its snapshots (saved under both configs) are still
    one run's for averaging."""
    import pipeline as pl

    base = copy_cfg(lib, cooldown=0.0, keep=3)
    assert base.vocab == "words"
    more = base.updated(steps=12, decode_tokens=50, bpe_size=base.bpe_size + 1)
    data = lib.copy_task_data(base)
    pl.train(base, data, tmp_path / "resumed", "cpu", max_steps=5, log=quiet)
    model, history = pl.train(more, data, tmp_path / "resumed", "cpu", log=quiet)
    ref, ref_history = pl.train(more, data, tmp_path / "straight", "cpu", log=quiet)
    assert history["val_loss"] == ref_history["val_loss"]
    assert same_weights(model, ref)
    snapshots = [tmp_path / "resumed" / f"step{s:06d}.pt" for s in (4, 8, 12)]
    configs = [lib.checkpoints.load_checkpoint(p)["config"] for p in snapshots]
    assert configs[0]["steps"] == 8 != configs[-1]["steps"]  # saved before/after
    lib.average_checkpoints(snapshots)  # no error: one run


def test_max_steps_must_be_beyond_the_steps_done(lib, tmp_path, capsys):
    """One check (atkit.resume.check_max_steps) for the notebook and the program:
    an integer >= 1, beyond the steps done; a refusal changes no file."""
    import pipeline as pl

    cfg = copy_cfg(lib)
    with pytest.raises(ConfigError, match="max_steps"):
        data = lib.copy_task_data(cfg)
        pl.train(cfg, data, tmp_path / "a", "cpu", max_steps=0, log=quiet)
    assert not (tmp_path / "a" / "last.pt").exists()
    run, out = tmp_path / "run", tmp_path / "r.json"
    args = copy_args(run, {"steps": 4, "eval_every": 2, "n_train": 60}, out=out)
    assert run_program([*args, "--max-steps", "2"], capsys)[0] == 0
    for max_steps in ("2", "1", "0"):
        assert "max_steps" in refused([*args, "--max-steps", max_steps], capsys)
    assert run_program(args, capsys)[0] == 0  # finish the run
    written = out.read_bytes()
    message = refused([*args, "--max-steps", "3"], capsys)
    assert "has done 4 steps" in message
    assert out.read_bytes() == written


# ----------------------------------------------- damaged and edited checkpoints


def _edit(key_path, value):
    def edit(state):
        *parents, last = key_path
        target = state
        for key in parents:
            target = target[key]
        if value is None:
            del target[last]
        else:
            target[last] = value(target[last]) if callable(value) else value
        return state

    return edit


def _nan(t):
    t = t.clone()
    t.view(-1)[0] = float("nan")
    return t


DAMAGE = {  # how a last.pt may be damaged or edited -> what the error must say
    "empty": (lambda blob: b"", ["cannot be read"]),
    "truncated": (lambda blob: blob[: len(blob) // 2], ["cannot be read"]),
    "garbage": (lambda blob: b"\x00not a checkpoint", ["cannot be read"]),
    "shape": (
        _edit(("model", "generator.proj.bias"), lambda bias: torch.zeros(3)),
        ["does not fit this run"],
    ),
    "missing": (_edit(("model", "generator.proj.bias"), None), ["does not fit"]),
    "rank state": (_edit(("ranks", 0, "rng"), None), ["edited or damaged"]),
    # edited by hand: what the run has done no longer adds up
    "steps done": (_edit(("progress", "step"), 10**6), ["1000000 steps are done"]),
    "negative step": (_edit(("progress", "step"), -4), ["progress['step']"]),
    "best step": (_edit(("history", "best_step"), -4), ["best_step", "-4"]),
    "not the best": (_edit(("history", "best_step"), 8), ["best_step", "lowest"]),
    "a loss gone": (_edit(("history", "val_loss"), lambda v: v[1:]), ["val_loss"]),
    "a loss more": (
        _edit(("history", "train_loss"), lambda v: v + [0.0]),
        ["train_loss", "one number per evaluation"],
    ),
    "nan loss": (
        _edit(("history", "val_loss"), lambda v: [math.nan, *v[1:]]),
        ["val_loss"],
    ),
    "no ranks": (_edit(("ranks",), []), ["0 ranks"]),
    "nan": (_edit(("model", "generator.proj.bias"), _nan), ["inf or NaN"]),
    "newer format": (
        _edit(("format",), "annotated-transformer/99"),
        ["a newer version of this notebook wrote it", "update"],
    ),
    "older format": (
        _edit(("format",), "annotated-transformer/1"),
        ["an older version of this notebook wrote it"],
    ),
    "foreign": (_edit(("format",), "someone-else/3"), ["not a checkpoint of this"]),
}
BYTES = ("empty", "truncated", "garbage")
# edits of the training state only: the weights still load as a model
EDITED = (
    "rank state",
    "steps done",
    "negative step",
    "best step",
    "not the best",
    "a loss gone",
    "a loss more",
    "nan loss",
    "no ranks",
)


def damage(lib, path, kind):
    how, _ = DAMAGE[kind]
    if kind in BYTES:
        path.write_bytes(how(path.read_bytes()))
    else:
        torch.save(how(lib.checkpoints.load_checkpoint(path)), path)


@pytest.mark.parametrize("kind", list(DAMAGE))
def test_a_damaged_last_pt_is_refused_by_name(lib, tiny_run, run_dir, kind):
    """With no prev.pt to fall back on, training refuses the file by name and says
    what is wrong; so does loading it as a model, where that reads the part."""
    import pipeline as pl

    last = run_dir / "last.pt"
    damage(lib, last, kind)
    (run_dir / "prev.pt").unlink()
    before = pt_files(run_dir)
    with pytest.raises(
        lib.checkpoints.CheckpointError, match=re.escape(str(last))
    ) as e:
        pl.train(tiny_run.cfg, tiny_run.data, run_dir, "cpu", log=quiet)
    for word in DAMAGE[kind][1]:
        assert word in str(e.value), (word, str(e.value))
    assert pt_files(run_dir) == before
    if kind not in EDITED:  # what a model reads is damaged
        with pytest.raises(lib.checkpoints.CheckpointError, match="last.pt") as e:
            pl.model_from_checkpoint(last)
        if "format" in kind:
            assert DAMAGE[kind][1][0] in str(e.value)


@pytest.mark.parametrize("kind", [*BYTES, "nan", "newer format", *EDITED])
def test_a_damaged_last_pt_falls_back_to_prev_pt(lib, tiny_run, run_dir, kind):
    """prev.pt (step 16) is one evaluation older: the run resumes from it, says so,
    and ends with exactly the weights of the run that was never damaged."""
    import pipeline as pl

    damage(lib, run_dir / "last.pt", kind)
    said = []
    model, history = pl.train(
        tiny_run.cfg, tiny_run.data, run_dir, "cpu", log=said.append
    )
    assert any("last.pt" in m and "resuming from prev.pt" in m for m in said), said
    assert history["steps"] == tiny_run.history["steps"]
    assert same_weights(model, tiny_run.model)


def test_a_malicious_pickle_is_refused(lib, tmp_path):
    class Boom:
        def __reduce__(self):
            return (os.system, ("echo pwned",))

    path = tmp_path / "evil.pt"
    torch.save({"x": Boom()}, path)
    with pytest.raises(lib.checkpoints.CheckpointError, match="evil.pt") as err:
        lib.checkpoints.load_checkpoint(path)
    # issue 56: never torch's advice to load it with weights_only=False, cut short
    message = str(err.value)
    assert "weights_only" not in message and "\x1b" not in message, message
    assert "not a checkpoint of this notebook" in message and "system" in message
    assert message.endswith("give a checkpoint this notebook wrote"), message


def test_a_damaged_checkpoint_is_named_in_whole_sentences(lib, tmp_path):
    """torch's first sentence only, never cut in the middle of a word."""
    path = tmp_path / "cut.pt"
    torch.save({"x": torch.zeros(3)}, path)
    path.write_bytes(path.read_bytes()[:60])
    with pytest.raises(lib.checkpoints.CheckpointError) as err:
        lib.checkpoints.load_checkpoint(path)
    message = str(err.value)
    assert "central directory.)" in message and "corrupted" not in message, message
    assert message.endswith("damaged or not a checkpoint of this notebook"), message
    path.write_bytes(b"\x00not a checkpoint")  # what the weights-only reader stops at
    with pytest.raises(lib.checkpoints.CheckpointError) as err:
        lib.checkpoints.load_checkpoint(path)
    message = str(err.value)
    assert "(UnpicklingError: Unsupported operand 0)" in message, message
    assert "weights_only" not in message and "cannot be read" in message, message


def test_a_checkpoint_with_extra_or_missing_weights(lib, tiny_run):
    import pipeline as pl

    step = tiny_run.history["steps"][-1]
    ckpt = lib.checkpoints.load_checkpoint(resume.snapshot_path(tiny_run.folder, step))
    extra = {**ckpt, "model": {**ckpt["model"], "surprise": torch.zeros(1)}}
    with pytest.raises(lib.checkpoints.CheckpointError, match="surprise"):
        pl.model_from_checkpoint(extra)
    weights = {k: v for k, v in ckpt["model"].items() if "generator" not in k}
    with pytest.raises(lib.checkpoints.CheckpointError, match="generator"):
        pl.model_from_checkpoint({**ckpt, "model": weights})
    with pytest.raises(lib.checkpoints.CheckpointError, match="format"):
        pl.model_from_checkpoint({"model": ckpt["model"]})


# ------------------------------------------------- a snapshot of another run


@pytest.fixture(scope="module")
def twins(lib, tmp_path_factory):
    """Copy-task runs: a and b with the same settings (the same numbers, two runs),
    c with another seed. Each keeps its snapshots of steps 4 and 8."""
    import pipeline as pl

    root = tmp_path_factory.mktemp("twins")
    for name, seed in (("a", 0), ("b", 0), ("c", 1)):
        cfg = copy_cfg(lib, seed=seed)
        pl.train(cfg, lib.copy_task_data(cfg), root / name, "cpu", log=quiet)
    return root


def saved_history(folder) -> dict:
    return torch.load(Path(folder) / "last.pt", weights_only=True)["history"]


def without_id(path):
    """The file as an older version of the notebook wrote it: no run id."""
    state = torch.load(path, weights_only=True)
    state.pop("run_id", None)
    if "history" in state:
        state["history"].pop("run_id", None)
    torch.save(state, path)


@pytest.mark.parametrize("use", ["best", "averaged"])
@pytest.mark.parametrize("other", ["same settings", "another seed"])
def test_a_snapshot_of_another_run_is_refused_by_name(lib, twins, tmp_path, use, other):
    """Another run's snapshot copied in under a step's name is not scored as this
    run's: best_model and averaged_model compare it with the run's history (run
    id, step, validation loss) and name the file."""
    import pipeline as pl

    folder = copy_of(twins / "a", tmp_path / "a")
    history = saved_history(folder)
    assert history["run_id"] != saved_history(twins / "b")["run_id"]
    step = history["best_step"] if use == "best" else history["steps"][0]
    theirs = twins / ("b" if other == "same settings" else "c")
    target = resume.snapshot_path(folder, step)
    target.write_bytes(resume.snapshot_path(theirs, step).read_bytes())
    with pytest.raises(lib.checkpoints.CheckpointError) as e:
        if use == "best":
            pl.best_model(folder, history, "cpu")
        else:
            pl.averaged_model(folder, {**history, "best_step": 8}, "cpu", 2)
    assert str(target) in str(e.value) and "not this run's snapshot" in str(e.value)
    assert "run id" in str(e.value)


def test_snapshots_without_a_run_id_are_checked_by_their_losses(lib, twins, tmp_path):
    """Files of an older version (no run id anywhere) still load as the run's own;
    another seed's snapshot among them differs in its validation loss."""
    import pipeline as pl

    folder = copy_of(twins / "a", tmp_path / "a")
    for path in folder.glob("*.pt"):
        without_id(path)
    history = saved_history(folder)
    assert "run_id" not in history
    pl.best_model(folder, history, "cpu")
    pl.averaged_model(folder, {**history, "best_step": 8}, "cpu", 2)
    step = history["best_step"]
    target = resume.snapshot_path(folder, step)
    target.write_bytes(resume.snapshot_path(twins / "c", step).read_bytes())
    without_id(target)
    with pytest.raises(lib.checkpoints.CheckpointError, match="validation loss"):
        pl.best_model(folder, history, "cpu")


def test_a_non_finite_loss_stops_training_and_keeps_last_pt(lib, tmp_path, monkeypatch):
    import pipeline as pl

    cfg = copy_cfg(lib, cooldown=0.0)
    data = lib.copy_task_data(cfg)
    pl.train(cfg, data, tmp_path, "cpu", max_steps=4, log=quiet)
    good = (tmp_path / "last.pt").read_bytes()
    original, calls = lib.SimpleLossCompute.__call__, [0]

    def poisoned(self, x, y, norm):
        calls[0] += 1
        loss_sum, loss = original(self, x, y, norm)
        if calls[0] == 3:  # the third step after the resumption goes wrong
            return loss_sum * math.nan, loss * math.nan
        return loss_sum, loss

    monkeypatch.setattr(lib.SimpleLossCompute, "__call__", poisoned)
    with pytest.raises(pl.run.resume.NonFiniteLossError, match="step 7;"):
        pl.train(cfg, data, tmp_path, "cpu", log=quiet)
    assert (tmp_path / "last.pt").read_bytes() == good, "last.pt was overwritten"
    assert not (tmp_path / "step000008.pt").exists()


def test_non_finite_weights_are_never_saved(lib, tmp_path):
    import pipeline as pl

    cfg = copy_cfg(lib)
    ckpt_dir = lib.checkpoints.prepare_ckpt_dir(tmp_path)
    run = pl.run.start_run(cfg, lib.copy_task_data(cfg), ckpt_dir, "cpu")
    with torch.no_grad():
        next(run.model.parameters())[0, 0] = float("inf")
    with pytest.raises(resume.NonFiniteLossError, match="last.pt"):
        resume.save_run(run, lib.runner.SingleProcess())
    assert not (tmp_path / "last.pt").exists()


# ------------------------------------------------------------------ a full disk


def test_a_full_disk_keeps_the_last_checkpoint(lib, small_disk):
    path = small_disk / "last.pt"
    lib.checkpoints.save_rotating({"w": torch.ones(100)}, path)
    before = path.read_bytes()
    for save in (lib.checkpoints.save_rotating, lib.checkpoints.save_checkpoint):
        with pytest.raises(files.DiskFullError) as err:
            save({"w": torch.ones(40_000)}, path)  # 160 kB
        assert err.value.errno == errno.ENOSPC
        message = str(err.value)
        assert "disk is full" in message and str(path) in message
        assert "last.pt is as it was" in message
        assert path.read_bytes() == before, "last.pt must stay the last good state"
        assert sorted(p.name for p in small_disk.iterdir()) == ["last.pt"]


def test_a_full_disk_at_the_lock_is_named(lib, tmpfs, tmp_path, monkeypatch, capsys):
    disk = tmpfs("disk", "256k")
    fill_disk(disk)
    forbid(lib, monkeypatch, *NO_TRAINING)
    run = disk / "run"
    message = refused(copy_args(run, COPY, out=tmp_path / "r.json"), capsys)
    assert message.startswith("the disk is full"), message
    assert str(run / ".lock") in message


def test_a_full_disk_at_a_checkpoint_save_is_named_and_keeps_last_pt(
    lib, tmpfs, tmp_path, capsys
):
    """The run saves at step 4; with the disk full, the resumed run's save at step 8
    fails: the message names the file and the disk, last.pt is the step-4 one, no
    half-written file is left; with space freed the run goes on."""
    disk = tmpfs("disk", "768k")
    run, out = disk / "run", tmp_path / "r.json"
    args = copy_args(run, COPY, out=out)
    assert run_program([*args, "--max-steps", "4"], capsys)[0] == 0
    before = pt_files(run)
    filler = fill_disk(disk)
    message = refused(args, capsys)
    assert message.startswith("the disk is full"), message
    assert re.search(re.escape(str(run)) + r"/(step000008|last)\.pt", message), message
    assert "is as it was" in message
    assert pt_files(run) == before
    assert not list(run.glob(".*.tmp")), "a temporary file was left"
    filler.unlink()
    assert run_program(args, capsys)[0] == 0
    assert lib.checkpoints.load_checkpoint(run / "last.pt")["progress"]["step"] == 8


def results_for(tmp_path) -> dict:
    n = 5_000  # a history whose JSON is larger than a small disk
    return {"task": "copy", "best_step": 2, "history": {"steps": list(range(n))}}


def test_results_that_cannot_be_written_are_never_lost(tmpfs, tmp_path, capsys):
    """--out on a full disk: to a file beside the checkpoints; the checkpoint folder
    full too: to standard output. The message says where, the status is 2, and the
    old results file is left as it was."""
    disk = tmpfs("disk", "64k")
    out = disk / "results.json"
    out.write_text('{"old": "results"}')
    fill_disk(disk)
    results = results_for(tmp_path)
    assert cli.write_results(results, out, tmp_path) == 2
    fallback = list(tmp_path.glob("results-*.json"))
    assert len(fallback) == 1 and json.loads(fallback[0].read_text()) == results
    err = capsys.readouterr().err
    assert f"could not be written to {out}" in error_line(err)
    assert f"they are in {fallback[0]} instead" in err
    assert json.loads(out.read_text()) == {"old": "results"}
    assert sorted(p.name for p in disk.iterdir()) == ["filler", "results.json"]
    assert cli.write_results(results, out, disk) == 2
    printed, err = capsys.readouterr()
    assert json.loads(printed) == results
    assert "printed above" in error_line(err)


def test_a_run_whose_results_file_is_on_a_full_disk_keeps_its_scores(
    lib, tmpfs, tmp_path, capsys, on_toy_corpus
):
    """The whole program (on the made-up corpus): it trains and scores, then finds
    --out's disk full; the results, scores and all, land beside the checkpoints
    (issue 47)."""
    disk = tmpfs("disk", "64k")
    fill_disk(disk)
    out = disk / "r.json"
    args = ["--preset", "ci", "--ckpt-dir", str(tmp_path / "run"), "--out", str(out)]
    for setting in ("n_train=100", "n_eval=8", "steps=2", "eval_every=2"):
        args += ["--set", setting]
    status, _, err = run_program(args, capsys)
    assert status == 2, err[-3000:]
    (fallback,) = (tmp_path / "run").glob("results-*.json")
    assert f"they are in {fallback} instead" in error_line(err)
    results = json.loads(fallback.read_text())
    assert results["steps"] == 2 and 0 <= results["bleu_test_2016_flickr"] <= 100
    assert not out.exists()


def test_a_checkpoint_of_another_format_says_who_wrote_it(lib):
    fmt = lib.checkpoints.CHECKPOINT_FORMAT  # "<name>/<version>"
    name, version = fmt.rsplit("/", 1)
    origin = lib.checkpoints.format_origin
    newer = {"format": f"{name}/{int(version) + 1}"}
    assert (
        origin(newer) == "a newer version of this notebook wrote it; update your copy"
    )
    older = {"format": f"{name}/{int(version) - 1}"}
    assert (
        origin(older)
        == "an older version of this notebook wrote it; train the run again"
    )
    for foreign in ({"format": "someone-else/3"}, {"format": f"{name}/x"}, {}, [1]):
        assert origin(foreign) == "it is not a checkpoint of this notebook", foreign
    with pytest.raises(lib.checkpoints.CheckpointError) as err:
        lib.checkpoints.check_format(newer, "run/last.pt")
    assert str(err.value) == (
        f"run/last.pt is in format {newer['format']!r}, this notebook reads {fmt!r}: "
        "a newer version of this notebook wrote it; update your copy"
    )
