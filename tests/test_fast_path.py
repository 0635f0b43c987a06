"""Part 2's fast step (atkit.fast): sdpa + fused layer norm + fused loss + fused Adam +
autocast compute the same functions as Part 1's plain classes, without waiting for
the device."""

import copy

import pytest

from atkit import runtime
from atkit.settings import ConfigError
from conftest import copy_cfg, lazy

torch = lazy("torch")
fast = lazy("atkit.fast")


def padded_batch(lib, V, lengths, seed=0):
    gen = torch.Generator().manual_seed(seed)
    data = torch.zeros(len(lengths), max(lengths), dtype=torch.long)
    for i, n in enumerate(lengths):
        data[i, :n] = torch.randint(1, V, (n,), generator=gen)
    return lib.Batch(data, data.clone(), pad=0)


def grads(model):
    return {n: p.grad.clone() for n, p in model.named_parameters()}


@pytest.mark.parametrize("norm", ["post", "pre"])
def test_whole_model_fast_path_gives_same_outputs_and_gradients(lib, norm):
    torch.manual_seed(0)
    V = 30
    slow = lib.make_model(V, V, "tiny", N=2, d_model=32, d_ff=64, h=4, norm=norm)
    slow.eval()  # dropout off: the two paths draw random numbers differently
    quick = fast.set_fast_path(copy.deepcopy(slow))
    attn = [m for m in quick.modules() if isinstance(m, lib.MultiHeadedAttention)]
    assert attn and all(isinstance(m, fast.FusedAttention) for m in attn)
    b = padded_batch(lib, V, [9, 6, 3])
    outs = []
    for model in (slow, quick):
        out = model(b.src, b.tgt, b.src_mask, b.tgt_mask)
        logp = model.generator(out)
        (logp.gather(-1, b.tgt_y.unsqueeze(-1)).sum() + out.square().mean()).backward()
        outs.append(out)
    torch.testing.assert_close(outs[1], outs[0], atol=1e-5, rtol=1e-5)
    g_slow, g_fast = grads(slow), grads(quick)
    assert max(g.abs().max() for g in g_slow.values()) > 0
    for name, g in g_slow.items():
        torch.testing.assert_close(g_fast[name], g, atol=1e-5, rtol=1e-4, msg=name)


def test_fast_path_switch_keeps_weights_and_switches_back(lib):
    model = lib.make_model(20, 20, "tiny", N=1, d_model=16, d_ff=32, h=2)
    keys = list(model.state_dict())
    fast.set_fast_path(model)
    assert list(model.state_dict()) == keys
    norms = [m for m in model.modules() if isinstance(m, lib.LayerNorm)]
    assert norms and all(isinstance(m, fast.FusedLayerNorm) for m in norms)
    attn = [m for m in model.modules() if isinstance(m, lib.MultiHeadedAttention)]
    assert attn and all(isinstance(m, fast.FusedAttention) for m in attn)
    fast.set_fast_path(model)  # twice: still one fused subclass, of Part 1's class
    assert {type(m).__mro__[1:3] for m in attn} == {
        (fast.FusedAttention, lib.MultiHeadedAttention)
    }
    fast.set_fast_path(model, fast=False)
    assert all(type(m) is lib.LayerNorm for m in norms)
    assert all(type(m) is lib.MultiHeadedAttention for m in attn)
    assert list(model.state_dict()) == keys


