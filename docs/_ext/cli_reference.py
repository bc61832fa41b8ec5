"""`{cli-reference}`: the command-line reference, generated at build time from `entropy_lens.cli`'s
argparse parser itself, so it cannot drift from `--help`: every subcommand with its description,
usage, every flag with its help, choices and default, and the examples of its epilog."""

from __future__ import annotations

import argparse

from docutils import nodes
from docutils.parsers.rst import Directive


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def _default(action: argparse.Action) -> str | None:
    if action.default in (None, argparse.SUPPRESS, False) or action.nargs == 0:
        return None
    value = action.default
    if isinstance(value, (list, tuple)):
        value = " ".join(map(str, value))
    return str(value)


def flag_rows(parser: argparse.ArgumentParser) -> list[tuple[str, str]]:
    """(flags, help) per option and positional of one subcommand, in the parser's order."""
    rows = []
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        if action.option_strings:
            names = ", ".join(action.option_strings)
            if action.metavar or action.nargs != 0:
                metavar = action.metavar or action.dest.upper()
                names += f" {metavar if isinstance(metavar, str) else ' '.join(metavar)}"
        else:
            names = action.metavar or action.dest
        text = (action.help or "").replace("%(default)s", str(action.default)).replace("%%", "%")
        if action.choices and not isinstance(action, argparse._SubParsersAction):
            text += " Choices: " + ", ".join(map(str, action.choices)) + "."
        default = _default(action)
        if default is not None and "default" not in text.lower():
            text += f" Default: {default}."
        rows.append((names, text.strip()))
    return rows


def _literal(text: str) -> nodes.literal_block:
    block = nodes.literal_block(text, text)
    block["language"] = "text"
    return block


class CliReference(Directive):
    """Every subcommand of `entropy-lens` as a section: description, usage, a table of its flags."""

    has_content = False

    def run(self):
        from entropy_lens.cli import build_parser

        parser = build_parser()
        out = [nodes.paragraph(text=parser.description or "")]
        for name, command in _subcommands(parser).items():
            section = nodes.section(ids=[f"cli-{name}"], names=[f"cli-{name}"])
            section += nodes.title(text=f"entropy-lens {name}")
            if command.description:
                section += nodes.paragraph(text=command.description)
            section += _literal(command.format_usage().strip())
            table = nodes.definition_list()
            for flags, text in flag_rows(command):
                item = nodes.definition_list_item()
                term = nodes.term()
                term += nodes.literal(text=flags)
                item += term
                definition = nodes.definition()
                definition += nodes.paragraph(text=text or "(no help)")
                item += definition
                table += item
            section += table
            if command.epilog:
                section += nodes.paragraph(text="Examples:")
                section += _literal(command.epilog.strip())
            out.append(section)
        return out


def setup(app):
    app.add_directive("cli-reference", CliReference)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
