"""Rule checks: cheap, deterministic verdicts on one sample.

A check is a plain function `(sample, params) -> CheckOutcome`. `RULE_CHECKS`
maps each kind to its function and its pydantic params model, so a YAML entry
`{kind: regex, params: {...}}` becomes a callable with `build_rule_check`.
Everything that can be prepared once (regexes, schema validators) is prepared
when the params are validated, because checks run on every sampled request.

Checks that judge the answer's content skip (rather than fail) samples whose
upstream call failed or that answered with tool calls only (`answer_or_skip`): those
are measured by error rates and tool-call metrics, and failing them here would double
count. That plumbing, shared with the embedding and judge checks, is `scorers/llmwatch/scorers/checks/base.py`.
"""

from __future__ import annotations

import re
import string
from pathlib import Path
from typing import Any, Callable, Literal, NamedTuple, get_args

import orjson
from pydantic import BaseModel, Field, PrivateAttr, ValidationError, model_validator

from llmwatch.core.jsonio import DocumentFormat, parse_document
from llmwatch.core.records import Sample
from llmwatch.core.scores import CheckOutcome
from llmwatch.core.wire import approx_tokens, response_finish_reason
from llmwatch.scorers.checks.base import (
    CheckParams,
    NonEmptyStr,
    answer_or_skip,
    describe_params_error,
    failed,
    passed,
    run_check,
    skipped,
    tool_call_count,
    upstream_failed,
)
from llmwatch.scorers.checks.code_exec import CodeExecParams, check_code_exec
from llmwatch.scorers.checks.fields import FieldsParams, check_fields
from llmwatch.scorers.checks.input_truncated import InputTruncatedParams, check_input_truncated
from llmwatch.scorers.checks.schema import CompiledSchema, compile_schema
from llmwatch.scorers.checks.tools import ToolCallParams, check_tool_call
from llmwatch.scorers.pipeline import pii

__all__ = ["CheckOutcome", "RuleCheck", "RULE_CHECKS", "build_rule_check", "run_check"]


def _finish_reason(sample: Sample) -> str | None:
    return sample.finish_reason or response_finish_reason(sample.response)


# --- json_valid / json_schema --------------------------------------------------------------------

_FENCE_OPEN_RE = re.compile(r"(`{3,}|~{3,})[ \t]*([^\s`]*)[^\n`]*\n")
_FENCE_CLOSE_RE = re.compile(r"\n[ \t]*(`{3,}|~{3,})[ \t]*\Z")
_JSON_TYPE_NAMES = {dict: "object", list: "array", str: "string", bool: "boolean", int: "number", float: "number"}
_NOT_PARSED = object()


def _unfence(text: str, start: int, end: int) -> tuple[int, int, str] | None:
    """(body_start, body_end, info_string) when text[start:end] is exactly one fenced block."""
    opening = _FENCE_OPEN_RE.match(text, start, end)
    if opening is None:
        return None
    # Searching from the opening newline lets an empty block (```json\n```) close.
    closing = _FENCE_CLOSE_RE.search(text, opening.end() - 1, end)
    if closing is None:
        return None
    fence, close = opening.group(1), closing.group(1)
    if close[0] != fence[0] or len(close) < len(fence):
        return None
    return opening.end(), max(closing.start(), opening.end()), opening.group(2)


def _load_json(text: str, allow_fences: bool) -> tuple[Any, dict[str, Any]]:
    """Parse the answer once; on failure the document is _NOT_PARSED and details say where."""
    end = len(text.rstrip())
    start = len(text) - len(text.lstrip()) if end else len(text)
    if start < end and text[start] == "\ufeff":
        start += 1
    details: dict[str, Any] = {"fenced": False}
    if allow_fences and text.startswith(("```", "~~~"), start):
        fenced = _unfence(text, start, end)
        if fenced is not None:
            start, end, lang = fenced
            details["fenced"] = True
            if lang:
                details["fence_lang"] = lang
    body = text[start:end]
    if not body or body.isspace():
        details["error"] = "answer is empty"
        return _NOT_PARSED, details
    try:
        return orjson.loads(body), details
    except orjson.JSONDecodeError as exc:
        # Positions refer to the whole answer, not the fence body, so users can find the spot.
        pos = start + exc.pos
        details.update(
            error=exc.msg,
            position=pos,
            line=text.count("\n", 0, pos) + 1,
            column=pos - text.rfind("\n", 0, pos),
        )
        if text.startswith(("```", "~~~"), start) and not allow_fences:
            details["hint"] = "answer is wrapped in a markdown fence; set allow_fences: true to accept it"
        return _NOT_PARSED, details


class JsonValidParams(CheckParams):
    require_object: bool = False
    allow_fences: bool = False


