"""Parts 2, 3 and 5 on a CUDA device: the fast step without a host sync, autocast in
the chosen precision, a float16 step with its GradScaler, the compiled step, CUDA's
attention kernels, a one-process NCCL run, the CUDA generator in a resumed run, and
decoding. Skipped where PyTorch sees no CUDA device; each test is small (tiny models,
a few steps), so the file takes well under a minute on a GPU apart from compiling.
"""

from __future__ import annotations

import json
import shutil

import pytest

from atkit import runtime
from atkit.launch import launch_torchrun, worker_code
from conftest import lazy, quiet

torch = lazy("torch")
fast = lazy("atkit.fast")

# a condition in a string is evaluated when a test runs, not while the tests are
# collected (which loads no torch)
pytestmark = pytest.mark.skipif(
    "not torch.cuda.is_available()", reason="needs a CUDA device"
)


def cuda():
    """The GPU the tests run on (a function: collecting the tests loads no torch)."""
    return torch.device("cuda", 0)


DTYPES = {"bf16": "bfloat16", "fp16": "float16"}
TINY = dict(n_train=200, n_eval=20, max_tokens=300, N=1, d_model=32, d_ff=64, h=2)


def tiny_cfg(lib, **changes):
    import pipeline as pl

    return pl.run_config("ci", **{**TINY, **changes})


def run_step(lib, model, batch, loss_compute, opt, sched, precision=None):
    """Part 2's step as a run takes it in `precision` (pipeline.run.step_parts)."""
    from pipeline import run

    precision = precision or fast.Precision(None, "cuda")
    net, loss, opt = run.step_parts(model, loss_compute, opt, precision)
    return lib.train_step(net, batch, loss, opt, sched)


def copy_parts(lib, cfg):
    """(data, model, optimizer, scheduler, loss_compute, precision) on the GPU for
    Part 5's copy task (no corpus needed)."""
    import pipeline as pl

    data = lib.copy_task_data(cfg)
    return (data, *pl.run.build(cfg, data, cuda()))


def expected_dtype(precision: str) -> torch.dtype:
    """The autocast dtype that `precision` means on this GPU."""
    name = runtime.auto_precision(cuda())[0] if precision == "auto" else precision
    return getattr(torch, DTYPES[name])


def weights(model):
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def padded(lengths, V=20, seed=0):
    """(B, max(lengths)) ids in 4..V-1, padded with PAD (2) after each length."""
    gen = torch.Generator().manual_seed(seed)
    ids = torch.full((len(lengths), max(lengths)), 2, dtype=torch.long)
    for i, n in enumerate(lengths):
        ids[i, :n] = torch.randint(4, V, (n,), generator=gen)
    return ids


# ------------------------------------------------------------ the fast step (Part 2)


@pytest.mark.parametrize("precision", ["auto", "fp16"])
def test_fast_step_never_waits_for_the_device(lib, precision):
    """Three fast steps under torch.cuda.set_sync_debug_mode('error'): any operation
    that makes the host wait for the GPU (.item(), a blocking copy, a data-dependent
    shape) raises. fp16 takes the GradScaler path, sync-free with fused Adam."""
    cfg = tiny_cfg(lib, fast=True, precision=precision)
    data, model, opt, sched, loss_compute, prec = copy_parts(lib, cfg)
    assert prec.dtype is expected_dtype(precision)
    assert opt.param_groups[0]["fused"]
    batches = lib.make_batches(data.train, cfg, cuda())
    assert len(batches) >= 4, "the copy data makes too few batches"
    for b in batches:
        assert b.src.device == b.tgt_mask.device == b.label_count.device == cuda()
    # warm-up: first-call allocations, the optimizer's state, cuBLAS handles
    run_step(lib, model, batches[0], loss_compute, opt, sched, precision=prec)
    torch.cuda.synchronize(cuda())
    losses = []
    torch.cuda.set_sync_debug_mode("error")
    try:
        with pytest.raises(RuntimeError, match="synchroniz"):
            torch.ones(2, device=cuda()).sum().item()  # the mode is live
        for b in batches[1:4]:
            loss = run_step(lib, model, b, loss_compute, opt, sched, precision=prec)
            losses.append(loss)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    total = torch.stack(losses)
    assert total.device == cuda() and not total.requires_grad
    assert torch.isfinite(total).all()


