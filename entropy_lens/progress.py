"""Progress bars: tqdm.auto (a widget in Jupyter, text in a terminal) when shown, a disabled plain
tqdm otherwise, so a quiet run in Jupyter without ipywidgets prints no TqdmWarning."""

from __future__ import annotations


def progress_bar(iterable=None, *, enabled: bool, **kwargs):
    if enabled:
        from tqdm.auto import tqdm
    else:
        from tqdm import tqdm
    return tqdm(iterable, disable=not enabled, dynamic_ncols=True, **kwargs)
