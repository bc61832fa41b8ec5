"""One generation's record, as GenerationRecorder (recorder.py) keeps it: which forward fed the prompt and
which a generated token, each sequence's left padding, the ids fed and the rows recorded; and what a
generation may be: one row per step (`one_row_per_step`), a prompt whose padding is on the left
(`prompt_padding`). Torch on the host; no hooks here."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

import numpy as np
import torch
from transformers.generation import GenerationMode

from entropy_lens.capture.recorder import key_padding_of
from entropy_lens.errors import EntropyLensError

__all__ = ["Generation", "one_row_per_step", "prompt_padding"]


def one_row_per_step(model, kwargs: dict):
    """generate()'s configuration with `kwargs` applied, where its decoding mode feeds one new query row
    per step (greedy or sampling), whose row is the one that chose the token; EntropyLensError in one line
    for the others: beam search reorders the cache between steps, assisted and prompt-lookup decoding
    verify several candidate rows per forward and keep some, contrastive search and DoLa feed or score
    candidates the same way."""
    if kwargs.get("custom_generate") is not None:
        raise EntropyLensError(
            "GenerationRecorder follows generate()'s own greedy and sampling loops; custom_generate= runs a "
            "loop it cannot follow: leave it out, or record your loop's forwards one token at a time"
        )
    config = copy.deepcopy(kwargs.get("generation_config") or model.generation_config)
    config.update(**{k: v for k, v in kwargs.items() if k != "generation_config" and hasattr(config, k)})
    mode = config.get_generation_mode(kwargs.get("assistant_model"))
    if mode not in (GenerationMode.GREEDY_SEARCH, GenerationMode.SAMPLE):
        if "beam" in mode.value:
            why = f" (num_beams={config.num_beams}) reorders the cache between steps"
        elif mode is GenerationMode.ASSISTED_GENERATION:
            why = " (an assistant model or prompt lookup) verifies several candidate rows per forward"
        else:
            why = " feeds several rows per step"
        raise EntropyLensError(
            f"GenerationRecorder records the one row each step feeds; {mode.value.replace('_', ' ')}{why}: "
            "generate with num_beams=1, no assistant model, prompt_lookup_num_tokens or dola_layers (greedy "
            "or do_sample=True)"
        )
    return config


def prompt_padding(mask, B: int, T: int) -> torch.Tensor:
    """(B,) int64: each sequence's left padding, the position of its first real token, from the prompt's
    first forward's mask: 2-D (B, T) padding; or the 4-D causal mask (B|1, 1, T, S) generate builds for a
    pre-allocated cache (a dict of them by layer type), whose prompt keys are its first T; None: none.
    EntropyLensError in one line for right padding (a real token before a padded one), a sequence without a
    real token, or a 4-D mask that is not causal with key padding."""
    if mask is None:
        return torch.zeros(B, dtype=torch.int64)
    if isinstance(mask, dict) or mask.ndim == 4:
        mask = key_padding_of(mask, B, T)
        if mask is None:
            raise EntropyLensError(
                "the prompt's attention mask is not causal with key padding, so GenerationRecorder cannot place "
                "its tokens; pass generate() the 2-D attention_mask (B, prompt) of a left-padded batch"
            )
    real = (mask[:, :T] != 0).cpu()  # a mask may cover a pre-allocated cache's later slots too
    first = real.to(torch.uint8).argmax(-1)
    holes = real != (torch.arange(real.shape[1]) >= first[:, None])
    if bool(holes.any()):
        b = int(holes.any(-1).nonzero()[0])
        what = (
            "has no real token"
            if not bool(real[b].any())
            else "has padding after a real token (right padding)"
        )
        raise EntropyLensError(
            f"sequence {b} of the prompt {what}; GenerationRecorder counts positions from each sequence's first "
            "real token: pad on the left (tokenizer.padding_side = 'left'), as generate() asks of a decoder"
        )
    return first.long()


@dataclass
class Generation:
    """One generation's record: a generate() call, or the forwards of a decode loop of your own. The
    prompt is its first `prompt_fed` positions fed (generate's input; else the first forward's), fed in one
    forward or in chunks; every forward after feeds one token, whose row it records."""

    prompt_fed: int | None = None
    closed: bool = False  # its generate() returned
    sequences: torch.Tensor | None = None  # generate()'s output
    eos: tuple = ()  # (the end token generate used,)
    batch: int = 0
    fed_len: int = 0  # positions fed so far, padding included (this forward's with them)
    padding: torch.Tensor | None = None  # (B,) each sequence's left padding, on the host
    prompt_ids: list = field(default_factory=list)  # the prompt's ids per forward (B, T), −1 unknown
    fed: list = field(default_factory=list)  # the id each forward after the prompt fed (B,)
    steps: list = field(default_factory=list)  # per recorded forward: {stat: (B, layers, heads[, values])}
    _on: dict = field(default_factory=dict)  # device -> (padding, prompt_len) there

    def begin(self, B: int, padding: torch.Tensor) -> None:
        self.batch, self.padding = B, padding

    def feed(self, B: int, T: int, ids, mask, seen: int | None) -> None:
        """A forward of T positions on a cache of `seen` tokens (None: no cache), its 2-D mask or None:
        checked against the generation's batch, padding and steps. A model that keeps no cache feeds
        the whole sequence again at each step, one position more: its positions restart at 0."""
        if B != self.batch:
            raise EntropyLensError(
                f"a forward of {B} sequences continues a generation of {self.batch} inside the "
                "GenerationRecorder; call rec.result() and start the new batch in a new generate() call"
            )
        again = bool(self.fed_len) and not seen and T > 1  # the whole sequence again, without a cache
        if again and T != self.fed_len + 1:
            raise EntropyLensError(
                f"a forward without a cache fed {T} positions after {self.fed_len}; GenerationRecorder "
                "records one generated token per forward: feed the sequence with one token more, or a cache"
            )
        before = 0 if again else self.fed_len
        if mask is not None and before:
            self.check_mask(mask, before + T)
        if self.prompt_fed is None:
            self.prompt_fed = T
        if not again and before >= self.prompt_fed and T > 1:  # after the prompt, one token per step
            raise EntropyLensError(
                f"a forward after the prompt fed {T} positions; GenerationRecorder records one generated "
                "token per forward (each step's row): feed one token per step"
            )
        self.fed_len = before + T
        ids = ids.detach().cpu().numpy() if isinstance(ids, torch.Tensor) and ids.ndim == 2 else None
        if before < self.prompt_fed and not again:
            self.prompt_ids.append(ids if ids is not None else np.full((B, T), -1, dtype=np.int64))
        else:
            self.fed.append(ids[:, -1] if ids is not None else np.full(B, -1, dtype=np.int64))

    def check_mask(self, mask: torch.Tensor, fed: int) -> None:
        """A later forward's 2-D mask over `fed` positions: the prompt's left padding, then real tokens;
        past them, the unwritten slots of a pre-allocated cache, masked (BLOOM's generate pads its mask
        to the cache's length)."""
        real = (mask != 0).cpu()
        expected = torch.arange(max(fed, real.shape[1]))[None] >= self.padding[:, None]
        expected[:, fed:] = False
        if real.shape[1] < fed or not torch.equal(real, expected):
            raise EntropyLensError(
                f"the attention mask of the forward at position {fed - 1} is not the prompt's left padding "
                "followed by real tokens; GenerationRecorder counts real positions: extend the mask with ones "
                "for every token fed"
            )

    @property
    def in_prompt(self) -> bool:
        """The last forward fed part of the prompt before its last position (no token's row)."""
        return self.prompt_fed is not None and self.fed_len < self.prompt_fed

    @property
    def prompt_len(self) -> np.ndarray:
        """(B,) each sequence's real prompt tokens."""
        return (self.prompt_fed - self.padding).numpy().astype(np.int64)

    @property
    def prompt(self) -> np.ndarray:
        """(B, max prompt_len) each sequence's real prompt ids, −1 after it (or not known)."""
        fed = np.concatenate(self.prompt_ids, 1)[:, : self.prompt_fed]
        prompt_len = self.prompt_len
        out = np.full((self.batch, int(prompt_len.max(initial=0))), -1, dtype=np.int64)
        for b, (P, start) in enumerate(zip(prompt_len, self.padding.tolist(), strict=True)):
            out[b, :P] = fed[b, start : start + P]
        return out

    def padding_on(self, device) -> torch.Tensor:
        return self._device(device)[0]

    def prompt_len_on(self, device) -> torch.Tensor:
        return self._device(device)[1]

    def _device(self, device):
        if device not in self._on:  # copied once per generation and device
            self._on[device] = (self.padding.to(device), torch.from_numpy(self.prompt_len).to(device))
        return self._on[device]
