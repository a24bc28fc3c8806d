"""Samples, scores and pairs as Parquet datasets: the shared form any engine reads.

Layout (hive-style, what DuckDB, Spark, Polars and pyarrow read as partitions):

    <root>/samples/date=YYYY-MM-DD/model_version=<v>/part-....parquet
    <root>/scores/date=.../model_version=.../part-....parquet
    <root>/pairs/date=.../model_version=.../part-....parquet

`date` is the UTC day of the record's timestamp (a score's `sample_timestamp`); `model_version` is
the record's own (a pair's primary side), percent-encoded, `__none__` when unset. Both stay columns
inside the files too, so a file read alone is complete. Scalar fields are typed columns; nested
values (request, response, metadata, details, a pair's sides) are JSON text columns, so a row
turns back into exactly the JSON record (docs/guide/archive.md, schema `PARQUET_SCHEMA`).

Writing is in llmwatch.core.parquet_write (it needs the atomic writer of llmwatch.core.jsonio,
whose `read_records` reads datasets through this module). pyarrow is the optional `[parquet]` extra: imported only when a dataset is written or read.
"""

from __future__ import annotations

import os
import re
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal
from urllib.parse import parse_qs, quote, urlsplit, urlunsplit

import orjson
from pydantic import BaseModel, ValidationError

from llmwatch.core.errors import describe_validation_error
from llmwatch.core.links import open_inside, refuse_link
from llmwatch.core.pairs import Pair
from llmwatch.core.records import RecordError, Sample
from llmwatch.core.scores import Score

PARQUET_SCHEMA = "llmwatch.parquet/v2"
# Versions this llmwatch reads: v2 added the samples' price_row, conversation_id and turn columns,
# which read as null from a v1 file (the fields' defaults).
READABLE_SCHEMAS = ("llmwatch.parquet/v1", PARQUET_SCHEMA)
NONE_VERSION = "__none__"
_BATCH_ROWS = 2048
# A batch is bounded by bytes too: 2,048 rows of 1 MB answers were one batch of 2 GB (and its
# Python objects several times that). A sample of a few KB still reads 2,048 rows at a time.
BATCH_BYTES = 32 << 20

Kind = Literal["samples", "scores", "pairs"]
MODELS: dict[str, type[BaseModel]] = {"samples": Sample, "scores": Score, "pairs": Pair}

# (column, field path in the JSON record, type): "json" columns hold the field as JSON text.
ColumnType = Literal["string", "int", "float", "bool", "timestamp", "json"]
COLUMNS: dict[str, list[tuple[str, tuple[str, ...], ColumnType]]] = {
    "samples": [
        ("schema", ("schema",), "string"),
        ("id", ("id",), "string"),
        ("client_request_id", ("client_request_id",), "string"),
        ("timestamp", ("timestamp",), "timestamp"),
        ("route", ("route",), "string"),
        ("operation", ("operation",), "string"),
        ("model", ("model",), "string"),
        ("response_model", ("response_model",), "string"),
        ("model_version", ("model_version",), "string"),
        ("status", ("status",), "int"),
        ("error_type", ("error_type",), "string"),
        ("latency_ms", ("latency_ms",), "float"),
        ("ttft_ms", ("ttft_ms",), "float"),
        ("stream", ("stream",), "bool"),
        ("usage_input_tokens", ("usage", "input_tokens"), "int"),
        ("usage_output_tokens", ("usage", "output_tokens"), "int"),
        ("usage_estimated", ("usage", "estimated"), "bool"),
        ("finish_reason", ("finish_reason",), "string"),
        ("cost_usd", ("cost_usd",), "float"),
        ("request", ("request",), "json"),
        ("response", ("response",), "json"),
        ("sample_reason", ("sample_reason",), "string"),
        ("redacted", ("redacted",), "bool"),
        ("capture_notes", ("capture_notes",), "json"),
        ("metadata", ("metadata",), "json"),
        # Added in v2 (optional fields of the sample record): a v1 file lacks them; null there.
        ("price_row", ("price_row",), "string"),
        ("conversation_id", ("conversation_id",), "string"),
        ("turn", ("turn",), "int"),
    ],
    "scores": [
        ("schema", ("schema",), "string"),
        ("sample_id", ("sample_id",), "string"),
        ("check", ("check",), "string"),
        ("kind", ("kind",), "string"),
        ("result", ("result",), "string"),
        ("value", ("value",), "float"),
        ("details", ("details",), "json"),
        ("model", ("model",), "string"),
        ("model_version", ("model_version",), "string"),
        ("route", ("route",), "string"),
        ("sample_timestamp", ("sample_timestamp",), "timestamp"),
        ("scored_at", ("scored_at",), "timestamp"),
    ],
    "pairs": [
        ("schema", ("schema",), "string"),
        ("id", ("id",), "string"),
        ("candidate", ("candidate",), "string"),
        ("timestamp", ("timestamp",), "timestamp"),
        ("route", ("route",), "string"),
        ("category", ("category",), "string"),
        ("model_version", ("primary", "model_version"), "string"),
        ("primary", ("primary",), "json"),
        ("shadow", ("shadow",), "json"),
        ("primary_scores", ("primary_scores",), "json"),
        ("shadow_scores", ("shadow_scores",), "json"),
        ("scored_by", ("scored_by",), "string"),
    ],
}
# Columns derived from another field (read back from that field, not from the column).
DERIVED = {("pairs", "model_version")}