def test_fused_layer_norm_matches_didactic(lib):
    torch.manual_seed(0)
    slow = lib.LayerNorm(24)
    with torch.no_grad():
        slow.gamma.normal_()
        slow.beta.normal_()
    fused = fast.set_fast_path(copy.deepcopy(slow))
    assert isinstance(fused, fast.FusedLayerNorm)
    for scale in (1e-3, 1.0, 1e3):
        x = scale * torch.randn(3, 5, 24)
        torch.testing.assert_close(fused(x), slow(x), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("smoothing", [0.0, 0.1, 0.3])
def test_fused_loss_matches_label_smoothing(lib, smoothing):
    torch.manual_seed(0)
    V, pad = 40, 0
    gen = lib.Generator(16, V)
    x = torch.randn(4, 6, 16, requires_grad=True)
    y = torch.randint(1, V, (4, 6))
    y[:, 4:] = pad
    y[3, 1:] = pad
    slow = lib.SimpleLossCompute(gen, lib.LabelSmoothing(V, pad, smoothing))
    fused = fast.FastLossCompute(gen, pad, smoothing)
    results = []
    for compute in (slow, fused):
        total, loss = compute(x, y, 13)
        params = [x, gen.proj.weight, gen.proj.bias]
        results.append((float(total), loss, torch.autograd.grad(loss, params)))
    (t_slow, l_slow, g_slow), (t_fast, l_fast, g_fast) = results
    assert isinstance(results[1][1], torch.Tensor)
    assert t_fast == pytest.approx(t_slow, rel=1e-5)
    torch.testing.assert_close(l_fast, l_slow, atol=1e-6, rtol=1e-5)
    for a, b in zip(g_fast, g_slow, strict=True):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)
    assert g_fast[0][3, 1:].abs().max() == 0, "padding labels must not contribute"


def test_accumulated_micro_batches_equal_one_big_batch(lib):
    """Part 2's step over two micro-batches (pipeline.parallel.micro_batch_step,
    the fast path) takes the step of their union."""
    from pipeline import parallel

    torch.manual_seed(0)
    V = 25
    a = lib.make_model(V, V, "tiny", N=1, d_model=16, d_ff=32, h=2, P_drop=0.0)
    b = copy.deepcopy(a)
    fast.set_fast_path(b)
    b1, b2 = padded_batch(lib, V, [7, 3], seed=1), padded_batch(lib, V, [7, 7], seed=2)
    both = lib.Batch(torch.cat([b1.src, b2.src]), torch.cat([b1.src, b2.src]), 0)
    states = []
    for model, batches in ((a, [both]), (b, [b1, b2])):
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
        loss_compute = fast.FastLossCompute(model.generator, 0, 0.1)
        if len(batches) == 1:
            total = lib.train_step(model, batches[0], loss_compute, opt, sched)
        else:
            total = parallel.micro_batch_step(model, batches, loss_compute, opt, sched)
        states.append((total, model.state_dict()))
    (t_a, s_a), (t_b, s_b) = states
    torch.testing.assert_close(t_b, t_a, rtol=1e-5, atol=1e-5)
    moved = max((s_a[k] - v).abs().max() for k, v in s_b.items())
    assert moved < 1e-5, f"accumulated step differs by {moved}"


def test_a_runs_wrapping_in_float32_leaves_part_2s_step_as_it_is(lib):
    """pipeline.run.step_parts (autocast, the processes' normaliser, float16's
    scaler, the kept losses) wraps Part 2's step and loop: in float32 on one process
    they take exactly the same steps and return the same sums."""
    from pipeline import run

    torch.manual_seed(0)
    V = 25
    a = lib.make_model(V, V, "tiny", N=1, d_model=16, d_ff=32, h=2, P_drop=0.1)
    b = copy.deepcopy(a)
    batches = [padded_batch(lib, V, [7, 3, 5], seed=s) for s in range(3)]
    results = []
    for model, wrap in ((a, False), (b, True)):
        torch.manual_seed(1)  # the same dropout masks
        opt, sched = lib.make_optimizer(model, 16, warmup=2)
        loss_compute = lib.SimpleLossCompute(
            model.generator, lib.LabelSmoothing(V, 0, 0.1)
        )
        net = model
        if wrap:
            fp32 = fast.Precision(None, "cpu")
            net, loss_compute, opt = run.step_parts(model, loss_compute, opt, fp32)
        total, ntokens, steps = lib.run_epoch(batches, net, loss_compute, opt, sched)
        results.append((total, ntokens, steps, model.state_dict()))
    (t_a, n_a, k_a, s_a), (t_b, n_b, k_b, s_b) = results
    assert (n_a, k_a) == (n_b, k_b) == (sum(x.ntokens for x in batches), 3)
    assert t_a == t_b
    assert all(torch.equal(s_a[k], s_b[k]) for k in s_a)