@pytest.mark.parametrize("precision", ["auto", "fp16"])
def test_autocast_runs_the_matrix_products_in_the_chosen_precision(lib, precision):
    """Inside precision.autocast() every Linear returns the chosen dtype (bf16 on
    sm80+, fp16 below), the fused loss is float32, and a step's loss is close to the
    float32 step's from the same weights (no dropout)."""
    cfg = tiny_cfg(lib, fast=True, precision=precision, P_drop=0.0)
    data, model, opt, sched, loss_compute, prec = copy_parts(lib, cfg)
    dtype = expected_dtype(precision)
    assert prec.dtype is dtype and prec.device_type == "cuda"
    assert (prec.scaler is not None) == (dtype is torch.float16)
    batch = lib.make_batches(data.train, cfg, cuda())[0]
    seen = []
    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    hooks = [
        m.register_forward_hook(lambda m, i, o: seen.append(o.dtype)) for m in linears
    ]
    try:
        with prec.autocast():
            out = model(batch.src, batch.tgt, batch.src_mask, batch.tgt_mask)
            total, loss = loss_compute(out, batch.tgt_y, batch.ntokens)
    finally:
        for h in hooks:
            h.remove()
    assert len(seen) == len(linears), "every Linear (the generator's too) ran once"
    assert set(seen) == {dtype}, seen
    assert total.dtype == loss.dtype == torch.float32

    ref_cfg = cfg.updated(precision="fp32")
    _, ref, ref_opt, ref_sched, ref_loss, ref_prec = copy_parts(lib, ref_cfg)
    assert ref_prec.dtype is None
    for (name, a), b in zip(weights(model).items(), weights(ref).values(), strict=True):
        assert torch.equal(a, b), f"not the same initial weights: {name}"
    got = run_step(lib, model, batch, loss_compute, opt, sched, precision=prec)
    want = run_step(lib, ref, batch, ref_loss, ref_opt, ref_sched, precision=ref_prec)
    assert got.dtype == torch.float32 and torch.isfinite(got)
    torch.testing.assert_close(got, want, rtol=3e-2, atol=0)


def test_grad_scaler_skips_an_overflowing_step_and_halves_its_scale(lib):
    """float16 (a T4's precision): a step whose float16 gradients overflow leaves the
    weights as they were and halves the scale; the next, normal, step trains."""
    cfg = tiny_cfg(lib, fast=True, precision="fp16", P_drop=0.0)
    data, model, opt, sched, loss_compute, prec = copy_parts(lib, cfg)
    scaler = prec.scaler
    assert prec.dtype is torch.float16 and scaler is not None and scaler.is_enabled()
    assert fast.choose_precision(cuda(), "fp16").scaler is not None
    assert opt.param_groups[0]["fused"], "fused Adam takes the scale from the scaler"
    batch = lib.make_batches(data.train, cfg, cuda())[0]
    start = scaler.get_scale()

    def blown_up(x, y, norm):
        total, loss = loss_compute(x, y, norm)
        return total, loss * 1e30  # finite in float32; its float16 gradients are not

    before = weights(model)
    run_step(lib, model, batch, blown_up, opt, sched, precision=prec)
    assert scaler.get_scale() == start * scaler.get_backoff_factor() == start / 2
    for name, w in weights(model).items():
        assert torch.equal(w, before[name]), f"a skipped step changed {name}"
    run_step(lib, model, batch, loss_compute, opt, sched, precision=prec)
    assert scaler.get_scale() == start / 2, "the normal step overflowed too"
    after = weights(model)
    assert any(not torch.equal(after[n], before[n]) for n in before), "nothing moved"
    assert all(torch.isfinite(w).all() for w in after.values())


