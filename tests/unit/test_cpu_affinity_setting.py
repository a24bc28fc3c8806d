"""`cpu_affinity` reads alike in every section that places a child process (scoring, shadow,
consistency, judge): the one `CpuAffinity` type of llmwatch.core.config."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from llmwatch.collectors.judge.config import JudgeSection
from llmwatch.collectors.shadow.config import ShadowSection
from llmwatch.collectors.shadow.consistency import ConsistencySection
from llmwatch.scorers.checks.config import ScoringSection

SECTIONS = [ScoringSection, ShadowSection, ConsistencySection, JudgeSection]


@pytest.mark.parametrize("section", SECTIONS)
@pytest.mark.parametrize("given,read", [(2, "2"), ([1, 3], "1,3"), (" 1-3 ", "1-3"), ("all", "all")])
def test_yaml_numbers_and_lists_read_as_a_cpu_list(section, given, read):
    assert section(cpu_affinity=given).cpu_affinity == read
    assert section().cpu_affinity == "auto"


@pytest.mark.parametrize("section", SECTIONS)
def test_a_flag_is_refused_with_the_values_it_takes(section):
    with pytest.raises(ValidationError, match="use auto, all, or CPU numbers such as 1-3 or 1,3"):
        section(cpu_affinity=True)
