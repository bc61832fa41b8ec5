"""Train a tiny Llama (NoPE or RoPE), or its ALiBi twin (BLOOM blocks), on the bundled corpus: the
project's embedded default models.

    from entropy_lens.training import TinyRecipe, train_tiny
    train_tiny(TinyRecipe(kind="nope"), "out/tiny-nope")   # ~15 min on 2 CPU cores

The recipe mirrors TinyLlama in miniature: Llama blocks (SwiGLU, RMSNorm, untied embeddings) with
6 attention heads of dimension 32 (multi-head by default; `kv_heads=2` gives TinyLlama's grouped-
query attention, with which a uniform scale barely helped NoPE beyond 2L: see models/tiny/README.md),
a byte-level BPE tokenizer trained on the five Austen novels that are not held out, and a short
training length L. NoPE and RoPE runs
of one recipe see the same batches in the same order from the same initial weights, so any
difference between them is the position encoding.

Determinism: the batch of step t is drawn by `numpy.random.default_rng([seed, t])`, so it does
not depend on what ran before (a resumed run draws the same batches); weights are initialised
from `torch.manual_seed(seed)`. On one machine with the same torch and thread count, two runs
give bit-identical weights.

Snapshots: `snapshots=(300,)` also saves the model as it is after step 300 (the paper's Figure 7
compares its 50K-step model with the 10K-step checkpoint of the same run) as a complete Hugging Face
folder `<out>/step-300/`, with a training.json that says which step of which recipe it is. A snapshot
is the same run stopped early: the learning-rate schedule is the full run's, so stopping a run of
the same recipe at step 300 gives the same weights.

Passkey phase: `passkey_steps=N` adds N steps after `steps` (numbered on, so their batches are new)
with a fresh AdamW at the constant `passkey_lr`, in which a `passkey_share` of each batch's windows
end in passkey documents that fit inside L: a short fine-tune that teaches the task (mixing them into
pretraining from the start, `passkey_steps=0`, also made the tiny NoPE model generalise beyond L on its
own: measured at shares 0.25 and 0.1, the best uniform scale beyond L stayed near 1, erasing the effect
the figures reproduce). Because the phase starts from a
fresh optimiser, `init_from=FOLDER` (a finished run of `recipe.pretraining()`) runs only the phase and
gives the whole run's model (bit-identical with the same torch and thread count).

Resuming: every `checkpoint_every` steps the model, optimiser and step are saved to
`<out>.partial/checkpoint.pt` (tensors and plain data only, read with `weights_only=True`:
training/checkpoint.py); `resume=True` continues from there. The finished folder is
written under `<out>.partial/` and renamed to `<out>` at the end, so `<out>` is either complete
or absent.

The output is an ordinary Hugging Face folder (config.json, model.safetensors, tokenizer) with
three extra config keys: `train_len` (L), `nope` (bool) and `entropy_lens_recipe` (this
recipe). A NoPE model also carries `rope_parameters = {"rope_type": "linear", "factor": 1e30}`,
which makes every rotary angle 0 in float32, so even a stock `AutoModelForCausalLM` load
computes NoPE; `entropy_lens.load_model` zeroes the rotary frequencies outright.
"""

from __future__ import annotations

import dataclasses
import json
import math
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from entropy_lens.errors import EntropyLensError
from entropy_lens.runs.lock import OutputLock
from entropy_lens.runs.output import check_folder_target
from entropy_lens.runs.training_record import TRAINING_RECORD, read_training_record
from entropy_lens.settings import MAX_COUNT, MAX_SEED, MAX_TOKENS, Checked, setting
from entropy_lens.training.checkpoint import read_checkpoint, write_checkpoint

__all__ = ["TinyRecipe", "build_model", "train_tiny", "training_batch"]

_KINDS = ("nope", "rope", "alibi")
_NOPE_ROPE = {"rope_type": "linear", "factor": 1e30}  # angle = position * inv_freq / 1e30 -> 0