def check_json_valid(sample: Sample, params: JsonValidParams) -> CheckOutcome:
    text = answer_or_skip(sample)
    if not isinstance(text, str):
        return text
    doc, details = _load_json(text, params.allow_fences)
    if doc is _NOT_PARSED:
        return failed(**details)
    if params.require_object and not isinstance(doc, dict):
        return failed(error="expected a JSON object", got=_JSON_TYPE_NAMES.get(type(doc), "null"), **details)
    return passed(**details)


class JsonSchemaParams(CheckParams):
    schema_: dict[str, Any] | bool | None = Field(default=None, alias="schema")
    schema_file: NonEmptyStr | None = None
    allow_fences: bool = False
    check_formats: bool = False
    max_errors: int = Field(default=5, ge=1, le=100)

    _compiled: CompiledSchema = PrivateAttr()

    @model_validator(mode="after")
    def _compile(self) -> "JsonSchemaParams":
        if (self.schema_ is None) == (self.schema_file is None):
            raise ValueError("exactly one of 'schema' (inline) or 'schema_file' (path) is required")
        # A file holds whatever it holds: compile_schema is what decides it is a schema.
        schema: Any = self.schema_ if self.schema_file is None else _read_schema_file(self.schema_file)
        where = "schema_file " + repr(self.schema_file) if self.schema_file else "schema"
        self._compiled = compile_schema(schema, self.check_formats, where)
        return self


def _read_schema_file(path: str) -> Any:
    # Named as the check's field, not as a file of its own: "schema_file '<path>': cannot read it".
    try:
        raw = Path(path).expanduser().read_bytes()
    except OSError as exc:
        raise ValueError(f"schema_file {path!r}: cannot read it ({exc.strerror or exc})") from None
    fmt: DocumentFormat = "yaml" if path.endswith((".yaml", ".yml")) else "json"
    return parse_document(raw, name=f"schema_file {path!r}", error=ValueError, fmt=fmt)


def check_json_schema(sample: Sample, params: JsonSchemaParams) -> CheckOutcome:
    text = answer_or_skip(sample)
    if not isinstance(text, str):
        return text
    doc, details = _load_json(text, params.allow_fences)
    if doc is _NOT_PARSED:
        return failed(**details)
    errors, more = params._compiled.errors(doc, params.max_errors)
    if not errors:
        return passed(**details)
    return failed(errors=errors, more_errors=more, **details)


# --- regex -----------------------------------------------------------------------------------------

_REGEX_FLAGS = {"ignorecase": re.IGNORECASE, "multiline": re.MULTILINE, "dotall": re.DOTALL}


def _compile_patterns(name: str, patterns: list[str], flags: int) -> tuple[re.Pattern[str], ...]:
    compiled = []
    for index, pattern in enumerate(patterns):
        try:
            compiled.append(re.compile(pattern, flags))
        except re.error as exc:
            raise ValueError(f"{name}[{index}]: invalid regular expression {pattern!r}: {exc}") from None
    return tuple(compiled)


class RegexParams(CheckParams):
    must_match: list[NonEmptyStr] = Field(default_factory=list)
    must_not_match: list[NonEmptyStr] = Field(default_factory=list)
    flags: list[Literal["ignorecase", "multiline", "dotall"]] = Field(default_factory=list)

    _must: tuple[re.Pattern[str], ...] = PrivateAttr()
    _must_not: tuple[re.Pattern[str], ...] = PrivateAttr()

    @model_validator(mode="after")
    def _compile(self) -> "RegexParams":
        if not self.must_match and not self.must_not_match:
            raise ValueError("at least one of 'must_match' or 'must_not_match' must list a pattern")
        flags = 0
        for flag in self.flags:
            flags |= _REGEX_FLAGS[flag]
        self._must = _compile_patterns("must_match", self.must_match, flags)
        self._must_not = _compile_patterns("must_not_match", self.must_not_match, flags)
        return self


def check_regex(sample: Sample, params: RegexParams) -> CheckOutcome:
    text = answer_or_skip(sample)
    if not isinstance(text, str):
        return text
    missing = [rx.pattern for rx in params._must if rx.search(text) is None]
    forbidden = []
    for rx in params._must_not:
        match = rx.search(text)
        if match is not None:
            # Position only: the matched text may be exactly what the pattern guards against.
            forbidden.append({"pattern": rx.pattern, "position": match.start()})
    if missing or forbidden:
        return failed(missing=missing, forbidden=forbidden)
    return passed()


# --- length --------------------------------------------------------------------------------------


