"""A real OpenSSH server for tests: `/usr/sbin/sshd -D -e` on 127.0.0.1 and a free port.

Everything lives in a temporary folder: the host key (made with ssh-keygen), the config, the
authorized_keys file and the pid file. The server runs as the test user (root in CI and on the build
machines), so logins as root work; `StrictModes no` lets it read keys from the temporary folder and
`UsePAM no` keeps PAM session modules (pam_loginuid fails in containers) out of the way.

    client = KeyPair.generate(tmp_path / "id_test")
    with Sshd.start(tmp_path / "sshd", authorized=[client.public_line]) as server:
        server.port, server.known_hosts_line()  # "[127.0.0.1]:PORT ssh-ed25519 AAAA..."
        server.log.read_text()  # sshd's own log (LogLevel VERBOSE, or `log_level=`)

"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

import pytest

SSHD = Path("/usr/sbin/sshd")
SSH_KEYGEN = "ssh-keygen"
MISSING = f"{SSHD} is missing: apt-get install openssh-server"


def require_sshd() -> None:
    """Skip the calling test when OpenSSH's server or ssh-keygen is not installed."""
    if not SSHD.is_file() or shutil.which(SSH_KEYGEN) is None:
        pytest.skip(MISSING)


@dataclass(frozen=True)
class KeyPair:
    private: Path
    public_line: str  # "ssh-ed25519 AAAA... comment"

    @classmethod
    def generate(cls, path: Path, key_type: str = "ed25519", comment: str = "gpubring-test") -> KeyPair:
        path.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [SSH_KEYGEN, "-q", "-t", key_type, "-N", "", "-C", comment, "-f", str(path)],
            check=True,
            capture_output=True,
        )
        return cls(path, path.with_name(path.name + ".pub").read_text().strip())

    @property
    def key_type(self) -> str:
        return self.public_line.split()[0]

    @property
    def blob_b64(self) -> str:
        return self.public_line.split()[1]

    def fingerprint(self) -> str:
        out = subprocess.run(
            [SSH_KEYGEN, "-l", "-E", "sha256", "-f", f"{self.private}.pub"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        return out.split()[1]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Sshd:
    """One running sshd; use `Sshd.start(...)` as a context manager, or call `stop()`."""

    def __init__(self, workdir: Path, port: int, host_keys: list[KeyPair], process: subprocess.Popen[bytes]):
        self.workdir = workdir
        self.port = port
        self.host_keys = host_keys
        self.host_key = host_keys[0]
        self.process = process
        self.address = "127.0.0.1"

    @property
    def known_hosts_name(self) -> str:
        return f"[{self.address}]:{self.port}"

    def known_hosts_line(self) -> str:
        return f"{self.known_hosts_name} {self.host_key.key_type} {self.host_key.blob_b64}"

    @property
    def log(self) -> Path:
        return self.workdir / "sshd.log"

    @classmethod
    def start(
        cls,
        workdir: Path,
        authorized: list[str],
        host_key_types: tuple[str, ...] = ("ed25519",),
        log_level: str = "VERBOSE",
    ) -> Sshd:
        """`log_level` DEBUG1 also logs each forwarded connection (`server_request_direct_tcpip: ...
        target 127.0.0.1 port N`): the proof that a client went through this server as a jump host."""
        require_sshd()
        workdir.mkdir(parents=True, exist_ok=True)
        host_keys = [KeyPair.generate(workdir / f"ssh_host_{t}_key", t, "host") for t in host_key_types]
        (workdir / "authorized_keys").write_text("".join(line + "\n" for line in authorized))
        port = free_port()
        config = workdir / "sshd_config"
        config.write_text(
            "\n".join(
                [
                    f"Port {port}",
                    "ListenAddress 127.0.0.1",
                    *(f"HostKey {key.private}" for key in host_keys),
                    f"PidFile {workdir / 'sshd.pid'}",
                    f"AuthorizedKeysFile {workdir / 'authorized_keys'}",
                    "StrictModes no",
                    "UsePAM no",
                    "PermitRootLogin prohibit-password",
                    "PubkeyAuthentication yes",
                    "PasswordAuthentication no",
                    "KbdInteractiveAuthentication no",
                    "MaxStartups 50:30:100",
                    f"LogLevel {log_level}",
                    "AllowTcpForwarding yes",
                    "",
                ]
            )
        )
        if os.geteuid() == 0:
            # sshd's privilege separation folder; the packaged service creates it when it starts.
            Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
        log = (workdir / "sshd.log").open("wb")
        process = subprocess.Popen(
            [str(SSHD), "-D", "-e", "-f", str(config)], stdout=log, stderr=subprocess.STDOUT
        )
        log.close()
        server = cls(workdir, port, host_keys, process)
        server._wait_ready()
        return server

    def _wait_ready(self, seconds: float = 15.0) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            if self.process.poll() is not None:
                raise RuntimeError(f"sshd exited {self.process.returncode}: {self.log.read_text()}")
            try:
                with socket.create_connection((self.address, self.port), timeout=1) as sock:
                    if sock.recv(64).startswith(b"SSH-2.0"):
                        return
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"sshd did not answer on {self.address}:{self.port}: {self.log.read_text()}")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def __enter__(self) -> Sshd:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
