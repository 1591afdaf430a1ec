"""Resumable HTTP downloads for the bundle (the standard library's urllib: no extra dependency).

A download goes to <dest>.part; a later run that finds the .part asks the server for the rest (an HTTP
Range request, RFC 9110 section 14.2) and appends what a 206 Partial Content answer brings; a server
that ignores the range (200) sends the whole file again, which then replaces the part. The file takes
its name only once complete, its sha256 computed (and compared when the caller knows it).
"""

from __future__ import annotations

import http.client
import os
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

from gpubring.bundle.manifest import sha256_of

__all__ = ["TIMEOUT", "FetchError", "download", "error_line", "read_url"]

TIMEOUT = 20.0  # seconds without an answer before a source counts as unreachable
USER_AGENT = "gpubring-bundle"
CHUNK = 1 << 16

Progress = Callable[[int, int | None], None]  # (bytes so far, total or None)


class FetchError(Exception):
    """A download failed; the message is the source and the real error, on one line."""


def error_line(url: str, exc: BaseException) -> str:
    if isinstance(exc, urllib.error.HTTPError):
        what = f"HTTP {exc.code} {exc.reason}"
    elif isinstance(exc, urllib.error.URLError):
        what = str(exc.reason)
    else:
        what = str(exc) or type(exc).__name__
    return " ".join(f"{url}: {what}".split())


def read_url(url: str, timeout: float = TIMEOUT, limit: int = 64 << 20) -> bytes:
    """The body of a small document (a Helm repository's index.yaml); FetchError when it cannot."""
    request = urllib.request.Request(url, headers={"User-Agent": USER_AGENT})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            data: bytes = response.read(limit + 1)
    except (urllib.error.URLError, http.client.HTTPException, OSError, ValueError) as exc:
        raise FetchError(error_line(url, exc)) from None
    if len(data) > limit:
        raise FetchError(f"{url}: larger than {limit} bytes")
    return data


def download(
    url: str,
    dest: Path,
    *,
    sha256: str = "",
    progress: Progress | None = None,
    timeout: float = TIMEOUT,
) -> tuple[str, int]:
    """Fetch `url` to `dest`, resuming a `dest`.part an earlier run left; (sha256, size) of the file.
    FetchError (the URL and the real error) when it cannot; a complete file whose sha256 is not the
    expected one is removed and refused."""
    part = dest.with_name(dest.name + ".part")
    have = part.stat().st_size if part.is_file() else 0
    headers = {"User-Agent": USER_AGENT}
    if have:
        headers["Range"] = f"bytes={have}-"
    request = urllib.request.Request(url, headers=headers)
    try:
        try:
            response = urllib.request.urlopen(request, timeout=timeout)
        except urllib.error.HTTPError as exc:
            if exc.code != 416 or not have:  # 416: the part is already all there is, or stale
                raise
            part.unlink()
            return download(url, dest, sha256=sha256, progress=progress, timeout=timeout)
        with response:
            dest.parent.mkdir(parents=True, exist_ok=True)  # only once there is something to write
            resumed = have and response.status == 206
            if not resumed:
                have = 0
            length = response.headers.get("Content-Length")
            total = have + int(length) if length and length.isdigit() else None
            with part.open("ab" if resumed else "wb") as handle:
                done = have
                while block := response.read(CHUNK):
                    handle.write(block)
                    done += len(block)
                    if progress is not None:
                        progress(done, total)
            if total is not None and done < total:
                raise FetchError(f"{url}: the connection closed after {done} of {total} bytes")
    except FetchError:
        raise
    except (urllib.error.URLError, http.client.HTTPException, OSError, ValueError) as exc:
        raise FetchError(error_line(url, exc)) from None
    digest = sha256_of(part)
    if sha256 and digest != sha256:
        part.unlink()
        raise FetchError(f"{url}: sha256 {digest}, expected {sha256}: removed")
    size = part.stat().st_size
    os.replace(part, dest)
    return digest, size