class LengthParams(CheckParams):
    min_chars: int | None = Field(default=None, ge=0)
    max_chars: int | None = Field(default=None, ge=0)
    min_tokens: int | None = Field(default=None, ge=0)
    max_tokens: int | None = Field(default=None, ge=0)

    @model_validator(mode="after")
    def _bounds(self) -> "LengthParams":
        if all(v is None for v in (self.min_chars, self.max_chars, self.min_tokens, self.max_tokens)):
            raise ValueError("set at least one of 'min_chars', 'max_chars', 'min_tokens', 'max_tokens'")
        for low, high in (("min_chars", "max_chars"), ("min_tokens", "max_tokens")):
            lo, hi = getattr(self, low), getattr(self, high)
            if lo is not None and hi is not None and lo > hi:
                raise ValueError(f"'{low}' ({lo}) must not exceed '{high}' ({hi})")
        return self


def check_length(sample: Sample, params: LengthParams) -> CheckOutcome:
    text = answer_or_skip(sample)
    if not isinstance(text, str):
        return text
    details: dict[str, Any] = {}
    violations = []
    if params.min_chars is not None or params.max_chars is not None:
        chars = details["chars"] = len(text)
        if params.min_chars is not None and chars < params.min_chars:
            violations.append("min_chars")
        if params.max_chars is not None and chars > params.max_chars:
            violations.append("max_chars")
    if params.min_tokens is not None or params.max_tokens is not None:
        if sample.usage.output_tokens is not None:
            tokens = sample.usage.output_tokens
            details["tokens_source"] = "usage_estimated" if sample.usage.estimated else "usage"
        else:
            tokens = approx_tokens(text)
            details["tokens_source"] = "approximation"
        details["tokens"] = tokens
        if params.min_tokens is not None and tokens < params.min_tokens:
            violations.append("min_tokens")
        if params.max_tokens is not None and tokens > params.max_tokens:
            violations.append("max_tokens")
    if violations:
        return failed(violations=violations, **details)
    return passed(**details)


# --- refusal -------------------------------------------------------------------------------------

_APOSTROPHES = "\u2019\u2018\u02bc\u00b4\uff07"

