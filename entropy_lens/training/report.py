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
    entropy_at: tuple[float, ...] | None = None,
) -> LengthReport:
    """Scan `model` at `factor` × its training length once per scale; see the module docstring.

    `entropy_at`: the scales whose scans also record entropy (default every scale). The others are
    loss-only scans (no entropy pass), absent from `entropy`; `head_entropy` needs s = 1 among
    them. A caller that reads only some scales' entropy (the tests) skips the rest's cost."""
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
        measured = entropy_at is None or s in entropy_at
        config = ScanConfig(
            model=model,
            length=length,
            samples=samples,
            data=data,
            seed=seed,
            scale=s,
            batch_size=batch_size,
            entropy="heads" if measured else "none",
        )
        result = rep.results[s] = scan(config, progress=False)
        rep.loss[s] = {n: float(np.mean(result.loss[a:b])) for n, (a, b) in rep.spans.items()}
        if not measured:
            continue
        h = result.mean_entropy
        rep.entropy[s] = {n: float(np.mean(h[a:b])) for n, (a, b) in rep.spans.items()}
        if s == 1.0:
            rep.head_entropy = result.entropy[:, :, -1].astype(np.float64)
    return rep


def model_card(
    rep: LengthReport, training: dict, others: list[LengthReport] = (), passkey: dict | None = None
) -> str:
    """A README.md for a trained tiny model: recipe, training facts and `rep` as tables."""
    r = training["recipe"]
    if r["kind"] == "alibi":
        blocks = (
            f"BLOOM ({r['layers']} layers, hidden {r['hidden']}, {r['heads']} heads, head_dim "
            f"{r['hidden'] // r['heads']}, ALiBi)"
        )
    else:
        position = "no position encoding (NoPE)" if r["kind"] == "nope" else f"RoPE θ = {r['rope_theta']:g}"
        blocks = (
            f"Llama ({r['layers']} layers, hidden {r['hidden']}, {r['heads']} query heads over {r['kv_heads']} "
            f"KV heads, head_dim {r['hidden'] // r['heads']}, {position})"
        )
    about = (
        f"A {training['parameters']:,}-parameter {blocks} trained by `entropy-lens train-tiny --kind "
        f"{r['kind']}` at length L = {r['train_len']} on {training['data']}, with a byte-level BPE tokenizer of "
        f"{r['vocab']} tokens trained on the same text."
    )
    if r["kind"] == "alibi":
        about += (
            " It is the ALiBi twin of tiny-nope and tiny-rope: same data, tokenizer, seed, batches and schedule, "
            "and the same width, depth and heads, but BLOOM's blocks, so it differs from the Llama pair in more "
            "than the position encoding: a linear bias −m_h·(i − j) on the scores with BLOOM's per-head slopes "
            "m_h instead of none or RoPE, LayerNorm with biases instead of RMSNorm, a GELU MLP of 4 × hidden "
            f"({4 * r['hidden']}) instead of a SwiGLU of {r['intermediate']}, biases in every projection and "
            "a LayerNorm on the embeddings (input and output embeddings untied, as the pair's)."
        )
    passkey_docs = (
        "passkey documents of L/2 to L + 1 tokens after text (a 5-digit key at a random depth of filler, asked "
        "for at the end)"
    )
    phase, wall = "", f"{training['wall_s'] / 60:.1f} min on {_threads(training)}"
    if r.get("passkey_steps"):
        about += (
            f" After pretraining, a passkey phase of {r['passkey_steps']} steps (`--passkey-steps`) taught it the "
            f"task inside L: a fresh AdamW at the constant LR {r['passkey_lr']:g}, with a share "
            f"{r['passkey_share']:g} of each batch's windows ending in {passkey_docs}."
        )
        phase = (
            f", passkey documents included; {training['pretraining_train_loss_mean_last_50']:.3f} at the end of "
            "pretraining"
        )
        if "init_from" in training:  # the phase ran in a process of its own, from the pretrained folder
            pre = training["init_from"]
            wall = (
                f"{pre['wall_s'] / 60:.1f} min on {_threads(pre)}, then the passkey phase (`--init-from`) "
                f"{(training['wall_s'] - pre['wall_s']) / 60:.1f} min on {_threads(training)}"
            )
    elif r.get("passkey_share"):
        about += f" A share {r['passkey_share']:g} of each batch's windows end in {passkey_docs}, so it learns the task inside L."
    how = (
        f"Training: {r['steps']} steps of {r['batch']} × {r['train_len']} tokens "
        f"({r['steps'] * r['batch'] * r['train_len']:,} tokens), AdamW β = (0.9, 0.95), peak LR {r['lr']:g}, {r['warmup']} "
        f"warm-up steps, cosine decay to {r['min_lr_ratio']:g}×, weight decay {r['weight_decay']:g}, clip "
        f"{r['grad_clip']:g}, seed {r['seed']}; {wall} "
        f"(torch {training['torch']}). Final training loss "
        f"{training['final_train_loss_mean_last_50']:.3f} nats (mean of the last 50 steps{phase}). The full recipe "
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
    if passkey is not None:
        lines += _passkey_lines(passkey)
    for other in others:
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
        "Regenerate these tables with `python -m entropy_lens.training.report FOLDER [FOLDER ...]`.",
        "",
    ]
    return "\n".join(lines)


