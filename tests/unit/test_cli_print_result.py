"""`print_result`: what a command that can write --out prints on stdout, for people and for scripts."""

from __future__ import annotations

import orjson

from llmwatch.agent.cli.common import print_result


def test_json_is_the_document_alone_so_a_script_can_parse_stdout(capsys):
    def text() -> str:
        raise AssertionError("the text form is not made when json is asked for")

    print_result("json", data=lambda: {"a": [1, 2]}, text=text, out="run.json", wrote="run -> {}")
    out = capsys.readouterr().out
    assert orjson.loads(out) == {"a": [1, 2]}
    assert out == '{\n  "a": [\n    1,\n    2\n  ]\n}\n'


def test_text_names_the_file_written_only_when_one_was(capsys):
    def data() -> dict:
        raise AssertionError("the json form is not made when text is asked for")

    print_result("text", data=data, text=lambda: "2 cases", out="runs/{x}.json", wrote="run -> {} (keep it)")
    assert capsys.readouterr().out == "2 cases\nrun -> runs/{x}.json (keep it)\n"
    print_result("text", data=data, text=lambda: "2 cases", out=None, wrote="run -> {}")
    assert capsys.readouterr().out == "2 cases\n"