# Latin/Cyrillic phrases count only at the start of a sentence or clause, so that a refusal
# quoted inside a sentence ('the bot said: "I can't help"') is not mistaken for one. The
# searched text gets a leading "\n" so that the answer's start is an anchor like the others,
# and a pattern that begins with a character class lets the regex engine skip ahead quickly.
_ANCHOR = r"[.!?;:,\n)\]…—–][\s*_>#¡¿-]*"
_ANCHOR_CHARS = ".!?;:,\n)]…—– \t\r*_>#¡¿-"
_LEADS = (
    r"i'm sorry|i am sorry|sorry|i apologi[sz]e|apologies|unfortunately|regrettably|sadly|however|but"
    r"|lo siento|lamentablemente|desafortunadamente|disculpa|disculpe|perdón|pero|sin embargo"
    r"|je suis désolée?|désolée?|malheureusement|je m'excuse|mais|cependant|toutefois"
    r"|es tut mir leid|tut mir leid|entschuldigung|leider|aber|jedoch"
    r"|desculpe|desculpa|lamento|sinto muito|infelizmente|mas|porém|no entanto"
    r"|mi dispiace|purtroppo|spiacente|mi scuso|scusa|ma|tuttavia"
    r"|извините|простите|к сожалению|мне жаль|увы|но|однако"
)
_ANCHORED_PHRASES = {
    "en": [
        r"i(?:'m| am) (?:unable|not able|not allowed|not permitted) to\b",
        r"i (?:can't|cannot|can not|won't|will not|must not|won't be able to|will not be able to)"
        r" (?:help|assist|provide|comply|fulfil|support"
        r"|create|generate|share|engage|answer|write|give|do that|do this|offer|produce|complete"
        r"|participate|discuss|continue|be of assistance)",
        r"i must (?:respectfully )?decline",
        r"i(?:'m| am) not (?:comfortable|going to) (?:help|assist|provid|writ|creat|generat|shar|engag|do)",
        r"as an ai(?: language model| model| assistant)?,? i\b",
    ],
    "es": [
        r"no (?:puedo|me es posible|estoy en condiciones de|soy capaz de) (?:ayudar|asistir|proporcionar"
        r"|cumplir|hacer eso|responder|ofrecer|brindar|crear|generar|facilitar|dar|colaborar|participar|atender)",
        r"como (?:un |una )?(?:modelo de lenguaje|ia|inteligencia artificial|asistente de ia)\b",
    ],
    "fr": [
        r"je ne (?:peux|pourrai|pourrais) pas (?:vous |t')?(?:aider|assister|fournir|répondre|satisfaire"
        r"|accéder|faire|donner|générer|créer|rédiger|partager|participer|traiter|accepter)",
        r"je ne suis pas en mesure d",
        r"en tant qu(?:e |')(?:modèle de langage|ia|intelligence artificielle|assistant)\b",
    ],
    "de": [
        r"(?:ich kann|kann ich) (?:\w+ ){0,4}nicht (?:helfen|behilflich|unterstützen|erfüllen|beantworten"
        r"|nachkommen|bereitstellen|liefern|erstellen|geben|tun|machen)",
        r"ich bin (?:leider )?nicht in der lage",
        r"als (?:ein |eine )?(?:ki-sprachmodell|ki-assistent|ki|sprachmodell|künstliche intelligenz)\b",
    ],
    "pt": [
        r"não (?:posso|consigo|sou capaz de|estou em condições de|me é possível) (?:ajudar|auxiliar|fornecer"
        r"|atender|cumprir|responder|criar|gerar|oferecer|dar|fazer isso|colaborar|participar|compartilhar)",
        r"como (?:um |uma )?(?:modelo de linguagem|ia|inteligência artificial|assistente de ia)\b",
    ],
    "it": [
        r"non (?:posso|sono in grado di|mi è possibile|riesco a) (?:aiutar|assister|fornir|soddisf|rispond"
        r"|crear|generar|dar|fare|offrir|condivider|partecipar)",
        r"come (?:un |una |un')?(?:modello (?:di linguaggio|linguistico)|ia|intelligenza artificiale)\b",
    ],
    "ru": [
        r"(?:я )?не (?:могу|смогу|в состоянии|буду) (?:помочь|помогать|предоставить|выполнить|ответить"
        r"|с этим|этого|это сделать|создать|сгенерировать|дать|участвовать|поделиться)",
        r"как (?:языковая модель|модель ии|ии-ассистент|ии|искусственный интеллект)\b",
    ],
}
# Chinese and Japanese put the refusal verb at the end of the clause, so they are not anchored.
_UNANCHORED_PHRASES = {
    "zh": [
        r"(?:抱歉|对不起|很抱歉|對不起|不好意思)[，,、\s]*(?:但是?)?[，,\s]*我(?:无法|不能|没办法|無法|沒辦法|不可以)",
        r"我(?:无法|不能|没办法|無法|沒辦法)(?:为您|为你|為您|為你|帮您|帮你|幫您|幫你)?(?:提供|帮助|幫助|协助|協助|回答"
        r"|满足|滿足|完成|处理|處理|生成|参与|參與|支持)",
        r"作[为為](?:一个|一個|一名|一款)?(?:人工智能|人工智慧|ai|语言模型|語言模型)",
    ],
    "ja": [
        r"(?:お手伝い|お答え|回答|対応|提供|ご提供|支援|協力|ご協力|作成|お応え|お引き受け)(?:すること|することは|は|が)?"
        r"(?:できません|できかねます|いたしかねます|致しかねます)",
        r"申し訳(?:ありません|ございません)が[^。]{0,30}(?:できません|できかねます|いたしかねます)",
        r"(?:(?<=ai)|言語モデル|アシスタント|人工知能)として",
    ],
}


def _spaced(fragment: str) -> str:
    # Phrases are written with single spaces; answers wrap lines and double-space.
    return fragment.replace(" ", r"\s+")


def _alternatives(phrases: dict[str, list[str]]) -> str:
    return "|".join(f"(?P<{lang}>{'|'.join(map(_spaced, pats))})" for lang, pats in phrases.items())


_ANCHORED_RE = re.compile(rf"{_ANCHOR}(?:(?:{_spaced(_LEADS)})\b[\s,.!]*){{0,2}}(?:{_alternatives(_ANCHORED_PHRASES)})")
_UNANCHORED_RE = re.compile(_alternatives(_UNANCHORED_PHRASES))
# Characters that can start an unanchored phrase; tried only where one occurs, because a search
# for the whole alternation cannot skip ahead and costs tens of microseconds per answer.
_UNANCHORED_START_RE = re.compile("[抱对很對不我作お回対提ご支協申言ア人と]")
_CLAUSE_START_RE = re.compile(rf"{_ANCHOR}([^\W\d_]+)")
# First words of every lead-in and anchored phrase: clauses starting otherwise (nearly all of
# them) are rejected with a set lookup instead of trying the whole alternation.
_FIRST_WORDS = frozenset(
    "i as sorry apologies unfortunately regrettably sadly however but"
    " no como lo lamentablemente desafortunadamente disculpa disculpe perdón pero sin"
    " je en désolé désolée malheureusement mais cependant toutefois"
    " ich kann als es tut entschuldigung leider aber jedoch"
    " não desculpe desculpa lamento sinto infelizmente mas porém"
    " non come mi purtroppo spiacente scusa ma tuttavia"
    " я не как извините простите к мне увы но однако".split()
)


