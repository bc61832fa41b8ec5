"""Context parallelism: one sequence sharded over P processes, each attention layer exact.

The layout (`SequenceShards`), Llama 3's for causal load balance: the N positions are cut into 2P
chunks, chunk c = [⌊cN/2P⌋, ⌊(c+1)N/2P⌋), and rank r holds chunks r and 2P − 1 − r, in that order,
so every rank has one early and one late chunk and about the same causal work (N(N+1)/2P scores).
Each rank runs the model on its own positions, with their true position ids (RoPE, schedules and
ALiBi see where a token really is).

Inside every attention layer (`sharded_attention`, what `entropy_lens_attention` does while the
session holds a `ShardedSequence`):
  1. the layer's K and V are all-gathered (`ShardedSequence.gather`: the exchange, a function the
     caller gives, returns every rank's local tensor; they are laid out in position order, so the
     gathered keys are the one-process keys of the whole sequence, (B, Hkv, N, D));
  2. each local query chunk [a, b) runs against the keys [0, b) with the kernels' bottom-right causal
     alignment (key offset S − T = a: query i is at position a + i, sees keys j <= a + i), through
     the same routes as in one process (capture/paths.py's `run_path`; where sdpa makes the output,
     `bottom_right_sdpa` gives it the bottom-right mask explicitly, since sdpa's own `is_causal`
     aligns top-left), and its row statistics are reported at key offset a: `HostSums` places them
     at positions [a, b), so every position is reported by exactly one rank;
  3. the chunks' outputs are concatenated in local order;
  4. where key statistics are asked for (attention received), each chunk's column state over its rows
     (keys [0, b)) is added up, combined with every rank's by one exchange per layer
     (capture/received.py), and handed to the session's consumer on the group's first rank.
transformers builds the 4-D mask for the local length only (a causal mask of the local tokens, or a
block mask where it reads the jump in position ids as packed sequences), so this path never reads it:
the mask builder returns None under a sharded session (capture/attention.py), causality comes from
the alignment, key padding from the global 2-D mask (`ShardedSequence.attention_mask`, sliced to
[0, b)), and a sliding window from the layer's own `sliding_window` argument. Softcap, sinks, ALiBi
slopes, per-head scales and schedules enter as in one process (ALiBi's distance and a schedule's m(i)
use the true positions). Falcon's ALiBi, a bias per key built for the local keys, cannot be gathered:
such models are refused (`capture/shardable.check_shardable`), as are models whose positions or masks the
shards cannot reproduce, and sessions that probe the last rows' whole attention (passkey's: capture/call.py's
`read_call` refuses them).

Memory per rank: the model's activations for N/P positions, plus per layer the gathered K and V of
the whole sequence (2·N·Hkv·D elements, freed when the layer returns) and the statistics; see
docs/scaling.md for the model and measurements.
"""

from __future__ import annotations

import dataclasses

import torch

from entropy_lens.capture.call import LayerCall, LayerInputs, Session, check_finite_inputs, read_call
from entropy_lens.capture.paths import SDPA, record, report_keys, run_path, sdpa
from entropy_lens.capture.received import column_pass, combined, combined_over_ranks
from entropy_lens.capture.shards import ShardedSequence
from entropy_lens.errors import EntropyLensError
from entropy_lens.kernels.contract import first_real_key
from entropy_lens.kernels.received import counted_rows

__all__ = ["MASK_BUDGET", "bottom_right_sdpa", "refusal", "sharded_attention"]

# most mask elements (query rows x keys) `bottom_right_sdpa` builds at once: 4 MB of bool (16 MB where
# CPU sdpa turns it into a float mask); why this size: docs/internals/layout.md
MASK_BUDGET = 1 << 22


def sharded_attention(session: Session, module, query, key, value, scaling, dropout, kwargs):
    """entropy_lens_attention under a sharded session (module docstring): (output (B, T, Hq, Dv), None)."""
    sequence: ShardedSequence = session.context
    window_passed = "sliding_window" in kwargs
    kwargs = {**kwargs, "position_ids": sequence.shards.positions(query.device)[None]}  # a schedule's i
    call = read_call(session, module, query, key, value, None, scaling, dropout, kwargs)  # refuses last rows
    if call.capturing:  # this rank's shard: every position is checked by the rank that holds it
        check_finite_inputs(call)
    window = _window(call, window_passed)
    keys, values = sequence.gather(call.key), sequence.gather(call.value)  # (B, Hkv, N, D)
    N = keys.shape[2]
    counted = _counted_rows(call, sequence, N) if call.wants_keys else None
    outs, start, states = [], 0, []
    for a, b in sequence.shards.chunks:
        rows = slice(start, start + b - a)
        start += b - a
        part = dataclasses.replace(
            call,
            query=call.query[:, :, rows],
            output_query=call.output_query[:, :, rows],
            key=keys[:, :, :b],
            value=values[:, :, :b],
            sdpa_output=bottom_right_sdpa,
        )
        padding = sequence.key_padding(b, query.device)  # the whole sequence's, keys [0, b): global
        mods = call.extras.replace(
            causal=True, mask=padding, window=window, first_key=first_real_key(padding)
        )
        inputs = LayerInputs(part.key, part.value, mods)
        if not part.capturing and mods.sdpa_computes:
            out = bottom_right_sdpa(part, inputs)
            record(part, SDPA)
        else:
            ran = run_path(part, inputs)  # 1. the row pass
            if part.wants_keys:  # 2. the column pass: a chunk's state, combined over chunks and ranks below
                rows_here = None if counted is None else counted[:, a:b]
                states.append(column_pass(part, inputs, ran.route, ran.rows, rows_here, N))
            record(part, ran.route.path, ran.route, inputs, ran.rows)  # 3. bookkeeping (keys: below)
            out = ran.returned
        outs.append(out[0])
    if states:  # keys on this rank receive from queries on every rank: one state per layer, combined
        shards = sequence.shards
        state = combined_over_ranks(combined(states), sequence.exchange, shards.size)
        if shards.rank == 0:  # every rank has the same numbers; the sums count each sample once
            report_keys(
                session, module.layer_idx, state, 0
            )  # the whole sequence's keys: a forward of its own
    return torch.cat(outs, dim=1), None