# The GPUs below are faked on a machine without CUDA, so torch notes that the float16
# GradScaler they get cannot run here.
@pytest.mark.filterwarnings("ignore:torch.cuda.amp.GradScaler is enabled:UserWarning")
def test_precision_by_capability(lib, monkeypatch):
    """ "auto" asks the hardware: bfloat16 only where it is native (sm80+ GPUs, CPUs
    with AMX or AVX512-BF16), float16 with a GradScaler on older GPUs; faked here."""
    import pipeline as pl

    for amx, avx, name in (
        (False, False, "fp32"),
        (True, False, "bf16"),
        (False, True, "bf16"),
    ):
        monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda a=amx: a)
        monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda a=avx: a)
        assert fast.choose_precision("cpu").name == name
        assert runtime.auto_precision("cpu")[0] == name
    # torch.cuda.is_bf16_supported() says True on a T4 (emulation): never asked
    monkeypatch.setattr(
        torch.cuda,
        "is_bf16_supported",
        lambda *a, **k: pytest.fail("is_bf16_supported was asked"),
    )
    for cap, dtype in (
        ((7, 5), torch.float16),
        ((7, 0), torch.float16),
        ((8, 0), torch.bfloat16),
        ((9, 0), torch.bfloat16),
    ):
        monkeypatch.setattr(runtime, "gpu_capability", lambda d, c=cap: c)
        precision = fast.choose_precision("cuda")
        assert precision.dtype is dtype, cap
        assert (precision.scaler is not None) == (dtype is torch.float16)
    monkeypatch.setattr(runtime, "gpu_capability", lambda d: (7, 5))  # a Colab T4
    with pytest.raises(ConfigError, match="emulates"):
        fast.choose_precision("cuda", "bf16")
    assert fast.choose_precision("cuda", "fp16").scaler is not None
    with pytest.raises(ValueError, match="fp16"):
        fast.choose_precision("cpu", "fp16")
    with pytest.raises(ValueError, match="precision"):  # RunConfig checks the name
        pl.run_config("ci", precision="fp8")
    assert fast.choose_precision("cpu", "bf16").scaler is None
    assert fast.choose_precision("cpu", "fp32").dtype is None


def test_one_list_of_precisions():
    """config.PRECISIONS (a setting's choices, bench's --precision) and the dtypes of
    the fast step name the same precisions, and each name comes back from its
    Precision; an unknown one is refused with the list."""
    from atkit import config

    assert ("auto", *fast.DTYPES) == config.PRECISIONS
    for name in fast.DTYPES:
        if name != "fp16":  # fp16 needs CUDA
            assert fast.choose_precision("cpu", name).name == name
    with pytest.raises(ValueError, match="'auto', 'fp32', 'bf16', 'fp16'"):
        fast.choose_precision("cpu", "fp8")


def test_compile_only_where_it_works(lib, monkeypatch):
    m = torch.nn.Linear(2, 2)
    monkeypatch.setattr(runtime, "gpu_capability", lambda d: (6, 0))  # a P100
    assert runtime.compile_works("cuda")[0] is False
    assert fast.maybe_compile(m, True, "cuda") is m
    monkeypatch.setattr(runtime, "gpu_capability", lambda d: (7, 5))
    monkeypatch.setattr(runtime, "c_compiler", lambda: "/usr/bin/gcc")
    monkeypatch.setattr(runtime, "python_headers", lambda: True)
    assert runtime.compile_works("cuda")[0] is True
    # Triton builds its kernels' launcher with a C compiler, against Python.h
    monkeypatch.setattr(runtime, "python_headers", lambda: False)
    assert runtime.compile_works("cuda") == (
        False,
        "Triton's kernel launcher needs Python.h (python3-dev)",
    )
    monkeypatch.setattr(runtime, "c_compiler", lambda: None)
    assert "C compiler" in runtime.compile_works("cuda")[1]
    assert fast.maybe_compile(m, True, "cuda") is m
    monkeypatch.setattr("shutil.which", lambda name: None)  # no C++ compiler
    assert runtime.compile_works("cpu")[0] is False
    assert fast.maybe_compile(m, True, "cpu") is m