def _find_unanchored_refusal(window: str) -> re.Match[str] | None:
    for start in _UNANCHORED_START_RE.finditer(window):
        match = _UNANCHORED_RE.match(window, start.start())
        if match is not None:
            return match
    return None


def _find_refusal(window: str) -> re.Match[str] | None:
    text = "\n" + window
    # findall builds no match objects; most answers have no clause starting with a candidate word.
    if _FIRST_WORDS.isdisjoint(_CLAUSE_START_RE.findall(text)):
        return None
    for clause in _CLAUSE_START_RE.finditer(text):
        if clause.group(1) in _FIRST_WORDS:
            match = _ANCHORED_RE.match(text, clause.start())
            if match is not None:
                return match
    return None


class RefusalParams(CheckParams):
    window_chars: int = Field(default=300, ge=20, le=100_000)
    extra_patterns: list[NonEmptyStr] = Field(default_factory=list)

    _extra: tuple[re.Pattern[str], ...] = PrivateAttr()

    @model_validator(mode="after")
    def _compile(self) -> "RefusalParams":
        self._extra = _compile_patterns("extra_patterns", self.extra_patterns, re.IGNORECASE)
        return self


def check_refusal(sample: Sample, params: RefusalParams) -> CheckOutcome:
    text = answer_or_skip(sample)
    if not isinstance(text, str):
        return text
    window = text[: params.window_chars].lower()
    if window.isascii():
        match = _find_refusal(window)
    else:
        for char in _APOSTROPHES:
            if char in window:
                window = window.replace(char, "'")
        match = _find_refusal(window) or _find_unanchored_refusal(window)
    if match is not None:
        phrase = match.group(0).lstrip(_ANCHOR_CHARS).rstrip()
        return failed(matched=phrase[:120], language=match.lastgroup)
    for rx in params._extra:
        match = rx.search(window)
        if match is not None:
            return failed(matched=match.group(0)[:120], language=None, pattern=rx.pattern)
    return passed()


# --- not_empty_or_truncated ---------------------------------------------------------------------

# Zero-width characters are not whitespace to str.strip() but render as nothing.
_BLANK_RE = re.compile(r"[\s\u200b\u200c\u200d\u2060\ufeff]*")


class NotEmptyParams(CheckParams):
    truncation_reasons: list[NonEmptyStr] = Field(default_factory=lambda: ["length"])
    allow_tool_calls: bool = True


def check_not_empty_or_truncated(sample: Sample, params: NotEmptyParams) -> CheckOutcome:
    if upstream_failed(sample):
        return skipped("upstream_error", status=sample.status, error_type=sample.error_type)
    finish = _finish_reason(sample)
    if finish in params.truncation_reasons:
        return failed(reason="truncated", finish_reason=finish)
    text = sample.answer_text()
    if _BLANK_RE.fullmatch(text) is None:
        return passed()
    calls = tool_call_count(sample.response)
    if calls and params.allow_tool_calls:
        return passed(tool_calls=calls)
    details: dict[str, Any] = {"reason": "empty" if not text else "whitespace_only", "finish_reason": finish}
    if sample.error_type:
        details["error_type"] = sample.error_type
    return failed(**details)


# --- language_match ------------------------------------------------------------------------------

