"""A mistyped option is refused by the command that was given it, with the option meant.

`llmwatch proxy --upstrem URL` printed the top-level usage (`llmwatch [-h] [--version] COMMAND
...`) and "unrecognized arguments", naming neither the command nor the option it has.
"""

from __future__ import annotations

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
