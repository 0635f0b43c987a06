"""Part 1 and Part 2 against PyTorch's own implementations, with copied weights, and
Part 2's copy task learnt (decoding itself: tests/test_decoding.py)."""

import copy
import subprocess
import sys
import textwrap

import pytest

from atkit import settings
from conftest import ROOT, clean_env, lazy

torch = lazy("torch")
nn = lazy("torch.nn")
F = lazy("torch.nn.functional")
fast = lazy("atkit.fast")


def padding_mask(lengths, S):
    """(B, 1, S) bool, True where a real token is."""
    return (torch.arange(S)[None, :] < torch.tensor(lengths)[:, None]).unsqueeze(1)


# ---------------------------------------------------------------- attention


@pytest.mark.parametrize("masked", ["none", "padding", "causal"])
def test_attention_matches_sdpa(lib, masked):
    torch.manual_seed(0)
    q, k, v = (torch.randn(3, 4, 6, 8) for _ in range(3))  # (B, h, T, d_k)
    mask = {
        "none": None,
        "padding": padding_mask([6, 3, 1], 6).unsqueeze(1),  # (B, 1, 1, S)
        "causal": lib.subsequent_mask(6).unsqueeze(1),  # (1, 1, T, T)
    }[masked]
    ours, p = lib.attention(q, k, v, mask)
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    torch.testing.assert_close(ours, ref, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(p.sum(-1), torch.ones(3, 4, 6))


def test_attention_gradcheck_float64(lib):
    torch.manual_seed(0)
    q, k, v = (
        torch.randn(2, 2, 4, 3, dtype=torch.float64, requires_grad=True)
        for _ in range(3)
    )
    mask = lib.subsequent_mask(4).unsqueeze(1)
    assert torch.autograd.gradcheck(
        lambda a, b, c: lib.attention(a, b, c, mask)[0], (q, k, v)
    )


def copy_mha(ours, ref):
    """Copy our four projections into an nn.MultiheadAttention."""
    with torch.no_grad():
        ref.in_proj_weight.copy_(
            torch.cat([ours.w_q.weight, ours.w_k.weight, ours.w_v.weight])
        )
        ref.in_proj_bias.copy_(torch.cat([ours.w_q.bias, ours.w_k.bias, ours.w_v.bias]))
        ref.out_proj.weight.copy_(ours.w_o.weight)
        ref.out_proj.bias.copy_(ours.w_o.bias)


@pytest.mark.parametrize("impl", ["didactic", "sdpa"])
def test_multi_head_attention_matches_torch(lib, impl):
    """Part 1's class, and the fast path's fused subclass (atkit.fast), against
    nn.MultiheadAttention with the same weights."""
    torch.manual_seed(0)
    d_model, h, B, T, S = 32, 4, 3, 5, 7
    ours = fast.set_fast_path(lib.MultiHeadedAttention(h, d_model), attn_impl=impl)
    ref = nn.MultiheadAttention(d_model, h, batch_first=True)
    copy_mha(ours, ref)
    x, mem = torch.randn(B, T, d_model), torch.randn(B, S, d_model)
    # cross-attention with key padding
    lengths = [7, 4, 2]
    got = ours(x, mem, mem, padding_mask(lengths, S))
    want, _ = ref(x, mem, mem, key_padding_mask=~padding_mask(lengths, S)[:, 0])
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    # causal self-attention
    got = ours(x, x, x, lib.subsequent_mask(T))
    want, _ = ref(x, x, x, attn_mask=~lib.subsequent_mask(T)[0])
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_sdpa_path_matches_didactic_outputs_and_gradients(lib):
    """The fused attention (a subclass of Part 1's, swapped in by set_fast_path)
    computes Part 1's function: outputs and gradients; it keeps no weights."""
    from atkit import fast

    torch.manual_seed(0)
    a = lib.MultiHeadedAttention(4, 32)
    b = fast.set_fast_path(copy.deepcopy(a))
    assert isinstance(b, fast.FusedAttention)
    assert isinstance(b, lib.MultiHeadedAttention)
    assert type(a) is lib.MultiHeadedAttention
    x = torch.randn(2, 6, 32, requires_grad=True)
    y = x.detach().clone().requires_grad_(True)
    mask = lib.subsequent_mask(6)
    out_a, out_b = a(x, x, x, mask), b(y, y, y, mask)
    torch.testing.assert_close(out_a, out_b, atol=1e-6, rtol=1e-5)
    assert a.attn.shape == (2, 4, 6, 6) and b.attn is None  # Part 6 reads Part 1's
    g = torch.randn_like(out_a)
    out_a.backward(g)
    out_b.backward(g)
    torch.testing.assert_close(x.grad, y.grad, atol=1e-5, rtol=1e-5)
    for (n, pa), pb in zip(a.named_parameters(), b.parameters(), strict=True):
        torch.testing.assert_close(pa.grad, pb.grad, atol=1e-5, rtol=1e-5, msg=n)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_masked_positions_stay_masked_in_half_precision(lib, dtype):
    dtype = getattr(torch, dtype)
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 2, 5, 8) for _ in range(3))
    mask = padding_mask([5, 2], 5).unsqueeze(1)  # second sentence: keys 2.. are padding
    out, p = lib.attention(q.to(dtype), k.to(dtype), v.to(dtype), mask)
    assert not out.isnan().any() and not p.isnan().any()
    assert (p[1, :, :, 2:] == 0).all(), "masked keys got attention weight"
    # wild values at masked positions must not leak into the output
    k2, v2 = k.clone(), v.clone()
    k2[1, :, 2:], v2[1, :, 2:] = 1e4, 1e4
    out2, _ = lib.attention(q.to(dtype), k2.to(dtype), v2.to(dtype), mask)
    torch.testing.assert_close(out2, out)
    # a fully masked row gives finite numbers, not NaN
    none = torch.zeros(1, 1, 1, 5, dtype=torch.bool)
    out3, _ = lib.attention(q.to(dtype), k.to(dtype), v.to(dtype), none)
    assert torch.isfinite(out3).all()


