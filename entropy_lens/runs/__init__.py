"""Everything that loads a model and runs it: the one layer that spans the pipeline. Its modules, by job:

Settings of a run (no torch)
    configs.py           every run setting declared once: the shared groups (Checkpoint, Loading, Text,
                         Windows, Slicing, Scaling, and their cache keys) and ScanConfig, PerplexityConfig,
                         PasskeyConfig, HeadSearchConfig composed of them
    threads.py           --threads: the CPU thread count, set once before a command loads torch

Loading and running a scan
    scan.py              scan(config) -> ScanResult: the pipeline as named steps over one `Run`
    variants.py          a run's model variant (checkpoint, scales, position schedule):
                         load_model_variant, through which scans, passkey runs and `eval` load
    batches.py           its batches: LocalBatches and ShardedBatches (work, forward, reduce)
    sums.py              ScanSums: the float64 running sums, checkpointed and all-reduced
    memory.py            the C heap's free pages handed back during a CPU scan (malloc_trim)

Outputs and checkpoints
    output.py            --out, --resume, --force (OutputSettings, with --quiet): checked before any work
    lock.py              OutputLock: one writer per output
    checkpoint.py        Checkpointer: the `.partial.npz` file, what it must match, restore and write
    provenance.py        the meta keys naming the software that wrote a file (torch, transformers, git)

Several processes (torchrun)
    distributed.py       ranks, process groups (RankGroups), the all-reduce of the sums
    launch.py            LaunchSettings: how the ranks of a launch wait for each other (--dist-timeout)
    context_parallel.py  --context-parallel [C]: each sequence sharded over the ranks
    memory_model.py      the bytes a rank needs, by term, and the fewest ranks (docs/scaling.md)

Other runs of a model
    sweep.py             one scan per uniform scale, into a folder with a sweep index
    perplexity.py        sliding-window perplexity (the paper's Table 2): a loss-only scan per window
    passkey.py           passkey retrieval (Figures 6, 8, 9) with the answer rows' entropy and needle mass
    generate.py          `entropy-lens generate`: every generated token's row statistics after a prompt

It may import the packages below it (models, data, capture, generation, kernels, results, analysis, progress:
docs/internals/layout.md); nothing below imports it, nor does it import `monitor/`. Above it sit
`figures/` (the paper's pipeline: the runs behind its figures, their cache and the drawing),
`training/` (train-tiny, whose model cards are made of these runs, and the λ(h) search: every loop that
trains, its checkpoints and histories), `harness/` (lm-eval) and `cli/`, a thin layer over these
functions. Names are imported lazily, so `from entropy_lens.runs import ScanConfig` does not load torch.
The functions `scan`, `sweep` and `passkey` share their modules' names: import them from `entropy_lens`
(or `entropy_lens.runs.scan` / `.sweep` / `.passkey`).
"""

from importlib import import_module

_LAZY = {
    "ScanConfig": "configs",
    "ScanSums": "sums",
    "parse_scales": "sweep",
    "HeadSearchConfig": "configs",
    "PerplexityConfig": "configs",
    "PasskeyConfig": "configs",
}

__all__ = [
    "HeadSearchConfig",
    "PasskeyConfig",
    "PerplexityConfig",
    "ScanConfig",
    "ScanSums",
    "parse_scales",
]


def __getattr__(name):
    if name in _LAZY:
        return getattr(import_module(f"entropy_lens.runs.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'entropy_lens.runs' has no attribute {name!r}")
