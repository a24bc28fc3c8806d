"""Evidently's data-drift preset on feature tables written by bench/drift_real_cli.py.

Runs in its own virtual environment (Evidently is not a dependency of llmwatch):

    python -m venv .bench/evidently-venv
    .bench/evidently-venv/bin/pip install evidently "pandas<3"

Evidently 0.7 does not import with pandas 3 (`infer_dtype_from_object` is gone), hence the pin.

Input (stdin): JSON {"jobs": [{"name": ..., "reference": [{column: value}], "current": [...]}]}.
A job's "reference" may instead name an entry of an optional top-level "references": {name: [rows]}
(bench/pager.py's hourly jobs share one reference each, so it is sent once).
Output (stdout): JSON {"version": ..., "results": [{"name", "dataset_drift", "drifted", "columns",
"share", "drifted_columns": [...]}]}. Evidently's defaults throughout: a per-column test chosen by
column type and size (KS for numeric columns under 1,000 rows, a proportion test for binary ones,
Wasserstein distance above 1,000 rows), and dataset drift when at least half the columns drift.
"""

from __future__ import annotations

import json
import sys
import warnings

import pandas as pd
from evidently import DataDefinition, Dataset, Report
from evidently import __version__ as evidently_version
from evidently.presets import DataDriftPreset


def run(job: dict, references: dict | None = None) -> dict:
    ref = job["reference"]
    ref = pd.DataFrame(references[ref] if isinstance(ref, str) and references is not None else ref)
    cur = pd.DataFrame(job["current"])
    # Columns that are constant or empty on both sides carry no information and break some tests.
    cols = [c for c in ref.columns if c in cur.columns and pd.concat([ref[c], cur[c]]).dropna().nunique() > 1]
    binary = [c for c in cols if set(pd.concat([ref[c], cur[c]]).dropna().unique()) <= {0, 1}]
    numeric = [c for c in cols if c not in binary]
    for frame in (ref, cur):
        for c in binary:
            frame[c] = frame[c].map({0: "0", 1: "1"})
    definition = DataDefinition(numerical_columns=numeric, categorical_columns=binary)
    snapshot = Report([DataDriftPreset()]).run(
        Dataset.from_pandas(cur[cols], data_definition=definition),
        Dataset.from_pandas(ref[cols], data_definition=definition),
    )
    drifted_count, share, drifted = None, None, []
    for metric in snapshot.dict()["metrics"]:
        name = metric.get("metric_name", "")
        value = metric.get("value")
        if name.startswith("DriftedColumnsCount"):
            drifted_count, share = int(value["count"]), float(value["share"])
        elif name.startswith("ValueDrift"):
            column = metric["config"]["column"]
            threshold = metric["config"].get("threshold")
            method = metric["config"].get("method", "")
            # Evidently's p-value tests drift below the threshold; its distance tests above it.
            is_p = "p_value" in method or "test" in method.lower()
            if value is not None and threshold is not None and ((value < threshold) if is_p else (value >= threshold)):
                drifted.append(column)
    return {
        "name": job["name"],
        "dataset_drift": share is not None and share >= 0.5,
        "drifted": drifted_count,
        "columns": len(cols),
        "share": share,
        "drifted_columns": sorted(drifted),
    }


def main() -> int:
    warnings.filterwarnings("ignore")
    given = json.load(sys.stdin)
    references = given.get("references")
    json.dump({"version": evidently_version, "results": [run(j, references) for j in given["jobs"]]}, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