def passkey_report(
    model: str, factors: tuple[int, ...] = (1, 2, 4), depths: int = 10, keys: int = 10
) -> dict:
    """`entropy-lens passkey` of `model` at `factors` × its training length (the paper's 10 depths × 10
    keys): the record the card's passkey table is read from."""
    from entropy_lens.models import declared_train_len
    from entropy_lens.runs.passkey import PasskeyConfig, passkey

    L = declared_train_len(model)
    config = PasskeyConfig(model=model, lengths=tuple(f * L for f in factors), depths=depths, keys=keys)
    return passkey(config, progress=False)


def _threads(training: dict) -> str:
    n = training["threads"]
    return f"{n} CPU thread{'s' if n != 1 else ''}"


def _passkey_lines(record: dict) -> list[str]:
    from entropy_lens.analysis import passkey_by_length

    c, L = record["config"], record["model"]["train_len"]
    frame = passkey_by_length(record, L)
    layer, head = frame["head"].iloc[0].split(".")
    return [
        (
            f"Passkey retrieval (`entropy-lens passkey`, {c['depths']} depths × {c['keys']} keys per length, "
            f"seed {c['seed']}): accuracy with its Wilson 95% interval, and the retrieval head (layer {layer}, "
            f"head {head}: the most mass on the key within L) with its mean mass on the key:"
        ),
        "",
        "| length | accuracy | head's mass on the key | answer-row entropy (nats) |",
        "|---|---|---|---|",
        *(
            f"| {w} ({w / L:g}L) | {r.accuracy:.2f} [{r.accuracy_low:.2f}–{r.accuracy_high:.2f}] | "
            f"{r.needle_mass:.2f} | {r.entropy:.2f} |"
            for w, r in zip(frame.index, frame.itertuples())
        ),
        "",
    ]


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
    """`python -m entropy_lens.training.report FOLDER [FOLDER ...]`: (re)write each FOLDER/README.md.

    With several folders (e.g. the NoPE/RoPE pair and their ALiBi twin), each card also shows the others'
    loss tables; every card has the model's passkey retrieval at L, 2L and 4L."""
    import sys
    from pathlib import Path

    from entropy_lens.training.training_record import read_training_record

    folders = [Path(a) for a in (sys.argv[1:] if argv is None else argv)]
    reps = [length_report(str(f), scales=CARD_SCALES, samples=128) for f in folders]
    for i, folder in enumerate(folders):
        training = read_training_record(folder)
        training["snapshots"] = sorted(int(p.name[5:]) for p in folder.glob("step-*") if p.is_dir())
        others = [r for j, r in enumerate(reps) if j != i]
        card = model_card(reps[i], training, others, passkey_report(str(folder)))
        (folder / "README.md").write_text(card)


if __name__ == "__main__":
    main()
