"""Certificates (issue 21 item 12): `gpubring certs`, its playbook and the warnings of up/verify.

- the parser of `kubeadm certs check-expiration -o json` on recorded outputs
  (tests/fixtures/kubeadm/SOURCES.md says where their shape comes from) and the warn-days decision;
- the file reader on real certificates: a kubeadm-like pki/ and kubeconfigs generated here with
  `cryptography` at known expiry dates, read by the role's own tasks (tasks/certs_check.yml) through
  ansible-runner, and the warnings `gpubring up`/`verify` print from that run's job events;
- the CLI: --renew without --yes prints the plan and reaches no host, bad input is exit 2, and the
  playbook itself refuses a renewal without its confirmation.

kubeadm cannot be installed here (no Kubernetes apt repository), so `kubeadm certs renew` and the
static pod restart are not run; their plan and refusals are.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from typer.testing import CliRunner

from gpubring import paths
from gpubring.app import app
from gpubring.commands import certs
from gpubring.exitcodes import ExitCode
from gpubring.inventory import load_inventory
from gpubring.run import process
from gpubring.run.settings import RunSettings
from gpubring.runopts import RunOptions
from helpers import FIXTURES, collection_module, module_utils

C = module_utils("cert_expiry")
KUBEADM = FIXTURES / "kubeadm"
RECORDED = datetime(2026, 11, 27, 9, 0, 0, tzinfo=UTC)  # when the fixtures were "taken"


def fixture(name: str) -> str:
    return (KUBEADM / name).read_text(encoding="utf-8")


# -- kubeadm certs check-expiration -o json ----------------------------------------------------------


def test_the_recorded_output_of_the_first_control_plane() -> None:
    entries = C.kubeadm_expiration(fixture("check-expiration-cp1.json"))
    certs_ = [e for e in entries if e["kind"] == "certificate"]
    cas = [e for e in entries if e["kind"] == "ca"]
    assert [e["name"] for e in certs_] == [
        "admin.conf", "apiserver", "apiserver-etcd-client", "apiserver-kubelet-client",
        "controller-manager.conf", "etcd-healthcheck-client", "etcd-peer", "etcd-server",
        "front-proxy-client", "scheduler.conf", "super-admin.conf",
    ]  # fmt: skip
    assert [e["name"] for e in cas] == ["ca", "etcd-ca", "front-proxy-ca"]
    assert {e["expires"] for e in certs_} == {"2026-12-03T10:41:07Z"}
    assert {e["expires"] for e in cas} == {"2035-12-01T10:41:07Z"}
    assert next(e for e in certs_ if e["name"] == "etcd-peer")["ca"] == "etcd-ca"
    assert not any(e["missing"] or e["externally_managed"] for e in entries)


def test_warn_days_decide_which_certificates_are_named() -> None:
    entries = C.kubeadm_expiration(fixture("check-expiration-cp1.json"))
    # 6.07 days left at the recording: within 30 and 7, not within 6; the CAs (9 years) never.
    assert len(C.expiring(entries, 30, RECORDED)) == 11
    assert len(C.expiring(entries, 7, RECORDED)) == 11
    assert C.expiring(entries, 6, RECORDED) == []
    assert C.expiring(entries, 0, RECORDED) == []
    later = RECORDED + timedelta(days=10)  # all expired by then: named whatever the setting
    assert len(C.expiring(entries, 0, later)) == 11
    lines = C.warning_lines("cp-1", entries, 30, RECORDED)
    assert lines[0] == (
        "cp-1: certificate admin.conf expires in 6 day(s) (2026-12-03T10:41:07Z), within "
        "gpubring_cert_warn_days (30)"
    )
    assert C.warning_lines("cp-1", entries, 30, later)[0].startswith(
        "cp-1: certificate admin.conf expired 4 day(s) ago (2026-12-03T10:41:07Z)"
    )
    ca_soon = datetime(2035, 11, 20, tzinfo=UTC)
    ca_lines = [line for line in C.warning_lines("cp-1", entries, 30, ca_soon) if "CA certificate" in line]
    assert len(ca_lines) == 3 and ca_lines[0].startswith("cp-1: CA certificate ca expires in 11 day(s)")


def test_missing_and_externally_managed_certificates_are_not_warned_about() -> None:
    entries = C.kubeadm_expiration(fixture("check-expiration-cp2-missing.json"))
    apiserver = next(e for e in entries if e["name"] == "apiserver")
    assert apiserver["missing"] is True and apiserver["expires"] == ""
    named = {e["name"] for e in C.expiring(entries, 30, RECORDED)}
    assert "apiserver" not in named and "front-proxy-client" not in named
    assert len(named) == 8  # 10 certificates on a joined control plane, less those two


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("not json", "kubeadm certs check-expiration -o json: not JSON"),
        ('{"kind": "Images", "images": []}', "expected kind CertificateExpirationInfo, got 'Images'"),
        ('{"kind": "CertificateExpirationInfo", "certificates": {}}', "certificates is not a list"),
        (
            '{"kind": "CertificateExpirationInfo", '
            '"certificates": [{"name": "apiserver", "expirationDate": "soon"}]}',
            "'soon' is not an RFC 3339 time",
        ),
    ],
)
def test_unexpected_kubeadm_output_is_a_clear_error(text: str, message: str) -> None:
    with pytest.raises(C.CertParseError, match=message.replace("(", r"\(").replace(")", r"\)")):
        C.kubeadm_expiration(text)


def test_the_filters_raise_ansible_errors_and_accept_a_string_setting() -> None:
    from ansible.errors import AnsibleFilterError

    f = collection_module("filter.cert_expiry")
    entries = f.kubeadm_cert_expiry(fixture("check-expiration-cp1.json"))
    assert len(f.cert_warnings(entries, "cp-1", "30", "2026-11-27T09:00:00Z")) == 11
    with pytest.raises(AnsibleFilterError, match="gpubring_cert_warn_days: expected an integer >= 0"):
        f.cert_warnings(entries, "cp-1", -1, "2026-11-27T09:00:00Z")
    with pytest.raises(AnsibleFilterError, match="expected kind CertificateExpirationInfo"):
        f.kubeadm_cert_expiry("{}")


# -- real certificate files ---------------------------------------------------------------------------


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _cert(
    cn: str, not_after: datetime, *, ca_key: Any = None, ca_name: str = "", is_ca: bool = False
) -> tuple[bytes, Any]:
    key = ec.generate_private_key(ec.SECP256R1())
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(cn))
        .issuer_name(_name(ca_name or cn))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_after - timedelta(days=365))
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=is_ca, path_length=None), critical=True)
    )
    cert = builder.sign(ca_key or key, hashes.SHA256())
    return cert.public_bytes(serialization.Encoding.PEM), key


def make_pki(root: Path, now: datetime) -> None:
    """A kubeadm-like /etc/kubernetes under root: CAs for ten years, the apiserver certificate 5 days
    from now, etcd's server certificate expired 2 days ago, the rest 200 days; admin.conf embeds a
    client certificate 20 days from now, kubelet.conf points at a file (as kubeadm writes it)."""
    (root / "pki" / "etcd").mkdir(parents=True)
    ca_pem, ca_key = _cert("kubernetes", now + timedelta(days=3650), is_ca=True)
    etcd_ca_pem, etcd_ca_key = _cert("etcd-ca", now + timedelta(days=3650), is_ca=True)
    (root / "pki" / "ca.crt").write_bytes(ca_pem)
    (root / "pki" / "ca.key").write_bytes(b"not read\n")
    (root / "pki" / "etcd" / "ca.crt").write_bytes(etcd_ca_pem)
    for rel, days, signer, signer_name in [
        ("pki/apiserver.crt", 5, ca_key, "kubernetes"),
        ("pki/apiserver-kubelet-client.crt", 200, ca_key, "kubernetes"),
        ("pki/etcd/server.crt", -2, etcd_ca_key, "etcd-ca"),
        ("pki/etcd/peer.crt", 200, etcd_ca_key, "etcd-ca"),
    ]:
        pem, _ = _cert(rel, now + timedelta(days=days), ca_key=signer, ca_name=signer_name)
        (root / rel).write_bytes(pem)
    admin_pem, _ = _cert("kubernetes-admin", now + timedelta(days=20), ca_key=ca_key, ca_name="kubernetes")
    kubeconfig = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "gpubring", "cluster": {"server": "https://10.0.0.10:6443"}}],
        "users": [
            {
                "name": "kubernetes-admin",
                "user": {
                    "client-certificate-data": base64.b64encode(admin_pem).decode(),
                    "client-key-data": base64.b64encode(b"secret key, never shown").decode(),
                },
            }
        ],
    }
    (root / "admin.conf").write_text(yaml.safe_dump(kubeconfig))
    kubelet = {
        **kubeconfig,
        "users": [{"name": "node", "user": {"client-certificate": "/var/lib/kubelet/pki/x.pem"}}],
    }
    (root / "kubelet.conf").write_text(yaml.safe_dump(kubelet))


def test_the_file_reader_on_generated_certificates(tmp_path: Path) -> None:
    now = datetime.now(UTC)
    make_pki(tmp_path, now)
    slurped = [
        {"source": str(p), "content": base64.b64encode(p.read_bytes()).decode()}
        for p in sorted(tmp_path.rglob("*"))
        if p.suffix in (".crt", ".conf")
    ]
    entries = C.files_expiry(slurped, str(tmp_path) + "/")
    by_name = {e["name"]: e for e in entries}
    assert set(by_name) == {
        "admin.conf",
        "pki/ca.crt",
        "pki/apiserver.crt",
        "pki/apiserver-kubelet-client.crt",
        "pki/etcd/ca.crt",
        "pki/etcd/server.crt",
        "pki/etcd/peer.crt",
    }  # kubelet.conf embeds no certificate
    assert by_name["pki/ca.crt"]["kind"] == "ca" and by_name["pki/apiserver.crt"]["kind"] == "certificate"
    warned = [e["name"] for e in C.expiring(entries, 30, now)]
    assert warned == ["pki/etcd/server.crt", "pki/apiserver.crt", "admin.conf"]
    assert [e["name"] for e in C.expiring(entries, 10, now)] == ["pki/etcd/server.crt", "pki/apiserver.crt"]
    with pytest.raises(C.CertParseError, match=r"pki/bad\.crt: not a readable certificate"):
        bad = {"source": f"{tmp_path}/pki/bad.crt", "content": base64.b64encode(b"junk").decode()}
        C.files_expiry([bad], str(tmp_path) + "/")


def local_inventory(root: Path, extra: str = "") -> Path:
    root.mkdir()
    (root / "hosts.yml").write_text(
        "all:\n  vars:\n    ansible_connection: local\n"
        '    ansible_python_interpreter: "{{ ansible_playbook_python }}"\n'
        f"{extra}"
        "  children:\n    control_plane:\n      hosts:\n        cp-1: {}\n"
        "    gpu_nodes:\n      hosts:\n        gpu-1: {}\n",
        encoding="utf-8",
    )
    return root


def test_the_role_warns_and_up_and_verify_print_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """tasks/certs_check.yml, run for real by ansible-runner over generated certificates, publishes the
    warnings; print_cert_warnings (what `up` and `verify` call after their summary) prints them from
    the run's job events. No key or kubeconfig content reaches the events."""
    pki = tmp_path / "kubernetes"
    pki.mkdir()
    make_pki(pki, datetime.now(UTC))
    inv = load_inventory(local_inventory(tmp_path / "inv", "    gpubring_cert_warn_days: 30\n"))
    play = [
        {
            "name": "Check the control planes' certificates",
            "hosts": "control_plane",
            "gather_facts": False,
            "tasks": [
                {
                    "name": "Read when the certificates expire",
                    "ansible.builtin.include_role": {
                        "name": "gpubring.core.kubeadm_control_plane",
                        "tasks_from": "certs_check",
                    },
                    "vars": {"kubeadm_control_plane_kubernetes_dir": str(pki)},
                }
            ],
        }
    ]
    playbook = tmp_path / "play.yml"
    playbook.write_text(yaml.safe_dump(play))
    result = process.run(
        RunSettings(inventory_root=inv.root, hosts_file=inv.hosts_file, command="verify", playbook=playbook)
    )
    assert result.exit_code == ExitCode.OK, result.report.failures
    certs.print_cert_warnings(result.run_folder)
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("warning: cp-1:")]
    assert len(lines) == 3, err
    assert lines[0].startswith("warning: cp-1: certificate pki/etcd/server.crt expired 2 day(s) ago")
    assert lines[1].startswith("warning: cp-1: certificate pki/apiserver.crt expires in 5 day(s)")
    assert lines[2].startswith("warning: cp-1: certificate admin.conf expires in 20 day(s)")
    assert "gpubring certs INVENTORY --renew" in err
    events = "".join(p.read_text() for p in result.run_folder.glob("artifacts/*/job_events/*.json"))
    assert base64.b64encode(b"secret key, never shown").decode() not in events


