"""Part 5, data parallelism: sharding, torchrun runs on CPU processes (gloo, 2 ranks,
on any machine, GPUs or not) compared with one process that steps on the same global
batches, failing workers, and a torchrun run resumed bit for bit (by 2 processes, or
by one)."""

import dataclasses
import hashlib
import importlib
import json
import os
import re
import shutil
import sys
import time
from pathlib import Path

import pytest

from atkit import launch as launcher
from atkit import runtime
from atkit.settings import ConfigError
from conftest import COPY, copy_args, copy_cfg, lazy, needs, quiet
from tools import train as cli

torch = lazy("torch")
plt = lazy("matplotlib.pyplot")
parallel = lazy("pipeline.parallel")

SETTINGS = [
    "n_train=240",
    "max_tokens=160",
    "d_model=32",
    "h=2",
    "d_ff=64",
    "N=1",
    "n_eval=10",
    "warmup=100",
    "factor=1.0",
    "P_drop=0.0",
]


def cli_args(ckpt_dir, *extra):
    args = [
        "--task",
        "copy",
        "--preset",
        "ci",
        "--device",
        "cpu",
        "--ckpt-dir",
        ckpt_dir,
        "--out",
        ckpt_dir / "results.json",
    ]
    for s in SETTINGS:
        args += ["--set", s]
    return [*args, *extra]


# Each worker runs this before train_cli: test-only changes stay in the tests.
SGD = (
    "import torch\n"
    "import annotated_transformer_lib as m\n"
    "def sgd(model, d_model, factor=1.0, warmup=4000, fused=False, **kw):\n"
    "    opt = torch.optim.SGD(model.parameters(), lr=0.5)\n"
    "    return opt, torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1 / (s + 1))\n"
    "m.make_optimizer = sgd  # what training_parts calls\n"
)
LOCAL_NORM = "import annotated_transformer_lib as m\nm.DataParallel.norm = None\n"
FAULT = (
    "import os, time\n"
    "import annotated_transformer_lib as m\n"
    "step, original = [0], m.train_step\n"
    "def faulty(*a, **k):\n"
    "    out = original(*a, **k)\n"
    "    step[0] += 1\n"
    "    if int(os.environ['RANK']) == 1 and step[0] == 2:\n"
    "        print('rank 1: injected fault {mode}', flush=True)\n"
    "        if '{mode}' == 'raise': raise RuntimeError('injected failure on rank 1')\n"
    "        if '{mode}' == 'exit': os._exit(3)\n"
    "        while True: time.sleep(1)\n"
    "    return out\n"
    "m.train_step = faulty  # what Part 2's run_epoch calls\n"
)


def launch(lib, args, prelude="", nproc=2, timeout_s=180):
    code = prelude + launcher.worker_code("tools.train")
    start = time.monotonic()
    rc, out = launcher.launch_torchrun(
        args,
        nproc=nproc,
        code=code,
        timeout_s=timeout_s,
        env={"OMP_NUM_THREADS": "1"},
        check=False,
        echo=False,
    )
    return rc, out, time.monotonic() - start


# ---------------------------------------------------------------- sharding