# ------------------------------------------------------------ compiled (gpu preset)


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_compiled_step_matches_eager_and_compiles_one_graph(lib, monkeypatch):
    """maybe_compile with the real inductor backend: the gradients of the compiled
    model match eager ones within bf16 tolerance, and an epoch of batch shapes made
    with pad_multiple=8 (S == T in some batches, not in others) runs on the one graph
    compiled for the first batch: no graph break, no recompilation."""
    import torch._dynamo
    import torch.fx.experimental._config as fx_config
    from torch._dynamo.testing import CompileCounterWithBackend

    import pipeline as pl

    works, why = runtime.compile_works(cuda())
    assert works, f"torch.compile cannot run here: {why}"
    cfg = pl.run_config(
        "ci", n_train=400, pad_multiple=8, fast=True, precision="auto", P_drop=0.0, N=1
    )
    data = pl.prepare_data(cfg)
    batches = lib.make_batches(data.train, cfg, cuda())
    shapes = [(b.src.size(0), b.src.size(1), b.tgt.size(1)) for b in batches]
    assert all(s % 8 == 0 and t % 8 == 0 for _, s, t in shapes), shapes
    assert any(s == t for _, s, t in shapes) and any(s != t for _, s, t in shapes)
    order = sorted(batches, key=lambda b: b.src.size(1) != b.tgt.size(1))

    monkeypatch.setattr(fx_config, "use_duck_shape", fx_config.use_duck_shape)
    monkeypatch.setattr(torch._dynamo.config, "error_on_recompile", True)  # says why
    torch._dynamo.reset()
    counter = CompileCounterWithBackend("inductor")
    original = torch.compile
    monkeypatch.setattr(
        torch, "compile", lambda m, o=original, c=counter, **kw: o(m, backend=c, **kw)
    )
    try:
        model, opt, sched, loss_compute, prec = pl.run.build(cfg, data, cuda())
        net = fast.maybe_compile(model, True, cuda())
        assert net is not model and net._orig_mod is model

        def grads(call, b):
            model.zero_grad(set_to_none=True)
            with prec.autocast():
                out = call(b.src, b.tgt, b.src_mask, b.tgt_mask)
                total, loss = loss_compute(out, b.tgt_y, b.ntokens)
            loss.backward()
            return total.detach(), {
                n: p.grad.float().clone() for n, p in model.named_parameters()
            }

        first = order[0]
        loss_e, g_e = grads(model, first)
        loss_c, g_c = grads(net, first)
        assert counter.frame_count == 1, f"graph breaks: {counter.frame_count} graphs"
        torch.testing.assert_close(loss_c, loss_e, rtol=1e-2, atol=0)
        scale = max(g.norm() for g in g_e.values())
        assert scale > 0
        for name, g in g_e.items():
            err = (g_c[name] - g).norm()
            assert err <= 0.05 * g.norm() + 1e-3 * scale, (name, err, g.norm())

        for b in order[1:]:  # the compiled step over the rest of the epoch
            loss = run_step(lib, net, b, loss_compute, opt, sched, precision=prec)
        assert torch.isfinite(loss)
        assert counter.frame_count == 1, (counter.frame_count, shapes)
    finally:
        torch._dynamo.reset()


# ------------------------------------------------------------ attention kernels