# -- the CLI ------------------------------------------------------------------------------------------


def gpubring(*args: str | Path) -> tuple[int, str]:
    result = CliRunner().invoke(app, [*map(str, args)], env={"COLUMNS": "300"})
    return result.exit_code, result.output


def runs_of(root: Path) -> list[Path]:
    base = root / ".gpubring" / "runs"
    return sorted(base.iterdir()) if base.is_dir() else []


def test_renew_without_yes_prints_the_plan_and_runs_nothing(make_inventory: Callable[..., Path]) -> None:
    inventory = make_inventory()
    code, output = gpubring("certs", inventory, "--renew")
    assert code == 0, output
    assert "nothing is changed without --yes" in output
    assert "control planes, one at a time, each done before the next starts (3):" in output
    assert "  1. cp-1: kubeadm certs renew all; restart kube-apiserver, kube-controller-manager" in output
    assert "  3. cp-3: " in output
    assert "not renewed: the CAs" in output
    assert f"next: gpubring certs {inventory} --renew --yes" in output
    assert runs_of(inventory) == []
    code, output = gpubring("certs", inventory, "--renew", "--limit", "cp-2")
    assert code == 0 and "(1):" in output and "  1. cp-2: " in output
    assert "a single control plane" in output
    assert f"next: gpubring certs {inventory} --limit cp-2 --renew --yes" in output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--yes"], "--yes confirms --renew"),
        (["--limit", "gpu-1"], "--limit gpu-1: gpu-1 is not a control plane"),
        (["--limit", "nope"], "--limit nope: matches no host of this inventory"),
    ],
)
def test_bad_input_is_refused_before_any_host(
    make_inventory: Callable[..., Path], args: list[str], message: str
) -> None:
    inventory = make_inventory()
    code, output = gpubring("certs", inventory, *args)
    assert code == ExitCode.BAD_INPUT
    assert f"error: {message}" in output
    assert runs_of(inventory) == []


