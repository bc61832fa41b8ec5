"""The lens inside vLLM's workers: each attention layer's statistics for the requests that opted in, from
the query rows the layer was handed and the request's keys as the layer was handed them (never T × T). ::

    LLM(model, **engine_args(out=DIR))   # worker_extension_cls names `Extension`: importing this module
                                         # in each worker (every TP/PP rank) wraps, once per process,
    GPUModelRunner.execute_model         # the step: which requests of the batch opted in (their
                                         #   SamplingParams.extra_args), finished requests written out
    <the layers' attention>.forward      # the layer: its output first, then the statistics (the class
                                         #   vLLM chose: CPUAttentionBackendImpl; on a GPU
                                         #   FlashAttentionImpl, TritonAttentionImpl, FlashInferImpl, ...)

Why this seam: on the CPU platform `--attention-backend CUSTOM` is ignored (CpuPlatform always picks
CPU_ATTN), so a backend of our own cannot be chosen there, and on a GPU replacing vLLM's backend would
give up its kernels; the worker extension is imported exactly in the workers of an engine started with
the lens (no other engine pays anything), in every rank, before the model is built, and the first step
wraps the forward of whichever implementation the model's layers use. The wrapper calls vLLM's own forward
unchanged first: the numbers vLLM serves are vLLM's. On a GPU vLLM runs attention outside its CUDA graphs
when they are piecewise (attention is where the graphs are split), so the wrapper runs at every step:
`engine_args` asks for piecewise graphs there.
Keys: each opted-in request's, per layer, appended as the layer is handed them (`_Request.keys_of`; vLLM's
CPU cache is laid out per instruction set, packed for its kernels, so it is not read back): checked
finite once each, their max|k| kept, so the kernel skips its own pass over every key at each step.

Rows: a request's chunk of query rows sits at positions seq_len − n .. seq_len − 1 (chunked prefill,
decode, a preempted request recomputed: the same positions again, written again). The row at position
p chose token p + 1, so generated token k's row is position P − 1 + k; only rows from P − 1 on are
computed, unless the request asked for the prompt's (`prompt=True`). Each rank computes its own heads
(tensor parallel: the heads [rank · H/tp, (rank + 1) · H/tp)) and layers (pipeline parallel), and writes
them when the request finishes: `DIR/.parts/<internal request id>/rank<r>.npz` (files.py merges them).
"""

from __future__ import annotations

import contextlib
import json
import math
import re
import shutil
from pathlib import Path

import numpy as np
import torch

from entropy_lens.errors import EntropyLensError
from entropy_lens.flags import NO_SLICES, Backend
from entropy_lens.kernels import ScoreMods, resolve_backend, run, statistics_kernel
from entropy_lens.kernels.contract import SAFE_SCORE, score_bound, score_range_checked, validate_scale
from entropy_lens.kernels.slices import slice_values
from entropy_lens.results.files import atomic_savez
from entropy_lens.vllm.options import ABORTED, KEY, PARTS, options_of

_LAYER = re.compile(r"(?:^|\.)(\d+)\.")
NOT_FINITE = (
    "; the model produced NaN or inf before attention: check its weights, and serve it in float32 if "
    "bfloat16/float16 overflowed"
)
_active = None  # the Lens of the step running in this process, or None

__all__ = ["PARTS", "Extension", "install", "score_mods_of", "wrap_attention"]


class Extension:
    """vLLM's worker extension (`worker_extension_cls`): importing this module installs the lens. Its
    method writes finished requests' rows now (files.py calls it where no later step will: an engine in
    the caller's own process, `VLLM_ENABLE_V1_MULTIPROCESSING=0`)."""

    def entropy_lens_flush(self, request_ids) -> int:
        lens = _lens_of(self.model_runner)
        return 0 if lens is None else lens.flush(request_ids)


