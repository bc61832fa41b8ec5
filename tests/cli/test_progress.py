"""Progress output off a terminal: whole lines, a few of them, never one long carriage-return line."""

import io

from entropy_lens.progress import progress_bar


def test_off_a_tty_progress_is_plain_lines_every_so_often():
    log = io.StringIO()
    bar = progress_bar(total=1000, enabled=True, every_s=3600, file=log, desc="scan m, threads 1", unit="tok")
    for _ in range(1000):
        bar.update(1)
    bar.close()
    text = log.getvalue()
    lines = text.splitlines()
    assert "\r" not in text and text.endswith("\n")
    assert 2 <= len(lines) <= 3  # the start, the end (and its final redraw): not one per update
    assert lines[0].startswith("scan m, threads 1:   0%") and "1000/1000" in lines[-1]


def test_disabled_progress_writes_nothing():
    log = io.StringIO()
    for _ in progress_bar(range(5), enabled=False, file=log):
        pass
    assert log.getvalue() == ""


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_a_terminal_gets_the_live_bar():
    term = _Terminal()
    bar = progress_bar(total=3, enabled=True, file=term, mininterval=0)
    bar.update(3)
    bar.close()
    assert "\r" in term.getvalue()
