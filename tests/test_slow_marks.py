"""The end-of-run list of tests over the slow line without the `slow` marker (tests/slow_marks.py)."""

from types import SimpleNamespace

from slow_marks import SLOW_SECONDS, unmarked_slow


def _report(nodeid, duration, *marks, when="call"):
    return SimpleNamespace(nodeid=nodeid, when=when, duration=duration, keywords=dict.fromkeys(marks, 1))


def test_only_unmarked_calls_over_the_line_are_named_slowest_first():
    reports = [
        _report("a", SLOW_SECONDS + 1),
        _report("b", SLOW_SECONDS + 9),
        _report("c", SLOW_SECONDS + 9, "slow"),  # marked
        _report("d", SLOW_SECONDS),  # on the line
        _report("e", SLOW_SECONDS + 9, when="setup"),  # a fixture's set-up, not the test
    ]
    assert unmarked_slow(reports) == [f"b ({SLOW_SECONDS + 9:.1f} s)", f"a ({SLOW_SECONDS + 1:.1f} s)"]
    assert unmarked_slow([]) == []
