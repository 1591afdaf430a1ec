# Copyright: gpubring maintainers
# Apache-2.0 (see galaxy.yml)
"""Compile each Jinja template once per ansible-playbook run, not once per task and host.

ansible-core 2.19 compiles a template from its source every time it renders one
(``TemplateEngine._compile_template`` calls ``AnsibleEnvironment.from_string``, and Jinja caches only
templates loaded by name), and every task on every host runs in a freshly forked worker. Parsing,
generating Python and compiling it is 40-45 % of a templating task's worker CPU on gpubring's fleet
profile (docs/fleet.md). This module keeps the compiled Python code of each template and expression in
a dictionary of the process, so that:

- a worker compiles a template it renders many times (a loop's items, a variable read by many keys) once;
- the main process's own compilations are inherited by every worker it forks;
- a worker writes what it compiled into a private folder of the main process (in Ansible's local
  temporary folder of the process) when its task ends,
  and the main process merges it before it forks the next worker, so a template the first workers
  compiled is not compiled again by the hosts after them, nor by a later task that reads the same
  variable.

The key is everything Jinja's code generation reads: the source, the kind (template or expression),
the template's load name and file name, the environment's class and its delimiter and whitespace
settings (the ``#jinja2:`` overrides of a template file), Ansible's backslash escaping at compile time,
the optimizer, the extensions and whether embedded templates are allowed. Only code objects are kept;
each render still builds its template on its own environment (``Template.from_code``, as Jinja's
``from_string`` does), so nothing of one environment or one host reaches another. A template that does
not compile raises as before and is not kept.

Install with ``install()`` in the main process before the first worker forks; ``merge()`` there before
each fork. It uses ansible-core's private templating classes: if they are not what this module expects,
``install()`` changes nothing and returns False, and Ansible compiles as it always did.
"""

from __future__ import annotations

import marshal
import os
import tempfile
import threading
from collections.abc import Callable
from types import CodeType
from typing import Any

from ansible import constants as C

try:
    from ansible._internal._templating import _jinja_bits
    from ansible.executor.task_executor import TaskExecutor
    from jinja2.environment import TemplateExpression
except ImportError:  # another ansible-core: install() leaves Ansible as it is
    _jinja_bits = None  # type: ignore[assignment]

# At most this many code objects per process: a run's playbooks and variables hold a few thousand
# templates; past this, templates are compiled as Ansible compiles them.
LIMIT = 20000

_CODE: dict[tuple[Any, ...], CodeType] = {}
_NEW: dict[tuple[Any, ...], CodeType] = {}  # compiled in this worker, not yet written for the main process
_STATE: dict[str, Any] = {"dir": None, "main": None, "installed": False}
_CAPTURE = threading.local()


def _plain(value: Any) -> Any:
    """A tagged str of Ansible (it carries where it came from) as a plain str, for keys and marshal."""
    return str.__str__(value) if isinstance(value, str) else value


def _settings(env: Any) -> tuple[Any, ...]:
    escape = _jinja_bits._TemplateCompileContext.current(optional=True)
    return (
        f"{type(env).__module__}.{type(env).__qualname__}",
        tuple(getattr(env, name) for name in _jinja_bits._TEMPLATE_OVERRIDE_FIELD_NAMES),
        bool(escape and escape.escape_backslashes),
        bool(env.optimized),
        bool(env.is_async),
        tuple(sorted(env.extensions)),
        bool(_jinja_bits._TemplateConfig.allow_embedded_templates),
    )


def _keep(key: tuple[Any, ...], code: CodeType) -> None:
    if len(_CODE) < LIMIT:
        _CODE[key] = code
        if os.getpid() != _STATE["main"]:
            _NEW[key] = code


def _wrap_compile(original: Callable[..., Any]) -> Callable[..., Any]:
    def compile(  # noqa: PLR0917 (Jinja's signature: its loaders pass name and filename by position)
        self: Any,
        source: Any,
        name: Any = None,
        filename: Any = None,
        raw: bool = False,
        defer_init: bool = False,
    ) -> Any:
        if raw or self._debuggable_template_source:
            return original(self, source, name, filename, raw, defer_init)
        if not isinstance(source, str):  # a tree: compile_expression's, caught below
            code = original(self, source, name, filename, raw, defer_init)
            if getattr(_CAPTURE, "codes", None) is not None:
                _CAPTURE.codes.append(code)
            return code
        key = ("template", _plain(source), _plain(name), _plain(filename), bool(defer_init), _settings(self))
        code = _CODE.get(key)
        if code is None:
            code = original(self, source, name, filename, raw, defer_init)
            _keep(key, code)
        return code

    compile.__doc__ = original.__doc__
    return compile


