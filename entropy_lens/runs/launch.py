"""How the ranks of a torchrun launch wait for each other: `LaunchSettings`, the flags of the commands
torchrun may start (scan, sweep, ppl: `cli.main` generates them from here and applies them once, as it
does --threads), read by runs/distributed.py's process groups.

    use_launch_settings(LaunchSettings(dist_timeout=60))   # this process's groups from now on
    launch_settings().dist_timeout                         # 600 s unless set

No number depends on these settings, so no config, scan identity or cache key holds them. No torch at
import (`entropy-lens --help` builds the flags from here).
"""

from __future__ import annotations

from dataclasses import dataclass

from entropy_lens.settings import Checked, setting

__all__ = ["DIST_TIMEOUT_S", "LaunchSettings", "launch_settings", "use_launch_settings"]

DIST_TIMEOUT_S = 600.0  # ten minutes: a rank that waits longer at one exchange has lost the others


@dataclass(frozen=True, kw_only=True)
class LaunchSettings(Checked):
    dist_timeout: float = setting(
        DIST_TIMEOUT_S,
        above=0,
        at_most=7 * 24 * 3600,
        metavar="SECONDS",
        help="under torchrun: how long a rank waits for the others at one exchange (start-up included) "
        "before every rank stops with one line naming it; raise it when one rank may run much slower",
    )


_IN_FORCE = [LaunchSettings()]  # what `use_launch_settings` set last


def use_launch_settings(settings: LaunchSettings) -> None:
    """The settings of this process's process groups from now on (cli.main: --dist-timeout)."""
    _IN_FORCE[0] = settings


def launch_settings() -> LaunchSettings:
    """The settings in force (the defaults until `use_launch_settings`)."""
    return _IN_FORCE[0]
