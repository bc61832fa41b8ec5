"""The capture session's report protocol (capture/reports.py): what a consumer asks is what it overrides,
and a fan-out hands each report to each consumer that asks for it, in order."""

import pytest
import torch

from entropy_lens.capture.reports import FanOut, Reports, fan_out
from entropy_lens.errors import EntropyLensError


class Log(Reports):
    """Row statistics and non-finite layers, logged as (name, layer, ...)."""

    def __init__(self, log, name, *, checks=False):
        self.log, self.name, self.stats_check_inputs = log, name, checks

    def report_stats(self, layer, stats, key_offset, *, inputs_finite=None):
        self.log.append((self.name, "stats", layer, key_offset, inputs_finite))

    def report_nonfinite(self, layer, why):
        self.log.append((self.name, "nonfinite", layer, why))


class Keys(Reports):
    def __init__(self, log):
        self.log = log

    def report_key_state(self, layer, state, key_offset):
        self.log.append(("keys", layer, key_offset))


class Rows(Reports):
    def __init__(self, log, probe_rows, keep_block=None):
        self.log, self.probe_rows, self.keep_block = log, probe_rows, keep_block

    def report_rows(self, layer, p):
        self.log.append(("rows", layer, tuple(p.shape)))

    def report_block(self, layer, probs):
        self.log.append(("block", layer))


def test_a_consumer_asks_for_what_it_overrides():
    nothing, log = Reports(), []
    assert not (nothing.asks_stats or nothing.asks_nonfinite or nothing.asks_key_state)
    assert nothing.probe_rows == 0 and nothing.keep_block is None and not nothing.stats_check_inputs
    stats = Log(log, "a")
    assert stats.asks_stats and stats.asks_nonfinite and not stats.asks_key_state
    assert Keys(log).asks_key_state and not Keys(log).asks_stats


def test_a_fan_out_hands_each_report_to_each_consumer_that_asks_in_order():
    log = []
    first, second, keys = Log(log, "a", checks=True), Log(log, "b"), Keys(log)
    both = fan_out(Reports(), first, second, keys)
    assert isinstance(both, FanOut) and both.asks_stats and both.asks_key_state and both.asks_nonfinite
    assert not both.stats_check_inputs  # "b" does not take the unread check
    both.report_stats(3, {}, 2)
    both.report_nonfinite(3, "nan")
    both.report_key_state(3, {}, 0)
    assert log == [
        ("a", "stats", 3, 2, None),
        ("b", "stats", 3, 2, None),
        ("a", "nonfinite", 3, "nan"),
        ("b", "nonfinite", 3, "nan"),
        ("keys", 3, 0),
    ]
    assert fan_out(Log(log, "c", checks=True), Log(log, "d", checks=True)).stats_check_inputs


def test_a_fan_out_of_one_asking_consumer_is_that_consumer():
    keys = Keys([])
    assert fan_out(Reports(), keys) is keys


def test_a_fan_out_hands_each_consumer_its_own_last_rows_and_refuses_two_blocks():
    log = []
    both = fan_out(Rows(log, 3, keep_block=((0, 1), (0, 2))), Rows(log, 1))
    assert both.probe_rows == 3 and both.keep_block == ((0, 1), (0, 2))
    both.report_rows(0, torch.zeros(1, 2, 3, 5))
    both.report_block(0, torch.zeros(1, 2, 1, 2))
    assert log == [("rows", 0, (1, 2, 3, 5)), ("rows", 0, (1, 2, 1, 5)), ("block", 0)]
    with pytest.raises(EntropyLensError, match="keep it in one of them"):
        fan_out(Rows(log, 0, keep_block=((0, 1), (0, 1))), Rows(log, 0, keep_block=((1, 2), (0, 1))))
