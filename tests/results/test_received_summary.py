"""The summary's attention-received block ranks received_mean only over keys enough counted rows see: the
last keys of a causal scan are seen by 1, 2, ... rows, and a mean over so few rows is noise that read as
"the end of the text attracts attention" (issue 70)."""

import re

import numpy as np
from view_inputs import planted, with_keys

from entropy_lens.results.spans import summary
from entropy_lens.statistics import RANKED_ROWS


def ranked(line: str) -> list[int]:
    """The positions a layer's line ranks (after its layer and first-key columns)."""
    return [int(j) for j in re.findall(r"(\d+): [\d.]+", line.split(maxsplit=2)[2])]


def block(result) -> list[str]:
    lines = summary(result).splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("attention received by key position"))
    return lines[start:]


def test_the_last_keys_few_rows_see_are_not_ranked_and_the_minimum_is_said():
    r = with_keys(planted(T=256))
    mean = r.stats["received_mean"]
    mean[:, :, -5:] = 0.9  # the end: each seen by at most 5 rows, a large mean over nothing
    mean[:, :, 100] = 0.5  # a heavy hitter that every later row sees
    lines = block(r)
    assert f"of the keys at least {RANKED_ROWS} counted rows see" in lines[1]
    for line in lines[2:]:
        assert ranked(line)[0] == 100 and max(ranked(line)) <= 256 - RANKED_ROWS, line
    # with a query window of 32 rows, half of them: keys seen by at least 16 of the counted rows
    windowed = with_keys(planted(T=256), query_window=32)
    windowed.stats["received_mean"][:, :, -15:] = 0.9
    lines = block(windowed)
    assert "of the keys at least 16 counted rows see" in lines[1]
    assert all(max(ranked(line)) <= 240 for line in lines[2:])


def test_attention_mass_is_ranked_over_every_key():
    """received (the mass, at most the rows that see a key) needs no minimum: its tail is small anyway."""
    r = with_keys(planted(T=256))
    del r.stats["received_mean"], r.stats["received_mean_sq"]
    r.stats["received"][:, :, 255] = 1e3
    lines = block(r)
    assert "of the keys" not in lines[1] and all(ranked(line)[0] == 255 for line in lines[2:])
    assert np.isfinite(r.stats["received"]).all()
