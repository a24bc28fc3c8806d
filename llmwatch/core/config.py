"""The configuration's machinery: the section base, shared validators, the core's own sections, the loader.

A YAML file (optional) is read, environment variables `LLMWATCH_<SECTION>__<FIELD>` are laid
over it, command-line flags over those, and the result is validated once at start-up. Every
error names the field (dotted path), what was given and what is allowed, so that a bad file
never starts a half-configured sidecar.

Each component owns its section, beside its code (e.g. `KafkaSection` in
llmwatch.collectors.exporters.kafka, `ScoringSection` in llmwatch.scorers.checks.config); the root
`Config` is assembled from the registered components in llmwatch.agent.components. This module
holds only what every section shares and the sections of the core itself (queue, metrics,
model_version, files, logging).
"""

from __future__ import annotations

import os
import re
import types
import typing
from pathlib import Path
from typing import Annotated, Any, Literal, Mapping, Sequence, TypeVar

import yaml
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PrivateAttr,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)

from llmwatch.core.errors import LlmwatchError, describe_validation_error
from llmwatch.core.jsonio import read_document
from llmwatch.core.pricing import PriceFile, PriceTable, read_price_file

ENV_PREFIX = "LLMWATCH_"
# Variables under the prefix that are not settings: the config file's path, and hatch_build.py's
# switch for the proxy's C extension (LLMWATCH_NATIVE=0 skips it, =1 requires it), which an
# install may leave set in the shell that then starts llmwatch.
_NOT_SETTINGS = frozenset({ENV_PREFIX + "CONFIG", ENV_PREFIX + "NATIVE"})


class ConfigError(LlmwatchError, ValueError):
    """Configuration that cannot be used; the message says which field and how to fix it."""


class ListenError(ConfigError):
    """An address from the configuration that cannot be listened on (in use, not ours, no permission)."""


class Section(BaseModel):
    """The base of every configuration section."""

    # Unknown keys are almost always typos (`sample_rate` for `rate`); refuse them loudly.
    model_config = ConfigDict(extra="forbid", frozen=True)


_Section = Section  # the older name


def inactive_settings(config: BaseModel, prefix: str = "") -> list[tuple[str, list[str]]]:
    """Sections that are switched off (`enabled: false`) but were given other settings.

    Such settings do nothing, which a user cannot tell from the outside (`shadow.candidates`
    without `shadow.enabled: true` mirrors nothing). Returns (section path, [keys set]) for each,
    from the fields the user set (`model_fields_set`: the file, the environment, the command
    line), depth first; a section that is off is not looked into further.
    """
    out: list[tuple[str, list[str]]] = []
    for name in type(config).model_fields:
        value = getattr(config, name, None)
        if not isinstance(value, BaseModel):
            continue
        path = f"{prefix}{name}"
        if "enabled" in type(value).model_fields and value.enabled is False:  # type: ignore[attr-defined]
            # A section may hold settings its `enabled` does not switch (`ungated_settings`).
            given = sorted(value.model_fields_set - {"enabled"} - set(getattr(value, "ungated_settings", ())))
            if given:
                out.append((path, given))
            continue
        out += inactive_settings(value, f"{path}.")
    return out


ConfigT = TypeVar("ConfigT", bound=BaseModel)


def normalize_upstream(url: str) -> str:
    """The server's base URL from what a user gives: `http://h:8000`, `.../`, or the `/v1` root.

    Clients send paths that already start with `/v1/` (the proxy forwards them as they are), so
    an upstream given as the `/v1` root, the form OpenAI clients take as `base_url`, would send
    every call to `/v1/v1/...`. One trailing `/v1` segment is dropped; a deeper path (a gateway
    serving under a prefix, `https://gw/openai`) is kept.
    """
    url = url.rstrip("/")
    if url.endswith("/v1") and re.match(r"^https?://[^/\s]+/", url):
        url = url[: -len("/v1")].rstrip("/")
    return url


def host_port(value: str) -> str:
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not (0 <= int(port) <= 65535):
        raise ValueError(f"expected HOST:PORT such as 127.0.0.1:8080, got {value!r}")
    return value


def parse_cpu_list(text: str) -> set[int]:
    """The CPUs of a taskset-style list ("0", "1-3", "1,3-4"); ValueError naming the fix otherwise."""
    cpus: set[int] = set()
    for part in text.split(","):
        m = re.fullmatch(r"\s*(\d+)\s*(?:-\s*(\d+)\s*)?", part)
        if m is None or (m.group(2) is not None and int(m.group(2)) < int(m.group(1))):
            raise ValueError(f"{text!r} is not a CPU list: use auto, all, or CPU numbers such as 1-3 or 1,3")
        cpus.update(range(int(m.group(1)), int(m.group(2) or m.group(1)) + 1))
    return cpus