# ---------------------------------------------------------------- layers


def test_layer_norm_matches_torch(lib):
    torch.manual_seed(0)
    ours, ref = lib.LayerNorm(16, eps=1e-6), nn.LayerNorm(16, eps=1e-6)
    with torch.no_grad():
        ours.gamma.copy_(torch.randn(16))
        ours.beta.copy_(torch.randn(16))
        ref.weight.copy_(ours.gamma)
        ref.bias.copy_(ours.beta)
    for scale in (1e-3, 1.0, 1e3):
        x = scale * torch.randn(4, 3, 16)
        torch.testing.assert_close(ours(x), ref(x), atol=1e-5, rtol=1e-5)


def copy_into_reference(model, ref, norm):
    """Copy our encoder/decoder weights into nn.Transformer's."""

    def lin(dst, src):
        dst.weight.data.copy_(src.weight.data)
        dst.bias.data.copy_(src.bias.data)

    def ln(dst, src):
        dst.weight.data.copy_(src.gamma.data)
        dst.bias.data.copy_(src.beta.data)

    for ours, theirs in zip(model.encoder.layers, ref.encoder.layers, strict=True):
        copy_mha(ours.self_attn, theirs.self_attn)
        lin(theirs.linear1, ours.feed_forward.w_1)
        lin(theirs.linear2, ours.feed_forward.w_2)
        ln(theirs.norm1, ours.sublayer[0].norm)
        ln(theirs.norm2, ours.sublayer[1].norm)
    for ours, theirs in zip(model.decoder.layers, ref.decoder.layers, strict=True):
        copy_mha(ours.self_attn, theirs.self_attn)
        copy_mha(ours.src_attn, theirs.multihead_attn)
        lin(theirs.linear1, ours.feed_forward.w_1)
        lin(theirs.linear2, ours.feed_forward.w_2)
        ln(theirs.norm1, ours.sublayer[0].norm)
        ln(theirs.norm2, ours.sublayer[1].norm)
        ln(theirs.norm3, ours.sublayer[2].norm)
    if norm == "pre":
        ln(ref.encoder.norm, model.encoder.norm)
        ln(ref.decoder.norm, model.decoder.norm)
    else:  # the paper's post-norm stack has no final LayerNorm
        ref.encoder.norm = None
        ref.decoder.norm = None


