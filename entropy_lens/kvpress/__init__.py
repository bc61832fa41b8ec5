"""NVIDIA's kvpress (KV-cache compression "presses") scored through the lens: the optional extra
`kvpress` (docs/guides/kvpress.md states the versions it pins).

    ObservedAttentionPress(compression_ratio=..., backend="auto")
        kvpress's ObservedAttentionPress (a subclass of it: same name, arguments and scores), its
        `score` from `attention_received` instead of eager attention's T × T weights: it runs on sdpa
        and in O(T) memory, in kvpress's `kv-press-text-generation` pipeline and its `press(model)`
        context (entropy_lens/kvpress/observed.py)
    DuoAttentionPress(head_compression_ratio=..., pattern=FOLDER)
        kvpress's DuoAttentionPress on the streaming/retrieval pattern the lens measured for any model
        (`analysis.head_profile(result).export(FOLDER)`), nothing fetched (entropy_lens/kvpress/duo.py)

Importing this package without kvpress installed raises EntropyLensError naming the fix.
"""

from __future__ import annotations

try:
    import kvpress  # noqa: F401 - the extra's presence, checked once here
except ImportError as e:
    from entropy_lens.errors import EntropyLensError

    raise EntropyLensError(
        f"entropy_lens.kvpress needs kvpress ({e}): in a clone run `make kvpress-env` and use "
        ".venv-kvpress/bin/python, or pip install -e '.[kvpress]' in a venv of its own (kvpress 0.5.5 needs "
        "transformers < 5.3; docs/guides/kvpress.md)"
    ) from None

from entropy_lens.kvpress.duo import DuoAttentionPress, load_pattern
from entropy_lens.kvpress.observed import ObservedAttentionPress

__all__ = ["DuoAttentionPress", "ObservedAttentionPress", "load_pattern"]
