"""The reference pages are read off the code, and the committed ones are the current ones.

docs/gen_reference.py writes docs/reference/{configuration,metrics,cli}.md from the configuration
models, the Prometheus registry and the argument parser; the guide's configuration table and the
site's navigation hook are checked here too.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"


def load(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def gen() -> ModuleType:
    return load(DOCS / "gen_reference.py")


@pytest.fixture(scope="module")
def pages(gen: ModuleType) -> dict[str, str]:
    return gen.render()


def test_the_committed_reference_pages_are_what_the_code_generates(pages: dict[str, str]) -> None:
    stale = [name for name, text in pages.items() if (DOCS / "reference" / name).read_text(encoding="utf-8") != text]
    assert not stale, f"docs/reference/{', '.join(stale)} differ from the code: run python docs/gen_reference.py"


def test_the_configuration_page_walks_nested_sections_lists_and_maps(pages: dict[str, str]) -> None:
    page = pages["configuration.md"]
    # A nested section, its bounds and default, and the comment above the field in the model.
    assert re.search(r"\| `proxy\.read_timeout_s` \| number, > 0 \| `600\.0` \| LLM answers can take minutes", page)
    assert "| `drift.version_change.remember_s` |" in page  # a section inside a section
    assert "| `scoring.checks[].kind` | string | required |" in page  # items of a list of models
    assert "| `metrics.pricing.<key>.input_per_million` |" in page  # values of a map of models
    assert "| `upstream` | string \\| null | null |" in page  # top-level keys


def test_every_configuration_key_has_a_row(gen: ModuleType, pages: dict[str, str]) -> None:
    from llmwatch.agent.components import Config, ScoringSection

    def leaves(model: Any, prefix: str = "") -> list[str]:
        out = []
        for name, field in model.model_fields.items():
            sub = field.annotation
            if isinstance(sub, type) and hasattr(sub, "model_fields"):
                out += leaves(sub, f"{prefix}{name}.")
            else:
                out.append(prefix + name)
        return out

    keys = leaves(Config)
    assert "scoring.torch_threads" in keys and len(keys) > 100
    missing = [k for k in keys if f"| `{k}` |" not in pages["configuration.md"]]
    assert not missing
    assert ScoringSection.model_fields  # the sections are real models, not a list kept in the generator


def test_the_metrics_page_has_every_family_with_its_exposed_names_and_labels(pages: dict[str, str]) -> None:
    from prometheus_client import CollectorRegistry

    from llmwatch.agent.components import metric_groups
    from llmwatch.core.metrics import Metrics

    families = list(Metrics(registry=CollectorRegistry(), groups=metric_groups()).registry.collect())
    page = pages["metrics.md"]
    assert len(families) > 50
    for fam in families:
        assert f"`{fam.name}" in page, fam.name
    assert (
        "| `llmwatch_cost_usd_total` | counter | `gen_ai_operation_name`, `gen_ai_request_model`, `model_version` |"
        in page
    )
    assert "`gen_ai_client_operation_duration_seconds_bucket`" in page
    assert re.search(r"\| `gen_ai_server_time_to_first_token_seconds` \| 0\.001, .*\+Inf \|", page)


def test_the_cli_page_walks_every_subcommand_and_option(gen: ModuleType, pages: dict[str, str]) -> None:
    page = pages["cli.md"]

    def walk(parser: Any, path: str) -> Iterator[tuple[str, Any]]:
        yield path, parser
        for name, _, sub in gen.subcommands(parser):
            yield from walk(sub, f"{path} {name}")

    commands = list(walk(gen.cli_parser(), "llmwatch"))
    assert {"llmwatch review serve", "llmwatch shadow judge", "llmwatch baseline freeze"} <= {p for p, _ in commands}
    for path, parser in commands:
        assert f"## `{path}`" in page, path
        for action in parser._actions:
            for flag in action.option_strings:
                if flag not in ("-h", "--help"):
                    assert flag in page.split(f"## `{path}`", 1)[1].split("\n## ", 1)[0], (path, flag)
    assert "| `--fail-on FAIL_ON` |" in page


def test_cells_cannot_break_the_table_or_turn_into_html(gen: ModuleType) -> None:
    assert gen.cell("a | b\n c") == "a \\| b c"
    assert gen.cell("LLMWATCH_<SECTION> metadata.* `<kept> *x*`") == "LLMWATCH_&lt;SECTION> metadata.\\* `<kept> *x*`"


def test_every_key_the_configuration_guide_explains_exists(pages: dict[str, str]) -> None:
    # The guide's table is written by hand: each key it names must be a key of the model.
    guide = (DOCS / "guide" / "configuration.md").read_text(encoding="utf-8")
    reference = pages["configuration.md"]
    named = re.findall(r"^\| `([a-z_]+(?:\.[a-z_]+)*)`", guide, flags=re.M)
    assert len(named) > 30
    unknown = [k for k in named if f"| `{k}` |" not in reference and not k.endswith(".*")]
    assert not unknown, f"docs/guide/configuration.md names keys the configuration does not have: {unknown}"


def test_the_nav_hook_puts_an_unlisted_page_in_its_folders_section(tmp_path: Path) -> None:
    hook = load(DOCS / "_hooks" / "nav.py")
    for page in ("index.md", "runbooks.md", "guide/a.md", "guide/b.md", "design/0001-x.md", "design/0040-y.md"):
        (tmp_path / page).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / page).write_text("# x\n")
    (tmp_path / "guide" / "_draft.md").write_text("# draft\n")
    nav = [
        {"Home": ["index.md"]},
        {"Guide": ["guide/a.md"]},
        {"Operations": [{"Runbooks": "runbooks.md"}]},
        {"Design": ["design/0001-x.md"]},
    ]
    config = hook.on_config({"nav": nav, "docs_dir": str(tmp_path)})
    assert config["nav"][1] == {"Guide": ["guide/a.md", "guide/b.md"]}
    assert config["nav"][3] == {"Design": ["design/0001-x.md", "design/0040-y.md"]}
    assert config["nav"][0] == {"Home": ["index.md"]}  # top-level pages are not swept in
    assert config["nav"][2] == {"Operations": [{"Runbooks": "runbooks.md"}]}