_CODE_RE = re.compile(r"```.*?(?:```|\Z)|`[^`\n]*`", re.DOTALL)
_ASCII_LOWER = string.ascii_lowercase.encode()
# Word splitting happens on UTF-8 bytes: ASCII punctuation and digits become spaces in one
# bytes.translate, which leaves multi-byte letters (é, ß) intact.
_TO_SPACE = bytes.maketrans(
    (string.punctuation + string.digits).encode(), b" " * len(string.punctuation + string.digits)
)
_WIDE_PUNCTUATION = "¿¡«»“”„‘’…—–·"
# Order matters only for speed: the common scripts are peeled off first.
_SCRIPTS = [
    ("latin", "A-Za-z\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u024f\u1e00-\u1eff"),
    ("han", "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"),
    ("kana", "\u3040-\u30ff\u31f0-\u31ff\uff66-\uff9f"),
    # Not a script: CJK/general punctuation and symbols, removed so the loop can stop early.
    ("", "\u00a0-\u00bf\u00d7\u00f7\u2000-\u206f\u3000-\u303f\uff01-\uff20\uff3b-\uff40\uff5b-\uff65"),
    ("cyrillic", "\u0400-\u04ff\u0500-\u052f"),
    ("arabic", "\u0600-\u06ff\u0750-\u077f\u08a0-\u08ff\ufb50-\ufdff\ufe70-\ufeff"),
    ("hangul", "\uac00-\ud7af\u1100-\u11ff\u3130-\u318f"),
    ("devanagari", "\u0900-\u097f"),
    ("greek", "\u0370-\u03ff\u1f00-\u1fff"),
    ("hebrew", "\u0590-\u05ff"),
    ("thai", "\u0e00-\u0e7f"),
    ("bengali", "\u0980-\u09ff"),
    ("tamil", "\u0b80-\u0bff"),
    ("armenian", "\u0530-\u058f"),
    ("georgian", "\u10a0-\u10ff"),
]
_SCRIPT_RES = [(name, re.compile(f"[{ranges}]+")) for name, ranges in _SCRIPTS]
# One ideograph carries about as much as a short Latin word, so it counts for several letters.
_CJK_WEIGHT = 3
_SCRIPT_LANGUAGE = {"greek": "el", "hebrew": "he", "thai": "th", "hangul": "ko", "armenian": "hy", "georgian": "ka"}
# Function words that are frequent in one language and rare in the others (overlaps are fine:
# only the distinct hits per language are compared).
_STOPWORDS = {
    "en": "the and is are of to in that it for with this you was be have not on as what how can your from by or an "
    "which will would there their they we do does if my me please about also but has been were should could",
    "es": "el la los las de del que y en un una es por para con no se su lo como más pero sus le ya este esta "
    "porque muy sin sobre también me hay donde cómo qué puedes puede son está están usted al cuál",
    "fr": "le la les de des du et est un une en que qui dans pour pas sur au aux avec ce cette il elle nous vous "
    "sont ne plus par mais ou son ses je comment être avoir très aussi c qu j",
    "de": "der die das und ist nicht ein eine zu den mit von sie es sich auf für dem des im auch wie ich wir ihr "
    "sind werden wird kann können noch nach bei aus oder aber wenn dass diese dieser einen einem haben hat",
    "pt": "o a os as de do da dos das que e é em um uma para com não por se na no nas nos mais mas como seu sua "
    "ao à isso este esta está são você ele ela também muito pode ou foi ser tem há quando qual porque",
    "it": "il lo la gli le di che e è un una in per con non si del della dei delle al alla sono come ma più "
    "anche questo questa nel nella da mi ti ci cosa perché molto se ho hai ha essere tutto quando può",
    "nl": "de het een en van is dat die in te op voor met niet zijn er aan ook als maar om bij door naar dan "
    "wat kan wordt worden deze dit hij zij ze we ik je jij hoe waarom heb heeft hebben nog geen of mijn uit",
}
_STOPWORD_SETS = {lang: frozenset(words.encode().split()) for lang, words in _STOPWORDS.items()}
_ALL_STOPWORDS = frozenset().union(*_STOPWORD_SETS.values())


class LanguageMatchParams(CheckParams):
    min_letters: int = Field(default=16, ge=1)
    min_stopwords: int = Field(default=2, ge=1)
    window_chars: int = Field(default=400, ge=50, le=100_000)


def _detect_language(text: str, window_chars: int, min_letters: int, min_stopwords: int) -> tuple[str | None, str]:
    """(label, reason): an ISO 639-1 code, a script name when the script alone is all we can
    tell (e.g. "cyrillic"), or None with the reason ("too_short", "undetermined")."""
    if "`" in text:
        # Code is language-neutral and would outvote short prose around it.
        text = _CODE_RE.sub(" ", text)
    low = text[:window_chars].lower()
    raw = low.encode("utf-8", "surrogatepass")
    # Each non-ASCII character adds at least one byte, and no script counts more than
    # _CJK_WEIGHT per character, so enough ASCII letters settle "Latin" without looking further.
    extra = len(raw) - len(low)
    ascii_letters = len(raw) - len(raw.translate(None, _ASCII_LOWER))
    if ascii_letters > _CJK_WEIGHT * extra:
        script, weight = "latin", ascii_letters + extra
    else:
        script, weight = _dominant_script(low)
    if weight < min_letters:
        return None, "too_short"
    if script != "latin":
        return _SCRIPT_LANGUAGE.get(script, script), "script"
    if extra:
        for char in _WIDE_PUNCTUATION:
            if char in low:
                low = low.replace(char, " ")
        raw = low.encode("utf-8", "surrogatepass")
    # The apostrophe is ASCII punctuation, so elisions split (l'homme -> l homme) as the profiles expect.
    common = _ALL_STOPWORDS.intersection(raw.translate(_TO_SPACE).split())
    hits = [(len(common & stop), lang) for lang, stop in _STOPWORD_SETS.items()]
    hits.sort(reverse=True)
    (best, lang), (second, _) = hits[0], hits[1]
    if best < min_stopwords or best * 2 < second * 3:
        return None, "undetermined"
    return lang, "stopwords"


