"""The bundle's apt repositories: one flat repository per OS release, DIR/apt/<distro>-<codename>/, with
the packages the phases install (gpubring.bundle.packages) and their dependencies.

Built with this machine's own apt and its own apt configuration, in a private apt root
(DIR/.work/apt/<release>/, or `work`): its sources are this machine's (/etc/apt/sources.list and
sources.list.d, one-line or deb822) for the same distribution, the suite codename rewritten to the
target release (bookworm, bookworm-updates, bookworm-security -> trixie, trixie-updates,
trixie-security), contrib, non-free and non-free-firmware added where the driver comes from the
distribution (Debian's NVIDIA driver is in non-free, its GSP firmware in non-free-firmware); its dpkg
status lists the release's Priority: required packages as installed, so the closure apt resolves is
everything the packages need except those. Debian Policy 2.5 (Priorities): "required: Packages which
are necessary for the proper functioning of the system ... Removing a required package may cause your
system to become totally broken" - every Debian system has them, a bundle need not carry them.
Recommends are followed as each task sets them (install_recommends; apt's default is to follow them),
each role's packages resolved as the task's own apt transaction.

Resumable: apt's package lists are fetched again only when older than an hour (like the roles'
cache_valid_time) and apt's archive cache in the work folder keeps every .deb it verified, so a second
run downloads only what is missing. The repository is then written: the .debs, Packages and Packages.gz
(dpkg-scanpackages, from dpkg-dev), and a Release with their checksums. apt reads it with

    deb [trusted=yes] http://HOST/apt/debian-bookworm ./

or, with `sign_key` (a gpg key id or fingerprint in the caller's keyring), signed: InRelease and
Release.gpg, read with `deb [signed-by=/etc/apt/keyrings/site.asc] http://HOST/apt/debian-bookworm ./`.

What cannot be had is listed, not fatal: a package apt cannot find or fetch (an "apt" entry, missing,
with apt's own error), and each third-party repository the roles write for this inventory (Docker's,
NVIDIA's CUDA and toolkit ones, pkgs.k8s.io, DOCA) that this machine cannot reach ("apt-repo-missing",
with the error of a real request for its Release file, `timeout` seconds at most). A reachable one
whose key file is on this machine is added to the private root and mirrored like the archive.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import re
import shutil
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from email.utils import formatdate
from fnmatch import fnmatch
from pathlib import Path

from gpubring.bundle import packages as pkgs
from gpubring.bundle.manifest import Entry, sha256_of
from gpubring.inventory import Inventory

__all__ = ["AptError", "Source", "build", "build_release", "host_sources"]

APT_DIR = "apt"
WORK_DIR = ".work"
LISTS_MAX_AGE = 3600  # seconds: the package lists are fetched again when older (the roles' cache_valid_time)
DRIVER_COMPONENTS = ("contrib", "non-free", "non-free-firmware")
ARCH = "amd64"  # the releases' facts are x86_64 hosts (gpubring.bundle.packages.OSRelease.facts)
Progress = Callable[[str], None]


class AptError(Exception):
    """apt or dpkg-scanpackages is missing or failed in a way that is not one package's."""


# -- apt sources -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Source:
    """One apt source: its URIs, suites and components, and its [options] (signed-by, trusted, ...)."""

    uris: tuple[str, ...]
    suites: tuple[str, ...]
    components: tuple[str, ...] = ()
    options: tuple[tuple[str, str], ...] = ()
    origin: str = ""  # the file it was read from

    def lines(self) -> list[str]:
        """The source as one-line `deb` entries."""
        opts = " ".join(f"{k}={v}" for k, v in self.options)
        head = f"deb [{opts}]" if opts else "deb"
        return [
            f"{head} {uri} {suite} {' '.join(self.components)}".rstrip()
            for uri in self.uris
            for suite in self.suites
        ]

    def release_urls(self) -> list[str]:
        """The InRelease file of each URI and suite (a flat source's suite is a path ending in /)."""
        out = []
        for uri in self.uris:
            for suite in self.suites:
                base = uri.rstrip("/").replace("$(ARCH)", ARCH)
                path = suite.replace("$(ARCH)", ARCH)
                out.append(
                    f"{base}/{path.strip('/')}/InRelease".replace("//InRelease", "/InRelease")
                    if path.endswith("/")
                    else f"{base}/dists/{path}/InRelease"
                )
        return out


