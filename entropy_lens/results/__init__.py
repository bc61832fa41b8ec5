"""The results file: the contract between compute (scan) and analysis/plotting.

One `.npz` that `numpy.load(path)` opens without entropy_lens (numpy only; no torch here)::

    entropy     float32 (layers, heads, len)  mean over samples of H_i, nats
    entropy_sq  float32 (layers, heads, len)  mean of H_i² (std = sqrt(entropy_sq − entropy²))
    loss        float32 (len,)                mean NLL of token i+1 given tokens <= i, nats
    loss_sq     float32 (len,)                mean of squared NLL
    count       int64   (len,)                samples averaged at each position
    sink_mass   float32 (layers, heads, len)  only for models with attention sinks (gpt-oss): mean over
                                              samples of the probability the softmax gives the sink
                                              (the entropy counts the sink as one more outcome)
    Every array beyond these and meta is a row statistic the scan recorded (`ScanResult.stats`, by name,
    with its mean square `<name>_sq`; kernels.stats.ROW_STATS computes them, entropy_lens.statistics
    declares them without torch), shaped as entropy; `stat_names`, `stat(name)` and
    `stat_unit(name)` read entropy and them alike. A row-slice statistic (statistics.ROW_SLICE_STATISTICS,
    `scan --stats ... --spans/--offsets/...`) is an array per slot, `<statistic>@<label>` (offset_prob@1:
    the key one behind; top_key alone: the most probable key's real position), its parameter in meta
    under its name (statistics.SLICE_PARAMETERS; schema version 2).
    received, received_max, received_mean  float32 (layers, heads, len)  the key statistics of `scan
                                              --stats` (attention received BY key position j, over the
                                              counted query rows of each window: statistics.KEY_STATISTICS),
                                              mean over samples (received_max: the largest), with
                                              `<name>_sq` where squared; `key_names`, `received(name)`
    meta        0-d str                       JSON object, keys below

meta (schema_version 1, 2 or 3: a file is written as the lowest version that describes it, 2 only where it
holds row statistics beyond entropy and sink mass (`scan --stats`, with meta `stats` and the row
statistics' parameters, statistics.ROW_PARAMETERS), 3 only where it holds key statistics (and their
parameters where given: the query window, the rows counted for them), so a reader of an older version opens every file without them and refuses a
newer one in one line; all load): schema_version, entropy_lens_version, git_hash, model (the checkpoint as
given), model_source (where it was found, named as on any machine: a bundled model's place among the
packages, "entropy_lens/models/tiny/tiny-nope"; a Hub id's "hub:org/name@commit"; the user's own folder or
file relative to the results file's folder, absolute only where nothing was written: docs/guides/files.md),
model_class (the class that ran; absent in older files), remote_code_ignored (only where a config's
auto_map named model code that did not run, without --trust-remote-code: that code's name), config_hash, nope, n_layers, n_heads, n_kv_heads, head_dim, scales ([layers][heads] multipliers of
1/√d, so λ_h = scales[l][h]/√d; all equal for a uniform --scale), scale_source ("uniform", "checkpoint",
"none" or the --head-scales file, named as scan_config's head_scales: relative to the results file's
folder), train_len, data,
data_description, seed, samples, length (tokens per sequence; `len` in files written before 0.9), batch_size, dtype, device, threads (torch's CPU thread count:
--threads or OMP_NUM_THREADS; absent in files written before it), backend (the entropy kernels that ran,
"+"-joined: torch_chunked, triton, reference, native; "none" for a loss-only scan), fold (only where
torch_chunked ran on CPU: "compiled" or "eager (why)", kernels/fold.py), native (only for a CPU scan
with --fused auto or on: the native kernel's status, "built", "not built" (no layer asked for it) or
"unavailable (why)": then the CPU fused pass ran torch-streamed; kernels/native), attention_path (what computed
the layers, capture/paths.py's names, several joined by "+": "sdpa-then-entropy": sdpa's output, then an
entropy-only pass; "triton-fused": the Triton kernel's one pass for output and entropy;
"torch-streamed": output and entropy from the same score tiles in plain torch, the CPU fused pass where
the native kernel is unavailable and the way of layers with softcapping or attention sinks, which sdpa
cannot compute; "native": the same from one C++ kernel, the CPU fused pass; "sdpa": sdpa alone,
a loss-only scan's layers; "none": no forward ran. Files written before these names say "separate" for
sdpa-then-entropy (sdpa in a loss-only scan), "streamed" for torch-streamed, and "fused" for
triton-fused on a CUDA `device`, torch-streamed on CPU), fused_choices (only where `--fused auto`
decided: the path it kept per shape of attention call, {shape key: "fused" (the fused pass) |
"separate" (sdpa-then-entropy)}; a resumed scan reuses the interrupted one's, and
`PathChoices(replay=...)` reproduces them), world_size (torchrun's processes), context_parallel (the
sequence shards C: P under --context-parallel alone, C under --context-parallel C (the world_size / C
groups split the samples), else 1; absent in files written before it; scan_config's context_parallel is
true for the flag alone, C for C, absent without it), entropy_units ("nats"),
loss_units ("nats"), entropy_reduction (the scan's --record: "heads"; "mean": the heads axis has
length 1 and holds the mean over the layer's heads of entropy and of entropy_sq; "none": loss only, the
heads axis has length 0; files written before 0.9 say "per_head", "mean_heads", "not_captured"), chunk_indices (which chunk of the packed text each sample is; with a
`stride` in scan_config, which window: window k starts at token k·stride), scan_config (the ScanConfig's
fields; `stride` only when set), torch_version, transformers_version, created_utc, wall_time_s.

Files written before the names above keep loading: `upgrade_meta` maps their keys and values to
today's, for every ScanResult however it is made (and `read_sweep_index` does the same for `len`).
Their bytes are not changed, so figure-cache entries keep their names (those hash the ScanConfig).

Files are written atomically (temporary file in the same folder, then os.replace): a reader sees
the old file or the new one, never half of one (`results.files`).

Files are untrusted: `ScanResult.load` refuses, in one line naming the file and the fix, any damage:
an unreadable archive, arrays that are not real numbers of the shapes above, NaN/inf where a mean is
expected (never read as 0), no positions, meta fields of the wrong type (`results.schema.check_meta`:
a string `length` "256" is not 256). `scan --resume` scans such a file again. Sweep indexes are read
by `read_sweep_index` alone (`results.sweep_index`), which refuses files listed outside the folder.

This module states the contract and hands on the names of the modules that keep it::

    scan_result.py   ScanResult: the arrays and meta in memory; save, load, validate
    schema.py        versions, arrays, meta keys; upgrade_meta, check_meta
    files.py         atomic writes, the checked reading of an archive, printable names, files named
                     relative to the record beside them
    spans.py         spans of positions in multiples of L, and the summary `scan` prints
    sweep_index.py   a sweep folder's index
    history.py       the monitor's history file, read and written here so that view opens it
    generation.py    GenerationResult: the statistics of every generated token, one .npz
    pattern.py       DuoAttention's pattern folder (kvpress's DuoAttentionPress): its one writer and reader

"""