def _required_columns(kind: str) -> list[str]:
    """The columns of `kind` that hold a field its record cannot do without (no default)."""
    fields = {f.alias or name: f for name, f in MODELS[kind].model_fields.items()}
    return [c for c, path, _ in COLUMNS[kind] if len(path) == 1 and c in fields and fields[c].is_required()]


# samples: timestamp, model, status, latency_ms, request, response; scores: sample_id, check, kind,
# result, sample_timestamp; pairs: id, candidate, timestamp, route, primary, shadow.
REQUIRED_COLUMNS = {kind: _required_columns(kind) for kind in COLUMNS}
# Of a file's own columns, this many are named (each cut at NAME_CHARS) when it is not of the kind.
SHOWN_COLUMNS = 8
NAME_CHARS = 40


def not_of_kind(kind: str, names: Collection[str]) -> str | None:
    """Why a Parquet file with the columns `names` is not a dataset of `kind` at all, or None.

    A file from another tool (or another schema) given as `--samples` was read row by row as
    samples: row 1 said a dozen "field 'x': Input should be ..." for fields it never had. When most
    of the kind's required columns are absent it is named as what it is not, with the columns it
    does have (shortened); a file missing only a few keeps the per-field message, which is the
    useful one there."""
    required = REQUIRED_COLUMNS[kind]
    absent = [c for c in required if c not in names]
    if len(absent) * 2 <= len(required):
        return None
    own = sorted(names)
    # Cut in the middle: generated names (`metric_0001_...`) differ at either end.
    half = (NAME_CHARS - 3) // 2
    shown = ", ".join(n if len(n) <= NAME_CHARS else f"{n[:half]}...{n[-half:]}" for n in own[:SHOWN_COLUMNS])
    more = f" and {len(own) - SHOWN_COLUMNS} more" if len(own) > SHOWN_COLUMNS else ""
    has = f"its columns are {shown}{more}" if own else "it has no columns"
    other = next((k for k, cols in REQUIRED_COLUMNS.items() if k != kind and all(c in names for c in cols)), None)
    if other:
        return f"not a {kind} dataset: {has}, those of {other} (give it as --{other})"
    return (
        f"not a {kind} dataset: {has}, and it lacks {', '.join(absent)}; give a {kind} dataset "
        f"as `llmwatch archive` writes it (docs/guide/archive.md) or {kind} .jsonl files"
    )


PART_NAME = re.compile(r"^part-(?P<topic>.+)-p(?P<partition>\d+)-(?P<first>\d{20})-(?P<last>\d{20})\.parquet$")


def one_line(exc: BaseException) -> str:
    """An Arrow or cloud SDK error as one line: theirs span several ("Couldn't deserialize thrift:
    ...\nDeserializing page header failed.\n"), and a bad-input error is one line of stderr."""
    return " ".join(str(exc).split())


def pyarrow_module() -> Any:
    try:
        import pyarrow
        import pyarrow.parquet  # noqa: F401
    except ImportError:
        raise RecordError(
            "reading or writing Parquet needs the [parquet] extra: pip install 'llmwatch[parquet]'"
        ) from None
    return pyarrow


