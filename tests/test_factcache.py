"""gpubring.factcache: the facts an earlier run cached for a host, as ansible-core 2.19 writes them (a
real ansible-playbook run with gpubring's cache settings), as earlier ansible-core wrote them, and
nothing for what is not a host's cache file."""

from __future__ import annotations

import json
from pathlib import Path

from gpubring.factcache import FACTS_FOLDER, host_facts
from helpers import cache_facts

GPU_FACTS = {"gpu_count": 4, "gpus": [{"index": 0, "device_id": "0x2335", "numa_node": None}]}


def test_a_run_s_cache_reads_as_plain_values(tmp_path: Path) -> None:
    """A set_fact of inventory variables caches tagged values (where each came from): read as the values."""
    cache_facts(tmp_path, {"gpu-1": {"gpubring_gpu_facts": GPU_FACTS}, "gpu-2": {"gpubring_gpu_facts": {}}})
    assert sorted(p.name for p in (tmp_path / FACTS_FOLDER).iterdir()) == ["s1_gpu-1", "s1_gpu-2"]
    assert "__ansible_type" in (tmp_path / FACTS_FOLDER / "s1_gpu-1").read_text()  # tagged, as written
    assert host_facts(tmp_path, "gpu-1") == {"gpubring_gpu_facts": GPU_FACTS}
    assert host_facts(tmp_path, "gpu-2") == {"gpubring_gpu_facts": {}}
    assert host_facts(tmp_path, "gpu-3") is None  # never cached


def test_an_older_ansible_s_cache_is_read(tmp_path: Path) -> None:
    """ansible-core before 2.19 kept the facts themselves, under the host's name."""
    (tmp_path / FACTS_FOLDER).mkdir(parents=True)
    (tmp_path / FACTS_FOLDER / "gpu-1").write_text(json.dumps({"gpubring_gpu_facts": GPU_FACTS}))
    assert host_facts(tmp_path, "gpu-1") == {"gpubring_gpu_facts": GPU_FACTS}


def test_what_is_not_a_host_s_cache_reads_nothing(tmp_path: Path) -> None:
    folder = tmp_path / FACTS_FOLDER
    folder.mkdir(parents=True)
    (tmp_path / ".gpubring" / "outside").write_text(json.dumps({"a": 1}))
    (folder / ".hidden").write_text(json.dumps({"a": 1}))
    (folder / "s1_broken").write_text("{not json")
    (folder / "s1_payload").write_text(json.dumps({"__payload__": "{not json"}))
    (folder / "s1_list").write_text(json.dumps([1, 2]))
    for host in ("../outside", ".hidden", "a/b", "", "broken", "payload", "list"):
        assert host_facts(tmp_path, host) is None, host
