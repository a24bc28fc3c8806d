"""The simulator's command-line options, shared by `llmwatch simulate` and `python -m llmwatch.agent.apps.simulator`.

Kept apart from agent/llmwatch/agent/apps/simulator/server.py (numpy, aiohttp) so that building the `llmwatch` parser, and
so every `llmwatch --help` or typo, stays fast.
"""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1; 0.0.0.0 for every interface)"
    )
    parser.add_argument(
        "--port", type=int, default=8001, help="port to listen on; 0 picks a free one, printed at start (default 8001)"
    )
    parser.add_argument(
        "--latency-scale",
        type=float,
        default=1.0,
        help="multiplies the simulated time to first token and between tokens; 0 answers at once (default 1.0, about a hosted model's pace)",
    )
    parser.add_argument(
        "--profile",
        default="A",
        help="model version to act as: A (good), B (slower, terser, more refusals and broken JSON), or any other label "
        "(A's behaviour under that name); returned in the x-model-version header (default A)",
    )
    parser.add_argument(
        "--served-model",
        default=None,
        help="the `model` answers name instead of the requested one (as a provider serves an alias by a dated snapshot); default: the requested model",
    )
    parser.add_argument(
        "--seed", type=int, default=None, help="seed for answers of requests without their own `seed` (default: random)"
    )
    parser.add_argument(
        "--shutdown-timeout",
        type=float,
        default=1.0,
        help="seconds a stop waits for streams in flight before it cuts them (default 1.0)",
    )
    parser.add_argument(
        "--judge-bias",
        type=float,
        default=None,
        help="judge mode: answer llmwatch's judge prompts with a verdict this far from the answer's true 1-5 quality "
        "(e.g. 0.5: lenient); off by default",
    )
    parser.add_argument(
        "--judge-noise",
        type=float,
        default=0.0,
        help="judge mode: standard deviation of the judge's noise on the 1-5 scale (default 0)",
    )