def arrow_schema() -> dict[str, Any]:
    """The pyarrow schema of each kind (also what the reference page documents)."""
    pa = pyarrow_module()
    types = {
        "string": pa.string(),
        "int": pa.int64(),
        "float": pa.float64(),
        "bool": pa.bool_(),
        "timestamp": pa.timestamp("us", tz="UTC"),
        "json": pa.string(),
    }
    return {
        kind: pa.schema(
            [pa.field(name, types[t]) for name, _, t in cols],
            metadata={b"llmwatch.schema": PARQUET_SCHEMA.encode(), b"llmwatch.kind": kind.encode()},
        )
        for kind, cols in COLUMNS.items()
    }


def _get(data: dict[str, Any], path: tuple[str, ...]) -> Any:
    value: Any = data
    for key in path:
        value = value.get(key) if isinstance(value, dict) else None
    return value


def _timestamp(record: BaseModel, path: tuple[str, ...]) -> datetime:
    value: Any = record
    for key in path:
        value = getattr(value, key)
    return value if isinstance(value, datetime) else datetime.fromisoformat(str(value))


def to_row(kind: str, record: BaseModel) -> dict[str, Any]:
    """One record as one row of `kind`'s columns."""
    data = record.model_dump(mode="json", by_alias=True)
    row: dict[str, Any] = {}
    for name, path, t in COLUMNS[kind]:
        if t == "json":
            row[name] = orjson.dumps(_get(data, path)).decode()
        elif t == "timestamp":
            row[name] = _timestamp(record, path)
        else:
            row[name] = _get(data, path)
    return row


def from_row(kind: str, row: dict[str, Any]) -> dict[str, Any]:
    """The JSON record a row holds (validated by the caller)."""
    data: dict[str, Any] = {}
    for name, path, t in COLUMNS[kind]:
        if (kind, name) in DERIVED:
            continue
        value = row.get(name)
        if t == "json" and value is not None:
            value = _json_cell(name, value)
        elif t == "timestamp" and isinstance(value, datetime):
            value = value if value.tzinfo else value.replace(tzinfo=timezone.utc)
        target = data
        for key in path[:-1]:
            target = target.setdefault(key, {})
        target[path[-1]] = value
    return data


def _json_cell(name: str, value: Any) -> Any:
    """A JSON column's cell as the value its text holds; `RecordError` naming the column."""
    fix = "write nested fields as JSON text in a string column (docs/guide/archive.md)"
    if not isinstance(value, (str, bytes)):
        # A struct or list column written by another tool: the schema says JSON text.
        raise RecordError(f"column {name!r} holds a {type(value).__name__}, not JSON text; {fix}")
    try:
        return orjson.loads(value)
    except orjson.JSONDecodeError as exc:
        raise RecordError(f"column {name!r} is not valid JSON ({one_line(exc)}); {fix}") from None


@dataclass(frozen=True)
class PartitionKey:
    date: str
    model_version: str | None

    def directory(self) -> str:
        version = NONE_VERSION if self.model_version is None else quote(self.model_version, safe="")
        return f"date={self.date}/model_version={version}"


def partition_of(kind: str, record: BaseModel) -> PartitionKey:
    if isinstance(record, Score):
        when, version = record.sample_timestamp, record.model_version
    elif isinstance(record, Pair):
        when, version = record.timestamp, record.primary.model_version
    elif isinstance(record, Sample):
        when, version = record.timestamp, record.model_version
    else:
        raise TypeError(f"not a {kind} record: {type(record).__name__}")
    return PartitionKey(when.astimezone(timezone.utc).strftime("%Y-%m-%d"), version)


def dataset_files(source: str | os.PathLike[str], kind: str, *, skip: Collection[str] = ()) -> list[Path]:
    """The Parquet files of `kind` under `source`: `<source>/<kind>/**` when that exists, else
    `<source>/**` (the kind's own directory given) less the top-level folders named in `skip`; in name
    order. Hidden (temporary) files and folders skipped. A Parquet file given itself is the one file.

    A symbolic link inside the folder (a part file, or a folder on the way to one) is refused with
    `LinkInDataset` naming it (llmwatch.core.links); `source` itself may be one (the user named it)."""
    root = Path(source)
    if is_parquet_file(root):
        return [root]
    if (root / kind).is_dir():
        refuse_link(root / kind, source)
        root = root / kind
    files = []
    # os.walk, not rglob: rglob("**") skipped a linked folder without a word (records lost) and
    # matched a linked file (read through the link); here both are seen, and refused.
    for directory, folders, names in os.walk(root):
        here = Path(directory)
        folders[:] = [f for f in folders if not f.startswith(".") and not (here == root and f in skip)]
        for folder in folders:
            refuse_link(here / folder, source)
        for name in names:
            if name.endswith(".parquet") and not name.startswith("."):
                refuse_link(here / name, source)
                if (here / name).is_file():
                    files.append(here / name)
    return sorted(files, key=lambda p: (str(p.parent), p.name))


