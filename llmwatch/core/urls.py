"""URLs that may carry credentials (`http://user:password@host`): split them, and show them masked."""

from __future__ import annotations

import re

_USERINFO = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*://)([^/?#]*)@")


def split_userinfo(url: str) -> tuple[str, str | None]:
    """(the URL without `user:password@`, the userinfo or None): credentials travel apart."""
    match = _USERINFO.match(url)
    if match is None:
        return url, None
    return match.group(1) + url[match.end() :], match.group(2)


def mask_url(url: str) -> str:
    """The URL with its userinfo replaced by `***`: the one form in which an upstream is shown."""
    return _USERINFO.sub(r"\1***@", url, count=1)


def check_http_url(value: str, example: str) -> str:
    """`value` when it is an http(s) URL with a host; else a ValueError (for a config field's
    validator) showing it with its credentials masked, beside `example`."""
    if not re.match(r"^https?://[^/\s]+", value):
        raise ValueError(f"expected an http(s) URL such as {example}, got {mask_url(value)!r}")
    return value