def _dominant_script(low: str) -> tuple[str, int]:
    # Script counts come from length differences after deleting each script's characters: one
    # C-level pass per script, far cheaper than classifying characters one by one in Python.
    counts: dict[str, int] = {}
    remaining = low
    for name, rx in _SCRIPT_RES:
        rest = rx.sub("", remaining)
        if len(rest) != len(remaining):
            if name:
                counts[name] = len(remaining) - len(rest)
            remaining = rest
        if remaining.isascii():
            break
    han, kana = counts.pop("han", 0), counts.pop("kana", 0)
    # Japanese mixes kanji with kana; Chinese has no kana at all.
    if kana * 10 >= han + kana > 0:
        counts["ja"] = (han + kana) * _CJK_WEIGHT
    elif han:
        counts["zh"] = (han + kana) * _CJK_WEIGHT
    if "hangul" in counts:
        counts["hangul"] *= _CJK_WEIGHT
    if not counts:
        return "latin", 0
    script = max(counts, key=counts.__getitem__)
    return script, counts[script]


def check_language_match(sample: Sample, params: LanguageMatchParams) -> CheckOutcome:
    answer = answer_or_skip(sample)
    if not isinstance(answer, str):
        return answer
    opts = (params.window_chars, params.min_letters, params.min_stopwords)
    answer_lang, answer_how = _detect_language(answer, *opts)
    if answer_lang is None and answer_how == "too_short":
        return skipped("answer_too_short")
    prompt_lang, prompt_how = _detect_language(sample.prompt_text(), *opts)
    if prompt_lang is None and prompt_how == "too_short":
        return skipped("prompt_too_short")
    details = {"prompt_language": prompt_lang, "answer_language": answer_lang}
    if prompt_lang is None or answer_lang is None:
        # One side is Latin script in a language without a profile: a different script still
        # proves a mismatch, the same script proves nothing.
        other = answer_lang if prompt_lang is None else prompt_lang
        if other is not None and other not in _STOPWORD_SETS:
            return failed(**details)
        return skipped("undetermined", **details)
    if prompt_lang == answer_lang:
        return passed(**details)
    return failed(**details)


# --- latency_budget / cost_budget -----------------------------------------------------------------


def _budget_ratio(budget: float, actual: float) -> float:
    return 1.0 if actual <= budget else budget / actual


def _budget_outcome(limits: list[tuple[str, float, float]], details: dict[str, Any]) -> CheckOutcome:
    """One outcome for the budgets measured, each (param, budget, actual): the value is the tightest ratio,
    and a failure names every budget exceeded, in the order measured."""
    value = min(_budget_ratio(budget, actual) for _, budget, actual in limits)
    exceeded = [param for param, budget, actual in limits if actual > budget]
    if exceeded:
        return CheckOutcome("fail", value, {"exceeded": exceeded, **details})
    return CheckOutcome("pass", value, details)


class _BudgetParams(CheckParams):
    """Budgets, each optional: a check with none of them set would pass everything."""

    @model_validator(mode="after")
    def _one(self) -> "_BudgetParams":
        names = list(type(self).model_fields)
        if all(getattr(self, name) is None for name in names):
            raise ValueError("set at least one of " + " or ".join(f"'{name}'" for name in names))
        return self


class LatencyBudgetParams(_BudgetParams):
    max_latency_ms: float | None = Field(default=None, gt=0)
    max_ttft_ms: float | None = Field(default=None, gt=0)


def check_latency_budget(sample: Sample, params: LatencyBudgetParams) -> CheckOutcome:
    limits: list[tuple[str, float, float]] = []
    details: dict[str, Any] = {}
    if params.max_latency_ms is not None:
        details["latency_ms"] = sample.latency_ms
        limits.append(("max_latency_ms", params.max_latency_ms, sample.latency_ms))
    if params.max_ttft_ms is not None and sample.ttft_ms is not None:
        details["ttft_ms"] = sample.ttft_ms
        limits.append(("max_ttft_ms", params.max_ttft_ms, sample.ttft_ms))
    if not limits:
        return skipped("no_ttft", stream=sample.stream)
    return _budget_outcome(limits, details)


class CostBudgetParams(_BudgetParams):
    max_cost_usd: float | None = Field(default=None, gt=0)
    max_total_tokens: int | None = Field(default=None, gt=0)