def test_c_compiler_is_the_one_triton_would_use(monkeypatch):
    monkeypatch.setenv("CC", "/nonexistent/cc")
    assert runtime.c_compiler() is None
    monkeypatch.delenv("CC")
    monkeypatch.setattr("shutil.which", lambda n: {"clang": "/opt/clang"}.get(n))
    assert runtime.c_compiler() == "/opt/clang"
    assert isinstance(runtime.python_headers(), bool)


@pytest.mark.training
def test_one_compiled_graph_for_an_epoch_of_shapes(lib, monkeypatch):
    """maybe_compile turns duck sizing off, so an epoch's batch shapes (S == T for
    some batches, not for others) share one graph; with duck sizing there are two."""
    import torch._dynamo
    import torch.fx.experimental._config as fx_config
    from torch._dynamo.testing import CompileCounter

    import pipeline as pl

    cfg = pl.run_config("ci", n_train=400, pad_multiple=8)
    data = pl.prepare_data(cfg)
    batches = lib.make_batches(data.train, cfg, "cpu")
    shapes = {(b.src.size(1), b.tgt.size(1)) for b in batches}
    assert any(s == t for s, t in shapes) and any(s != t for s, t in shapes), shapes
    counts = {}
    for duck in (True, False):
        monkeypatch.setattr(fx_config, "use_duck_shape", True)
        torch._dynamo.reset()
        counter = CompileCounter()
        original = torch.compile
        monkeypatch.setattr(
            torch,
            "compile",
            lambda m, o=original, c=counter, **kw: o(m, backend=c, **kw),
        )
        model = lib.build_model(cfg.model, len(data.vocab_src), len(data.vocab_tgt))
        fast.set_fast_path(model)
        if duck:  # what torch.compile(dynamic=True) does by default
            net = torch.compile(model, dynamic=True)
        else:
            net = fast.maybe_compile(model, True, "cpu")
        order = sorted(batches, key=lambda b: b.src.size(1) != b.tgt.size(1))
        with torch.no_grad():
            for b in order:  # a batch with S == T comes first
                net(b.src, b.tgt, b.src_mask, b.tgt_mask)
        counts[duck] = counter.frame_count
        monkeypatch.setattr("torch.compile", original)
    torch._dynamo.reset()
    assert counts == {True: 2, False: 1}, counts


def test_grad_scaler_state_is_saved_and_restored(lib, tmp_path, monkeypatch):
    """A float16 run's GradScaler (its scale and growth counter) is part of last.pt
    and comes back on resume; exercised on the CPU with an fp32 step, on Part 5's
    copy task (no corpus to read)."""
    import pipeline as pl

    cfg = copy_cfg(lib, steps=6, eval_every=3)
    data = lib.copy_task_data(cfg)

    def with_scaler(device, precision="auto"):
        scaler = torch.amp.GradScaler("cpu", init_scale=2.0**10, growth_interval=2)
        return fast.Precision(None, "cpu", scaler)

    monkeypatch.setattr("atkit.fast.choose_precision", with_scaler)
    whole, _ = pl.train(cfg, data, tmp_path / "whole", "cpu", log=lambda *a: None)
    pl.train(cfg, data, tmp_path / "cut", "cpu", max_steps=4, log=lambda *a: None)
    state = lib.checkpoints.load_checkpoint(tmp_path / "cut" / "last.pt")
    assert state["scaler"]["scale"] == 2.0**12  # grown twice in 4 steps
    run = pl.run.start_run(cfg, data, tmp_path / "cut", "cpu")
    assert run.precision.scaler.get_scale() == 2.0**12
    resumed, _ = pl.train(cfg, data, tmp_path / "cut", "cpu", log=lambda *a: None)
    for (name, a), b in zip(
        whole.state_dict().items(), resumed.state_dict().values(), strict=True
    ):
        assert torch.equal(a, b), name