_ONE_LINE = re.compile(r"^(deb)\s+(?:\[([^\]]*)\]\s+)?(\S+)\s+(\S+)(.*)$")


def parse_sources(text: str, origin: str = "") -> list[Source]:
    """The `deb` sources of a sources.list text (one-line) or a .sources text (deb822); deb-src and
    disabled (Enabled: no) entries are left out."""
    out: list[Source] = []
    if re.search(r"^(Types|URIs):", text, re.MULTILINE):
        for stanza in re.split(r"\n\s*\n", text):
            fields: dict[str, str] = {}
            key = ""
            for line in stanza.splitlines():
                if not line.strip() or line.lstrip().startswith("#"):
                    continue
                if line[:1].isspace() and key:
                    fields[key] += " " + line.strip()
                elif ":" in line:
                    key, value = line.split(":", 1)
                    key = key.strip().lower()
                    fields[key] = value.strip()
            if "deb" not in fields.get("types", "").split() or fields.get("enabled", "yes").lower() == "no":
                continue
            options: tuple[tuple[str, str], ...] = tuple(
                (k, fields[k].replace(" ", ","))
                for k in ("signed-by", "trusted", "architectures")
                if k in fields
            )
            out.append(
                Source(
                    tuple(fields.get("uris", "").split()),
                    tuple(fields.get("suites", "").split()),
                    tuple(fields.get("components", "").split()),
                    options,
                    origin,
                )
            )
        return out
    for line in text.splitlines():
        match = _ONE_LINE.match(line.strip())
        if match is None:
            continue
        options = tuple(
            (str(k).strip(), str(v).strip())
            for k, _, v in (o.partition("=") for o in (match.group(2) or "").split())
            if v
        )
        out.append(
            Source((match.group(3),), (match.group(4),), tuple(match.group(5).split()), options, origin)
        )
    return out


def host_sources(etc: Path = Path("/etc/apt")) -> list[Source]:
    """This machine's apt sources, as apt reads them: sources.list, then sources.list.d/*.list and
    *.sources (apt ignores other names)."""
    parts = sorted(p for p in (etc / "sources.list.d").glob("*") if p.suffix in (".list", ".sources"))
    files = [etc / "sources.list", *parts]
    out: list[Source] = []
    for path in files:
        if path.is_file():
            out.extend(parse_sources(path.read_text(encoding="utf-8", errors="replace"), str(path)))
    return out


def _os_release(path: Path = Path("/etc/os-release")) -> tuple[str, str]:
    values = dict(line.split("=", 1) for line in path.read_text(encoding="utf-8").splitlines() if "=" in line)
    return values.get("ID", "").strip('"'), values.get("VERSION_CODENAME", "").strip('"')


def archive_sources(
    release: pkgs.OSRelease, sources: Sequence[Source], host: tuple[str, str], driver_components: bool
) -> tuple[list[Source], str]:
    """The sources of `release` from this machine's own archive sources (those whose suites are the
    host's codename or codename-*), the codename rewritten; ("", why) when there are none."""
    distro, codename = host
    if distro != release.distro:
        return (
            [],
            f"this machine's apt sources are {distro} {codename}'s: no {release.distro} archive to read",
        )
    out = []
    for source in sources:
        suites = [s for s in source.suites if s == codename or s.startswith(codename + "-")]
        if not suites:
            continue  # not the distribution's archive (a third-party source of this machine)
        rewritten = tuple(release.codename + s[len(codename) :] for s in suites)
        components = list(source.components)
        if driver_components and release.distro == "debian":
            components += [c for c in DRIVER_COMPONENTS if c not in components]
        out.append(replace(source, suites=rewritten, components=tuple(components)))
    if not out:
        return (
            [],
            f"no apt source of this machine names {codename} (read /etc/apt/sources.list and sources.list.d)",
        )
    return out, ""


