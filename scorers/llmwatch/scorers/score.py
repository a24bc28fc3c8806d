"""Where `Score` used to live; the scoring records are core records now (`llmwatch.core.scores`).

Kept so that code written against the old module path (tests, benchmarks, user scripts) still
imports; the package itself imports from the core.
"""

from llmwatch.core.scores import SCORE_SCHEMA, CheckOutcome, Result, Score

__all__ = ["SCORE_SCHEMA", "CheckOutcome", "Result", "Score"]