from entropy_lens.results.files import (
    WriteFailed,
    atomic_savez,
    atomic_write_text,
    check_regular_source,
    check_regular_target,
    npz_holds,
    printable,
    shown,
    write_failure_reason,
)
from entropy_lens.results.scan_result import ScanResult
from entropy_lens.results.schema import (
    ARRAYS,
    ENTROPY_REDUCTIONS,
    LEGACY_META_KEYS,
    LEGACY_REDUCTIONS,
    READABLE_VERSIONS,
    REQUIRED_META,
    SCHEMA_VERSION,
    VERSION_1_STATS,
    check_meta,
    schema_version_of,
    upgrade_meta,
)
from entropy_lens.results.spans import in_l, span_label, spans_by_l, summary
from entropy_lens.results.sweep_index import SWEEP_INDEX, SWEEP_KIND, read_sweep_index, write_sweep_index

__all__ = [  # the file's contract (this module), and what its submodules give every reader
    "ARRAYS",
    "ENTROPY_REDUCTIONS",
    "LEGACY_META_KEYS",
    "LEGACY_REDUCTIONS",
    "READABLE_VERSIONS",
    "REQUIRED_META",
    "SCHEMA_VERSION",
    "SWEEP_INDEX",
    "SWEEP_KIND",
    "VERSION_1_STATS",
    "ScanResult",
    "WriteFailed",
    "atomic_savez",
    "atomic_write_text",
    "check_meta",
    "check_regular_source",
    "check_regular_target",
    "in_l",
    "npz_holds",
    "printable",
    "read_sweep_index",
    "schema_version_of",
    "shown",
    "span_label",
    "spans_by_l",
    "summary",
    "upgrade_meta",
    "write_failure_reason",
    "write_sweep_index",
]
