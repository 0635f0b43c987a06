"""Part 5, data parallelism: sharding, and torchrun runs on CPU (gloo, 2 processes)
compared with a single process that steps on the same global batches."""

import importlib.util
import os
import re
import shutil
import sys
import time

import pytest
import torch

import nbexport
from conftest import ROOT

PART5 = ROOT / "parts" / "part5_fast_and_distributed.md"
PART5_TITLE = "## Part 5: Faster and distributed training"


@pytest.fixture(scope="module")
def notebook(tmp_path_factory, ddp_train):
    """The notebook with Part 5: the real one once merged, else the notebook + Part 5
    (whose generated module the workers write to a temporary folder, removed after)."""
    if PART5_TITLE in nbexport.NOTEBOOK.read_text():
        yield nbexport.NOTEBOOK
        return
    path = tmp_path_factory.mktemp("nb") / "nb_part5.md"
    path.write_text(nbexport.NOTEBOOK.read_text() + "\n" + PART5.read_text())
    yield path
    shutil.rmtree(ddp_train.module_path(path).parent, ignore_errors=True)


@pytest.fixture(scope="module")
def lib(notebook):
    return nbexport.load(notebook, name="annotated_transformer_lib_test_ddp")


@pytest.fixture(scope="module")
def ddp_train():
    """tools/ddp_train.py as a module, for its task builders and argument parser."""
    spec = importlib.util.spec_from_file_location(
        "ddp_train_script", ROOT / "tools" / "ddp_train.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


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


def test_epoch_shuffle_is_a_seeded_permutation(lib):
    items = list(range(50))
    a, b = lib.epoch_shuffle(items, 0, 3), lib.epoch_shuffle(items, 0, 3)
    assert a == b and sorted(a) == items
    assert lib.epoch_shuffle(items, 0, 4) != a


# ---------------------------------------------------------------- torchrun runs

SIZES = ["--n-sentences", "240", "--max-tokens", "160", "--d-model", "32"]
SIZES += ["--precision", "fp32"]  # the reference runs in float32


def launch(lib, notebook, args, nproc=2, env=None, timeout_s=120):
    env = {"OMP_NUM_THREADS": "1", **(env or {})}
    start = time.monotonic()
    rc, out = lib.launch_torchrun(
        ["--notebook", notebook, *args],
        nproc=nproc,
        timeout_s=timeout_s,
        env=env,
        check=False,
        echo=False,
    )
    return rc, out, time.monotonic() - start


def reference_run(lib, ddp_train, notebook, args, world, steps):
    """One process, one optimiser step per group of `world` consecutive batches of
    the epoch's order: the global batch that the `world` ranks share."""
    a = ddp_train.parse_args(["--notebook", str(notebook), *args])
    model, batches, _, _, d_model, warmup, *_ = ddp_train.copy_task(lib, a)
    lib.set_fast_path(model)
    if a.optimizer == "adam":
        optimizer, scheduler = lib.make_fast_optimizer(model, d_model, warmup=warmup)
    else:
        optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1 / (s + 1))
    loss_compute = lib.FastLossCompute(model.generator, 0, 0.0)
    order = lib.epoch_shuffle(batches, a.seed, 0)
    assert len(order) >= world * steps, "test data too small for the steps asked"
    init = {k: v.clone() for k, v in model.state_dict().items()}
    ntokens = []
    lrs = []
    for k in range(steps):
        group = order[k * world : (k + 1) * world]
        ntokens.append([b.ntokens for b in group])
        lrs.append(optimizer.param_groups[0]["lr"])
        lib.fast_train_step(model, group, loss_compute, optimizer, scheduler)
    return init, model.state_dict(), ntokens, lrs


@pytest.fixture(scope="module")
def ddp_runs(lib, ddp_train, notebook, tmp_path_factory):
    """2-rank runs of 3 steps: SGD with global token normalisation and with
    per-rank normalisation, and Adam with the eq. 3 schedule; and their
    single-process references."""
    out = tmp_path_factory.mktemp("ddp")
    runs = {}
    for name, norm, opt in (
        ("global", "global", "sgd"),
        ("local", "local", "sgd"),
        ("adam", "global", "adam"),
    ):
        ckpt = out / f"{name}.pt"
        args = [*SIZES, "--optimizer", opt, "--max-steps", "3", "--norm", norm]
        rc, log, seconds = launch(
            lib, notebook, [*args, "--ckpt", ckpt, "--log-every", "1"]
        )
        assert rc == 0, log[-3000:]
        runs[name] = (torch.load(ckpt, weights_only=True), log, seconds)
    for opt in ("sgd", "adam"):
        args = [*SIZES, "--optimizer", opt]
        runs[f"reference-{opt}"] = reference_run(lib, ddp_train, notebook, args, 2, 3)
    return runs


