"""Which tests ran past the `slow` marker's line without it (tests/conftest.py lists them at the end of a
run): a test over SLOW_SECONDS belongs to `make test`, not to the inner loop `pytest -m "not slow"`.

    unmarked_slow(reports)   ["nodeid (12.3 s)", ...] of the call reports over the line without `slow`

Only the test's own call counts: a session fixture's set-up (the figures' pipeline, the docs' build) is
paid once by whichever test comes first. A loaded machine stretches every duration, so the list is a
notice to read, not a failure.
"""

from __future__ import annotations

SLOW_SECONDS = 5.0


def unmarked_slow(reports) -> list[str]:
    """The call reports (pytest TestReport: nodeid, when, duration, keywords) over SLOW_SECONDS whose test
    carries no `slow` marker, slowest first."""
    found = [
        report
        for report in reports
        if report.when == "call" and report.duration > SLOW_SECONDS and "slow" not in report.keywords
    ]
    return [f"{r.nodeid} ({r.duration:.1f} s)" for r in sorted(found, key=lambda r: -r.duration)]
