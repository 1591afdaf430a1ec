"""The accelerator: Mitogen's linear strategy when it is installed and made for this ansible-core,
the linear strategy (with a notice saying why) otherwise. Nothing here imports ansible or Mitogen."""

from __future__ import annotations

import ast
from collections.abc import Mapping
from contextlib import suppress
from dataclasses import dataclass
from importlib import metadata, util
from pathlib import Path

# Mitogen only checks a minimum ansible-core version (ansible_mitogen/loaders.py,
# ANSIBLE_VERSION_MIN); its newer releases dropped the maximum. gpubring enables it only up to the
# newest ansible-core line it was measured and tested with, unless Mitogen declares a maximum.
MITOGEN_TESTED_MAX = (2, 19)
MITOGEN_FALLBACK_MIN = (2, 10)
MITOGEN_STRATEGY = "mitogen_linear"
# mitogen.unix.make_socket_path(): the multiplexer's socket in the system's temporary folder.
MITOGEN_SOCKET_PREFIX = "mitogen_unix_"


@dataclass(frozen=True)
class Accelerator:
    strategy: str
    env: Mapping[str, str]
    notice: str = ""


def _version_tuple(text: str) -> tuple[int, ...]:
    parts: list[int] = []
    for piece in text.split(".")[:3]:
        digits = "".join(ch for ch in piece if ch.isdigit()) or "0"
        parts.append(int(digits))
        if not piece.isdigit():
            break
    return tuple(parts)


def mitogen_declared_range(loaders: Path) -> tuple[tuple[int, ...], tuple[int, ...] | None]:
    """ANSIBLE_VERSION_MIN (and MAX, when Mitogen declares one) read from ansible_mitogen/loaders.py
    without importing it (importing it imports ansible)."""
    found: dict[str, tuple[int, ...]] = {}
    try:
        tree = ast.parse(loaders.read_text(encoding="utf-8"))
    except (OSError, SyntaxError):
        return MITOGEN_FALLBACK_MIN, None
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            name = node.targets[0].id
            if name in ("ANSIBLE_VERSION_MIN", "ANSIBLE_VERSION_MAX"):
                with suppress(ValueError, TypeError):
                    value = ast.literal_eval(node.value)
                    found[name] = tuple(int(v) for v in value)
    return found.get("ANSIBLE_VERSION_MIN", MITOGEN_FALLBACK_MIN), found.get("ANSIBLE_VERSION_MAX")


def accelerator(requested: bool, ansible_core: tuple[int, ...] | None = None) -> Accelerator:
    """Mitogen's linear strategy when asked for, installed, and made for this ansible-core
    (`ansible_core` defaults to the installed version, read without importing ansible)."""
    linear = Accelerator(strategy="linear", env={})
    if not requested:
        return linear
    spec = util.find_spec("ansible_mitogen")
    if spec is None or spec.origin is None or util.find_spec("mitogen") is None:
        return Accelerator(
            "linear",
            {},
            "Mitogen is not installed (pip install 'gpubring[accel]'): using the linear strategy.",
        )
    package = Path(spec.origin).parent
    strategy_dir = package / "plugins" / "strategy"
    try:
        core = ansible_core or _version_tuple(metadata.version("ansible-core"))
    except metadata.PackageNotFoundError:
        return Accelerator(
            "linear", {}, "ansible-core is not installed as a package: using the linear strategy."
        )
    low, high = mitogen_declared_range(package / "loaders.py")
    high = high or MITOGEN_TESTED_MAX
    shown = ".".join(map(str, core))
    if (
        not (tuple(low) <= core[:2] <= tuple(high)[:2])
        or not (strategy_dir / f"{MITOGEN_STRATEGY}.py").is_file()
    ):
        rng = f"{'.'.join(map(str, low))} to {'.'.join(map(str, high))}"
        return Accelerator(
            "linear", {}, f"Mitogen is not enabled for ansible-core {shown} (it is for {rng}): using linear."
        )
    return Accelerator(
        strategy=MITOGEN_STRATEGY,
        env={"ANSIBLE_STRATEGY_PLUGINS": str(strategy_dir), "ANSIBLE_STRATEGY": MITOGEN_STRATEGY},
    )