def _counted_rows(call: LayerCall, sequence: ShardedSequence, N: int):
    """(B|1, N) bool or None: the rows of the whole sequence that count for the key statistics (its real
    rows, or the last `query_window` of them: positions of the whole sequence, not of a chunk)."""
    padding = sequence.key_padding(N, call.query.device)
    mods = call.extras.replace(causal=True, mask=padding)
    return counted_rows(mods, N, N, call.session.measure.query_window, call.query.device)


def bottom_right_sdpa(call: LayerCall, inputs: LayerInputs):
    """The output of `call`'s queries (the last T of its S keys' positions) from torch sdpa, with the
    bottom-right causal mask (and the window and key padding of `inputs.mods`) given explicitly, at most
    MASK_BUDGET mask elements at a time: sdpa's own `is_causal` aligns top-left."""
    mods = inputs.mods
    T, S = call.query.shape[2], call.key.shape[2]
    offset = S - T
    if offset == 0 and mods.window is None and mods.mask is None:
        return sdpa(call)  # a square causal block: sdpa's is_causal is the bottom-right mask
    keys = torch.arange(S, device=call.query.device)
    step = max(1, MASK_BUDGET // max(S, 1))
    outs = []
    for r0 in range(0, T, step):
        r1 = min(T, r0 + step)
        last = torch.arange(r0 + offset, r1 + offset, device=keys.device)[:, None]  # each row's position
        allowed = keys <= last
        if mods.window is not None:
            allowed = allowed & (keys > last - mods.window)
        allowed = allowed[None, None]  # (1, 1, rows, S)
        if mods.mask is not None:
            allowed = allowed & mods.mask
            # a padded row that sees no key would be NaN in sdpa and spread to real rows through its K
            # and V: as transformers' sdpa mask does, it attends every key instead (its output is unused)
            allowed = allowed | ~allowed.any(-1, keepdim=True)
        rows = dataclasses.replace(
            call, query=call.query[:, :, r0:r1], output_query=call.output_query[:, :, r0:r1]
        )
        outs.append(_masked_sdpa(rows, allowed))
    return torch.cat(outs, dim=1), None


def _masked_sdpa(call: LayerCall, mask: torch.Tensor) -> torch.Tensor:
    """sdpa's output (B, T, Hq, Dv) of `call` under the bool `mask`. On CPU a GQA layer's keys are not
    repeated per query head: torch's sdpa takes the grouped K and V with a mask there (`enable_gqa`;
    transformers repeats K and V whenever a mask is given, 2·S·Hq·D elements per block, as much as a
    rank's MLP at 16K); elsewhere as transformers computes it."""
    grouped = call.key.shape[1] != call.query.shape[1]
    if not (grouped and call.query.device.type == "cpu"):
        return sdpa(call, mask)[0]
    out = torch.nn.functional.scaled_dot_product_attention(
        call.output_query, call.key, call.value, attn_mask=mask, scale=call.output_scaling, enable_gqa=True
    )
    return out.transpose(1, 2)


def _window(call: LayerCall, passed: bool) -> int | None:
    """The layer's sliding window from its `sliding_window` argument; refused where the model declares
    a window but windows its layers through the mask alone (which the shards never read), and for
    calls the sharded path does not compute (gradients, dropout, a key bias, non-causal attention)."""
    name = type(call.module).__name__
    causal = call.kwargs.get("is_causal")
    causal = getattr(call.module, "is_causal", True) if causal is None else causal
    if call.wants_grad or call.dropout or not causal:
        raise EntropyLensError(
            f"{name}: --context-parallel computes causal attention without gradients or dropout (a scan); "
            "run this without --context-parallel"
        )
    if call.extras.key_bias is not None:
        raise EntropyLensError(
            refusal(name, "its ALiBi comes as a bias per key (Falcon's), built for the local keys only")
        )
    window = call.kwargs.get("sliding_window")
    config = getattr(call.module, "config", None)
    declared = getattr(config, "sliding_window", None) and getattr(config, "use_sliding_window", True)
    if not passed and declared:
        raise EntropyLensError(
            refusal(name, "its sliding window lives in its mask alone, which the shards never read")
        )
    return int(window) if window else None


def refusal(family: str, why: str) -> str:
    return f"--context-parallel cannot shard {family}: {why}; run it without --context-parallel"