# nn.Transformer builds its encoder with nested tensors on and then notes that pre-norm
# layers cannot use them: a remark about the reference, not about our model.
@pytest.mark.filterwarnings("ignore:enable_nested_tensor is True:UserWarning")
@pytest.mark.parametrize("norm", ["post", "pre"])
def test_encoder_decoder_matches_nn_transformer(lib, norm):
    torch.manual_seed(0)
    d_model, h, N, d_ff, V = 32, 4, 2, 64, 20
    model = lib.make_model(
        V, V, "tiny", N=N, d_model=d_model, d_ff=d_ff, h=h, norm=norm
    )
    ref = nn.Transformer(
        d_model,
        h,
        N,
        N,
        d_ff,
        dropout=0.0,
        batch_first=True,
        norm_first=norm == "pre",
        layer_norm_eps=1e-6,
    )
    copy_into_reference(model, ref, norm)
    model.eval()
    ref.eval()
    B, S, T = 3, 7, 5
    src, tgt = torch.randint(1, V, (B, S)), torch.randint(1, V, (B, T))
    src_mask = padding_mask([7, 5, 3], S)
    tgt_pad = padding_mask([5, 5, 2], T)
    batch_tgt_mask = tgt_pad & lib.subsequent_mask(T)
    # grad stays enabled so nn.Transformer takes its plain (non-fused) path
    src_x, tgt_x = model.src_embed(src), model.tgt_embed(tgt)
    memory = model.encoder(src_x, src_mask)
    want_memory = ref.encoder(src_x, src_key_padding_mask=~src_mask[:, 0])
    torch.testing.assert_close(memory, want_memory, atol=1e-5, rtol=1e-5)
    out = model.decoder(tgt_x, memory, src_mask, batch_tgt_mask)
    want = ref.decoder(
        tgt_x,
        memory,
        tgt_mask=~lib.subsequent_mask(T)[0],
        tgt_key_padding_mask=~tgt_pad[:, 0],
        memory_key_padding_mask=~src_mask[:, 0],
    )
    torch.testing.assert_close(out, want, atol=1e-5, rtol=1e-5)
    # and the model's own forward agrees with its parts
    torch.testing.assert_close(model(src, tgt, src_mask, batch_tgt_mask), out)


