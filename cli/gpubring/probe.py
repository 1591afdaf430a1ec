"""SSH probes behind `gpubring check`: can Ansible reach, log in to and become root on every host?

Each host is probed over a real SSH connection with paramiko, in parallel (a bounded thread pool) and
within a per-host time budget, reached the way Ansible's ssh connection (OpenSSH) would reach it:

0. where and how: the host's variables with the operator's -e over them, read as Ansible's ssh
   connection reads them (`ansible_ssh_user` beats `ansible_user` when both are set, likewise
   `_host`, `_port`, `_private_key_file`; then ANSIBLE_REMOTE_USER and friends), on OpenSSH's
   command line in Ansible's order: `ansible_ssh_args`, then -o Port=, -o IdentityFile=, -o User=,
   then `ansible_ssh_common_args` / `ansible_ssh_extra_args` (`-o Key=Value`, `-i`, `-p`, `-l`,
   `-J`, `-F`); OpenSSH keeps the first value. Then the ssh config (`-F FILE`, else ~/.ssh/config
   and /etc/ssh/ssh_config, `Include`s inlined) read by paramiko.SSHConfig and looked up by the
   host's address: HostName, User, Port, IdentityFile, UserKnownHostsFile, GlobalKnownHostsFile,
   StrictHostKeyChecking, ProxyJump and ProxyCommand (whichever of the two comes first). A ProxyJump
   hop (chains too) is resolved through the same ssh config and probed with the same host-key
   policy, then a `direct-tcpip` channel through it carries the connection; a ProxyCommand runs
   with %h %p %r %n expanded. A templated connection variable, an ansible_connection other than ssh
   and an Include check cannot flatten stop it with SshConfigError: it does not guess;
1. TCP connect to address:port (refused, timed out and no route are told apart);
2. SSH handshake, then the server's host key is checked against known_hosts with paramiko's HostKeys
   (hashed names, `[addr]:port`): the `UserKnownHostsFile` files, else ~/.ssh/known_hosts (and
   known_hosts2), plus the global /etc/ssh/ssh_known_hosts. An unknown key is refused unless
   `accept_new_host_keys` (or StrictHostKeyChecking accept-new/no), which then records it in the first
   user known_hosts file (never hashed); a changed key is refused, naming the file and line, unless
   StrictHostKeyChecking is no (OpenSSH logs in all the same; the result says `changed`); a
   `@revoked` key is always refused;
3. public-key authentication with the first IdentityFile if any, else the ssh-agent's keys and
   the default ~/.ssh/id_{ed25519,ecdsa,rsa};
4. one remote shell script: uid, `uname -r`, passwordless sudo (`sudo -n true`, or root) and
   /etc/os-release, whose ID and VERSION_ID must be a release of meta/os_support.yml (the one list of
   supported operating systems, which the preflight role reads too).

tests/test_check_parity.py compares each of these decisions with Ansible's own (and OpenSSH's, through
`ssh -G` on the command Ansible builds). Not followed: known_hosts host patterns (globs, negations:
paramiko matches names exactly), `Match` beyond what paramiko evaluates, HashKnownHosts when
recording a key, and `~` is $HOME here where OpenSSH uses the account's home.

This module imports paramiko at module level, so only import it inside a command function.
"""

from __future__ import annotations

import base64
import errno
import getpass
import hashlib
import logging
import os
import pwd
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
    """Where and how to reach one host, resolved from its inventory variables and the ssh config."""

    name: str
    address: str
    port: int
    user: str
    key_file: Path | None
    known_hosts: tuple[Path, ...]  # user known_hosts files; a new key is written to the first
    global_known_hosts: tuple[Path, ...] = tuple(Path(p) for p in GLOBAL_KNOWN_HOSTS)
    accept_new: bool = False  # StrictHostKeyChecking accept-new (or no): record unknown keys
    accept_changed: bool = False  # StrictHostKeyChecking no: OpenSSH goes on with a changed key too
    proxy_command: str | None = None  # tokens already expanded
    jump: Target | None = None  # the last ProxyJump hop; its own `jump` is the hop before

    @property
    def known_hosts_name(self) -> str:
        """The name OpenSSH files this host under: `addr`, or `[addr]:port` off port 22."""
        return self.address if self.port == SSH_PORT else f"[{self.address}]:{self.port}"

    @property
    def route(self) -> str:
        """`addr:port`, and how it is reached when not directly: for messages."""
        where = f"{self.address}:{self.port}"
        if self.jump is not None:
            return f"{where} via ProxyJump {self.jump.user}@{self.jump.route}"
        return f"{where} via ProxyCommand {self.proxy_command!r}" if self.proxy_command else where


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
    OS = "os"


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
    ProblemKind.OS: "unsupported OS",
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
class SupportedOs:
    """One entry of meta/os_support.yml: an OS family, a distribution and its accepted versions."""

    family: str
    distribution: str
    os_release_id: str
    versions: tuple[str, ...]


