"""`python -m entropy_lens`: the command line. Ctrl-C while the command line's own modules are imported
(before `main` installs its handling; a loaded machine takes a while) is already `main`'s one line and
status 130, never a traceback."""

import os
import signal


def _interrupted_while_starting(signum, frame):
    os.write(2, b"entropy-lens: interrupted\n")
    os._exit(130)  # nothing is written yet: no clean-up to run


signal.signal(signal.SIGINT, _interrupted_while_starting)
from entropy_lens.cli import main  # after the handler: the import is what takes time

signal.signal(signal.SIGINT, signal.default_int_handler)  # main's own handling from here
raise SystemExit(main())
