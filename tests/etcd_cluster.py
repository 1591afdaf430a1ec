"""A real etcd cluster on loopback for tests: Debian's etcd-server (the `etcd` binary) and etcd-client
(`etcdctl`), one member per fake control plane, each with TLS laid out as kubeadm lays it out under its
own pki/etcd: ca.crt/ca.key (one CA for the cluster), server.crt/key, peer.crt/key and
healthcheck-client.crt/key, and kubeadm's flags (client and peer certificate authentication on).

Members listen on 127.0.0.1 with ports chosen free at start; their data lives in temp folders.
"""

from __future__ import annotations

import datetime
import ipaddress
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

ETCD = shutil.which("etcd")
ETCDCTL = shutil.which("etcdctl")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    path.chmod(0o600)


def _cert(
    subject: str,
    key: ec.EllipticCurvePrivateKey,
    issuer: tuple[x509.Certificate, ec.EllipticCurvePrivateKey] | None,
    *,
    usages: list[x509.ObjectIdentifier] | None = None,
    dns: tuple[str, ...] = (),
) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
    builder = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(issuer[0].subject if issuer else name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
    )
    if issuer is None:
        builder = builder.add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        builder = builder.add_extension(
            x509.KeyUsage(True, False, False, False, False, True, True, False, False), critical=True
        )
    else:
        builder = builder.add_extension(x509.ExtendedKeyUsage(usages or []), critical=False)
        if dns:
            builder = builder.add_extension(
                x509.SubjectAlternativeName(
                    [x509.DNSName(d) for d in dns] + [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
                ),
                critical=False,
            )
    return builder.sign(issuer[1] if issuer else key, hashes.SHA256())


def _write_cert(path: Path, cert: x509.Certificate) -> None:
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))


@dataclass
class Member:
    name: str
    root: Path  # this member's "host": pki/etcd, var/lib/etcd
    client_port: int
    peer_port: int
    process: subprocess.Popen[bytes] | None = None

    @property
    def pki(self) -> Path:
        return self.root / "pki" / "etcd"

    @property
    def data_dir(self) -> Path:
        return self.root / "var" / "lib" / "etcd"

    @property
    def client_url(self) -> str:
        return f"https://127.0.0.1:{self.client_port}"

    @property
    def peer_url(self) -> str:
        return f"https://127.0.0.1:{self.peer_port}"

    def etcdctl(self) -> list[str]:
        """etcdctl with this member's endpoint and its healthcheck-client certificate: the test's
        kubeadm_control_plane_etcdctl (kubeadm's etcd pod runs the same against 127.0.0.1:2379)."""
        return [
            str(ETCDCTL),
            f"--endpoints={self.client_url}",
            f"--cacert={self.pki / 'ca.crt'}",
            f"--cert={self.pki / 'healthcheck-client.crt'}",
            f"--key={self.pki / 'healthcheck-client.key'}",
            "--command-timeout=2s",
            "--dial-timeout=1s",
        ]


@dataclass
class Cluster:
    root: Path
    members: list[Member] = field(default_factory=list)

    @property
    def initial_cluster(self) -> str:
        return ",".join(f"{m.name}={m.peer_url}" for m in self.members)

    def start(self, member: Member, *, state: str = "new") -> None:
        assert ETCD is not None
        member.data_dir.mkdir(parents=True, exist_ok=True)
        member.data_dir.chmod(0o700)
        log = (member.root / "etcd.log").open("ab")
        pki = member.pki
        member.process = subprocess.Popen(
            [
                ETCD,
                f"--name={member.name}",
                f"--data-dir={member.data_dir}",
                f"--listen-client-urls={member.client_url}",
                f"--advertise-client-urls={member.client_url}",
                f"--listen-peer-urls={member.peer_url}",
                f"--initial-advertise-peer-urls={member.peer_url}",
                f"--initial-cluster={self.initial_cluster}",
                f"--initial-cluster-state={state}",
                "--initial-cluster-token=gpubring-test",
                f"--cert-file={pki / 'server.crt'}",
                f"--key-file={pki / 'server.key'}",
                "--client-cert-auth=true",
                f"--trusted-ca-file={pki / 'ca.crt'}",
                f"--peer-cert-file={pki / 'peer.crt'}",
                f"--peer-key-file={pki / 'peer.key'}",
                "--peer-client-cert-auth=true",
                f"--peer-trusted-ca-file={pki / 'ca.crt'}",
                "--heartbeat-interval=50",
                "--election-timeout=500",
                "--log-level=warn",
            ],
            stdout=log,
            stderr=log,
        )

    def stop(self, member: Member) -> None:
        if member.process is not None:
            member.process.terminate()
            member.process.wait(timeout=10)
            member.process = None

    def stop_all(self) -> None:
        for member in self.members:
            self.stop(member)

    def ctl(self, member: Member, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*member.etcdctl(), *args], capture_output=True, text=True, timeout=30, check=False
        )

    def wait_healthy(self, member: Member, timeout: float = 20) -> None:
        deadline = time.monotonic() + timeout
        while True:
            done = self.ctl(member, "endpoint", "health")
            if done.returncode == 0:
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"etcd {member.name} not healthy: {done.stdout}{done.stderr}")
            time.sleep(0.2)


def make_cluster(root: Path, names: tuple[str, ...] = ("cp-1", "cp-2", "cp-3")) -> Cluster:
    """Certificates for every member (one CA) and the members' settings; nothing started."""
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = _cert("etcd-ca", ca_key, None)
    cluster = Cluster(root)
    for name in names:
        member = Member(name, root / name, _free_port(), _free_port())
        member.pki.mkdir(parents=True)
        _write_cert(member.pki / "ca.crt", ca)
        _write_key(member.pki / "ca.key", ca_key)
        server, client = ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH
        for base, subject, usages, dns in (
            ("server", name, [server, client], (name, "localhost")),
            ("peer", name, [server, client], (name, "localhost")),
            ("healthcheck-client", "kube-etcd-healthcheck-client", [client], ()),
        ):
            key = ec.generate_private_key(ec.SECP256R1())
            _write_cert(member.pki / f"{base}.crt", _cert(subject, key, (ca, ca_key), usages=usages, dns=dns))
            _write_key(member.pki / f"{base}.key", key)
        cluster.members.append(member)
    return cluster
