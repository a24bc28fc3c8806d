"""The `drift` section: online drift against a frozen baseline, its webhook, the served-version
sentinel (`drift.version_change`) and the canary comparison (`drift.canary`)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator, model_validator

from llmwatch.core.config import Section
from llmwatch.core.urls import check_http_url

# What `drift.version_change.fields` may name: the parts of a call that say which version served it.
VersionField = Literal["model_version", "response_model", "system_fingerprint"]


VERSION_FIELDS: tuple[VersionField, ...] = ("model_version", "response_model", "system_fingerprint")


class WebhookSection(Section):
    # Alertmanager-compatible webhook for users without Alertmanager; unset: no notifications.
    url: str | None = None
    repeat_interval_s: float = Field(3600.0, gt=0)
    max_retries: int = Field(5, ge=0, le=20)


class VersionChangeSection(Section):
    """The served-version sentinel: what counts as the version a model label is served as, and
    what to do when it changes (collectors/llmwatch/collectors/sentinel.py). Detection, metrics and the new drift
    window are on by default (one dict lookup per call); the webhook and the command are off."""

    enabled: bool = True
    # What identifies the served version. Drop system_fingerprint where a provider rotates it
    # between backends of one version (each rotation would read as a change).
    fields: list[VersionField] = Field(default_factory=lambda: list(VERSION_FIELDS), min_length=1)
    # A version served within this long is not new when calls come back to it: providers serve one
    # version from backends with different fingerprints at once. 0: every alternation is a change.
    remember_s: float = Field(3600.0, ge=0)
    # Storms: more than `max_changes` new versions within `flap_window_s` is one fact, not that many
    # changes: the model is flapping (llmwatch_model_version_flapping 1, one log line, one webhook
    # event served_version_flapping, no command) until calm for flap_window_s.
    max_changes: int = Field(3, ge=1, le=1000)
    flap_window_s: float = Field(600.0, gt=0, le=86_400)
    # Webhook and command run at most once per model within this long: a change inside it is held
    # and, at its end, one run says where the version went (if it did not come back).
    min_action_interval_s: float = Field(300.0, ge=0, le=86_400)
    # POSTed {old, new, model, at} (JSON) on each change, with the drift webhook's retries.
    webhook: str | None = None
    # Run (argv, never through a shell) on each change, one at a time, with LLMWATCH_OLD_VERSION,
    # LLMWATCH_NEW_VERSION and LLMWATCH_MODEL set; e.g. [llmwatch, regress, --config, regress.yaml].
    command: list[str] | None = Field(None, min_length=1)
    # A command still running after this long is killed (its whole process group).
    command_timeout_s: float = Field(600.0, gt=0, le=86_400)
    # The command gets a minimal environment, not llmwatch's (which holds secrets: LLMWATCH_*
    # keys, passwords): PATH, HOME, LANG, LC_*, TZ and the three LLMWATCH_* variables of the
    # change. Names listed here are passed too when llmwatch has them, e.g. [KUBECONFIG,
    # OPENAI_API_KEY] for a `llmwatch regress` that needs its key.
    command_env: list[str] = Field(default_factory=list)

    @field_validator("command_env")
    @classmethod
    def _env_names(cls, value: list[str]) -> list[str]:
        for name in value:
            if not name or "=" in name or "\0" in name:
                raise ValueError(f"{name!r} is not an environment variable name; give names only, e.g. [KUBECONFIG]")
        return value

    @field_validator("webhook")
    @classmethod
    def _valid_webhook(cls, value: str | None) -> str | None:
        return None if value is None else check_http_url(value, "http://127.0.0.1:9000/hook")

    @field_validator("command")
    @classmethod
    def _no_empty_program(cls, value: list[str] | None) -> list[str] | None:
        if value is not None and not value[0].strip():
            raise ValueError(
                "the first item is the program to run; give it, e.g. [llmwatch, regress, --config, regress.yaml]"
            )
        return value


class CanarySection(Section):
    """Two versions of one model served at once, compared with each other in the same window (issue 14).

    Off by default: each comparison costs the scorer a drift comparison per interval. `stable` and
    `canary` name the pair; leave both unset for automatic pairs (per model, the version with
    the most samples in the windows is stable, each other version a canary).
    """

    enabled: bool = False
    stable: str | None = Field(None, min_length=1)
    canary: str | None = Field(None, min_length=1)

    @model_validator(mode="after")
    def _pair(self) -> "CanarySection":
        if (self.stable is None) != (self.canary is None):
            raise ValueError(
                "set both drift.canary.stable and drift.canary.canary, or neither (automatic: the version with most samples is stable)"
            )
        if self.stable is not None and self.stable == self.canary:
            raise ValueError(
                f"drift.canary.stable and drift.canary.canary are both {self.stable!r}; name two different versions"
            )
        if self.stable is not None and not self.enabled:
            # Naming the pair is asking for the comparison.
            object.__setattr__(self, "enabled", True)
        return self


class DriftSection(Section):
    # A file written by `llmwatch baseline freeze`; unset: no online drift detection.
    baseline: Path | None = None
    # Most recent samples kept per model version for the comparison.
    window: int = Field(2000, ge=10)
    min_samples: int = Field(50, ge=5)
    interval_s: float = Field(30.0, gt=0)
    alpha: float = Field(0.05, gt=0, lt=1)
    # Families whose drift is an alert / exit 1; `inputs` (what users ask) is news, not a regression.
    fail_on: list[Literal["inputs", "behaviour", "performance"]] = [
        "behaviour",
        "performance",
    ]  # pydantic copies list defaults
    # Performance regresses when p50 or p95 time per output token (or TTFT, cost per 1k tokens) is
    # more than this fraction above the baseline's, and the tests, run against this margin (the
    # current values divided by 1 + margin), show it beyond: 0.2 is noticeable to users and above
    # what load moves per token.
    performance_margin: float = Field(0.20, ge=0)
    # Smallest changes worth an alert, in the user's units; frozen into the baseline.
    min_pass_rate_change: float = Field(0.01, ge=0, le=1)  # pass-rate points (0.01 = 1 point)
    min_relative_change: float = Field(0.05, ge=0)  # answer length: fraction of the baseline median
    min_score_change: float = Field(0.01, ge=0)  # similarity scores: absolute (cosine)
    min_embedding_distance: float = Field(0.0, ge=0, le=2)  # 1 - cosine of answer-embedding centroids
    min_mix_change: float = Field(0.05, ge=0, le=1)  # inputs: total variation distance of a mix
    # Behaviour is `insufficient` when less than this share of traffic is in strata the baseline knows.
    min_overlap: float = Field(0.5, ge=0, le=1)
    # Prompt embeddings (scoring.embeddings on): a current prompt at least this cosine from a
    # baseline prompt is the same prompt for paired tests; MiniLM puts rewordings of one question
    # at 0.95-0.99 and different questions on one topic below 0.9.
    near_duplicate_cosine: float = Field(0.95, gt=0, le=1)
    # inputs: how well a classifier tells baseline prompts from current ones (2 * AUC - 1) before
    # the prompt-embedding signal reads `shifted`; frozen into the baseline.
    min_prompt_separation: float = Field(0.1, ge=0, le=1)
    # Unmatched prompts are compared (within strata) only while they differ from the baseline's
    # by less than this separation; beyond it only repeated / near-duplicate prompts are compared.
    max_unmatched_separation: float = Field(0.15, ge=0, le=1)
    # The pager (scorers/llmwatch/scorers/drift/pager.py): anytime-valid evidence per signal, updated
    # with every scored sample, behind the LLMWatchDriftEvidence alert. Off: only the fixed window.
    pager: bool = True
    # The pager's false-alarm budget: a stable version pages at most this many times per 30 days
    # in expectation (spread over its signals) at `pager_samples_per_s` scored samples per second;
    # at more traffic than that, proportionally more often. Lower it to page less, at the cost of
    # a longer wait for a real regression (log of the budget, not the budget, sets the delay).
    false_pages_per_30d: float = Field(1.0, gt=0, le=30)
    # The scored samples per second (per model version) the budget above is stated at: set it to
    # your sampled traffic rate or above.
    pager_samples_per_s: float = Field(1.0, gt=0, le=10_000)
    # Bootstrap draws for the 95 % intervals beside each effect (drift and canary); 0: no intervals.
    # Unset: 400 in `llmwatch drift` and `llmwatch canary`, whose reports print them, and none in
    # the agent's periodic drift and canary comparisons (the scorer, `llmwatch aggregate`), where
    # no metric or alert reads them and 400 draws cost +43 % CPU per comparison of an 800-sample
    # window, +121 % of a 2,000-sample one (bench/drift_interval_cpu.py). Set a number to have the
    # online readings carry intervals too (the demo does: its drift line prints them).
    interval_draws: int | None = Field(None, ge=0, le=10_000)
    webhook: WebhookSection = Field(default_factory=WebhookSection)
    # Served-version sentinel: a change opens a new drift window and can trigger a regression run.
    version_change: VersionChangeSection = Field(default_factory=VersionChangeSection)
    # Canary: versions served side by side compared with each other (no baseline needed).
    canary: CanarySection = Field(default_factory=CanarySection)