OS_SUPPORT_FILE = "meta/os_support.yml"


def supported_os(root: Path | None = None) -> list[SupportedOs]:
    """The operating systems gpubring supports, from meta/os_support.yml (raises YamlError)."""
    from gpubring import paths, yamlfile

    path = (root or paths.project_root()) / OS_SUPPORT_FILE
    data = yamlfile.read(path, OS_SUPPORT_FILE)
    entries = data.get("supported_os") if isinstance(data, dict) else None
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise yamlfile.YamlError(
            yamlfile.Problem(
                OS_SUPPORT_FILE, "supported_os", "a list of {family, distribution, os_release_id, versions}"
            )
        )
    return [
        SupportedOs(
            str(e.get("family")),
            str(e.get("distribution")),
            str(e.get("os_release_id")),
            tuple(str(v) for v in e.get("versions") or ()),
        )
        for e in entries
    ]


def os_problem(release: OsRelease, supported: Sequence[SupportedOs]) -> str | None:
    """Why gpubring does not support this /etc/os-release, or None when it does. VERSION_ID matches a
    listed version, or its major part does (Debian "12" for a VERSION_ID "12.5")."""
    version = release.version_id or ""
    for entry in supported:
        if release.id == entry.os_release_id and (
            version in entry.versions or version.split(".")[0] in entry.versions
        ):
            return None
    named = release.pretty_name or " ".join(filter(None, (release.id, release.version_id))) or "an unknown OS"
    listed = ", ".join(f"{e.distribution} {'/'.join(e.versions)}" for e in supported)
    families = ", ".join(dict.fromkeys(e.family for e in supported))
    return (
        f"{named} (ID={release.id or '?'}, VERSION_ID={release.version_id or '?'}) is not an operating "
        f"system gpubring supports: {listed} (the {families} family; {OS_SUPPORT_FILE})"
    )


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


class SshConfigError(Exception):
    """The ssh config cannot be read or used (OpenSSH would refuse to start too)."""


# The ssh_config keywords check honours, from the ssh config or the inventory's ssh arguments.
HONOURED = (
    "hostname", "user", "port", "identityfile", "userknownhostsfile", "globalknownhostsfile",
    "stricthostkeychecking", "proxyjump", "proxycommand",
)  # fmt: skip
_FLAGS = {"-o": "", "-i": "identityfile", "-p": "port", "-l": "user", "-J": "proxyjump", "-F": "configfile"}
MAX_JUMPS = 8


def ssh_options(args: str) -> dict[str, str]:
    """ssh_config keywords from ssh arguments: `-o Key=Value`, `-o Key Value`, `-i`, `-p`, `-l`, `-J`
    and `-F` (as `configfile`); keys lower-case, the first one wins as in ssh."""
    try:
        words = shlex.split(args)
    except ValueError:
        return {}
    found: dict[str, str] = {}
    i = 0
    while i < len(words):
        flag, value = words[i][:2], words[i][2:]
        if flag in _FLAGS and not value and i + 1 < len(words):
            value, i = words[i + 1], i + 1
        if flag in _FLAGS and value:
            if flag == "-o":
                key, _, rest = value.replace("=", " ", 1).partition(" ")
                found.setdefault(key.strip().lower(), rest.strip())
            else:
                found.setdefault(_FLAGS[flag], value)
        i += 1
    return found


def _paths(value: str) -> tuple[Path, ...]:
    """ssh_config file lists: whitespace-separated, double quotes keep a space inside one name."""
    try:
        words = shlex.split(value)
    except ValueError:
        words = value.split()
    return tuple(Path(os.path.expanduser(p)) for p in words)


SYSTEM_CONFIG = Path("/etc/ssh/ssh_config")
MAX_INCLUDE_DEPTH = 16  # OpenSSH's READCONF_MAX_DEPTH


