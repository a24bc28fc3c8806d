"""Deterministic rewordings of a prompt, for `llmwatch regress --paraphrases K`.

A case is also run in K rewordings of its last user message; the spread of its scores across
them is its prompt sensitivity. A rewording must keep the meaning, so the transforms are small
and conservative, and everything that carries meaning a word swap could break is *protected*
and copied byte for byte: fenced and inline code, JSON objects and arrays (and bracketed
placeholders such as `[EMAIL]`), quoted strings, URLs, and every token with a digit in it.

The transforms work on the text between protected spans only:

* synonyms from a small built-in table (`_SYNONYMS`), whole words, capitalisation kept; a word
  that is also a noun ("fix", "help") only where it is a verb, an all-caps word never;
* contractions expanded or made (`do not` <-> `don't`);
* "Please" added before a leading imperative verb, or a leading "Please" dropped;
* a colon list ("tips: flights, hotel and passport") turned into bullet lines, or bullet lines
  joined inline;
* sentence reordering, only where safe: one paragraph of 2-4 plain sentences, none of which
  starts with a connective or refers back ("it", "this", "then", ...), and nothing protected;
* formatting: the case of the first letter, the final punctuation, and whitespace.

Which transforms a rewording uses is drawn from a `random.Random` seeded by SHA-256 of the key
(the case id) and the rewording's index, so a suite gets the same rewordings on every run, on
every machine. `reword` returns K distinct texts, all different from the original; when the
transforms cannot give that many (a one-word prompt), the remaining ones differ by trailing
whitespace only, which is still a formatting change and is reported as such (`whitespace_only`).

`accept_model_rewordings` holds a model's rewordings (`regress --paraphrase-url`) to the same
guards: a protected span lost or changed, or a number added, and the built-in ones stand in.
"""

from __future__ import annotations

import hashlib
import random
import re
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import orjson

# --- protected spans ------------------------------------------------------------------------------

_SIMPLE_PROTECTED = re.compile(
    r"```[\s\S]*?(?:```|\Z)"  # fenced code (an unterminated fence runs to the end)
    r"|`[^`\n]+`"  # inline code
    r"|https?://\S+"  # URLs
    r'|"[^"\n]*"'  # double-quoted strings
    r"|\u201c[^\u201d\n]*\u201d"  # curly double quotes
    r"|(?<!\w)'[^'\n]+'(?!\w)"  # single-quoted strings (an apostrophe inside a word is not one)
    r"|\S*\d\S*"  # any token with a digit: numbers, versions, amounts, ids
)


_WORD = re.compile(r"\w+")


def _bracket_ends(text: str) -> dict[int, int]:
    """For each { or [ that is closed, the index after its closing bracket; JSON strings inside are skipped.

    One pass with a stack (a scan per opening bracket would be quadratic on a text full of unclosed
    ones); a closing bracket of the wrong kind leaves every bracket open before it unclosed.
    """
    pairs = {"{": "}", "[": "]"}
    stack: list[tuple[str, int]] = []
    ends: dict[int, int] = {}
    in_string = False
    i = 0
    while i < len(text):
        ch = text[i]
        if in_string:
            if ch == "\\":
                i += 1
            elif ch == '"':
                in_string = False
        elif ch == '"' and stack:
            in_string = True  # quotes only open strings inside brackets; outside they are prose
        elif ch in pairs:
            stack.append((pairs[ch], i))
        elif ch in "}]" and stack:
            closer, at = stack.pop()
            if ch == closer:
                ends[at] = i + 1
            else:
                stack.clear()
        i += 1
    return ends


def protected_spans(text: str) -> list[tuple[int, int]]:
    """(start, end) of every span a rewording copies unchanged, in order and not overlapping."""
    spans: list[tuple[int, int]] = []
    brackets = _bracket_ends(text)
    i = 0
    while i < len(text):
        if text[i] in "{[":
            end = brackets.get(i)
            if end is not None:
                spans.append((i, end))
                i = end
                continue
        m = _SIMPLE_PROTECTED.match(text, i)
        if m and m.end() > i:
            spans.append((i, m.end()))
            i = m.end()
            continue
        # Past the rest of the word: a span starts at a word's start or at punctuation (keeps this linear).
        w = _WORD.match(text, i)
        i = w.end() if w else i + 1
    return spans