class _Request:
    """One opted-in request's rows in this rank: {position: {layer: {name: (heads,) float32}}}."""

    def __init__(self, options, prompt_len: int):
        self.options, self.prompt_len = options, prompt_len
        self.rows: dict[int, dict[int, dict[str, np.ndarray]]] = {}
        self.keys: dict[int, torch.Tensor] = {}  # by layer: (capacity, kv heads, D), positions 0.. on
        self.filled: dict[int, int] = {}  # by layer: the positions whose keys are held
        self.largest: dict[int, torch.Tensor] = {}  # by layer: max|k| over the keys taken in (0-d)
        self.cached_prefix = 0  # positions vLLM served from its prefix cache: no key, no row of them here
        self.refused: str | None = None  # why no row is recorded (a query or key that is not finite)
        self.recomputed = 0  # keys written again (a preempted request recomputed), at the last layer

    def keys_of(self, layer: int, first: int, new: torch.Tensor) -> torch.Tensor | None:
        """The layer's keys at positions 0 .. first + len(new), `new` written at `first` on (a chunk,
        a decode step, a preempted request's recomputation); None where positions before `first` were
        never handed to this layer (a prefix cache hit)."""
        if first > self.filled.get(layer, 0):
            self.cached_prefix = max(self.cached_prefix, first)
            return None
        if not _finite(new):
            self.refused = (
                f"layer {layer} was handed a key that is not finite at positions {first}..{NOT_FINITE}"
            )
            return None
        fresh = torch.linalg.vector_norm(new.detach(), ord=math.inf)
        self.largest[layer] = torch.maximum(self.largest[layer], fresh) if layer in self.largest else fresh
        end = first + new.shape[0]
        self.recomputed += max(0, min(end, self.filled.get(layer, 0)) - first)
        held = self.keys.get(layer)
        if held is None or held.shape[0] < end:
            grown = new.new_empty((max(end, 2 * (0 if held is None else held.shape[0])), *new.shape[1:]))
            if held is not None:
                grown[: self.filled[layer]] = held[: self.filled[layer]]
            self.keys[layer] = held = grown
        held[first:end] = new
        self.filled[layer] = end
        return held

    def add(self, layer: int, positions: range, values: dict[str, np.ndarray]) -> None:
        for j, position in enumerate(positions):
            self.rows.setdefault(position, {})[layer] = {name: v[:, j] for name, v in values.items()}


