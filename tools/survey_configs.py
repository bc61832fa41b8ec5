"""Tiny configs for the architecture survey (tools/survey_architectures.py): for any causal-LM model
type of the installed transformers, the config arguments to try, in order (`attempts`: the tested
overrides of tests/architectures.py where it has them, a few per-architecture extras, and generic
shrinks of the type's default config), and the first tiny model among them that builds and runs its own
forward (`build_tiny`). Needs tests/ on sys.path (architectures: COMMON, SUPPORTED).
"""

from __future__ import annotations

# Small per-architecture overrides (beyond architectures' SUPPORTED ones).
EXTRA = {
    "gpt2": {"n_embd": 32, "n_layer": 2, "n_head": 4},
    "gpt_bigcode": {"n_embd": 32, "n_layer": 2, "n_head": 4},
    "openai-gpt": {"n_embd": 32, "n_layer": 2, "n_head": 4},
    "ctrl": {"n_embd": 32, "n_layer": 2, "n_head": 4, "dff": 48},
    "gptj": {"n_embd": 32, "n_layer": 2, "n_head": 4, "rotary_dim": 4},
    "codegen": {"n_embd": 32, "n_layer": 2, "n_head": 4, "rotary_dim": 4},
    "gpt_neo": {
        "attention_types": [[["global", "local"], 1]],
        "window_size": 4,
        "num_layers": 2,
        "num_heads": 4,
    },
    "xglm": {"d_model": 32, "num_layers": 2, "attention_heads": 4, "ffn_dim": 48},
    "rwkv": {"attention_hidden_size": 32},
    "jamba": {
        "attn_layer_period": 2,
        "attn_layer_offset": 1,
        "expert_layer_period": 2,
        "expert_layer_offset": 1,
        "mamba_dt_rank": 4,
        "use_mamba_kernels": False,
    },
    "bamba": {"attn_layer_indices": [1]},
}
# Generic shrinks applied to any config (or text sub-config) that has the attribute with an int value.
SHRINK = {
    "head_dim": 8,
    "num_experts": 4,
    "n_routed_experts": 4,
    "num_local_experts": 4,
    "moe_num_experts": 4,
    "num_experts_per_tok": 2,
    "n_group": 1,
    "topk_group": 1,
    "first_k_dense_replace": 1,
    "q_lora_rank": 16,
    "kv_lora_rank": 16,
    "qk_rope_head_dim": 4,
    "qk_nope_head_dim": 4,
    "v_head_dim": 8,
    "n_shared_experts": 1,
    "num_shared_experts": 1,
    "sliding_window": 4,
    "linear_num_key_heads": 2,
    "linear_num_value_heads": 4,
    "linear_key_head_dim": 8,
    "linear_value_head_dim": 8,
    "mamba_n_heads": 4,
    "mamba_d_head": 8,
    "mamba_n_groups": 1,
    "mamba_d_state": 8,
    "d_state": 8,
    "time_step_rank": 4,
}
SMALL_VISION = {"hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 1, "num_attention_heads": 4}


# ----------------------------------------------------------------------------------------- child
def _shrink_lists(default, n_default: int) -> dict:
    """Per-layer lists (layer_types, ...) of the default config cut to 2 entries, each kind kept."""
    kw = {}
    for name, value in vars(default).items():
        if isinstance(value, (list, tuple)) and len(value) == n_default and n_default > 2:
            picked, seen = [], []
            for i, v in enumerate(value):
                key = repr(v)
                if key not in seen:
                    seen.append(key)
                    picked.append(i)
                if len(picked) == 2:
                    break
            while len(picked) < 2:
                picked.append(max(set(range(n_default)) - set(picked)))
                picked.sort()
            kw[name] = [value[i] for i in sorted(picked)]
    return kw


def _generic(default) -> dict:
    kw = {}
    n = getattr(default, "num_hidden_layers", None)
    if isinstance(n, int):
        kw.update(_shrink_lists(default, n))
    for name, v in SHRINK.items():
        if (
            name in vars(default)
            and isinstance(vars(default)[name], int)
            and not isinstance(vars(default)[name], bool)
        ):
            kw[name] = v
    if "qk_rope_head_dim" in vars(default):  # MLA: head_dim is the rotary part, keys have every head
        kw["head_dim"] = SHRINK["qk_rope_head_dim"]
        kw["num_key_value_heads"] = 4
        if "qk_head_dim" in vars(default):
            kw["qk_head_dim"] = SHRINK["qk_rope_head_dim"] + SHRINK["qk_nope_head_dim"]
    for name, v in vars(default).items():
        if "intermediate_size" in name and isinstance(v, int) and not isinstance(v, bool):
            kw[name] = 48
    return kw


def attempts(model_type: str):
    """Config kwargs to try, in order."""
    import architectures as ta
    from transformers import AutoConfig

    base = {**ta.COMMON}
    tested = model_type in ta.SUPPORTED
    over = ta.SUPPORTED[model_type][0] if tested else {}
    over = {**EXTRA.get(model_type, {}), **over}
    if tested:
        yield "common", {**base, **over}
    try:
        default = AutoConfig.for_model(model_type)
    except Exception:  # noqa: BLE001
        yield "common", {**base, **over}
        return
    generic = _generic(default)
    subs = {}
    for name in getattr(type(default), "sub_configs", {}) or {}:
        sub = getattr(default, name, None)
        if sub is None or not hasattr(sub, "to_dict"):
            continue
        if name in ("text_config", "decoder_config", "language_config", "llm_config", "thinker_config"):
            subs[name] = {**sub.to_dict(), **base, **_generic(sub), **over}
        else:
            d = sub.to_dict()
            subs[name] = {**d, **{k: v for k, v in SMALL_VISION.items() if k in d}}
    if subs:  # multimodal: never build the default (large) towers
        yield "subconfigs", {**base, **generic, **over, **subs}
        yield "subconfigs-only", {**subs}
        return
    yield "generic", {**base, **generic, **over}
    if "qk_rope_head_dim" in vars(default):  # MLA: key heads = query heads
        yield "generic-mla", {**base, **generic, **over, "num_key_value_heads": 4}
    if not tested:
        yield "common", {**base, **over}


def build_tiny(model_type: str):
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    errors = []
    for name, kw in attempts(model_type):
        n_params = 0
        try:
            torch.manual_seed(0)
            config = AutoConfig.for_model(model_type, **kw)
            model = AutoModelForCausalLM.from_config(config).float().eval()
            n_params = sum(p.numel() for p in model.parameters())
            with torch.no_grad():  # the model's own forward (its default implementation) must run
                model(torch.randint(3, 300, (2, 12)), attention_mask=torch.ones(2, 12, dtype=torch.long))
            return model, name, n_params, errors
        except Exception as e:  # noqa: BLE001
            stage = "forward" if n_params else "build"
            first = str(e).strip().splitlines()[0][:300] if str(e).strip() else ""
            errors.append(f"[{name}/{stage}] {type(e).__name__}: {first}")
    return None, None, None, errors
