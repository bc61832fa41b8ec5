"""The view's settings, declared once (`settings.setting`): `entropy-lens view` generates its flags from
them, and `view(results, **asdict(config))` takes the same names from Python."""

from __future__ import annotations

from dataclasses import dataclass

from entropy_lens.settings import MAX_TOKENS, setting

__all__ = ["ViewConfig"]


@dataclass(frozen=True, kw_only=True)
class ViewConfig:
    labels: tuple[str, ...] | None = setting(
        None,
        type=str,
        nargs="+",
        metavar="NAME",
        help="one name per RESULT, in order (default: the file or folder names)",
    )
    points: int | None = setting(
        None,
        at_least=1,
        at_most=MAX_TOKENS,
        metavar="N",
        help="bins per curve: a longer curve is shown as each bin's mean with its min–max envelope "
        "(default 512, fewer for many heads of several results or row or key statistics, keeping the page "
        "under 10 MB)",
    )
    train_len: int | None = setting(
        None,
        at_least=2,  # as a results meta's train_len must be (view/payload.py)
        at_most=MAX_TOKENS,
        metavar="L",
        help="training length L for the statistics and the fit (default: each result's meta)",
    )
