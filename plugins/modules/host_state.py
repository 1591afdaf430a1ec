#!/usr/bin/python
# Copyright: gpubring maintainers
# Apache-2.0 (see galaxy.yml)
"""gpubring.core.host_state: what a converged host's setup looks like, read in one call, compared with
(or recorded as) the state the host phase's last complete run left."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: host_state
short_description: Tell whether a host is still as the host phase's last complete run left it
description:
  - Reads, in one call, what the host phase's roles manage or depend on, and reduces it to one digest
    per part; C(mode=record) writes the digests, with the controller's C(inputs), to C(record);
    C(mode=check) compares them with it. A host whose inputs and every part are unchanged since a run
    that converged it is left out of the host phase's roles (issue 26, less work per host); a converged
    host then costs two task results instead of about 270.
  - The parts are broad on purpose, so that a change made by hand is found even where no role task would
    name it; a change of anything they cover sends the host through the whole host phase, whose roles
    then decide what to put back.
  - C(files) every file, directory and link under C(paths) (content, mode, owner, link target; missing
    paths too).
  - C(packages) every installed package with its version and its dpkg selection and status (a hold is
    C(hold ok installed)); rpm hosts the package list.
  - C(sysctl) the live value of every key the files under C(/etc/sysctl.d) and C(/etc/sysctl.conf) set.
  - C(kernel) the running kernel, its command line, the swap areas in use, which modules named in
    C(/etc/modules-load.d) or blacklisted in C(/etc/modprobe.d) are loaded, and the NVIDIA driver
    loaded.
  - C(devices) the C(/dev/nvidia*) device nodes and the PCI devices (vendor, device, class) — a GPU or
    NIC added or replaced.
  - C(units) each unit of C(units) (whether it is loaded, active and enabled).
  - A host where a path of C(blockers) exists (a reboot is pending) is never reported unchanged.
version_added: "0.1.0"
author: gpubring maintainers (!UNKNOWN)
options:
  mode:
    description: C(check) compares with the record; C(record) writes it.
    type: str
    choices: [check, record]
    default: check
  inputs:
    description:
      - The controller's digest of everything that decides this host's setup (the project's roles and
        playbooks, the inventory, the operator's extra variables). A record made with other inputs
        never matches.
    type: str
    required: true
  paths:
    description:
      - Files and directories whose content, modes and owners are read (directories whole); a glob
        pattern stands for its matches.
    type: list
    elements: str
    default: []
  units:
    description: systemd units whose load, active and enabled states are read.
    type: list
    elements: str
    default: []
  blockers:
    description: Paths whose existence means the host is not converged (a pending reboot's flag).
    type: list
    elements: str
    default: []
  record:
    description: Where the record lives on the host (written whole, mode 0600).
    type: path
    default: /var/lib/gpubring/host-state.json
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - gpubring.core.check_mode_posix
notes:
  - In check mode C(mode=record) writes nothing and reports what it would change.
  - C(mode=record) writes nothing while a blocker exists (C(recorded) false), so that the next check does not
    find the host unchanged before its reboot.
"""

EXAMPLES = r"""
- name: Compare the host with its last complete run
  gpubring.core.host_state:
    inputs: "{{ gpubring_host_inputs }}"
    paths: [/etc/containerd, /etc/sysctl.d]
    units: [containerd.service]
    blockers: [/run/reboot-required]
  register: __state

- name: Say why a host runs the host phase
  ansible.builtin.debug:
    msg: "{{ __state.converged }} {{ __state.reasons }}"
"""

RETURN = r"""
converged:
  description: Mode C(check) only. True when the record's inputs and every part match and no blocker exists.
  returned: always
  type: bool
  sample: false
reasons:
  description: What differs (C(no record), C(inputs), a part's name, C(blocker <path>)); empty when converged.
  returned: always
  type: list
  elements: str
  sample: [files, packages]
recorded:
  description: Mode C(record) only. False when a blocker kept the record from being written.
  returned: when mode is record
  type: bool
  sample: true
ansible_facts:
  description: Mode C(check) only. C(gpubring_host_state) with C(unchanged) and C(reasons), for the run's report.
  returned: when mode is check
  type: dict
  sample: {gpubring_host_state: {unchanged: false, reasons: [packages]}}
parts:
  description: The digest of each part read now.
  returned: always
  type: dict
  sample: {files: 3f2a..., packages: 9c1e...}
"""

import glob  # noqa: E402
import hashlib  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import stat  # noqa: E402
import tempfile  # noqa: E402

