"""The table of known inventory keys and the checks of their values.

Known keys come from three places, read at run time so that roles gain inputs without a change here:

- settings.yml: the cluster-wide `gpubring_*` settings;
- roles/<role>/meta/argument_specs.yml (entry point `main`) of every role, plus the keys of the
  role's defaults/main.yml (an input with a default is an input even before the spec declares it);
- the `when` keys of the rules in versions.yml (typed from the value the rule compares with), so a
  rule can name a role input before that role's spec declares it.

What a value must look like beyond its type comes from the same places: `format:`, `min:` and
`max:` on a setting in settings.yml, and roles/<role>/meta/formats.yml for a role's inputs (the
formats are gpubring.formats'; ansible-lint's schema admits no key of ours in argument_specs.yml).
formats.yml can also give an input the shape of an option of another entry point of the role's
argument spec (`items_like: release.helm_release`: each item of the list is checked as Ansible
checks that option when the entry point runs; `fields_like:` the same for a mapping of partial
values, none required), and refuse two items of a list that agree on some keys (`unique:`). The
argument spec's `mutually_exclusive`, `required_one_of` and `required_together` are enforced.

A key named `gpubring_*`, or `<role>_*` for a role that exists, that no source declares is a typo:
it is reported with a did-you-mean. So is a key close to a known input (a typo inside the prefix,
`nvidia_drvier_branch`). Every other key (ansible_*, the user's own) passes; `gpubring plan` lists
the user's own keys once, so a typo cannot hide there. An `-e` key that nothing declares gets a
warning (`SpecTable.undeclared_message`), not an error: operators pass their own variables.

Cross-field checks live in the package gpubring.validators.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpubring import formats, paths, yamlfile
from gpubring.yamlfile import Opaque, Problem, did_you_mean

__all__ = ["Opaque", "Problem", "Spec", "SpecTable", "did_you_mean", "load_specs"]

if TYPE_CHECKING:
    pass

TYPES = ("str", "int", "float", "bool", "list", "dict", "path", "raw")
# Ansible's other argument-spec types are accepted and not checked further.
_LOOSE_TYPES = {"jsonarg": "raw", "json": "raw", "bytes": "raw", "bits": "raw", "sid": "raw"}
_BOOL_STRINGS = {"yes", "no", "true", "false", "on", "off", "y", "n", "t", "f", "1", "0"}
# Variables every play has without a declaration in settings.yml or a role: the collection's vars
# plugin (plugins/vars/defaults.py) sets these two; Ansible's own (magic) variables besides ansible_*.
PLUGIN_VARIABLES = frozenset({"gpubring_matrix", "gpubring_pins"})
ANSIBLE_MAGIC = frozenset(
    {
        "group_names",
        "groups",
        "hostvars",
        "inventory_dir",
        "inventory_file",
        "inventory_hostname",
        "inventory_hostname_short",
        "omit",
        "play_hosts",
        "playbook_dir",
        "role_name",
        "role_names",
        "role_path",
    }
)
# The keys of a formats.yml rule: of an item's key (`input[].key`), and of an input.
_ITEM_RULE_KEYS = ("format", "min", "max", "max_length")
_RULE_KEYS = (*_ITEM_RULE_KEYS, "items_like", "fields_like", "unique")


@dataclass(frozen=True)
class Spec:
    """One declared key (or sub-option) with what its value must look like."""

    name: str
    type: str = "str"
    elements: str | None = None
    choices: tuple[Any, ...] | None = None
    default: Any = None
    required: bool = False
    options: Mapping[str, Spec] | None = None
    source: str = ""
    description: str = ""
    format: str | None = None  # a name of gpubring.formats.FORMATS
    minimum: float | None = None
    maximum: float | None = None
    # For a list of mappings: the format rules of the items' keys (formats.yml `input[].key`).
    item_rules: Mapping[str, Spec] | None = None
    max_length: int | None = None  # of a string (formats.yml `max_length:`)
    # For a list of mappings: keys whose values no two items may share (formats.yml `unique:`).
    unique: tuple[str, ...] = ()
    # The argument spec's constraints between the keys of a mapping (sub-options).
    mutually_exclusive: tuple[tuple[str, ...], ...] = ()
    required_one_of: tuple[tuple[str, ...], ...] = ()
    required_together: tuple[tuple[str, ...], ...] = ()


@dataclass(frozen=True)
class SpecTable:
    keys: Mapping[str, Spec]
    roles: tuple[str, ...]
    role_defaults: Mapping[str, Any] = field(default_factory=dict)
    problems: tuple[Problem, ...] = ()

    def defaults(self) -> dict[str, Any]:
        """Every default: role defaults/main.yml, then declared defaults (settings.yml, specs)."""
        out = dict(self.role_defaults)
        out.update({k: s.default for k, s in self.keys.items() if s.default is not None})
        return out

    def namespace(self, key: str) -> str | None:
        """`gpubring` or the role whose prefix the key carries; None for a free key."""
        if key.startswith("gpubring_"):
            return "gpubring"
        best = None
        for role in self.roles:
            if key.startswith(role + "_") and (best is None or len(role) > len(best)):
                best = role
        return best

    def unknown_message(self, key: str) -> str | None:
        """None when the key is known or free; otherwise the 'expected' text of the problem."""
        if key in self.keys:
            return None
        ns = self.namespace(key)
        if ns is None:
            return self.lookalike_message(key)
        if ns == "gpubring":
            where = "settings.yml"
            pool = [k for k in self.keys if k.startswith("gpubring_")]
        else:
            where = f"roles/{ns}/meta/argument_specs.yml"
            pool = [k for k in self.keys if self.namespace(k) == ns]
        return f"unknown key, expected one declared in {where}{did_you_mean(key, pool)}"

    def undeclared_message(self, key: str) -> str | None:
        """For an operator's -e key: None when something declares it (settings.yml, a role's spec
        or defaults, a version rule, the vars plugin) or it is Ansible's own (ansible_*, magic
        variables); else the text of a warning, with a did-you-mean when a declared key is close."""
        if key in self.keys or key in PLUGIN_VARIABLES or key in ANSIBLE_MAGIC or key.startswith("ansible_"):
            return None
        ns = self.namespace(key)
        pool = [k for k in self.keys if self.namespace(k) == ns] if ns is not None else []
        hint = did_you_mean(key, pool) or did_you_mean(key, self.keys)
        return f"no role or setting declares it{hint}"

    def lookalike_message(self, key: str) -> str | None:
        """For a key outside every known prefix: the problem when it looks like a known input (its
        prefix one or two edits from a role's or gpubring_, or the whole key close to an input)."""
        if key.startswith("ansible_") or key.startswith("_"):
            return None
        for prefix in ("gpubring", *self.roles):
            for cut in range(max(1, len(prefix) - 1), len(prefix) + 2):
                if key[cut : cut + 1] != "_" or _edits(key[:cut], prefix) > (1 if len(prefix) < 6 else 2):
                    continue
                fixed = prefix + key[cut:]
                pool = [k for k in self.keys if self.namespace(k) == prefix or k.startswith(prefix + "_")]
                hint = did_you_mean(fixed, pool) or f" (is {key[:cut]}_ a typo of {prefix}_?)"
                where = "settings.yml" if prefix == "gpubring" else f"roles/{prefix}/meta/argument_specs.yml"
                return f"unknown key that looks like an input declared in {where}{hint}"
        return None


def _edits(a: str, b: str) -> int:
    """Edit distance with adjacent transpositions counting one (optimal string alignment)."""
    prev2: list[int] = []
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        row = [i] + [0] * len(b)
        for j, cb in enumerate(b, 1):
            row[j] = min(prev[j] + 1, row[j - 1] + 1, prev[j - 1] + (ca != cb))
            if i > 1 and j > 1 and ca == b[j - 2] and a[i - 2] == cb:
                row[j] = min(row[j], prev2[j - 2] + 1)
        prev2, prev = prev, row
    return prev[-1]


def _number(raw: Mapping[Any, Any], key: str) -> float | None:
    value = raw.get(key)
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _groups(raw: Mapping[Any, Any], key: str) -> tuple[tuple[str, ...], ...]:
    """An argument spec's list of key lists (mutually_exclusive, required_one_of, ...)."""
    value = raw.get(key)
    if not isinstance(value, list):
        return ()
    return tuple(tuple(str(k) for k in group) for group in value if isinstance(group, list))


def _parse_spec(name: str, raw: Any, source: str) -> Spec:
    if not isinstance(raw, Mapping):
        raw = {}
    typ = str(raw.get("type", "str"))
    typ = _LOOSE_TYPES.get(typ, typ if typ in TYPES else "raw")
    elements = raw.get("elements")
    if elements is not None:
        elements = _LOOSE_TYPES.get(str(elements), str(elements) if elements in TYPES else "raw")
    choices = raw.get("choices")
    sub = raw.get("options")
    options = None
    if isinstance(sub, Mapping) and sub:
        options = _parse_options(sub, source)
    description = raw.get("description", "")
    if isinstance(description, list):
        description = " ".join(str(d) for d in description)
    return Spec(
        name=name,
        type=typ,
        elements=elements,
        choices=tuple(choices) if isinstance(choices, list) else None,
        default=raw.get("default"),
        required=bool(raw.get("required", False)),
        options=options,
        source=source,
        description=str(description),
        format=str(raw["format"]) if raw.get("format") else None,
        minimum=_number(raw, "min"),
        maximum=_number(raw, "max"),
        max_length=int(length) if (length := _number(raw, "max_length")) is not None else None,
        unique=tuple(str(k) for k in raw["unique"]) if isinstance(raw.get("unique"), list) else (),
        mutually_exclusive=_groups(raw, "mutually_exclusive"),
        required_one_of=_groups(raw, "required_one_of"),
        required_together=_groups(raw, "required_together"),
    )


def _rule_problems(spec: Spec, where: str, key: str) -> list[Problem]:
    if spec.format is not None and spec.format not in formats.FORMATS:
        known = ", ".join(sorted(formats.FORMATS))
        return [
            Problem(
                where, f"{key}.format", f"expected one of {known}{did_you_mean(spec.format, formats.FORMATS)}"
            )
        ]
    return []


def _apply_formats(
    keys: dict[str, Spec], role: str, data: Any, problems: list[Problem], entry_points: Any = None
) -> None:
    """Merge a role's meta/formats.yml into its specs: `input: {format, min, max, max_length}`,
    `input[].key: {...}` for the items of a list, and on an input `items_like`/`fields_like`
    (`<entry point>.<option>` of the role's argument spec, whose sub-options the input's items or
    fields must fit) and `unique` (keys no two items of the list may share)."""
    rel = f"roles/{role}/meta/formats.yml"
    if not isinstance(data, Mapping):
        problems.append(
            Problem(rel, "(top level)", "expected a mapping of role inputs to {format, min, max}")
        )
        return
    for raw_key, raw in data.items():
        key = str(raw_key)
        name, _, item_key = key.partition("[].")
        allowed = _ITEM_RULE_KEYS if item_key else _RULE_KEYS
        for rule_key in raw if isinstance(raw, Mapping) else ():
            if str(rule_key) not in allowed:
                problems.append(
                    Problem(
                        rel,
                        f"{key}.{rule_key}",
                        f"expected one of {', '.join(allowed)}{did_you_mean(str(rule_key), allowed)}",
                    )
                )
        rule = _parse_spec(item_key or name, raw if isinstance(raw, Mapping) else {}, rel)
        problems.extend(_rule_problems(rule, rel, key))
        if name not in keys:
            problems.append(Problem(rel, key, f"expected an input of the role{did_you_mean(name, keys)}"))
            continue
        spec = keys[name]
        if item_key:
            keys[name] = replace(spec, item_rules={**(spec.item_rules or {}), item_key: rule})
            continue
        spec = replace(
            spec, format=rule.format, minimum=rule.minimum, maximum=rule.maximum, max_length=rule.max_length
        )
        if rule.unique:
            if spec.type != "list":
                problems.append(Problem(rel, f"{key}.unique", "expected on an input of type list"))
            spec = replace(spec, unique=rule.unique)
        for how in ("items_like", "fields_like"):
            ref = raw.get(how) if isinstance(raw, Mapping) else None
            if ref is None:
                continue
            like = _option_of(entry_points, str(ref), role)
            want = "list" if how == "items_like" else "dict"
            if isinstance(like, str):
                problems.append(Problem(rel, f"{key}.{how}", like))
            elif spec.type != want:
                problems.append(Problem(rel, f"{key}.{how}", f"expected on an input of type {want}"))
            elif how == "items_like":
                spec = replace(
                    spec,
                    options=like.options,
                    mutually_exclusive=like.mutually_exclusive,
                    required_one_of=like.required_one_of,
                    required_together=like.required_together,
                )
            else:  # partial values merged under the option's own: nothing is required
                options = {n: replace(o, required=False) for n, o in (like.options or {}).items()}
                spec = replace(spec, options=options, mutually_exclusive=like.mutually_exclusive)
        keys[name] = spec


def _option_of(entry_points: Any, ref: str, role: str) -> Spec | str:
    """The Spec of `<entry point>.<option>` in a role's argument_specs (a mapping with sub-options),
    or the text of the problem."""
    entry, _, option = ref.partition(".")
    where = f"roles/{role}/meta/argument_specs.yml"
    points = entry_points if isinstance(entry_points, Mapping) else {}
    options = points.get(entry, {}).get("options") if isinstance(points.get(entry), Mapping) else None
    if not isinstance(options, Mapping) or option not in options:
        known = [
            f"{e}.{o}" for e, p in points.items() if isinstance(p, Mapping) for o in p.get("options") or {}
        ]
        return f"expected <entry point>.<option> of {where}, got {ref!r}{did_you_mean(ref, known)}"
    spec = _parse_spec(option, options[option], where)
    if spec.options is None:
        return f"expected an option with sub-options (options:) in {where}, got {ref!r}"
    return spec


def _parse_options(options: Mapping[Any, Any], source: str) -> dict[str, Spec]:
    out: dict[str, Spec] = {}
    for name, raw in options.items():
        spec = _parse_spec(str(name), raw, source)
        out[str(name)] = spec
        aliases = raw.get("aliases") if isinstance(raw, Mapping) else None
        for alias in aliases if isinstance(aliases, list) else []:
            out[str(alias)] = spec
    return out


def _read_yaml(file: Path, rel: str, problems: list[Problem]) -> Any:
    try:
        return yamlfile.read(file, rel)
    except yamlfile.YamlError as exc:
        problems.append(exc.problem)
    return None


def load_specs(root: Path | None = None) -> SpecTable:
    """Read settings.yml, every role's argument spec and defaults, and the version rules' keys."""
    root = root or paths.project_root()
    return _load_specs_cached(root.resolve())


_CACHE: dict[Path, SpecTable] = {}


def _load_specs_cached(root: Path) -> SpecTable:
    if root in _CACHE:
        return _CACHE[root]
    problems: list[Problem] = []
    keys: dict[str, Spec] = {}
    role_defaults: dict[str, Any] = {}
    # The rules' `when` keys first: a role's or settings.yml's own declaration replaces them.
    data = _read_yaml(root / "versions.yml", "versions.yml", problems)
    rules = data.get("gpubring_version_rules") if isinstance(data, Mapping) else None
    for rule in rules if isinstance(rules, list) else []:
        when = rule.get("when") if isinstance(rule, Mapping) else None
        for key, value in (when if isinstance(when, Mapping) else {}).items():
            typ = "bool" if isinstance(value, bool) else "str" if isinstance(value, str) else "raw"
            keys[str(key)] = Spec(name=str(key), type=typ, source=f"versions.yml rule {rule.get('id')}")
    roles_dir = root / "roles"
    roles = tuple(sorted(p.name for p in roles_dir.iterdir() if p.is_dir())) if roles_dir.is_dir() else ()
    for role in roles:
        rel = f"roles/{role}/meta/argument_specs.yml"
        defaults_file = roles_dir / role / "defaults" / "main.yml"
        if defaults_file.is_file():
            defaults = _read_yaml(defaults_file, f"roles/{role}/defaults/main.yml", problems)
            if isinstance(defaults, Mapping):
                for key, value in defaults.items():
                    role_defaults[str(key)] = value
                    keys.setdefault(str(key), Spec(name=str(key), type="raw", source=rel))
        spec_file = roles_dir / role / "meta" / "argument_specs.yml"
        if not spec_file.is_file():
            continue
        before = len(problems)
        spec_data = _read_yaml(spec_file, rel, problems)
        if len(problems) > before:
            continue
        try:
            options = spec_data["argument_specs"]["main"].get("options") or {}
        except (TypeError, KeyError, AttributeError):
            problems.append(Problem(rel, "argument_specs.main", "expected a mapping with options"))
            continue
        if not isinstance(options, Mapping):
            problems.append(Problem(rel, "argument_specs.main.options", "expected a mapping"))
            continue
        keys.update(_parse_options(options, rel))
        formats_file = roles_dir / role / "meta" / "formats.yml"
        if formats_file.is_file():
            formats_data = _read_yaml(formats_file, f"roles/{role}/meta/formats.yml", problems)
            _apply_formats(keys, role, formats_data, problems, spec_data["argument_specs"])
    settings = _read_yaml(root / "settings.yml", "settings.yml", problems)
    options = settings.get("options") if isinstance(settings, Mapping) else None
    if isinstance(options, Mapping):
        declared = _parse_options(options, "settings.yml")
        for name, spec in declared.items():
            problems.extend(_rule_problems(spec, "settings.yml", f"options.{name}"))
        keys.update(declared)
    elif settings is not None:
        problems.append(Problem("settings.yml", "options", "expected a mapping of gpubring_* settings"))
    table = SpecTable(keys=keys, roles=roles, role_defaults=role_defaults, problems=tuple(problems))
    _CACHE[root] = table
    return table


def templated(value: Any) -> bool:
    """Whether a value is Ansible's to evaluate (a Jinja expression, or a vault value): no check of ours
    looks into it."""
    return isinstance(value, Opaque) or (isinstance(value, str) and ("{{" in value or "{%" in value))


def _show(value: Any) -> str:
    text = (
        repr(value)
        if isinstance(value, str)
        else str(value).lower()
        if isinstance(value, bool)
        else str(value)
    )
    return text if len(text) <= 40 else text[:37] + "..."


_TYPE_WORDS = {
    "str": "a string",
    "path": "a path (string)",
    "int": "an integer",
    "float": "a number",
    "bool": "a boolean (true or false)",
    "list": "a list",
    "dict": "a mapping",
}


def _type_ok(typ: str, value: Any) -> bool:
    if typ in ("str", "path"):
        return isinstance(value, str | int | float) and not isinstance(value, bool)
    if typ == "int":
        if isinstance(value, bool):
            return False
        if isinstance(value, float):
            return value.is_integer()
        return isinstance(value, int) or (isinstance(value, str) and value.strip().lstrip("+-").isdigit())
    if typ == "float":
        if isinstance(value, bool):
            return False
        if isinstance(value, str):
            try:
                float(value)
            except ValueError:
                return False
            return True
        return isinstance(value, int | float)
    if typ == "bool":
        return isinstance(value, bool) or (isinstance(value, str) and value.lower() in _BOOL_STRINGS)
    if typ == "list":
        return isinstance(value, list)
    if typ == "dict":
        return isinstance(value, Mapping)
    return True


def check_value(spec: Spec, value: Any, path: str) -> list[tuple[str, str]]:
    """(key path, expected text) for everything wrong with one value; empty when it fits the spec."""
    if value is None or templated(value) or spec.type == "raw":
        return []
    if not _type_ok(spec.type, value):
        return [(path, f"expected {_TYPE_WORDS[spec.type]}, got {_show(value)}")]
    out: list[tuple[str, str]] = []
    if spec.type == "list":
        for i, item in enumerate(value):
            item_path = f"{path}[{i}]"
            elements = spec.elements
            if elements and elements != "raw" and not templated(item) and not _type_ok(elements, item):
                out.append((item_path, f"expected {_TYPE_WORDS[elements]}, got {_show(item)}"))
                continue
            if spec.choices is not None and item not in spec.choices and not templated(item):
                out.append(
                    (item_path, f"expected one of {', '.join(map(str, spec.choices))}, got {_show(item)}")
                )
            found: list[tuple[str, str]] = []
            if spec.options is not None and isinstance(item, Mapping):
                found = check_mapping(spec.options, item, item_path) + _constraint_problems(
                    spec, item, item_path
                )
                out.extend(found)
            if spec.item_rules:
                flagged = {p for p, _ in found}
                out.extend(p for p in _item_problems(spec.item_rules, item, item_path) if p[0] not in flagged)
            elif spec.format is not None and not templated(item):
                out.extend(_format_problems(replace(spec, type=spec.elements or "raw"), item, item_path))
        out.extend(_unique_problems(spec.unique, value, path))
        return out
    if spec.choices is not None and value not in spec.choices:
        choices = ", ".join(map(str, spec.choices))
        out.append((path, f"expected one of {choices}, got {_show(value)}"))
    if spec.type == "dict" and spec.options is not None:
        out.extend(check_mapping(spec.options, value, path))
        out.extend(_constraint_problems(spec, value, path))
    out.extend(_format_problems(spec, value, path))
    return out


def _format_problems(spec: Spec, value: Any, path: str) -> list[tuple[str, str]]:
    """What the tool the value feeds would refuse: its format, length and bounds (an int given as
    digits is the int Ansible turns it into)."""
    if spec.type in ("int", "float") and isinstance(value, str):
        try:
            value = int(value) if spec.type == "int" else float(value)
        except ValueError:
            return []
    out: list[tuple[str, str]] = []
    if spec.format is not None and spec.format in formats.FORMATS:
        message = formats.check(spec.format, value)
        if message is not None:
            out.append((path, f"expected {message}"))
    length = formats.check_length(value, spec.max_length)
    if length is not None:
        out.append((path, f"expected {length}"))
    bound = formats.check_bounds(value, spec.minimum, spec.maximum)
    if bound is not None:
        out.append((path, f"expected {bound}"))
    return out


def _item_problems(rules: Mapping[str, Spec], item: Any, path: str) -> list[tuple[str, str]]:
    if not isinstance(item, Mapping):
        return []
    out: list[tuple[str, str]] = []
    for key, rule in rules.items():
        if key in item and item[key] is not None and not templated(item[key]):
            out.extend(_format_problems(rule, item[key], f"{path}.{key}"))
    return out


def _given(value: Mapping[Any, Any], key: str) -> bool:
    return value.get(key) is not None


def _constraint_problems(spec: Spec, value: Mapping[Any, Any], path: str) -> list[tuple[str, str]]:
    """The argument spec's mutually_exclusive, required_one_of and required_together of a mapping."""
    out: list[tuple[str, str]] = []
    for group in spec.mutually_exclusive:
        given = [k for k in group if _given(value, k)]
        if len(given) > 1:
            out.append(
                (f"{path}.{given[1]}", f"expected only one of {', '.join(group)}; {', '.join(given)} are set")
            )
    for group in spec.required_one_of:
        if not any(_given(value, k) for k in group):
            out.append((path, f"expected one of {', '.join(group)}; none is set"))
    for group in spec.required_together:
        given = [k for k in group if _given(value, k)]
        if given and len(given) < len(group):
            missing = [k for k in group if k not in given]
            out.append(
                (
                    f"{path}.{missing[0]}",
                    f"expected {', '.join(group)} together; {', '.join(given)} set without it",
                )
            )
    return out


def _unique_problems(keys: tuple[str, ...], value: list[Any], path: str) -> list[tuple[str, str]]:
    """Items of a list that agree with an earlier item on every key of `keys` (items where one of the
    keys is missing or templated are left to the other checks and to Ansible)."""
    if not keys:
        return []
    out: list[tuple[str, str]] = []
    seen: dict[tuple[str, ...], int] = {}
    for i, item in enumerate(value):
        if not isinstance(item, Mapping) or not all(_given(item, k) and not templated(item[k]) for k in keys):
            continue
        ident = tuple(str(item[k]) for k in keys)
        if ident in seen:
            same = ", ".join(f"{k} {_show(item[k])}" for k in keys)
            out.append(
                (
                    f"{path}[{i}]",
                    f"expected no two items with the same {' and '.join(keys)}; "
                    f"{path}[{seen[ident]}] has the same ({same})",
                )
            )
        else:
            seen[ident] = i
    return out


def check_mapping(options: Mapping[str, Spec], value: Mapping[Any, Any], path: str) -> list[tuple[str, str]]:
    """Sub-options of a dict: unknown keys (with a did-you-mean), missing required ones, values."""
    out: list[tuple[str, str]] = []
    for key, item in value.items():
        spec = options.get(str(key))
        if spec is None:
            out.append(
                (
                    f"{path}.{key}",
                    f"unknown key, expected one of {', '.join(sorted(options))}"
                    f"{did_you_mean(str(key), options)}",
                )
            )
            continue
        if spec.required and item is None:
            out.append((f"{path}.{key}", "expected a value for this required key, it is empty"))
            continue
        out.extend(check_value(spec, item, f"{path}.{key}"))
    for name, spec in options.items():
        if spec.required and name == spec.name and name not in value:
            out.append((f"{path}.{name}", "expected this required key, it is missing"))
    return out


def check_key(table: SpecTable, key: str, value: Any, path: str) -> list[tuple[str, str]]:
    """Problems of one top-level inventory variable: unknown key, or a value that does not fit."""
    unknown = table.unknown_message(key)
    if unknown is not None:
        return [(path, unknown)]
    spec = table.keys.get(key)
    return check_value(spec, value, path) if spec is not None else []