@dataclass(frozen=True)
class TinyRecipe(Checked):
    """Everything that determines the trained weights (recorded in the model's config)."""

    kind: str = setting(
        "nope",
        choices=_KINDS,
        help="position encoding: nope or rope (Llama blocks), alibi (BLOOM blocks: ALiBi, LayerNorm, "
        "GELU MLP of 4 x hidden, biases; --intermediate and --kv-heads do not apply)",
    )
    train_len: int = setting(128, at_least=2, at_most=MAX_TOKENS, help="L, tokens per training sequence")
    hidden: int = setting(192, at_least=2, at_most=1 << 16, help="hidden size")
    intermediate: int = setting(512, at_least=1, at_most=1 << 18, help="MLP intermediate size")
    layers: int = setting(4, at_least=1, at_most=1024, help="decoder layers")
    heads: int = setting(6, at_least=1, at_most=1024, help="query heads")
    # multi-head; 2 (GQA) was tried: a uniform scale then barely helps NoPE
    kv_heads: int = setting(6, at_least=1, at_most=1024, help="key/value heads (a divisor of --heads)")
    vocab: int = setting(2048, at_least=1, at_most=1 << 20, help="byte-level BPE vocabulary size")
    rope_theta: float = setting(10000.0, above=0, help="RoPE base (the rope kind)")
    data: str = setting(
        "austen-minus:persuasion", help="training text; the held-out novel is the evaluation text"
    )
    batch: int = setting(32, at_least=1, at_most=MAX_COUNT, help="sequences per optimiser step")
    steps: int = setting(1500, at_least=1, at_most=MAX_COUNT, help="optimiser steps")
    lr: float = setting(2e-3, above=0, help="peak AdamW learning rate")
    warmup: int = setting(
        100,
        at_least=0,
        at_most=MAX_COUNT,
        help="linear warm-up steps, then cosine decay to min_lr_ratio x lr",
    )
    min_lr_ratio: float = setting(0.1, at_least=0, at_most=1, help="final learning rate / peak")
    weight_decay: float = setting(0.1, at_least=0, help="AdamW weight decay")
    grad_clip: float = setting(1.0, above=0, help="gradient-norm clip")
    seed: int = setting(0, at_least=0, at_most=MAX_SEED, help="initialisation and batch order")
    passkey_share: float = setting(
        0.0,
        at_least=0,
        at_most=1,
        help="share of each batch's windows that end in a passkey document of L/2 to L+1 tokens "
        "(data/passkey.py: random key and depth), so the model can learn the task inside L: in the steps "
        "of --passkey-steps when it is set, else in every step",
    )
    passkey_steps: int = setting(
        0,
        at_least=0,
        at_most=MAX_COUNT,
        help="steps of a passkey phase after --steps: a fresh AdamW at the constant --passkey-lr on batches "
        "with --passkey-share passkey documents (0: no phase)",
    )
    passkey_lr: float = setting(2e-4, above=0, help="learning rate of the passkey phase (--passkey-steps)")

    def check(self) -> None:
        if self.kind not in _KINDS:
            raise EntropyLensError(f"--kind {self.kind!r} is not known; use nope, rope or alibi")
        if not 0 <= self.passkey_share <= 1:
            raise EntropyLensError(f"--passkey-share must be in [0, 1] (got {self.passkey_share})")
        for name in ("train_len", "hidden", "intermediate", "layers", "heads", "kv_heads", "batch", "steps"):
            if getattr(self, name) < 1:
                raise EntropyLensError(f"{name} must be at least 1 (got {getattr(self, name)})")
        if self.hidden % self.heads or self.heads % self.kv_heads:
            raise EntropyLensError(
                f"hidden {self.hidden} must be a multiple of heads {self.heads}, and heads a multiple of "
                f"kv_heads {self.kv_heads}; change one of them"
            )
        if (self.hidden // self.heads) % 2:
            raise EntropyLensError(f"head_dim {self.hidden // self.heads} must be even for rotary embeddings")
        if self.vocab < 258:
            raise EntropyLensError(f"vocab {self.vocab} is too small: a byte-level BPE needs 256 bytes + 2")
        if not (self.lr > 0 and 0 <= self.min_lr_ratio <= 1 and 0 <= self.warmup < self.steps + 1):
            raise EntropyLensError("need lr > 0, 0 <= min_lr_ratio <= 1 and 0 <= warmup <= steps")
        if self.passkey_steps < 0 or self.passkey_lr <= 0:
            raise EntropyLensError("need --passkey-steps >= 0 and --passkey-lr > 0")
        if self.passkey_steps and not self.passkey_share:
            raise EntropyLensError(
                "--passkey-steps needs a --passkey-share above 0 (the phase's passkey documents)"
            )

    @property
    def total_steps(self) -> int:
        """Optimiser steps of the run: --steps, then the passkey phase."""
        return self.steps + self.passkey_steps

    def pretraining(self) -> TinyRecipe:
        """The recipe of this run's first --steps steps as a run of its own (without the passkey phase):
        what a folder given to --init-from must have been trained by."""
        if not self.passkey_steps:
            return self
        plain = TinyRecipe()
        return dataclasses.replace(
            self, passkey_share=plain.passkey_share, passkey_steps=0, passkey_lr=plain.passkey_lr
        )

    @property
    def tokens_per_step(self) -> int:
        return self.batch * self.train_len


def lr_at(recipe: TinyRecipe, step: int) -> float:
    """Learning rate of step `step` (0-based): linear warm-up, then cosine to min_lr_ratio * lr; the
    constant passkey_lr in the passkey phase."""
    if step >= recipe.steps:
        return recipe.passkey_lr
    if step < recipe.warmup:
        return recipe.lr * (step + 1) / recipe.warmup
    progress = (step - recipe.warmup) / max(1, recipe.steps - recipe.warmup)
    floor = recipe.min_lr_ratio
    return recipe.lr * (floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * min(1.0, progress))))