def test_the_setting_is_validated(make_inventory: Callable[..., Path]) -> None:
    inventory = make_inventory({"group_vars/all/certs.yml": "gpubring_cert_warn_days: soon\n"})
    code, output = gpubring("certs", inventory)
    assert code == ExitCode.BAD_INPUT
    assert "gpubring_cert_warn_days" in output


def test_the_playbook_refuses_a_renewal_without_confirmation(tmp_path: Path) -> None:
    inv = load_inventory(local_inventory(tmp_path / "local"))
    result = process.run(
        RunSettings(
            inventory_root=inv.root,
            hosts_file=inv.hosts_file,
            command="certs",
            playbook=paths.playbooks_dir() / "certs.yml",
            options=RunOptions(extra_vars=({"certs_renew": True},)),
        )
    )
    assert result.exit_code == ExitCode.TASK_FAILED
    [failure] = result.report.failures
    assert failure.task == "Refuse a renewal without confirmation"
    assert "Confirm with -e certs_confirm=yes" in failure.message
    assert all(row.changed == 0 for row in result.report.stats.values())


def test_expiry_lines_mark_what_needs_renewing() -> None:
    cp1 = C.kubeadm_expiration(fixture("check-expiration-cp1.json"))
    cp2 = C.kubeadm_expiration(fixture("check-expiration-cp2-missing.json"))
    lines = certs.expiry_lines({"cp-2": {"entries": cp2}, "cp-1": {"entries": cp1}}, 30, RECORDED)
    assert lines[0] == "cp-1:"
    assert lines[1].startswith("  ! cert admin.conf ")
    assert "2026-12-03T10:41:07Z  6 days left, within gpubring_cert_warn_days (30), signed by ca" in lines[1]
    assert any(line.startswith("    CA   ca ") and "3291 days left" in line for line in lines)
    assert "cp-2:" in lines
    assert any("apiserver" in line and "MISSING" in line for line in lines)
    front = next(line for line in lines[lines.index("cp-2:") :] if "front-proxy-client" in line)
    assert front.startswith("    cert") and "(externally managed)" in front
    assert certs.expiry_lines({"cp-1": {"entries": []}}, 30, RECORDED) == [
        "cp-1:",
        "  (kubeadm listed no certificate)",
    ]


