"""What a trained tiny model shows beyond its training length: the numbers of its model card.

    rep = length_report("tiny-nope", scales=(1.0, 1.2, 1.4))
    rep.loss[1.0]["[3L, 4L)"], rep.best_scale["[3L, 4L)"], rep.head_entropy  # (layers, heads)

One scan per uniform scale multiplier s (λ = s/√d) at `factor` × L on the held-out novel, reduced
to spans of positions [L/2, L), [L, 2L), [2L, 3L), ... (means over samples and positions), plus
each head's entropy at the last position under s = 1 (the paper's "converged" entropy).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from entropy_lens.errors import EntropyLensError
from entropy_lens.results import spans_by_l

__all__ = ["LengthReport", "length_report", "model_card"]


@dataclass
class LengthReport:
    model: str
    train_len: int
    length: int
    samples: int
    data: str
    spans: dict[str, tuple[int, int]]
    loss: dict[float, dict[str, float]] = field(default_factory=dict)  # scale -> span -> mean NLL, nats
    entropy: dict[float, dict[str, float]] = field(default_factory=dict)  # scale -> span -> mean H, nats
    head_entropy: np.ndarray | None = None  # (layers, heads) entropy at the last position, s = 1, nats
    results: dict = field(default_factory=dict, repr=False)  # scale -> the ScanResult behind the tables

    @property
    def best_scale(self) -> dict[str, float]:
        """Per span, the scale with the lowest loss (ties to the smallest scale)."""
        scales = sorted(self.loss)
        return {span: min(scales, key=lambda s: (self.loss[s][span], s)) for span in self.spans}


def length_report(
    model: str,
    *,
    scales: tuple[float, ...] = (1.0,),
    factor: int = 4,
    samples: int = 64,
    data: str = "austen:persuasion",
    seed: int = 0,
    batch_size: int = 8,
) -> LengthReport:
    """Scan `model` at `factor` × its training length once per scale; see the module docstring."""
    from entropy_lens.models import declared_train_len
    from entropy_lens.runs.scan import ScanConfig, scan

    train_len = declared_train_len(model)
    if train_len is None:
        raise EntropyLensError(f"{model} declares no train_len in its config.json; add one to report by span")
    length = factor * train_len
    rep = LengthReport(
        model, train_len, length, samples, data, spans_by_l(length, train_len, start=train_len // 2)
    )
    for s in sorted({1.0, *scales}):
        config = ScanConfig(
            model=model, length=length, samples=samples, data=data, seed=seed, scale=s, batch_size=batch_size
        )
        result = rep.results[s] = scan(config, progress=False)
        h = result.mean_entropy
        rep.loss[s] = {n: float(np.mean(result.loss[a:b])) for n, (a, b) in rep.spans.items()}
        rep.entropy[s] = {n: float(np.mean(h[a:b])) for n, (a, b) in rep.spans.items()}
        if s == 1.0:
            rep.head_entropy = result.entropy[:, :, -1].astype(np.float64)
    return rep


def model_card(rep: LengthReport, training: dict, other: LengthReport | None = None) -> str:
    """A README.md for a trained tiny model: recipe, training facts and `rep` as tables."""
    r = training["recipe"]
    position = "no position encoding (NoPE)" if r["kind"] == "nope" else f"RoPE θ = {r['rope_theta']:g}"
    about = (
        f"A {training['parameters']:,}-parameter Llama ({r['layers']} layers, hidden {r['hidden']}, "
        f"{r['heads']} query heads over {r['kv_heads']} KV heads, head_dim {r['hidden'] // r['heads']}, "
        f"{position}) trained by `entropy-lens train-tiny --kind {r['kind']}` at length L = {r['train_len']} "
        f"on {training['data']}, with a byte-level BPE tokenizer of {r['vocab']} tokens trained on the same "
        "text."
    )
    how = (
        f"Training: {r['steps']} steps of {r['batch']} × {r['train_len']} tokens "
        f"({training['tokens_seen']:,} tokens), AdamW β = (0.9, 0.95), peak LR {r['lr']:g}, {r['warmup']} "
        f"warm-up steps, cosine decay to {r['min_lr_ratio']:g}×, weight decay {r['weight_decay']:g}, clip "
        f"{r['grad_clip']:g}, seed {r['seed']}; {training['wall_s'] / 60:.1f} min on {training['threads']} "
        f"CPU threads (torch {training['torch']}). Final training loss "
        f"{training['final_train_loss_mean_last_50']:.3f} nats (mean of the last 50 steps). The full recipe "
        "is "
        "`entropy_lens_recipe` in config.json; `training.json` has the loss curve."
    )
    for step in training.get("snapshots", []):
        how += (
            f" The same run after {step} steps is in `step-{step}/` (`--snapshot {step}`), a complete model "
            "folder of its own."
        )
    lines = [
        f"# tiny-{r['kind']}",
        "",
        about,
        "",
        how,
        "",
        f"## Beyond the training length (held-out {rep.data}, {rep.samples} windows of {rep.length} tokens)",
        "",
        "Mean next-token loss (nats) by span of positions, for uniform attention scales λ = s/√d:",
        "",
        *_table(rep, rep.loss),
        "",
        "Mean attention entropy over all heads (nats):",
        "",
        *_table(rep, rep.entropy),
        "",
    ]
    if rep.head_entropy is not None:
        he = rep.head_entropy
        lines += [
            (
                f"Per-head entropy at the last position ({rep.length}; log i = {np.log(rep.length):.2f} "
                "nats), s = 1:"
            ),
            "",
            "| layer | " + " | ".join(f"head {h}" for h in range(he.shape[1])) + " |",
            "|---" * (he.shape[1] + 1) + "|",
            *(f"| {i} | " + " | ".join(f"{v:.2f}" for v in row) + " |" for i, row in enumerate(he)),
            "",
        ]
    if other is not None:
        lines += [
            (
                f"For comparison, {other.model.rstrip('/').rsplit('/', 1)[-1]} (same data, seed and "
                "schedule), loss in nats:"
            ),
            "",
            *_table(other, other.loss),
            "",
        ]
    lines += [
        "Regenerate these tables with `python -m entropy_lens.runs.training.report FOLDER [FOLDER ...]`.",
        "",
    ]
    return "\n".join(lines)


def _table(rep: LengthReport, values: dict[float, dict[str, float]]) -> list[str]:
    best = rep.best_scale
    rows = [
        "| s | " + " | ".join(rep.spans) + " |",
        "|---" * (len(rep.spans) + 1) + "|",
    ]
    for s in sorted(values):
        cells = [
            f"**{values[s][n]:.3f}**" if values is rep.loss and best[n] == s else f"{values[s][n]:.3f}"
            for n in rep.spans
        ]
        rows.append(f"| {s:g} | " + " | ".join(cells) + " |")
    return rows


CARD_SCALES = (1.0, 1.1, 1.2, 1.3, 1.4, 1.6)


def main(argv: list[str] | None = None) -> None:
    """`python -m entropy_lens.runs.training.report FOLDER [FOLDER ...]`: (re)write each FOLDER/README.md.

    With several folders (e.g. a NoPE/RoPE pair), each card also shows the others' loss table."""
    import json
    import sys
    from pathlib import Path

    folders = [Path(a) for a in (sys.argv[1:] if argv is None else argv)]
    reps = [length_report(str(f), scales=CARD_SCALES, samples=128) for f in folders]
    for i, folder in enumerate(folders):
        training = json.loads((folder / "training.json").read_text())
        training["snapshots"] = sorted(int(p.name[5:]) for p in folder.glob("step-*") if p.is_dir())
        others = [r for j, r in enumerate(reps) if j != i]
        (folder / "README.md").write_text(model_card(reps[i], training, *others[:1]))


if __name__ == "__main__":
    main()
