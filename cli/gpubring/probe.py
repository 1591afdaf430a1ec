"""SSH probes behind `gpubring check`: can Ansible reach, log in to and become root on every host?

Each host is probed over a real SSH connection with paramiko, in parallel (a bounded thread pool) and
within a per-host time budget:

1. TCP connect to address:port (refused, timed out and no route are told apart);
2. SSH handshake, then the server's host key is checked against known_hosts the way OpenSSH does it:
   the files named by `UserKnownHostsFile` in the host's `ansible_ssh_common_args` /
   `ansible_ssh_extra_args` if set, else ~/.ssh/known_hosts (and known_hosts2), plus the global
   /etc/ssh/ssh_known_hosts. An unknown key is refused unless `accept_new_host_keys`, which then
   records it in the first user known_hosts file; a changed or revoked key is always refused;
3. public-key authentication with `ansible_ssh_private_key_file` if set, else the ssh-agent's keys and
   the default ~/.ssh/id_{ed25519,ecdsa,rsa};
4. one remote shell script: uid, `uname -r`, passwordless sudo (`sudo -n true`, or root) and
   /etc/os-release.

This module imports paramiko at module level, so only import it inside a command function.
"""

from __future__ import annotations

import base64
import errno
import hashlib
import hmac
import logging
import os
import re
import shlex
import socket
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any

import paramiko

if TYPE_CHECKING:
    from gpubring.inventory import Host, Inventory

SSH_PORT = 22
DEFAULT_TIMEOUT = 10.0
DEFAULT_PARALLEL = 16
USER_KNOWN_HOSTS = ("~/.ssh/known_hosts", "~/.ssh/known_hosts2")
GLOBAL_KNOWN_HOSTS = ("/etc/ssh/ssh_known_hosts", "/etc/ssh/ssh_known_hosts2")
DEFAULT_KEY_FILES = ("~/.ssh/id_ed25519", "~/.ssh/id_ecdsa", "~/.ssh/id_rsa")


# --------------------------------------------------------------------------- settings and results


@dataclass(frozen=True)
class ProbeSettings:
    timeout: float = DEFAULT_TIMEOUT
    parallel: int = DEFAULT_PARALLEL
    accept_new_host_keys: bool = False


@dataclass(frozen=True)
class Target:
    """Where and how to reach one host, resolved from its inventory variables."""

    name: str
    address: str
    port: int
    user: str
    key_file: Path | None
    known_hosts: tuple[Path, ...]  # user known_hosts files; a new key is written to the first
    global_known_hosts: tuple[Path, ...] = tuple(Path(p) for p in GLOBAL_KNOWN_HOSTS)

    @property
    def known_hosts_name(self) -> str:
        """The name OpenSSH files this host under: `addr`, or `[addr]:port` off port 22."""
        return self.address if self.port == SSH_PORT else f"[{self.address}]:{self.port}"


class ProblemKind(StrEnum):
    UNREACHABLE = "unreachable"
    SSH = "ssh"
    UNKNOWN_HOST_KEY = "unknown_host_key"
    CHANGED_HOST_KEY = "changed_host_key"
    REVOKED_HOST_KEY = "revoked_host_key"
    KEY_FILE = "key_file"
    AUTH = "auth"
    SUDO = "sudo"
    PROBE = "probe"


PROBLEM_LABELS: dict[ProblemKind, str] = {
    ProblemKind.UNREACHABLE: "unreachable",
    ProblemKind.SSH: "SSH handshake failed",
    ProblemKind.UNKNOWN_HOST_KEY: "unknown host key",
    ProblemKind.CHANGED_HOST_KEY: "HOST KEY CHANGED",
    ProblemKind.REVOKED_HOST_KEY: "host key revoked",
    ProblemKind.KEY_FILE: "unusable key file",
    ProblemKind.AUTH: "authentication failed",
    ProblemKind.SUDO: "no passwordless sudo",
    ProblemKind.PROBE: "probe failed",
}