def is_parquet_file(source: str | os.PathLike[str]) -> bool:
    """A local file that starts as Parquet does (`PAR1`): read as a dataset of one file, whatever its name.

    `--samples part-0.parquet` was read as JSON Lines: "not valid JSON (str is not valid UTF-8 ...)"."""
    if is_url(source) or not Path(source).is_file():
        return False  # never opened otherwise: a FIFO with no writer would block the open
    try:
        with open(source, "rb") as fh:
            return fh.read(4) == b"PAR1"
    except OSError:
        return False


def is_url(source: str | os.PathLike[str]) -> bool:
    """`s3://…`, `gs://…`, `file://…`: a dataset reached through a pyarrow filesystem."""
    return isinstance(source, str) and _URL.match(source) is not None


# GCS retries a failed call (no credentials, no route) for 15 minutes by default: `drift --samples
# gs://...` sat silent that long before its error. A URL's own retry_limit_seconds wins.
GCS_RETRY_LIMIT_S = 20


def _bounded_retries(url: str) -> str:
    parts = urlsplit(url)
    if parts.scheme not in ("gs", "gcs") or "retry_limit_seconds" in parse_qs(parts.query):
        return url
    query = f"{parts.query}&" if parts.query else ""
    return urlunsplit(parts._replace(query=f"{query}retry_limit_seconds={GCS_RETRY_LIMIT_S}"))


_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
_URL_FIX = (
    "check the URL (s3://bucket/path, gs://bucket/path, file:///absolute/path), that this pyarrow build "
    "supports its filesystem, and the credentials (s3: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY or AWS_PROFILE, "
    "and AWS_REGION; gs: GOOGLE_APPLICATION_CREDENTIALS; a gs:// URL's retries end after "
    f"{GCS_RETRY_LIMIT_S} s, ?retry_limit_seconds=N in it waits longer)"
)


def filesystem(url: str) -> tuple[Any, str]:
    """The pyarrow filesystem and path a dataset URL names; `RecordError` naming the URL and the fix."""
    pyarrow_module()
    import pyarrow.fs

    try:
        return pyarrow.fs.FileSystem.from_uri(_bounded_retries(url))
    except (OSError, ValueError, ImportError, NotImplementedError) as exc:
        raise RecordError(f"{url}: cannot open this dataset URL ({one_line(exc)}); {_URL_FIX}") from None


def remote_files(url: str, kind: str) -> tuple[Any, list[str]]:
    """The filesystem of `url` and the paths (within it) of `kind`'s Parquet files: `<url>/<kind>/**`
    when that exists, else `<url>/**`; the same order and skips as `dataset_files`."""
    import pyarrow.fs

    fs, root = filesystem(url)
    root = root.rstrip("/") or "/"
    try:
        if root.endswith(".parquet") and fs.get_file_info(root).type == pyarrow.fs.FileType.File:
            return fs, [root]  # the URL of one file
        if fs.get_file_info(f"{root}/{kind}").type == pyarrow.fs.FileType.Directory:
            root = f"{root}/{kind}"
    except (OSError, ValueError) as exc:
        raise RecordError(f"{url}: cannot list this dataset ({one_line(exc)}); {_URL_FIX}") from None
    return fs, list_files(fs, root, url)


def list_files(fs: Any, root: str, url: str) -> list[str]:
    """The `*.parquet` files under `root` within `fs` (hidden ones skipped), in `dataset_files`' order;
    `url` names the dataset in the error."""
    import pyarrow.fs

    try:
        infos = fs.get_file_info(pyarrow.fs.FileSelector(root, recursive=True, allow_not_found=True))
    except (OSError, ValueError) as exc:
        raise RecordError(f"{url}: cannot list this dataset ({one_line(exc)}); {_URL_FIX}") from None
    files = []
    for info in infos:
        rel = info.path[len(root) :].strip("/").split("/")
        if info.type == pyarrow.fs.FileType.File and info.path.endswith(".parquet"):
            if not any(part.startswith(".") for part in rel):
                files.append(info.path)
    return sorted(files, key=lambda p: (p.rsplit("/", 1)[0], p.rsplit("/", 1)[-1]))


