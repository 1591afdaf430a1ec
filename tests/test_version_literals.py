"""No version is written in a role's defaults or templates: every one is a pin of versions.yml, which a
default reads (`"{{ gpubring_matrix.<pin> }}"`). Issue 23 item 11 (the rdma_doca_version fallback and the
smoke tests' CUDA image tag moved there).

Looked for, outside comments (YAML `#` comments, Jinja `{# #}` comments: they cite upstream tags):
- an x.y.z version (`1.2.3`, `v1.2.3`, `2.13.11-cuda12.6`), not part of a longer dotted number (an IPv4
  address such as 127.0.0.1 is four numbers, not a version);
- an image reference with a tag (`registry/path/name:tag`).

ALLOWED lists what matches and is no version, each with why.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from helpers import REPO

ROLES = REPO / "roles"
VERSION = re.compile(r"(?<![\w.])v?\d+\.\d+\.\d+(?![\w.]*\d)(?:-[\w.]+)?")
IMAGE = re.compile(r"(?<![\w./:-])[a-z0-9][a-z0-9.-]*(?:/[a-z0-9._-]+)+:\w[\w.-]*(?![\w.-]|\{)")
JINJA_COMMENT = re.compile(r"\{#.*?#\}", re.S)
YAML_COMMENT = re.compile(r"(^|\s)#(?!\}).*$", re.M)

# (file under roles/, literal): why it is no version.
ALLOWED: dict[tuple[str, str], str] = {}


def files() -> list[Path]:
    found = sorted(ROLES.glob("*/defaults/*.yml")) + sorted(
        p for p in ROLES.glob("*/templates/**/*") if p.is_file()
    )
    assert found, "no role defaults or templates found"
    return found


def literals(text: str) -> list[str]:
    """Version-like and image-tag literals of a file's text, outside its comments."""
    text = JINJA_COMMENT.sub("", text)
    text = YAML_COMMENT.sub(r"\1", text)
    return [m.group(0) for m in VERSION.finditer(text)] + [m.group(0) for m in IMAGE.finditer(text)]


def test_no_version_literal_in_role_defaults_or_templates() -> None:
    found = {
        (path.relative_to(ROLES).as_posix(), literal)
        for path in files()
        for literal in literals(path.read_text(encoding="utf-8"))
    }
    unexplained = sorted(f"roles/{f}: {lit}" for f, lit in found if (f, lit) not in ALLOWED)
    assert unexplained == [], "pin these in versions.yml and read them from gpubring_matrix"
    stale = sorted(f"roles/{f}: {lit}" for f, lit in ALLOWED if (f, lit) not in found)
    assert stale == [], "ALLOWED names literals that are gone"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("rdma_doca_version: \"{{ gpubring_matrix.doca_ofed.version | default('3.1.0') }}\"\n", {"3.1.0"}),
        (
            "verify_cuda_image: nvcr.io/nvidia/cuda:12.8.1-base-ubuntu24.04\n",
            {"12.8.1-base", "nvcr.io/nvidia/cuda:12.8.1-base-ubuntu24.04"},
        ),
        (
            "image: registry.example.internal/hpc/nccl-tests:latest\n",
            {"registry.example.internal/hpc/nccl-tests:latest"},
        ),
        ("chart: v26.7.0\n", {"v26.7.0"}),
        # A tag built from a pin is no literal; an address and a port are no version.
        ('image: "ghcr.io/kube-vip/kube-vip:v{{ gpubring_matrix.kube_vip.version }}"\n', set()),
        ("  - --endpoints=https://127.0.0.1:2379\n", set()),
        ("# tested with 1.2.3 at v0.8.0\nkey: 1\n", set()),
        ("{# gpu-operator v26.7.0 values.yaml #}\nkey: {{ x }}:{{ y }}\n", set()),
        ("fraction: 0.7\nmtu: 9000\nduration: 10m\n", set()),
    ],
)
def test_what_counts_as_a_version_literal(text: str, expected: set[str]) -> None:
    assert set(literals(text)) == expected