@dataclass(frozen=True)
class ProbeProblem:
    kind: ProblemKind
    message: str

    @property
    def label(self) -> str:
        return PROBLEM_LABELS[self.kind]


@dataclass(frozen=True)
class OsRelease:
    id: str | None
    version_id: str | None
    pretty_name: str | None


@dataclass(frozen=True)
class ProbeResult:
    name: str
    address: str
    port: int
    user: str
    reachable: bool
    host_key: str | None  # known | accepted | unknown | changed | revoked; None when not reached
    host_key_fingerprint: str | None
    authenticated: bool | None  # None: not tried (unreachable or host key refused)
    sudo: str | None  # root | passwordless | no; None when not logged in
    os: OsRelease | None
    kernel: str | None
    problem: ProbeProblem | None
    seconds: float

    @property
    def ok(self) -> bool:
        return self.problem is None


def result_to_json(result: ProbeResult) -> dict[str, Any]:
    data = asdict(result)
    data["ok"] = result.ok
    data["seconds"] = round(result.seconds, 3)
    if result.problem is not None:
        data["problem"] = {"kind": str(result.problem.kind), "message": result.problem.message}
    return data


# --------------------------------------------------------------------------- inventory -> targets


def ssh_options(args: str) -> dict[str, str]:
    """`-o Key=Value` options (and `-i FILE`) from ssh arguments; keys lower-case, first one wins."""
    try:
        words = shlex.split(args)
    except ValueError:
        return {}
    found: dict[str, str] = {}
    i = 0
    while i < len(words):
        word = words[i]
        value: str | None = None
        if word in ("-o", "-i") and i + 1 < len(words):
            value, i = words[i + 1], i + 1
        elif word.startswith(("-o", "-i")) and len(word) > 2:
            value = word[2:]
        if value is not None and word.startswith("-i"):
            found.setdefault("identityfile", value)
        elif value is not None:
            key, _, rest = value.replace("=", " ", 1).partition(" ")
            found.setdefault(key.strip().lower(), rest.strip())
        i += 1
    return found


def _paths(value: str) -> tuple[Path, ...]:
    """ssh_config file lists: whitespace-separated, double quotes keep a space inside one name."""
    try:
        words = shlex.split(value)
    except ValueError:
        words = value.split()
    return tuple(Path(os.path.expanduser(p)) for p in words)


def target_for(host: Host) -> Target:
    """Resolve address, port, user, key file and known_hosts files the way Ansible's ssh would."""
    hv: Mapping[str, Any] = host.vars or {}
    args = " ".join(str(hv.get(k) or "") for k in ("ansible_ssh_common_args", "ansible_ssh_extra_args"))
    options = ssh_options(args)
    key = hv.get("ansible_ssh_private_key_file") or hv.get("ansible_private_key_file")
    key = key or options.get("identityfile")
    user = host.user or hv.get("ansible_user") or hv.get("ansible_ssh_user")
    if not user:
        import getpass

        user = getpass.getuser()
    known = options.get("userknownhostsfile")
    global_known = options.get("globalknownhostsfile")
    return Target(
        name=host.name,
        address=str(host.address or host.name),
        port=int(host.port or SSH_PORT),
        user=str(user),
        key_file=Path(os.path.expanduser(str(key))) if key else None,
        known_hosts=_paths(known) if known else _paths(" ".join(USER_KNOWN_HOSTS)),
        global_known_hosts=_paths(global_known) if global_known else _paths(" ".join(GLOBAL_KNOWN_HOSTS)),
    )


def _glob_regex(pattern: str) -> re.Pattern[str]:
    """A known_hosts host pattern (`*`, `?`) as a case-insensitive regex."""
    return re.compile("".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern), re.I)