def test_sdpa_matches_didactic_attention_in_bf16(lib):
    """F.scaled_dot_product_attention on CUDA (the memory-efficient kernel, which
    takes our boolean masks) against Part 1's attention, both under bf16 autocast,
    and both against float32; the source length 13 is no multiple of 8, so the
    kernel has to pad the mask."""
    torch.manual_seed(0)
    src, tgt = padded([13, 9, 4]), padded([11, 7, 3], seed=1)
    b = lib.Batch(src, tgt, pad=2).to(cuda())
    mha = lib.MultiHeadedAttention(4, 64).to(cuda()).eval()
    x = torch.randn(3, b.tgt.size(1), 64, device=cuda())  # decoder states
    memory = torch.randn(3, b.src.size(1), 64, device=cuda())
    cases = {
        "decoder self-attention": (x, b.tgt_mask),
        "encoder-decoder attention": (memory, b.src_mask),
    }
    for case, (kv, mask) in cases.items():
        out = {}
        for impl, dtype in (
            ("didactic", None),
            ("didactic", torch.bfloat16),
            ("sdpa", torch.bfloat16),
        ):
            fast.set_fast_path(mha, attn_impl=impl)  # "sdpa": atkit.fast's fused class
            autocast = torch.autocast("cuda", torch.bfloat16, enabled=bool(dtype))
            with torch.no_grad(), autocast:
                out[impl, dtype] = mha(x, kv, kv, mask).float()
        ref = out["didactic", None]
        for key in (("didactic", torch.bfloat16), ("sdpa", torch.bfloat16)):
            rel = ((out[key] - ref).norm() / ref.norm()).item()
            assert rel < 2e-2, (case, key, rel)  # bf16 keeps 8 bits: 0.4% a rounding
        torch.testing.assert_close(
            out["sdpa", torch.bfloat16],
            out["didactic", torch.bfloat16],
            atol=3e-2,
            rtol=3e-2,
            msg=case,
        )


# ------------------------------------------------------------ Part 5 and Part 3


PRINT_BACKEND = (
    "import torch.distributed as dist, atkit.launch as L\n"
    "_setup = L.setup_distributed\n"
    "def setup(*a, **k):\n"
    "    out = _setup(*a, **k)\n"
    "    print('process group backend:', dist.get_backend(), flush=True)\n"
    "    return out\n"
    "L.setup_distributed = setup\n"
)


def test_one_process_nccl_run(lib, tmp_path):
    """torchrun, one process on the GPU: NCCL, DataParallel's on-device token count,
    DDP, gather and barrier; rank 0's last.pt is an ordinary checkpoint."""
    import pipeline as pl

    ckpt, out = tmp_path / "ckpt", tmp_path / "r.json"
    args = [
        "--task",
        "copy",
        "--preset",
        "ci",
        "--device",
        "cuda",
        "--ckpt-dir",
        ckpt,
        "--set",
        "steps=10",
        "--set",
        "eval_every=5",
        "--set",
        "n_train=400",
        "--set",
        "n_eval=40",
        "--out",
        out,
    ]
    rc, output = launch_torchrun(
        args,
        nproc=1,
        code=PRINT_BACKEND + worker_code("tools.train"),
        timeout_s=300,
        env={"OMP_NUM_THREADS": "1"},
        check=False,
        echo=False,
    )
    assert rc == 0, output[-4000:]
    assert "process group backend: nccl" in output, output[-2000:]
    results = json.loads(out.read_text())
    assert results["device"] == "cuda:0" and results["processes"] == 1
    assert results["steps"] == 10 and results["history"]["steps"] == [5, 10]
    state = lib.checkpoints.load_checkpoint(ckpt / "last.pt")
    assert state["history"]["world_size"] == 1 and len(state["ranks"]) == 1
    assert set(state["ranks"][0]["rng"]) == {"torch", "cuda"}
    model, cfg, vs, vt = pl.model_from_checkpoint(ckpt / "last.pt")
    assert cfg.steps == 10 and len(vs) == len(vt) == 16
    assert next(model.parameters()).device.type == "cpu"


