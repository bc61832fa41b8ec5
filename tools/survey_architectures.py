"""Survey: every causal-LM architecture of the installed transformers, EXACT or REFUSED?

    python tools/survey_architectures.py --out survey/             # all of MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
    python tools/survey_architectures.py --out survey/ llama gemma2 # some
    python tools/survey_architectures.py llama                      # into a new temporary folder, printed

Each model type runs in a child process of its own (address space capped, timeout), which builds a
tiny random model (tests/test_architectures.py's COMMON, its per-architecture overrides where it has
them, and a few generic shrinks), and classifies it:

  BUILD    the tiny config/model could not be built
  EAGER    the model's own eager forward with output_attentions fails (no reference)
  REFUSED  EntropyRecorder(model) or its forward raised EntropyLensError
  CRASH    the recorder path raised another exception (a bug in entropy_lens)
  EXACT    logits on real tokens within 1e-3 and entropy within 1e-4 of eager, for every padding
  WRONG    the recorder ran but its numbers differ from eager's (silently wrong)
  TIMEOUT / KILLED  the child ran out of time / memory

Writes OUT/survey.json (every type surveyed so far: a second run adds to it) and one json per type
under OUT/one/. The children import entropy_lens from this checkout. Environment: SURVEY_MEM_GB (each
child's address space, default 6), SURVEY_TIMEOUT (seconds per type, default 60).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TESTS = ROOT / "tests"  # test_architectures.py: the tested configs, the eager reference
MEM_BYTES = int(os.environ.get("SURVEY_MEM_GB", "6")) * 1024**3
TIMEOUT = int(os.environ.get("SURVEY_TIMEOUT", "60"))
PADDINGS = ("none", "left", "right")
LOGIT_TOL, ENT_TOL = 1e-3, 1e-4

# Small per-architecture overrides (beyond test_architectures' SUPPORTED / REFUSED ones).
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


def _attempts(model_type: str):
    """Config kwargs to try, in order."""
    import test_architectures as ta
    from transformers import AutoConfig

    base = {**ta.COMMON}
    over = {}
    if model_type in ta.SUPPORTED:
        over = ta.SUPPORTED[model_type][0]
    elif model_type in ta.REFUSED:
        over = ta.REFUSED[model_type]
    tested = model_type in ta.SUPPORTED or model_type in ta.REFUSED
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


def _build(model_type: str):
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    errors = []
    for name, kw in _attempts(model_type):
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


def _tail(e: BaseException, n: int = 16) -> str:
    lines = traceback.format_exception(type(e), e, e.__traceback__)
    text = "".join(lines).rstrip().splitlines()
    return "\n".join(text[-n:])


def child(model_type: str) -> dict:
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (MEM_BYTES, MEM_BYTES))
    sys.path.insert(0, str(TESTS))
    import numpy as np
    import torch

    torch.set_num_threads(1)
    import test_architectures as ta
    import transformers

    transformers.logging.set_verbosity_error()
    from entropy_lens.capture import EntropyRecorder
    from entropy_lens.errors import EntropyLensError

    res: dict = {"model_type": model_type}
    model, attempt, n_params, errors = _build(model_type)
    if model is None:
        res.update(cls="BUILD", reason=errors[-1] if errors else "no attempt", build_errors=errors)
        return res
    res.update(
        attempt=attempt,
        build_errors=errors,
        model_class=type(model).__name__,
        n_params=n_params,
        default_impl=model.config._attn_implementation,
    )
    per_padding = {}
    verdicts = []
    for padding in PADDINGS:
        ids, mask = ta.ids_and_mask(padding)
        r: dict = {}
        # the recorder first (a refusal or a crash matters whether or not eager works)
        rec = None
        try:
            with EntropyRecorder(model) as rec, torch.no_grad():
                captured = model(ids, attention_mask=mask).logits
            rec_entropy = rec.entropy
            r["paths"] = sorted(rec.session.paths)
        except EntropyLensError as e:
            r.update(rec="REFUSED", msg=str(e)[:400])
            verdicts.append("REFUSED")
            per_padding[padding] = r
            continue
        except Exception as e:  # noqa: BLE001
            r.update(rec="CRASH", exc=f"{type(e).__name__}: {str(e)[:300]}", tb=_tail(e))
            verdicts.append("CRASH")
            per_padding[padding] = r
            continue
        r["rec"] = "ran"
        try:
            logits, entropies = ta.eager(model, ids, mask)
            if any(p is None for p in entropies):
                raise RuntimeError("eager returned None attentions for some layers")
            expected = ta.mean_by_position(entropies, mask)
        except Exception as e:  # noqa: BLE001
            r.update(eager="FAIL", exc=f"{type(e).__name__}: {str(e)[:300]}", tb=_tail(e, 4))
            verdicts.append("EAGER")
            per_padding[padding] = r
            continue
        real = torch.ones_like(ids, dtype=torch.bool) if mask is None else mask.bool()
        try:
            dlog = float((captured[real].float() - logits[real].float()).abs().max())
        except Exception as e:  # noqa: BLE001
            dlog = float("inf")
            r["logit_shape"] = f"{tuple(captured.shape)} vs {tuple(logits.shape)}: {e}"
        r["max_dlogit"] = dlog
        r["expected_std"] = float(np.nanstd(expected))
        r["expected_nan"] = int(np.isnan(expected).sum())
        if rec_entropy.shape != expected.shape:
            r["ent_shape"] = f"recorder {rec_entropy.shape} vs eager {expected.shape}"
            dent = float("inf")
        else:
            diff = np.abs(rec_entropy - expected)
            dent = float(np.nanmax(diff)) if np.isfinite(diff).any() else float("nan")
            r["nan_mismatch"] = int((np.isnan(rec_entropy) != np.isnan(expected)).sum())
            if r["nan_mismatch"]:
                dent = float("inf")
            if dent > ENT_TOL:
                per_layer = np.nanmax(diff.reshape(diff.shape[0], -1), axis=1)
                r["max_dent_per_layer"] = [float(x) for x in per_layer]
                r["rec_mean_per_layer"] = [
                    float(x) for x in np.nanmean(rec_entropy.reshape(diff.shape[0], -1), 1)
                ]
                r["eager_mean_per_layer"] = [
                    float(x) for x in np.nanmean(expected.reshape(diff.shape[0], -1), 1)
                ]
        r["max_dent"] = dent
        if (
            dlog > LOGIT_TOL or dent > ENT_TOL
        ):  # does the model's own default implementation agree with eager?
            try:
                with torch.no_grad():
                    own = model(ids, attention_mask=mask).logits
                r["own_impl"] = model.config._attn_implementation
                r["own_vs_eager_dlogit"] = float((own[real].float() - logits[real].float()).abs().max())
                r["rec_vs_own_dlogit"] = float((captured[real].float() - own[real].float()).abs().max())
            except Exception as e:  # noqa: BLE001
                r["own_impl_exc"] = f"{type(e).__name__}: {str(e)[:200]}"
        ok = dlog <= LOGIT_TOL and dent <= ENT_TOL
        verdicts.append("EXACT" if ok else "WRONG")
        per_padding[padding] = r
    res["paddings"] = per_padding
    for cls in ("CRASH", "WRONG", "REFUSED", "EAGER", "EXACT"):
        if cls in verdicts:
            res["cls"] = cls
            break
    if res["cls"] == "REFUSED":
        res["reason"] = next(r["msg"] for r in per_padding.values() if r.get("rec") == "REFUSED")
    elif res["cls"] == "CRASH":
        res["reason"] = next(r["exc"] for r in per_padding.values() if r.get("rec") == "CRASH")
    elif res["cls"] == "EAGER":
        res["reason"] = next(r["exc"] for r in per_padding.values() if r.get("eager") == "FAIL")
    elif res["cls"] == "WRONG":
        bad = {p: r for p, r in per_padding.items() if "max_dent" in r}
        res["reason"] = "; ".join(
            f"{p}: dlogit={r['max_dlogit']:.2e} dent={r['max_dent']:.2e}" for p, r in bad.items()
        )
    return res


# ---------------------------------------------------------------------------------------- parent
def run_one(model_type: str, out: Path) -> dict:
    one = out / "one" / f"{model_type}.json"
    one.unlink(missing_ok=True)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    t0 = time.time()
    try:
        proc = subprocess.run(
            [sys.executable, __file__, "--out", str(out), "--child", model_type],
            check=False,
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
            env=env,
            cwd=str(ROOT),
        )
        rc, err = proc.returncode, proc.stderr
    except subprocess.TimeoutExpired as e:
        res = {"model_type": model_type, "cls": "TIMEOUT", "reason": f"> {TIMEOUT} s"}
        res["stderr_tail"] = (
            (e.stderr or b"")[-1500:].decode("utf-8", "replace")
            if isinstance(e.stderr, bytes)
            else str(e.stderr or "")[-1500:]
        )
        res["seconds"] = round(time.time() - t0, 1)
        return res
    if one.exists():
        res = json.loads(one.read_text())
    else:
        tail = "\n".join(err.strip().splitlines()[-8:])
        cls = "KILLED" if rc < 0 or "MemoryError" in err else "CHILD"
        res = {"model_type": model_type, "cls": cls, "reason": f"rc={rc}", "stderr_tail": tail}
    res["seconds"] = round(time.time() - t0, 1)
    return res


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Classify causal-LM architectures of the installed transformers: EXACT, REFUSED, ...",
        epilog="example: python tools/survey_architectures.py --out survey/ llama gemma2",
    )
    parser.add_argument("types", nargs="*", help="model types (default: every causal-LM type)")
    parser.add_argument(
        "--out",
        type=Path,
        help="folder for survey.json and one/<type>.json (default: a new temporary folder, printed)",
    )
    parser.add_argument("--child", metavar="TYPE", help=argparse.SUPPRESS)  # one type, in this process
    return parser.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    if args.child:
        model_type = args.child
        try:
            res = child(model_type)
        except MemoryError as e:
            res = {"model_type": model_type, "cls": "KILLED", "reason": "MemoryError", "tb": _tail(e)}
        except Exception as e:  # noqa: BLE001 - a failure of the survey itself, reported as such
            res = {
                "model_type": model_type,
                "cls": "CHILD",
                "reason": f"{type(e).__name__}: {e}",
                "tb": _tail(e),
            }
        (args.out / "one").mkdir(parents=True, exist_ok=True)
        (args.out / "one" / f"{model_type}.json").write_text(json.dumps(res, indent=1, default=str))
        return 0
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    out = args.out or Path(tempfile.mkdtemp(prefix="survey-architectures-"))
    print(f"writing {out / 'survey.json'}", flush=True)
    names = args.types or list(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)
    (out / "one").mkdir(parents=True, exist_ok=True)
    path = out / "survey.json"
    results = json.loads(path.read_text()) if path.exists() else {}
    for name in names:
        res = run_one(name, out)
        results[name] = res
        path.write_text(json.dumps(results, indent=1, default=str))
        print(
            f"{name:28s} {res['cls']:8s} {res['seconds']:5.1f}s  {str(res.get('reason', ''))[:120]}",
            flush=True,
        )
    counts: dict[str, int] = {}
    for r in results.values():
        counts[r["cls"]] = counts.get(r["cls"], 0) + 1
    print("counts:", dict(sorted(counts.items())), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
