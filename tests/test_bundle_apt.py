"""The bundle's apt part (issue 25 item 1): which packages the phases install per OS release and host
group (gpubring.bundle.packages, read from the roles), and the local repository per release built from
them with this machine's apt (gpubring.bundle.apt)."""

from __future__ import annotations

import functools
import shutil
from pathlib import Path

import yaml

from gpubring import releases
from gpubring.bundle import packages
from gpubring.inventory import load_inventory
from helpers import REPO

SAMPLE = REPO / "inventories" / "prod"
BOOKWORM = next(r for r in packages.RELEASES if r.key == "debian-bookworm")


@functools.cache
def _sample() -> packages.ReleasePackages:
    return packages.inventory_packages(load_inventory(SAMPLE), (BOOKWORM,))[0]


def _installs(found: packages.ReleasePackages, group: str, role: str) -> list[str]:
    return sorted({p for i in found.installs if i.group == group and i.role == role for p in i.packages})


def test_every_package_task_of_the_roles_is_read() -> None:
    """Every ansible.builtin.apt/package task that names packages under roles/*/tasks is met by the walk of
    the phases' plays (installed, or left out by its own condition), or removes packages. A new task in a
    file no play includes, or a module the walk does not read, fails here with its file and task."""
    tasks = packages.package_tasks()
    assert {t.role for t in tasks} >= {"containerd", "kernel", "nvidia_driver", "rdma", "kubernetes_packages"}
    reached = _sample().reached
    missed = [t.where for t in tasks if not t.removes and t.where not in reached]
    assert not missed, "package tasks the bundle's package walk never reads:\n" + "\n".join(missed)
    removals = [t.where for t in tasks if t.removes]
    purge = "Remove the Kubernetes packages (apt, with their configuration files)"
    assert removals == [f"roles/kubeadm_join/tasks/reset_purge_packages_Debian.yml: {purge}"]
    assert not _sample().problems


def test_the_sample_installs_what_its_inventory_chooses() -> None:
    """inventories/prod: the driver from NVIDIA's CUDA repository at the matrix's pin with fabric manager
    (an HGX node has NVSwitches), containerd.io from Docker's, the host-owned toolkit, inbox RDMA, the
    Kubernetes packages at their revision; headers of the release's default kernel, said in a note."""
    inv = load_inventory(SAMPLE)
    found = _sample()
    gpu_host = inv.groups["gpu_nodes"][0]
    pins = releases.host_variables(inv, gpu_host, ("nvidia_driver", "containerd", "nvidia_container_toolkit"))
    driver, containerd = pins["nvidia_driver_version"], pins["containerd_version"]
    toolkit = f"nvidia-container-toolkit={pins['nvidia_container_toolkit_version']}-*"
    assert set(_installs(found, "gpu_nodes", "nvidia_driver")) == {
        "linux-headers-amd64",
        "dkms",
        f"nvidia-kernel-open-dkms={driver}-*",
        f"nvidia-driver-cuda={driver}-*",
        f"nvidia-persistenced={driver}-*",
        f"nvidia-modprobe={driver}-*",
        f"nvidia-driver-pinning-{driver.split('.')[0]}",
        f"nvidia-fabricmanager={driver}-*",
    }
    (headers,) = [i for i in found.installs if "linux-headers-amd64" in i.packages]
    assert "running kernel is unknown offline" in headers.note
    assert toolkit in _installs(found, "gpu_nodes", "nvidia_container_toolkit")
    assert "rdma-core" in _installs(found, "gpu_nodes", "rdma")
    for group in ("control_plane", "gpu_nodes", "cpu_nodes"):
        assert _installs(found, group, "containerd") == [f"containerd.io={containerd}-*"]
        assert any(p.startswith("kubeadm=") for p in _installs(found, group, "kubernetes_packages"))
    assert "python3-kubernetes" in _installs(found, "control_plane", "helm")
    assert not _installs(found, "cpu_nodes", "nvidia_driver")
    assert not _installs(found, "control_plane", "rdma")
    urls = "\n".join(s.text for s in found.sources)
    assert "https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/" in urls
    assert "https://download.docker.com/linux/debian" in urls
    assert {s.role for s in found.sources} == {
        "containerd",
        "nvidia_driver",
        "nvidia_container_toolkit",
        "kubernetes_packages",
    }


def test_the_lab_choices_change_the_packages(tmp_path: Path) -> None:
    """The lab's choices (cli/gpubring/lab/vars.yml): the driver from Debian non-free with the proprietary
    modules and headers of the pinned kernel, the toolkit left to the GPU Operator, containerd from Debian,
    DOCA RDMA; the packages follow, and Docker's and NVIDIA's repositories are no longer written."""
    root = tmp_path / "inv"
    shutil.copytree(SAMPLE, root)
    (root / "group_vars" / "gpu_nodes" / "zz_lab.yml").write_text(
        yaml.safe_dump(
            {
                "nvidia_driver_source": "distribution",
                "nvidia_driver_kernel_modules": "proprietary",
                "nvidia_driver_kernel_version": "6.1.0-41-amd64",
                "nvidia_container_toolkit_owner": "operator",
                "rdma_stack": "doca",
            }
        ),
        encoding="utf-8",
    )
    (root / "group_vars" / "all" / "zz_lab.yml").write_text("containerd_source: distribution\n", "utf-8")
    (found,) = packages.inventory_packages(load_inventory(root), (BOOKWORM,))
    assert set(_installs(found, "gpu_nodes", "nvidia_driver")) == {
        "linux-headers-6.1.0-41-amd64",
        "dkms",
        "nvidia-kernel-dkms",
        "nvidia-smi",
        "libcuda1",
        "nvidia-persistenced",
        "nvidia-modprobe",
    }
    assert not any(i.note for i in found.installs)
    assert not _installs(found, "gpu_nodes", "nvidia_container_toolkit")
    assert _installs(found, "cpu_nodes", "containerd") == ["containerd"]
    assert "doca-ofed" in _installs(found, "gpu_nodes", "rdma")
    assert {s.role for s in found.sources} == {"kubernetes_packages", "rdma"}
