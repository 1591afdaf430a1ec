"""The MPI operator release (roles/mpi_operator) from the manifest of its pinned release, and the refusal
of a multi-node fabric test without it (cli/gpubring/validation/checks/fabric_mpi.py).

The manifest is $GPUBRING_UPSTREAM_DIR/charts/mpi-operator-v<pin>/mpi-operator.yaml (deploy/v2beta1 of
the release, charts/SOURCES.md). The role applies its CRD server-side (tasks/main.yml) and the other
objects through the release engine: those are rendered here with the manifest as the role reads it and
validated with kubernetes-validate at the pinned Kubernetes; the fabric test's MPIJob is validated
against the CRD in the same manifest. Not run here: the download, the server-side apply and the wait
for the Deployment on a real API server.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

import test_chart_render as chart_render
import upstream
from _render import schema_version, without_nulls
from gpubring.inventory import Inventory, load_inventory
from gpubring.model import InventoryError
from gpubring.releases import render_template
from gpubring.validation.checks import fabric_mpi
from helpers import DATA, REPO, refused

PINS = yaml.safe_load((REPO / "versions.yml").read_text(encoding="utf-8"))["gpubring_versions"]
SITE = "group_vars/all/zz-fabric.yml"
OPERATOR = "group_vars/all/mpi_operator.yml"
MakeInventory = Any  # the make_inventory fixture of conftest.py


def manifest() -> list[dict[str, Any]]:
    folder = upstream.upstream_dir() / "charts" / f"mpi-operator-v{PINS['mpi_operator']['version']}"
    path = folder / "mpi-operator.yaml"
    if not path.is_file():
        pytest.skip(f"no {path} (charts/SOURCES.md says where it comes from)")
    docs = yaml.load_all(path.read_text(encoding="utf-8"), Loader=upstream._Loader)
    return [d for d in docs if isinstance(d, dict) and d.get("kind")]


@pytest.fixture(scope="module")
def all_on() -> Inventory:
    return chart_render.plan("all-on")[0]


def test_the_release_applies_the_manifest_but_its_crd_and_waits_for_the_deployment(all_on: Inventory) -> None:
    docs = manifest()
    text = render_template(
        all_on,
        "mpi_operator/templates/releases/mpi-operator/manifests.yml.j2",
        host_vars={"__mpi_operator_upstream": docs},
    )
    rendered = yaml.safe_load(text)
    objects = rendered["manifests"]
    assert rendered["pre_manifests"] == []
    assert [o["kind"] for o in objects] == [
        o["kind"] for o in docs if o["kind"] != "CustomResourceDefinition"
    ]
    version = schema_version(all_on)
    for obj in objects:
        try:
            kubernetes_validate.validate(without_nulls(obj), version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            pytest.fail(f"{obj['kind']}/{obj['metadata']['name']}: {exc.message}")
    # What `plan` says the run waits for is the manifest's Deployment, in the release's namespace.
    release = next(r for r in chart_render.plan("all-on")[1] if r.name == "mpi-operator")
    assert (release.chart, release.namespace) == ("", "mpi-operator")
    (ready,) = release.ready
    (deployment,) = [o for o in objects if o["kind"] == "Deployment"]
    assert (ready["kind"], ready["name"], ready["namespace"], ready["condition"]) == (
        "Deployment",
        deployment["metadata"]["name"],
        deployment["metadata"]["namespace"],
        "Available",
    )
    assert any("Deployment mpi-operator" in w for w in release.waits), release.waits
    # Before the manifest is read (plan, check mode) the release has no object but its namespace's.
    assert [o["kind"] for o in release.objects()] in ([], ["Namespace"])


def test_the_fabric_tests_mpijob_validates_against_the_pinned_crd(all_on: Inventory) -> None:
    (crd_doc,) = [d for d in manifest() if d["kind"] == "CustomResourceDefinition"]
    served = {v["name"]: v for v in crd_doc["spec"]["versions"] if v.get("served", True)}
    crd = upstream._crd("mpi-operator.yaml", crd_doc["spec"], served["v2beta1"])
    assert crd.storage
    inv = load_inventory(DATA / "inventories" / "dra-kueue-rdma")
    names = yaml.safe_load((REPO / "roles" / "fabric_test" / "vars" / "main.yml").read_text(encoding="utf-8"))
    text = render_template(
        inv,
        f"fabric_test/templates/{names['__fabric_test_templates']['multi_node']}",
        host_vars={"__fabric_test_plan": {"nodes": ["h100-1", "h100-2"], "gpus": 8, "max_bytes": "8G"}},
    )
    (mpijob,) = yaml.safe_load(text)
    assert upstream.crd_errors(mpijob, crd) == []
    # The pinned image and its all_reduce_perf (versions.yml nccl_tests), no tag in the role.
    worker = mpijob["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    launcher = mpijob["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]
    assert worker["image"] == launcher["image"] == PINS["nccl_tests"]["image"]
    assert PINS["nccl_tests"]["all_reduce_perf"] in launcher["command"]


# -- the refusal ------------------------------------------------------------------------------------


def _problems(root: Path) -> list[str]:
    """The check's problems: load_inventory runs every cross-field check and raises on any."""
    try:
        inv = load_inventory(root, check_rules=False)
    except InventoryError as exc:
        return [p.expected for p in exc.problems]
    return [p.expected for p in fabric_mpi.fabric_test_has_an_mpi_operator(inv)]


@pytest.mark.parametrize(
    ("text", "refused"),
    [
        ("fabric_test_enabled: true\n", True),
        ("fabric_test_enabled: true\nmpi_operator_enabled: true\n", False),
        ("fabric_test_enabled: true\nfabric_test_site_mpi_operator: true\n", False),
        ("fabric_test_enabled: true\nfabric_test_multi_node: false\n", False),
        ("fabric_test_enabled: true\nfabric_test_nodes: [gpu-1]\n", False),
        ("fabric_test_enabled: false\nfabric_test_multi_node: true\n", False),
    ],
)
def test_a_multi_node_fabric_test_needs_an_mpi_operator(
    make_inventory: MakeInventory, text: str, refused: bool
) -> None:
    # The sample turns the MPI operator on (inventories/prod/group_vars/all/mpi_operator.yml): off here.
    problems = _problems(
        make_inventory({SITE: "---\n" + text, OPERATOR: "---\nmpi_operator_enabled: false\n"})
    )
    assert bool(problems) is refused, problems
    if refused:
        assert problems[0].startswith("expected mpi_operator_enabled: true (or fabric_test_site_mpi_operator")


def test_plan_refuses_it_before_any_host(make_inventory: MakeInventory) -> None:
    root = make_inventory(
        {SITE: "---\nfabric_test_enabled: true\n", OPERATOR: "---\nmpi_operator_enabled: false\n"}
    )
    stderr = refused("plan", root)
    assert f"error: {SITE}: fabric_test_enabled: expected mpi_operator_enabled: true" in stderr