def _wrap_compile_expression(original: Callable[..., Any]) -> Callable[..., Any]:
    def compile_expression(self: Any, source: str, undefined_to_none: bool = True) -> Any:
        if self._debuggable_template_source or not isinstance(source, str):
            return original(self, source, undefined_to_none)
        key = ("expression", _plain(source), _settings(self))
        code = _CODE.get(key)
        if code is not None:
            template = self.template_class.from_code(self, code, self.make_globals(None), None)
            return TemplateExpression(template, undefined_to_none)
        _CAPTURE.codes = []
        try:
            expression = original(self, source, undefined_to_none)
            codes = _CAPTURE.codes
        finally:
            _CAPTURE.codes = None
        if len(codes) == 1:
            _keep(key, codes[0])
        return expression

    compile_expression.__doc__ = original.__doc__
    return compile_expression


def _wrap_task_run(original: Callable[..., Any]) -> Callable[..., Any]:
    def run(self: Any) -> Any:
        try:
            return original(self)
        finally:
            write()

    run.__doc__ = original.__doc__
    return run


def write() -> None:
    """In a worker: write what it compiled to the main process's directory, whole (a file renamed into
    place), before the task's result goes back. Nothing is written when nothing was compiled."""
    folder = _STATE["dir"]
    if not _NEW or folder is None or os.getpid() == _STATE["main"]:
        return
    keys, codes = list(_NEW), list(_NEW.values())
    _NEW.clear()
    head = marshal.dumps(keys)
    try:
        handle, temporary = tempfile.mkstemp(dir=folder, prefix=".", suffix=".part")
        with os.fdopen(handle, "wb") as stream:  # the keys first: the main process skips known ones' code
            stream.write(len(head).to_bytes(8, "big") + head + marshal.dumps(codes))
        os.rename(temporary, os.path.join(folder, f"{os.getpid()}-{id(keys)}.code"))
    except (OSError, ValueError):  # the main process has ended, or the disk is full: the cache is an aid only
        return


def merge() -> int:
    """In the main process: take in what the workers wrote, so that the workers forked next inherit it.
    Returns how many code objects were added."""
    folder = _STATE["dir"]
    if folder is None or os.getpid() != _STATE["main"]:
        return 0
    added = 0
    try:
        entries = [entry for entry in os.scandir(folder) if entry.name.endswith(".code")]
    except OSError:
        return 0
    for entry in entries:
        try:
            with open(entry.path, "rb") as stream:
                data = stream.read()
            os.unlink(entry.path)
            size = int.from_bytes(data[:8], "big")
            keys = marshal.loads(data[8 : 8 + size])
            if all(key in _CODE for key in keys):  # what the workers forked alongside compiled too
                continue
            codes = marshal.loads(data[8 + size :])
            pairs = list(zip(keys, codes, strict=True))
        except (OSError, EOFError, ValueError, TypeError):  # not what write() writes: left out
            continue
        for key, code in pairs:
            if key not in _CODE and isinstance(code, CodeType) and len(_CODE) < LIMIT:
                _CODE[key] = code
                added += 1
    return added


def install() -> bool:
    """Install the cache in this process (the main one), once. Returns whether it is installed."""
    if _STATE["installed"]:
        return True
    if _jinja_bits is None:
        return False
    environment = getattr(_jinja_bits, "AnsibleEnvironment", None)
    needed = ("_TemplateCompileContext", "_TEMPLATE_OVERRIDE_FIELD_NAMES", "_TemplateConfig")
    if environment is None or not all(hasattr(_jinja_bits, name) for name in needed):
        return False
    if not hasattr(environment, "_debuggable_template_source"):
        return False
    # 0700, in this process's own local temporary folder (ansible-local-<pid>..., under ANSIBLE_LOCAL_TEMP):
    # only this user reads what the workers wrote, and Ansible removes it when the process ends, as
    # gpubring removes a cancelled run's ANSIBLE_LOCAL_TEMP when the process was killed.
    folder = tempfile.mkdtemp(prefix="gpubring-jinja-", dir=C.DEFAULT_LOCAL_TMP)
    _STATE.update(dir=folder, main=os.getpid(), installed=True)
    environment.compile = _wrap_compile(environment.compile)
    environment.compile_expression = _wrap_compile_expression(environment.compile_expression)
    TaskExecutor.run = _wrap_task_run(TaskExecutor.run)
    return True
