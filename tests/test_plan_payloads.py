"""`gpubring plan` renders inventory values with Ansible's sandboxed templating and runs no lookup.

Each payload goes into an inventory value that a platform release renders (gpu_operator_values, merged
into the GPU Operator's chart values). Whatever it tries (attribute chains to os, `__globals__`,
`__class__.__mro__`, Jinja's cycler/joiner/namespace globals, lookup/query/q of `pipe`), nothing runs: the
marker file is never created, plan exits 0 or 2 with a message and no traceback, and the value is not
shown rendered (a lookup is shown as rendered at run time; a sandbox violation is an error naming the
release template).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpubring.app import app

MakeInventory = Callable[..., Path]  # the make_inventory fixture of conftest.py

# {mark} is the file a payload would create if it ran.
PAYLOADS = {
    "str-mro-subclasses": "{{ ''.__class__.__mro__[1].__subclasses__() }}",
    "mro-globals-os": (
        "{{ ''.__class__.__mro__[1].__subclasses__()[0].__init__.__globals__['os'].system('touch {mark}') }}"
    ),
    "cycler-globals-os": "{{ cycler.__init__.__globals__.os.system('touch {mark}') }}",
    "joiner-globals-os": "{{ joiner.__init__.__globals__.os.system('touch {mark}') }}",
    "namespace-globals": "{{ namespace.__init__.__globals__.os.system('touch {mark}') }}",
    "lipsum-globals-os": "{{ lipsum.__globals__['os'].system('touch {mark}') }}",
    "range-self": "{{ range.__self__.__import__('os').system('touch {mark}') }}",
    "lookup-globals": "{{ lookup.__globals__['os'].system('touch {mark}') }}",
    "statement-loop": "{% for c in [].__class__.__base__.__subclasses__() %}{{ c }}{% endfor %}",
    "lookup-pipe": "{{ lookup('pipe', 'touch {mark}') }}",
    "lookup-fqcn-pipe": "{{ lookup('ansible.builtin.pipe', 'touch {mark}') }}",
    "query-pipe": "{{ query('pipe', 'touch {mark}') }}",
    "q-pipe": "{{ q('pipe', 'touch {mark}') }}",
    "lookup-file": "{{ lookup('file', '/etc/hostname') }}",
}
LOOKUPS = {"lookup-pipe", "lookup-fqcn-pipe", "query-pipe", "q-pipe", "lookup-file"}


@pytest.mark.parametrize("name", sorted(PAYLOADS))
def test_plan_runs_no_payload(name: str, make_inventory: MakeInventory, tmp_path: Path) -> None:
    mark = tmp_path / "ran"
    payload = PAYLOADS[name].replace("{mark}", str(mark))
    inventory = make_inventory(
        {
            "group_vars/all/payload.yml": f"---\ngpu_operator_values:\n  probe: {payload!r}\n".replace(
                "\\\\", "\\"
            )
        }
    )
    result = CliRunner().invoke(app, ["plan", str(inventory)])
    out = result.output
    assert not mark.exists(), f"{name}: the payload ran"
    assert "Traceback" not in out, out
    assert result.exception is None or isinstance(result.exception, SystemExit), out
    assert result.exit_code in (0, 2), out
    assert "probe:" not in out or "rendered at run time" in out, out  # the value is never shown rendered
    if name in LOOKUPS:
        assert result.exit_code == 0, out
        assert "gpu-operator" in out and "rendered at run time" in out, out
        assert "lookup" in out
    else:
        assert result.exit_code == 2, out
        assert "roles/gpu_operator/templates/releases/gpu-operator/release.yml.j2" in out, out
        assert out.startswith("error: ") and len(out.strip().splitlines()) <= 3, out  # one clear message


def test_plan_json_marks_a_lookup_as_rendered_at_run_time(
    make_inventory: MakeInventory, tmp_path: Path
) -> None:
    import json

    mark = tmp_path / "ran"
    payload = f"{{{{ lookup('pipe', 'touch {mark}') }}}}"
    inventory = make_inventory({"group_vars/all/payload.yml": f"---\ngpu_operator_namespace: {payload!r}\n"})
    result = CliRunner().invoke(app, ["plan", str(inventory), "--json", "-"])
    assert result.exit_code == 0, result.output
    assert not mark.exists()
    # stdout only: the sample's time-slicing warning goes to stderr.
    (release,) = [r for r in json.loads(result.stdout)["releases"] if r["name"] == "gpu-operator"]
    assert "rendered at run time" in release["deferred"] and "pipe" in release["deferred"]
