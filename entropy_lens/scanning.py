"""scan(config) -> ScanResult: load -> sample chunks -> capture -> save. The one place that spans
the pipeline; the CLI and notebooks both call it.

Everything the user can get wrong (paths, flags, scales, lengths, an existing --out) is checked
before any file is written, so bad input never leaves a results file behind. Long scans write a
`<out>.partial.npz` (float64 running sums, the samples done, the scan's identity) every
`checkpoint_every_s` seconds and on Ctrl-C; `resume=True` continues from it and, because the sums
are stored exactly and added in the same order, ends with the same arrays as an uninterrupted scan.
"""

from __future__ import annotations

import contextlib
import json
import math
import signal
import subprocess
import threading
import time
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import torch

from entropy_lens import __version__
from entropy_lens.capture import EntropyRecorder, ScaleSession, forward_hidden, next_token_nll
from entropy_lens.capture.fused import FUSED_MODES
from entropy_lens.data import token_chunks
from entropy_lens.distributed import all_reduce_sum, process_group, world
from entropy_lens.errors import EntropyLensError
from entropy_lens.kernels import resolve_impl
from entropy_lens.models import (
    load_head_scales_file,
    load_model,
    resolve_device,
    resolve_dtype,
    validate_head_scales,
)
from entropy_lens.results import SCHEMA_VERSION, ScanResult, atomic_savez

# --entropy value -> meta `entropy_reduction` and the heads axis of the stored entropy arrays.
ENTROPY_REDUCTIONS = {"heads": "per_head", "mean": "mean_heads", "none": "not_captured"}


@dataclass(frozen=True)
class ScanConfig:
    """Everything that determines a scan's numbers (saved in the results' meta)."""

    model: str
    length: int
    samples: int = 8
    data: str = "austen"
    nope: bool | None = None  # None: as the checkpoint declares; True forces rotary off
    rope_scaling: str | None = None  # "dynamic:2" etc.: the checkpoint's RoPE with that scaling
    scale: float | None = None  # uniform multiplier s, λ = s/√d
    head_scales: str | None = None  # file with (layers, heads) multipliers
    dtype: str = "auto"  # float32 on CPU, bfloat16 on CUDA
    device: str = "auto"
    batch_size: int = 1
    seed: int = 0
    backend: str = "auto"
    fused: str = "auto"  # triton backend: output + entropy in one pass (on/off/auto = the faster, timed)
    train_len: int | None = None  # overrides the checkpoint's declared training length
    trust_remote_code: bool = False
    entropy: str = "heads"  # "heads": per head; "mean": mean over each layer's heads; "none": loss only

    def to_dict(self) -> dict:
        return asdict(self)

    def check(self) -> None:
        if self.length < 2:
            raise EntropyLensError(f"--len must be at least 2 (got {self.length})")
        if self.samples < 1:
            raise EntropyLensError(f"--samples must be at least 1 (got {self.samples})")
        if self.entropy not in ENTROPY_REDUCTIONS:
            raise EntropyLensError(f"--entropy {self.entropy!r} is not known; use heads, mean or none")
        if self.batch_size < 1:
            raise EntropyLensError(f"--batch-size must be at least 1 (got {self.batch_size})")
        if self.scale is not None and self.head_scales is not None:
            raise EntropyLensError("--scale and --head-scales both given; pass one of them")
        if self.scale is not None and not (math.isfinite(self.scale) and self.scale > 0):
            raise EntropyLensError(f"--scale must be a positive finite multiplier of 1/sqrt(d) (got {self.scale})")
        if self.head_scales is not None and not Path(self.head_scales).is_file():
            raise EntropyLensError(f"--head-scales file {self.head_scales} does not exist; pass a .safetensors, "
                                   ".npy or .json file of shape [layers, heads]")
        if self.train_len is not None and self.train_len < 1:
            raise EntropyLensError(f"--train-len must be positive (got {self.train_len})")
        resolve_impl(self.backend)  # unknown backend names fail here, before loading anything
        if self.fused not in FUSED_MODES:
            raise EntropyLensError(f"--fused {self.fused!r} is not known; use one of {', '.join(FUSED_MODES)}")


def default_out(config: ScanConfig) -> Path:
    name = Path(config.model.rstrip("/")).name.removesuffix(".gguf")
    tag = f"-s{config.scale:g}" if config.scale is not None else ("-hs" if config.head_scales else "")
    return Path("results") / f"{name}-len{config.length}{tag}.npz"


def partial_path(out: Path) -> Path:
    return out.with_name(out.name + ".partial.npz")