def _has_blocks(text: str) -> bool:
    return any(
        line.strip().lower().startswith(("host ", "host=", "match ", "match=")) for line in text.splitlines()
    )


def config_text(path: Path, depth: int = 0) -> str:
    """An ssh config file with its `Include` lines replaced by the files they name (globs sorted;
    relative names under ~/.ssh, or /etc/ssh for the system file), as OpenSSH reads them: an Include
    applies where it stands, and the block around it goes on after it. An Include inside a Host or
    Match block (other than `Host *`) of a file with Host or Match blocks of its own is refused:
    OpenSSH applies those only when the outer block matches too, which one flat file cannot say."""
    import glob

    if depth > MAX_INCLUDE_DEPTH:
        raise SshConfigError(f"ssh config {path}: Include nested deeper than {MAX_INCLUDE_DEPTH} (a loop?)")
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise SshConfigError(f"cannot read ssh config {path}: {exc.strerror}") from None
    base = SYSTEM_CONFIG.parent if path == SYSTEM_CONFIG else Path(os.path.expanduser("~/.ssh"))
    out: list[str] = []
    header = ""  # the Host/Match line of the block we are in; "" before the first
    for lineno, line in enumerate(text.splitlines(), start=1):
        keyword, _, rest = line.strip().replace("=", " ", 1).partition(" ")
        if keyword.lower() in ("host", "match"):
            header = line.strip()
        if keyword.lower() != "include":
            out.append(line)
            continue
        for pattern in _paths(rest):
            for name in sorted(glob.glob(str(pattern if pattern.is_absolute() else base / pattern))):
                inner = config_text(Path(name), depth + 1)
                if header.lower() not in ("", "host *", "match all") and _has_blocks(inner):
                    raise SshConfigError(
                        f"ssh config {path}:{lineno}: the Include of {name} inside '{header}' has Host or "
                        "Match blocks of its own; gpubring check cannot follow that (move the Include out "
                        "of the block, or its blocks into this file)"
                    )
                out.append(inner)
        out.append(header or "Host *")  # OpenSSH goes back to the enclosing block after an Include
    return "\n".join(out) + "\n"


def _lookup(configs: Sequence[Path], host: str, first: Mapping[str, str]) -> dict[str, Any]:
    """paramiko.SSHConfig's answer for `host` over the config files in OpenSSH's order, with `first`
    in a leading `Host *` block: ssh takes the first value it obtains, so command-line options beat
    the config files, as `ssh -o` does."""
    block = "".join(f"  {k} {v}\n" for k, v in first.items() if k in HONOURED and v and "\n" not in v)
    text = f"Host *\n{block}" if block else ""
    for config in configs:
        text += "\nHost *\n" + config_text(config)
    try:
        return dict(paramiko.SSHConfig.from_text(text).lookup(host))
    except (paramiko.SSHException, ValueError) as exc:
        raise SshConfigError(f"ssh config {', '.join(map(str, configs))}: {exc}") from None


def _local_user() -> str:
    """The user OpenSSH logs in as when nothing names one: the account's name, not $USER."""
    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return getpass.getuser()


def _resolve(name: str, host: str, first: dict[str, str], configs: Sequence[Path], depth: int) -> Target:
    if depth > MAX_JUMPS:
        raise SshConfigError(f"{name}: more than {MAX_JUMPS} ProxyJump hops (a loop in the ssh config?)")
    found = _lookup(configs, host, first)
    jump_spec = str(found.get("proxyjump") or "")
    jump = None
    if jump_spec and jump_spec.lower() != "none":
        # `-J a,b`: ssh reaches b through a, then the target through b.
        earlier, _, last = jump_spec.rpartition(",")
        user, _, hop = last.rpartition("@")
        hop_host, _, hop_port = hop.partition(":") if not hop.startswith("[") else hop[1:].partition("]:")
        hop_first = {"user": user, "port": hop_port, "proxyjump": earlier}
        jump = _resolve(f"{name} (jump host {hop_host})", hop_host, hop_first, configs, depth + 1)
    # paramiko expands %h %p %r in ProxyCommand; OpenSSH also %n, the host name ssh was given.
    proxy = str(found.get("proxycommand") or "").replace("%n", host)
    if jump and proxy and list(found).index("proxycommand") < list(found).index("proxyjump"):
        jump = None  # OpenSSH uses whichever of ProxyCommand and ProxyJump it is given first
    known = str(found.get("userknownhostsfile") or " ".join(USER_KNOWN_HOSTS))
    global_known = str(found.get("globalknownhostsfile") or " ".join(GLOBAL_KNOWN_HOSTS))
    keys = found.get("identityfile") or []
    strict = str(found.get("stricthostkeychecking", "")).lower()
    try:
        port = int(found.get("port") or SSH_PORT)
    except ValueError:
        raise SshConfigError(f"{name}: bad port {found.get('port')!r}") from None
    return Target(
        name=name,
        address=str(found.get("hostname") or host),
        port=port,
        user=str(found.get("user") or _local_user()),
        key_file=Path(os.path.expanduser(keys[0])) if keys else None,
        known_hosts=_paths(known),
        global_known_hosts=_paths(global_known),
        accept_new=strict in ("accept-new", "no", "off", "false"),
        accept_changed=strict in ("no", "off", "false"),
        proxy_command=proxy if proxy and proxy.lower() != "none" and not jump else None,
        jump=jump,
    )