# Private-use characters around a span's index: no transform's pattern matches them.
_OPEN, _CLOSE = "\ue000", "\ue001"
_SLOT = re.compile(_OPEN + r"(\d+)" + _CLOSE)


def _to_template(text: str) -> tuple[str, list[str]]:
    parts: list[str] = []
    kept: list[str] = []
    last = 0
    for start, end in protected_spans(text):
        parts.append(text[last:start])
        parts.append(f"{_OPEN}{len(kept)}{_CLOSE}")
        kept.append(text[start:end])
        last = end
    parts.append(text[last:])
    return "".join(parts), kept


def _from_template(template: str, kept: Sequence[str]) -> str:
    return _SLOT.sub(lambda m: kept[int(m.group(1))], template)


# --- transforms -------------------------------------------------------------------------------------

# One direction each, chosen so that the swap keeps the meaning in ordinary requests (no word
# that is also a common noun in another sense, no verb with particles that would break).
_SYNONYMS: dict[str, str] = {
    "simple": "basic",
    "basic": "simple",
    "fix": "resolve",
    "resolve": "fix",
    "help": "assist",
    "assist": "help",
    "explain": "describe",
    "describe": "explain",
    "quick": "fast",
    "quickly": "rapidly",
    "big": "large",
    "large": "big",
    "small": "little",
    "classify": "categorize",
    "categorize": "classify",
    "problem": "issue",
    "begin": "start",
    "detailed": "thorough",
    "brief": "short",
    "short": "brief",
    "trip": "journey",
    "tasty": "delicious",
    "delicious": "tasty",
    "utilize": "use",
    "ensure": "make sure",
    "choose": "select",
    "summarize": "summarise",
    "summarise": "summarize",
    "give me": "provide",
    "i want": "i would like",
    "can you": "could you",
    "could you": "can you",
    "recommend": "suggest",
    "suggest": "recommend",
}
# Words that are also nouns ("a quick fix", "with the help of"): swapped only where they are verbs,
# at the start of a sentence or after one of these words.
_VERB_ONLY = frozenset({"fix", "help"})
_VERB_CONTEXT = frozenset("to please i you we can could would will do and".split())
_PREV_WORD = re.compile(r"([A-Za-z']+)?[^A-Za-z']*$")

_CONTRACTIONS: dict[str, str] = {
    "do not": "don't",
    "don't": "do not",
    "does not": "doesn't",
    "doesn't": "does not",
    "cannot": "can't",
    "can't": "cannot",
    "i am": "i'm",
    "i'm": "i am",
    "what is": "what's",
    "what's": "what is",
    "is not": "isn't",
    "isn't": "is not",
}
_IMPERATIVES = frozenset(
    "give plan write explain describe list classify summarize summarise tell show translate extract fix help create "
    "generate suggest compare rewrite convert provide recommend check draft outline review calculate identify "
    "categorize select choose name find".split()
)
_QUESTION_WORDS = frozenset(
    "what how why when where who which whose is are was were do does did can could would should will shall may".split()
)
# A sentence starting with one of these leans on the one before it: never moved.
_ANAPHORA = re.compile(
    r"\b(it|its|this|that|these|those|they|them|their|then|also|so|but|and|or|however|above|below|previous|"
    r"following|same|there|here|such|otherwise|finally|first|second|next|after|before)\b",
    re.IGNORECASE,
)
_BULLET = re.compile(r"^[ \t]*[-*\u2022][ \t]+(.+?)[ \t]*$")


def _phrase_pattern(table: dict[str, str]) -> re.Pattern[str]:
    keys = sorted(table, key=len, reverse=True)  # the longest phrase first: "give me" before "give"
    return re.compile(r"(?<![\w'])(" + "|".join(re.escape(k) for k in keys) + r")(?![\w'])", re.IGNORECASE)


_SYN_RX = _phrase_pattern(_SYNONYMS)
_CON_RX = _phrase_pattern(_CONTRACTIONS)


def _match_case(source: str, replacement: str) -> str:
    if source[:1].isupper():
        return replacement[:1].upper() + replacement[1:]
    return replacement


