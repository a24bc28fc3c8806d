"""The one root of llmwatch's exceptions, and the one way to put a pydantic error into words.

Every exception class the project defines derives from `LlmwatchError`, so the command line
catches them once and exits with the error's `exit_code` (2: bad input or configuration, by the
exit-code contract of agent/llmwatch/agent/cli/main.py) with its message, never a traceback. Classes keep their
historic builtin base too (`ValueError`, `RuntimeError`) so existing `except` clauses still work.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence, TypeVar

from pydantic import ValidationError

from llmwatch.core.urls import mask_url

T = TypeVar("T")

__all__ = ["LlmwatchError", "describe_validation_error"]


class LlmwatchError(Exception):
    """An error llmwatch reports to the user as a message and an exit code."""

    exit_code: int = 2
    # What the command line writes between "llmwatch: " and the message (e.g. "bad input: ").
    label: str = ""

    def __init__(self, *args: Any, exit_code: int | None = None) -> None:
        super().__init__(*args)
        if exit_code is not None:
            self.exit_code = exit_code


AllowedFields = Sequence[str] | Callable[[tuple[Any, ...]], Sequence[str] | None]


def describe_validation_error(
    exc: ValidationError,
    *,
    allowed: AllowedFields | None = None,
    header: str | None = None,
    origins: Mapping[str, str] | None = None,
    file_lines: Mapping[str, int] | None = None,
    secret: Callable[[tuple[Any, ...]], bool] | None = None,
    elsewhere: Callable[[str], Sequence[str]] | None = None,
) -> str:
    """Name each failing field and say what is wrong with it, without pydantic's noise.

    Inline (the default), for a message that already names the file and line:
    "field 'a.b': message; unknown field 'c' (allowed fields: x, y)". Whole-record errors (a
    model validator) are bare messages. Unknown fields list the allowed ones when `allowed`
    says what they are (a list, or a function of the error's location).

    With `header`, one line per error under it, for the configuration: "  - a.b (ORIGIN):
    message (got 'value')", where `origins` maps the path, or the section that holds it, to where
    the value came from ("from environment variable X", "command line: --upstream"). The value
    is named once: not again when the message already quotes it. `file_lines` maps a path of the
    config file to its line: a value from the file (no other origin) reads "  - line 4: a.b: ...".
    `secret(loc)` says a value given at `loc` may be a secret (a secret field, or a section holding
    one): it is never quoted. `elsewhere(name)` lists the dotted paths where a field of that name
    does exist, for an unknown field written at the wrong depth (`proxy.listen` for `listen`).
    """
    lines = []
    file_order: list[int] = []  # the config file's line of each entry, to list them top to bottom
    for err in exc.errors():
        loc = tuple(err["loc"])
        path = ".".join(str(p) for p in loc)
        message = err["msg"].removeprefix("Value error, ")
        unknown = err["type"] == "extra_forbidden"
        fields = (allowed(loc) if callable(allowed) else allowed) if allowed is not None else None
        if header is None:
            if unknown and fields is not None:
                lines.append(f"unknown field '{path}' (allowed fields: {', '.join(fields) or 'none'})")
            else:
                lines.append(f"field '{path}': {message}" if path else message)
            continue
        path = path or "(top level)"
        origin = _origin_of(path, origins or {})
        where = f" ({origin})" if origin else ""
        line = None if origin else _line_of(path, file_lines or {})
        at = f"line {line}: " if line else ""
        if unknown:
            hint = f"; allowed here: {', '.join(fields)}" if fields else ""
            moved = _elsewhere_hint(str(loc[-1]), path, elsewhere)
            lines.append(f"  - {at}{path}{where}: unknown field{hint}{moved}{_env_hint(str(loc[-1]), origin, fields)}")
            file_order.append(line or 0)
            continue
        given = err.get("input")
        if isinstance(given, str):
            given = mask_url(given)  # an invalid URL may still carry a password
        # Validators here already say "got '...'"; pydantic's own messages ("less than or equal
        # to 1") do not.
        hidden = secret is not None and secret(loc)
        given_text = "" if hidden or isinstance(given, (dict, list)) or repr(given) in message else f" (got {given!r})"
        if err["type"] == "model_type":
            # pydantic says "a valid dictionary or instance of SamplingSection": a class name the
            # reader never wrote. Say what goes there, and its fields.
            message = "expected a section (its fields indented below it, or {field: value})"
            inner = (allowed((*loc, "")) if callable(allowed) else None) if allowed is not None else None
            # A value where a section with a secret goes may be the secret (LLMWATCH_JUDGE=<key>).
            shown = f"a {type(given).__name__} (not shown: this section holds a secret)" if hidden else repr(given)
            given_text = f", got {shown}" + (f"; fields here: {', '.join(inner)}" if inner else "")
        if (
            err["type"] == "list_type"
            and not hidden
            and isinstance(given, str)
            and origin
            and origin.startswith(_ENV_ORIGIN)
        ):
            # A variable's value is read as YAML: "a,b" is one string, "[a, b]" a list.
            if given.lstrip().startswith(("[", "{")):
                given_text += "; that is not valid YAML (a list is written [a, b], an item with fields {key: value})"
            else:
                items = ", ".join(p.strip() for p in given.split(",") if p.strip())
                given_text += f"; a variable gives a list in YAML's flow form: {origin[len(_ENV_ORIGIN) :]}='[{items}]'"
        lines.append(f"  - {at}{path}{where}: {message}{given_text}")
        file_order.append(line or 0)
    if header is None:
        return "; ".join(lines)
    # pydantic reports in the order of the model's sections; a reader fixes a file top to bottom.
    # Values from variables and flags (no line) come after the file's, in pydantic's order.
    ordered = [text for _, text in sorted(zip(file_order, lines), key=lambda e: (e[0] == 0, e[0]))]
    return "\n".join([header, *ordered])


_ENV_ORIGIN = "from environment variable "


def _elsewhere_hint(name: str, path: str, elsewhere: Callable[[str], Sequence[str]] | None) -> str:
    """Where a field of this name does go, when it is not here (indented one level too deep or not
    deep enough is the commonest slip in a YAML file)."""
    places = [p for p in (elsewhere(name) if elsewhere is not None else ()) if p != path]
    # A name that many sections share ('enabled', 'rate') says nothing about which one was meant.
    if not places or len(places) > 3:
        return ""
    return f"; a field '{name}' goes at " + " or ".join(f"'{p}'" for p in sorted(places, key=lambda p: p.count(".")))


def _env_hint(name: str, origin: str | None, fields: Sequence[str] | None) -> str:
    """For an unknown `name` set by a variable with one underscore where two go
    (LLMWATCH_SAMPLING_RATE for sampling.rate): the variable meant, when a field here starts it."""
    if not origin or not origin.startswith(_ENV_ORIGIN) or not fields:
        return ""
    variable = origin[len(_ENV_ORIGIN) :]
    if not variable.lower().endswith(name):
        return ""
    head = variable[: len(variable) - len(name)]
    for field in sorted(fields, key=len, reverse=True):
        rest = name[len(field) + 1 :]
        if name.startswith(field + "_") and rest:
            meant = f"{head}{field.upper()}__{rest.upper()}"
            return f"; did you mean {meant}? (sections and fields are joined by two underscores)"
    return ""


def _nearest(path: str, by_path: Mapping[str, T]) -> T | None:
    """The value of `path`, or of the nearest dotted prefix of it that has one."""
    parts = path.split(".")
    for n in range(len(parts), 0, -1):
        value = by_path.get(".".join(parts[:n]))
        if value:
            return value
    return None


def _line_of(path: str, file_lines: Mapping[str, int]) -> int | None:
    """The line of `path` in the config file, or of the nearest key above it (a missing field)."""
    return _nearest(path, file_lines)


def _origin_of(path: str, origins: Mapping[str, str]) -> str | None:
    """The origin of `path`, or of the nearest section that holds it (`--kafka` sets kafka.*)."""
    origin = _nearest(path, origins)
    if origin:
        return origin
    # A section nobody knows, set only through its fields (LLMWATCH_SAMPLNG__RATE makes the
    # unknown section `samplng`): name the variables that made it, or the reader looks for
    # `samplng` in a config file that does not have it.
    below = sorted({origin for key, origin in origins.items() if key.startswith(path + ".")})
    return "; ".join(below) or None