def scan(config: ScanConfig, *, out: str | Path | None = None, resume: bool = False, force: bool = False,
         progress: bool = True, checkpoint_every_s: float = 60.0) -> ScanResult:
    """Run the scan; write `out` (atomically) when given. See the module docstring."""
    started = time.perf_counter()
    config.check()
    out = Path(out) if out is not None else None
    if out is not None and out.exists():
        if resume:
            done = ScanResult.load(out)
            if done.meta.get("scan_config") == config.to_dict():
                return done
            raise EntropyLensError(f"{out} holds a different scan; pass --force to overwrite it or another --out")
        if not force:
            raise EntropyLensError(f"{out} already exists; pass --resume to reuse it, --force to overwrite it, "
                                   "or another --out")
    w = world()
    if w.size > 1 and resume:
        raise EntropyLensError("--resume is not supported under torchrun; rerun the whole scan, or resume it "
                               "in one process without torchrun")  # fmt: skip
    device = resolve_device(config.device)
    if w.size > 1 and device.type == "cuda":
        device = torch.device("cuda", w.local_rank)
    dtype = resolve_dtype(config.dtype if config.dtype != "auto" else
                          ("bfloat16" if device.type == "cuda" else "float32"))
    lm = load_model(config.model, dtype=str(dtype).removeprefix("torch."), device=str(device),
                    nope=config.nope, rope_scaling=config.rope_scaling,
                    trust_remote_code=config.trust_remote_code)
    multipliers, scale_source = _multipliers(config, lm)
    chunks = token_chunks(lm.tokenizer, config.data, length=config.length, samples=config.samples,
                          seed=config.seed)
    vocab = lm.model.get_input_embeddings().num_embeddings
    if int(chunks.ids.max()) >= vocab:
        raise EntropyLensError(f"--data holds token id {int(chunks.ids.max())} but the model's vocabulary has "
                               f"{vocab}; tokenise with this model's tokenizer")
    impl = resolve_impl(config.backend, device)
    identity = {"scan_config": config.to_dict(), "config_hash": lm.config_hash, "chunks": chunks.indices}
    acc = ScanSums(lm.n_layers, lm.n_heads, config.length)
    if resume and out is not None and partial_path(out).exists():
        acc.restore(partial_path(out), identity)

    def checkpoint() -> None:
        acc.save(partial_path(out), identity, time.perf_counter() - started)

    with process_group(w, device):  # ranks write no checkpoints: --resume is single-process
        _run(config, lm, chunks, multipliers, impl, device, acc, w, progress,
             checkpoint if out is not None and w.size == 1 else None, checkpoint_every_s)  # fmt: skip
    meta = _meta(config, lm, chunks, multipliers, scale_source, impl, str(device), str(dtype))
    meta["world_size"] = w.size
    meta["attention_path"] = "+".join(sorted(acc.paths)) or "separate"  # fused / separate / both
    meta["wall_time_s"] = round(acc.prior_wall_s + time.perf_counter() - started, 3)
    result = acc.result(meta, meta["entropy_reduction"])
    if out is not None and w.main:
        result.save(out)
        partial_path(out).unlink(missing_ok=True)
    return result


def _run(config, lm, chunks, multipliers, impl, device, acc, w, progress, checkpoint, checkpoint_every_s):
    """The sample loop: this rank's samples in batches, then (under torchrun) the sums of all ranks.
    `checkpoint()` (None: never) runs every `checkpoint_every_s` and on Ctrl-C."""
    from entropy_lens.progress import progress_bar

    todo = w.samples(acc.samples, config.samples)
    bar = progress_bar(total=len(todo) * config.length, unit="tok", unit_scale=True, enabled=progress and w.main,
                       desc=f"scan {config.model}")  # fmt: skip
    last_ckpt = time.perf_counter()
    try:
        for b in range(0, len(todo), config.batch_size):
            ids = torch.from_numpy(chunks.ids[todo[b : b + config.batch_size]]).to(device)
            session = ScaleSession if config.entropy == "none" else EntropyRecorder
            with session(lm.model, scales=multipliers, impl=impl, fused=config.fused) as rec:
                hidden = forward_hidden(lm.model, ids[:, :-1])
            acc.paths |= rec.session.paths
            nll = next_token_nll(lm.model, hidden, ids[:, 1:])
            acc.add(rec, nll)
            bar.update(ids.shape[0] * config.length)
            if checkpoint and time.perf_counter() - last_ckpt >= checkpoint_every_s:
                checkpoint()
                last_ckpt = time.perf_counter()
    except KeyboardInterrupt:
        if checkpoint and acc.samples:
            checkpoint()
            bar.write(f"interrupted after {acc.samples} samples; rerun with --resume to finish")
        raise
    finally:
        bar.close()
    acc.s = all_reduce_sum(acc.s, w)