def build_model(recipe: TinyRecipe, vocab_size: int, separator: int) -> Any:
    """A freshly initialised LlamaForCausalLM for `recipe` (seeded), NoPE already applied; for the alibi
    kind a BloomForCausalLM of the same width, depth and heads."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from entropy_lens.models import apply_nope

    if recipe.kind == "alibi":
        return _build_bloom(recipe, vocab_size, separator)

    rope = {"rope_type": "default"} if recipe.kind == "rope" else dict(_NOPE_ROPE)
    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=recipe.hidden,
        intermediate_size=recipe.intermediate,
        num_hidden_layers=recipe.layers,
        num_attention_heads=recipe.heads,
        num_key_value_heads=recipe.kv_heads,
        max_position_embeddings=recipe.train_len,  # the trained length (dynamic NTK scales beyond it)
        rope_parameters={**rope, "rope_theta": recipe.rope_theta},
        tie_word_embeddings=False,
        bos_token_id=separator,
        eos_token_id=separator,
        attn_implementation="sdpa",
    )
    config.train_len = recipe.train_len
    config.nope = recipe.kind == "nope"
    config.entropy_lens_recipe = dataclasses.asdict(recipe)
    torch.manual_seed(recipe.seed)
    model = LlamaForCausalLM(config)
    if config.nope:
        apply_nope(model)
    return model


def _build_bloom(recipe: TinyRecipe, vocab_size: int, separator: int) -> Any:
    import torch
    from transformers import BloomConfig, BloomForCausalLM

    config = BloomConfig(
        vocab_size=vocab_size,
        hidden_size=recipe.hidden,
        n_layer=recipe.layers,
        n_head=recipe.heads,
        tie_word_embeddings=False,
        bos_token_id=separator,
        eos_token_id=separator,
    )
    config.train_len = recipe.train_len
    config.entropy_lens_recipe = dataclasses.asdict(recipe)
    torch.manual_seed(recipe.seed)
    return BloomForCausalLM(config)


def train_tiny(
    recipe: TinyRecipe,
    out: str | Path,
    *,
    resume: bool = False,
    force: bool = False,
    progress: bool = True,
    checkpoint_every: int = 100,
    snapshots: tuple[int, ...] = (),
    init_from: str | Path | None = None,
) -> Path:
    """Train `recipe` and write a Hugging Face folder to `out` (and one per step of `snapshots` in
    `out/step-N/`); see the module docstring. An interrupted run (its `<out>.partial` folder) is
    continued by a plain rerun as by `resume`; `force` discards it, and replaces an existing `out`
    only once the new model is in place. `init_from`, a folder trained by `recipe.pretraining()`, skips
    those steps: only the passkey phase runs (it starts from a fresh optimiser either way, so the
    result is the whole run's), and the folder's snapshots are copied."""
    recipe.check()
    bad = [n for n in snapshots if not 0 < n < recipe.total_steps]
    if bad:
        raise EntropyLensError(
            f"--snapshot {bad[0]} is not a step before the last (1 to {recipe.total_steps - 1}); pass a step "
            "inside the run (the last step is the finished model itself)"
        )
    parent = _check_init_from(recipe, Path(init_from), snapshots) if init_from is not None else None
    out = check_folder_target(out)
    work = out.with_name(out.name + ".partial")
    if out.exists() and not force:
        raise EntropyLensError(f"{out} already exists; pass --force to overwrite it or another --out")
    with OutputLock(out):
        return _train(recipe, out, work, force, progress, checkpoint_every, snapshots, parent)


def _check_init_from(recipe: TinyRecipe, folder: Path, snapshots: tuple[int, ...]) -> dict:
    """The training.json of `folder`, which must hold a finished run of `recipe.pretraining()`."""
    if not recipe.passkey_steps:
        raise EntropyLensError(
            "--init-from needs --passkey-steps: it skips the steps before the passkey phase"
        )
    try:
        facts = read_training_record(folder)
        theirs = TinyRecipe(**facts["recipe"])
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise EntropyLensError(
            f"--init-from {folder} is not a folder written by train-tiny ({err}); pass one, or leave the flag out "
            "to train from the start"
        ) from None
    ours = recipe.pretraining()
    if theirs != ours or "snapshot_step" in facts:
        diff = [k for k, v in dataclasses.asdict(ours).items() if dataclasses.asdict(theirs)[k] != v]
        raise EntropyLensError(
            f"--init-from {folder} was not trained by this recipe's first {recipe.steps} steps "
            f"({', '.join(diff) or 'it is a snapshot'} differ); pass the flags it was trained with"
        )
    lost = [n for n in snapshots if n <= recipe.steps and not (folder / f"step-{n}").is_dir()]
    if lost:
        raise EntropyLensError(f"--init-from {folder} has no step-{lost[0]}/ to keep as --snapshot {lost[0]}")
    return {**facts, "path": str(folder.resolve())}


def _train(recipe, out: Path, work: Path, force, progress, checkpoint_every, snapshots, parent) -> Path:
    import torch

    from entropy_lens.data import load_documents, packed_stream
    from entropy_lens.progress import progress_bar
    from entropy_lens.training.tokenizer import train_bpe

    documents, _ = load_documents(recipe.data)
    tokenizer = train_bpe(documents, recipe.vocab)
    stream, description = packed_stream(tokenizer, recipe.data)
    if len(stream) <= recipe.train_len + 1:
        raise EntropyLensError(
            f"{recipe.data!r} has {len(stream)} tokens, too few for train_len {recipe.train_len}; "
            "pass more --data or a smaller --train-len"
        )
    ckpt_path = work / "checkpoint.pt"
    if work.exists() and (force or not ckpt_path.is_file()):
        if ckpt_path.is_file():
            print(f"entropy-lens: discarded the interrupted run in {work} (--force starts over)", flush=True)
        shutil.rmtree(work)  # a run with no checkpoint yet has nothing to resume
    resume = ckpt_path.is_file()  # a plain rerun continues an interrupted run, as --resume does
    work.mkdir(parents=True, exist_ok=True)
    model = build_model(recipe, len(tokenizer), tokenizer.eos_token_id)
    decay = [p for n, p in model.named_parameters() if p.ndim >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.ndim < 2]  # norms

    def new_optimizer():
        groups = [
            {"params": decay, "weight_decay": recipe.weight_decay},
            {"params": no_decay, "weight_decay": 0},
        ]
        return torch.optim.AdamW(groups, lr=recipe.lr, betas=(0.9, 0.95))

    optimizer = new_optimizer()
    start, log, prior_s = 0, [], 0.0
    if parent is not None and not resume:
        _load_weights(model, Path(parent["path"]), tokenizer)
        start, log, prior_s = recipe.steps, list(parent["log"]), parent["wall_s"]
        for n in snapshots:
            if n <= recipe.steps:
                shutil.copytree(Path(parent["path"]) / f"step-{n}", work / f"step-{n}")
    if resume and ckpt_path.is_file():
        state = read_checkpoint(ckpt_path)
        if state["recipe"] != dataclasses.asdict(recipe):
            raise EntropyLensError(
                f"{work} holds an interrupted run of another recipe; rerun with its flags to finish it, "
                "or pass --force to discard it"
            )
        if progress:
            print(f"entropy-lens: resuming the interrupted run in {work} at step {state['step']}", flush=True)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        start, log, prior_s = state["step"], state["log"], state["wall_s"]
    lost = [n for n in snapshots if n <= start and not (work / f"step-{n}").is_dir()]
    if lost:
        raise EntropyLensError(
            f"the run being resumed is past step {lost[0]} and did not save that snapshot; rerun with --force "
            "to train from the start with it"
        )

    model.train()
    bar = progress_bar(
        total=recipe.total_steps,
        initial=start,
        enabled=progress,
        desc=f"train tiny-{recipe.kind}, threads {torch.get_num_threads()}",
    )
    t0 = time.perf_counter()
    for step in range(start, recipe.total_steps):
        if step == recipe.steps:  # the passkey phase starts from a fresh optimiser
            optimizer = new_optimizer()
        for group in optimizer.param_groups:
            group["lr"] = lr_at(recipe, step)
        ids = torch.from_numpy(training_batch(recipe, stream, tokenizer, step))
        logits = model(input_ids=ids[:, :-1]).logits
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), ids[:, 1:].flatten())
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), recipe.grad_clip)
        optimizer.step()
        elapsed, value = prior_s + time.perf_counter() - t0, loss.detach().item()
        log.append({"step": step + 1, "loss": value, "lr": lr_at(recipe, step), "wall_s": round(elapsed, 2)})
        rate = (step + 1 - start) * recipe.tokens_per_step / max(elapsed - prior_s, 1e-9)
        bar.set_postfix(loss=f"{value:.3f}", tok_s=f"{rate:.0f}")
        bar.update()
        if step + 1 in snapshots:
            _save_folder(model, tokenizer, work / f"step-{step + 1}", _facts(recipe, description, model, log))
        if (step + 1) % checkpoint_every == 0 and step + 1 < recipe.total_steps:
            state = {"recipe": dataclasses.asdict(recipe), "step": step + 1, "log": log, "wall_s": elapsed}
            write_checkpoint(
                {**state, "model": model.state_dict(), "optimizer": optimizer.state_dict()}, ckpt_path
            )
    bar.close()

    model.eval()
    final = work / "model"
    facts = _facts(recipe, description, model, log, prior_s)
    if parent is not None:
        facts["init_from"] = {k: parent[k] for k in ("path", "wall_s", "threads", "torch")}
        facts["pretraining_train_loss_mean_last_50"] = parent["final_train_loss_mean_last_50"]
    _save_folder(model, tokenizer, final, facts)
    for n in snapshots:  # written during the run (a resumed run kept those of its first part)
        (work / f"step-{n}").rename(final / f"step-{n}")
    old = out.with_name(out.name + ".replaced")
    try:  # the model it replaces (--force) goes only once the new one is in place
        if out.exists():
            out.rename(old)
        final.rename(out)
    except OSError as err:
        raise EntropyLensError(
            f"could not move the trained model to {out} ({err.strerror or err}); it is in {final}: move it "
            f"with `mv {final} {out}`"
        ) from None
    shutil.rmtree(old, ignore_errors=True)
    shutil.rmtree(work)
    return out


def training_batch(recipe: TinyRecipe, stream: np.ndarray, tokenizer, step: int) -> np.ndarray:
    """(batch, L + 1) token ids of step `step`: random windows of the stream, the last
    round(passkey_share · batch) of them ending in a passkey document (in the passkey phase, or in every
    step without one). A document has a random length n in [L/2, L + 1] (prompt then answer, a random
    key at a random depth) and follows the window's first L + 1 − n tokens of text and a separator, so
    the answer's position varies: with the answer always at the window's end, the RoPE model learned to
    rely on where it sits, and answered the key rotated one place at any other length. Drawn by (seed,
    step) alone, as the windows."""
    from entropy_lens.data import random_windows
    from entropy_lens.data.passkey import passkey_prompt, random_key, shortest_prompt

    windows = random_windows(stream, recipe.train_len, recipe.batch, recipe.seed, step)
    pretraining = recipe.passkey_steps and step < recipe.steps
    n = 0 if pretraining else round(recipe.passkey_share * recipe.batch)
    rng = np.random.default_rng([recipe.seed, step, 1])
    width = recipe.train_len + 1
    for row in range(recipe.batch - n, recipe.batch):
        key = random_key(rng)
        shortest = min(
            max(width // 2, shortest_prompt(tokenizer, key)), width
        )  # too long: passkey_prompt says
        length = int(rng.integers(shortest, width + 1))
        prompt = passkey_prompt(tokenizer, length=length, depth=rng.uniform(), key=key, rng=rng, width=0.0)
        windows[row, width - length :] = np.concatenate([prompt.ids, prompt.answer])
        if length < width:  # the separator that ends the text before a document
            windows[row, width - length - 1] = tokenizer.eos_token_id
    return windows


def _facts(recipe: TinyRecipe, description: str, model, log: list, prior_s: float = 0.0) -> dict:
    """training.json of a model after the last step of `log` (the finished run, or a snapshot)."""
    import torch

    steps = log[-1]["step"] if log else recipe.total_steps
    tail = [r["loss"] for r in log[-50:]]
    facts = {
        "recipe": dataclasses.asdict(recipe),
        "data": description,
        "parameters": sum(p.numel() for p in model.parameters()),
        "tokens_seen": steps * recipe.tokens_per_step,
        "final_train_loss_mean_last_50": float(np.mean(tail)) if tail else None,
        "wall_s": log[-1]["wall_s"] if log else prior_s,
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "log": [r for r in log if r["step"] % 10 == 0],  # every 10th step
    }
    if recipe.passkey_steps:
        before = [r["loss"] for r in log if recipe.steps - 50 < r["step"] <= recipe.steps]
        facts["pretraining_train_loss_mean_last_50"] = float(np.mean(before)) if before else None
    if steps < recipe.total_steps:
        facts["snapshot_step"] = steps  # a snapshot: the run after `steps` of recipe.total_steps steps
    return facts


def _load_weights(model, folder: Path, tokenizer) -> None:
    """Load a train-tiny folder's weights into `model`, refusing a tokenizer other than this run's."""
    from safetensors.torch import load_file
    from transformers import AutoTokenizer

    theirs = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    if theirs.get_vocab() != tokenizer.get_vocab():
        raise EntropyLensError(f"--init-from {folder} has another tokenizer than this recipe's; retrain it")
    model.load_state_dict(load_file(folder / "model.safetensors"))


def _save_folder(model, tokenizer, folder: Path, facts: dict) -> None:
    if folder.exists():
        shutil.rmtree(folder)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    (folder / TRAINING_RECORD).write_text(json.dumps(facts, indent=1) + "\n")
