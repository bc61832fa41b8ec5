"""Survey: every causal-LM architecture of the installed transformers, EXACT or REFUSED?

    python tools/survey_architectures.py --out survey/             # all of MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
    python tools/survey_architectures.py --out survey/ llama gemma2 # some
    python tools/survey_architectures.py llama                      # into a new temporary folder, printed

Each model type runs in a child process of its own (address space capped, timeout), which builds a
tiny random model (tools/survey_configs.py: tests/architectures.py's COMMON, its per-architecture
overrides where it has them, and a few generic shrinks), and classifies it:

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

from survey_configs import build_tiny

ROOT = Path(__file__).resolve().parent.parent
TESTS = ROOT / "tests"  # architectures.py: the tested configs, the eager reference
MEM_BYTES = int(os.environ.get("SURVEY_MEM_GB", "6")) * 1024**3
TIMEOUT = int(os.environ.get("SURVEY_TIMEOUT", "60"))
PADDINGS = ("none", "left", "right")
LOGIT_TOL, ENT_TOL = 1e-3, 1e-4


# ----------------------------------------------------------------------------------------- child
def _tail(e: BaseException, n: int = 16) -> str:
    lines = traceback.format_exception(type(e), e, e.__traceback__)
    text = "".join(lines).rstrip().splitlines()
    return "\n".join(text[-n:])


def child(model_type: str) -> dict:
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (MEM_BYTES, MEM_BYTES))
    sys.path.insert(0, str(TESTS))  # the builders: tests/architectures.py
    import numpy as np
    import torch

    torch.set_num_threads(1)
    import architectures as ta
    import transformers

    transformers.logging.set_verbosity_error()
    from entropy_lens.capture import EntropyRecorder
    from entropy_lens.errors import EntropyLensError

    res: dict = {"model_type": model_type}
    model, attempt, n_params, errors = build_tiny(model_type)
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
