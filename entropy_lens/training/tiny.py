"""Train a tiny Llama (NoPE or RoPE), or its ALiBi twin (BLOOM blocks), on the bundled corpus: the
project's embedded default models.

    from entropy_lens.training import TinyRecipe, train_tiny
    train_tiny(TinyRecipe(kind="nope"), "out/tiny-nope")

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
end in passkey documents that fit inside L: a short fine-tune that teaches the task (documents mixed
into pretraining from the start, `passkey_steps=0`, can make the tiny NoPE model generalise beyond L
on its own and erase the effect the figures reproduce: docs/internals/layout.md). Because the phase
starts from a
fresh optimiser, `init_from=FOLDER` (a finished run of `recipe.pretraining()`) runs only the phase and
gives the whole run's model (bit-identical with the same torch and thread count).

Resuming: every `checkpoint_every` steps, and on Ctrl-C or SIGTERM after the last whole step (never
mid-update), the model, optimiser and step are saved to `<out>.partial/checkpoint.pt` (tensors and plain data only, read with `weights_only=True`:
training/checkpoint.py); `resume=True` continues from there. The finished folder is
written under `<out>.partial/` and renamed to `<out>` at the end, so `<out>` is either complete
or absent.

Monitor: `monitor=MonitorSettings(monitor="entropy")` (--monitor) records per-head attention statistics of
every `monitor_every`-th step's forward into `<out>/attention-history.npz`, without changing a number of
the run; a resumed run continues its history (training/watch.py).

The output is an ordinary Hugging Face folder (training/model.py: its extra config keys) with a
training.json beside the weights: the recipe, the loss log, wall time (training/training_record.py reads it).
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import time
from pathlib import Path

import numpy as np

from entropy_lens.errors import EntropyLensError
from entropy_lens.monitor.settings import MonitorSettings
from entropy_lens.progress import library_bars
from entropy_lens.results import check_regular_target
from entropy_lens.results.files import beside_record
from entropy_lens.runs.lock import OutputLock
from entropy_lens.runs.output import check_folder_target
from entropy_lens.training.batches import training_batch
from entropy_lens.training.checkpoint import read_checkpoint, write_checkpoint
from entropy_lens.training.model import build_model
from entropy_lens.training.recipe import TinyRecipe, lr_at
from entropy_lens.training.resumable import HISTORY_NOTE, checkpoint_on_interrupt, history_note
from entropy_lens.training.training_record import TRAINING_RECORD, read_training_record

__all__ = ["train_tiny"]


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
    monitor: MonitorSettings | None = None,
) -> Path:
    """Train `recipe` and write a Hugging Face folder to `out` (and one per step of `snapshots` in
    `out/step-N/`); see the module docstring. An interrupted run (its `<out>.partial` folder) is
    continued by a plain rerun as by `resume`; `force` discards it, and replaces an existing `out`
    only once the new model is in place. `init_from`, a folder trained by `recipe.pretraining()`, skips
    those steps: only the passkey phase runs (it starts from a fresh optimiser either way, so the
    result is the whole run's), and the folder's snapshots are copied."""
    from entropy_lens.monitor.settings import check_monitor

    recipe.check()
    check_monitor(monitor)  # before any work
    bad = [n for n in snapshots if not 0 < n < recipe.total_steps]
    if bad:
        raise EntropyLensError(
            f"--snapshot {bad[0]} is not a step before the last (1 to {recipe.total_steps - 1}); pass a step "
            "inside the run (the last step is the finished model itself)"
        )
    parent = _check_init_from(recipe, Path(init_from), snapshots) if init_from is not None else None
    out = check_folder_target(out)
    work = check_regular_target(out.with_name(out.name + ".partial"), folder=True)
    if out.exists() and not force:
        raise EntropyLensError(f"{out} already exists; pass --force to overwrite it or another --out")
    with OutputLock(out), library_bars(enabled=progress):  # --quiet: save_pretrained's bars too
        return _train(recipe, out, work, force, progress, checkpoint_every, snapshots, parent, monitor)


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


def _train(
    recipe, out: Path, work: Path, force, progress, checkpoint_every, snapshots, parent, monitor
) -> Path:
    import torch

    from entropy_lens.data import load_documents, packed_stream
    from entropy_lens.progress import progress_bar
    from entropy_lens.training.tokenizer import train_bpe
    from entropy_lens.training.watch import HISTORY, Watch

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
    start, log, prior_s, note = 0, [], 0.0, None
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
        note = state.get(HISTORY_NOTE)  # what its --monitor history recorded (training/resumable.py)
    lost = [n for n in snapshots if n <= start and not (work / f"step-{n}").is_dir()]
    if lost:
        raise EntropyLensError(
            f"the run being resumed is past step {lost[0]} and did not save that snapshot; rerun with --force "
            "to train from the start with it"
        )

    model.train()
    watch = Watch(monitor, model, work=work, start=start, resumed=resume, progress=progress, note=note)
    work.mkdir(parents=True, exist_ok=True)  # after the monitor's refusals: a refused run leaves nothing
    bar = progress_bar(
        total=recipe.total_steps,
        initial=start,
        enabled=progress,
        desc=f"train tiny-{recipe.kind}, threads {torch.get_num_threads()}",
    )

    def save(at: int) -> None:
        """The checkpoint after step `at` (the last whole one); the history first: a kill between the two
        leaves records past the checkpoint (dropped on resume), never a gap."""
        if at >= recipe.total_steps or at == start:
            return  # finished (the folder is written next), or no step since the run (re)started
        state = {"recipe": dataclasses.asdict(recipe), "step": at, "log": log, "wall_s": elapsed}
        history = watch.save(work / HISTORY)
        if history is None:  # a history of an earlier part would leave a gap in a later --monitor's
            (work / HISTORY).unlink(missing_ok=True)
        state |= history_note(history, at)
        write_checkpoint(
            {**state, "model": model.state_dict(), "optimizer": optimizer.state_dict()}, ckpt_path
        )

    t0 = time.perf_counter()
    # `done`: the steps whose update (weights, optimiser, log) is whole; `updating` is True from the
    # weights' change until `done` says so, so an interrupt there is not saved (the last checkpoint stands)
    done, updating, elapsed = start, False, prior_s
    with watch, checkpoint_on_interrupt(lambda: None if updating else done, save):
        for step in range(start, recipe.total_steps):
            if step == recipe.steps:  # the passkey phase starts from a fresh optimiser
                optimizer = new_optimizer()
            for group in optimizer.param_groups:
                group["lr"] = lr_at(recipe, step)
            ids = torch.from_numpy(training_batch(recipe, stream, tokenizer, step))
            watch.step = step + 1  # the history's steps are the optimiser steps
            logits = model(input_ids=ids[:, :-1]).logits
            loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), ids[:, 1:].flatten())
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), recipe.grad_clip)
            value = loss.detach().item()
            updating = True
            optimizer.step()
            elapsed = prior_s + time.perf_counter() - t0
            log.append(
                {"step": step + 1, "loss": value, "lr": lr_at(recipe, step), "wall_s": round(elapsed, 2)}
            )
            done = step + 1
            updating = False  # an interrupt between these two lines is not saved: still exact
            rate = (step + 1 - start) * recipe.tokens_per_step / max(elapsed - prior_s, 1e-9)
            bar.set_postfix(loss=f"{value:.3f}", tok_s=f"{rate:.0f}", refresh=False)  # shown by update
            bar.update()
            if step + 1 in snapshots:
                _save_folder(
                    model, tokenizer, work / f"step-{step + 1}", _facts(recipe, description, model, log)
                )
            if (step + 1) % checkpoint_every == 0 and step + 1 < recipe.total_steps:
                save(step + 1)
    bar.close()

    model.eval()
    final = work / "model"
    facts = _facts(recipe, description, model, log, prior_s)
    if parent is not None:
        facts["init_from"] = {k: parent[k] for k in ("path", "wall_s", "threads", "torch")}
        # the pretraining's folder named from the model's (results.files.beside_record): no machine's path
        facts["init_from"]["path"] = beside_record(parent["path"], out / TRAINING_RECORD)
        facts["pretraining_train_loss_mean_last_50"] = parent["final_train_loss_mean_last_50"]
    _save_folder(model, tokenizer, final, facts)
    watch.save(final / HISTORY)
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