from ansible.module_utils.basic import AnsibleModule  # noqa: E402
from ansible_collections.gpubring.core.plugins.module_utils.sysctl_conf import sysctl_entries, sysctl_path  # noqa: E402

RECORD_VERSION = 1


def _digest(lines):
    hasher = hashlib.sha256()
    for line in lines:
        hasher.update(line.encode("utf-8", "surrogateescape"))
        hasher.update(b"\n")
    return hasher.hexdigest()


def _file_sha(path):
    hasher = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 16), b""):
            hasher.update(block)
    return hasher.hexdigest()


def _entry(path):
    try:
        info = os.lstat(path)
    except OSError:
        return f"{path} absent"
    head = f"{path} {stat.S_IFMT(info.st_mode):o} {stat.S_IMODE(info.st_mode):o} {info.st_uid}:{info.st_gid}"
    if stat.S_ISLNK(info.st_mode):
        return f"{head} -> {os.readlink(path)}"
    if stat.S_ISREG(info.st_mode):
        try:
            return f"{head} {_file_sha(path)}"
        except OSError as err:
            return f"{head} unreadable {err.errno}"
    return head


def _expand(paths):
    """Each path as given, a glob pattern (C(/lib/modules/*/updates)) as its matches, sorted."""
    for path in paths:
        if any(char in path for char in "*?["):
            matches = sorted(glob.glob(path))
            yield path, matches
        else:
            yield path, [path]


def files_part(paths):
    lines = []
    for pattern, matches in _expand(paths):
        if matches != [pattern]:
            lines.append(f"{pattern} matches {len(matches)}")
        for top in matches:
            lines.extend(_tree(top))
    return lines


def _tree(top):
    lines = [_entry(top)]
    if os.path.isdir(top) and not os.path.islink(top):
        for root, dirs, names in os.walk(top):
            dirs.sort()
            for name in sorted(dirs + names):
                lines.append(_entry(os.path.join(root, name)))
    return lines


def packages_part(module):
    dpkg = module.get_bin_path("dpkg-query")
    if dpkg:
        rc, out, err = module.run_command([dpkg, "-W", "-f", "${Package}:${Architecture}\t${Version}\t${Status}\n"])
    else:
        rpm = module.get_bin_path("rpm")
        if not rpm:
            return ["no package manager"]
        rc, out, err = module.run_command([rpm, "-qa", "--qf", "%{NAME}.%{ARCH}\t%{EPOCH}:%{VERSION}-%{RELEASE}\n"])
    if rc != 0:
        module.fail_json(msg=f"could not list the installed packages (exit {rc}): {err.strip()}")
    return sorted(out.splitlines())


def _read(path):
    try:
        with open(path, "rb") as handle:
            return handle.read().decode("utf-8", "replace")
    except OSError:
        return None


def _conf_lines(pattern):
    for path in sorted(glob.glob(pattern)):
        for raw in (_read(path) or "").splitlines():
            line = raw.strip()
            if line and not line.startswith(("#", ";")):
                yield line


def sysctl_part(paths=None):
    """Each name the sysctl files (by default /etc/sysctl.conf and /etc/sysctl.d/*.conf) set, read as
    verify reads its drop-in (module_utils/sysctl_conf), with its live value; a name with a glob
    (applied to every match by systemd-sysctl) is left out."""
    if paths is None:
        paths = ["/etc/sysctl.conf", *sorted(glob.glob("/etc/sysctl.d/*.conf"))]
    keys = set()
    for path in paths:
        keys.update(name for name in sysctl_entries(_read(path) or "") if "*" not in name)
    lines = []
    for key in sorted(keys):
        value = _read(sysctl_path(key))
        lines.append(f"{key} = {' '.join(value.split()) if value is not None else '?'}")
    return lines


def kernel_part():
    named = set()
    for line in _conf_lines("/etc/modules-load.d/*.conf"):
        named.add(line.split()[0].replace("-", "_"))
    for line in _conf_lines("/etc/modprobe.d/*.conf"):
        words = line.split()
        if len(words) >= 2 and words[0] == "blacklist":
            named.add(words[1].replace("-", "_"))
    loaded = {line.split()[0] for line in (_read("/proc/modules") or "").splitlines() if line.strip()}
    swaps = [line.split()[0] for line in (_read("/proc/swaps") or "").splitlines()[1:] if line.strip()]
    return [
        "release " + os.uname()[2],
        "cmdline " + (_read("/proc/cmdline") or "").strip(),
        "swaps " + " ".join(sorted(swaps)),
        "loaded " + " ".join(sorted(named & loaded)),
        "nvidia " + (_read("/proc/driver/nvidia/version") or "none").strip(),
    ]