class Lens:
    """The lens of one model runner: the opted-in requests' rows, and where they are written."""

    def __init__(self, runner, out: str):
        from vllm.distributed import get_tensor_model_parallel_rank

        self.runner, self.out = runner, Path(out)
        self.tp_rank = get_tensor_model_parallel_rank()
        self.rank = torch.distributed.get_rank() if torch.distributed.is_initialized() else 0
        cfg = runner.model_config.hf_text_config
        self.n_layers, self.n_heads = cfg.num_hidden_layers, cfg.num_attention_heads
        self.requests: dict[str, _Request | None] = {}  # None: seen, did not opt in (a request's id is
        # never reused: vLLM appends 8 random characters to the caller's)
        self.batch: list | None = None  # this step's [(batch index, request id, _Request)]
        self.unreadable = wrap_attention(runner)  # why no request can be recorded here, or None

    # -- the step -------------------------------------------------------------------------------------
    def begin(self, scheduler_output) -> None:
        self.flush(scheduler_output.finished_req_ids)
        self.batch = None

    def step_batch(self) -> list:
        """This step's opted-in requests, read once per step (the first layer asks)."""
        if self.batch is None:
            runner, batch = self.runner, []
            for i, req_id in enumerate(runner.input_batch.req_ids):
                if req_id not in self.requests:
                    state = runner.requests[req_id]
                    params = state.sampling_params
                    options = options_of(params.extra_args if params is not None else None)
                    request = None if options is None else _Request(options, state.num_prompt_tokens)
                    if request is not None and self.unreadable:
                        request.refused = self.unreadable
                    self.requests[req_id] = request
                if self.requests[req_id] is not None:
                    batch.append((i, req_id, self.requests[req_id]))
            self.batch = batch
        return self.batch

    def flush(self, request_ids) -> int:
        """Write the rows of the finished `request_ids` (the step's, or the front end's where no step
        follows) and forget them; how many were written."""
        written = 0
        for req_id in request_ids:
            request = self.requests.pop(req_id, None)
            if request is not None:
                self.write(req_id, request)
                written += 1
        return written

    # -- a layer --------------------------------------------------------------------------------------
    def layer(self, attention, layer, query, key, meta) -> None:
        batch = self.step_batch()
        if not batch:
            return
        index = int(_LAYER.findall(layer.layer_name)[0])
        starts, seq_lens = meta.query_start_loc.tolist(), meta.seq_lens.tolist()
        mods = score_mods_of(attention, query.device)
        for i, _, request in batch:
            a, b, S = starts[i], starts[i + 1], seq_lens[i]
            first = S - (b - a)  # the chunk's first row's position
            k = request.keys_of(index, first, key[a:b])
            if k is None:  # a prefix vLLM served from its cache: its keys were never handed to a layer
                continue
            keep = first if request.options.prompt else max(first, request.prompt_len - 1)
            if keep >= S:
                continue
            q = query[a + keep - first : b].transpose(0, 1)[None]
            k = k[:S].transpose(0, 1)[None]  # from position 0: first_mass's keys are positions
            if not _finite(q):
                request.refused = (
                    f"layer {index} was handed a query that is not finite at positions {keep}..{NOT_FINITE}"
                )
            if request.refused:
                continue
            values = _statistics(q, k, request.options, mods, request.largest[index], request.prompt_len)
            request.add(index, range(keep, S), {n: v[0].cpu().numpy() for n, v in values.items()})

    # -- the request's file ---------------------------------------------------------------------------
    def write(self, req_id: str, request: _Request) -> None:
        """This rank's rows of a finished request: positions (R,), each statistic (R, layers, heads)."""
        positions = sorted(request.rows)
        layers = sorted({layer for row in request.rows.values() for layer in row})
        names, arrays, heads = [], {}, 0
        if positions and layers:
            first = request.rows[positions[0]][layers[0]]
            names = list(first)
            heads = next(iter(first.values())).shape[0]
            for name in names:
                arrays[name] = np.stack(
                    [np.stack([request.rows[p][layer][name] for layer in layers]) for p in positions]
                )
        meta = {
            "request_id": req_id,
            "rank": self.rank,
            "tp_rank": self.tp_rank,
            "head_start": self.tp_rank * heads,
            "layers": layers,
            "n_layers": self.n_layers,
            "n_heads": self.n_heads,
            "prompt_len": request.prompt_len,
            "cached_prefix": request.cached_prefix,
            "prompt_rows": request.options.prompt,
            "model": str(self.runner.model_config.model),
            "backend": str(
                resolve_backend(Backend.AUTO, torch.device(self.runner.device), one_pass=True).value
            ),
            "refused": request.refused,
            "recomputed_keys": request.recomputed,
            "stats": names,
            "recorded": request.options.measure.recorded(),  # the parameters, as a result's meta keeps them
        }
        folder = self.out / PARTS / req_id
        if (folder / ABORTED).is_file():  # aborted: nothing written; the last rank removes the tombstone
            (folder / f"{ABORTED}.rank{self.rank}").touch()
            if len(list(folder.glob(f"{ABORTED}.rank*"))) >= int((folder / ABORTED).read_text()):
                shutil.rmtree(folder, ignore_errors=True)
            return
        folder.mkdir(parents=True, exist_ok=True)
        atomic_savez(
            folder / f"rank{self.rank}.npz",
            positions=np.asarray(positions, dtype=np.int64),
            meta=np.asarray(json.dumps(meta)),
            **arrays,
        )


def score_mods_of(attention, device) -> dict:
    """The score modifiers of a vLLM attention implementation (its `impl`), as the kernels take them.
    Every backend keeps them under the same names but the window: the CPU's (and FlexAttention's) an int
    of keys w (−1 or None: none); the GPU backends' (FlashAttention, Triton, FlashInfer, ROCm) a pair
    (left, right) of keys either side of the row, (w − 1, 0) for a causal window of w keys, (−1, −1) for
    none. ALiBi's slopes may be a list."""
    window = getattr(attention, "sliding_window", None)
    if isinstance(window, tuple | list):
        left, right = window
        if left >= 0 and right != 0:
            raise EntropyLensError(
                f"{type(attention).__name__}: a window of {right} keys after the row is no causal decoder's; "
                "the lens records causal language models"
            )
        window = left + 1 if left >= 0 else None
    elif window is not None and window <= 0:
        window = None
    slopes = attention.alibi_slopes
    return {
        "softmax_scale": attention.scale,
        "window": window,
        "softcap": attention.logits_soft_cap or None,
        "sinks": getattr(attention, "sinks", None),
        "alibi_slopes": None
        if slopes is None
        else torch.as_tensor(slopes, dtype=torch.float32, device=device),
    }


def _finite(x: torch.Tensor) -> bool:
    """Every value finite: a float64 sum is finite exactly where every term is (one pass, one read)."""
    return bool(torch.isfinite(x.detach().sum(dtype=torch.float64)))


