"""`KeySums`: the recorder's key statistics (attention received by each key) summed over sequences, where a
decode step continues its sequence instead of counting as another one.

    sums = KeySums(n_layers, n_heads, key_stats)
    sums.begin_forward(attention_mask)          # a forward starts: its 2-D mask (B, S), or None
    sums.add_state(layer, state, key_offset)    # each layer's column state {"sum", "max", "count"}
    sums.read()                                 # as HostSums.read: {name: (layers, heads, n), "count": (n,)}

A forward whose rows follow cached keys (key offset S − T > 0: `model.generate()`'s decode steps, a
prefill continued with `past_key_values`) adds its rows' column state to the live sequences' states,
key by key (sums and counts added, maxima kept: capture/received.py's `combined`), so key j's
`received` is Σ_i p_ij over every row of the sequence, prefill and decode steps together, exactly as
one forward over the same tokens gives it. A forward whose rows start at key 0 begins new sequences:
the live ones are finished first, their statistics read off their states (`read_received`) and summed
into a HostSums as one sample per batch row (placed by their last forward's 2-D mask). `read` finishes
a copy of the live sequences, so a decode step after a read still continues them; `drain_into`
finishes them for good.

A forward with cached keys that do not line up with the live sequences (another batch size, a cache
that drops keys: a sliding-window or static cache) is refused in one line: its keys are not the
sequence's, and counting its rows as another sample would misstate every key's mean.
"""

from __future__ import annotations

import numpy as np
import torch

from entropy_lens.capture.accumulate import HostSums
from entropy_lens.capture.received import combined
from entropy_lens.errors import EntropyLensError
from entropy_lens.flags import did_you_mean
from entropy_lens.kernels.received import read_received
from entropy_lens.kernels.stats import sum_names
from entropy_lens.statistics import KEY_STATISTICS, reduction_of


def check_key_name(name) -> None:
    """EntropyLensError in one line, with the close match, unless `name` is a key statistic or its square
    ("received", "received_sq"): a misspelt name is no statistic merely not recorded."""
    known = sum_names(tuple(KEY_STATISTICS))
    if name not in known:
        raise EntropyLensError(
            f"{name!r} is no key statistic{did_you_mean([name], known)}; pass one of {', '.join(known)}"
        )


class KeySums:
    """Key statistics over sequences (module docstring): live column states per layer for the sequences a
    decode step may continue, and a HostSums of the finished ones."""

    def __init__(self, n_layers: int, n_heads: int, key_stats: tuple[str, ...], check=lambda: None):
        """`check`: called before every read, to refuse forwards whose inputs were not finite (the row sums'
        `HostSums.check_inputs`: they hold each layer's check)."""
        self.n_layers, self.n_heads, self.key_stats = n_layers, n_heads, tuple(key_stats)
        self._check = check
        self._sums = HostSums(n_layers, n_heads)
        self._live: dict[int, dict[str, torch.Tensor]] = {}  # layer -> {"sum", "max", "count"} (B, Hq, S)
        self._live_mask = None  # the 2-D mask over the live sequences' keys (their last forward's)
        self._mask = None  # this forward's 2-D mask
        self._continues: bool | None = None  # decided at the forward's first report

    @property
    def stats(self) -> list[str]:
        """The key statistics recorded so far."""
        return list(self._sums.stats) or (list(self.key_stats) if self._live else [])

    def begin_forward(self, mask: torch.Tensor | None) -> None:
        """A forward starts; `mask`: its 2-D attention mask (B, S), or None."""
        self._mask, self._continues = mask, None
        self._sums.begin_forward(mask)

    def release_mask(self) -> None:
        """Forget the forward's mask (the recorder's exit); the live states keep theirs."""
        self._mask = None
        self._sums.release_mask()

    def add_state(self, layer: int, state: dict[str, torch.Tensor], key_offset: int) -> None:
        """One layer's column state of this forward's rows over its S keys, the rows at key offset
        `key_offset` (S − T): continued into the live sequences, or starting new ones."""
        B, S = state["sum"].shape[0], state["sum"].shape[-1]
        if self._continues is None:  # the forward's first report decides for all its layers
            live = self._live.get(layer)
            lines_up = live is not None and live["sum"].shape[0] == B and live["sum"].shape[-1] == key_offset
            if key_offset > 0 and live is not None and not lines_up:
                raise EntropyLensError(
                    f"layer {layer}: {S - key_offset} rows follow {key_offset} cached keys, but the recorded "
                    f"sequences ({live['sum'].shape[0]} of {live['sum'].shape[-1]} keys) do not end there; key "
                    "statistics across decode steps need a cache that keeps every key (DynamicCache)"
                )
            self._continues = key_offset > 0 and lines_up
            if not self._continues:
                self._finish(self._sums, self._live)
                self._live = {}
            self._live_mask = self._mask
        if self._continues:
            prev = self._live[layer]
            widened = {name: torch.nn.functional.pad(t, (0, S - key_offset)) for name, t in prev.items()}
            state = combined([widened, state])
        self._live[layer] = {name: t.detach() for name, t in state.items()}

    def _finish(self, sums: HostSums, live: dict[int, dict[str, torch.Tensor]]) -> None:
        """Sum the `live` sequences' statistics into `sums`: one sample per batch row, counted once."""
        for i, layer in enumerate(sorted(live)):
            values = read_received(live[layer], self.key_stats)
            sums.add(layer, values, 0, mask=self._live_mask, counts=i == 0)

    def read(self) -> dict[str, np.ndarray]:
        """HostSums.read's {sum name: (layers, heads, n) float64, "count": (n,) int64}, the live sequences
        included as if finished (they stay live: a later decode step continues them)."""
        self._check()
        done = self._sums.read()
        if not self._live:
            return done
        live = HostSums(self.n_layers, self.n_heads)
        self._finish(live, self._live)
        return merged(done, live.read())

    def drain_into(self, sums: dict[str, torch.Tensor]) -> None:
        """Finish the live sequences and add everything into the caller's sums (HostSums.drain_into)."""
        self._check()
        self._finish(self._sums, self._live)
        self._live = {}
        self._sums.drain_into(sums)


def merged(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Two HostSums read-outs as one: each sum combined by its reduction over the longer length (the shorter
    padded with its identity), the counts added."""
    n = max(a["count"].shape[-1], b["count"].shape[-1])
    out = {}
    for name in {**a, **b}:
        identity = 0 if name == "count" else reduction_of(name).identity
        parts = [x[name] for x in (a, b) if name in x]
        parts = [
            np.pad(p, [(0, 0)] * (p.ndim - 1) + [(0, n - p.shape[-1])], constant_values=identity)
            for p in parts
        ]
        if name == "count":
            out[name] = sum(parts)
        else:
            combine = reduction_of(name).combine
            out[name] = (
                parts[0]
                if len(parts) == 1
                else combine(torch.from_numpy(parts[0]), torch.from_numpy(parts[1])).numpy()
            )
    return out
