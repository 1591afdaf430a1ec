"""The operator's run options: the one type `gpubring up` and `gpubring node` build from the command
line and the runner takes (RunSettings.options), and the parsing of their -e arguments. It imports
only yamlfile from gpubring, and that inside the parsing functions: `gpubring --help` reads no YAML."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DEFAULT_FORKS = 10

# One -e argument, parsed (parse_extra_vars): a mapping, or a file ansible reads itself
# (vault-encrypted, or holding !vault / !unsafe values).
ExtraVarsSource = Mapping[str, Any] | Path


@dataclass(frozen=True)
class RunOptions:
    """How to run, as the operator asked: -e, --limit, --tags, --skip-tags, --check, --diff, --forks,
    -v, --accelerate and --json. The same for every run of a command (node replace runs two)."""

    extra_vars: tuple[ExtraVarsSource, ...] = ()
    limit: str | None = None
    tags: str | None = None
    skip_tags: str | None = None
    check: bool = False
    diff: bool = False
    forks: int = DEFAULT_FORKS
    verbosity: int = 0
    accelerate: bool = True
    json_report: Path | None = None
    # --shards: ansible-playbook processes for the host phase (gpubring.run.shards); None: the
    # inventory's gpubring_shards (settings.yml, default auto: the controller's cores).
    shards: int | None = None


class ExtraVarsError(ValueError):
    """An -e argument that cannot be used; the message says which and why."""


def parse_extra_vars(args: Sequence[str], base: Path | None = None) -> tuple[ExtraVarsSource, ...]:
    """The -e arguments, in order: KEY=VALUE (several per argument, shell-quoted), a JSON/YAML
    mapping, or @file (YAML or JSON). A vault-encrypted @file is passed through as a path for
    ansible to decrypt. Raises ExtraVarsError before anything runs."""
    from gpubring import yamlfile

    sources: list[ExtraVarsSource] = []
    for arg in args:
        text = arg.strip()
        if text.startswith("@"):
            sources.append(_extra_vars_file(Path(text[1:]).expanduser(), base))
        elif text.startswith("{"):
            try:
                data = yamlfile.load(text, "-e")
            except yamlfile.YamlError as exc:
                where = exc.problem.key
                raise ExtraVarsError(
                    f"-e {_shorten(text)}: not a valid JSON/YAML mapping ({where}: {exc.problem.expected})"
                ) from None
            if not isinstance(data, dict):
                raise ExtraVarsError(f"-e {_shorten(text)}: expected a mapping")
            if _has_opaque(data):
                raise ExtraVarsError(f"-e {_shorten(text)}: expected no !vault or !unsafe value; use @file")
            sources.append(data)
        else:
            sources.append(_key_values(text))
    return tuple(sources)


def _shorten(text: str, limit: int = 40) -> str:
    # An -e value may be a secret: error messages show only the start of what is not a KEY=VALUE.
    return text if len(text) <= limit else text[:limit] + "…"


def _key_values(text: str) -> dict[str, str]:
    """KEY=VALUE words split by Ansible's own parse_kv, as `ansible-playbook -e` splits them (quotes,
    backslash escapes, a Jinja2 expression with spaces kept whole). A word without `=`, which Ansible
    would turn into a variable named _raw_params, and a key that is no variable name are refused."""
    from ansible.errors import AnsibleError
    from ansible.parsing.splitter import parse_kv

    try:
        parsed = parse_kv(text)
    except AnsibleError:  # its message repeats the whole value, which may be a secret
        raise ExtraVarsError(
            f"-e: cannot split {_shorten(text)!r}: an unbalanced quote or Jinja2 block"
        ) from None
    raw = parsed.pop("_raw_params", None)
    words = [*str(raw or "").split()[:1], *(key for key in parsed if not str(key).isidentifier())]
    if words:
        raise ExtraVarsError(
            f"-e: {_shorten(words[0], 20)!r} is not KEY=VALUE (KEY a variable name), a JSON mapping or @file"
        )
    if not parsed:
        raise ExtraVarsError("-e: empty value; expected KEY=VALUE, a JSON mapping or @file")
    return {str(key): str(value) for key, value in parsed.items()}


def _extra_vars_file(path: Path, base: Path | None) -> ExtraVarsSource:
    from gpubring import yamlfile

    if not path.is_absolute():
        path = (base or Path.cwd()) / path
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ExtraVarsError(f"-e @{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ExtraVarsError(f"-e @{path}: cannot read it ({exc})") from None
    if text.lstrip().startswith("$ANSIBLE_VAULT;"):
        return path.resolve()
    try:
        data = yamlfile.load(text, f"-e @{path}")
    except yamlfile.YamlError as exc:
        where = "" if exc.problem.key == "file" else f" at {exc.problem.key}"
        why = "" if exc.problem.expected.startswith("expected valid YAML") else f": {exc.problem.expected}"
        raise ExtraVarsError(f"-e @{path}: invalid YAML/JSON{where}{why}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ExtraVarsError(f"-e @{path}: expected a mapping of variables, found {type(data).__name__}")
    if _has_opaque(data):
        return path.resolve()  # a !vault or !unsafe value: ansible reads the file itself
    return data


def _has_opaque(data: Any) -> bool:
    from gpubring import yamlfile

    if isinstance(data, yamlfile.Opaque):
        return True
    if isinstance(data, dict):
        return any(_has_opaque(v) for v in data.values())
    return isinstance(data, list) and any(_has_opaque(v) for v in data)


def extra_var_names(sources: Sequence[ExtraVarsSource]) -> list[str]:
    names: list[str] = []
    for source in sources:
        keys = [f"@{source.name} (vault)"] if isinstance(source, Path) else [str(k) for k in source]
        names.extend(k for k in keys if k not in names)
    return names
