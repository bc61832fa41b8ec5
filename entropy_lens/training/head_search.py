"""search_head_scales: the paper's per-head λ(h) search (§3.2, Appendix A), every weight frozen.

One trainable multiplier m[l, h] per (layer, head), λ(h) = m/√d, applied to the queries inside the
model's own attention (capture.ScaleSession), on the checkpoint as its loading flags give it (--nope,
--rope-scaling, ...) and under a --scale-schedule when one is given (the λ(h) are then learnt on top of
its m(i)). Causal-LM loss on `length`-token windows of `data`
(drawn by `numpy.random.default_rng([seed, step])`, so a resumed run sees the same windows); AdamW
β = (0.9, 0.95), no weight decay, linear warm-up over the first 10% of steps, then cosine decay to
0.1 × LR; after every step m is clamped to ≥ `lower_bound` (the focus constraint λ(h) ≥ 1/√d when
1; 0 is the paper's "w/o focus constraint" ablation). `batch` windows per step are processed
`micro_batch` at a time (gradient accumulation); `checkpointing` turns on the model's activation
checkpointing and the loss is computed `chunk` positions at a time under `torch.utils.checkpoint`,
so neither the activations of all layers nor the T × vocab logits are held at once.

Output (`save_head_scales`): a `.safetensors` with one `model.layers.{l}.self_attn.scale_param`
tensor per layer (the layout of the released TinyLlama-NoPE-HeadScale8k, readable by
`entropy-lens scan --head-scales F`) and, beside it, `F.json` with the [layers, heads] table, the
search settings and the loss curve. With `monitor` (--monitor STATS): the per-head attention statistics of
every `monitor_every`-th step's forwards (step = the search's optimiser step) in `<out stem>.history.npz`
(monitor/history.py's file). The search's own ScaleSession records them (monitor.AttentionMonitor's
`recording`): the monitor's installation would replace the session that applies the trainable λ(h). It
records through sdpa's own output (`fused="off"`), so the scales are bit-identical with and without it.

Resuming: with `out`, Ctrl-C or SIGTERM (and every tenth of the steps) saves the last whole step in
`<out>.partial/`; a rerun continues it, bit-identical to an uninterrupted search (head_search_state.py).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from entropy_lens.capture import ScaleSession
from entropy_lens.data import packed_stream, random_windows
from entropy_lens.errors import EntropyLensError, first_line
from entropy_lens.models import resolve_device, resolve_dtype
from entropy_lens.models.scales import SCALE_SUFFIX
from entropy_lens.monitor import AttentionMonitor, History
from entropy_lens.monitor.settings import MonitorSettings, check_monitor, session_stats
from entropy_lens.results import atomic_write_text, check_regular_target
from entropy_lens.runs.configs import HeadSearchConfig
from entropy_lens.runs.output import check_file_target
from entropy_lens.runs.scan import load_variant, variant_schedule
from entropy_lens.training.head_search_state import SearchCheckpoint, checkpoint_folder
from entropy_lens.training.resumable import checkpoint_on_interrupt, joined

__all__ = [
    "HeadSearchConfig",
    "HeadSearchResult",
    "check_out",
    "history_path",
    "read_head_scales",
    "save_head_scales",
    "search_head_scales",
]


@dataclass
class HeadSearchResult:
    scales: np.ndarray  # (layers, heads) multipliers of 1/√d
    log: list[dict]  # per step: step, loss (nats, mean over the batch's tokens), lr
    config: HeadSearchConfig
    wall_s: float | None = None  # how long the search took (None: not recorded)
    history: History | None = None  # --monitor's attention history (None: not monitored)


def lr_at(config: HeadSearchConfig, step: int) -> float:
    warmup = max(1, round(0.1 * config.steps))
    if step < warmup:
        return config.lr * (step + 1) / warmup
    progress = (step - warmup) / max(1, config.steps - warmup)
    return config.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, progress))))


def mean_nll(model, hidden: torch.Tensor, targets: torch.Tensor, chunk: int) -> torch.Tensor:
    """Mean next-token NLL (nats) with gradients, `chunk` positions of logits at a time."""
    from torch.utils.checkpoint import checkpoint

    head = model.get_output_embeddings()

    def part(h, t):
        return torch.nn.functional.cross_entropy(head(h).float().flatten(0, 1), t.flatten(), reduction="sum")

    total = sum(
        checkpoint(part, hidden[:, t0 : t0 + chunk], targets[:, t0 : t0 + chunk], use_reentrant=False)
        for t0 in range(0, targets.shape[1], chunk)
    )
    return total / targets.numel()


def search_head_scales(
    config: HeadSearchConfig,
    *,
    progress: bool = True,
    monitor: MonitorSettings | None = None,
    out: str | Path | None = None,
    force: bool = False,
    checkpoint_every: int | None = None,
) -> HeadSearchResult:
    """Run the search; see the module docstring. With `out` (where the caller saves the result), an
    interrupted search's `<out>.partial/` is continued (`force`: discarded) and a new one is kept there
    on Ctrl-C or SIGTERM and every `checkpoint_every` steps (default a tenth of the steps); remove it with
    `discard_checkpoint(out)` once the outputs are written."""
    from entropy_lens.progress import progress_bar

    config.check()
    stats = check_monitor(monitor)
    ckpt = SearchCheckpoint(out, config, force=force, progress=progress, every=checkpoint_every)
    device = resolve_device(config.device)
    lm = load_variant(config, device, resolve_dtype(config.dtype, device))
    schedule = variant_schedule(config, lm)
    stream, _ = packed_stream(lm.tokenizer, config.data)
    if len(stream) <= config.length + 1:
        raise EntropyLensError(
            f"--data {config.data!r} has {len(stream):,} tokens, fewer than --len + 1; pass more data"
        )
    model = lm.model
    model.requires_grad_(False)
    if config.checkpointing:
        enable = getattr(model, "activation_checkpointing_enable", None)  # transformers >= 5.2x
        if enable is not None:
            enable(activation_checkpointing_kwargs={"use_reentrant": False})
        else:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model.train()  # HF checkpoints only in training mode; Llama has no dropout at inference settings
    scales = torch.nn.Parameter(torch.full((lm.n_layers, lm.n_heads), float(config.init), device=device))
    opt = torch.optim.AdamW([scales], lr=config.lr, betas=(0.9, 0.95), weight_decay=0.0)
    start, log, prior_s = ckpt.restore(scales, opt)
    mon = AttentionMonitor(model, stats=stats, every=monitor.every) if stats else None
    prior = ckpt.prior_history(mon)
    # sdpa's own output, bit for bit
    recording = {"stats": session_stats(mon.stats), "fused": "off"} if mon else {}
    desc = f"search-heads {config.model}, threads {torch.get_num_threads()}"
    bar = progress_bar(total=config.steps, initial=start, enabled=progress, desc=desc)

    def save(at: int) -> None:
        history = joined(prior, mon.history) if mon else None
        ckpt.save(at, scales=scales, optimizer=opt, log=log, wall_s=elapsed, history=history)

    t0 = time.perf_counter()
    # `done`: the steps whose update (scales, optimiser, log) is whole; `updating` is True from the
    # scales' change until `done` says so, so an interrupt there is not saved (the last checkpoint stands)
    done, updating, elapsed = start, False, prior_s
    with checkpoint_on_interrupt(lambda: None if updating else done, save):
        for step in range(start, config.steps):
            for group in opt.param_groups:
                group["lr"] = lr_at(config, step)
            ids = torch.from_numpy(random_windows(stream, config.length, config.batch, config.seed, step))
            ids = ids.to(device)
            opt.zero_grad(set_to_none=True)
            total = 0.0
            if mon is not None:
                mon.step = step + 1
            with ScaleSession(model, scales=scales, schedule=schedule, **recording) as scaling:
                for i in range(0, config.batch, config.micro_batch):
                    part = ids[i : i + config.micro_batch]
                    with mon.recording(scaling) if mon else contextlib.nullcontext():
                        hidden = model.get_decoder()(
                            input_ids=part[:, :-1], use_cache=False
                        ).last_hidden_state
                    loss = mean_nll(model, hidden, part[:, 1:], config.chunk) * (part.shape[0] / config.batch)
                    loss.backward()
                    total += loss.item()
            updating = True
            opt.step()
            with torch.no_grad():  # a 0 bound keeps the scale positive: λ(h) = 0 is no scale, as --scale 0
                scales.clamp_(min=max(config.lower_bound, torch.finfo(torch.float32).tiny))
            elapsed = prior_s + time.perf_counter() - t0
            log.append({"step": step + 1, "loss": total, "lr": lr_at(config, step)})
            done = step + 1
            updating = False  # an interrupt between these two lines is not saved: still exact
            rate = (step + 1 - start) * config.batch * config.length / max(elapsed - prior_s, 1e-9)
            bar.set_postfix(loss=f"{total:.3f}", tok_s=f"{rate:.0f}", refresh=False)  # shown by update
            bar.update()
            if ckpt.due(step + 1):
                save(step + 1)
    bar.close()
    model.eval()
    found = scales.detach().double().cpu().numpy()
    history = joined(prior, mon.history) if mon else None
    if history is not None:  # the checkpoint as given ("tiny-nope"), not the folder on this machine it named
        history.meta = {**history.meta, "model": config.model}
    return HeadSearchResult(found, log, config, prior_s + time.perf_counter() - t0, history)


def check_out(out: str | Path, *, force: bool | None = None) -> Path:
    """--out must name a .safetensors file that can be written (checked before any work); with `force`
    given (the CLI's --force), a finished search there is not replaced without it, as a scan's --out."""
    out = Path(out)
    if out.suffix != ".safetensors":
        raise EntropyLensError(f"--out {out} must end in .safetensors (the table goes beside it as .json)")
    check_regular_target(checkpoint_folder(out), folder=True)
    out = check_file_target(out, example="scales.safetensors")
    if force is False and out.exists() and not checkpoint_folder(out).exists():
        raise EntropyLensError(
            f"--out {out} already holds a finished search; pass --force to search again and replace it, or "
            "another --out"
        )
    return out


def history_path(out: str | Path) -> Path:
    """Where --monitor's history goes: `<out stem>.history.npz` beside `out`."""
    out = Path(out)
    return out.with_name(out.stem + ".history.npz")


def read_head_scales(path: str | Path) -> tuple[dict, dict]:
    """(tensors, record) of a `save_head_scales` output: its .safetensors and the .json beside it;
    an unreadable or missing one is an EntropyLensError."""
    from safetensors.numpy import load_file

    path = Path(path)
    try:
        tensors = load_file(str(path))
        record = json.loads(path.with_name(path.name + ".json").read_text())
    except Exception as err:  # noqa: BLE001 - truncated, not safetensors, no JSON: unreadable
        raise EntropyLensError(
            f"{path} (or its .json) is not a readable head-scales output ({first_line(err)}); run the "
            "search again"
        ) from None
    return tensors, record


def save_head_scales(result: HeadSearchResult, out: str | Path) -> Path:
    """`out` (.safetensors, one scale_param per layer) and `out` + '.json' (table, settings, loss)."""
    from safetensors.numpy import save_file

    out = check_out(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tensors = {
        f"model.layers.{i}.{SCALE_SUFFIX}": row.astype(np.float32) for i, row in enumerate(result.scales)
    }
    tmp = out.with_name(f".{out.name}.tmp")
    # one metadata key: safetensors writes metadata in hash-map order, and a second key would make the
    # bytes (which name the scans made with this file in the figures' cache) differ between runs
    save_file(tensors, str(tmp), metadata={"format": "pt"})
    tmp.replace(out)
    record = {
        "scales": result.scales.tolist(),
        "config": dataclasses.asdict(result.config),
        "log": result.log,
        "wall_s": result.wall_s,
    }
    atomic_write_text(out.with_name(out.name + ".json"), json.dumps(record, indent=1) + "\n")
    if result.history is not None:
        result.history.save(history_path(out))  # atomically (results.files)
    else:  # an earlier search's history would describe the scales just replaced
        history_path(out).unlink(missing_ok=True)
    return out
