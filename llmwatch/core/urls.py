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