def select_hosts(inventory: Inventory, pattern: str | None) -> list[Host]:
    """Hosts matching an Ansible `--limit` pattern, in inventory order (the same resolver as plan)."""
    from gpubring.phases import resolve_pattern

    if not pattern:
        return list(inventory.hosts.values())
    chosen = resolve_pattern(pattern, inventory.groups, list(inventory.hosts))
    return [inventory.hosts[n] for n in chosen]


# --------------------------------------------------------------------------- known_hosts


def fingerprint(blob: bytes) -> str:
    """OpenSSH's SHA256 fingerprint of a public key blob."""
    return "SHA256:" + base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")


@dataclass(frozen=True)
class KnownHostsLine:
    file: Path
    lineno: int
    marker: str  # "", "@revoked" or "@cert-authority"
    hosts: str
    key_type: str
    blob: bytes

    @property
    def fingerprint(self) -> str:
        return fingerprint(self.blob)

    @property
    def where(self) -> str:
        return f"{self.file}:{self.lineno}"

    def matches(self, name: str) -> bool:
        """OpenSSH host matching: hashed `|1|salt|hash` entries, globs, and `!` negations."""
        if self.hosts.startswith("|1|"):
            _, _, salt, digest = self.hosts.split("|", 3)
            try:
                mac = hmac.new(base64.b64decode(salt), name.encode(), hashlib.sha1).digest()
                return hmac.compare_digest(mac, base64.b64decode(digest))
            except ValueError:
                return False
        hit = False
        for pattern in self.hosts.split(","):
            negated = pattern.startswith("!")
            if _glob_regex(pattern.lstrip("!")).fullmatch(name):
                if negated:
                    return False
                hit = True
        return hit


def parse_known_hosts(path: Path, text: str) -> list[KnownHostsLine]:
    lines: list[KnownHostsLine] = []
    for lineno, raw in enumerate(text.splitlines(), start=1):
        fields = raw.split()
        if not fields or fields[0].startswith("#"):
            continue
        marker = fields.pop(0) if fields[0].startswith("@") else ""
        if len(fields) < 3:
            continue
        try:
            blob = base64.b64decode(fields[2], validate=True)
        except ValueError:
            continue
        lines.append(KnownHostsLine(path, lineno, marker, fields[0], fields[1], blob))
    return lines


class KnownHosts:
    """known_hosts files, each read once per run and shared by the probe threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._files: dict[Path, list[KnownHostsLine]] = {}

    def _load(self, path: Path) -> list[KnownHostsLine]:
        if path not in self._files:
            try:
                text = path.read_text(encoding="utf-8", errors="replace")
            except OSError:
                text = ""
            self._files[path] = parse_known_hosts(path, text)
        return self._files[path]

    def lookup(self, files: Iterable[Path], name: str) -> list[KnownHostsLine]:
        with self._lock:
            return [ln for f in files for ln in self._load(f) if ln.matches(name)]

    def add(self, path: Path, name: str, key_type: str, blob: bytes) -> None:
        line = f"{name} {key_type} {base64.b64encode(blob).decode()}\n"
        with self._lock:
            current = self._load(path)
            if any(ln.matches(name) and ln.blob == blob and not ln.marker for ln in current):
                return  # another probe of the same address:port recorded it first
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            with os.fdopen(fd, "a", encoding="utf-8") as handle:
                if path.is_file() and path.stat().st_size and not path.read_bytes().endswith(b"\n"):
                    handle.write("\n")
                handle.write(line)
            lineno = len(path.read_text(encoding="utf-8").splitlines()) if path.is_file() else 0
            current.append(KnownHostsLine(path, lineno, "", name, key_type, blob))


def _preferred_key_types(current: Sequence[str], known: Iterable[KnownHostsLine]) -> list[str]:
    """Ask first for host key types already on file, as OpenSSH does, so a known host verifies."""
    first: list[str] = []
    for line in known:
        wanted = (
            ["rsa-sha2-512", "rsa-sha2-256", "ssh-rsa"] if line.key_type == "ssh-rsa" else [line.key_type]
        )
        first += [t for t in wanted if t in current and t not in first]
    return first + [t for t in current if t not in first]


# --------------------------------------------------------------------------- the probe


class _Stop(Exception):
    def __init__(self, kind: ProblemKind, message: str) -> None:
        super().__init__(message)
        self.problem = ProbeProblem(kind, message)


PROBE_SCRIPT = r"""
echo "uid=$(id -u)"
echo "kernel=$(uname -r)"
if [ "$(id -u)" = 0 ]; then
  echo "sudo=root"