def cpu_affinity_value(value: Any) -> str:
    """A `cpu_affinity` setting (scoring, shadow): auto, all, or a CPU list such as 1-3 or 1,3."""
    # YAML and environment values arrive typed: `cpu_affinity: 1` is an int, `[1, 3]` a list.
    if isinstance(value, bool):
        raise ValueError("use auto, all, or CPU numbers such as 1-3 or 1,3")
    if isinstance(value, int):
        value = str(value)
    elif isinstance(value, list) and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        value = ",".join(str(v) for v in value)
    if not isinstance(value, str):
        raise ValueError("use auto, all, or CPU numbers such as 1-3 or 1,3")
    value = value.strip()
    if value in ("auto", "all"):
        return value
    parse_cpu_list(value)
    return value


# The `cpu_affinity` field of every section that places a child process (scoring, shadow,
# consistency, judge): YAML and environment values read through `cpu_affinity_value`.
CpuAffinity = Annotated[str, BeforeValidator(cpu_affinity_value)]


def _secret_as_text(value: Any) -> Any:
    # Any scalar is taken as text: a field's error would quote the value, and this is a secret
    # (`hash_salt: 987654321` in YAML was refused as "Input should be a valid string (got 987654321)").
    return value if value is None or isinstance(value, SecretStr) else str(value)


# A password, key or salt: held as SecretStr (masked in repr and dumps), given as any scalar.
SecretText = Annotated[SecretStr | None, BeforeValidator(_secret_as_text)]


def secret_header_values(value: Any, example: str) -> dict[str, Any]:
    """Header values as text before validation: a validation error would echo a value, and these are secrets."""
    if not isinstance(value, dict):
        raise ValueError(f"expected a mapping of header names to values, e.g. {example}")
    return {str(k): v if isinstance(v, SecretStr) else str(v) for k, v in value.items()}


# --- the core's own sections -----------------------------------------------------------------


class QueueSection(Section):
    max_size: int = Field(10_000, ge=1)
    # The sample pipeline lets a batch gather up to this many samples before it builds, redacts and writes them.
    batch_min: int = Field(16, ge=1, le=256)
    # At most this long (seconds) after the batch's first sample: how far sample storage may run behind traffic at low rates.
    batch_linger_s: float = Field(1.0, ge=0, le=60)


class Price(Section):
    input_per_million: float = Field(ge=0)
    output_per_million: float = Field(ge=0)
    # Unset: cached input and cache writes cost what input costs, reasoning what output costs.
    cached_input_per_million: float | None = Field(None, ge=0)
    cache_write_per_million: float | None = Field(None, ge=0)
    reasoning_per_million: float | None = Field(None, ge=0)


class MetricsSection(Section):
    # Beyond this many distinct model names the rest are reported as model "other".
    max_models: int = Field(20, ge=1, le=500)
    max_versions: int = Field(20, ge=1, le=500)
    # Model names that always get their own label, whatever clients send first. Models in the
    # price table and models the upstream answered for are kept too; only request model names
    # no upstream confirmed count against max_models.
    models: list[str] = Field(default_factory=list)
    # USD per million tokens; merged over the built-in defaults (yours win).
    pricing: dict[str, Price] = Field(default_factory=dict)
    # A price file (JSON or YAML, schema llmwatch.prices/v1, the shape of the built-in
    # llmwatch/core/prices.json): its rows replace the built-in ones model by model; `pricing` wins over it.
    prices_file: str | None = None

    _prices_file: PriceFile | None = PrivateAttr(default=None)

    @model_validator(mode="after")
    def _read_prices_file(self) -> "MetricsSection":
        # Read at start, so a bad file stops the agent with its name and field before any traffic.
        if self.prices_file is not None:
            self._prices_file = read_price_file(Path(self.prices_file).expanduser())
        return self

    def price_table(self) -> PriceTable:
        """The built-in prices, the price file's rows over them, `pricing` over both."""
        return PriceTable(self.pricing, prices_file=self._prices_file)


class ModelVersionSection(Section):
    # Response header that names the serving model version; falls back to `default`, then to
    # the response's `model` field (e.g. gpt-4o-2024-08-06), then to the request's.
    header: str = "x-model-version"
    default: str | None = None


class FilesSection(Section):
    enabled: bool = True
    max_file_bytes: int = Field(100 * 1024 * 1024, ge=4096)
    # Mode of data files (samples, scores, baselines, reports, review files), an octal string;
    # directories created for them get the matching x bits (0600 -> 0700, 0640 -> 0750).
    # Private by default: they hold prompts and answers.
    mode: str = "0600"

    @field_validator("mode")
    @classmethod
    def _octal_mode(cls, value: str) -> str:
        if not re.fullmatch(r"0?[0-7]{3}", value) or int(value, 8) & ~0o666:
            raise ValueError(f'expected an octal file mode such as "0600" or "0640" (no execute bits), got {value!r}')
        if not int(value, 8) & 0o600 == 0o600:
            raise ValueError(f"mode {value!r} must let the owner read and write (0600 at least)")
        return value

    @property
    def mode_bits(self) -> int:
        return int(self.mode, 8)


