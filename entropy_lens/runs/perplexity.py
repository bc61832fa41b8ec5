"""perplexity(config) -> {W: ...}: sliding-window perplexity at several window lengths (the paper's Table 2).

Press et al. (2022)'s protocol: for a window length W, windows of W tokens start every S tokens of
the packed text, and only each window's last S tokens are scored, so every scored token sees at least
W − S tokens of context and none is scored twice; PPL = exp(mean NLL). One loss-only scan per W
(`ScanConfig(length=W, stride=S, entropy="none")`) draws `samples` such windows (seeded) and
`analysis.sliding_window_ppl` reads the perplexity off its last S positions: `samples · S` scored
tokens per length.

The default stride is L/8 for a model trained at L tokens (its config's `train_len`, or `train_len`
here): the paper's S = 256 at L = 2048. The lengths are the caller's: the paper's 1L, 2L, 4L, 8L.

`scan` may be any callable taking a ScanConfig and returning a ScanResult (the figures pass their
cached scan); the default runs `runs.scan.scan` and writes nothing. Under torchrun every rank runs every
length (one process group for all of them): the ranks split each length's windows, or with
`context_parallel` (--context-parallel) shard each window, or with --context-parallel C shard each
window over a group of C ranks, the groups splitting the windows (runs/context_parallel.py). The longest
length runs first: it fills the fewest windows, so a text too short for `samples` is refused before any
forward pass.
"""

from __future__ import annotations

import functools
import math
from dataclasses import asdict
from pathlib import Path

from entropy_lens.analysis import WindowPPL, sliding_window_ppl
from entropy_lens.results import ScanResult
from entropy_lens.runs.configs import PerplexityConfig
from entropy_lens.runs.context_parallel import check_context_parallel
from entropy_lens.runs.distributed import command_group, world
from entropy_lens.runs.provenance import provenance, recorded_settings
from entropy_lens.runs.scan import scan as run_scan

__all__ = ["PPL_KIND", "PerplexityConfig", "perplexity", "perplexity_record"]

PPL_KIND = "entropy_lens.ppl"  # the `kind` of the JSON `entropy-lens ppl --out` writes


def perplexity(config: PerplexityConfig, *, scan=None, progress: bool = True) -> dict[int, dict]:
    """{W: {"ppl": WindowPPL, "wall_time_s": the scan's own time, "result": its ScanResult}} for each
    W in `config.lengths`, in order. `scan(ScanConfig) -> ScanResult` defaults to `runs.scan.scan`."""
    config.check()  # lengths and flags first: resolving the stride may read the checkpoint
    w = world()
    check_context_parallel(config, w)  # every length, before the longest runs
    config = config.resolved()
    config.check()
    progress = progress and w.main
    scan = scan or functools.partial(run_scan, progress=progress)
    with command_group(config.device, w):
        return _rows(config, scan, progress)


def _rows(config: PerplexityConfig, scan, progress: bool) -> dict[int, dict]:
    rows: dict[int, dict] = {}
    # longest first: it has the fewest windows, so a text too short for `samples` fails before any work
    for i, length in enumerate(reversed(config.lengths)):
        if progress:
            print(
                f"[{i + 1}/{len(config.lengths)}] len {length}: {config.samples} windows every "
                f"{config.stride} tokens",
                flush=True,
            )
        result: ScanResult = scan(config.scan_config(length))
        rows[length] = {
            "ppl": sliding_window_ppl(result, config.stride),
            "wall_time_s": float(result.meta.get("wall_time_s", math.nan)),
            "result": result,
        }
    return {length: rows[length] for length in config.lengths}


def perplexity_record(config: PerplexityConfig, rows: dict[int, dict], out: str | Path | None = None) -> dict:
    """The JSON-ready record of a perplexity run for the file `out`: config (stride resolved; a --head-scales
    file named from `out`: runs/provenance.py's `recorded_settings`), provenance and one entry per length
    (nats; a NaN, e.g. the stderr of one window per position, becomes null)."""
    config = config.resolved()
    entries = []
    for row in rows.values():
        window: WindowPPL = row["ppl"]
        meta = row["result"].meta
        entries.append(
            {
                **{k: _json_number(v) for k, v in asdict(window).items()},
                "wall_time_s": _json_number(row["wall_time_s"]),
                "data_description": meta.get("data_description"),
                "train_len": meta.get("train_len"),
                "device": meta.get("device"),
                "dtype": meta.get("dtype"),
            }
        )
    return {
        "kind": PPL_KIND,
        "config": recorded_settings(config.to_dict(), out),
        "units": "nats",
        "interval": "95%, exp(nll -/+ 1.96 stderr); stderr treats scored tokens as independent (a lower bound)",
        "provenance": provenance(),
        "lengths": entries,
    }


def _json_number(x):
    """x, with NaN and inf as None (JSON has neither)."""
    return None if isinstance(x, float) and not math.isfinite(x) else x