def _statistics(q, k, options, mods: dict, largest_key, prompt_len: int) -> dict[str, torch.Tensor]:
    """The statistics a request asked for of rows q over keys k at positions 0 .. S − 1: the kernels'
    row statistics and the row-slice statistics (`kernels.slices.slice_values` on the row pass's
    log-sum-exp). The inputs were checked as they were taken in (the queries here, each key once:
    `_Request.keys_of`), so the kernel skips its own pass over every key: the scores' bound from max|k|
    (`contract.score_bound`), as the capture's decode steps do. The one-pass kernel where it builds
    (native on CPU), as `kernels.plan` picks it for a fused layer."""
    score_mods = ScoreMods.build(q, k, **{name: v for name, v in mods.items() if name != "softmax_scale"})
    scale = validate_scale(q, k, mods["softmax_scale"])
    kernel, score_mods = statistics_kernel(Backend.AUTO, q, k, score_mods, one_pass=True)
    safe = score_bound(q, k, scale, score_mods, largest_key=largest_key) <= SAFE_SCORE
    slices = options.measure.slices
    measure = options.measure.replace(slices=NO_SLICES)
    with score_range_checked() if safe else contextlib.nullcontext():
        rows = run(kernel, q, k, None, scale, score_mods, measure=measure, with_lse=bool(slices))
    values = {name: rows[name] for name in options.stats}
    if slices:
        prompt = torch.tensor([prompt_len], device=q.device)
        values |= slice_values(q, k, rows.lse, scale, score_mods, slices, (0, q.shape[2]), prompt)
    return values


# -- the wrappers, installed once per process -------------------------------------------------------------
_installed = False


def _lens_of(runner) -> Lens | None:
    lens = runner.__dict__.get("_entropy_lens", False)
    if lens is False:
        config = (getattr(runner.vllm_config, "additional_config", None) or {}).get(KEY)
        lens = Lens(runner, config["out"]) if config else None
        runner._entropy_lens = lens
    return lens


_wrapped: set[type] = set()  # the attention implementations whose forward the lens wraps


def wrap_attention(runner) -> str | None:
    """Wrap the forward of the attention implementation each of the model's layers uses, once per class
    and process: whichever backend vLLM chose (the CPU's; on a GPU FlashAttention's, Triton's,
    FlashInfer's, ...): the lens reads a layer's rows from its query and keys and its score modifiers from
    the implementation (`score_mods_of`), whatever kernel computes its output. Returns why this model
    cannot be recorded (a layer that is not plain attention: MLA, chunked-local, a state-space layer), or
    None."""
    from vllm.model_executor.layers.attention.attention import Attention
    from vllm.model_executor.layers.attention_layer_base import AttentionLayerBase

    for name, layer in runner.compilation_config.static_forward_context.items():
        if not isinstance(layer, AttentionLayerBase):  # the context holds the MoE runners too
            continue
        if type(layer) is not Attention:
            return (
                f"layer {name} is {type(layer).__name__}, not vLLM's plain Attention whose score modifiers "
                "the lens reads; record this model with entropy_lens.GenerationRecorder in transformers"
            )
        implementation = layer.attn_backend.get_impl_cls()  # the class of the layer's implementation
        if implementation not in _wrapped:
            implementation.forward = _lens_forward(implementation.forward)
            _wrapped.add(implementation)
    return None


def _lens_forward(forward):
    """An attention implementation's `forward`, then the lens's statistics of the layer (in a step
    of an engine with the lens: `_active`)."""

    def lens_forward(self, layer, query, key, value, kv_cache, attn_metadata, output, *args, **kwargs):
        out = forward(self, layer, query, key, value, kv_cache, attn_metadata, output, *args, **kwargs)
        if _active is not None and attn_metadata is not None:
            _active.layer(self, layer, query, key, attn_metadata)
        return out

    return lens_forward


def install() -> None:
    """Wrap the model runner's step (idempotent); each attention implementation is wrapped when a lens
    first meets it (`wrap_attention`)."""
    global _installed
    if _installed:
        return
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    execute_model = GPUModelRunner.execute_model

    def lens_execute_model(self, scheduler_output, *args, **kwargs):
        global _active
        lens = _lens_of(self)
        if lens is None:
            return execute_model(self, scheduler_output, *args, **kwargs)
        lens.begin(scheduler_output)
        _active = lens
        try:
            return execute_model(self, scheduler_output, *args, **kwargs)
        finally:
            _active = None

    GPUModelRunner.execute_model = lens_execute_model
    _installed = True


install()