class LoggingSection(Section):
    # The commands that print a summary or a report (demo, score, baseline, drift, canary, report,
    # regress, review, judge, suite, shadow, replay: QUIET_COMMANDS in llmwatch.agent.cli.args) log
    # warnings and errors only unless it is set here or --verbose / --log-level is given, so that
    # their output is not interleaved with log lines; the others (proxy, ingest, simulate, scorer,
    # aggregate, archive, ui) log at this level.
    level: Literal["debug", "info", "warning", "error"] = "info"
    # Unset: console lines when stderr is a terminal, JSON lines otherwise (a collector reads them);
    # `llmwatch demo` writes console lines either way. Set, it holds everywhere.
    format: Literal["json", "console"] = "json"

    def chosen_format(self) -> Literal["json", "console"] | None:
        """The format when one was configured (or chosen for the command: `llmwatch demo`'s
        console lines); None leaves it to configure_logging, which decides by the terminal."""
        return self.format if "format" in self.model_fields_set else None


# --- loading ---------------------------------------------------------------------------------


def _allowed_fields(model: type[BaseModel], loc: tuple[Any, ...]) -> list[str] | None:
    """Walk the models along an error location to list the keys allowed where the error is."""
    current = _model_at(model, loc)
    if isinstance(current, type) and issubclass(current, BaseModel):
        return sorted(current.model_fields)
    return None


def _places_of(model: type[BaseModel], name: str, prefix: str = "", depth: int = 0) -> list[str]:
    """The dotted paths of every field called `name`: this model's own, then its sections' (nested up to four deep)."""
    places: list[str] = []
    nested: list[str] = []
    for field_name, field in model.model_fields.items():
        path = f"{prefix}{field_name}"
        if field_name == name:
            places.append(path)
        if depth >= 4:
            continue
        for inner in _models_in(field.annotation):
            nested += _places_of(inner, name, f"{path}.", depth + 1)
    return places + nested


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    """The models an annotation holds: `Section`, `Section | None`, and `list[Model] | None`
    (scoring.checks, matrix.categories): inside the list too."""
    candidates = [
        c for a in (getattr(annotation, "__args__", ()) or (annotation,)) for c in (a, *getattr(a, "__args__", ()))
    ]
    return [c for c in candidates if isinstance(c, type) and issubclass(c, BaseModel)]


def _holds_secret(model: type[BaseModel], loc: tuple[Any, ...]) -> bool:
    """Whether a value given at `loc` may be a secret: `loc` is a secret field (a SecretStr, or a
    dict of them: `otel.headers: "authorization=Bearer ..."`), lies inside one, or is a section
    that has one (a value where that section goes may be the secret: LLMWATCH_JUDGE=<the key>)."""
    holder = _model_at(model, loc)
    if isinstance(holder, type) and issubclass(holder, BaseModel):
        field = holder.model_fields.get(str(loc[-1])) if loc else None
        if field is not None and "SecretStr" in repr(field.annotation):
            return True
    elif holder is not None and "SecretStr" in repr(holder):
        return True
    current = _model_at(model, (*loc, ""))
    if not (isinstance(current, type) and issubclass(current, BaseModel)):
        return False
    return any("SecretStr" in repr(f.annotation) for f in current.model_fields.values())


def _model_at(model: type[BaseModel], loc: tuple[Any, ...]) -> Any:
    """The model (or annotation) that holds the last key of `loc`."""
    current: Any = model
    for part in loc[:-1]:
        if isinstance(part, int):
            continue
        if not (isinstance(current, type) and issubclass(current, BaseModel)):
            return None
        field = current.model_fields.get(str(part))
        if field is None:
            return None
        models = _models_in(field.annotation)
        current = models[0] if models else field.annotation
    return current


def _flag_origins(overrides: Mapping[str, Any], flags: Mapping[str, str], prefix: str = "") -> dict[str, str]:
    """Dotted path -> "command line: --flag" for every leaf set by a command-line override."""
    out: dict[str, str] = {}
    for key, value in overrides.items():
        if value is None:
            continue
        path = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(_flag_origins(value, flags, path + "."))
        elif path in flags or not prefix:
            # Top-level keys are the command's own flags (--upstream, --listen, ...); a nested
            # value is a flag's only where `flags` says so (programmatic overrides are not flags).
            flag = flags.get(path) or "--" + str(key).replace("_", "-")
            out[path] = f"command line: {flag}"
    return out


