"""Progress bars that suit where they are shown.

- A terminal (stderr is a TTY): tqdm's live bar, redrawn in place.
- Anywhere else (a log file, a pipe, a notebook, CI): one plain line every `every_s` seconds and a
  last one at the end, because tqdm redraws with carriage returns, which a file keeps as a single
  ever-growing line. A notebook gets the same lines, so no widget (ipywidgets) is needed and no
  "IProgress not found" warning is printed.
- Disabled: a plain, disabled tqdm, so callers use one interface either way.

The libraries' own bars (transformers' "Writing model shards" in save_pretrained, the Hub's downloads)
follow ours inside `library_bars(enabled=...)`: --quiet silences them too.
"""

from __future__ import annotations

import contextlib
import sys

__all__ = ["every_bar_off", "layer_progress", "library_bars", "progress_bar"]


def progress_bar(iterable=None, *, enabled: bool, every_s: float = 10.0, file=None, **kwargs):
    """A tqdm bar over `iterable` (or with `total=`) written to `file` (default stderr)."""
    from tqdm import tqdm

    stream = file if file is not None else sys.stderr
    if not enabled:
        return tqdm(iterable, disable=True, **kwargs)
    isatty = getattr(stream, "isatty", None)
    if isatty is not None and isatty():
        return tqdm(iterable, file=stream, dynamic_ncols=True, **kwargs)
    # mininterval: at most one line per `every_s`; miniters=1: check the clock at every update
    return tqdm(iterable, file=_Lines(stream), mininterval=every_s, miniters=1, ascii=True, **kwargs)


@contextlib.contextmanager
def layer_progress(bar, layers):
    """A long forward's progress, layer by layer: inside the block each forward of one of `layers` (a
    model's decoder layers, in order) advances `bar` by its share of the units `expect(n)` announced for
    the next forward, so a scan of one long sample moves as its layers finish instead of sitting at 0
    until the whole forward is done. Yields `expect`; the shares add up to n exactly."""
    count = len(layers)
    pending = [0]

    def expect(n: int) -> None:
        pending[0] = n

    def advance(index: int):
        def hook(*_):
            n = pending[0]
            bar.update(n * (index + 1) // count - n * index // count)

        return hook

    hooks = [layer.register_forward_hook(advance(i)) for i, layer in enumerate(layers)]
    try:
        yield expect
    finally:
        for hook in hooks:
            hook.remove()


@contextlib.contextmanager
def library_bars(*, enabled: bool):
    """transformers' (and the Hub's) progress bars off inside the block unless `enabled`, then as before."""
    if enabled:
        yield
        return
    from transformers.utils import logging

    was = logging.is_progress_bar_enabled()
    logging.disable_progress_bar()
    try:
        yield
    finally:
        if was:
            logging.enable_progress_bar()


@contextlib.contextmanager
def every_bar_off():
    """Every tqdm bar made inside the block disabled, then as before. Libraries pass `disable=` to their
    bars themselves (lm-eval) or make plain `tqdm.auto` bars (transformers' GGUF conversion), and tqdm
    reads TQDM_DISABLE only when it is imported, so neither an environment variable nor a default turns
    them off: the bars' constructor is wrapped to pass disable=True (every tqdm bar is tqdm.std's)."""
    from tqdm import std

    own = vars(std.tqdm)["__init__"]
    made = std.tqdm.__init__

    def disabled(self, *args, **kwargs):
        made(self, *args, **{**kwargs, "disable": True})

    std.tqdm.__init__ = disabled
    try:
        yield
    finally:
        std.tqdm.__init__ = own


class _Lines:
    """A file for tqdm that turns each redraw ('\\r' + status, padded with spaces) into one line."""

    def __init__(self, stream):
        self.stream = stream

    def write(self, text: str) -> None:
        for part in text.replace("\r", "\n").split("\n"):
            if part.strip():
                self.stream.write(part.rstrip() + "\n")

    def flush(self) -> None:
        self.stream.flush()