def max_difference(a, b):
    return max((a[k] - b[k]).abs().max().item() for k in a)


def test_ddp_equals_single_process_on_the_same_global_batches(ddp_runs):
    init, want, ntokens, _ = ddp_runs["reference-sgd"]
    ckpt, _, _ = ddp_runs["global"]
    assert ckpt["step"] == 3 and ckpt["world_size"] == 2
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
    ckpt, _, _ = ddp_runs["adam"]
    assert ckpt["scheduler"]["last_epoch"] == 3
    assert max_difference(want, init) > 1e-4
    for name, value in want.items():
        got = ckpt["model"][name]
        if name.endswith("w_k.bias"):
            assert (got - value).abs().max() <= 2 * sum(lrs), name
        else:
            torch.testing.assert_close(got, value, atol=1e-6, rtol=1e-5, msg=name)


def test_only_rank_0_logs_and_writes(ddp_runs):
    ckpt, log, _ = ddp_runs["global"]
    assert len(re.findall(r"^epoch 0 step 2:", log, flags=re.M)) == 1
    assert len(re.findall(r"validation loss", log)) == 1
    assert set(ckpt) >= {"model", "optimizer", "scheduler", "model_config", "step"}
    assert ckpt["scheduler"]["last_epoch"] == 3, "the schedule counts global steps"


@pytest.mark.parametrize("mode", ["raise", "exit"])
def test_a_dying_worker_fails_the_launch_quickly(lib, notebook, mode):
    args = [*SIZES, "--max-steps", "50", "--log-every", "1", "--timeout-s", "30"]
    rc, log, seconds = launch(
        lib, notebook, args, env={"AT_DDP_FAULT": f"1:2:{mode}"}, timeout_s=90
    )
    assert rc != 0, log[-2000:]
    assert seconds < 60, f"took {seconds:.0f} s to notice"
    assert "injected fault" in log
    assert re.search(r"rank\s*:\s*1", log), "torchrun should name the failed rank"
    assert not re.search(r"^epoch 0 step 5:", log, flags=re.M), "rank 0 carried on"
    if mode == "raise":
        assert "injected failure on rank 1" in log, "the traceback should be shown"


def test_a_hanging_worker_is_cut_off_by_the_collective_timeout(lib, notebook):
    args = [*SIZES, "--max-steps", "50", "--log-every", "1", "--timeout-s", "8"]
    rc, log, seconds = launch(
        lib, notebook, args, env={"AT_DDP_FAULT": "1:2:hang"}, timeout_s=90
    )
    assert rc != 0, log[-2000:]
    assert seconds < 60, f"took {seconds:.0f} s"
    assert re.search(r"rank\s*:\s*0", log), "rank 0 should fail on the timeout"


def test_launcher_raises_with_the_output_tail(lib, notebook):
    with pytest.raises(RuntimeError, match="exited with code"):
        lib.launch_torchrun(
            ["--notebook", notebook, "--task", "nonsense"],
            nproc=1,
            timeout_s=60,
            echo=False,
        )


def test_stale_generated_module_is_rewritten(ddp_train, notebook, tmp_path):
    target = ddp_train.module_path(notebook)
    if target.exists():
        target.write_text("raise RuntimeError('stale module imported')\n")
    previous = sys.modules.pop(nbexport.MODULE_NAME, None)
    saved = list(sys.path)
    try:
        module = ddp_train.import_notebook(notebook)
        assert hasattr(module, "train_distributed")
        assert target.read_text() == nbexport.module_source(notebook)
    finally:
        sys.path[:] = saved
        sys.modules.pop(nbexport.MODULE_NAME, None)
        if previous is not None:
            sys.modules[nbexport.MODULE_NAME] = previous
    assert os.path.dirname(module.__file__) == str(target.parent)
