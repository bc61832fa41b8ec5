"""scan(config) -> ScanResult: a short pipeline of named steps over one run object.

    config.check()                    every flag, before anything is loaded
    Output.finished()                 --out/--resume/--force (runs/output.py): maybe nothing to do
    Run.start(config)                 world -> device/dtype -> model -> scales -> data -> backend
    Checkpointer(...).restore()       a rerun continues an interrupted scan (runs/checkpoint.py)
    _loop(batches, sums, checkpoint)  batches -> capture (EntropyRecorder) -> loss -> ScanSums, by a
                                      local or a sharded runner (runs/batches.py)
    batches.reduce(sums)              torchrun: every rank's samples
    sums.result(run.meta(...))        means + provenance -> checkpoint.write (atomic)

The CLI and notebooks both call `scan`. Everything the user can get wrong (paths, flags, scales,
lengths, an existing --out) is checked before any file is written, so bad input never leaves a
results file behind; one run at a time writes an `out` (runs/lock.py). Long scans write a
`<out>.partial.npz` every `checkpoint_every_s` seconds and on Ctrl-C; rerunning the same scan continues
from it (`force=True` starts over) and ends with the same arrays as an uninterrupted scan, bit for bit:
the checkpoint also holds what the scan decided at run time (the paths `fused="auto"` chose), which
the resumed process reuses. If `out` cannot be written at the end, the finished scan is kept in its
checkpoint (rerunning writes it) or saved elsewhere, and the error says where (runs/output.py).
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from entropy_lens.capture import EntropyRecorder, ScaleSession, Schedule, check_logits
from entropy_lens.capture.fused import PathChoices
from entropy_lens.capture.shards import SequenceShards, ShardedSequence
from entropy_lens.data import Chunks, holds_token_ids, token_chunks
from entropy_lens.errors import EntropyLensError
from entropy_lens.flags import Fused, Measure
from entropy_lens.kernels import fold_status, native_available, native_status, resolve_backend
from entropy_lens.kernels.backends import backend_of, built_first
from entropy_lens.models import LoadedModel, resolve_dtype
from entropy_lens.progress import layer_progress, progress_bar
from entropy_lens.results import ScanResult
from entropy_lens.runs.batches import LocalBatches, ShardedBatches, scan_batch
from entropy_lens.runs.checkpoint import Checkpointer
from entropy_lens.runs.configs import ScanConfig
from entropy_lens.runs.context_parallel import (
    check_context_parallel,
    check_shardable,
    shard_groups,
    shards_of,
)
from entropy_lens.runs.distributed import RankGroups, World, agree, process_group, rank_device, world
from entropy_lens.runs.lock import OutputLock
from entropy_lens.runs.memory import attention_modules, large_blocks_returned, release_free_heap
from entropy_lens.runs.output import Output, comparable_scan, default_out, partial_path, scan_difference
from entropy_lens.runs.provenance import model_facts, provenance, recorded_settings
from entropy_lens.runs.sums import ScanSums
from entropy_lens.runs.variants import attention_scales, load_variant, variant_schedule
from entropy_lens.statistics import ENTROPY, SINK_MASS

__all__ = [
    "Run",
    "ScanConfig",
    "attention_scales",
    "default_out",
    "load_variant",
    "partial_path",
    "scan",
    "scan_batch",
    "variant_schedule",
]


def scan(
    config: ScanConfig,
    *,
    out: str | Path | None = None,
    resume: bool = False,
    force: bool = False,
    progress: bool = True,
    checkpoint_every_s: float = 60.0,
    choices: PathChoices | None = None,
) -> ScanResult:
    """Run the scan; write `out` (atomically) when given. See the module docstring. `choices`: the
    state `fused="auto"` decides in (default: a fresh one; a checkpoint's when resuming).

    Args:
        config: the scan's settings (every number of the result follows from them).
        out: the results file to write (.npz), or None to write nothing.
        resume: continue from `<out>.partial.npz`, or return the finished `out` when it holds this scan.
        force: overwrite an existing `out`; an interrupted scan starts over rather than continuing.
        progress: show a progress bar.
        checkpoint_every_s: seconds between checkpoints of a long scan (`<out>.partial.npz`).
        choices: a capture.fused.PathChoices, the state --fused auto decides in; None: a fresh one.

    Returns:
        ScanResult: the means by layer, head and position, with the meta.

    Raises:
        EntropyLensError: a flag, path, length or scale that cannot run, or an existing `out` without
            resume or force; checked before anything is written.
    """
    started = time.perf_counter()
    config.check()
    output = Output.of(out, resume=resume, force=force)
    main = world().main
    with OutputLock(output.path) if output.path is not None and main else contextlib.nullcontext():
        done = output.finished(config.to_dict())
        if done is not None:
            return done
        run = Run.start(config, resume=resume, choices=choices or PathChoices())
        recording = config.entropy != "none"  # the statistics asked for: summed on every rank from the start
        stats = tuple(name for name in run.measure.stats if name != SINK_MASS.name) if recording else ()
        stats += run.measure.slices.arrays if recording else ()  # <statistic>@<slot>: Slices.arrays
        keys = run.measure.key_stats if recording else ()
        sums = ScanSums(
            run.lm.n_layers, run.lm.n_heads, config.length, entropy=recording, stats=stats, key_stats=keys
        )
        checkpoint = Checkpointer(run, sums, output, started=started, every_s=checkpoint_every_s)
        checkpoint.restore()
        batches = ShardedBatches(run) if config.context_parallel else LocalBatches(run)
        with process_group(run.world, run.device):
            # under torchrun every rank was started with the same settings, else none scans
            agree(comparable_scan(checkpoint.identity), run.world, difference=scan_difference)
            with batches.opened():
                _loop(batches, sums, checkpoint, progress)
            batches.reduce(sums)
        result = sums.result(run.meta(sums, started, output.path), config.entropy)
        if main and output.path is not None:
            checkpoint.write(result)
    return result


@dataclass(kw_only=True)
class Run:
    """A scan's resolved inputs: what `config` became on this machine."""

    config: ScanConfig
    world: World
    device: torch.device
    dtype: torch.dtype
    lm: LoadedModel
    scales: float | np.ndarray | None  # the multipliers s the capture applies; None = the model as trained
    scale_source: str  # "uniform", "checkpoint", "none" or the --head-scales file
    chunks: Chunks
    measure: (
        Measure  # what to measure: --stats and its parameters, --backend (checked for the device), --fused
    )
    groups: RankGroups  # torchrun's ranks in groups that split the samples (one rank each without sharding)
    schedule: Schedule | None = None  # --scale-schedule with the model's training length
    choices: PathChoices | None = None  # what fused "auto" measured and kept (capture/fused.py)

    @classmethod
    def start(cls, config: ScanConfig, *, resume: bool = False, choices: PathChoices | None = None) -> Run:
        w = world()
        if w.size > 1 and resume:
            raise EntropyLensError(
                "--resume is not supported under torchrun; rerun the whole scan, or resume it "
                "in one process without torchrun"
            )
        check_context_parallel(config, w)
        device = rank_device(config.device, w)
        dtype = resolve_dtype(config.dtype, device)
        # token ids (.npy) need no tokenizer: a model folder without one scans them
        lm = load_variant(config, device, dtype, tokenizer=not holds_token_ids(config.data))
        if config.context_parallel:
            check_shardable(lm.model)
        scales, scale_source = attention_scales(config, lm)
        chunks = token_chunks(
            lm.tokenizer,
            config.data,
            length=config.length,
            samples=config.samples,
            seed=config.seed,
            stride=config.stride,
        )
        vocab = lm.model.get_input_embeddings().num_embeddings
        if int(chunks.ids.max()) >= vocab:
            raise EntropyLensError(
                f"--data holds token id {int(chunks.ids.max())} but the model's vocabulary has "
                f"{vocab}; tokenise with this model's tokenizer"
            )
        check_logits(lm.model, torch.from_numpy(chunks.ids[:1, : min(32, config.length)]).to(device))
        measure = config.measure
        resolve_backend(measure.backend, device)  # refused here if this device cannot run it; "auto" stays
        build_native_first(measure, device)  # a step of its own, before the bar: never inside its rate
        schedule = variant_schedule(config, lm)
        groups = shard_groups(config, w)
        if device.type == "cpu":
            release_free_heap()  # what loading and tokenising freed
            large_blocks_returned()  # the batches' tensors: mapped and unmapped, not kept in the heap
        return cls(
            config=config,
            world=w,
            device=device,
            dtype=dtype,
            lm=lm,
            scales=scales,
            scale_source=scale_source,
            chunks=chunks,
            measure=measure,
            groups=groups,
            schedule=schedule,
            choices=choices,
        )

    @property
    def shards(self) -> SequenceShards | None:
        """--context-parallel: this rank's shard of its group's sequences (None without it)."""
        return shards_of(self.groups, self.config.length) if self.config.context_parallel else None

    def capture(self, context: ShardedSequence | None = None) -> ScaleSession:
        """The context manager a batch runs in: scales only (--record none) or scales + recording; a
        sharded run's `context`: this rank's shard of the sequence and its group's exchange."""
        kind = ScaleSession if self.config.entropy == "none" else EntropyRecorder
        measure = self.measure if kind is EntropyRecorder else self.measure.replace(key_stats=())
        return kind(
            self.lm.model,
            scales=self.scales,
            measure=measure,
            schedule=self.schedule,
            choices=self.choices,
            context=context,
        )

    def meta(self, sums: ScanSums, started: float, out: Path | None = None) -> dict:
        """The results' meta (entropy_lens.results documents every key), for the file `out` (None: none
        written): the checkpoint and a --head-scales file named from it (`model_facts`,
        `recorded_settings`), so a file moved or committed with them names no machine's folders."""
        c, lm = self.config, self.lm
        scan_config = recorded_settings(c.to_dict(), out)
        # a --head-scales file as scan_config names it
        named = out is not None and c.scale is None and c.head_scales is not None
        scale_source = scan_config["head_scales"] if named else self.scale_source
        m = self.scales
        uniform = m is None or isinstance(m, float)
        scales = np.full((lm.n_layers, lm.n_heads), 1.0 if m is None else m) if uniform else m
        return {
            **provenance(),
            "model": c.model,
            **model_facts(lm, out),
            "scales": np.asarray(scales, dtype=np.float64).tolist(),
            "scale_source": scale_source,
            "train_len": c.train_len if c.train_len is not None else lm.train_len,
            "data": c.data,
            "data_description": self.chunks.description,
            "separator_id": self.chunks.separator_id,
            "chunk_indices": [int(i) for i in self.chunks.indices],
            "seed": c.seed,
            "samples": c.samples,
            "length": c.length,
            "batch_size": c.batch_size,
            "dtype": str(self.dtype).removeprefix("torch."),
            "device": str(self.device),
            "threads": torch.get_num_threads(),  # CPU threads (--threads / OMP_NUM_THREADS)
            "backend": "+".join(sorted(sums.backends)) or "none",  # the entropy kernels that ran
            **(
                {"fold": fold_status()}
                if any(backend_of(name).folds for name in sums.backends) and self.device.type == "cpu"
                else {}
            ),
            # whether the CPU fused pass could use the native kernel, and why not
            **(
                {"native": native_status()}
                if self.device.type == "cpu" and self.measure.fused is not Fused.OFF
                else {}
            ),
            "attention_path": "+".join(sorted(sums.paths)) or "none",  # capture/paths.py's names
            **(
                {"fused_choices": dict(self.choices.chosen)}
                if self.measure.fused is Fused.AUTO and self.choices is not None and self.choices.chosen
                else {}
            ),
            "world_size": self.world.size,
            "context_parallel": 1 if self.shards is None else self.shards.size,  # sequence shards
            "entropy_units": "nats",
            # the statistics and their parameters (statistics.PARAMETERS: those set)
            **({"stats": sums.units(), **self.measure.recorded()} if c.stats != ENTROPY.name else {}),
            "loss_units": "nats",
            "entropy_reduction": c.entropy,
            "scan_config": scan_config,
            "wall_time_s": round(sums.prior_wall_s + time.perf_counter() - started, 3),
        }


def build_native_first(measure: Measure, device: torch.device) -> None:
    """The native CPU kernel built now where the scan's route may run it (CPU; --backend native, or auto
    with a one-pass route: --fused on or auto), before the progress bar starts: its first build takes
    minutes, once per machine (one line says so, another how long it took), and inside the first forward
    it would be counted as scanning, and the bar's rate and time left with it. A
    cached build loads in milliseconds; where it cannot be built, the torch path runs, as before."""
    one_pass = measure.fused is not Fused.OFF
    if device.type == "cpu" and built_first(measure.backend, one_pass):
        native_available()


def _loop(batches: LocalBatches, sums: ScanSums, checkpoint: Checkpointer, progress: bool) -> None:
    """This rank's samples not yet in `sums`, in batches; the checkpoint saved every so often and on
    Ctrl-C (where the run has one: runs/checkpoint.py)."""
    run, c = batches.run, batches.run.config
    todo = batches.work(sums.samples)
    bar = progress_bar(
        total=len(todo) * c.length,
        unit="tok",
        unit_scale=True,
        enabled=progress and run.world.main,
        desc=f"scan {c.model}, threads {torch.get_num_threads()}",
    )
    try:  # the bar moves as each layer finishes: one sample of 32K tokens is one long forward
        with layer_progress(bar, attention_modules(run.lm.model)) as expect:
            for b in range(0, len(todo), c.batch_size):
                ids = torch.from_numpy(run.chunks.ids[todo[b : b + c.batch_size]]).to(run.device)
                expect(ids.shape[0] * c.length)
                batches.forward(ids, sums)
                checkpoint.every_so_often()
    except KeyboardInterrupt:
        said = checkpoint.interrupted()
        if said is not None:
            bar.write(said)
        raise
    finally:
        bar.close()
