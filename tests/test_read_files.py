"""gpubring.core.read_files (issue 26 item 1): the module that reads several small files, or looks for
them, in one call where the roles ran a stat or slurp task per file. Its functions called directly on real
files; tests/test_task_counts.py runs it through ansible-playbook (verify's sysctl checks)."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

from helpers import collection_module


def _module() -> ModuleType:
    return collection_module("modules.read_files")


def test_each_file_read_missing_or_unreadable(tmp_path: Path) -> None:
    read_files = _module()
    text = tmp_path / "flag.pkgs"
    text.write_text("gpubring-kernel-cmdline\n")
    binary = tmp_path / "tool"
    binary.write_bytes(b"\x7fELF\xff\x00")
    folder = tmp_path / "folder"
    folder.mkdir()
    missing, under_a_file = str(tmp_path / "none"), str(text / "below")

    files = read_files.read_all(
        [str(text), missing, under_a_file, str(folder), str(binary)], [str(binary), missing], 1 << 20
    )
    assert files[str(text)] == {
        "exists": True,
        "content": "gpubring-kernel-cmdline\n",
        "error": "",
        "truncated": False,
    }
    assert files[missing] == {"exists": False, "content": None, "error": "", "truncated": False}
    assert files[under_a_file] == {"exists": False, "content": None, "error": "", "truncated": False}
    assert files[str(folder)]["exists"] and files[str(folder)]["content"] is None
    assert files[str(folder)]["error"] == "Is a directory"
    assert files[str(binary)]["content"] == "\x7fELF\ufffd\x00"  # read: the path is in both lists
    only_looked_for = read_files.read_all([], [str(binary), missing], 1 << 20)
    assert only_looked_for == {
        str(binary): {"exists": True, "content": None, "error": "", "truncated": False},
        missing: {"exists": False, "content": None, "error": "", "truncated": False},
    }
    # A file over max_bytes: its first max_bytes and truncated (no flag before: a cut file read as whole).
    cut = read_files.read_all([str(text)], [], 8)[str(text)]
    assert cut["content"] == "gpubring" and cut["truncated"] is True
    exact = read_files.read_all([str(text)], [], len(text.read_bytes()))[str(text)]
    assert exact["content"] == "gpubring-kernel-cmdline\n" and exact["truncated"] is False
    # A /proc/sys value, as verify's sysctl check reads it.
    assert read_files.read("/proc/sys/kernel/ostype", 1 << 20) == {
        "exists": True,
        "content": "Linux\n",
        "error": "",
        "truncated": False,
    }


def test_a_sysctl_file_is_read_with_the_live_value_of_each_name(tmp_path: Path) -> None:
    """sysctl_files: the entries of a sysctl.d file (sysctl.d(5): comments, a leading "-", the last line
    for a name winning, slashed and dotted names) and each one's live value, in the same call."""
    read_files = _module()
    assert read_files.sysctl_path("net.ipv4.ip_forward") == "/proc/sys/net/ipv4/ip_forward"
    # Dotted: a slash stands for a dot (a VLAN interface); slashed: the dots are literal.
    vlan = "/proc/sys/net/ipv4/conf/eth0.100/rp_filter"
    assert read_files.sysctl_path("net.ipv4.conf.eth0/100.rp_filter") == vlan
    assert read_files.sysctl_path("net/ipv4/conf/eth0.100/rp_filter") == vlan
    assert read_files.sysctl_path("vm") == "/proc/sys/vm"
    assert read_files.sysctl_entries(
        "# comment\n; also a comment\n\n  -kernel.pid_max =  4194304 \nno equals sign\n"
        "net.ipv4.tcp_rmem = 4096\t87380   6291456\nkernel.pid_max = 1\nkernel.x =\n = 3\n"
    ) == {"kernel.pid_max": "1", "net.ipv4.tcp_rmem": "4096 87380 6291456", "kernel.x": ""}

    ostype = Path("/proc/sys/kernel/ostype").read_text().strip()
    dropin = tmp_path / "90-gpubring.conf"
    dropin.write_text(f"kernel.ostype = {ostype}\nkernel.osrelease = not-this\n-kernel.gpubring_none = 1\n")
    read = read_files.read_sysctls(str(dropin), 1 << 20)
    assert (read["exists"], read["error"], read["truncated"]) == (True, "", False)
    entries = read["entries"]
    assert entries["kernel.ostype"] == {
        "value": ostype, "path": "/proc/sys/kernel/ostype", "live": ostype, "error": "", "matches": True,
    }  # fmt: skip
    assert entries["kernel.osrelease"]["live"] == Path("/proc/sys/kernel/osrelease").read_text().strip()
    assert entries["kernel.osrelease"]["matches"] is False
    assert entries["kernel.gpubring_none"] == {
        "value": "1", "path": "/proc/sys/kernel/gpubring_none", "live": None, "error": "", "matches": False,
    }  # fmt: skip
    # A drop-in that is not there: no entries, and said.
    gone = read_files.read_sysctls(str(tmp_path / "none.conf"), 1 << 20)
    assert gone == {"exists": False, "error": "", "truncated": False, "entries": {}}


def test_host_state_reads_sysctl_files_as_read_files_does(tmp_path: Path) -> None:
    """host_state's sysctl part (the unchanged-host check) names and reads each sysctl as verify's
    read_files does: one reading (module_utils/sysctl_conf), so a slashed name, or a dotted one with a
    slash, is read at its own /proc/sys path, not at the dots made slashes."""
    host_state = collection_module("modules.host_state")
    sysctl_conf = collection_module("module_utils.sysctl_conf")
    assert host_state.sysctl_path is sysctl_conf.sysctl_path is _module().sysctl_path
    assert host_state.sysctl_entries is sysctl_conf.sysctl_entries
    ostype = Path("/proc/sys/kernel/ostype").read_text().strip()
    first, second = tmp_path / "10-a.conf", tmp_path / "20-b.conf"
    first.write_text("kernel/ostype = x\nno equals sign\nnet.ipv4.conf.*.rp_filter = 1\n")
    second.write_text("-kernel.gpubring_none = 1\n; kernel.osrelease = 2\n")
    assert host_state.sysctl_part([str(first), str(second), str(tmp_path / "none.conf")]) == [
        "kernel.gpubring_none = ?",
        f"kernel/ostype = {ostype}",
    ]