# -- the private apt root ----------------------------------------------------------------------------


@dataclass
class AptRoot:
    """A private apt root: its own sources, lists, archive cache and dpkg status."""

    path: Path
    timeout: float

    def __post_init__(self) -> None:
        for sub in ("lists/partial", "archives/partial", "sources.list.d", "preferences.d"):
            (self.path / sub).mkdir(parents=True, exist_ok=True)
        if not (self.path / "status").exists():  # touched only once: its mtime keys resolved.json
            (self.path / "status").touch()
        conf = [
            f'Dir::State "{self.path}";',
            'Dir::State::lists "lists";',
            f'Dir::State::status "{self.path / "status"}";',
            f'Dir::Cache "{self.path}";',
            'Dir::Cache::archives "archives";',
            f'Dir::Etc::sourcelist "{self.path / "sources.list"}";',
            f'Dir::Etc::sourceparts "{self.path / "sources.list.d"}";',
            f'Dir::Etc::preferences "{self.path / "preferences"}";',
            f'Dir::Etc::preferencesparts "{self.path / "preferences.d"}";',
            f'APT::Architecture "{ARCH}";',
            "#clear APT::Architectures;",
            f'APT::Architectures {{ "{ARCH}"; }};',
            "#clear APT::Update::Post-Invoke;",
            "#clear APT::Update::Post-Invoke-Success;",
            "#clear DPkg::Post-Invoke;",
            'Debug::NoLocking "true";',
            'Acquire::Languages "none";',
            f'Acquire::http::Timeout "{int(self.timeout)}";',
            f'Acquire::https::Timeout "{int(self.timeout)}";',
            'Acquire::Retries "1";',
        ]
        (self.path / "apt.conf").write_text("\n".join(conf) + "\n", encoding="utf-8")

    def apt(self, tool: str, *args: str, check: bool = False) -> subprocess.CompletedProcess[str]:
        if shutil.which(tool) is None:
            raise AptError(f"{tool} is not installed on this machine: the bundle's apt repositories need apt")
        env = {
            **os.environ,
            "APT_CONFIG": str(self.path / "apt.conf"),
            "LC_ALL": "C",
            "DEBIAN_FRONTEND": "noninteractive",
        }
        # apt reads apt.conf.d after APT_CONFIG: what must win over the machine's parts goes on the
        # command line. apt's binary cache of the lists (docker images turn it off) spares each call
        # the parsing of the lists.
        cache = [f"-oDir::Cache::pkgcache={self.path / 'pkgcache.bin'}", "-oDir::Cache::srcpkgcache="]
        argv = [tool, *cache, *args] if tool in ("apt-get", "apt-cache") else [tool, *args]
        done = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
        if check and done.returncode != 0:
            raise AptError(f"{tool} {' '.join(args[:3])}: {_errors(done.stderr) or done.stderr.strip()}")
        return done

    def set_sources(self, sources: Sequence[Source]) -> bool:
        """Write the root's sources.list; True when it changed (its lists are then stale)."""
        text = "".join(line + "\n" for s in sources for line in s.lines())
        path = self.path / "sources.list"
        if path.is_file() and path.read_text(encoding="utf-8") == text:
            return False
        path.write_text(text, encoding="utf-8")
        return True

    def update(self, force: bool) -> list[str]:
        """apt-get update when the lists are missing, stale or the sources changed; apt's errors."""
        stamp = self.path / "lists" / ".gpubring-updated"
        if not force and stamp.is_file() and time.time() - stamp.stat().st_mtime < LISTS_MAX_AGE:
            return []
        done = self.apt("apt-get", "update", "-q")
        errors = _errors(done.stderr, warnings=True)
        if done.returncode == 0 and not any("Failed to fetch" in e or e.startswith("Err:") for e in errors):
            stamp.touch()
        return errors or ([done.stderr.strip()] if done.returncode else [])

    def mark_required_installed(self) -> int:
        """Write the dpkg status: the release's Priority: required packages and what they depend on (a
        Debian system has both: libc6 is optional and every required package needs it), at their
        candidate versions, installed (without their dependency fields, so the status is consistent).
        Their count."""
        names: set[str] = set()
        for path in (self.path / "lists").glob("*_Packages*"):
            text = self.apt("/usr/lib/apt/apt-helper", "cat-file", str(path)).stdout
            for stanza in text.split("\n\n"):
                if "\nPriority: required" in stanza:
                    match = re.match(r"Package: (\S+)", stanza)
                    if match:
                        names.add(match.group(1))
        (self.path / "status").write_text("", encoding="utf-8")
        if not names:
            return 0
        closure = self.apt(
            "apt-get", "install", "--simulate", "-y", "--no-install-recommends", *sorted(names)
        )
        installed = sorted({n for n, _ in _INST.findall(closure.stdout)} | names)
        shown = self.apt("apt-cache", "show", "--no-all-versions", *installed).stdout
        keep = (
            "Package",
            "Version",
            "Architecture",
            "Multi-Arch",
            "Provides",
            "Essential",
            "Priority",
            "Section",
        )
        out = []
        for stanza in shown.split("\n\n"):
            lines = [ln for ln in stanza.splitlines() if ln.split(":", 1)[0] in keep]
            if lines:
                out.append("\n".join([lines[0], "Status: install ok installed", *lines[1:]]))
        (self.path / "status").write_text("\n\n".join(out) + "\n", encoding="utf-8")
        return len(out)


