"""train-tiny: the project's own tiny models (the embedded default), trained and described.

    recipe.py      TinyRecipe: everything that determines the weights; lr_at, the schedule
    model.py       build_model: the seeded Llama (NoPE, RoPE) or BLOOM (ALiBi) of a recipe
    batches.py     training_batch: step t's windows and passkey documents, drawn from (seed, t)
    tokenizer.py   train_bpe: the byte-level BPE trained on the recipe's text
    checkpoint.py  the resumable checkpoint (tensors and plain data, read with weights_only=True)
    tiny.py        train_tiny: the run (resume, snapshots, the passkey phase, --init-from), its folder
    report.py      the model cards: scans and passkey runs of the trained models
    training_record.py  a train-tiny model's training.json read (its steps, for the figures' runs)
    watch.py       train-tiny's --monitor: the monitor of its optimiser steps, its history continued
    head_search.py the per-head λ(h) search (every weight frozen, the scales trained; search-heads)
    head_search_state.py  its checkpoint (<out>.partial/): resume exactly, other flags refused
    resumable.py   what both loops' checkpoints share: the checked checkpoint file, the save on Ctrl-C or
                   SIGTERM, the monitor history continued across the interruption

Every loop that trains lives here, with its checkpoints and histories. It sits above `runs`
(docs/internals/layout.md): it writes with the runs' one-writer lock and output checks, its model cards
are scans and passkey runs, and it watches its own steps with `monitor`.
"""

from entropy_lens.training.model import build_model
from entropy_lens.training.recipe import TinyRecipe
from entropy_lens.training.tiny import train_tiny
from entropy_lens.training.tokenizer import train_bpe

__all__ = ["TinyRecipe", "build_model", "train_bpe", "train_tiny"]