elif out=$(sudo -n true 2>&1 </dev/null); then
  echo "sudo=passwordless"
else
  echo "sudo=no"
  printf 'sudo_error=%s\n' "$(printf '%s\n' "$out" | head -n 1)"
fi
echo "--- os-release"
cat /etc/os-release 2>/dev/null || cat /usr/lib/os-release 2>/dev/null
"""


@dataclass(frozen=True)
class RemoteFacts:
    uid: str | None
    kernel: str | None
    sudo: str | None
    sudo_error: str
    os: OsRelease


def parse_probe_output(text: str) -> RemoteFacts:
    head, _, os_text = text.partition("--- os-release")
    fields: dict[str, str] = {}
    for line in head.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            fields[key.strip()] = value.strip()
    release: dict[str, str] = {}
    for line in os_text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip():
            try:
                words = shlex.split(value)
            except ValueError:
                words = [value]
            release[key.strip()] = " ".join(words)
    return RemoteFacts(
        uid=fields.get("uid") or None,
        kernel=fields.get("kernel") or None,
        sudo=fields.get("sudo") or None,
        sudo_error=fields.get("sudo_error", ""),
        os=OsRelease(release.get("ID"), release.get("VERSION_ID"), release.get("PRETTY_NAME")),
    )


class _Deadline:
    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.end = time.monotonic() + seconds

    def left(self) -> float:
        return max(0.1, self.end - time.monotonic())


def _connect(target: Target, deadline: _Deadline) -> socket.socket:
    where = f"{target.address}:{target.port}"
    try:
        return socket.create_connection((target.address, target.port), timeout=deadline.left())
    except socket.gaierror as exc:
        raise _Stop(
            ProblemKind.UNREACHABLE, f"cannot resolve address {target.address!r}: {exc.strerror}"
        ) from None
    except ConnectionRefusedError:
        raise _Stop(
            ProblemKind.UNREACHABLE,
            f"{where}: connection refused (nothing listens on that port: is sshd running, is "
            "ansible_port right?)",
        ) from None
    except TimeoutError:
        raise _Stop(
            ProblemKind.UNREACHABLE,
            f"{where}: no answer within {deadline.seconds:g}s (host down, firewalled or wrong address)",
        ) from None
    except OSError as exc:
        if exc.errno in (errno.EHOSTUNREACH, errno.ENETUNREACH):
            raise _Stop(ProblemKind.UNREACHABLE, f"{where}: no route to host ({exc.strerror})") from None
        raise _Stop(ProblemKind.UNREACHABLE, f"{where}: {exc.strerror or exc}") from None


def _check_host_key(
    key: paramiko.PKey,
    target: Target,
    known: KnownHosts,
    accept_new: bool,
    on_file: Sequence[KnownHostsLine],
) -> str:
    blob, key_type, name = key.asbytes(), key.get_name(), target.known_hosts_name
    offered = f"{key_type} {fingerprint(blob)}"
    if any(ln.marker == "@revoked" and ln.blob == blob for ln in on_file):
        line = next(ln for ln in on_file if ln.marker == "@revoked" and ln.blob == blob)
        raise _Stop(
            ProblemKind.REVOKED_HOST_KEY,
            f"{name} offered host key {offered}, which is marked @revoked at {line.where}; refusing it",
        )
    entries = [ln for ln in on_file if not ln.marker]
    if any(ln.blob == blob for ln in entries):
        return "known"
    if entries:
        same = [ln for ln in entries if ln.key_type == key_type] or entries
        on_record = "; ".join(f"{ln.key_type} {ln.fingerprint} at {ln.where}" for ln in same)
        raise _Stop(
            ProblemKind.CHANGED_HOST_KEY,
            f"HOST KEY CHANGED for {name}: the server offered {offered}, but known_hosts has "
            f"{on_record}. Someone may be intercepting the connection, or the host was reinstalled; if "
            f"you know it was, remove the old key with: ssh-keygen -R '{name}' -f {same[0].file}",
        )
    if not accept_new:
        files = ", ".join(str(f) for f in target.known_hosts)
        raise _Stop(
            ProblemKind.UNKNOWN_HOST_KEY,
            f"unknown host key for {name}: {offered} is not in {files}. Compare the fingerprint with "
            "the host's (ssh-keygen -lf /etc/ssh/ssh_host_*_key.pub), then re-run with "
            f"--accept-new-host-keys to record it in {target.known_hosts[0]}",
        )
    known.add(target.known_hosts[0], name, key_type, blob)
    return "accepted"


def _load_key(path: Path) -> paramiko.PKey:
    try:
        return paramiko.PKey.from_path(path)
    except FileNotFoundError:
        raise _Stop(
            ProblemKind.KEY_FILE, f"key file {path} (ansible_ssh_private_key_file) does not exist"
        ) from None
    except PermissionError:
        raise _Stop(ProblemKind.KEY_FILE, f"key file {path} is not readable by this user") from None
    except (TypeError, paramiko.PasswordRequiredException):
        raise _Stop(
            ProblemKind.KEY_FILE,
            f"key file {path} is passphrase-protected; gpubring check cannot prompt: load it into "
            "ssh-agent and unset ansible_ssh_private_key_file, or use a key without a passphrase",
        ) from None
    except (OSError, ValueError, paramiko.SSHException) as exc:
        raise _Stop(ProblemKind.KEY_FILE, f"key file {path} is not a usable private key: {exc}") from None


def _default_keys() -> list[tuple[str, paramiko.PKey]]:
    keys: list[tuple[str, paramiko.PKey]] = []
    if os.environ.get("SSH_AUTH_SOCK"):
        try:
            agent = paramiko.Agent()
            keys += [(f"agent key {k.fingerprint}", k) for k in agent.get_keys()]
        except paramiko.SSHException:
            pass
    for name in DEFAULT_KEY_FILES:
        path = Path(os.path.expanduser(name))
        if path.is_file():
            try:
                keys.append((str(path), paramiko.PKey.from_path(path)))
            except (OSError, ValueError, TypeError, paramiko.SSHException):
                continue
    return keys


def _authenticate(transport: paramiko.Transport, target: Target) -> None:
    who = f"{target.user}@{target.known_hosts_name}"
    if target.key_file is not None:
        keys = [(f"key file {target.key_file}", _load_key(target.key_file))]
    else:
        keys = _default_keys()
        if not keys:
            raise _Stop(
                ProblemKind.AUTH,
                f"no key to log in to {who}: ansible_ssh_private_key_file is not set, ssh-agent holds no "
                f"key and there is no {', '.join(DEFAULT_KEY_FILES)}",
            )
    for _label, pkey in keys:
        try:
            transport.auth_publickey(target.user, pkey)
            return
        except paramiko.BadAuthenticationType as exc:
            raise _Stop(
                ProblemKind.AUTH,
                f"{who} does not accept public keys (server allows: {', '.join(exc.allowed_types)})",
            ) from None
        except paramiko.AuthenticationException:
            continue
    tried = ", ".join(f"{label} ({pkey.fingerprint})" for label, pkey in keys)
    raise _Stop(
        ProblemKind.AUTH,
        f"authentication failed for user {target.user!r} on {target.known_hosts_name} with {tried}: the "
        f"server refused the key (is its .pub in ~{target.user}/.ssh/authorized_keys? is "
        "ansible_user right?)",
    )


def _run_probe_script(transport: paramiko.Transport, deadline: _Deadline) -> tuple[int, str, str]:
    channel = transport.open_session(timeout=deadline.left())
    try:
        channel.settimeout(deadline.left())
        channel.exec_command("/bin/sh -c " + shlex.quote(PROBE_SCRIPT))
        out, err = bytearray(), bytearray()
        while True:
            chunk = channel.recv(65536)
            if not chunk:
                break
            out += chunk
        while channel.recv_stderr_ready():
            err += channel.recv_stderr(65536)
        if not channel.status_event.wait(deadline.left()):
            raise TimeoutError("no exit status from the probe script")
        return channel.exit_status, out.decode(errors="replace"), err.decode(errors="replace")
    finally:
        channel.close()


def probe_host(target: Target, settings: ProbeSettings, known: KnownHosts) -> ProbeResult:
    """Probe one host; never raises for a problem of the host, which lands in `problem` instead."""
    started = time.monotonic()
    deadline = _Deadline(settings.timeout)
    state: dict[str, Any] = {"reachable": False, "host_key": None, "fp": None, "auth": None}
    facts: RemoteFacts | None = None
    problem: ProbeProblem | None = None
    transport: paramiko.Transport | None = None
    try:
        sock = _connect(target, deadline)
        state["reachable"] = True
        transport = paramiko.Transport(sock)
        transport.banner_timeout = transport.handshake_timeout = deadline.left()
        transport.auth_timeout = deadline.left()
        on_file = known.lookup(target.known_hosts + target.global_known_hosts, target.known_hosts_name)
        options = transport.get_security_options()
        options.key_types = _preferred_key_types(options.key_types, [ln for ln in on_file if not ln.marker])
        try:
            transport.start_client(timeout=deadline.left())
        except (paramiko.SSHException, EOFError, OSError) as exc:
            raise _Stop(
                ProblemKind.SSH,
                f"{target.address}:{target.port} accepts TCP connections but the SSH handshake failed "
                f"({exc or type(exc).__name__}): is it an SSH server?",
            ) from None
        if not transport.is_active() or not transport.initial_kex_done:
            raise _Stop(
                ProblemKind.SSH,
                f"{target.address}:{target.port} accepts TCP connections but the SSH handshake failed "
                f"(no SSH banner or key exchange within {settings.timeout:g}s): is it an SSH server?",
            )
        server_key = transport.get_remote_server_key()
        state["fp"] = fingerprint(server_key.asbytes())
        state["host_key"] = _check_host_key(server_key, target, known, settings.accept_new_host_keys, on_file)
        state["auth"] = False
        _authenticate(transport, target)
        state["auth"] = True
        status, out, err = _run_probe_script(transport, deadline)
        facts = parse_probe_output(out)
        if facts.sudo is None:
            raise _Stop(ProblemKind.PROBE, f"the probe script exited {status}: {(err or out).strip()[:300]}")
        if facts.sudo == "no":
            raise _Stop(
                ProblemKind.SUDO,
                f"user {target.user!r} has no passwordless sudo on {target.name} "
                f"({facts.sudo_error or 'sudo -n true failed'}): add "
                f"'{target.user} ALL=(ALL:ALL) NOPASSWD: ALL' to /etc/sudoers.d/, or connect as root",
            )
    except _Stop as stop:
        problem = stop.problem
        if problem.kind in (ProblemKind.UNKNOWN_HOST_KEY, ProblemKind.CHANGED_HOST_KEY):
            state["host_key"] = "unknown" if problem.kind == ProblemKind.UNKNOWN_HOST_KEY else "changed"
        elif problem.kind == ProblemKind.REVOKED_HOST_KEY:
            state["host_key"] = "revoked"
    except (paramiko.SSHException, EOFError, OSError) as exc:
        problem = ProbeProblem(
            ProblemKind.PROBE,
            f"{target.address}:{target.port}: connection lost or timed out after "
            f"{time.monotonic() - started:.1f}s of {settings.timeout:g}s ({exc or type(exc).__name__})",
        )
    finally:
        if transport is not None:
            transport.close()
    return ProbeResult(
        name=target.name,
        address=target.address,
        port=target.port,
        user=target.user,
        reachable=state["reachable"],
        host_key=state["host_key"],
        host_key_fingerprint=state["fp"],
        authenticated=state["auth"],
        sudo=facts.sudo if facts else None,
        os=facts.os if facts else None,
        kernel=facts.kernel if facts else None,
        problem=problem,
        seconds=time.monotonic() - started,
    )


def probe_hosts(
    targets: Sequence[Target],
    settings: ProbeSettings,
    on_result: Callable[[ProbeResult], None] | None = None,
) -> list[ProbeResult]:
    """Probe every target with at most `settings.parallel` at once; results in the targets' order."""
    # paramiko logs handshake failures with tracebacks from its threads; the results say it better.
    # A NullHandler keeps Python's last-resort handler from printing them when nothing set up logging.
    logger = logging.getLogger("paramiko")
    if not logger.handlers:
        logger.addHandler(logging.NullHandler())
    known = KnownHosts()
    if not targets:
        return []

    def one(target: Target) -> ProbeResult:
        result = probe_host(target, settings, known)
        if on_result is not None:
            on_result(result)
        return result

    with ThreadPoolExecutor(max_workers=max(1, min(settings.parallel, len(targets)))) as pool:
        return list(pool.map(one, targets))