def _errors(stderr: str, warnings: bool = False) -> list[str]:
    """apt's error lines (E:, and W: about sources when asked), one line each."""
    prefixes = ("E:", "W:", "Err:") if warnings else ("E:",)
    lines = [" ".join(line.split()) for line in stderr.splitlines() if line.startswith(prefixes)]
    return [ln for ln in lines if "unsandboxed" not in ln and "Download is performed" not in ln]


_NOT_FOUND = (
    re.compile(r"E: Unable to locate package (\S+)"),
    re.compile(r"E: Version '[^']*' for '([^']+)' was not found"),
    re.compile(r"E: Package '([^']+)' has no installation candidate"),
    re.compile(r"E: Couldn't find any package by (?:glob|regex) '([^']+)'"),
)
_UNMET = re.compile(r"^\s*(\S+) : (?:Pre)?Depends:", re.MULTILINE)


def _name(request: str) -> str:
    return request.split("=", 1)[0]


def _pin(root: AptRoot, requests: Sequence[str]) -> tuple[list[str], dict[str, str]]:
    """apt-get takes name=version exactly: a version glob (the roles' `=1.2.3-*`) is matched against the
    versions apt knows (apt-cache madison). (requests, missing: request -> why)."""
    out, missing = [], {}
    for request in requests:
        name, _, version = request.partition("=")
        if "*" not in version:
            out.append(request)
            continue
        known = [
            row.split("|")[1].strip()
            for row in root.apt("apt-cache", "madison", name).stdout.splitlines()
            if row.count("|") >= 2
        ]
        chosen = [v for v in known if fnmatch(v, version)]
        if chosen:
            out.append(f"{name}={chosen[0]}")
        elif known:
            missing[request] = f"apt knows {name} {', '.join(known)}, none matches {version}"
        else:
            missing[request] = f"E: Unable to locate package {name}"
    return out, missing


_INST = re.compile(r"^Inst (\S+) (?:\[[^\]]*\] )?\((\S+) ", re.MULTILINE)


