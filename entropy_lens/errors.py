"""The one exception type users see.

Every problem caused by input (a path, a flag, a file's contents) is raised as
`EntropyLensError` with a one-line message that names the problem and the fix, e.g.
"--len 16384 exceeds the 9,812 tokens of 'emma'; pass --data with more text or a smaller --len".
The CLI prints the message (no traceback) and exits with status 2. Bugs stay ordinary exceptions.
"""


class EntropyLensError(ValueError):
    """Bad input: the message says what is wrong and how to fix it."""


def problem(err: EntropyLensError) -> str:
    """What an EntropyLensError says is wrong, without the fix after its first ';' (for a caller that
    states a fix of its own, e.g. "scanning it again")."""
    return str(err).split(";")[0]


def first_line(err: BaseException) -> str:
    """The first line of an exception's message (for quoting a library's error in ours)."""
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


def index_ranges(layers: list[int]) -> str:
    """[0, 1, 2, 5] -> '0-2, 5': indices (layers, heads) as a message names them."""
    runs: list[list[int]] = []
    for i in layers:
        if runs and i == runs[-1][1] + 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    return ", ".join(f"{a}-{b}" if b > a else f"{a}" for a, b in runs)