def _is_secret(model: type[BaseModel] | None, path: Sequence[str]) -> bool:
    """Whether `path` names a SecretStr field of `model` (a password, a key)."""
    current: Any = model
    for part in path:
        if not (isinstance(current, type) and issubclass(current, BaseModel)):
            return False
        field = current.model_fields.get(part)
        if field is None:
            return False
        current = field.annotation
        if typing.get_origin(current) in (typing.Union, types.UnionType):  # `SecretStr | None`, `Section | None`
            current = next((a for a in typing.get_args(current) if a is not type(None)), None)
    return current is SecretStr


def _env_overrides(
    environ: Mapping[str, str], model: type[BaseModel] | None = None
) -> tuple[dict[str, Any], dict[str, str]]:
    """`LLMWATCH_SAMPLING__RATE=0.5` -> {"sampling": {"rate": 0.5}}; values are parsed as YAML scalars,
    except a secret's (a SecretStr field of `model`), taken as written: read as YAML, the password
    `yes` would become True, `0123` the number 83 and `null` no password at all."""
    tree: dict[str, Any] = {}
    origins: dict[str, str] = {}
    for key, raw in environ.items():
        if not key.startswith(ENV_PREFIX) or key in _NOT_SETTINGS:
            continue
        path = [p.lower() for p in key[len(ENV_PREFIX) :].split("__") if p]
        if not path:
            continue
        try:
            value = raw if _is_secret(model, path) else yaml.safe_load(raw) if raw.strip() else raw
        except yaml.YAMLError:
            value = raw
        node = tree
        for part in path[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"environment variable {key}: {'.'.join(path[:-1])} is not a section")
        node[path[-1]] = value
        origins[".".join(path)] = f"from environment variable {key}"
    return tree, origins


def _merge(base: dict[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def read_yaml(path: str | os.PathLike[str], *, variable: str | None = None) -> dict[str, Any]:
    """The config file's mapping. `variable` names the environment variable that gave the path
    (LLMWATCH_CONFIG): the fix is then that variable, not a --config the user never passed."""
    data = read_document(
        path,
        what=f"config file ({variable})" if variable else "config file",
        error=ConfigError,
        fmt="yaml",
        missing=f"set {variable} to an existing file or unset it"
        if variable
        else "pass an existing file to --config or omit it",
    )
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(
            f"config file {path} must be a mapping of sections (e.g. `sampling: {{rate: 0.1}}`), got {type(data).__name__}"
        )
    return data


def _key_lines(path: str | os.PathLike[str]) -> dict[str, int]:
    """Dotted path -> line number for every key and list item of a YAML file (already read once by
    `read_yaml`), so that an error names the line to fix, as the rules for bad input ask."""
    try:
        with open(path, "rb") as fh:
            root = yaml.compose(fh)
    except (OSError, yaml.YAMLError):
        return {}
    out: dict[str, int] = {}

    def walk(node: yaml.Node, prefix: str) -> None:
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                if isinstance(key, yaml.ScalarNode):
                    dotted = f"{prefix}{key.value}"
                    out[dotted] = key.start_mark.line + 1
                    walk(value, dotted + ".")
        elif isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                out[f"{prefix}{i}"] = item.start_mark.line + 1
                walk(item, f"{prefix}{i}.")

    if root is not None:
        walk(root, "")
    return out


def load_model(
    model: type[ConfigT],
    path: str | os.PathLike[str] | None = None,
    *,
    overrides: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
    flags: Mapping[str, str] | None = None,
) -> ConfigT:
    """File, then environment, then explicit overrides (CLI flags); validated once against `model`.

    `model` is the root configuration, assembled where the components are registered
    (llmwatch.agent.components.Config); this loader knows nothing of its sections.
    `flags` names the command-line flag behind an override's dotted path where it is not
    `--<field>` (e.g. {"otel.ingest_listen": "--listen"}), so that errors blame the right flag.
    """
    environ = os.environ if environ is None else environ
    variable = None
    if path is None and environ.get(ENV_PREFIX + "CONFIG"):
        path, variable = environ[ENV_PREFIX + "CONFIG"], ENV_PREFIX + "CONFIG"
    data = read_yaml(path, variable=variable) if path is not None else {}
    env_tree, origins = _env_overrides(environ, model)
    data = _merge(data, env_tree)
    if overrides:
        data = _merge(data, {k: v for k, v in overrides.items() if v is not None})
        origins.update(_flag_origins(overrides, flags or {}))
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        # Without a file, every bad value has an origin of its own (a variable or a flag).
        header = f"invalid configuration (config file {path}):" if path is not None else "invalid configuration:"
        raise ConfigError(
            describe_validation_error(
                exc,
                header=header,
                allowed=lambda loc: _allowed_fields(model, loc),
                secret=lambda loc: _holds_secret(model, loc),
                elsewhere=lambda name: _places_of(model, name),
                origins=origins,
                file_lines=_key_lines(path) if path is not None else None,
            )
        ) from None