def url_of(url: str, fs_root: str, path: str) -> str:
    """A file's path within the filesystem of `url` written as a URL beside `url` (for messages and ids)."""
    if path == fs_root.rstrip("/"):
        return url  # the URL names the file itself
    return url.rstrip("/") + "/" + path[len(fs_root.rstrip("/")) :].lstrip("/")


def parts(source: str | os.PathLike[str], kind: str) -> list[tuple[Any, str, str]]:
    """(filesystem or None for a local file, path to open, name to show) of each Parquet file of
    `kind` under a local directory or a URL."""
    if is_url(source):
        url = str(source)
        fs, files = remote_files(url, kind)
        _, root = filesystem(url)
        return [(fs, f, url_of(url, root, f)) for f in files]
    return [(None, str(p), str(p)) for p in dataset_files(source, kind)]


def open_part(fs: Any, path: str, folder: str | os.PathLike[str] | None = None) -> Any:
    """A `ParquetFile` of a local path (fs None) or of a path within `fs`; the caller closes it
    (`close(force=True)`).

    `folder`: the local dataset folder `path` was listed in. The listing refused links, but a part
    file or partition folder swapped for one after it was read through (pyarrow opens by path): it
    is opened from `folder` without following links (`open_inside`), `LinkInDataset` otherwise.
    None for a file the user named itself (followed, as `cat` does)."""
    pa = pyarrow_module()
    if fs is not None:
        return pa.parquet.ParquetFile(fs.open_input_file(path))
    if folder is None:
        return pa.parquet.ParquetFile(path)
    # The descriptor as a Python file: pyarrow reads it through read/seek calls of whole column
    # chunks, measured no slower than its own open of the path (75 MB, 200,000 rows: 0.27-0.54 s each).
    fh = os.fdopen(open_inside(path, folder), "rb")
    try:
        return pa.parquet.ParquetFile(fh)
    except BaseException:
        fh.close()
        raise


def is_dataset(source: str | os.PathLike[str], kind: str) -> bool:
    if is_url(source):
        return bool(remote_files(str(source), kind)[1])
    path = Path(source)
    return is_parquet_file(path) or path.is_dir() and bool(dataset_files(path, kind))


def read_dataset(source: str | os.PathLike[str], model: type[BaseModel], kind: str) -> Iterator[BaseModel]:
    """Validated records of every file of a dataset (a local directory or a URL); `RecordError`
    names the file, row and field."""
    pa = pyarrow_module()
    found = parts(source, kind)
    if not found and is_url(source):
        raise RecordError(f"{source}: no {kind} Parquet files under this URL (nor under {kind}/ in it)")
    # A folder's part files are opened without following links (the listing's rule, at the open
    # too); a file named itself is the user's choice.
    folder = source if not is_url(source) and Path(source).is_dir() else None
    for fs, opened, path in found:
        try:
            file = open_part(fs, opened, folder)
        except (OSError, pa.ArrowException) as exc:
            raise RecordError(f"{path}: not a readable Parquet file ({one_line(exc)})") from None
        try:
            yield from _records(pa, file, path, model, kind)
        finally:
            file.close(force=True)


def _records(pa: Any, file: Any, path: str, model: type[BaseModel], kind: str) -> Iterator[BaseModel]:
    """The validated records of one opened part file (`read_dataset`), its kind and schema checked first."""
    meta = (file.schema_arrow.metadata or {}).get(b"llmwatch.schema", b"").decode()
    if meta and meta not in READABLE_SCHEMAS:
        raise RecordError(f"{path}: Parquet schema {meta!r}; this llmwatch reads {', '.join(READABLE_SCHEMAS)}")
    found_kind = (file.schema_arrow.metadata or {}).get(b"llmwatch.kind", b"").decode()
    if found_kind and found_kind != kind:
        # Said before the rows: validated as the wrong record, row 1 is a dozen field errors.
        raise RecordError(
            f"{path}: a Parquet file of {found_kind}, not {kind} (its llmwatch.kind); "
            f"give the dataset's root or its {kind}/ folder"
        )
    problem = not_of_kind(kind, file.schema_arrow.names)
    if problem:
        raise RecordError(f"{path}: {problem}")
    for n, row in enumerate(_rows(pa, file, path), start=1):
        try:
            yield model.model_validate(from_row(kind, row))
        except RecordError as exc:
            raise RecordError(f"{path}: row {n}: {exc}") from None
        except ValidationError as exc:
            raise RecordError(f"{path}: row {n}: {describe_validation_error(exc)}") from None


