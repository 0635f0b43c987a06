"""since_2017.ipynb: each piece's check against its reference as a unit test (RMSNorm
against nn.RMSNorm, rotary embeddings against their complex form, grouped-query
attention against F.scaled_dot_product_attention(enable_gqa=True), QK-norm's scores
against the cosine, SwiGLU's parameters against the feed-forward it replaces, the
attention with every switch off against Part 1's), decoding with each key/value cache
against decoding without one, the decoder-only batches and masks, the verdicts'
words, a row trained through the pipeline (its fingerprint covering this notebook's
classes), the word budget, and the notebook executed as Colab runs it in the ci
preset (`since_run`)."""

import importlib.util
import math
import sys
import types

import pytest

import nbexport
from conftest import ROOT, lazy, needs

torch = lazy("torch")
nn = lazy("torch.nn")
F = lazy("torch.nn.functional")
fast = lazy("atkit.fast")

SINCE_MD = ROOT / "since_2017.md"
SINCE_NB = ROOT / "since_2017.ipynb"
WORD_BUDGET = 3500
V = 60  # a vocabulary for untrained models
BOS, EOS, PAD = 0, 1, 2


@pytest.fixture(scope="session")
def since(lib):
    """since_2017.md's library cells as a module (they import the main notebook's by
    name, annotated_transformer_lib: the `lib` of the other tests)."""
    out = nbexport.export(SINCE_MD, out=ROOT / "build" / "since_2017_lib.py")
    spec = importlib.util.spec_from_file_location("since_2017_lib", out)
    module = importlib.util.module_from_spec(spec)
    sys.modules["since_2017_lib"] = module  # dataclasses look their module up
    source = out.read_text(encoding="utf-8")
    exec(compile(source, str(SINCE_MD), "exec"), module.__dict__)  # noqa: S102
    return module


@pytest.fixture(scope="module")
def small(since):
    """A ModelConfig of the ci preset's size."""
    return since.since_config("ci").model


def test_rmsnorm_is_nn_rmsnorm(since):
    torch.manual_seed(0)
    ours = since.RMSNorm(16)
    nn.init.normal_(ours.gamma)
    ref = nn.RMSNorm(16, eps=1e-6)
    ref.weight.data.copy_(ours.gamma.data)
    x = 3 + torch.randn(4, 5, 16)  # a mean far from zero: LayerNorm would differ
    torch.testing.assert_close(ours(x), ref(x))
    assert (ours(x) - nn.LayerNorm(16, eps=1e-6)(x)).abs().max() > 0.1


def test_rotary_embedding_is_its_complex_form_and_sees_offsets_only(since):
    torch.manual_seed(0)
    x = torch.randn(2, 3, 11, 8, dtype=torch.float64)  # (B, heads, len, d_k)
    angle = since.rope_angles(torch.arange(4, 15), 8)  # positions 4..14
    z = torch.view_as_complex(x.unflatten(-1, (-1, 2)))
    ref = torch.view_as_real(z * torch.polar(torch.ones_like(angle), angle)).flatten(-2)
    torch.testing.assert_close(since.rotate(x, start=4), ref)
    assert (since.rotate(x, 4) - since.rotate(x, 5)).abs().max() > 0.1
    q, k = torch.randn(2, 8, dtype=torch.float64)

    def placed(v, m):
        return since.rotate(v.expand(m + 1, 8))[m]

    dots = [placed(q, m + 3) @ placed(k, m) for m in (0, 17, 90)]
    torch.testing.assert_close(torch.stack(dots), dots[0].expand(3))
    norms = since.rotate(x).norm(dim=-1)  # a rotation keeps lengths
    torch.testing.assert_close(norms, x.norm(dim=-1))


def test_attention_with_every_switch_off_is_part1s(lib, since):
    torch.manual_seed(0)
    mine, part1 = since.Attention(4, 32), lib.MultiHeadedAttention(4, 32)
    mine.load_state_dict(part1.state_dict())  # the same parameter names
    x, m = torch.randn(2, 7, 32), torch.randn(2, 5, 32)
    mask = lib.subsequent_mask(7)
    torch.testing.assert_close(mine(x, x, x, mask), part1(x, x, x, mask))
    src_mask = torch.tensor([[[True] * 5], [[True] * 3 + [False] * 2]])
    torch.testing.assert_close(mine(x, m, m, src_mask), part1(x, m, m, src_mask))


