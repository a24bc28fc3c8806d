"""A mistyped option is refused by the command that was given it, with the option meant.

`llmwatch proxy --upstrem URL` printed the top-level usage (`llmwatch [-h] [--version] COMMAND
...`) and "unrecognized arguments", naming neither the command nor the option it has.
"""

from __future__ import annotations

import argparse

import pytest

from llmwatch.agent.cli.main import build_parser


def refusal(capsys, argv: list[str]) -> str:
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args(argv)
    assert exited.value.code == 2
    return capsys.readouterr().err


@pytest.mark.parametrize(
    "command,argv,wrong,meant",
    [
        ("proxy", ["--upstrem", "http://127.0.0.1:8000"], "--upstrem", "--upstream"),
        (
            "baseline freeze",
            ["--samples", "s", "--model-version", "A", "--out", "b", "--scroes", "x"],
            "--scroes",
            "--scores",
        ),
        ("shadow report", ["--pairs", "p", "--formt", "json"], "--formt", "--format"),
    ],
)
def test_a_mistyped_option_names_the_command_its_usage_and_the_option_meant(capsys, command, argv, wrong, meant):
    err = refusal(capsys, [*command.split(), *argv])
    assert err.startswith(f"usage: llmwatch {command} ")
    assert f"llmwatch {command}: error: unrecognized arguments: {wrong}" in err
    assert f"({wrong}: did you mean {meant}?)" in err


def test_an_option_like_no_other_gets_no_guess(capsys):
    err = refusal(capsys, ["baseline", "freeze", "--samples", "s", "--model-version", "A", "--out", "b", "--bogus"])
    assert "llmwatch baseline freeze: error: unrecognized arguments: --bogus" in err
    assert "did you mean" not in err


def test_known_options_still_parse():
    args = build_parser().parse_args(["proxy", "--upstream", "http://127.0.0.1:8000"])
    assert args.command == "proxy" and args.upstream == "http://127.0.0.1:8000"


@pytest.mark.parametrize(
    "command,argv,abbreviation,meant",
    [
        # argparse took `--sample` for `--samples`: the repeated-input check counted each once, and
        # only the last path was read.
        ("report", ["--sample", "day1.jsonl", "--samples", "day2.jsonl"], "--sample", "--samples"),
        (
            "suite build",
            ["--samples", "s", "--scores", "c", "--out", "o", "--model-v", "A"],
            "--model-v",
            "--model-version",
        ),
    ],
)
def test_an_abbreviated_option_is_refused_naming_the_option_it_abbreviates(capsys, command, argv, abbreviation, meant):
    err = refusal(capsys, [*command.split(), *argv])
    assert f"llmwatch {command}: error: unrecognized arguments: {abbreviation} " in err
    assert f"({abbreviation}: did you mean {meant}?)" in err


def test_an_abbreviation_of_a_required_option_is_named_where_the_option_is_missing(capsys):
    err = refusal(capsys, ["drift", "--baseline", "b.json", "--samp", "s"])
    assert "llmwatch drift: error: the following arguments are required: --samples" in err
    assert "(--samp: did you mean --samples?; options are not abbreviated)" in err


def test_no_parser_of_any_command_takes_abbreviations():
    def parsers(parser):
        yield parser
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for sub in action.choices.values():
                    yield from parsers(sub)

    found = list(parsers(build_parser()))
    assert len(found) > 20 and not [p.prog for p in found if p.allow_abbrev]