def _swappable(template: str, m: re.Match[str]) -> bool:
    word = m.group(0)
    if len(word) > 1 and word.isupper():
        return False  # an acronym or an identifier (BASIC, FIX), not the word
    if word.casefold() in _VERB_ONLY:
        before = template[: m.start()]
        prev = _PREV_WORD.search(before[-40:])
        at_start = not before.strip() or before.rstrip()[-1] in ".!?:\n"
        return at_start or (prev is not None and (prev.group(1) or "").casefold() in _VERB_CONTEXT)
    return True


def _substitute(table: dict[str, str], rx: re.Pattern[str]) -> Callable[[str, random.Random], str | None]:
    def apply(template: str, rng: random.Random) -> str | None:
        found = [m for m in rx.finditer(template) if _swappable(template, m)]
        if not found:
            return None
        # Each occurrence with probability one half, at least one: rewordings differ in which.
        chosen = {i for i in range(len(found)) if rng.random() < 0.5} or {rng.randrange(len(found))}
        out, last = [], 0
        for i, m in enumerate(found):
            out.append(template[last : m.start()])
            word = m.group(0)
            replacement = table[word.casefold()]
            if word.casefold() == "i want" or replacement.startswith("i "):
                replacement = "I" + replacement[1:]
            out.append(_match_case(word, replacement) if i in chosen else word)
            last = m.end()
        out.append(template[last:])
        return "".join(out)

    return apply


def _please(template: str, rng: random.Random) -> str | None:
    lead = len(template) - len(template.lstrip())
    body = template[lead:]
    m = re.match(r"please[,]?\s+(\w)", body, re.IGNORECASE)
    if m:
        return template[:lead] + m.group(1).upper() + body[m.end() :]
    m = re.match(r"([A-Za-z]+)\b", body)
    if m is None:
        return None
    word = m.group(1)
    if word.casefold() in _IMPERATIVES:
        return template[:lead] + "Please " + word.casefold() + body[m.end() :]
    m2 = re.match(r"(can|could|would|will) you\s+", body, re.IGNORECASE)
    if m2 and not body[m2.end() :].casefold().startswith("please"):
        return template[:lead] + body[: m2.end()] + "please " + body[m2.end() :]
    return None


def _bullets(template: str, rng: random.Random) -> str | None:
    lines = template.split("\n")
    items = [m.group(1) for m in (_BULLET.match(line) for line in lines) if m]
    if len(items) >= 2:
        # Bullet lines joined inline; the lines that are not bullets stay where they were.
        out: list[str] = []
        joined = False
        for line in lines:
            if _BULLET.match(line):
                if not joined:
                    out.append("; ".join(i.rstrip(".;,") for i in items) + ".")
                    joined = True
            else:
                out.append(line)
        return "\n".join(out)
    # An inline colon list with "and" ("tips: flights, hotel and passport") becomes bullet lines.
    m = re.search(r":\s+([^:\n.!?]+?),\s+([^:\n.!?]+?)\s+and\s+([^:\n.!?,]+?)([.!?]?)\s*$", template)
    if m is None:
        return None
    head, last = m.group(1), m.group(3)
    rest = m.group(2).split(", ")
    parts = [head, *rest, last]
    if any(_OPEN in p or len(p.split()) > 6 or not p.strip() for p in parts):
        return None
    return template[: m.start()] + ":\n" + "\n".join(f"- {p.strip()}" for p in parts)


def _reorder(template: str, rng: random.Random) -> str | None:
    if _OPEN in template or "\n" in template.strip():
        return None
    text = template.strip()
    # A split, not a findall: a long text with no sentence end would make a findall quadratic.
    sentences = re.split(r"(?<=[.!?])\s+", text)
    if not 2 <= len(sentences) <= 4 or not all(re.search(r"[.!?]$", x) for x in sentences):
        return None
    if any(_ANAPHORA.search(s) for s in sentences):
        return None
    order = list(range(len(sentences)))
    while order == list(range(len(sentences))):
        rng.shuffle(order)
    return " ".join(sentences[i] for i in order)