class ScanSums:
    """Float64 running sums over samples, updated in place: at 16K tokens a TinyLlama's entropy sums
    are 2 × 92 MB, and fresh arrays per batch took the host 0.7 s of a 2-core machine per batch,
    against a GPU forward of the order of 0.1 s (benchmarks/host_sums.py). `add` defers Ctrl-C
    until it is done, so a checkpoint never sees sums and counts out of step."""

    def __init__(self, n_layers: int, n_heads: int, length: int):
        self.s = {
            "entropy": np.zeros((n_layers, n_heads, length)), "entropy_sq": np.zeros((n_layers, n_heads, length)),
            "loss": np.zeros(length), "loss_sq": np.zeros(length), "count": np.zeros(length, dtype=np.int64),
            "samples": np.array(0),
        }  # fmt: skip
        self.prior_wall_s = 0.0
        self.paths: set[str] = set()  # how the layers computed this run (not checkpointed)

    @property
    def samples(self) -> int:
        return int(self.s["samples"])

    def add(self, rec: ScaleSession, nll: torch.Tensor) -> None:
        """One batch: the recorder's entropies (drained) and the (B, T) loss."""
        loss = nll.double().cpu().numpy()  # (B, T): every position of a packed chunk is a real token
        s = self.s
        with _interrupts_deferred():
            if isinstance(rec, EntropyRecorder):
                rec.drain_into(*(torch.from_numpy(s[k]) for k in ("entropy", "entropy_sq", "count")))
            else:  # loss only
                s["count"] += loss.shape[0]
            s["loss"] += loss.sum(0)
            s["loss_sq"] += (loss**2).sum(0)
            s["samples"] = np.array(int(s["samples"]) + loss.shape[0])

    def save(self, path: Path, identity: dict, wall_s: float) -> None:
        s = self.s
        atomic_savez(path, identity=np.array(json.dumps(identity, sort_keys=True)),
                     wall_s=np.array(self.prior_wall_s + wall_s), **s)

    def restore(self, path: Path, identity: dict) -> None:
        with np.load(path, allow_pickle=False) as z:
            if json.loads(str(z["identity"])) != json.loads(json.dumps(identity)):
                raise EntropyLensError(f"{path} belongs to a different scan (other flags, model or data); "
                                       "delete it or rerun with the same flags to resume")
            self.s = {k: z[k] for k in self.s}
            self.prior_wall_s = float(z["wall_s"])

    def result(self, meta: dict, reduction: str) -> ScanResult:
        """Means over samples; `mean_heads` then averages entropy (and its mean square) over each layer's
        heads, `not_captured` stores them with zero heads."""
        s, n = self.s, self.s["count"]
        with np.errstate(invalid="ignore", divide="ignore"):
            mean = {k: (s[k] / n).astype(np.float32) for k in ("entropy", "entropy_sq", "loss", "loss_sq")}
        for k in ("entropy", "entropy_sq"):
            if reduction == "mean_heads":
                mean[k] = mean[k].mean(axis=1, keepdims=True)
            elif reduction == "not_captured":
                mean[k] = mean[k][:, :0]
        return ScanResult(**mean, count=n.copy(), meta=meta)


@contextlib.contextmanager
def _interrupts_deferred():
    """Ctrl-C (SIGINT) inside the block is raised when the block ends (main thread only: elsewhere
    signals cannot be handled, and none arrive)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: caught.append((signum, frame)))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if caught and callable(previous):
        previous(*caught[0])  # Python's own handler raises KeyboardInterrupt here
    elif caught and previous == signal.SIG_DFL:
        raise KeyboardInterrupt


def _multipliers(config: ScanConfig, lm):
    """(what the recorder applies, where it came from). None = the model as trained."""
    if config.scale is not None:
        return float(config.scale), "uniform"
    if config.head_scales is not None:
        arr = load_head_scales_file(config.head_scales, lm.n_layers, lm.n_heads)
        return arr, str(Path(config.head_scales).resolve())
    if lm.head_scales is not None:
        return validate_head_scales(lm.head_scales, lm.n_layers, lm.n_heads, source=lm.source), "checkpoint"
    return None, "none"


def _meta(config, lm, chunks, multipliers, scale_source, impl, device, dtype) -> dict:
    import transformers

    if multipliers is None or isinstance(multipliers, float):
        scales = np.full((lm.n_layers, lm.n_heads), 1.0 if multipliers is None else multipliers)
    else:
        scales = np.asarray(multipliers, dtype=np.float64)
    return {
        "schema_version": SCHEMA_VERSION, "entropy_lens_version": __version__, "git_hash": _git_hash(),
        "model": config.model, "model_source": lm.source, "config_hash": lm.config_hash, "nope": lm.nope,
        "n_layers": lm.n_layers, "n_heads": lm.n_heads, "n_kv_heads": lm.n_kv_heads, "head_dim": lm.head_dim,
        "scales": scales.tolist(), "scale_source": scale_source,
        "train_len": config.train_len if config.train_len is not None else lm.train_len,
        "data": config.data, "data_description": chunks.description, "separator_id": chunks.separator_id,
        "chunk_indices": [int(i) for i in chunks.indices], "seed": config.seed, "samples": config.samples,
        "len": config.length, "batch_size": config.batch_size, "dtype": dtype.removeprefix("torch."),
        "device": device, "backend": impl, "entropy_units": "nats", "loss_units": "nats",
        "entropy_reduction": ENTROPY_REDUCTIONS[config.entropy], "torch_version": torch.__version__,
        "transformers_version": transformers.__version__,
        "created_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"), "scan_config": config.to_dict(),
    }  # fmt: skip


def _git_hash() -> str | None:
    """The package's git commit (with '+dirty' for local changes), or None outside a checkout."""
    here = Path(__file__).resolve().parent
    try:
        head = subprocess.run(["git", "-C", str(here), "rev-parse", "HEAD"], capture_output=True, text=True,
                              timeout=5, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(here), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=5, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return head + ("+dirty" if dirty else "")
