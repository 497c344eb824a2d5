"""The README's commands table and the commands agree: every Qorven command has a row,
each option a command takes is named in its row's synopsis, each option a synopsis names is
one the command takes, and a default a synopsis writes is the command's."""
from __future__ import annotations

import argparse
import re
from pathlib import Path

from django.core.management import BaseCommand, get_commands, load_command_class

from qorven.cli import OWN_APPS

ROOT = Path(__file__).resolve().parents[2]
# A platform's credentials: `qorven bind <channel> --help` lists them, as the row says.
BIND_CREDENTIALS = {
    "--name", "--token", "--secret", "--username", "--phone-number-id", "--app-secret", "--verify-token",
    "--app-id", "--bot-token", "--signing-secret", "--bot-user-id", "--application-id", "--public-key",
    "--address", "--sender-check", "--number", "--account-sid", "--auth-token", "--key", "--origins",
}
# Django's, taken only to be refused (Qorven sets no ADMINS or MANAGERS): the row says so.
REFUSED = {"sendtestemail": {"--admins", "--managers"}}


def _synopses() -> dict[str, str]:
    """Each command's synopsis: the first cells of the rows naming it (hyphenated)."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("## Commands"):readme.index("## Configuration")]
    synopses: dict[str, str] = {}
    for line in section.splitlines():
        if line.startswith("| `qorven "):
            first = re.split(r"(?<!\\)\|", line)[1]
            for name in set(re.findall(r"`qorven ([a-z][a-z-]*)", first)):
                synopses[name] = synopses.get(name, "") + first
    return synopses


def _commands() -> dict[str, BaseCommand]:
    return {name.replace("_", "-"): load_command_class(app, name)
            for name, app in get_commands().items() if app in OWN_APPS}


def _options(parser: argparse.ArgumentParser, common: set[str]) -> list[argparse.Action]:
    """The parser's own options and its subcommands', not those every Django command has."""
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in dict.fromkeys(action.choices.values()):
                found += _options(sub, common)
        elif action.option_strings and not set(action.option_strings) & common:
            found.append(action)
    return found


def _common() -> set[str]:
    return {option for action in BaseCommand().create_parser("qorven", "x")._actions
            for option in action.option_strings}


def _same_number(written: str, default: object) -> bool:
    try:
        return float(written) == float(default)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return False


def test_every_command_has_a_row_in_the_readmes_commands_table():
    commands, synopses = _commands(), _synopses()
    assert len(commands) > 15  # the commands are still found
    assert sorted(set(commands) - set(synopses)) == []
    assert sorted(set(synopses) - set(commands)) == []


def test_every_option_of_a_command_is_in_its_synopsis_and_no_other():
    common, synopses = _common(), _synopses()
    missing, unknown = {}, {}
    for name, command in _commands().items():
        actions = _options(command.create_parser("qorven", name), common)
        taken = {option for action in actions for option in action.option_strings}
        synopsis = synopses[name]
        written = set(re.findall(r"(?<![\w-])(--?[a-z][a-z-]*)", synopsis))
        left_out = [action.option_strings[-1] for action in actions
                    if not set(action.option_strings) & written
                    and not (name == "bind" and set(action.option_strings) & BIND_CREDENTIALS)
                    and not set(action.option_strings) & REFUSED.get(name, set())]
        if left_out:
            missing[name] = sorted(set(left_out))
        if written - taken:
            unknown[name] = sorted(written - taken)
    assert missing == {}
    assert unknown == {}


def test_a_default_a_synopsis_writes_is_the_commands():
    common, synopses = _common(), _synopses()
    wrong = {}
    for name, command in _commands().items():
        for action in _options(command.create_parser("qorven", name), common):
            for option in action.option_strings:
                # `[--port 8000]`: a value where a synopsis would write a placeholder (`[--port N]`).
                for written in re.findall(rf"\[{re.escape(option)} ([0-9][^\]\s]*)\]", synopses[name]):
                    if written != str(action.default) and not _same_number(written, action.default):
                        wrong[f"{name} {option}"] = (written, action.default)
    assert wrong == {}