def test_label_smoothing_matches_cross_entropy(lib):
    torch.manual_seed(0)
    V, pad, eps = 12, 0, 0.1
    logits = torch.randn(20, V, requires_grad=True)
    target = torch.randint(0, V, (20,))
    target[:4] = pad
    ours = lib.LabelSmoothing(V, pad, eps)(logits.log_softmax(-1), target)
    (g_ours,) = torch.autograd.grad(ours, logits)
    ref = F.cross_entropy(
        logits, target, ignore_index=pad, label_smoothing=eps, reduction="sum"
    )
    (g_ref,) = torch.autograd.grad(ref, logits)
    torch.testing.assert_close(g_ours, g_ref, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(ours, ref)
    assert g_ours[:4].abs().max() == 0, "padding labels must not contribute"


def test_schedule_peaks_at_warmup(lib):
    d_model, warmup = 512, 400
    opt, sched = lib.make_optimizer(nn.Linear(2, 2), d_model, factor=1.0, warmup=warmup)
    lrs = []
    for _ in range(3 * warmup):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    peak = max(range(len(lrs)), key=lrs.__getitem__)
    assert peak + 1 == warmup  # the warmup-th optimiser step
    assert lrs[peak] == pytest.approx(d_model**-0.5 * warmup**-0.5, rel=1e-9)
    g = opt.param_groups[0]
    assert g["betas"] == (0.9, 0.98) and g["eps"] == 1e-9


@pytest.mark.parametrize("preset, paper", [("base", 65e6), ("big", 213e6)])
def test_parameter_counts_match_table_3(lib, preset, paper):
    with torch.device("meta"):
        model = lib.make_model(37000, 37000, preset, tie="all")
    n = sum(p.numel() for p in model.parameters())
    assert abs(n - paper) / paper < 0.05, (
        f"{preset}: {n / 1e6:.1f}M vs {paper / 1e6:.0f}M"
    )


def test_tied_weights_are_one_tensor(lib):
    m = lib.make_model(50, 50, "tiny", tie="all")
    w = m.generator.proj.weight
    assert w is m.src_embed[0].lut.weight is m.tgt_embed[0].lut.weight
    untied = lib.make_model(50, 60, "tiny", tie="none")
    assert untied.generator.proj.weight is not untied.tgt_embed[0].lut.weight


def test_positional_encoding_offset_is_linear(lib):
    pe = lib.sinusoidal_table(300, 32).double()
    for k in (1, 5, 40):
        M = lib.offset_matrix(k, 32)
        torch.testing.assert_close(pe[:-k] @ M.T, pe[k:], atol=1e-6, rtol=0)


# ---------------------------------------------------------------- training


def test_batch_masks(lib):
    src = torch.tensor([[1, 5, 6, 0]])
    tgt = torch.tensor([[1, 7, 2, 0, 0]])
    b = lib.Batch(src, tgt, pad=0)
    assert b.tgt.tolist() == [[1, 7, 2, 0]] and b.tgt_y.tolist() == [[7, 2, 0, 0]]
    assert b.ntokens == 2
    assert b.src_mask.tolist() == [[[True, True, True, False]]]
    expected = torch.tril(torch.ones(4, 4, dtype=torch.bool)) & (b.tgt != 0)
    assert torch.equal(b.tgt_mask[0], expected)


def test_copy_task_copies_unseen_sequences(lib, copy_model):
    model, losses = copy_model
    assert losses[-1] < 0.01 * losses[0], "the copy task did not converge"
    gen = torch.Generator().manual_seed(98765)  # not the training seed
    fresh = next(lib.copy_batches(11, 20, 1, generator=gen))
    out = lib.greedy_decode(
        model, fresh.src, fresh.src_mask, max_len=10, start_symbol=1
    )
    assert torch.equal(out, fresh.src), f"{(out != fresh.src).any(1).sum()} of 20 wrong"


# ---------------------------------------------------------------- errors and import


def checked(size, **overrides):
    import pipeline

    return pipeline.model_config(size, **overrides)


@pytest.mark.parametrize(
    "call, word",
    [
        # where configs are made and models built from them: the pipeline
        (lambda lib: checked("tiny", d_model=30, h=4), "d_model"),
        (lambda lib: checked("huge"), "size"),
        (lambda lib: checked("tiny", dmodel=64), "dmodel"),
        (lambda lib: checked("tiny", norm="middle"), "norm"),
        (lambda lib: settings.check_tie("all", 10, 12), "tie"),
        (lambda lib: checked("tiny", P_drop=1.5), "P_drop"),
        (lambda lib: lib.runtime.choose_preset({"AT_PRESET": "tpu"}), "AT_PRESET"),
    ],
)
def test_bad_settings_raise_value_error_naming_the_argument(lib, call, word):
    with pytest.raises(ValueError, match=word):
        call(lib)


@pytest.mark.process
def test_import_runs_no_demo(lib):
    # `lib`: this process has imported the library first, so that first-time work
    # (bytecode of freshly installed packages, matplotlib's font cache) is done
    # and cannot print to the child's stderr
    code = textwrap.dedent(
        """
        import time
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        t = time.perf_counter()
        import annotated_transformer_lib as m
        figures = len(plt.get_fignums())
        print(f"{time.perf_counter() - t:.2f}", figures, hasattr(m, "copy_model"))
        """
    )
    r = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        env=clean_env(),
        cwd=ROOT,
    )
    assert r.returncode == 0, r.stderr
    _, figures, trained = r.stdout.split()
    assert figures == "0" and trained == "False", "a demo cell ran on import"
    assert r.stderr.strip() == "", f"import printed to stderr: {r.stderr[:300]}"
    # how long it took is for `python -m tools.startup` to print, not to assert here