def test_bf16_autocast_step_is_close_to_fp32(lib):
    torch.manual_seed(0)
    V = 25
    model = fast.set_fast_path(
        lib.make_model(V, V, "tiny", N=1, d_model=32, d_ff=64, h=2, P_drop=0.0)
    )
    twin = copy.deepcopy(model)
    batch = padded_batch(lib, V, [8, 5, 2])
    from pipeline import run

    losses = []
    for m, dtype in ((model, None), (twin, torch.bfloat16)):
        opt = torch.optim.SGD(m.parameters(), lr=0.01)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
        loss_compute = fast.FastLossCompute(m.generator, 0, 0.1)
        precision = fast.Precision(dtype, "cpu")
        net, loss_compute, opt = run.step_parts(m, loss_compute, opt, precision)
        losses.append(lib.train_step(net, batch, loss_compute, opt, sched))
    assert losses[1].dtype == torch.float32, "the loss is reduced in float32"
    assert torch.isfinite(losses[1])
    torch.testing.assert_close(losses[1], losses[0], rtol=3e-2, atol=0)


def test_fast_attention_choice(lib):
    assert fast.fast_attention_impl(fast.Precision(None, "cpu")) == "sdpa"
    assert fast.fast_attention_impl(fast.Precision(torch.bfloat16, "cpu")) == "didactic"
    assert fast.fast_attention_impl(fast.Precision(torch.bfloat16, "cuda")) == "sdpa"
    m = fast.set_fast_path(
        lib.make_model(9, 9, "tiny", N=1, d_model=16, d_ff=32, h=2),
        attn_impl="didactic",
    )
    assert any(isinstance(x, fast.FusedLayerNorm) for x in m.modules())
    attn = [x for x in m.modules() if isinstance(x, lib.MultiHeadedAttention)]
    assert attn and all(type(x) is lib.MultiHeadedAttention for x in attn)
    with pytest.raises(ValueError, match="attn_impl='fused'"):
        fast.set_fast_path(m, attn_impl="fused")


def test_fused_adam_takes_the_same_steps_as_make_optimizer(lib):
    torch.manual_seed(0)
    a = torch.nn.Linear(6, 5)
    b = copy.deepcopy(a)
    opt_a, sched_a = lib.make_optimizer(a, 32, factor=2.0, warmup=3)
    opt_b, sched_b = lib.make_optimizer(b, 32, factor=2.0, warmup=3, fused=True)
    assert opt_b.param_groups[0]["fused"]
    for _ in range(5):
        x = torch.randn(4, 6)
        for m, opt, sched in ((a, opt_a, sched_a), (b, opt_b, sched_b)):
            m(x).square().sum().backward()
            opt.step()
            opt.zero_grad()
            sched.step()
    assert opt_a.param_groups[0]["lr"] == opt_b.param_groups[0]["lr"]
    for pa, pb in zip(a.parameters(), b.parameters(), strict=True):
        torch.testing.assert_close(pb, pa, atol=1e-6, rtol=1e-5)
    assert (a.weight - torch.nn.Linear(6, 5).weight).abs().max() > 0


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # torch.jit, via compile
def test_compile_option_is_off_by_default(lib):
    m = torch.nn.Linear(2, 2)
    assert fast.maybe_compile(m) is m
    compiled = fast.maybe_compile(m, enabled=True)  # wraps lazily; compiles on call
    assert compiled is not m and compiled._orig_mod is m


def FailingCompile(model):
    """What torch.compile gives where Triton cannot build the kernels of this GPU
    (faked): a compiled model whose call raises. (A class made when a test runs:
    the collection of the tests loads no torch.)"""

    class Failing(torch.nn.Module):
        def __init__(self, model):
            super().__init__()
            self._orig_mod = model

        def forward(self, *args, **kwargs):
            raise RuntimeError("triton: sm75 is not supported by this kernel\n(faked)")

    return Failing(model)