# Ansible's ssh connection reads each setting from these variables; when several are set the last
# name listed wins (its config manager reads them all in this order): ansible_ssh_user beats
# ansible_user. Then the environment (ansible.cfg's [defaults]/[ssh_connection] keys set nothing
# that check honours: the project's ssh_args only share connections).
CONNECTION_VARS = {
    "address": ("ansible_host", "ansible_ssh_host"),
    "user": ("ansible_user", "ansible_ssh_user"),
    "port": ("ansible_port", "ansible_ssh_port"),
    "identityfile": ("ansible_private_key_file", "ansible_ssh_private_key_file"),
    "ssh_args": ("ansible_ssh_args",),
    "common_args": ("ansible_ssh_common_args",),
    "extra_args": ("ansible_ssh_extra_args",),
}
CONNECTION_ENV = {
    "user": "ANSIBLE_REMOTE_USER",
    "port": "ANSIBLE_REMOTE_PORT",
    "identityfile": "ANSIBLE_PRIVATE_KEY_FILE",
    "ssh_args": "ANSIBLE_SSH_ARGS",
    "common_args": "ANSIBLE_SSH_COMMON_ARGS",
    "extra_args": "ANSIBLE_SSH_EXTRA_ARGS",
}
SSH_CONNECTIONS = ("ssh", "smart")


def connection_settings(name: str, hostvars: Mapping[str, Any]) -> dict[str, str]:
    """What Ansible's ssh connection is given for one host, as strings ("" when unset). Raises
    SshConfigError where check cannot follow Ansible: another connection plugin, or a value that
    is a template (Ansible renders it at run time; check does not guess what it renders to)."""
    connection = str(hostvars.get("ansible_connection") or "ssh")
    if connection not in SSH_CONNECTIONS:
        raise SshConfigError(
            f"{name}: ansible_connection is {connection!r}; gpubring check probes only hosts Ansible "
            "reaches with its ssh connection (leave it out with --limit)"
        )
    settings: dict[str, str] = {}
    for setting, names in CONNECTION_VARS.items():
        chosen = next((n for n in reversed(names) if hostvars.get(n) is not None), None)
        value = hostvars[chosen] if chosen else None
        if isinstance(value, str) and ("{{" in value or "{%" in value):
            raise SshConfigError(
                f"{name}: {chosen} is a template ({value!r}); gpubring check cannot render it as Ansible "
                "would at run time: give a plain value, or -e the rendered one"
            )
        env = CONNECTION_ENV.get(setting)
        if value is None and env:
            value = os.environ.get(env)
        settings[setting] = "" if value is None else str(value)
    return settings


