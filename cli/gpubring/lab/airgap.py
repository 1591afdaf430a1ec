"""An air-gapped lab (`gpubring lab up --airgap BUNDLE_DIR`, issue 25 item 3).

The lab's network is `--internal` (Docker gives it no route out), its nodes publish no port: the machine
reaches each node's sshd on the node's own address, port 22. A mirror container on that network (the
test-host image, the bundle mounted read-only, gpubring's bundle server, gpubring.bundle.serve, mounted
beside it) serves the bundle at http://<prefix>-mirror. Each node's apt sources are replaced by the
bundle's flat repository of its release (`deb [trusted=yes] http://<prefix>-mirror/apt/debian-bookworm
./`): the image's Debian sources are removed, since nothing outside answers (and a name lookup of an
outside host waits for its timeout). The inventory gets the chart and binary mirror variables
(group_vars/all/airgap.yml). The kernel the GPU nodes get is the one the bundle carries headers for.
"""

from __future__ import annotations

import json
import re
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

from gpubring.lab.docker import (
    LABEL_AIRGAP,
    LABEL_INVENTORY,
    docker,
    run_command,
)
from gpubring.lab.shape import LabError, LabSpec, image_of

__all__ = [
    "LABEL_MIRROR",
    "MIRROR_PORT",
    "RELEASES",
    "bundle_kernel",
    "bundle_problems",
    "ensure_mirror",
    "mirror_name",
    "mirror_state",
    "mirror_url",
    "mirror_vars",
    "point_node_at_mirror",
    "remove_mirror",
]

# The mirror container of a lab (its value: the lab's prefix). Not LABEL_PREFIX: it is no node.
LABEL_MIRROR = "io.gpubring.lab.mirror"
MIRROR_PORT = 80
# The bundle's apt folder of each lab distro (DIR/apt/<distro>-<codename>/, gpubring bundle's layout).
RELEASES = {"debian12": "debian-bookworm", "debian13": "debian-trixie"}
SERVE_IN_MIRROR = "/opt/gpubring/serve.py"
BUNDLE_IN_MIRROR = "/srv/bundle"
SOURCE_FILE = "/etc/apt/sources.list.d/gpubring-bundle.list"


def mirror_name(prefix: str) -> str:
    return f"{prefix}-mirror"


def mirror_url(prefix: str) -> str:
    """The bundle as the nodes reach it: the mirror's name, which Docker's DNS answers on the network."""
    return f"http://{mirror_name(prefix)}"


def mirror_vars(prefix: str, bundle: Path) -> dict[str, str]:
    """The mirror variables of an air-gapped lab's inventory (the parts the bundle has)."""
    url = mirror_url(prefix)
    out = {}
    if (bundle / "charts").is_dir():
        out["gpubring_chart_mirror"] = f"{url}/charts"
    if (bundle / "files").is_dir():
        out["gpubring_binary_mirror"] = f"{url}/files"
    return out


def bundle_problems(spec: LabSpec) -> list[str]:
    """Why the --airgap bundle cannot serve the lab's nodes (empty when it can)."""
    bundle = spec.airgap
    if bundle is None:
        return []
    if not bundle.is_dir():
        return [f"--airgap {bundle}: expected a bundle folder (`gpubring bundle INVENTORY DIR`), found none"]
    problems = []
    for distro in spec.distros:
        release = RELEASES.get(distro)
        repo = bundle / "apt" / str(release)
        if release is None or not (repo / "Packages").is_file():
            problems.append(
                f"--airgap {bundle}: no apt repository for {distro} (expected {repo}/Packages): build the "
                f"bundle for an inventory with a {distro} host"
            )
    return problems


def _packages(bundle: Path, distro: str) -> str:
    path = bundle / "apt" / RELEASES.get(distro, distro) / "Packages"
    return path.read_text(encoding="utf-8", errors="replace") if path.is_file() else ""


def bundle_kernel(bundle: Path, distro: str) -> str | None:
    """The kernel ABI whose headers the bundle carries for a distro (what linux-headers-amd64 depends
    on, as `apt-cache depends` reads it online), or None."""
    for stanza in _packages(bundle, distro).split("\n\n"):
        if re.search(r"^Package: linux-headers-amd64$", stanza, re.MULTILINE):
            found = re.search(r"^Depends:.*?\blinux-headers-(\d\S*-amd64)\b", stanza, re.MULTILINE)
            if found:
                return found.group(1)
    return None