@pytest.mark.parametrize("where", ["at torch.compile", "at the first call"])
def test_a_compile_that_fails_falls_back_to_eager(lib, monkeypatch, tmp_path, where):
    """The gpu preset compiles; on a T4 Triton may fail, when torch.compile is called
    or, as it compiles lazily, at the first step. The run goes on uncompiled, says
    so in one line, and ends with exactly the weights of an uncompiled run."""
    import pipeline as pl
    from conftest import copy_cfg, quiet

    cfg = copy_cfg(lib)
    data = lib.copy_task_data(cfg)
    eager, _ = pl.train(cfg, data, tmp_path / "eager", "cpu", log=quiet)

    def compile(model, **options):
        if where == "at torch.compile":
            raise RuntimeError("triton: sm75 is not supported\n(faked)")
        return FailingCompile(model)

    monkeypatch.setattr(runtime, "compile_works", lambda device: (True, "faked"))
    monkeypatch.setattr("torch.compile", compile)
    said = []
    model, history = pl.train(
        cfg.updated(compile=True), data, tmp_path / "compiled", "cpu", log=said.append
    )
    failed = [line for line in said if "torch.compile failed" in line]
    assert len(failed) == 1, said
    assert "sm75" in failed[0] and "uncompiled" in failed[0] and "\n" not in failed[0]
    assert history["steps"] == [4, 8]
    for (name, a), b in zip(
        eager.state_dict().items(), model.state_dict().values(), strict=True
    ):
        assert torch.equal(a, b), name


def test_an_error_of_the_model_itself_is_not_blamed_on_compiling(monkeypatch):
    monkeypatch.setattr("torch.compile", lambda model, **kw: FailingCompile(model))
    said = []
    net = runtime.compiled_or_eager(torch.nn.Linear(2, 2), said.append)
    with pytest.raises(RuntimeError, match="shapes cannot be multiplied"):
        net(torch.zeros(1, 3))  # wrong for the model, compiled or not
    assert said == []
    assert net(torch.zeros(1, 2)).shape == (1, 2)  # compiling fails: eager from now
    assert len(said) == 1 and net.net is net.model


def test_plain_forward_runs_part_1s_classes_for_a_block(lib):
    """Part 6 reads the weights Part 1's attention keeps; on a fast model,
    fast.plain_forward switches every module back for the block, and after it (also
    after an error) the fast classes are back."""
    model = fast.set_fast_path(lib.make_model(9, 9, "tiny", N=1, d_model=16, h=2))
    before = [type(m) for m in model.modules()]
    with fast.plain_forward(model):
        assert not any(hasattr(type(m), "plain_class") for m in model.modules())
    assert [type(m) for m in model.modules()] == before
    with pytest.raises(RuntimeError, match="inside"), fast.plain_forward(model):
        raise RuntimeError("inside")
    assert [type(m) for m in model.modules()] == before


class SyncCounter:
    """Counts the calls that copy a tensor's value to the host (a device sync)."""

    NAMES = ("item", "tolist", "__bool__", "__int__", "__float__", "cpu", "numpy")

    def __init__(self, monkeypatch):
        self.calls = []
        for name in self.NAMES:
            original = getattr(torch.Tensor, name)

            def counted(t, *a, _name=name, _original=original, **kw):
                self.calls.append(_name)
                return _original(t, *a, **kw)

            monkeypatch.setattr(torch.Tensor, name, counted)


def fast_setup(lib, V=25):
    torch.manual_seed(0)
    model = fast.set_fast_path(
        lib.make_model(V, V, "tiny", N=1, d_model=32, d_ff=64, h=2)
    )
    opt, sched = lib.make_optimizer(model, 32, warmup=10, fused=True)
    return model, fast.FastLossCompute(model.generator, 0, 0.1), opt, sched