def _resolve(
    root: AptRoot, requests: Sequence[str], recommends: bool = True
) -> tuple[list[tuple[str, str]], dict[str, str]]:
    """The closure apt installs for `requests` ((name, version) each), and the requests it cannot take
    with apt's error. A request apt refuses is taken out and the rest resolved again."""
    pending, missing = _pin(root, requests)
    simulate = ["install", "--simulate", "-y", *([] if recommends else ["--no-install-recommends"])]
    while pending:
        done = root.apt("apt-get", *simulate, *pending)
        if done.returncode == 0:
            return sorted(set(_INST.findall(done.stdout))), missing
        refused = {m for pattern in _NOT_FOUND for m in pattern.findall(done.stderr)}
        refused |= set(_UNMET.findall(done.stdout + done.stderr))
        errors = _errors(done.stderr)
        culprits = [r for r in pending if _name(r) in refused or r in refused]
        if not culprits:  # an error apt does not pin on one request: ask one by one
            culprits = [r for r in pending if root.apt("apt-get", *simulate, r).returncode != 0] or list(
                pending
            )
        for request in culprits:
            own = [e for e in errors if _name(request) in e] or errors or [done.stderr.strip()[-300:]]
            detail = " ".join(
                line.strip()
                for line in (done.stdout + done.stderr).splitlines()
                if line.strip().startswith(_name(request) + " :")
            )
            missing[request] = "; ".join(own + ([detail] if detail else []))
        pending = [r for r in pending if r not in culprits]
    return [], missing


def _resolve_all(
    root: AptRoot, requests: Mapping[str, Sequence[str]], no_recommends: Collection[str]
) -> tuple[set[tuple[str, str]], dict[str, tuple[str, str]]]:
    """Every label's closure (each distinct request set resolved once) and the requests apt refuses
    (request -> (label, apt's error)). Kept in the root (resolved.json) with what it was resolved from
    (the sources, the lists, the status, the requests): a run on unchanged lists reuses it."""
    stamp = root.path / "lists" / ".gpubring-updated"
    labels = {label: (sorted(set(rs)), label not in no_recommends) for label, rs in sorted(requests.items())}
    key = json.dumps(
        [
            (root.path / "sources.list").read_text(encoding="utf-8"),
            stamp.stat().st_mtime_ns if stamp.is_file() else None,
            (root.path / "status").stat().st_mtime_ns,
            labels,
        ]
    )
    saved = root.path / "resolved.json"
    if stamp.is_file() and saved.is_file():
        data = json.loads(saved.read_text(encoding="utf-8"))
        if data.get("key") == key:
            return {(n, v) for n, v in data["closure"]}, {
                r: (lb, e) for r, (lb, e) in data["missing"].items()
            }
    closure: set[tuple[str, str]] = set()
    missing: dict[str, tuple[str, str]] = {}
    done: dict[str, tuple[list[tuple[str, str]], dict[str, str]]] = {}
    for label, (wanted, recommends) in labels.items():
        same = json.dumps([wanted, recommends])
        if same not in done:
            done[same] = _resolve(root, wanted, recommends)
        found, refused = done[same]
        closure.update(found)
        missing.update({r: (label, e) for r, e in refused.items()})
    saved.write_text(
        json.dumps({"key": key, "closure": sorted(closure), "missing": missing}, indent=0), encoding="utf-8"
    )
    return closure, missing


def _uris(root: AptRoot, closure: Sequence[tuple[str, str]]) -> dict[str, tuple[str, str, int, str]]:
    """name -> (URL, file name, size, sha256) of each package apt downloads, as apt reports them."""
    if not closure:
        return {}
    done = root.apt("apt-get", "download", "--print-uris", *(f"{n}={v}" for n, v in closure), check=True)
    out = {}
    for url, filename, size, checksum in re.findall(
        r"^'([^']+)' (\S+) (\d+) (\S+)$", done.stdout, re.MULTILINE
    ):
        name = filename.split("_", 1)[0]
        sha = checksum.split(":", 1)[1] if checksum.lower().startswith("sha256:") else ""
        out[filename] = (url, name, int(size), sha)
    return out


# -- the repository ----------------------------------------------------------------------------------