def batch_rows(file: Any, most: int = _BATCH_ROWS) -> int:
    """Rows per batch of `file` (a `ParquetFile`) so that a batch holds about `BATCH_BYTES`: from the
    widest row group's uncompressed bytes per row in the footer, at most `most`, at least 1."""
    meta = file.metadata
    widest = 0.0
    for i in range(meta.num_row_groups):
        group = meta.row_group(i)
        if group.num_rows <= 0:
            continue
        # A writer may leave the row group's own total at 0: its column chunks' sizes then.
        size = max(
            group.total_byte_size, sum(group.column(c).total_uncompressed_size for c in range(group.num_columns))
        )
        widest = max(widest, size / group.num_rows)
    return most if widest <= 0 else max(1, min(most, int(BATCH_BYTES // widest)))


def record_batches(file: Any) -> Iterator[Any]:
    """A file's rows as Arrow record batches of `batch_rows` rows (what `_rows` turns into dicts)."""
    return iter(file.iter_batches(batch_size=batch_rows(file)))


def _rows(pa: Any, file: Any, path: str) -> Iterator[dict[str, Any]]:
    """A file's rows in batches bounded in rows and bytes (`batch_rows`): a whole file as Python dicts
    at once would hold a million samples' bodies (issue 29); a batch is at most a few tens of MB."""
    first = 1
    try:
        for batch in record_batches(file):
            # The footer's sizes are of encoded data: a dictionary-encoded column of one repeated
            # huge cell decodes to far more. Its Python objects are made a bounded slice at a time.
            step = max(1, batch.num_rows * BATCH_BYTES // max(batch.nbytes, 1))
            for start in range(0, batch.num_rows, step):
                part = batch.slice(start, step)
                try:
                    rows = part.to_pylist()
                except (ValueError, OverflowError) as exc:
                    # A value Python cannot hold (a timestamp past year 9999): name where it is.
                    raise RecordError(f"{path}: {_unconvertible(part, first, exc)}") from None
                first += len(rows)
                yield from rows
    except (OSError, pa.ArrowException) as exc:
        raise RecordError(f"{path}: not a readable Parquet file ({one_line(exc)})") from None


def _unconvertible(batch: Any, first: int, exc: Exception) -> str:
    """Where in `batch` (whose first row is row `first` of its file) a value fails to convert."""
    for name, column in zip(batch.schema.names, batch.columns):
        for i in range(len(column)):
            try:
                column[i].as_py()
            except (ValueError, OverflowError) as cause:
                return (
                    f"row {first + i}: column {name!r} ({column.type}): a value Python cannot hold ({cause}); "
                    "write it within the column's range (timestamps between years 1 and 9999)"
                )
    return f"rows {first}-{first + batch.num_rows - 1}: a value Python cannot hold ({exc})"


def ranges_in(directory: str | os.PathLike[str], topic: str, partition: int) -> list[tuple[int, int]]:
    """Offset ranges of `topic`/`partition` that the files of one partition directory hold, from their names.

    A record's partition directory follows from the record alone, so every file that could hold
    a given offset is in the directory of that offset's record: one listing answers for a run."""
    prefix = f"part-{topic}-p{partition}-"
    out = []
    try:
        entries = list(os.scandir(directory))
    except FileNotFoundError:
        return []
    for entry in entries:
        if not entry.name.startswith(prefix):
            continue
        m = PART_NAME.match(entry.name)
        if m and m["topic"] == topic and int(m["partition"]) == partition:
            out.append((int(m["first"]), int(m["last"])))
    return sorted(out)


def part_name(topic: str, partition: int, first: int, last: int) -> str:
    return f"part-{topic}-p{partition}-{first:020d}-{last:020d}.parquet"
