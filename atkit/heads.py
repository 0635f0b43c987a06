"""Part 6's plumbing around the notebook's model: the weights its attentions kept
during one pass, checks of the layer and head a reader asks for, and the counts of
`attention_statistics` printed as tables and sentences.

atkit never imports the notebook: the model comes in as an argument, with Part 1's
layout (`encoder.layers` with `self_attn`, `decoder.layers` with `self_attn` and
`src_attn`, each attention keeping its last weights in `attn`). Layers and heads
count from 1, as in the interactive view.
"""

from __future__ import annotations

import torch

from atkit.fast import plain_forward
from atkit.prose import say

KINDS = ("encoder", "decoder", "cross")
PATTERNS = {  # what attention_statistics counts, in words
    "previous": "the previous source token",
    "same": "the token itself",
    "next": "the next source token",
    "aligned": "the source word it is about to write",
}


def kept_weights(model, forward) -> dict:
    """Run `forward()` (a pass of `model`) in eval mode, without gradients and with
    Part 1's attention (a fast path is switched off for the pass: only Part 1's class
    keeps its weights), and return the weights each attention kept, on the CPU:
    {'encoder': (N, h, S, S), 'decoder': (N, h, T, T), 'cross': (N, h, T, S)} of the
    pass's first sentence."""
    was_training = model.training
    try:
        with plain_forward(model), torch.no_grad():
            model.eval()
            forward()
    finally:
        model.train(was_training)

    def stack(attentions):
        return torch.stack([a.attn[0] for a in attentions]).cpu()  # (N, h, q, k)

    enc, dec = model.encoder.layers, model.decoder.layers
    return {
        "encoder": stack(layer.self_attn for layer in enc),
        "decoder": stack(layer.self_attn for layer in dec),
        "cross": stack(layer.src_attn for layer in dec),
    }


def check_choice(kind, layer, head, N, h) -> None:
    """Refuse a kind, layer (1..N) or head (1..h or None) that a model lacks."""
    if kind not in KINDS:
        raise ValueError(f"kind must be 'encoder', 'decoder' or 'cross', got {kind!r}")
    if not 1 <= layer <= N:
        raise ValueError(f"layer must be in 1..{N}, got {layer!r}")
    if head is not None and not 1 <= head <= h:
        raise ValueError(f"head must be in 1..{h} or None, got {head!r}")


def strongest_head(share):
    """(layer, head), counted from 1, of the largest share in an (N, h) tensor."""
    layer, head = divmod(int(share.argmax()), share.size(1))
    return layer + 1, head + 1


def print_shares(stats) -> None:
    """attention_statistics' shares as one table per pattern (rows: layers,
    columns: heads), each beside its chance level."""
    h = stats["previous"].size(1)
    print(
        "share of query positions whose strongest key is ... (rows: layer, cols: head)"
    )
    heads = " ".join(f"{f'h{k}':>5}" for k in range(1, h + 1))
    for name in PATTERNS:
        kind = "decoder-source" if name == "aligned" else "encoder self-attention"
        print(f"\n{name} ({kind}; chance {stats['chance'][name]:.0%}):")
        print(f"  {'':8} {heads}")
        for layer, row in enumerate(stats[name], start=1):
            print(f"  layer {layer}: " + " ".join(f"{x:5.0%}" for x in row.tolist()))


def describe_heads(stats) -> None:
    """One sentence per pattern, written from attention_statistics' counts: the
    strongest head against the median head and chance, and the layer where the
    pattern is most common on average."""
    for name, what in PATTERNS.items():
        share = stats[name]
        layer, head = strongest_head(share)
        by_layer = share.mean(1)
        top = int(by_layer.argmax())
        say(
            f"* {what}: strongest in layer {layer}, head {head} "
            f"({share[layer - 1, head - 1]:.0%} of positions; median head "
            f"{share.median():.0%}, chance {stats['chance'][name]:.0%}); on average "
            f"most common in layer {top + 1} ({by_layer[top]:.0%} per head)"
        )