def test_cert_warnings_read_from_recorded_events() -> None:
    events: list[dict[str, Any]] = [
        {"event": "runner_on_ok", "event_data": {"host": "cp-2", "res": {"ansible_facts": {
            "gpubring_cert_warnings": ["cp-2: certificate pki/apiserver.crt expires in 3 day(s)"]}}}},
        {"event": "runner_on_ok", "event_data": {"host": "cp-1", "res": {"ansible_facts": {
            "gpubring_cert_warnings": []}}}},
        {"event": "runner_on_ok", "event_data": {"host": "cp-1", "res": {"changed": False}}},
    ]  # fmt: skip
    assert certs.cert_warnings(events) == ["cp-2: certificate pki/apiserver.crt expires in 3 day(s)"]
    assert json.loads(json.dumps(certs.cert_warnings([]))) == []


def _run_tasks(tmp_path: Path, tasks_from: str, kube: Path, extra: dict[str, Any] | None = None) -> Any:
    inv = load_inventory(local_inventory(tmp_path / f"inv-{tasks_from}-{len(list(tmp_path.iterdir()))}"))
    play = [
        {
            "name": "Certificate tasks",
            "hosts": "control_plane",
            "gather_facts": False,
            "tasks": [
                {
                    "name": f"Run {tasks_from}",
                    "ansible.builtin.include_role": {
                        "name": "gpubring.core.kubeadm_control_plane",
                        "tasks_from": tasks_from,
                    },
                    "vars": {"kubeadm_control_plane_kubernetes_dir": str(kube), **(extra or {})},
                }
            ],
        }
    ]
    playbook = tmp_path / f"{tasks_from}.yml"
    playbook.write_text(yaml.safe_dump(play))
    return process.run(
        RunSettings(inventory_root=inv.root, hosts_file=inv.hosts_file, command="certs", playbook=playbook)
    )