def target_for(host: Host, extra_vars: Mapping[str, Any] | None = None) -> Target:
    """Resolve a host the way Ansible's ssh would, from its variables with `extra_vars` (-e) over
    them. Ansible's command line puts the ssh args (`ansible_ssh_args`) first, then the port, the
    private key file and the user (-o Port=, -o IdentityFile=, -o User=), then the common and extra
    args; OpenSSH takes the first value it is given, then the ssh config (`-F FILE` in the arguments,
    else ~/.ssh/config) looked up by the host's address."""
    hv: Mapping[str, Any] = {**(host.vars or {}), **(extra_vars or {})}
    given = connection_settings(host.name, hv)
    first = ssh_options(given["ssh_args"])
    for key in ("port", "identityfile", "user"):
        if given[key] and not first.get(key):
            first[key] = given[key]
    for k, v in ssh_options(f"{given['common_args']} {given['extra_args']}").items():
        if not first.get(k):
            first[k] = v
    config = first.pop("configfile", "")
    # `-F FILE` alone, else the user's ~/.ssh/config then the system's /etc/ssh/ssh_config.
    configs: tuple[Path, ...] = (
        (Path(os.path.expanduser(config)),)
        if config
        else tuple(p for p in (Path(os.path.expanduser("~/.ssh/config")), SYSTEM_CONFIG) if p.is_file())
    )
    return _resolve(host.name, given["address"] or host.name, first, configs, 0)


class LimitError(ValueError):
    """A --limit that cannot be used (a limit file that cannot be read)."""


def select_hosts(inventory: Inventory, pattern: str | None) -> list[Host]:
    """The hosts `ansible-playbook --limit PATTERN` leaves to a play on `all`: those the pattern
    selects (the same resolver as plan), in inventory order; `@FILE` terms read one pattern per line."""
    from gpubring.phases import resolve_pattern, split_pattern

    if not pattern:
        return list(inventory.hosts.values())
    terms: list[str] = []
    for term in split_pattern(pattern):
        if not term.startswith("@"):
            terms.append(term)
            continue
        try:
            lines = Path(term[1:]).read_text(encoding="utf-8").split("\n")
        except OSError as exc:
            raise LimitError(f"--limit {term}: cannot read the limit file ({exc.strerror or exc})") from None
        terms += [line.strip() for line in lines if line.strip()]
    chosen = set(resolve_pattern(",".join(terms), inventory.groups, list(inventory.hosts)) if terms else ())
    return [host for name, host in inventory.hosts.items() if name in chosen]


# --------------------------------------------------------------------------- known_hosts


def fingerprint(blob: bytes) -> str:
    """OpenSSH's SHA256 fingerprint of a public key blob."""
    return "SHA256:" + base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")


@dataclass
class _KnownFile:
    """One known_hosts file: paramiko's HostKeys for lookups (hashed names, `[host]:port`), and the
    line of each key and of each `@revoked` key (which paramiko does not read) for messages."""

    keys: paramiko.HostKeys
    lines: list[tuple[int, bytes]]
    revoked: list[tuple[int, bytes]]