def _serve_py() -> Path:
    from gpubring.bundle import serve

    return Path(serve.__file__).resolve()


_MIRROR_COMMAND = (
    "import sys; from pathlib import Path; sys.path.insert(0, '/opt/gpubring'); import serve; "
    f"serve.serve(Path('{BUNDLE_IN_MIRROR}'), '0.0.0.0', {MIRROR_PORT}, log=None)"
)


def ensure_mirror(spec: LabSpec, out: Callable[[str], None], timeout: float = 60) -> str:
    """The lab's mirror container serving the bundle (made again when it serves another folder or does
    not run); returns its address on the lab's network once it answers."""
    assert spec.airgap is not None
    bundle = spec.airgap.resolve()
    name = mirror_name(spec.prefix)
    proc = run_command(["docker", "inspect", "--format", "{{json .}}", name], check=False)
    if proc.returncode == 0:
        data = json.loads(proc.stdout)
        labels = (data.get("Config") or {}).get("Labels") or {}
        running = (data.get("State") or {}).get("Status") == "running"
        if labels.get(LABEL_AIRGAP) != str(bundle) or not running:
            docker("rm", "-f", name)
        else:
            out(f"reuse {name} (serves {bundle})")
    if run_command(["docker", "inspect", name], check=False).returncode != 0:
        out(f"create {name} serving {bundle} read-only at {mirror_url(spec.prefix)}")
        docker(
            "run", "-d",
            "--name", name,
            "--hostname", name,
            "--network", spec.network,
            "--label", f"{LABEL_MIRROR}={spec.prefix}",
            "--label", f"{LABEL_AIRGAP}={bundle}",
            "--label", f"{LABEL_INVENTORY}={spec.inventory_dir.resolve()}",
            "-v", f"{bundle}:{BUNDLE_IN_MIRROR}:ro",
            "-v", f"{_serve_py()}:{SERVE_IN_MIRROR}:ro",
            "--entrypoint", "python3",
            image_of(spec.distro),
            "-c", _MIRROR_COMMAND,
        )  # fmt: skip
    address = docker(
        "inspect", "--format", "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}", name
    ).strip()
    deadline = time.monotonic() + timeout
    url = f"http://{address}:{MIRROR_PORT}/apt/"
    while True:
        try:
            with urllib.request.urlopen(url, timeout=5):
                return address
        except (urllib.error.URLError, OSError) as err:
            if time.monotonic() >= deadline:
                logs = run_command(["docker", "logs", "--tail", "10", name], check=False)
                raise LabError(
                    f"{name}: the bundle's mirror did not answer at {url} within {timeout:.0f}s ({err}): "
                    + (logs.stdout + logs.stderr).strip()[-500:]
                ) from None
            time.sleep(0.5)


def mirror_state(prefix: str) -> str:
    """`<prefix>-mirror (running)`, or `no mirror container` when there is none."""
    proc = run_command(
        ["docker", "inspect", "--format", "{{.State.Status}}", mirror_name(prefix)], check=False
    )
    state = proc.stdout.strip()
    return f"{mirror_name(prefix)} ({state})" if proc.returncode == 0 and state else "no mirror container"


def remove_mirror(prefix: str, out: Callable[[str], None]) -> None:
    ids = docker("ps", "-aq", "--filter", f"label={LABEL_MIRROR}={prefix}").split()
    if ids:
        out(f"remove {mirror_name(prefix)}")
        docker("rm", "-f", *ids)


# Run in a node before anything installs: the bundle's repository of its release as its only apt source.
_POINT_AT_MIRROR = r"""
set -eu
. /etc/os-release
line="deb [trusted=yes] $1/apt/$ID-$VERSION_CODENAME ./"
rm -f /etc/apt/sources.list /etc/apt/sources.list.d/debian.sources
[ "$(cat "$2" 2>/dev/null)" = "$line" ] || printf '%s\n' "$line" > "$2"
"""


def point_node_at_mirror(name: str, prefix: str) -> None:
    run_command(
        ["docker", "exec", name, "sh", "-c", _POINT_AT_MIRROR, "mirror", mirror_url(prefix), SOURCE_FILE]
    )