@pytest.mark.parametrize("kv_heads", [1, 2, 4])
def test_grouped_query_attention_is_pytorchs(since, kv_heads):
    torch.manual_seed(0)
    attn, x = since.Attention(4, 32, kv_heads=kv_heads), torch.randn(2, 7, 32)
    q = attn.heads(attn.w_q(x), 4)
    k, v = attn.heads(attn.w_k(x), kv_heads), attn.heads(attn.w_v(x), kv_heads)
    mask = torch.ones(2, 1, 7, dtype=torch.bool)
    mask[1, :, 5:] = False
    ref = F.scaled_dot_product_attention(
        q, k, v, attn_mask=mask.unsqueeze(1), enable_gqa=True
    )
    ref = attn.w_o(ref.transpose(1, 2).reshape(2, 7, 32))
    torch.testing.assert_close(attn(x, x, x, mask), ref)
    n_kv = sum(p.numel() for p in (*attn.w_k.parameters(), *attn.w_v.parameters()))
    assert n_kv == 2 * (32 * kv_heads * 8 + kv_heads * 8)


def test_qk_norm_scores_are_the_cosine_times_sqrt_dk(since):
    torch.manual_seed(0)
    attn = since.Attention(4, 32, qk_norm=True)
    x = 10 * torch.randn(1, 6, 32)
    q = attn.q_norm(attn.heads(attn.w_q(x), 4))
    k = attn.k_norm(attn.heads(attn.w_k(x), 4))
    scores = q @ k.transpose(-2, -1) / math.sqrt(attn.d_k)
    cosine = F.cosine_similarity(q[..., :, None, :], k[..., None, :, :], dim=-1)
    torch.testing.assert_close(scores, math.sqrt(attn.d_k) * cosine)
    assert scores.abs().max() <= math.sqrt(attn.d_k) + 1e-4


def test_swiglu_has_the_parameters_of_the_feed_forward_it_replaces(lib, since):
    for d_model, d_ff in ((64, 256), (256, 1024), (512, 2048)):
        ffn = sum(
            p.numel() for p in lib.PositionwiseFeedForward(d_model, d_ff).parameters()
        )
        glu = sum(p.numel() for p in since.SwiGLU(d_model, d_ff).parameters())
        assert abs(glu / ffn - 1) < 0.005, (d_model, d_ff, ffn, glu)
    torch.manual_seed(0)
    glu, x = since.SwiGLU(8, 12), torch.randn(3, 8)
    ref = glu.w_2((glu.w(x) * torch.sigmoid(glu.w(x))) * glu.v(x))  # Swish(xW) * xV
    torch.testing.assert_close(glu(x), ref)


def test_fast_path_leaves_the_attention_of_since_2017_alone(since):
    """atkit.fast swaps Part 1's attention for its fused class by the names it holds;
    since_2017's Attention holds them too, and computes something else."""
    attn = since.Attention(4, 32, rope=True)
    fast.set_fast_path(attn)
    assert type(attn) is since.Attention
    model = since.build(since.since_config("ci").model, V, V, since.ALL)
    fast.set_fast_path(model)
    kinds = {type(m) for m in model.modules() if isinstance(m, since.Attention)}
    assert kinds == {since.Attention}


def test_build_refuses_an_unknown_piece(since, small):
    with pytest.raises(ValueError, match="choose pieces from"):
        since.build(small, V, V, ("rmsnorm", "alibi"))
    with pytest.raises(ValueError, match="a layout from"):
        since.build(small, V, V, (), "encoder-only")


