"""Generate tests/data/secrets_corpus.jsonl: secrets in the formats providers document, in sentences.

No public secret corpus installs from a package registry (detect-secrets 1.5.0's sdist ships its
plugins, not its test fixtures), so this one is built from the token formats each provider
documents, with bodies drawn here at random from the documented alphabet and length (seeded:
the file is reproducible; none of these values was ever issued). Sources of the formats:

- AWS access keys: access key id AKIA/ASIA + 16 of [A-Z0-9], secret access key 40 base64
  characters (AWS IAM User Guide, "Manage access keys for IAM users"; its example pair is
  AKIAIOSFODNN7EXAMPLE / wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY).
- GitHub: ghp_/gho_/ghu_/ghs_/ghr_ + 36 base62, github_pat_ + 22 + "_" + 59 (GitHub Docs, "About
  authentication to GitHub", GitHub's token formats).
- GitLab: glpat- + 20 (GitLab Docs, "Personal access tokens", token prefixes).
- Slack: xoxb-/xoxp- + numeric ids and a 24-32 character secret (Slack API docs, "Token types").
- Stripe: sk_live_/sk_test_/rk_live_ + 24 or more base62 (Stripe Docs, "API keys").
- Google: AIza + 35 of [A-Za-z0-9_-] (Google Cloud Docs, "Manage API keys").
- OpenAI / Anthropic: sk-proj- + 48+ and sk-ant-api03- + 93 of [A-Za-z0-9_-] (their API reference pages).
- JWT (RFC 7519) and PEM private keys (RFC 7468).
- Bare secrets after secret words, without `name=` before them ("my aws secret is ...",
  "the client secret: ..."): random 20-64 character tokens in the base64/base62 alphabets.

`none` lines are sentences that name secrets, keys and tokens without holding one (and ids,
paths, hashes and words next to those names): they must come out unchanged.

Each line: {"text", "kind": "api_key" | "none", "secret": substring that must vanish, "source"}.
Released under CC0 1.0 (public domain dedication).

    python tests/data/make_secrets_corpus.py > tests/data/secrets_corpus.jsonl
"""

from __future__ import annotations

import random
import string
import sys

import orjson

rng = random.Random(20261204)
B62 = string.ascii_letters + string.digits
B64 = B62 + "+/"
URLSAFE = B62 + "_-"
UPPER_DIGITS = string.ascii_uppercase + string.digits


def draw(alphabet: str, n: int) -> str:
    while True:
        value = "".join(rng.choice(alphabet) for _ in range(n))
        # A random draw without a digit (or a letter) happens; real keys of these formats have both.
        if any(c.isdigit() for c in value) and any(c.isalpha() for c in value):
            return value


FORMATS = {
    "aws_access_key_id": lambda: rng.choice(["AKIA", "ASIA"]) + draw(UPPER_DIGITS, 16),
    "aws_secret_access_key": lambda: draw(B64, 40),
    "github_classic": lambda: rng.choice(["ghp_", "gho_", "ghu_", "ghs_", "ghr_"]) + draw(B62, 36),
    "github_fine_grained": lambda: "github_pat_" + draw(B62, 22) + "_" + draw(B62, 59),
    "gitlab_pat": lambda: "glpat-" + draw(URLSAFE, 20),
    "slack": lambda: (
        rng.choice(["xoxb-", "xoxp-"]) + "".join(rng.choice(string.digits) for _ in range(11)) + "-" + draw(B62, 24)
    ),
    "stripe": lambda: rng.choice(["sk_live_", "sk_test_", "rk_live_"]) + draw(B62, rng.randint(24, 40)),
    "google_api_key": lambda: "AIza" + draw(URLSAFE, 35),
    "openai": lambda: "sk-proj-" + draw(URLSAFE, rng.randint(48, 64)),
    "anthropic": lambda: "sk-ant-api03-" + draw(URLSAFE, 93),
    "jwt": lambda: "eyJhbGciOiJIUzI1NiJ9." + draw(URLSAFE, 40) + "." + draw(URLSAFE, 43),
}
ASSIGNED = [
    "export {name}={value}",
    '"{name}": "{value}"',
    "{name} = {value}",
    "set {name}: {value} in the config",
]
NAMES = {
    "aws_access_key_id": "AWS_ACCESS_KEY_ID",
    "aws_secret_access_key": "aws_secret_access_key",
}
PREFIXED = [
    "Here is my key: {value}",
    "curl -H 'Authorization: token {value}' https://api.example.net",
    "I pasted {value} into the terminal by mistake",
    "config:\n  key: {value}\n",
    "use {value} for now",
]
BARE = [
    "my aws secret is {value}",
    "aws secret {value}",
    "The client secret: {value} (do not share)",
    "here is the secret key {value}",
    "the token is {value}, it expires tomorrow",
    "password is {value}",
    "api key {value}",
    "Our signing key -> {value}",
    "credential for the staging db: {value}",
    "secret `{value}`",
]
NONE = [
    "The secret to a good sourdough is a long, cold proof.",
    "Press any key to continue.",
    "Tokens are the units a language model reads; GPT-4 has a context of 128000 tokens.",
    "Put the API key in the Authorization header, never in the URL.",
    "The key file lives at /etc/ssl/private/server2024.key on the host.",
    "commit key 3f786850e387550fdab836ed7e6dc881de23001b fixed the build",
    "A password manager generates long random passwords for you.",
    "Rotate the secret every 90 days and store it in the vault, not in code.",
    "The primary key of the orders table is order_id_2024_archive.",
    "Use the token bucket algorithm to rate-limit requests_per_second_limit.",
    "The key insight of the paper is that attention_is_all_you_need.",
    "Set AWS_SECRET_ACCESS_KEY from the environment, e.g. os.environ['AWS_SECRET_ACCESS_KEY'].",
    "The secret santa list is in shared_drive/holidays2024/plans.",
    "A JWT has three parts: header, payload and signature.",
    "The session token is refreshed by the SDK automatically.",
    "key: value pairs in YAML are separated by a colon.",
    "The secret of the key-value store design is consistent hashing.",
    "Keyboard shortcuts: press Ctrl+Shift+K to delete a line.",
    "token_type_hint is an optional parameter of RFC 7009.",
    "The password must have at least 12 characters, one digit and one symbol.",
]


def main() -> None:
    out = [
        {
            "_comment": "llmwatch secrets corpus: the documented key formats of providers with random bodies "
            "(tests/data/make_secrets_corpus.py, seed 20261204), CC0 1.0; kind api_key: 'secret' must vanish; "
            "none: the text must stay unchanged."
        }
    ]
    for source, make in FORMATS.items():
        for _ in range(8):
            value = make()
            if source in NAMES:
                text = rng.choice(ASSIGNED).format(name=NAMES[source], value=value)
            else:
                text = rng.choice(PREFIXED).format(value=value)
            out.append({"text": text, "kind": "api_key", "secret": value, "source": source})
    for _ in range(60):
        value = draw(rng.choice([B64, B62, URLSAFE]), rng.choice([20, 24, 32, 40, 40, 40, 48, 64]))
        out.append(
            {
                "text": rng.choice(BARE).format(value=value),
                "kind": "api_key",
                "secret": value,
                "source": "bare_after_secret_word",
            }
        )
    for text in NONE:
        out.append({"text": text, "kind": "none", "secret": "", "source": "prose_naming_secrets"})
    sys.stdout.buffer.write(b"".join(orjson.dumps(line) + b"\n" for line in out))


if __name__ == "__main__":
    main()