def test_fast_train_step_never_waits_for_the_device(lib, monkeypatch):
    """No .item(), no tensor turned into a Python number, no data-dependent shape:
    a step that a GPU could run without the host stopping to wait."""
    model, loss_compute, opt, sched = fast_setup(lib)
    batches = [padded_batch(lib, 25, [7, 5, 3], seed=s) for s in range(3)]
    lib.train_step(model, batches[0], loss_compute, opt, sched)  # warm-up
    counter = SyncCounter(monkeypatch)
    for b in batches:
        loss = lib.train_step(model, b, loss_compute, opt, sched)
    assert counter.calls == [], counter.calls
    assert isinstance(loss, torch.Tensor) and not loss.requires_grad


def test_run_epoch_and_a_runs_check_sync_once_per_window(lib, monkeypatch):
    """Part 2's run_epoch reads its losses from the device once, at the end; the
    pipeline's check of a window's losses (inf, NaN) once more."""
    from atkit.runner import checked_sum
    from pipeline import run

    model, loss_compute, opt, sched = fast_setup(lib)
    batches = [padded_batch(lib, 25, [6, 4], seed=s) for s in range(12)]
    loss = run.RunLoss(loss_compute, fast.Precision(None, "cpu"))
    counter = SyncCounter(monkeypatch)
    total, ntokens, steps = lib.run_epoch(batches, model, loss, opt, sched)
    assert checked_sum(loss.steps, 0) == pytest.approx(total, rel=1e-6)
    assert steps == 12 and ntokens == sum(b.ntokens for b in batches)
    syncs = [c for c in counter.calls if c in ("cpu", "item", "tolist")]
    assert len(syncs) <= 3, counter.calls  # the sum, the check, the bar
    assert total > 0


@pytest.mark.training
@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_compiled_fast_step_matches_eager_on_cpu(lib):
    """torch.compile of the fast path (what the gpu preset turns on) computes the same
    step on the CPU too."""
    eager, loss_e, opt_e, _ = fast_setup(lib)
    twin, loss_t, opt_t, _ = fast_setup(lib)
    compiled = fast.maybe_compile(twin, enabled=True)
    b = padded_batch(lib, 25, [8, 5, 2])
    eager.eval(), twin.eval()  # no dropout: the paths draw random numbers differently
    for m, loss, opt in (
        (eager, loss_e, opt_e),
        (compiled, loss_t, opt_t),
    ):
        opt.zero_grad()
        out = m(b.src, b.tgt, b.src_mask, b.tgt_mask)
        loss(out, b.tgt_y, b.ntokens)[1].backward()
    for (n, p), q in zip(eager.named_parameters(), twin.parameters(), strict=True):
        torch.testing.assert_close(q.grad, p.grad, atol=1e-5, rtol=1e-4, msg=n)


def test_cheap_dropout_drops_p_and_keeps_the_expectation(lib):
    torch.manual_seed(0)
    for p in (0.1, 0.3):
        drop = fast.CheapDropout(p).train()
        for dtype in (torch.float32, torch.bfloat16):
            x = torch.ones(400, 500, dtype=dtype)
            y = drop(x)
            assert y.dtype == dtype and y.shape == x.shape
            share = (y == 0).double().mean().item()
            assert abs(share - p) < 0.005, (p, dtype, share)  # 200,000 draws
            kept = y[y != 0].double()
            torch.testing.assert_close(
                kept, torch.full_like(kept, 1 / (1 - p)), atol=0.01, rtol=0
            )
            assert abs(y.double().mean().item() - 1) < 0.01
        assert not torch.equal(drop(x), drop(x)), "a fresh mask each call"
        assert torch.equal(drop.eval()(x), x)
    model = fast.set_fast_path(lib.make_model(11, 11, "tiny"))
    kinds = {type(m) for m in model.modules() if isinstance(m, torch.nn.Dropout)}
    assert kinds == {fast.CheapDropout}
    fast.set_fast_path(model, fast=False)
    assert {type(m) for m in model.modules() if isinstance(m, torch.nn.Dropout)} == {
        torch.nn.Dropout
    }
