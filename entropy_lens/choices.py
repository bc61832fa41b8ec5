"""Choice tuples and tables that several layers read, declared once and importable without torch (`--help`
loads none): the kernels (`kernels.plan`) and the flags that name them (`runs.configs`), and what a reader of
a results file needs to know of each row statistic (`ROW_STAT_INFO`: `kernels.stats.ROW_STATS` computes
them and takes their units and descriptions from here; `results.summary`, `analysis.head_statistics` and
the view read them without torch)."""

from __future__ import annotations

from dataclasses import dataclass

BACKENDS = ("reference", "torch_chunked", "native", "triton")  # the kernels of the row statistics
FUSED_MODES = ("auto", "on", "off")  # --fused: time both routes, the one pass, sdpa + a statistics pass

PROBABILITY = "probability"  # the unit of a statistic that lies in [0, 1]
LOG_BOUND = "log"  # a row of i + 1 keys has at most ln(i + 1) nats (one outcome more with a sink)
POSITION_BOUND = "position"  # a causal row at position i looks back at most i tokens


@dataclass(frozen=True)
class StatInfo:
    """One row statistic as a results file holds it: `unit` (what the arrays store), `description`, and
    `bound`: how the largest value a causal row at position i can take grows with i (LOG_BOUND: ln(i + 1);
    POSITION_BOUND: i), None where no bound grows with i (a probability is at most 1 everywhere)."""

    unit: str
    description: str
    bound: str | None = None


ROW_STAT_INFO: dict[str, StatInfo] = {  # in kernels.stats.ROW_STATS's order (tests/test_stats.py)
    "entropy": StatInfo("nats", "−Σ p ln p over the row's keys (and its sink)", LOG_BOUND),
    "sink_mass": StatInfo(PROBABILITY, "the attention sink's probability (models with sinks: gpt-oss)"),
    "max_prob": StatInfo(PROBABILITY, "the largest probability of the row's outcomes"),
    "collision_entropy": StatInfo("nats", "−ln Σ p² (Rényi order 2)", LOG_BOUND),
    "varentropy": StatInfo("nats²", "Σ p (−ln p − H)², the variance of the surprisal"),
    "distance": StatInfo(
        "tokens", "Σ_j p_j (pos_i − j) / Σ_j p_j over the keys: how far back the row looks", POSITION_BOUND
    ),
    "first_mass": StatInfo(
        PROBABILITY, "Σ_{r <= j < r + K} p_j: the mass on the first K real keys (r: the first unpadded one)"
    ),
}
