"""`entropy-lens` command line: thin subcommands over the functions notebooks call.

Each module here adds its subcommands (`add_parsers(sub)`) and runs them; heavy imports (torch,
transformers) happen inside each command, so `--help` is instant. This module imports only the standard
library (the subcommands' modules are imported by `build_parser`), so that Ctrl-C during start-up lands in
`main`, which says "interrupted" and exits with 130 as it does during a run, never with a traceback. Ctrl-C
while a module is being imported (torch takes a second) exits at once (`quiet_interrupt_in_imports`): a
KeyboardInterrupt raised inside an import can come out as another error or abort an extension's set-up. Bad input exits with status 2
and one line saying what is wrong and how to fix it. Every command takes `--threads N`, applied once
before the command runs (runs/threads.py); the commands that run under torchrun (scan, sweep, ppl) take
`--dist-timeout SECONDS` (runs/launch.py), applied the same way.

SIGTERM (a batch scheduler stopping the job, torchrun stopping the other ranks) is Ctrl-C while a
command runs: every run's interrupt path applies (a scan checkpoints, locks are released), and the exit
status is 143 (128 + 15) where Ctrl-C's is 130.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import os
import signal
import sys
import threading

__all__ = [
    "DISTRIBUTED_COMMANDS",
    "Terminated",
    "build_parser",
    "main",
    "option_table",
    "quiet_interrupt_in_imports",
    "sigterm_as_interrupt",
]

DISTRIBUTED_COMMANDS = ("scan", "sweep", "ppl")  # the commands torchrun may launch: --dist-timeout
INTERRUPTED = "entropy-lens: interrupted"  # what Ctrl-C prints (exit status 130)


def build_parser() -> argparse.ArgumentParser:
    from entropy_lens import __version__
    from entropy_lens.cli import (
        analysis,
        figures,
        generate,
        harness,
        heads,
        passkey,
        perplexity,
        scan,
        train,
        view,
    )
    from entropy_lens.cli.options import add_settings, flag_type
    from entropy_lens.runs.launch import LaunchSettings
    from entropy_lens.runs.threads import check_threads

    parser = argparse.ArgumentParser(prog="entropy-lens", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"entropy-lens {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    for module in (scan, perplexity, passkey, generate, harness, analysis, train, heads, figures, view):
        module.add_parsers(sub)
    for name in DISTRIBUTED_COMMANDS:  # applied once in main() before any work
        add_settings(sub.choices[name], LaunchSettings)
    for command in sub.choices.values():  # one flag, applied once in main() before any work
        command.add_argument(
            "--threads",
            type=flag_type(int, flag="--threads", check=check_threads),
            metavar="N",
            help="CPU threads for torch (default: OMP_NUM_THREADS, else one per core; at most 4 per "
            "core); on a machine shared with other busy processes use at most the free cores, e.g. "
            "--threads 1",
        )
    return parser


def option_table() -> dict[str, list[dict]]:
    """Every command's options with their defaults, as `tests/cli_options.json` holds them: a change to a
    flag's name, default, choices or arity shows up there (regenerate: python tools/cli_options.py)."""
    import argparse

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    table = {}
    for name, command in sorted(sub.choices.items()):
        rows = []
        for action in command._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            default = action.default
            if not isinstance(default, (str, int, float, bool, list, type(None))):
                default = repr(default)
            rows.append(
                {
                    "flags": list(action.option_strings) or [action.metavar or action.dest],
                    "dest": action.dest,
                    "default": default,
                    "required": bool(action.required),
                    "choices": None if action.choices is None else list(action.choices),
                    "nargs": action.nargs,
                    "type": getattr(action.type, "__name__", None) or ("str" if action.nargs != 0 else None),
                }
            )
        table[name] = sorted(rows, key=lambda r: r["flags"][0])
    return table


# a write that failed for want of space or of a writable disk: one line, whichever write it was
FULL_OR_READ_ONLY = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EFBIG}


class Terminated(KeyboardInterrupt):
    """SIGTERM while a command runs, raised where Ctrl-C raises KeyboardInterrupt, so that the same
    interrupt paths apply (a scan checkpoints; locks are released); main exits with 143."""


@contextlib.contextmanager
def sigterm_as_interrupt():
    """SIGTERM raises `Terminated` inside the block (main thread only: elsewhere no handler can be set)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum, frame):
        raise Terminated

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextlib.contextmanager
def quiet_interrupt_in_imports():
    """Ctrl-C while a module is being imported ends the process at once with `INTERRUPTED` and status 130:
    raised there, the KeyboardInterrupt can come out as another error (Python wraps it in a RuntimeError
    inside a class's __set_name__) or abort an extension's initialisation. Anywhere else it is the
    KeyboardInterrupt every run's interrupt path handles. Left alone where SIGINT is ignored or handled by
    someone else, and off the main thread."""
    if (
        threading.current_thread() is not threading.main_thread()
        or signal.getsignal(signal.SIGINT) is not signal.default_int_handler
    ):
        yield
        return

    def interrupt(signum, frame):
        while frame is not None:
            if frame.f_code.co_filename.startswith("<frozen importlib"):
                os.write(sys.stderr.fileno(), f"{INTERRUPTED}\n".encode())
                os._exit(130)  # nothing is written yet that an exit could tear: no clean-up to run
            frame = frame.f_back
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGINT, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def main(argv: list[str] | None = None) -> int:
    with quiet_interrupt_in_imports():
        try:  # Ctrl-C while the command line is read: as during a run, one line
            from entropy_lens.cli.options import FlagRejected

            try:
                args = build_parser().parse_args(argv)  # a number out of its range: FlagRejected, one line
            except FlagRejected as err:
                print(f"entropy-lens: error: {err}", file=sys.stderr)
                return 2
        except KeyboardInterrupt:
            return _interrupted()
        with sigterm_as_interrupt():
            return _run(args)


def _interrupted() -> int:
    print(INTERRUPTED, file=sys.stderr)
    return 130


def _run(args) -> int:
    from entropy_lens.cli.options import config_from_args
    from entropy_lens.errors import EntropyLensError
    from entropy_lens.runs.launch import LaunchSettings, use_launch_settings
    from entropy_lens.runs.threads import set_threads

    try:
        set_threads(args.threads)
        if args.command in DISTRIBUTED_COMMANDS:
            use_launch_settings(config_from_args(LaunchSettings, args))
        return args.func(args)
    except EntropyLensError as err:
        print(f"entropy-lens: error: {err}", file=sys.stderr)
        return 2
    except Terminated:
        print("entropy-lens: terminated (SIGTERM)", file=sys.stderr)
        return 128 + signal.SIGTERM
    except KeyboardInterrupt:
        return _interrupted()
    except OSError as err:
        if err.errno not in FULL_OR_READ_ONLY:
            raise  # anything else is a bug, with its traceback
        where = f"{err.filename}: " if err.filename else "a write failed: "
        print(
            f"entropy-lens: error: {where}{err.strerror}; free space on that disk (or make it writable), "
            "or write elsewhere (--out), and rerun",
            file=sys.stderr,
        )
        return 2


if __name__ == "__main__":
    sys.exit(main())
