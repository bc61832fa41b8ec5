"""The lens in vLLM's front end (the process that holds `LLM`, or `vllm serve`'s API server): what each
opted-in request returned. When a request finishes (its end token, its length, a stop string: never an
abort), `DIR/<request id>/<index>.json` records the tokens the caller received (the output processor's,
after a stop string's surplus is trimmed), its prompt's ids and its internal id, under which the workers
wrote their rows (worker.py). `n > 1`: one file per sequence, `index` its place among the n. An aborted
request gets none, so `load` refuses it, and its ranks write nothing (`Frontend.aborted`). An opted-in
request skips reading vLLM's prefix cache (`skip_reading_prefix_cache`), so every key reaches the layers.
"""

from __future__ import annotations

import json
import re
import weakref
from pathlib import Path

from entropy_lens.results.files import atomic_write_text
from entropy_lens.vllm.options import ABORTED, KEY, PARTS, options_of

__all__ = ["flush", "install", "request_folder"]
_installed = False
_engines: weakref.WeakSet = weakref.WeakSet()  # this process's engines with the lens on (LLMEngine's)


def flush(out, request_ids) -> None:
    """Ask the workers of this process's engines writing under `out` to write `request_ids`' rows now."""
    for engine in list(_engines):
        if Path(engine.output_processor._entropy_lens.out) == Path(out).resolve():
            engine.collective_rpc("entropy_lens_flush", args=(list(request_ids),))


def request_folder(out: str | Path, request_id: str) -> Path:
    """The folder of a request's manifests: its id, with any character outside [A-Za-z0-9._-] as _."""
    return Path(out) / re.sub(r"[^A-Za-z0-9._-]", "_", str(request_id))


class Frontend:
    """One engine's front end: the opted-in requests, by internal id."""

    def __init__(self, out: str, ranks: int):
        self.out, self.ranks = out, ranks
        self.opted: dict[str, tuple[int, int]] = {}  # internal id -> (index among n, n)

    def added(self, request, parent, request_index: int) -> None:
        params = request.sampling_params
        if params is not None and options_of(params.extra_args) is not None:
            n = parent.sampling_params.n if parent is not None else params.n  # a child's own n is 1
            self.opted[request.request_id] = (request_index, n)
            # its whole prompt through the layers (a cached prefix's keys never reach them); what it
            # computes still fills the prefix cache for others
            params.skip_reading_prefix_cache = True

    def aborted(self, request_ids) -> None:
        """Aborted requests leave nothing: a tombstone their ranks find when they would write (the
        front end's abort precedes the engine's, so before any rank writes), the last rank removes it."""
        for req_id in request_ids:
            if self.opted.pop(req_id, None) is not None:
                folder = Path(self.out) / PARTS / req_id
                folder.mkdir(parents=True, exist_ok=True)
                atomic_write_text(folder / ABORTED, str(self.ranks))

    def finished(self, state) -> None:
        opted = self.opted.pop(state.request_id, None)
        if opted is None:
            return
        index, n = opted
        manifest = {
            "request_id": state.request_id,
            "external_id": state.external_req_id,
            "index": index,
            "n": n,
            "ranks": self.ranks,
            # a prompt given as embeddings: its ids unknown (−1), as GenerationRecorder's
            "prompt": list(state.prompt_token_ids)
            if state.prompt_token_ids is not None
            else [-1] * state.prompt_len,
            "tokens": list(state.detokenizer.output_token_ids) if state.detokenizer is not None else [],
        }
        folder = request_folder(self.out, state.external_req_id)
        folder.mkdir(parents=True, exist_ok=True)
        atomic_write_text(folder / f"{index}.json", json.dumps(manifest))


def install() -> None:
    """Wrap the engines' construction and the output processor's request bookkeeping (idempotent)."""
    global _installed
    if _installed:
        return
    from vllm.v1.engine.async_llm import AsyncLLM
    from vllm.v1.engine.llm_engine import LLMEngine
    from vllm.v1.engine.output_processor import OutputProcessor

    def wrap_init(cls):
        init = cls.__init__

        def __init__(self, vllm_config, *args, **kwargs):
            init(self, vllm_config, *args, **kwargs)
            config = (vllm_config.additional_config or {}).get(KEY)
            if config:
                ranks = vllm_config.parallel_config.world_size
                self.output_processor._entropy_lens = Frontend(config["out"], ranks)
                if cls is LLMEngine:  # the caller steps it: nothing steps it after the last output
                    _engines.add(self)

        cls.__init__ = __init__

    add_request, finish_request = OutputProcessor.add_request, OutputProcessor._finish_request
    abort_requests = OutputProcessor.abort_requests

    def lens_add_request(self, request, prompt, parent_req=None, request_index=0, queue=None):
        add_request(self, request, prompt, parent_req, request_index, queue)
        frontend = self.__dict__.get("_entropy_lens")
        if frontend is not None:
            frontend.added(request, parent_req, request_index)

    def lens_finish_request(self, req_state):
        frontend = self.__dict__.get("_entropy_lens")
        if frontend is not None:
            frontend.finished(req_state)
        return finish_request(self, req_state)

    def lens_abort_requests(self, request_ids, internal: bool):
        aborted = abort_requests(self, request_ids, internal)
        frontend = self.__dict__.get("_entropy_lens")
        if frontend is not None:
            frontend.aborted(aborted)
        return aborted

    wrap_init(LLMEngine)
    wrap_init(AsyncLLM)
    OutputProcessor.add_request = lens_add_request
    OutputProcessor._finish_request = lens_finish_request
    OutputProcessor.abort_requests = lens_abort_requests
    _installed = True
