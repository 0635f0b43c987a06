"""Decoding one new position at a time: a key/value cache around the notebook's model.

The notebook's `DecoderStepper` (Part 2) reruns the decoder over the whole prefix for
every new token. Under the causal mask, and without dropout, the earlier positions'
results cannot change; the newest position needs from them only what its attention
reads: in every decoder layer, the keys and values of the earlier positions and of
the source. `CachedDecoderStepper` keeps them (one `KVCache` per attention) and runs
only the newest position through the decoder's own layers, each of its attentions
answering from its cache for the call. Its deep dive in Part 3, "Decoding faster with
a key/value cache", explains it; the tests hold it equal to `DecoderStepper`.

atkit never imports the notebook: the model comes in as an argument, with Part 1's
layout (`tgt_embed`, `decoder.layers`, each with `self_attn` and `src_attn` holding
`w_q`, `w_k`, `w_v`, `w_o` and `split_heads`).
"""

from __future__ import annotations

import contextlib
import functools

import torch

from atkit.fast import attend


class KVCache:
    """Keys and values of one attention, kept between decoding steps; `fixed`: the
    source's, projected from `memory` once."""

    def __init__(self, fixed=False):
        self.fixed, self.k, self.v = fixed, None, None

    def attention(self, mha, query, key, value, mask=None):
        """`mha`'s forward for the newest position, against every cached key."""
        q = mha.split_heads(mha.w_q(query))  # (B, h, 1, d_k)
        if not (self.fixed and self.k is not None):
            k, v = mha.split_heads(mha.w_k(key)), mha.split_heads(mha.w_v(value))
            if self.k is not None:  # self-attention: append the newest position
                k, v = torch.cat([self.k, k], dim=2), torch.cat([self.v, v], dim=2)
            self.k, self.v = k, v  # (B, h, t or S, d_k)
        return attend(mha, q, self.k, self.v, mask)

    def reorder(self, rows):
        if self.k is not None:
            self.k, self.v = self.k[rows], self.v[rows]


class CachedDecoderStepper:
    """Part 2's DecoderStepper (the decoder's output at the newest position of `ys`),
    computing only the newest position at each call."""

    def __init__(self, model, memory, src_mask):
        self.model, self.memory, self.src_mask = model, memory, src_mask
        self.cache = [(KVCache(), KVCache(fixed=True)) for _ in model.decoder.layers]

    def __call__(self, ys):  # ys (B, t) -> (B, d_model)
        x = self.model.tgt_embed(ys)[:, -1:]  # (B, 1, d_model): the newest position
        with self.attending_from_cache():  # no mask: it may see every earlier one
            return self.model.decoder(x, self.memory, self.src_mask, None)[:, -1]

    @contextlib.contextmanager
    def attending_from_cache(self):
        """For the block, each attention of the decoder answers from its cache."""
        attentions = []
        for layer, caches in zip(self.model.decoder.layers, self.cache, strict=True):
            for mha, cache in zip(
                (layer.self_attn, layer.src_attn), caches, strict=True
            ):
                mha.forward = functools.partial(cache.attention, mha)
                attentions.append(mha)
        try:
            yield
        finally:
            for mha in attentions:
                del mha.forward  # the class's forward again

    def reorder(self, rows):
        """Keep only `rows` (a (B',) index), in that order."""
        self.memory, self.src_mask = self.memory[rows], self.src_mask[rows]
        for caches in self.cache:
            for cache in caches:
                cache.reorder(rows)
