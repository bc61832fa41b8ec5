"""The float64 references the generation tests hold the GenerationRecorder to: each sequence alone,
unpadded and teacher-forced through the model's own eager attention, its rows read at the positions of
the generated tokens."""

import itertools

import numpy as np
import torch
from architectures import eager_probabilities

FAMILIES = ("llama", "qwen2", "mistral", "gemma2", "gpt_oss")  # GQA, sliding layers, window, softcap, sinks
STATS = ("entropy", "max_prob", "first_mass", "recent_mass", "distance")
PROMPT, NEW, PAD = 9, 6, 3


def left_padded_prompts():
    """(2, PROMPT) ids and their mask: row 0 left-padded by PAD tokens."""
    ids = torch.randint(3, 300, (2, PROMPT), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids)
    mask[0, :PAD] = 0
    return ids, mask


def float64_rows(model, sequence: torch.Tensor, rows: range, recent: int = 64) -> dict[str, np.ndarray]:
    """{stat: (len(rows), layers, heads)} float64 from the model's eager attention over `sequence` alone
    (1-D ids, unpadded), at query rows `rows`."""
    _, probs = eager_probabilities(model, sequence[None], None)
    out = {name: [] for name in (*STATS, "sink_mass")}
    for p in probs:  # (1, H, T, T) float64
        p = p[0][:, list(rows)]  # (H, R, T)
        sink = (1.0 - p.sum(-1)).clamp_min(0.0)
        T = p.shape[-1]
        pos = torch.tensor(list(rows), dtype=torch.float64).view(1, -1, 1)
        keys = torch.arange(T, dtype=torch.float64).view(1, 1, -1)
        behind = pos - keys
        out["entropy"].append(-torch.special.xlogy(p, p).sum(-1) - torch.special.xlogy(sink, sink))
        out["max_prob"].append(torch.maximum(p.amax(-1), sink))
        out["first_mass"].append(p[..., 0])
        out["recent_mass"].append(torch.where((behind >= 0) & (behind < recent), p, 0.0).sum(-1))
        out["distance"].append((p * behind.clamp_min(0)).sum(-1) / p.sum(-1))
        out["sink_mass"].append(sink)
    return {name: torch.stack(v).permute(2, 0, 1).numpy() for name, v in out.items()}  # (R, layers, heads)


SPANS, OFFSETS, TOP, BINS = {"early": (1, 4), "late": (5, 12)}, (0, 1, 3), 3, (0, 1, 4)
SLICING = {"spans": SPANS, "offsets": OFFSETS, "top_keys": TOP, "distance_bins": BINS}


def float64_slices(model, sequence: torch.Tensor, P: int, rows: range) -> dict[str, np.ndarray]:
    """span_mass (prompt, generated, SPANS), offset_prob (OFFSETS), distance_mass (BINS) and the sorted
    top TOP probabilities and positions, {name: (len(rows), layers, heads, values)} float64, from the model's eager attention
    over `sequence` alone (unpadded: a key's index is its real position), prompt length P."""
    _, probs = eager_probabilities(model, sequence[None], None)
    bounds = [(0, P), (P, len(sequence)), *SPANS.values()]
    out = {"span_mass": [], "offset_prob": [], "top_key": [], "top_key_prob": [], "distance_mass": []}
    for p in probs:  # (1, H, T, T) float64
        p = p[0][:, list(rows)]  # (H, R, T)
        out["span_mass"].append(torch.stack([p[..., a:b].sum(-1) for a, b in bounds], -1))
        cols = [[i - d if i - d >= 0 else None for d in OFFSETS] for i in rows]
        out["offset_prob"].append(
            torch.stack(
                [
                    torch.stack([p[:, r, j] if j is not None else p.new_zeros(p.shape[0]) for j in js], -1)
                    for r, js in enumerate(cols)
                ],
                1,
            )
        )
        behind = torch.tensor(list(rows)).view(1, -1, 1) - torch.arange(p.shape[-1]).view(1, 1, -1)  # i − j
        edges = (*BINS, len(sequence) + 1)
        out["distance_mass"].append(
            torch.stack(
                [(p * ((behind >= a) & (behind < b))).sum(-1) for a, b in itertools.pairwise(edges)],
                -1,
            )
        )
        top = p.sort(dim=-1, descending=True, stable=True)
        out["top_key_prob"].append(top.values[..., :TOP])
        out["top_key"].append(top.indices[..., :TOP].double())
    return {name: torch.stack(v).permute(2, 0, 1, 3).numpy() for name, v in out.items()}


def assert_equals_float64(model, result, sequences: torch.Tensor, padding, atol: float = 2e-4) -> None:
    """Every statistic `result` recorded (STATS, sink_mass, and span_mass, offset_prob, top_key,
    distance_mass with SPANS, OFFSETS, TOP, BINS) equals the float64 rows of each sequence alone: `sequences` (B, fed prompt + N) as
    generate returns them, `padding` (B,) each one's left padding. The top keys are compared wherever the
    float64 ranks are apart by more than `atol`."""
    N = result.tokens.shape[1]
    sliced = {"span_mass", "offset_prob", "top_key", "distance_mass"} & set(result.stats)
    for b, pad in enumerate(padding):
        P, n = int(result.prompt_len[b]), int(result.lengths[b])
        real = sequences[b, pad:]
        rows = range(P - 1, P + n - 1)
        want = float64_rows(model, real[: P + n - 1], rows)
        if sliced:
            want |= float64_slices(model, real[: P + n - 1], P, rows)
        for name in result.stats:
            if name == "top_key":
                probs = want["top_key_prob"]
                expected = np.where(probs > 0, want["top_key"], -1).astype(np.int64)
                apart = np.diff(probs, axis=-1, prepend=2.0, append=-1.0)
                clear = ((-apart[..., :-1] > atol) & (-apart[..., 1:] > atol)) | (probs == 0)
                assert clear.mean() > 0.5, "the ranks are too close to test"
                got = result.stat("top_key")[b, :n]
                assert np.array_equal(got[clear], expected[clear]), f"top_key row {b}"
                name = "top_key_prob"
            got = result.stat(name)[b, :n].astype(np.float64)
            np.testing.assert_allclose(got, want[name], atol=atol, err_msg=f"{name} row {b}")
        assert n == N or np.isnan(result.stat(result.stats[0])[b, n:]).all()