class KnownHosts:
    """known_hosts files, each read once per run and shared by the probe threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._files: dict[Path, _KnownFile] = {}

    def _load(self, path: Path) -> _KnownFile:
        if path not in self._files:
            known = _KnownFile(paramiko.HostKeys(), [], [])
            try:
                text = path.read_text(encoding="utf-8", errors="replace")
            except OSError:
                text = ""
            for lineno, raw in enumerate(text.splitlines(), start=1):
                marker, _, rest = raw.strip().partition(" ") if raw.startswith("@") else ("", "", raw)
                try:
                    entry = paramiko.hostkeys.HostKeyEntry.from_line(rest, lineno)
                except (paramiko.SSHException, ValueError):
                    entry = None
                if entry is None or entry.key is None:
                    continue
                if marker == "@revoked":
                    known.revoked.append((lineno, entry.key.asbytes()))
                elif not marker:
                    known.lines.append((lineno, entry.key.asbytes()))
                    for name in entry.hostnames:
                        known.keys.add(name, entry.key.get_name(), entry.key)
            self._files[path] = known
        return self._files[path]

    def lookup(self, files: Iterable[Path], name: str) -> list[tuple[Path, paramiko.PKey]]:
        """The keys on file for `name`, with the file each comes from."""
        with self._lock:
            found: list[tuple[Path, paramiko.PKey]] = []
            for path in files:
                keys: Mapping[str, paramiko.PKey] = self._load(path).keys.lookup(name) or {}
                found += [(path, keys[key_type]) for key_type in keys]
            return found

    def where(self, path: Path, key: paramiko.PKey, revoked: bool = False) -> str:
        """`file:line` of a key on file (or of a revoked key), or "" when it is in none."""
        with self._lock:
            known = self._load(path)
            lines = known.revoked if revoked else known.lines
            return next((f"{path}:{n}" for n, blob in lines if blob == key.asbytes()), "")

    def add(self, path: Path, name: str, key: paramiko.PKey) -> None:
        with self._lock:
            known = self._load(path)
            if known.keys.check(name, key):
                return  # another probe of the same address:port recorded it first
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            with os.fdopen(fd, "a", encoding="utf-8") as handle:
                if path.is_file() and path.stat().st_size and not path.read_bytes().endswith(b"\n"):
                    handle.write("\n")
                handle.write(paramiko.hostkeys.HostKeyEntry([name], key).to_line() or "")
            known.keys.add(name, key.get_name(), key)
            known.lines.append((len(path.read_text(encoding="utf-8").splitlines()), key.asbytes()))


def _preferred_key_types(current: Sequence[str], known: Iterable[paramiko.PKey]) -> list[str]:
    """Ask first for host key types already on file, as OpenSSH does, so a known host verifies."""
    first: list[str] = []
    for key in known:
        name = key.get_name()
        wanted = ["rsa-sha2-512", "rsa-sha2-256", "ssh-rsa"] if name == "ssh-rsa" else [name]
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
    on_file: Sequence[tuple[Path, paramiko.PKey]],
) -> str:
    blob, key_type, name = key.asbytes(), key.get_name(), target.known_hosts_name
    offered = f"{key_type} {fingerprint(blob)}"
    for path in target.known_hosts + target.global_known_hosts:
        if where := known.where(path, key, revoked=True):
            raise _Stop(
                ProblemKind.REVOKED_HOST_KEY,
                f"{name} offered host key {offered}, which is marked @revoked at {where}; refusing it",
            )
    if any(k.asbytes() == blob for _, k in on_file):
        return "known"
    if on_file and target.accept_changed:
        return "changed"  # StrictHostKeyChecking no: OpenSSH (so Ansible) logs in all the same
    if on_file:
        same = [(p, k) for p, k in on_file if k.get_name() == key_type] or list(on_file)
        on_record = "; ".join(
            f"{k.get_name()} {fingerprint(k.asbytes())} at {known.where(p, k) or p}" for p, k in same
        )
        raise _Stop(
            ProblemKind.CHANGED_HOST_KEY,
            f"HOST KEY CHANGED for {name}: the server offered {offered}, but known_hosts has "
            f"{on_record}. Someone may be intercepting the connection, or the host was reinstalled; if "
            f"you know it was, remove the old key with: ssh-keygen -R '{name}' -f {same[0][0]}",
        )
    if not (accept_new or target.accept_new):
        files = ", ".join(str(f) for f in target.known_hosts)
        raise _Stop(
            ProblemKind.UNKNOWN_HOST_KEY,
            f"unknown host key for {name}: {offered} is not in {files}. Compare the fingerprint with "
            "the host's (ssh-keygen -lf /etc/ssh/ssh_host_*_key.pub), then re-run with "
            f"--accept-new-host-keys to record it in {target.known_hosts[0]}",
        )
    known.add(target.known_hosts[0], name, key)
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


def _open_socket(
    target: Target,
    settings: ProbeSettings,
    known: KnownHosts,
    deadline: _Deadline,
    opened: list[paramiko.Transport],
) -> socket.socket | paramiko.Channel | paramiko.ProxyCommand:
    """A byte stream to the target's sshd: direct, through a ProxyJump hop, or a ProxyCommand."""
    if target.jump is not None:
        hop = target.jump
        try:
            via = _log_in(hop, settings, known, deadline, state={}, opened=opened)
        except _Stop as stop:
            raise _Stop(
                stop.problem.kind, f"jump host {hop.user}@{hop.route}: {stop.problem.message}"
            ) from None
        try:
            return via.open_channel(
                "direct-tcpip", (target.address, target.port), ("127.0.0.1", 0), timeout=deadline.left()
            )
        except (paramiko.ChannelException, paramiko.SSHException) as exc:
            raise _Stop(
                ProblemKind.UNREACHABLE, f"{target.route}: the jump host could not connect to it ({exc})"
            ) from None
    if target.proxy_command:
        # OpenSSH runs it with the user's shell; `exec` leaves no shell between us and the command.
        return paramiko.ProxyCommand(f"/bin/sh -c {shlex.quote('exec ' + target.proxy_command)}")
    return _connect(target, deadline)


