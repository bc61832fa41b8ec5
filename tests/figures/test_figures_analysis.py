"""The numbers behind Figure 17 are pure functions of the binned curves (`analysis.beyond`), checked on
planted curves (tests/beyond_inputs.py) and by hand."""

import math

import numpy as np
import pytest
from beyond_inputs import planted_curves

from entropy_lens.analysis.beyond import (
    edge_spans,
    fading_exponent,
    mean_position,
    sink_share,
    ssmax_vector_fall,
)


def test_the_spans_and_their_mean_position():
    assert edge_spans(16, 128) == ((8, 16), (120, 128))
    assert mean_position((8, 16)) == np.arange(8, 16).mean()


def test_sink_share_counts_the_heads_over_epsilon():
    c = planted_curves(sink=(0, 1))  # one of 6 heads holds 0.5 on the first token, the rest 0.05
    assert sink_share(c, 0, 64) == pytest.approx(1 / 6)
    assert sink_share(c, 0, 64, epsilon=0.01) == 1.0 and sink_share(c, 0, 64, epsilon=0.6) == 0.0


def test_fading_exponent_and_the_ssmax_vector():
    every = planted_curves(fast=(slice(None), slice(None)))  # every head fades as a uniform row: α = −1
    assert fading_exponent(every, 16) == pytest.approx(-1.0, abs=1e-6)
    by_hand = np.mean([math.e**5 / (math.e**5 + i) for i in range(120, 128)]) / np.mean(
        [math.e**5 / (math.e**5 + i) for i in range(8, 16)]
    )
    assert ssmax_vector_fall(16, 128) == pytest.approx(by_hand)