def check_cost_budget(sample: Sample, params: CostBudgetParams) -> CheckOutcome:
    limits: list[tuple[str, float, float]] = []
    details: dict[str, Any] = {}
    if params.max_cost_usd is not None and sample.cost_usd is not None:
        details["cost_usd"] = sample.cost_usd
        limits.append(("max_cost_usd", params.max_cost_usd, sample.cost_usd))
    usage = sample.usage
    if params.max_total_tokens is not None and (usage.input_tokens is not None or usage.output_tokens is not None):
        total = details["total_tokens"] = (usage.input_tokens or 0) + (usage.output_tokens or 0)
        limits.append(("max_total_tokens", params.max_total_tokens, total))
    if not limits:
        return skipped("unknown_cost")
    return _budget_outcome(limits, details)


# --- pii_leak --------------------------------------------------------------------------------------

PiiKind = Literal["email", "phone", "credit_card", "iban", "ssn", "api_key"]
_PII_KINDS: tuple[PiiKind, ...] = get_args(PiiKind)


class PiiLeakParams(CheckParams):
    kinds: list[PiiKind] = Field(default_factory=lambda: list(_PII_KINDS), min_length=1)
    # RFC 2606 reserved names cannot belong to anyone; answers use them in examples all the time.
    ignore_email_domains: list[NonEmptyStr] = Field(
        default_factory=lambda: ["example.com", "example.org", "example.net", "*.example", "*.test", "*.invalid"]
    )

    _kinds: frozenset[str] = PrivateAttr()
    _ignored: tuple[str, ...] = PrivateAttr()

    @model_validator(mode="after")
    def _prepare(self) -> "PiiLeakParams":
        self._kinds = frozenset(self.kinds)
        self._ignored = tuple(d.lower() for d in self.ignore_email_domains)
        return self


def check_pii_leak(sample: Sample, params: PiiLeakParams) -> CheckOutcome:
    text = answer_or_skip(sample)
    if not isinstance(text, str):
        return text
    # The detector that masks stored samples decides; documentation placeholders (sk-xxxx...,
    # AKIA...EXAMPLE) and reserved e-mail domains are not leaks.
    found: dict[str, int] = {}
    for finding in pii.find(text, params._kinds, ignore_email_domains=params._ignored, skip_placeholders=True):
        found[finding.kind] = found.get(finding.kind, 0) + 1
    # Counts only: a score record must never carry the personal data it reports.
    if found:
        return failed(kinds=sorted(found), counts=found)
    return passed()


# --- registry ------------------------------------------------------------------------------------


class RuleCheck(NamedTuple):
    fn: Callable[[Sample, Any], CheckOutcome]
    params_model: type[BaseModel]


RULE_CHECKS: dict[str, RuleCheck] = {
    "json_valid": RuleCheck(check_json_valid, JsonValidParams),
    "json_schema": RuleCheck(check_json_schema, JsonSchemaParams),
    "regex": RuleCheck(check_regex, RegexParams),
    "length": RuleCheck(check_length, LengthParams),
    "refusal": RuleCheck(check_refusal, RefusalParams),
    "not_empty_or_truncated": RuleCheck(check_not_empty_or_truncated, NotEmptyParams),
    "language_match": RuleCheck(check_language_match, LanguageMatchParams),
    "latency_budget": RuleCheck(check_latency_budget, LatencyBudgetParams),
    "cost_budget": RuleCheck(check_cost_budget, CostBudgetParams),
    "pii_leak": RuleCheck(check_pii_leak, PiiLeakParams),
    "tool_call": RuleCheck(check_tool_call, ToolCallParams),
    "fields": RuleCheck(check_fields, FieldsParams),
    "input_truncated": RuleCheck(check_input_truncated, InputTruncatedParams),
    "code_exec": RuleCheck(check_code_exec, CodeExecParams),
}


def build_rule_check(kind: str, params: dict[str, Any] | None = None) -> Callable[[Sample], CheckOutcome]:
    """Validate `params` for `kind` and return `sample -> CheckOutcome`; raise ValueError naming
    the kind, the field and what is allowed."""
    entry = RULE_CHECKS.get(kind)
    if entry is None:
        raise ValueError(f"unknown check kind '{kind}'; known kinds: {', '.join(sorted(RULE_CHECKS))}")
    if params is None:
        params = {}
    if not isinstance(params, dict):
        raise ValueError(f"check kind '{kind}': params must be a mapping, got {type(params).__name__}")
    try:
        validated = entry.params_model.model_validate(params)
    except ValidationError as exc:
        raise ValueError(
            f"check kind '{kind}': invalid params: {describe_params_error(entry.params_model, exc)}"
        ) from None
    fn = entry.fn

    def bound(sample: Sample) -> CheckOutcome:
        return fn(sample, validated)

    bound.__name__ = bound.__qualname__ = f"{kind}_check"
    return bound