def _first_letter(template: str, rng: random.Random) -> str | None:
    m = re.match(r"(\s*)([A-Za-z])([a-z]*)\b", template)
    if m is None:
        return None
    word = (m.group(2) + m.group(3)).casefold()
    # Only common words: lower-casing a name ("Python") would change it.
    if word not in _IMPERATIVES and word not in _QUESTION_WORDS and word != "please":
        return None
    first = m.group(2)
    swapped = first.lower() if first.isupper() else first.upper()
    return template[: m.start(2)] + swapped + template[m.end(2) :]


def _final_punctuation(template: str, rng: random.Random) -> str | None:
    body = template.rstrip()
    tail = template[len(body) :]
    if not body or body.endswith(_CLOSE):
        return None
    if body[-1] in ".!":
        return body[:-1] + tail
    if body[-1] == "?":
        return body[:-1] + tail
    if body[-1].isalpha():
        first = re.match(r"\s*([A-Za-z]+)", body)
        question = first is not None and first.group(1).casefold() in _QUESTION_WORDS
        return body + ("?" if question else ".") + tail
    return None


def _whitespace(template: str, rng: random.Random) -> str | None:
    choice = rng.randrange(3)
    if choice == 0 and re.search(r"[.!?] (?=\S)", template):
        return re.sub(r"([.!?]) (?=\S)", r"\1  ", template)
    if choice == 1 and template.strip() != template:
        return template.strip()
    return template + "\n"


@dataclass(frozen=True)
class _Transform:
    name: str
    apply: Callable[[str, random.Random], str | None]


# In the order they are applied: word-level first, then structure, then formatting.
TRANSFORMS: tuple[_Transform, ...] = (
    _Transform("synonyms", _substitute(_SYNONYMS, _SYN_RX)),
    _Transform("contractions", _substitute(_CONTRACTIONS, _CON_RX)),
    _Transform("please", _please),
    _Transform("bullets", _bullets),
    _Transform("reorder", _reorder),
    _Transform("case", _first_letter),
    _Transform("punctuation", _final_punctuation),
    _Transform("whitespace", _whitespace),
)
_TRIES = 24


@dataclass(frozen=True)
class Rewording:
    text: str
    transforms: tuple[str, ...]  # which transforms made it; ("whitespace_only",) for a fallback

    @property
    def whitespace_only(self) -> bool:
        return self.transforms == ("whitespace_only",)


def _rng(key: str, index: int, attempt: int) -> random.Random:
    digest = hashlib.sha256(f"llmwatch-paraphrase\0{key}\0{index}\0{attempt}".encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


def rewordings(text: str, k: int, key: str) -> list[Rewording]:
    """K distinct rewordings of `text`, none equal to it; the same for the same (text, k, key)."""
    if k <= 0:
        return []
    template, kept = _to_template(text)
    seen = {text}
    out: list[Rewording] = []
    for index in range(k):
        made: Rewording | None = None
        for attempt in range(_TRIES):
            rng = _rng(key, index, attempt)
            current, used = template, list[str]()
            picked = [t for t in TRANSFORMS if rng.random() < 0.5] or [rng.choice(TRANSFORMS)]
            for t in picked:
                changed = t.apply(current, rng)
                if changed is not None and changed != current:
                    current, used = changed, [*used, t.name]
            candidate = _from_template(current, kept)
            if used and candidate not in seen:
                made = Rewording(candidate, tuple(used))
                break
        if made is None:
            pad = 1
            while text + " " * pad in seen:
                pad += 1
            made = Rewording(text + " " * pad, ("whitespace_only",))
        seen.add(made.text)
        out.append(made)
    return out


def reword(text: str, k: int, key: str) -> list[str]:
    """The texts of `rewordings(text, k, key)`."""
    return [r.text for r in rewordings(text, k, key)]


def last_user_index(messages: Sequence[dict[str, Any]]) -> int | None:
    for i in range(len(messages) - 1, -1, -1):
        if messages[i].get("role") == "user":
            return i
    return None


def _text_slot(messages: Sequence[dict[str, Any]]) -> tuple[int, int | None, str] | None:
    """(message index, text part index or None for a string content, text) of the last user message's text."""
    at = last_user_index(messages)
    if at is None:
        return None
    content = messages[at].get("content")
    if isinstance(content, str):
        return at, None, content
    if isinstance(content, list):
        for j, p in enumerate(content):
            if isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str):
                return at, j, p["text"]
    return None


