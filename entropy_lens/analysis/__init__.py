"""Analysis of results files: sweeps, best scale per position, the scale fit, head scales vs entropy,
inflection points, sliding-window perplexity. Inputs are results files / `ScanResult` objects; outputs are tidy DataFrames or
small dataclasses. Imports numpy, scipy, pandas and `entropy_lens.results` only (no torch), so it
runs on a laptop from the files alone. ::

    from entropy_lens.analysis import load_sweep, best_scale_per_position, fit_scale_curve

    sweep = load_sweep("sweeps/nope50k")            # Sweep: scales (S,), loss/entropy (S, T), nats
    best = best_scale_per_position(sweep)           # position, best_scale, best_loss
    fit = fit_scale_curve(sweep, train_len=2048)    # s = 1 + a ln(t/L) over [L, len)
    fit.a, fit.r2, fit.implied((2, 4, 8))
    best_uniform_scale(sweep, length=8192).scale    # s*: lowest loss over [len − L/2, len)

    table = head_entropy_vs_scale(ScanResult.load("hs8k_8k.npz"))   # Figure 5
    table.correlations                              # per layer: pearson_r, spearman_r, slope, ...
    head_statistics(result).values["growth"]        # (layers, heads) bits: [L, 2L) minus [L/2, L)
    head_statistics(result, stat="distance").values["slope"]   # tokens per position, for scan --stats
    pooled_within_layer(table.table)                # one r for all layers, bootstrap interval

    df = inflections(sweep)                         # entropy and loss inflection per scale
    inflection_agreement(df).pearson_r

    StatCurves.of(ScanResult.load("stats.npz"), width=64).mean("max_prob")  # Figure 17: binned row stats
    head_profile(result).export("pattern/")        # streaming vs retrieval heads, DuoAttention's files
    retrieval_pattern(record, 1024, sink_size=64, recent_size=256).export("pattern/")  # passkey's, likewise
    key_shares(ScanResult.load("received.npz"), train_len=128).beyond  # Figure 19: attention by key
    sliding_window_ppl(ScanResult.load("w512.npz"), stride=16).ppl   # Table 2: a `scan --stride 16`
    ppl_table({("nope", 512): r512, ("nope", 1024): r1024}, stride=16)  # name x length

"""

from entropy_lens.analysis.alibi import alibi_prior_entropy
from entropy_lens.analysis.fit import (
    ScaleFit,
    best_scale_per_position,
    fit_scale_curve,
    grid_edge_problem,
    yarn_scale,
)
from entropy_lens.analysis.head_profile import HeadProfile, head_profile
from entropy_lens.analysis.head_stats import HeadStatistics, head_statistics, position_spans, stat_display
from entropy_lens.analysis.heads import HeadScaleTable, converged_entropy_vs_scale, head_entropy_vs_scale
from entropy_lens.analysis.inflection import (
    Inflection,
    InflectionAgreement,
    find_inflection,
    inflection_agreement,
    inflections,
    moving_average,
)
from entropy_lens.analysis.passkey import (
    passkey_average,
    passkey_by_length,
    passkey_table,
    retrieval_heads,
    wilson_interval,
)
from entropy_lens.analysis.perplexity import WindowPPL, ppl_table, sliding_window_ppl
from entropy_lens.analysis.pooled import PooledCorrelation, pooled_within_layer
from entropy_lens.analysis.received import KeyShares, key_shares, uniform_received
from entropy_lens.analysis.retrieval import RetrievalPattern, retrieval_pattern
from entropy_lens.analysis.stat_curves import StatCurves
from entropy_lens.analysis.sweep import Sweep, load_sweep, missing_scales, resume_command, uniform_scale
from entropy_lens.analysis.uniform import UniformChoice, best_uniform_scale

__all__ = [
    "HeadProfile",
    "HeadScaleTable",
    "HeadStatistics",
    "Inflection",
    "InflectionAgreement",
    "KeyShares",
    "PooledCorrelation",
    "RetrievalPattern",
    "ScaleFit",
    "StatCurves",
    "Sweep",
    "UniformChoice",
    "WindowPPL",
    "alibi_prior_entropy",
    "best_scale_per_position",
    "best_uniform_scale",
    "converged_entropy_vs_scale",
    "find_inflection",
    "fit_scale_curve",
    "grid_edge_problem",
    "head_entropy_vs_scale",
    "head_profile",
    "head_statistics",
    "inflection_agreement",
    "inflections",
    "key_shares",
    "load_sweep",
    "missing_scales",
    "moving_average",
    "passkey_average",
    "passkey_by_length",
    "passkey_table",
    "pooled_within_layer",
    "position_spans",
    "ppl_table",
    "resume_command",
    "retrieval_heads",
    "retrieval_pattern",
    "sliding_window_ppl",
    "stat_display",
    "uniform_received",
    "uniform_scale",
    "wilson_interval",
    "yarn_scale",
]
