"""One option of a scenario: a `ringsim simulate` flag, with its kind, default, choices, help
text, the heading `--help` lists it under and the key of the dashboard's control for it.

The record every reader of an option shares: the command line's argparse flags
(sim.cli.options), a sweep spec's keys and a results table's columns (sim.planning.spec), the
dashboard's controls (dashboard.state), and the resolver that turns option values into a
Scenario (sim.scenario.resolve). The workload, hardware and common schedule options are
declared in sim.scenario.schema; a scheme declares the options of its own settings in its
module (sim.schemes.base.Scheme.options). This module imports nothing of the scenario, so
that both can.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sim.errors import RingsimError

KINDS = ("int", "float", "str", "bool", "tokens")
"""int, float, str; bool: an on/off flag (`--causal`, `--no-causal`); tokens: a whole
number that also takes sizes such as 64k or 1M (sim.units.tokens)."""
GROUPS = ("workload", "hardware", "schedule")


@dataclass(frozen=True, kw_only=True)
class ScenarioOption:
    """One option of the scenario."""

    flag: str
    """`--kv-heads`."""
    kind: str
    """One of KINDS."""
    group: str
    """The heading `--help` lists it under: one of GROUPS."""
    default: Any = None
    """Its value when not given; None for a hardware flag leaves the preset's value."""
    choices: tuple[Any, ...] | None = None
    """The values it takes, in the order `--help` lists them; None: any of its kind."""
    help: str | None = None
    """Its line in `--help`, as plain text."""
    metavar: str | None = None
    """The name of its value in `--help` (None: the destination in capitals)."""
    dest: str = ""
    """argparse destination and the field it sets (`kv_heads`, `pass_`); blank: the flag's
    name with underscores."""
    url_key: str | None = None
    """The key of the dashboard's control for it in the page's URL; None where the page
    has no control for it. A key, once published, stays: old links use it."""
    fallback: Any = None
    """For a flag --cluster sets: its value when neither it nor --cluster is given
    (--gpu: H100-SXM). None: none of its own (the default stands)."""

    def __post_init__(self) -> None:
        if not self.flag.startswith("--") or len(self.flag) < 3:
            raise RingsimError(f"flag must start with --, got {self.flag!r}")
        if self.kind not in KINDS:
            raise RingsimError(f"kind of {self.flag} must be one of {', '.join(KINDS)}, got {self.kind!r}")
        if self.group not in GROUPS:
            raise RingsimError(f"group of {self.flag} must be one of {', '.join(GROUPS)}, got {self.group!r}")
        if self.choices is not None and self.default is not None and self.default not in self.choices:
            raise RingsimError(f"default of {self.flag} ({self.default!r}) is not one of its choices")
        if self.fallback is not None and self.default is not None:
            raise RingsimError(f"{self.flag} has a default; a fallback stands only for a default of None")
        if not self.dest:
            object.__setattr__(self, "dest", self.name.replace("-", "_"))

    @property
    def name(self) -> str:
        """The flag without its dashes (`kv-heads`): a values dict's key, a sweep spec's key, a
        control's id."""
        return self.flag[2:]