def _write_index(repo: Path, release: pkgs.OSRelease, sign_key: str | None) -> None:
    """Packages, Packages.gz and Release of the flat repository (and InRelease, Release.gpg signed)."""
    if shutil.which("dpkg-scanpackages") is None:
        raise AptError(
            "dpkg-scanpackages is not installed (package dpkg-dev): it writes the repository's index"
        )
    # dpkg-scanpackages reads every .deb: an index of the same files (name, size, mtime) is kept.
    listing = json.dumps(sorted((p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in repo.glob("*.deb")))
    seen = repo.parent.parent / WORK_DIR / APT_DIR / f"{repo.name}.index"
    if (repo / "Packages").is_file() and seen.is_file() and seen.read_text(encoding="utf-8") == listing:
        index = (repo / "Packages").read_bytes()
    else:
        done = subprocess.run(
            ["dpkg-scanpackages", "--multiversion", ".", "/dev/null"],
            cwd=repo,
            capture_output=True,
            text=True,
            check=False,
            env={**os.environ, "LC_ALL": "C"},
        )
        if done.returncode != 0:
            raise AptError(f"dpkg-scanpackages in {repo}: {done.stderr.strip()}")
        index = done.stdout.encode()
        seen.parent.mkdir(parents=True, exist_ok=True)
        seen.write_text(listing, encoding="utf-8")
    (repo / "Packages").write_bytes(index)
    (repo / "Packages.gz").write_bytes(gzip.compress(index, mtime=0))
    sums = {"MD5Sum": hashlib.md5, "SHA256": hashlib.sha256}
    lines = [
        "Origin: gpubring",
        f"Label: gpubring bundle {release.key}",
        f"Suite: {release.codename}",
        f"Codename: {release.codename}",
        f"Date: {formatdate(usegmt=True)}",
        f"Architectures: {ARCH} all",
        f"Description: what gpubring installs on {release.distro} {release.version}, with its dependencies",
    ]
    for label, algo in sums.items():
        lines.append(f"{label}:")
        for name in ("Packages", "Packages.gz"):
            data = (repo / name).read_bytes()
            lines.append(f" {algo(data).hexdigest()} {len(data)} {name}")
    (repo / "Release").write_text("\n".join(lines) + "\n", encoding="utf-8")
    for stale in ("InRelease", "Release.gpg"):
        (repo / stale).unlink(missing_ok=True)
    if sign_key:
        for args, out in ((["--clearsign"], "InRelease"), (["--detach-sign", "--armor"], "Release.gpg")):
            signed = subprocess.run(
                ["gpg", "--batch", "--yes", "--local-user", sign_key, *args, "--output", out, "Release"],
                cwd=repo,
                capture_output=True,
                text=True,
                check=False,
            )
            if signed.returncode != 0:
                raise AptError(
                    f"gpg could not sign {repo / 'Release'} with {sign_key}: {signed.stderr.strip()}"
                )


def _probe(url: str, timeout: float) -> str:
    """'' when `url` answers; else the error of the request, one line."""
    try:
        with urllib.request.urlopen(urllib.request.Request(url, method="GET"), timeout=timeout) as answer:
            answer.read(1)
        return ""
    except urllib.error.HTTPError as exc:
        return f"HTTP {exc.code} {exc.reason} from {url}"
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
        return f"{url}: {reason}"


def _source_url(source: Source) -> str:
    """The source as apt lines, no options: "https://download.docker.com/linux/debian bookworm stable"."""
    return "; ".join(line.split("] ", 1)[-1].removeprefix("deb ") for line in source.lines())


def _third_party(
    third_party: Mapping[str, Sequence[Source]], release: pkgs.OSRelease, timeout: float
) -> tuple[list[Source], dict[str, tuple[str, str]], list[Entry]]:
    """Each role's third-party sources, tried for real: (the reachable ones whose key this machine has,
    role -> (source, error) of the others, their apt-repo-missing entries)."""
    reachable: list[Source] = []
    unreachable: dict[str, tuple[str, str]] = {}
    entries = []
    for role, role_sources in sorted(third_party.items()):
        for source in role_sources:
            where = _source_url(source)
            error = next((e for e in (_probe(u, timeout) for u in source.release_urls()) if e), "")
            key = dict(source.options).get("signed-by", "")
            if not error and key and not Path(key).is_file():
                error = f"reachable, but its key {key} is not on this machine to check it"
            if error:
                unreachable[role] = (where, error)
                entries.append(Entry("apt-repo-missing", role, release.key, where).missing(error))
            else:
                reachable.append(source)
    return reachable, unreachable, entries


def _status(root: AptRoot) -> int:
    """The root's dpkg status of required packages, written again only after new package lists."""
    status, stamp = root.path / "status", root.path / "lists" / ".gpubring-updated"
    if status.stat().st_size and stamp.is_file() and status.stat().st_mtime >= stamp.stat().st_mtime:
        return status.read_text(encoding="utf-8").count("\nStatus: install ok installed")
    return root.mark_required_installed()


def _download(root: AptRoot, closure: Sequence[tuple[str, str]]) -> list[str]:
    """apt-get install --download-only of the closure into apt's cache; apt's errors (a .deb it could
    not fetch: the others are in the cache all the same)."""
    if not closure:
        return []
    done = root.apt("apt-get", "install", "--download-only", "-y", "-q", *(f"{n}={v}" for n, v in closure))
    return [] if done.returncode == 0 else _errors(done.stderr, warnings=True) or [done.stderr.strip()]


def _publish(
    root: AptRoot,
    uris: Mapping[str, tuple[str, str, int, str]],
    repo: Path,
    folder: Path,
    errors: Sequence[str],
) -> list[Entry]:
    """The downloaded .debs linked (or copied) from apt's cache into the repository, checked against
    apt's sha256; the repository's other .debs (an earlier build's) removed. A .deb apt could not fetch
    is listed missing with apt's error about it."""
    repo.mkdir(parents=True, exist_ok=True)
    for stale in repo.glob("*.deb"):
        if stale.name not in uris:
            stale.unlink()
    entries = []
    for filename, (url, name, size, sha) in sorted(uris.items()):
        cached, target = root.path / "archives" / filename, repo / filename
        version = urllib.parse.unquote(filename.split("_")[1]) if filename.count("_") >= 2 else ""
        entry = Entry("apt", name, version, url)
        if not cached.is_file() and not (target.is_file() and target.stat().st_size == size):
            own = [e for e in errors if url in e or filename in e]
            entries.append(entry.missing("; ".join(own or errors) or "apt did not download it"))
            continue
        if not (target.is_file() and target.stat().st_size == size):
            target.unlink(missing_ok=True)
            try:
                os.link(cached, target)
            except OSError:
                shutil.copy2(cached, target)
        digest = sha256_of(target)
        if sha and digest != sha:
            target.unlink()
            entries.append(entry.missing(f"sha256 {digest} of the download is not apt's {sha}"))
        else:
            entries.append(entry.fetched(str(target.relative_to(folder)), digest, target.stat().st_size))
    return entries


def build_release(
    release: pkgs.OSRelease,
    requests: Mapping[str, Sequence[str]],
    folder: Path,
    *,
    work: Path | None = None,
    third_party: Mapping[str, Sequence[Source]] | None = None,
    driver_components: bool = False,
    no_recommends: Collection[str] = (),
    sign_key: str | None = None,
    sources: Sequence[Source] | None = None,
    host: tuple[str, str] | None = None,
    timeout: float = 10.0,
    progress: Progress | None = None,
) -> list[Entry]:
    """The repository folder/apt/<release.key>/ for `requests` ({label: [package or name=version, ...]},
    each label resolved as one apt transaction, without Recommends for the labels in `no_recommends`;
    build's labels are role:group[:no-recommends]), its manifest entries.
    `third_party` maps a role to the sources it writes: tried for real; the packages of a label whose
    role has an unreachable source and that the archive lacks are listed with that source."""
    say = progress or (lambda _line: None)
    root = AptRoot((work or folder / WORK_DIR / APT_DIR) / release.key, timeout)
    archive, why = archive_sources(
        release, host_sources() if sources is None else sources, host or _os_release(), driver_components
    )
    wanted = sorted({r for rs in requests.values() for r in rs})
    if not archive:
        repo_entry = Entry("apt-repo-missing", f"{release.distro} archive", release.key, release.key).missing(
            why
        )
        return [
            repo_entry,
            *(Entry("apt", _name(r), r.partition("=")[2], release.key).missing(why) for r in wanted),
        ]
    reachable, unreachable, entries = _third_party(third_party or {}, release, timeout)
    changed = root.set_sources([*archive, *reachable])
    say(f"apt {release.key}: package lists of {'; '.join(_source_url(s) for s in [*archive, *reachable])}")
    update_errors = root.update(force=changed)
    failed = [e for e in update_errors if "Failed to fetch" in e or e.startswith(("E:", "Err:"))]
    if failed:  # a source whose lists apt could not fetch: what its lists held before (if any) is used
        where = "; ".join(_source_url(s) for s in archive)
        entries.append(
            Entry("apt-repo-missing", "package lists", release.key, where).missing("; ".join(failed))
        )
    _status(root)
    if not any((root.path / "lists").glob("*_Packages*")):
        reason = "; ".join(update_errors) or "apt found no package lists"
        return entries + [
            Entry("apt", _name(r), r.partition("=")[2], release.key).missing(reason) for r in wanted
        ]
    closure, missing = _resolve_all(root, requests, no_recommends)
    say(f"apt {release.key}: {len(closure)} packages with their dependencies, {len(missing)} missing")
    uris = _uris(root, sorted(closure))
    say(f"apt {release.key}: downloading what apt's cache lacks of {len(closure)} packages")
    fetch_errors = _download(root, sorted(closure))
    repo = folder / APT_DIR / release.key
    entries += _publish(root, uris, repo, folder, fetch_errors)
    _write_index(repo, release, sign_key)
    archive_where = "; ".join(_source_url(s) for s in archive)
    for request, (label, reason) in sorted(missing.items()):
        where, extra = unreachable.get(label.split(":", 1)[0], (archive_where, ""))
        detail = f"{reason}; {extra}" if extra else reason
        entries.append(Entry("apt", _name(request), request.partition("=")[2], where).missing(detail))
    return entries


def build(
    inv: Inventory,
    folder: Path,
    *,
    targets: Iterable[pkgs.OSRelease] | None = None,
    work: Path | None = None,
    sign_key: str | None = None,
    timeout: float = 10.0,
    progress: Progress | None = None,
    extra_packages: Mapping[str, Sequence[str]] | None = None,
) -> list[Entry]:
    """The apt repositories of `inv`'s releases (default: packages.target_releases) under folder/apt/,
    and their manifest entries (kinds apt and apt-repo-missing). `extra_packages`: per release key
    (`debian-trixie`), packages something other than the roles installs (the lab's kernel), resolved
    as one more transaction without Recommends."""
    chosen = tuple(targets) if targets is not None else None
    entries: list[Entry] = []
    for found in pkgs.inventory_packages(inv, chosen):
        requests: dict[str, list[str]] = {}
        for install in found.installs:
            label = f"{install.role}:{install.group}" + ("" if install.recommends else ":no-recommends")
            requests.setdefault(label, []).extend(install.packages)
        extra = list((extra_packages or {}).get(found.release.key, ()))
        if extra:
            requests["extra:all:no-recommends"] = extra
        third: dict[str, list[Source]] = {}
        for src in found.sources:
            third.setdefault(src.role, []).extend(parse_sources(src.text, src.where))
        driver_from_archive = (
            any(i.role == "nvidia_driver" for i in found.installs) and "nvidia_driver" not in third
        )
        entries.extend(
            build_release(
                found.release,
                requests,
                folder,
                work=work,
                third_party=third,
                driver_components=driver_from_archive,
                no_recommends={label for label in requests if label.endswith(":no-recommends")},
                sign_key=sign_key,
                timeout=timeout,
                progress=progress,
            )
        )
    return entries