STATIC_PODS = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "etcd")


def test_the_restart_always_puts_the_manifests_back(tmp_path: Path) -> None:
    """tasks/certs_restart.yml run for real on this host, where no kubelet or crictl runs: the wait for
    the containers to stop fails, and every manifest is back in manifests/ all the same, a leftover of
    an earlier stopped run included. The renewal can never leave a control plane without its pods."""
    kube = tmp_path / "kubernetes"
    (kube / "manifests").mkdir(parents=True)
    aside = kube / "manifests-aside-certs-renew"
    aside.mkdir()
    for pod in STATIC_PODS[:3]:
        (kube / "manifests" / f"{pod}.yaml").write_text(f"# {pod}\n")
    (aside / "etcd.yaml").write_text("# etcd, left aside by a run that was killed\n")
    result = _run_tasks(tmp_path, "certs_restart", kube, {"__kubeadm_control_plane_stop_retries": 1})
    assert result.exit_code == ExitCode.TASK_FAILED
    assert [f.task for f in result.report.failures] == [
        "Wait for the kubelet to stop the control plane's containers"
    ]
    assert sorted(p.name for p in (kube / "manifests").iterdir()) == sorted(f"{p}.yaml" for p in STATIC_PODS)
    assert list(aside.iterdir()) == []
    assert (kube / "manifests" / "etcd.yaml").read_text() == "# etcd, left aside by a run that was killed\n"


def test_putting_the_manifests_back_converges(tmp_path: Path) -> None:
    kube = tmp_path / "kubernetes"
    (kube / "manifests").mkdir(parents=True)
    aside = kube / "manifests-aside-certs-renew"
    aside.mkdir()
    (aside / "kube-scheduler.yaml").write_text("# scheduler\n")
    first = _run_tasks(tmp_path, "certs_manifests_back", kube)
    assert first.exit_code == ExitCode.OK
    assert first.report.totals.changed == 1
    assert (kube / "manifests" / "kube-scheduler.yaml").is_file() and list(aside.iterdir()) == []
    again = _run_tasks(tmp_path, "certs_manifests_back", kube)
    assert again.exit_code == ExitCode.OK and again.report.totals.changed == 0
