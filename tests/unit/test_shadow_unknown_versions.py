"""Pairs whose samples carry no model_version are not said to compare a version with itself.

`llmwatch shadow report` on pairs without model_version said "400 of 400 pairs had the same
version on both sides (the primary already served the candidate's version)": both sides were
"unknown", which is no evidence of one version served twice.
"""

from __future__ import annotations

from llmwatch.scorers.evaluation.paired import CandidateReport


def _report(versions: list[tuple[str, str, int]]) -> CandidateReport:
    pairs = sum(n for _, _, n in versions)
    return CandidateReport("B", pairs, [], {"mean": None}, "undecided", [], None, versions)


def test_unknown_versions_are_said_unknown_not_the_same():
    report = _report([("unknown", "unknown", 400)])
    assert report.same_version_pairs == 0 and report.unknown_version_pairs == 400
    assert report.versions_text() == (
        "versions compared: primary unknown / candidate unknown: 400 pairs; 400 of 400 pairs carry no "
        "model_version on one side or both: whether they compare a version with itself is not known"
    )
    assert report.as_dict()["same_version_pairs"] == 0


def test_known_same_versions_are_still_counted_beside_unknown_ones():
    report = _report([("A", "B", 200), ("B", "B", 100), ("unknown", "B", 10)])
    assert report.same_version_pairs == 100 and report.unknown_version_pairs == 10
    text = report.versions_text()
    assert "; 100 of 310 pairs had the same version on both sides" in text
    assert text.endswith(
        "; 10 of 310 pairs carry no model_version on one side or both: whether they compare a version with itself is not known"
    )