def test_resumed_run_restores_the_cuda_generator(lib, tmp_path, monkeypatch):
    """save_run stores this device's CUDA generator (one state, not all GPUs'), and a
    run with dropout stopped at step 4 and resumed ends with exactly the weights of
    the uninterrupted run; restoring the CPU generator alone would not."""
    import pipeline as pl

    cfg = tiny_cfg(
        lib, n_train=120, n_eval=16, max_tokens=200, steps=6, eval_every=3, P_drop=0.3
    )
    data = lib.copy_task_data(cfg)
    whole, _ = pl.train(cfg, data, tmp_path / "whole", cuda(), log=quiet)
    cut = tmp_path / "cut"
    pl.train(cfg, data, cut, cuda(), max_steps=4, log=quiet)
    state = lib.checkpoints.load_checkpoint(cut / "last.pt")
    assert state["progress"]["step"] == 4
    rng = state["ranks"][0]["rng"]
    assert set(rng) == {"torch", "cuda"}
    mine = torch.cuda.get_rng_state(cuda())
    assert torch.is_tensor(rng["cuda"]) and rng["cuda"].shape == mine.shape
    shutil.copytree(cut, tmp_path / "cpu-only")
    pl.run.start_run(cfg, data, cut, cuda())  # builds and restores
    assert torch.equal(torch.cuda.get_rng_state(cuda()), rng["cuda"])

    resumed, _ = pl.train(cfg, data, cut, cuda(), log=quiet)
    for (name, a), b in zip(
        whole.state_dict().items(), resumed.state_dict().values(), strict=True
    ):
        assert torch.equal(a, b), f"{name}: max diff {(a - b).abs().max().item()}"

    monkeypatch.setattr(
        lib.checkpoints,
        "set_rng_state",
        lambda s, device: torch.set_rng_state(s["torch"]),
    )
    other, _ = pl.train(cfg, data, tmp_path / "cpu-only", cuda(), log=quiet)
    pairs = zip(whole.state_dict().values(), other.state_dict().values(), strict=True)
    assert any(not torch.equal(a, b) for a, b in pairs), (
        "dropout drew nothing from the CUDA generator: the check above proves nothing"
    )


def test_decoding_on_cuda(lib):
    """translate_ids (greedy and beam search, with the key/value cache) on a model on
    the GPU: every tensor it makes lands on the model's device."""
    torch.manual_seed(0)
    model = lib.make_model(16, 16, "tiny", N=1, d_model=32, d_ff=64, h=2, max_len=64)
    model.to(cuda()).eval()
    sources = [lib.frame([5, 6, 7, 8]), lib.frame([9, 4]), lib.frame([4] * 12)]
    for search in (lib.greedy_decode, lib.make_search("beam", beam_size=3)):
        out = lib.translate_ids(model, sources, search=search)
        assert len(out) == 3
        for src, ids in zip(sources, out, strict=True):
            assert all(isinstance(i, int) and 0 <= i < 16 for i in ids)
            assert len(ids) <= len(src) + 50


def test_attention_maps_of_a_model_on_cuda(lib):
    """Part 6 reads the attention of the trained model wherever it lives: on a GPU
    too (the committed notebook's Part 6 runs on the gpu preset's device)."""
    torch.manual_seed(0)
    model = lib.make_model(16, 16, "tiny", N=2, d_model=32, d_ff=64, h=2, max_len=64)
    model.to(cuda()).eval()
    src_ids, tgt_ids = lib.frame([5, 6, 7, 8]), [lib.BOS, 9, 10]
    maps = lib.attention_maps(model, src_ids, tgt_ids)
    S, T = len(src_ids), len(tgt_ids)
    shapes = {"encoder": (2, 2, S, S), "decoder": (2, 2, T, T), "cross": (2, 2, T, S)}
    for kind, shape in shapes.items():
        w = maps[kind]
        assert w.device.type == "cpu" and tuple(w.shape) == shape, kind
        torch.testing.assert_close(w.sum(-1), torch.ones(shape[:-1]))
    assert maps["decoder"][..., 0, 1:].abs().max() == 0, "the causal mask holds"