@pytest.mark.parametrize("n, world", [(10, 2), (11, 3), (7, 4), (3, 4), (8, 1)])
def test_shard_batches_round_robin_equal_and_disjoint(lib, n, world):
    batches = [f"b{i}" for i in range(n)]
    shards = [lib.shard_batches(batches, r, world) for r in range(world)]
    assert {len(s) for s in shards} == {n // world}, "ranks must take equal steps"
    for r, shard in enumerate(shards):
        assert shard == [f"b{i}" for i in range(r, n // world * world, world)]
    taken = [b for s in shards for b in s]
    assert len(set(taken)) == len(taken) == n // world * world


def test_shard_batches_rejects_bad_rank(lib):
    with pytest.raises(ValueError, match="rank"):
        lib.shard_batches([1, 2, 3], 2, 2)
    with pytest.raises(ValueError, match="world_size"):
        lib.shard_batches([1, 2, 3], 0, 0)


def test_epoch_order_is_a_seeded_permutation(lib):
    a, b = lib.epoch_order(50, 0, 3), lib.epoch_order(50, 0, 3)
    assert a == b and sorted(a) == list(range(50))
    assert lib.epoch_order(50, 0, 4) != a


# ---------------------------------------------------------------- torchrun runs


def reference_run(lib, tmp_path, world, steps, optimizer="adam"):
    """One process, one optimiser step per group of `world` consecutive batches of
    the epoch's order: the global batch that the `world` ranks share."""
    import pipeline as pl

    cfg = pl.run_config("ci", **dict(cli.parse_setting(s) for s in SETTINGS))
    data = lib.copy_task_data(cfg)
    run = pl.run.start_run(cfg, data, lib.checkpoints.prepare_ckpt_dir(tmp_path), "cpu")
    model = run.model
    if optimizer == "sgd":
        opt = torch.optim.SGD(model.parameters(), lr=0.5)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1 / (s + 1))
    else:
        opt, sched = run.optimizer, run.scheduler
    batches = lib.make_batches(data.train, cfg, "cpu")
    order = lib.epoch_order(len(batches), cfg.seed, 0)
    assert len(order) >= world * steps, "test data too small for the steps asked"
    init = {k: v.clone() for k, v in model.state_dict().items()}
    ntokens, lrs = [], []
    for k in range(steps):
        group = [batches[j] for j in order[k * world : (k + 1) * world]]
        ntokens.append([b.ntokens for b in group])
        lrs.append(opt.param_groups[0]["lr"])
        parallel.micro_batch_step(model, group, run.loss_compute, opt, sched)
    return init, model.state_dict(), ntokens, lrs


@pytest.fixture(scope="module")
@needs("training")
def ddp_runs(lib, tmp_path_factory):
    """2-rank runs of 3 steps: SGD with global token normalisation and with
    per-rank normalisation, and Adam with the eq. 3 schedule; and their
    single-process references."""
    out = tmp_path_factory.mktemp("ddp")
    runs = {}
    for name, prelude in (("global", SGD), ("local", SGD + LOCAL_NORM), ("adam", "")):
        rc, log, seconds = launch(
            lib, cli_args(out / name, "--max-steps", "3"), prelude
        )
        assert rc == 0, log[-3000:]
        runs[name] = (torch.load(out / name / "last.pt", weights_only=True), log)
    for opt in ("sgd", "adam"):
        runs[f"reference-{opt}"] = reference_run(lib, out / f"ref-{opt}", 2, 3, opt)
    return runs


def max_difference(a, b):
    return max((a[k] - b[k]).abs().max().item() for k in a)


def test_ddp_equals_single_process_on_the_same_global_batches(ddp_runs):
    init, want, ntokens, _ = ddp_runs["reference-sgd"]
    ckpt, _ = ddp_runs["global"]
    assert ckpt["progress"]["step"] == 3 and ckpt["history"]["world_size"] == 2
    assert any(len(set(n)) > 1 for n in ntokens), "ranks should hold unequal tokens"
    assert max_difference(want, init) > 1e-3, "training did not move the weights"
    for name, value in want.items():
        torch.testing.assert_close(
            ckpt["model"][name], value, atol=2e-6, rtol=1e-5, msg=name
        )


def test_per_rank_normalisation_is_not_the_single_process_step(ddp_runs):
    """The naive loss (each rank divides by its own tokens) is measurably off, so
    the comparison above can tell the two apart."""
    _, want, _, _ = ddp_runs["reference-sgd"]
    right = max_difference(ddp_runs["global"][0]["model"], want)
    wrong = max_difference(ddp_runs["local"][0]["model"], want)
    assert wrong > 100 * max(right, 1e-7), (right, wrong)


def test_ddp_with_adam_and_the_schedule_equals_single_process(ddp_runs):
    """Adam divides by the gradient's running RMS, so a gradient that is zero in
    exact arithmetic but float noise in practice becomes an update of about +-lr.
    The key projection's bias is such a parameter (adding a constant to every score
    of a row leaves the softmax unchanged); it is held to that bound, everything else
    to float tolerance."""
    init, want, _, lrs = ddp_runs["reference-adam"]
    ckpt, _ = ddp_runs["adam"]
    assert ckpt["scheduler"]["last_epoch"] == 3, "the schedule counts global steps"
    assert max_difference(want, init) > 1e-4
    for name, value in want.items():
        got = ckpt["model"][name]
        if name.endswith("w_k.bias"):
            assert (got - value).abs().max() <= 2 * sum(lrs), name
        else:
            torch.testing.assert_close(got, value, atol=1e-6, rtol=1e-5, msg=name)


def test_ddp_checkpoint_is_the_notebook_format(lib, ddp_runs, tmp_path):
    import pipeline as pl

    ckpt, log = ddp_runs["adam"]
    model, cfg, vs, vt = pl.model_from_checkpoint(ckpt)
    assert cfg.model.d_model == 32 and len(vs) == model.generator.proj.out_features


@pytest.mark.training
def test_a_full_ddp_run_logs_once_and_finishes(lib, tmp_path):
    args = cli_args(tmp_path, "--set", "steps=20", "--set", "eval_every=10")
    rc, log, _ = launch(lib, args)
    assert rc == 0, log[-3000:]
    # stdout and the progress bars' stderr share the log: a line may follow a "\r"
    assert log.count("step    10: train loss") == 1, "rank 0 only"
    assert log.count("step    20: train loss") == 1
    assert "tokens_per_s_per_process" in log
    # nothing of the tools' own: no launcher banner, no deprecation warning
    assert "Warning" not in log and "*****" not in log, log[-3000:]
    assert (tmp_path / "step000020.pt").exists() and (
        tmp_path / "results.json"
    ).exists()
    # each worker gets its share of the cores, and idle threads sleep (Setup's rule)
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["torch_threads"] == runtime.torch_threads(results["preset"], 2)
    assert results["omp_wait_policy"] == "PASSIVE"


@pytest.mark.process
@pytest.mark.parametrize("mode", ["raise", "exit"])
def test_a_dying_worker_fails_the_launch_quickly(lib, tmp_path, mode):
    args = cli_args(tmp_path, "--max-steps", "50", "--timeout-s", "30")
    rc, log, seconds = launch(lib, args, FAULT.replace("{mode}", mode), timeout_s=90)
    assert rc != 0, log[-2000:]
    # torchrun noticed and named the rank (the launcher's own 90 s limit would kill
    # it without this summary); how long it took is not asserted
    assert "injected fault" in log
    assert re.search(r"rank\s*:\s*1", log), "torchrun should name the failed rank"
    if mode == "raise":
        assert "injected failure on rank 1" in log, "the traceback should be shown"


@pytest.mark.process
def test_a_hanging_worker_is_cut_off_by_the_collective_timeout(lib, tmp_path):
    args = cli_args(tmp_path, "--max-steps", "50", "--timeout-s", "8")
    rc, log, seconds = launch(lib, args, FAULT.replace("{mode}", "hang"), timeout_s=90)
    assert rc != 0, log[-2000:]
    assert re.search(r"rank\s*:\s*0", log), "rank 0 should fail on the timeout"


@pytest.mark.process
def test_launcher_raises_with_the_output_tail(lib):
    with pytest.raises(RuntimeError, match="exited with code"):
        launcher.launch_torchrun(
            ["--task", "nonsense"],
            launcher.worker_code("tools.train"),
            nproc=1,
            timeout_s=60,
            echo=False,
        )


def test_an_unknown_device_is_a_clear_error(lib):
    with pytest.raises(ConfigError, match="device"):
        launcher.setup_distributed("tpu")


def test_too_few_gpus_is_a_clear_error(lib, monkeypatch):
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    with pytest.raises(RuntimeError, match="--device cpu"):
        launcher.setup_distributed("cuda")


@pytest.mark.parametrize("new_torch", [True, False])
def test_ddp_buffers_switch_is_the_one_this_torch_knows(lib, monkeypatch, new_torch):
    """torch 2.13 renamed DDP's switch (the old name warns); Colab's older torch
    knows only the old one. The wrapper asks the installed DDP which it takes."""
    seen = {}

    def new(module, device_ids=None, forward_sync_buffers=None):
        seen.update(forward_sync_buffers=forward_sync_buffers)
        return module

    def old(module, device_ids=None, broadcast_buffers=True):
        seen.update(broadcast_buffers=broadcast_buffers)
        return module

    monkeypatch.setattr(lib, "DDP", new if new_torch else old)
    world = lib.DataParallel(0, 1, 0, 1, torch.device("cpu"))
    world.wrap(torch.nn.Linear(2, 2))
    assert seen == (
        {"forward_sync_buffers": False} if new_torch else {"broadcast_buffers": False}
    )


# ------------------------- a torchrun resume, bit for bit; another process count

DDP = {**COPY, "n_train": 240, "n_eval": 10, "d_model": 32, "d_ff": 64, "h": 2}
DDP.update(steps=12, eval_every=4, warmup=100, factor=1.0, P_drop=0.1, keep=3)

# Each worker logs the batches it trains (a digest of the source ids), one file per
# rank, so that a test can tell which batches an interrupted run trained.
BATCH_LOG = (
    "import hashlib, os\n"
    "import annotated_transformer_lib as m\n"
    "original = m.train_step\n"
    "def logged(model, batch, *a, **k):\n"
    "    micro = list(batch) if isinstance(batch, (list, tuple)) else [batch]\n"
    "    path = os.environ['BATCH_LOG'] + '.' + os.environ.get('RANK', '0')\n"
    "    with open(path, 'a') as f:\n"
    "        for b in micro:\n"
    "            f.write(hashlib.sha1(b.src.numpy().tobytes()).hexdigest() + '\\n')\n"
    "    return original(model, batch, *a, **k)\n"
    "m.train_step = logged  # what Part 2's run_epoch calls\n"
)


def batch_digest(b) -> str:
    return hashlib.sha1(b.src.numpy().tobytes()).hexdigest()


def torchrun(folder, log, *extra, nproc=2):
    rc, out = launcher.launch_torchrun(
        copy_args(folder, DDP, *extra),
        nproc=nproc,
        code=BATCH_LOG + launcher.worker_code("tools.train"),
        timeout_s=240,
        check=False,
        echo=False,
        env={"OMP_NUM_THREADS": "1", "BATCH_LOG": str(log)},
    )
    assert rc == 0, out[-3000:]
    return out


def logged(log) -> list[str]:
    return [
        line
        for path in sorted(Path(log).parent.glob(Path(log).name + ".*"))
        for line in path.read_text().split()
    ]


@pytest.fixture(scope="module")
@needs("training")
def ddp(lib, tmp_path_factory):
    """2-rank runs of 12 steps (7 per epoch; dropout on): uninterrupted; stopped in
    the middle of epoch 0 (step 3) and resumed; stopped at an evaluation in epoch 1
    (step 8) and resumed. The folder stopped at step 3 is copied before its resume,
    for the resume with one process."""
    root = tmp_path_factory.mktemp("ddp-resume")
    torchrun(root / "full", root / "full.log")
    torchrun(root / "mid", root / "mid.log", "--max-steps", 3)
    shutil.copytree(root / "mid", root / "mid-for-1")
    torchrun(root / "mid", root / "mid-resumed.log")
    torchrun(root / "eval", root / "eval.log", "--max-steps", 8)
    assert (root / "eval" / "step000008.pt").exists()
    torchrun(root / "eval", root / "eval-resumed.log")
    return root


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
    full, resumed = load(ddp / "full"), load(ddp / stopped_at)
    assert full["progress"]["step"] == resumed["progress"]["step"] == 12
    assert full["config"]["model"]["P_drop"] == 0.1
    for key in ("model", "optimizer", "scheduler", "progress"):
        assert_same_tensors(full[key], resumed[key], key)
    # every rank's own random state: the ranks drew different numbers (different
    # batch shapes), so restoring one rank's state on both would be caught
    ranks = full["ranks"]
    assert len(ranks) == 2
    assert not torch.equal(ranks[0]["rng"]["torch"], ranks[1]["rng"]["torch"])
    assert_same_tensors(ranks, resumed["ranks"], "ranks")
    h, g = full["history"], resumed["history"]
    for key in ("steps", "val_loss", "tokens", "best_step", "world_size"):
        assert h[key] == g[key], key
    # the training loss is summed in float64 in another grouping after a resume
    assert g["train_loss"] == pytest.approx(h["train_loss"], rel=1e-12)
    # and the snapshots kept are the same files' weights
    for step in (8, 12):
        a = torch.load(ddp / "full" / f"step{step:06d}.pt", weights_only=True)
        b = torch.load(ddp / stopped_at / f"step{step:06d}.pt", weights_only=True)
        assert_same_tensors(a["model"], b["model"], f"step {step}")


def test_the_interrupted_runs_trained_the_same_batches(ddp):
    full = logged(ddp / "full.log")
    assert len(full) == 24 and len(set(full)) == 14, "12 steps x 2 ranks, 14 batches"
    for name in ("mid", "eval"):
        parts = logged(ddp / f"{name}.log") + logged(ddp / f"{name}-resumed.log")
        assert sorted(parts) == sorted(full), name


def test_a_resume_with_one_process_trains_the_rest_of_the_epoch_once(
    lib, ddp, monkeypatch, capsys
):
    """Saved by 2 ranks after 3 steps (6 of epoch 0's 14 batches), resumed by one
    process for 8 more steps: it deals the rest of the epoch to itself, so that each
    of the 14 batches is trained once and the epoch ends exactly at step 11."""
    import pipeline as pl

    folder = ddp / "mid-for-1"
    cfg = pl.run_config("ci", **DDP)
    batches = lib.make_batches(lib.copy_task_data(cfg).train, cfg, "cpu")
    epoch0 = [batch_digest(b) for b in batches]
    assert len(set(epoch0)) == len(epoch0) == 14
    saved = load(folder)
    assert saved["progress"]["batch"] == 6 and len(saved["ranks"]) == 2
    ranks_part = logged(ddp / "mid.log")
    assert len(ranks_part) == 6

    one_process, original = [], lib.train_step

    def log_batches(model, batch, *args, **kwargs):
        one_process.append(batch_digest(batch))
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


# ------------------------------------------------- in this process: a world of one

FOUR = {**COPY, "steps": 4, "eval_every": 1, "P_drop": 0.0}


@pytest.fixture
def world_of_one(lib):
    """The default process group with this process as its only rank (gloo, an
    in-memory store), ended by atkit.launch.finish_distributed."""
    dist = importlib.import_module("torch.distributed")
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield lib.DataParallel(0, 1, 0, 1, torch.device("cpu"))
    finally:
        launcher.finish_distributed()
    assert not dist.is_initialized()


def test_a_world_of_one_trains_as_one_process(lib, world_of_one, tmp_path):
    """DataParallel's members over a real process group of one rank: the shard is
    the whole order, the sums and the gathered list are this rank's own, the
    normaliser is the global label-token count over W; trained with it (DDP of
    one), a run takes the single process's steps exactly."""
    import pipeline as pl

    world = world_of_one
    assert world.shard(list(range(7))) == list(range(7))
    cfg = copy_cfg(lib, **{**FOUR, "eval_every": 4})
    data = lib.copy_task_data(cfg)
    micro = lib.make_batches(data.train, cfg, "cpu")[:3]
    count = sum(int(b.label_count) for b in micro)
    n = world.norm(count)
    assert n.dtype == torch.float32 and n.item() == count
    pretend = lib.DataParallel(0, 2, 0, 2, torch.device("cpu"))  # W=2, one rank here
    assert pretend.norm(count).item() == count / 2
    assert pretend.shard(list(range(7))) == [0, 2, 4]
    values = torch.tensor([1.5, 2.0], dtype=torch.float64)
    summed = world.all_sum(values)
    assert summed.dtype == torch.float64 and summed.tolist() == [1.5, 2.0]
    assert world.gather({"rank": 0}) == [{"rank": 0}]
    assert world.barrier() is None
    ddp, history = pl.train(cfg, data, tmp_path / "ddp", "cpu", world=world, log=quiet)
    one, ref = pl.train(cfg, data, tmp_path / "one", "cpu", log=quiet)
    assert history["train_loss"] == ref["train_loss"]
    for name, value in one.state_dict().items():
        assert torch.equal(ddp.state_dict()[name], value), name


def test_global_batch_steps_of_one_rank_are_the_runs_own_steps(
    lib, tmp_path, monkeypatch
):
    """One process stepping on global batches of W=1 takes Part 3's steps (the
    same losses as `train`); with W=2 each step takes two batches."""
    import pipeline as pl

    cfg = copy_cfg(lib, **FOUR)
    data = lib.copy_task_data(cfg)
    _, history = pl.train(cfg, data, tmp_path / "run", "cpu", log=quiet)
    one = tmp_path / "one"
    model, losses = parallel.global_batch_steps(cfg, data, 1, 4, one)
    assert losses == pytest.approx(history["train_loss"], rel=1e-6)
    assert one.is_dir()
    _, two = parallel.global_batch_steps(cfg, data, 2, 2, one)
    assert len(two) == 2 and all(0 < x < 10 for x in two)


def test_plot_two_runs_says_how_far_apart_the_curves_are(lib, monkeypatch, capsys):
    shown = []
    monkeypatch.setattr("matplotlib.pyplot.show", lambda: shown.append(plt.gcf()))
    try:
        parallel.plot_two_runs([2.0, 1.5, 1.25], [2.0, 1.5, 1.2500003])
        (fig,) = shown
        left, right = fig.axes
        assert left.get_title() == "2 processes (DDP)"
        assert right.get_title() == "1 process, same global batches"
        assert left.get_lines()[0].get_ydata().tolist() == [2.0, 1.5, 1.25]
        assert right.get_lines()[0].get_xdata().tolist() == [1, 2, 3]
    finally:
        plt.close("all")
    out = capsys.readouterr().out
    assert out == "3 steps; the largest difference between the curves: 3.0e-07\n"


def test_two_processes_against_one_launches_the_copy_task_and_steps_alike(
    lib, tmp_path, monkeypatch
):
    """The launch itself (torchrun) is the process tier's; here the launcher is
    replaced by the training program run in this process, and the function's
    command line, the worker it names and its single-process reference are
    checked."""
    import pipeline as pl

    launched = []

    def launch(args, code, nproc, timeout_s, echo):
        launched.append((args, code, nproc))
        assert cli.main([str(a) for a in args]) == 0

    monkeypatch.setattr(launcher, "launch_torchrun", launch)
    ci = lib.PRESETS["ci"]  # its copy task made small, for the program and the check
    small = {k: v for k, v in COPY.items() if k != "steps"}
    model_names = {f.name for f in dataclasses.fields(lib.ModelConfig)}
    model = {**ci.model, **{k: v for k, v in small.items() if k in model_names}}
    run = {**ci.run, **{k: v for k, v in small.items() if k not in model_names}}
    small_ci = dataclasses.replace(ci, model=model, run=run)
    monkeypatch.setitem(lib.PRESETS, "ci", small_ci)
    cfg = pl.run_config("ci", steps=3, eval_every=1, resume_every=3, P_drop=0.0)
    data, worker = lib.copy_task_data(cfg), launcher.worker_code("tools.train")
    # as the notebook calls it: the copy task's data and tools.train's worker by default
    two, one = parallel.two_processes_against_one(tmp_path / "two", cfg)
    ((args, code, nproc),) = launched
    assert nproc == 2 and "--fresh" in args and code == worker
    sets = [v for k, v in zip(args, args[1:], strict=False) if k == "--set"]
    assert sets == ["steps=3", "eval_every=1", "resume_every=3", "P_drop=0.0"]
    saved = lib.checkpoints.load_checkpoint(tmp_path / "two" / "last.pt")
    assert two == saved["history"]["train_loss"] and len(two) == 3
    ref = parallel.global_batch_steps(cfg, data, 2, 3, tmp_path / "r")
    assert one == ref[1]


# ------------------------------------------------------- the launcher's own work


def test_the_torchrun_command_line(lib):
    py = sys.executable
    head = [py, "-m", "torch.distributed.run"]
    code = launcher.worker_code("tools.train")
    worker = ["--no-python", py, "-c", code]
    assert launcher.torchrun_command(["--steps", 3], code, nproc=3) == [
        *head,
        "--standalone",
        "--nproc_per_node=3",
        *worker,
        "--steps",
        "3",
    ]
    two_nodes = launcher.torchrun_command(
        [], code="pass", nnodes=2, rdzv_endpoint="host:29400"
    )
    assert two_nodes == [
        *head,
        "--nnodes=2",
        "--rdzv_endpoint=host:29400",
        "--nproc_per_node=2",
        *("--no-python", py, "-c", "pass"),
    ]


STAND_IN = """
import os, sys, time
print("pythonpath", os.environ["PYTHONPATH"].split(os.pathsep)[0], flush=True)
print("threads", os.environ["OMP_NUM_THREADS"], flush=True)
for line in sys.argv[2:]:
    print(line, flush=True)
if sys.argv[1] == "sleep":  # a worker of its own too, as torchrun starts them
    import subprocess
    quiet = dict(stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    worker = subprocess.Popen(["sleep", "60"], **quiet)
    open(os.environ["PID_FILE"], "w").write(f"{os.getpid()} {worker.pid}")
    time.sleep(60)
sys.exit(int(sys.argv[1]))
"""


def stopped(pid: int) -> bool:
    """Whether process `pid` is gone (or a zombie) within a few seconds; a process
    still running then is ended here."""
    stat = Path(f"/proc/{pid}/stat")
    for _ in range(100):
        if not stat.exists() or stat.read_text().rsplit(")", 1)[1].split()[0] == "Z":
            return True
        time.sleep(0.05)
    os.kill(pid, 9)
    return False


def test_launch_torchrun_streams_raises_and_stops(lib, monkeypatch, capsys, tmp_path):
    """launch_torchrun with a stand-in for torchrun (a Python process that loads
    no torch): the output streamed and returned, the repository first on the
    workers' path, each worker's share of the cores, a failure raised with the
    output's end, and a run past timeout_s stopped."""
    monkeypatch.setattr(
        launcher,
        "torchrun_command",
        lambda cli_args, code, nproc, **rdzv: (
            [sys.executable, "-c", STAND_IN] + [str(a) for a in cli_args]
        ),
    )
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    rc, out = launcher.launch_torchrun(["0", "step 1", "step 2"], "", nproc=2)
    cores = max(1, (os.cpu_count() or 1) // 2)
    assert rc == 0
    assert out.splitlines() == [
        f"pythonpath {launcher.REPO}",
        f"threads {cores}",
        "step 1",
        "step 2",
    ]
    assert capsys.readouterr().out == out, "echoed as it came"
    rc, out = launcher.launch_torchrun(["3", "boom"], "", check=False, echo=False)
    assert rc == 3 and out.endswith("boom\n")
    assert capsys.readouterr().out == ""
    with pytest.raises(RuntimeError, match=r"exited with code 3:\n(.*\n)*boom"):
        launcher.launch_torchrun(["3", "boom"], "", env={"OMP_NUM_THREADS": "7"})
    pid_file = tmp_path / "pid"
    with pytest.raises(TimeoutError, match="did not finish within 0.2 s"):
        launcher.launch_torchrun(
            ["sleep"], "", timeout_s=0.2, echo=False, env={"PID_FILE": str(pid_file)}
        )
    if pid_file.exists():  # else it was stopped before it began to sleep
        pid, worker = map(int, pid_file.read_text().split())
        assert not Path(f"/proc/{pid}").exists(), "stopped and reaped"
        assert stopped(worker), "the whole process group is stopped"
    with pytest.raises(ValueError, match="nproc"):
        launcher.launch_torchrun([], "", nproc=0)


def test_a_worker_exits_with_its_status_after_flushing(monkeypatch):
    events = []

    class Stream:
        def __init__(self, name):
            self.name = name

        def flush(self):
            events.append(f"flush {self.name}")

    def exit_now(status):
        events.append(f"exit {status}")
        raise SystemExit(status)

    monkeypatch.setattr(sys, "stdout", Stream("stdout"))
    monkeypatch.setattr(sys, "stderr", Stream("stderr"))
    monkeypatch.setattr(os, "_exit", exit_now)
    with pytest.raises(SystemExit):
        launcher.worker_exit(4)
    assert events == ["flush stdout", "flush stderr", "exit 4"]