def sources(lengths, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [
        [BOS, *torch.randint(4, V, (n,), generator=g).tolist(), EOS] for n in lengths
    ]


def padded(rows):
    return torch.nn.utils.rnn.pad_sequence(
        [torch.tensor(r) for r in rows], batch_first=True, padding_value=PAD
    )


@pytest.mark.parametrize(
    "pieces",
    [(), ("rmsnorm",), ("rope",), ("swiglu",), ("qk_norm",), ("gqa",), ("no_bias",)]
    + [("rmsnorm", "rope", "swiglu", "qk_norm", "gqa", "no_bias")],
    ids=lambda p: "+".join(p) or "2017",
)
def test_decoding_with_the_cache_writes_what_the_definition_writes(
    lib, since, small, pieces
):
    """Each row's stepper (its key/value cache) against Part 2's DecoderStepper,
    which reruns the decoder on the whole prefix, on a padded batch."""
    torch.manual_seed(0)
    model = since.build(small, V, V, pieces).eval()
    src = padded(sources([7, 3, 5]))
    mask = (src != PAD).unsqueeze(-2)
    args = (model, src, mask, 12, BOS, None)
    ref = lib.greedy_decode(*args, stepper=lib.DecoderStepper)
    cached = lib.greedy_decode(*args, stepper=since.stepper_for(model))
    assert torch.equal(cached, ref)
    assert all(
        m.cache is None for m in model.modules() if isinstance(m, since.Attention)
    )


def test_the_cache_is_smaller_by_the_groups_and_measured(since, small):
    torch.manual_seed(0)
    full = since.build(small, V, V).eval()
    grouped = since.build(small, V, V, ("gqa",)).eval()
    source = sources([5])[0]
    per_layer = 2 * 2 * small.d_model * 4  # (self + source) x (keys + values), fp32
    assert since.cache_bytes_per_token(full, source) == small.N * per_layer
    assert since.cache_bytes_per_token(grouped, source) == small.N * per_layer // 2


@pytest.mark.parametrize("layout", ["causal", "prefix"])
def test_decoder_only_decodes_a_padded_batch_as_each_sentence_alone(
    lib, since, small, layout
):
    """JoinedStepper (sources moved right, padding first, a cache) against the
    definition: the model run on `source + output` alone, no padding, no cache."""
    torch.manual_seed(0)
    model = since.build(small, V, V, since.ALL, layout).eval()
    rows = sources([4, 1, 6])
    src = padded(rows)
    cached = lib.greedy_decode(
        model,
        src,
        (src != PAD).unsqueeze(-2),
        9,
        BOS,
        None,
        stepper=since.stepper_for(model),
    )
    for i, row in enumerate(rows):
        ys = [BOS]
        for _ in range(8):
            seq = torch.tensor([row + ys])
            mask = since.joined_mask(seq, torch.tensor([len(row)]), layout == "prefix")
            with torch.no_grad():
                out = model(seq, None, None, mask)[:, -1]
            ys.append(int(model.generator(out).argmax(-1)))
        assert cached[i].tolist() == ys, (layout, i)


def test_joined_batches_train_on_the_target_only(since):
    pairs = [([BOS, 5, 6, EOS], [BOS, 7, 8, 9, EOS]), ([BOS, 5, EOS], [BOS, 7, EOS])]
    budget = types.SimpleNamespace(max_tokens=100, pad_multiple=1)
    (causal,) = since.joined_batches(pairs, budget, "cpu", prefix=False)
    (prefix,) = since.joined_batches(pairs, budget, "cpu", prefix=True)
    # in length order: the second pair first; <s> src </s> <s> tgt, then padding
    assert causal.src.tolist() == [[0, 5, 1, 0, 7, 2, 2, 2], [0, 5, 6, 1, 0, 7, 8, 9]]
    assert causal.tgt_y.tolist() == [[2, 2, 2, 7, 1, 2, 2, 2], [2, 2, 2, 2, 7, 8, 9, 1]]
    assert causal.ntokens == 2 + 4  # the targets' labels, </s> included
    assert torch.equal(causal.tgt_mask[1], torch.tril(torch.ones(8, 8, dtype=bool)))
    assert prefix.tgt_mask[1, 0, 3] and not causal.tgt_mask[1, 0, 3]  # both ways
    assert not prefix.tgt_mask[1, 0, 4] and not prefix.tgt_mask[1, 3, 4]  # no target
    assert prefix.tgt_mask[1, 4, 0] and prefix.tgt_mask[1, 7, 3]  # the target reads it
    assert not prefix.tgt_mask[0, 7, 5] and prefix.tgt_mask[0, 7, 7]  # padding: itself
    assert not prefix.tgt_mask[0, 4, 5].item()


def test_decoder_only_rows_have_the_encoder_decoders_parameters(since):
    cfg = since.since_config("cpu")
    for pieces in ((), since.ALL):
        deep = since.equal_size(cfg, pieces, 7000).model
        with torch.device("meta"):
            a = since.count_parameters(since.build(cfg.model, 7000, 7000, pieces))
            b = since.count_parameters(since.build(deep, 7000, 7000, pieces, "prefix"))
        assert deep.N == 2 * cfg.model.N and abs(b / a - 1) < 1e-3, (pieces, a, b)


def test_gains_are_atkits_paired_bootstrap_in_this_notebooks_words(since):
    from atkit import scoring

    refs = [f"a dog runs in the park number {i} today" for i in range(60)]
    base = [r if i % 3 else "a cat sits" for i, r in enumerate(refs)]
    better = [r if i % 6 else "a cat sits" for i, r in enumerate(refs)]  # fewer wrong
    r = scoring.paired_bootstrap(base, better, refs)
    assert since.gain_over(base, better, refs) == (
        r["gain"],
        r["low"],
        r["high"],
        "pays",
    )
    assert since.gain_over(better, base, refs)[3] == "costs"
    assert since.gain_over(base, base, refs) == (
        0.0,
        0.0,
        0.0,
        "within noise at this scale",
    )
    assert sorted(since.VERDICTS) == sorted({"gain", "loss", scoring.WITHIN})


def test_the_prose_stays_within_its_word_budget():
    from tools import word_count

    counts = word_count.count(SINCE_MD)
    assert counts.total_words <= WORD_BUDGET, counts
    assert word_count.BUDGETS[SINCE_MD.name] == (WORD_BUDGET, WORD_BUDGET)


# ------------------------------------------------- the notebook as Colab runs it


@pytest.fixture(scope="session")
@needs("notebook")
def since_run(tmp_path_factory):
    """since_2017.ipynb alone in an empty folder, its Setup cell cloning this working
    tree, every cell executed in a fresh kernel, the ci preset (conftest's
    start_colab_run, as for the main notebook)."""
    import nbformat

    from conftest import start_colab_run, stop

    folder = tmp_path_factory.mktemp("since-colab")
    run = start_colab_run(folder, SINCE_NB)
    try:
        run.proc.wait(timeout=900)
    finally:
        stop(run)
    if (folder / "status").read_text().strip() != "0":
        log = (folder / "run.log").read_text(errors="replace")
        pytest.fail(f"since_2017.ipynb failed as on Colab:\n{log[-4000:]}")
    return types.SimpleNamespace(
        nb=nbformat.read(folder / "executed.ipynb", 4), folder=folder / "content"
    )


def test_since_2017_runs_alone_as_on_colab(since_run):
    from conftest import cell_errors

    assert not cell_errors(since_run.nb)
    code = [c for c in since_run.nb.cells if c.cell_type == "code"]
    assert all(c.get("execution_count") for c in code)
    rows = since_run.folder / "at-repo" / "checkpoints" / "ci" / "since_2017"
    for row in (
        "2017/seed1",
        "rmsnorm/seed0",
        "all-together/seed1",
        "decoder-only-prefix/seed0",
    ):
        assert (rows / row / "last.pt").is_file(), row
    conclusion = next(c for c in code if "table(RESULTS, REFS)" in c.source)
    text = "".join(o.get("text", "") for o in conclusion.outputs)
    for name in ("2017", "+ RoPE", "+ GQA", "all together", "decoder-only, prefix"):
        assert f"\n{name} " in text, name
    assert text.count("pays") + text.count("costs") + text.count("within noise") == 9


def test_checked_cells_print_their_committed_outputs(since_run):
    import nbformat
    from test_colab import _texts

    committed = nbformat.read(SINCE_NB, as_version=4)
    pairs = [
        (mine, fresh)
        for mine, fresh in zip(committed.cells, since_run.nb.cells, strict=True)
        if "nbval-check-output" in mine.metadata.get("tags", [])
    ]
    assert pairs, "the tagged cells went missing"
    for mine, fresh in pairs:
        assert _texts(fresh) == _texts(mine), mine.source[:80]


def test_word_count_prints_since_2017s_own_budget(capsys):
    from tools import word_count

    assert word_count.main(["--notebook", str(SINCE_MD)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[2].endswith("(budget 3,500)") and out[0].endswith("(budget 3,500)")


@pytest.mark.training
def test_a_row_trains_once_then_loads_and_resumes(
    since, tmp_path, monkeypatch, multi30k
):
    """train_row trains a row into its folder through pipeline.train, with this
    notebook's classes in the run's fingerprint; called again it loads the finished
    run (the same scores, no training); a run stopped part way continues there."""
    import pipeline

    cfg = since.since_config("ci").updated(
        n_train=200, n_eval=8, steps=6, eval_every=3, max_tokens=300, bpe_size=300
    )
    data = pipeline.prepare_data(cfg, multi30k)
    row = since.Row("+ QK-norm", ("qk_norm",))
    first = since.train_row(row, cfg, data, tmp_path, "cpu", (0,))
    saved = torch.load(tmp_path / "qk-norm" / "seed0" / "last.pt", weights_only=False)
    assert {"Attention", "RMSNorm", "rotate", "rope_angles"} <= set(
        saved["history"]["code"]
    ), "the companion's own code is in the fingerprint"
    trains = []
    real_train_run = pipeline.run.train_run
    monkeypatch.setattr(
        pipeline.run,
        "train_run",
        lambda run, *a: trains.append(run.progress["step"]) or real_train_run(run, *a),
    )
    again = since.train_row(row, cfg, data, tmp_path, "cpu", (0,))
    assert [r["test"] for r in again] == [r["test"] for r in first]
    assert trains == [6]  # put back at its last step: nothing left to train
    stopped = tmp_path / "stopped" / "qk-norm" / "seed0"
    model = since.row_model(row, cfg, len(data.vocab_src))
    pipeline.train(cfg, data, stopped, "cpu", model=model, max_steps=3, log=print)
    resumed = since.train_row(row, cfg, data, tmp_path / "stopped", "cpu", (0,))
    assert trains[-1] == 3 and [r["test"] for r in resumed] == [
        r["test"] for r in first
    ]


def test_a_decoder_only_row_hands_the_pipeline_its_joined_batches(since, multi30k):
    """A decoder-only row's batches (what pipeline.train trains it on) are the pairs
    joined, their label tokens the targets' alone, as in the encoder-decoder's."""
    import pipeline

    cfg = since.since_config("ci").updated(
        n_train=120, n_eval=8, steps=2, eval_every=2, max_tokens=300, bpe_size=300
    )
    data = pipeline.prepare_data(cfg, multi30k)
    row = since.Row("decoder-only, prefix", since.ALL, "prefix")
    train, val = since.row_batches(row, cfg, data, "cpu")
    assert all(isinstance(b, since.JoinedBatch) for b in train + val)
    assert since.row_batches(since.Row("2017"), cfg, data, "cpu") is None
    ours = sum(b.ntokens for b in train)
    books = sum(b.ntokens for b in since.book.make_batches(data.train, cfg, "cpu"))
    assert ours == books  # the same pairs, the targets' labels only


def test_rotary_angles_stay_exact_in_bfloat16(since):
    """Under autocast queries and keys are bfloat16, which cannot hold an angle of
    200 radians to better than 1: the angles are turned into cosines and sines in
    float64 first, so a rotation in bfloat16 is only as coarse as its inputs."""
    torch.manual_seed(0)
    x = torch.randn(1, 2, 60, 64, dtype=torch.float64)
    exact = since.rotate(x, start=190)
    coarse = since.rotate(x.bfloat16(), start=190).double()
    assert (coarse - exact).abs().max() < 0.05


def test_attention_in_bfloat16_on_a_cpu_is_eq1_by_hand(lib, since, monkeypatch):
    """As the main notebook's fast step: in bfloat16 on a CPU, Part 1's attention
    (faster there); the same function, in bfloat16's precision."""
    torch.manual_seed(0)
    attn, x = since.Attention(4, 32, rope=True, kv_heads=2), torch.randn(2, 7, 32)
    mask = lib.subsequent_mask(7)
    exact = attn(x, x, x, mask)
    called = []
    monkeypatch.setattr(
        "torch.nn.functional.scaled_dot_product_attention",
        lambda *a, **k: called.append(1),
    )
    with torch.autocast("cpu", torch.bfloat16):
        coarse = attn(x, x, x, mask)
    assert coarse.dtype == torch.bfloat16 and not called
    torch.testing.assert_close(coarse.float(), exact, atol=0.05, rtol=0.05)


def test_qk_norm_keeps_bfloat16_queries_bfloat16(since):
    """A float32 gain times bfloat16 queries would be float32 queries: attention would
    then leave the bfloat16 path (and its speed) for the rest of the layer."""
    norm = since.RMSNorm(8)
    assert norm(torch.randn(2, 8).bfloat16()).dtype == torch.bfloat16
    attn = since.Attention(4, 32, qk_norm=True)
    with torch.autocast("cpu", torch.bfloat16):
        q = attn.q_norm(attn.heads(attn.w_q(torch.randn(1, 5, 32)), 4))
    assert q.dtype == torch.bfloat16