# --------------------------------------------------------------------------- tool versions


@dataclass(frozen=True)
class ToolVersion:
    name: str
    version: str | None  # None: not installed
    wanted: str | None  # the range gpubring's package metadata pins, if any
    ok: bool | None  # None: nothing to compare

    def describe(self) -> str:
        if self.version is None:
            return "not installed"
        if self.ok is False:
            return f"{self.version} (OUTSIDE the tested range {self.wanted})"
        return self.version


TOOLS = ("ansible-core", "ansible", "ansible-runner", "paramiko", "mitogen")
COLLECTIONS = ("kubernetes.core", "community.general", "ansible.posix", "community.docker")


def tool_versions() -> list[ToolVersion]:
    """Versions of the tools gpubring drives, read from package metadata (nothing is imported)."""
    from importlib import metadata

    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.utils import canonicalize_name

    wanted: dict[str, str] = {}
    try:
        for text in metadata.requires("gpubring") or []:
            try:
                req = Requirement(text)
            except InvalidRequirement:
                continue
            wanted.setdefault(canonicalize_name(req.name), str(req.specifier))
    except metadata.PackageNotFoundError:
        pass
    found: list[ToolVersion] = []
    for tool in TOOLS:
        try:
            version: str | None = metadata.version(tool)
        except metadata.PackageNotFoundError:
            version = None
        spec = wanted.get(canonicalize_name(tool)) or None
        ok = None
        if version is not None and spec:
            from packaging.specifiers import SpecifierSet

            ok = SpecifierSet(spec).contains(version, prereleases=True)
        found.append(ToolVersion(tool, version, spec, ok))
    return found


def collection_versions() -> dict[str, str | None]:
    """Versions of the collections gpubring uses, from the MANIFEST.json the `ansible` package ships."""
    import json
    from importlib import metadata

    versions: dict[str, str | None] = {}
    try:
        dist: metadata.Distribution | None = metadata.distribution("ansible")
    except metadata.PackageNotFoundError:
        dist = None
    for fqcn in COLLECTIONS:
        namespace, name = fqcn.split(".")
        version = None
        if dist is not None:
            manifest = Path(str(dist.locate_file(f"ansible_collections/{namespace}/{name}/MANIFEST.json")))
            try:
                version = str(json.loads(manifest.read_text())["collection_info"]["version"])
            except (OSError, ValueError, KeyError, TypeError):
                version = None
        versions[fqcn] = version
    return versions
