"""The kernel and rdma roles' GRUB drop-ins, rendered by Ansible and sourced by a real shell as
update-grub sources them: every argument reaches GRUB_CMDLINE_LINUX exactly as written."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from helpers import REPO, ansible_playbook

DROPINS = {
    "kernel": ("roles/kernel/templates/etc/default/grub.d/gpubring.cfg.j2", "__kernel_cmdline_all"),
    "rdma": ("roles/rdma/templates/etc/default/grub.d/gpubring-rdma.cfg.j2", "__rdma_cmdline_all"),
}
ARGS = [
    'dyndbg="module nvidia +p"',  # quotes: the kernel's own syntax for a value with spaces
    "iommu=pt",
    "nvidia.NVreg_RegistryDwords=$NotAVariable",  # a dollar sign must not expand
    "odd=`uname`",  # nor a backquote run a command
    "path=C:\\dir\\",  # nor a backslash escape what follows
    "hugepagesz=1G",
]


def _render(tmp_path: Path, role: str, args: list[str]) -> Path:
    template, var = DROPINS[role]
    out = tmp_path / f"{role}.cfg"
    play = [
        {
            "hosts": "localhost",
            "connection": "local",
            "gather_facts": False,
            "vars": {"ansible_python_interpreter": sys.executable},
            "tasks": [
                {
                    "ansible.builtin.template": {
                        "src": str(REPO / template),
                        "dest": str(out),
                        "mode": "0644",
                    },
                    "vars": {var: args},
                }
            ],
        }
    ]
    playbook = tmp_path / "play.yml"
    playbook.write_text(yaml.safe_dump(play))
    done = ansible_playbook("-i", "localhost,", playbook)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return out


@pytest.mark.parametrize("role", sorted(DROPINS))
def test_sourcing_the_dropin_gives_every_argument_as_written(tmp_path: Path, role: str) -> None:
    bash = shutil.which("bash")
    assert bash is not None
    dropin = _render(tmp_path, role, ARGS)
    canary = tmp_path / "ran"
    # As /etc/default/grub then grub.d/*.cfg are sourced by update-grub, with a value already there.
    script = f'GRUB_CMDLINE_LINUX="quiet"; . "$1"; printf %s "$GRUB_CMDLINE_LINUX"; touch {canary}.never'
    done = subprocess.run(
        [bash, "-c", script, "sh", str(dropin)], capture_output=True, text=True, check=False, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == " ".join(["quiet", *ARGS]), json.dumps(done.stdout)
    assert not done.stderr
    assert not canary.exists()