def _log_in(
    target: Target,
    settings: ProbeSettings,
    known: KnownHosts,
    deadline: _Deadline,
    *,
    state: dict[str, Any],
    opened: list[paramiko.Transport],
) -> paramiko.Transport:
    """Reach, verify and log in to one host (jump hosts first); `opened` collects transports to close."""
    sock = _open_socket(target, settings, known, deadline, opened)
    state["reachable"] = True
    transport = paramiko.Transport(sock)
    opened.append(transport)
    transport.banner_timeout = transport.handshake_timeout = deadline.left()
    transport.auth_timeout = deadline.left()
    on_file = known.lookup(target.known_hosts + target.global_known_hosts, target.known_hosts_name)
    options = transport.get_security_options()
    options.key_types = _preferred_key_types(options.key_types, [k for _, k in on_file])
    direct = target.jump is None and not target.proxy_command
    failed = (
        f"{target.address}:{target.port} accepts TCP connections but the SSH handshake failed"
        if direct
        else f"{target.route}: the SSH handshake failed"
    )
    try:
        transport.start_client(timeout=deadline.left())
    except (paramiko.SSHException, EOFError, OSError) as exc:
        raise _Stop(
            ProblemKind.SSH, f"{failed} ({exc or type(exc).__name__}): is it an SSH server?"
        ) from None
    if not transport.is_active() or not transport.initial_kex_done:
        raise _Stop(
            ProblemKind.SSH,
            f"{failed} (no SSH banner or key exchange within {settings.timeout:g}s): is it an SSH server?",
        )
    server_key = transport.get_remote_server_key()
    state["fp"] = fingerprint(server_key.asbytes())
    state["host_key"] = _check_host_key(server_key, target, known, settings.accept_new_host_keys, on_file)
    state["auth"] = False
    _authenticate(transport, target)
    state["auth"] = True
    return transport


def probe_host(
    target: Target, settings: ProbeSettings, known: KnownHosts, supported: Sequence[SupportedOs] | None = None
) -> ProbeResult:
    """Probe one host; never raises for a problem of the host, which lands in `problem` instead.
    `supported`: the operating systems accepted (None: meta/os_support.yml)."""
    started = time.monotonic()
    deadline = _Deadline(settings.timeout)
    state: dict[str, Any] = {"reachable": False, "host_key": None, "fp": None, "auth": None}
    facts: RemoteFacts | None = None
    problem: ProbeProblem | None = None
    opened: list[paramiko.Transport] = []
    try:
        transport = _log_in(target, settings, known, deadline, state=state, opened=opened)
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
        unsupported = os_problem(facts.os, supported_os() if supported is None else supported)
        if unsupported:
            raise _Stop(ProblemKind.OS, f"{target.name} runs {unsupported}")
    except _Stop as stop:
        problem = stop.problem
        if state["fp"] is None:
            pass  # the target's own host key was never seen (a jump host's problem is in the message)
        elif problem.kind == ProblemKind.UNKNOWN_HOST_KEY:
            state["host_key"] = "unknown"
        elif problem.kind == ProblemKind.CHANGED_HOST_KEY:
            state["host_key"] = "changed"
        elif problem.kind == ProblemKind.REVOKED_HOST_KEY:
            state["host_key"] = "revoked"
    except (paramiko.SSHException, EOFError, OSError) as exc:
        problem = ProbeProblem(
            ProblemKind.PROBE,
            f"{target.route}: connection lost or timed out after "
            f"{time.monotonic() - started:.1f}s of {settings.timeout:g}s ({exc or type(exc).__name__})",
        )
    finally:
        for transport in reversed(opened):
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
    supported: Sequence[SupportedOs] | None = None,
) -> list[ProbeResult]:
    """Probe every target with at most `settings.parallel` at once; results in the targets' order.
    `supported`: the operating systems accepted (None: meta/os_support.yml)."""
    # paramiko logs handshake failures with tracebacks from its threads; the results say it better.
    # A NullHandler keeps Python's last-resort handler from printing them when nothing set up logging.
    logger = logging.getLogger("paramiko")
    if not logger.handlers:
        logger.addHandler(logging.NullHandler())
    known = KnownHosts()
    if not targets:
        return []
    accepted = supported_os() if supported is None else supported

    def one(target: Target) -> ProbeResult:
        result = probe_host(target, settings, known, accepted)
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