def last_user_text(messages: Sequence[dict[str, Any]]) -> str | None:
    """The text a rewording replaces: the last user message's (first text part's) text; None without one."""
    slot = _text_slot(messages)
    return None if slot is None else slot[2]


def with_last_user_text(messages: Sequence[dict[str, Any]], text: str) -> list[dict[str, Any]]:
    """A copy of `messages` whose last user text is `text`; every other message and part untouched."""
    slot = _text_slot(messages)
    if slot is None:
        raise ValueError("the messages have no user text to replace")
    at, part, _ = slot
    content = messages[at].get("content")
    new_content: Any = text
    if part is not None and isinstance(content, list):
        new_content = [dict(p) if isinstance(p, dict) else p for p in content]
        new_content[part]["text"] = text
    copy = [dict(m) for m in messages]
    copy[at] = {**messages[at], "content": new_content}
    return copy


def reword_messages(
    messages: Sequence[dict[str, Any]], k: int, key: str
) -> list[tuple[list[dict[str, Any]], Rewording]]:
    """K copies of `messages` whose last user message is reworded; every other message is untouched.

    A string content is reworded whole; a list of parts has its first text part reworded. A last
    user message with no text gives no rewordings (an empty list).
    """
    text = last_user_text(messages)
    if text is None or k <= 0:
        return []
    return [(with_last_user_text(messages, r.text), r) for r in rewordings(text, k, key)]


# --- rewordings from a model ----------------------------------------------------------------------

MODEL_PROMPT = (
    "Rewrite the request below in {k} different ways. Each must ask for exactly the same thing: keep every "
    "constraint, copy code, JSON, numbers, quoted strings and URLs character for character, and do not answer it. "
    "Reply with only a JSON array of {k} strings.\n\nRequest:\n{text}"
)
_FENCE = re.compile(r"^```(?:json)?\s*|\s*```$")


def model_prompt(text: str, k: int) -> str:
    return MODEL_PROMPT.format(k=k, text=text)


def parse_model_reply(reply: str) -> list[str]:
    """The JSON array of strings in a model's reply (a code fence around it allowed); ValueError otherwise."""
    body = _FENCE.sub("", reply.strip())
    start, end = body.find("["), body.rfind("]")
    if start < 0 or end <= start:
        raise ValueError("no JSON array in the reply")
    try:
        items = orjson.loads(body[start : end + 1])
    except orjson.JSONDecodeError as exc:
        raise ValueError(f"the reply's array is not valid JSON ({exc})") from None
    if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
        raise ValueError("the reply's array is not a list of strings")
    return items


def _protected_kept(original: str, candidate: str) -> bool:
    """Every protected span of the original appears in the candidate, as often; and no new number."""
    spans = [original[a:b] for a, b in protected_spans(original)]
    if any(candidate.count(s) < spans.count(s) for s in set(spans)):
        return False
    digits = sorted(re.findall(r"\d+", original))
    return sorted(re.findall(r"\d+", candidate)) == digits


def accept_model_rewordings(
    text: str, candidates: Sequence[str], k: int, key: str, model: str
) -> tuple[list[Rewording], list[str]]:
    """Up to K of the model's candidates that pass the same guards as the built-in transforms, the rest built in.

    A candidate is refused when empty, equal to the original or to an earlier one, more than four
    times as long, or when it lost or changed a protected span (code, JSON, a quoted string, a URL,
    a number) or added a number. Returns the K rewordings and why candidates were refused.
    """
    seen = {text}
    kept: list[Rewording] = []
    refused: list[str] = []
    for c in candidates:
        if len(kept) == k:
            break
        c = c.strip()
        if not c or c in seen:
            refused.append("empty or a repeat")
        elif len(c) > 4 * len(text) + 200:
            refused.append("too long")
        elif not _protected_kept(text, c):
            refused.append("changed code, JSON, a quoted string, a URL or a number")
        else:
            seen.add(c)
            kept.append(Rewording(c, (f"model:{model}",)))
    if len(kept) < k:
        for r in rewordings(text, k + len(kept), key):
            if len(kept) == k:
                break
            if r.text not in seen:
                seen.add(r.text)
                kept.append(r)
    return kept, refused