def devices_part():
    lines = ["dev " + " ".join(sorted(glob.glob("/dev/nvidia*")))]
    for device in sorted(glob.glob("/sys/bus/pci/devices/*")):
        ids = [(_read(os.path.join(device, name)) or "?").strip() for name in ("vendor", "device", "class")]
        lines.append(f"pci {os.path.basename(device)} {' '.join(ids)}")
    return lines


def units_part(module, units):
    if not units:
        return []
    systemctl = module.get_bin_path("systemctl")
    if not systemctl:
        return ["no systemctl"]
    rc, out, err = module.run_command(
        [systemctl, "show", "--property=Id,LoadState,ActiveState,UnitFileState", "--", *sorted(units)]
    )
    if rc != 0:
        module.fail_json(msg=f"could not read the units {', '.join(units)} (exit {rc}): {err.strip()}")
    return out.splitlines()


def read_parts(module, params):
    return {
        "files": _digest(files_part(params["paths"])),
        "packages": _digest(packages_part(module)),
        "sysctl": _digest(sysctl_part()),
        "kernel": _digest(kernel_part()),
        "devices": _digest(devices_part()),
        "units": _digest(units_part(module, params["units"])),
    }


def load_record(path):
    text = _read(path)
    if text is None:
        return None
    try:
        record = json.loads(text)
    except ValueError:
        return None
    if not isinstance(record, dict) or record.get("version") != RECORD_VERSION:
        return None
    return record


def compare(record, inputs, parts, blockers):
    """What differs between the host now and its record; empty when it is unchanged."""
    reasons = [f"blocker {path}" for path in blockers if os.path.lexists(path)]
    if record is None:
        return [*reasons, "no record"]
    if record.get("inputs") != inputs:
        reasons.append("inputs")
    recorded = record.get("parts") if isinstance(record.get("parts"), dict) else {}
    reasons += [name for name in sorted(parts) if recorded.get(name) != parts[name]]
    return reasons


def write_record(path, record):
    """The record written whole: a temporary file beside it, then renamed over it."""
    folder = os.path.dirname(path) or "."
    os.makedirs(folder, mode=0o700, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix=".host-state.", dir=folder)
    try:
        with os.fdopen(handle, "w") as out:
            json.dump(record, out, indent=2, sort_keys=True)
            out.write("\n")
        os.chmod(temporary, 0o600)
        os.replace(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.unlink(temporary)
        raise


def main():
    module = AnsibleModule(
        argument_spec=dict(
            mode=dict(type="str", choices=["check", "record"], default="check"),
            inputs=dict(type="str", required=True),
            paths=dict(type="list", elements="str", default=[]),
            units=dict(type="list", elements="str", default=[]),
            blockers=dict(type="list", elements="str", default=[]),
            record=dict(type="path", default="/var/lib/gpubring/host-state.json"),
        ),
        supports_check_mode=True,
    )
    params = module.params
    if not params["inputs"].strip():
        module.fail_json(msg="inputs is empty: the controller's digest of what decides the host's setup is needed")
    relative = [p for p in params["paths"] if not os.path.isabs(p)]
    if relative:
        module.fail_json(msg=f"paths must be absolute, got {', '.join(relative)}")
    parts = read_parts(module, params)
    record = load_record(params["record"])
    reasons = compare(record, params["inputs"], parts, params["blockers"])
    if params["mode"] == "check":
        # Published as a fact: gpubring's run report says which hosts were left as they were, and why
        # the others went through the roles.
        verdict = {"unchanged": not reasons, "reasons": reasons}
        module.exit_json(
            changed=False, converged=not reasons, reasons=reasons, parts=parts,
            ansible_facts={"gpubring_host_state": verdict},
        )  # fmt: skip
    if any(reason.startswith("blocker ") for reason in reasons):
        module.exit_json(changed=False, converged=False, recorded=False, reasons=reasons, parts=parts)
    wanted = {"version": RECORD_VERSION, "inputs": params["inputs"], "parts": parts}
    changed = record != wanted
    if changed and not module.check_mode:
        try:
            write_record(params["record"], wanted)
        except OSError as err:
            module.fail_json(msg=f"could not write {params['record']}: {err}")
    module.exit_json(changed=changed, converged=False, recorded=True, reasons=reasons, parts=parts)


if __name__ == "__main__":
    main()