def test_copy_batches_start_with_1_and_copy_their_source(lib):
    gen = torch.Generator().manual_seed(5)
    batches = list(lib.copy_batches(11, 4, 3, length=7, generator=gen))
    assert len(batches) == 3
    for b in batches:
        assert b.src.shape == (4, 7) and (b.src[:, 0] == 1).all()
        assert ((b.src[:, 1:] >= 2) & (b.src[:, 1:] < 11)).all()
        assert torch.equal(b.tgt, b.src[:, :-1]) and torch.equal(b.tgt_y, b.src[:, 1:])
    again = lib.copy_batches(
        11, 4, 3, length=7, generator=torch.Generator().manual_seed(5)
    )
    assert all(torch.equal(a.src, b.src) for a, b in zip(again, batches, strict=True))


def test_a_short_copy_run_is_seeded_and_cools_down_only_at_its_end(lib):
    """Part 2's copy run made short (2 epochs of 2 steps): the same seed gives the
    same first epoch with the cool-down (the last 30% of the 4 steps) and with eq. 3
    alone, and the cool-down changes the second."""
    short = dict(epochs=2, batches_per_epoch=2, batch_size=4)
    model, losses = lib.train_copy_task(**short)
    assert not model.training and len(losses) == 2
    _, eq3 = lib.train_copy_task(**short, cooldown=0.0)
    assert eq3[0] == losses[0] and eq3[1] != losses[1]


def test_padded_query_rows_reach_no_real_position(lib):
    """Batches and masks: only padded *keys* are masked; the rows of padded queries
    are computed but reach neither a real position nor the loss, so a sentence pair
    padded at both ends of the batch gives the outputs and the loss it gives alone."""
    torch.manual_seed(0)
    model = lib.make_model(12, 12, "tiny", N=2, d_model=32, d_ff=64, h=4, P_drop=0.0)
    model.eval()
    src, tgt = torch.tensor([[1, 5, 6, 7, 2]]), torch.tensor([[1, 8, 9, 10, 2]])
    alone = lib.Batch(src, tgt, pad=0)
    padded = lib.Batch(F.pad(src, (0, 3)), F.pad(tgt, (0, 4)), pad=0)
    assert padded.src_mask[0, 0].tolist() == [True] * 5 + [False] * 3
    assert padded.tgt_mask[0].all(-1).sum() == 0 and padded.tgt_mask[0].any(-1).all()
    crit = lib.LabelSmoothing(12, 0, 0.1)
    outs, losses = [], []
    for b in (alone, padded):
        out = model(b.src, b.tgt, b.src_mask, b.tgt_mask)  # (1, T, d_model)
        logp = model.generator(out)  # (1, T, 12)
        outs.append(out[:, : alone.tgt.size(1)])
        losses.append(crit(logp.view(-1, 12), b.tgt_y.reshape(-1)))
    assert torch.allclose(outs[0], outs[1], atol=1e-5)
    assert torch.allclose(losses[0], losses[1], atol=1e-5)
    assert torch.isfinite(out).all()  # the padded rows: computed, finite, unused


def test_a_model_copies_after_a_forward_pass_with_gradients(lib):
    """`copy.deepcopy` of a model that has run forward (each attention keeps its
    last weights for Part 6) works, and the copy computes what the model does."""
    import copy

    torch.manual_seed(0)
    model = lib.make_model(20, 20, "tiny", N=1, d_model=16, d_ff=32, h=2, P_drop=0.0)
    src, tgt = torch.randint(1, 20, (2, 5)), torch.randint(1, 20, (2, 4))
    masks = (src != 0).unsqueeze(-2), lib.subsequent_mask(4)
    out = model(src, tgt, *masks)
    twin = copy.deepcopy(model)
    assert torch.equal(twin(src, tgt, *masks), out)
