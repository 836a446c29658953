"""Ansible's lookup() and query()/q() in templates: file, env, template, vars, first_found, fileglob, unvault and
config here; sequence, items, list, dict, indexed_items, nested, together, subelements and inventory_hostnames in
engine/template/lookups_lists.py (they only reshape their terms).

Spelled as ansible-core spells them: several terms (lookup joins several strings with commas, query keeps the
list), `errors=` (strict, warn, ignore: None or [] instead of the error), `wantlist=`; file's `lstrip`/`rstrip`
(trailing whitespace stripped by default), env's and vars' `default`, template's `template_vars`, first_found's
`files`/`paths`/`skip` (names, lists of them, or mappings of files and paths). A relative path is searched as
Ansible searches it: the role's SUB/ folder and the role's folder, then the playbook's SUB/ and the playbook's
folder (SUB: files/ for file, templates/ for template; first_found looks in the folders first, as ansible-core
2.19 does, then in their files/, as earlier versions did).

The trust rules hold (engine/template/templar.py):
- a lookup's result is data: a file's text is never rendered; only lookup('template') renders, and only a
  template the playbook names, never one named by what a host returned;
- a path built from what a host returned (a registered result, a fact, a set_fact value, an item of a loop over
  them) must name a file inside the role's or the playbook's folder: absolute paths, `~` and `..` or symlink
  escapes are refused, as for copy's `src:` (engine/run/actions/files.py resolve_local). Which variables a lookup's
  arguments read is noted on each call when its template compiles (LookupSites), and followed at render through
  the variables those read;
- nothing runs on the control node nor leaves it: pipe and lines (commands), url (the network), password (files
  written) and every lookup not listed here are refused by name when the template renders, before the plugin
  would run: the task that renders it fails, as a failing lookup fails it in Ansible (so a task that is skipped
  or whose failure is ignored does not stop the run);
- secrets: the value of an environment variable named like a secret, of a file named like one, and whatever a
  lookup gives while a secret-named variable renders join the run's secrets (masked wherever output shows them).
"""

from __future__ import annotations

import glob
import os
import re
import stat
import threading
from collections import ChainMap
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Protocol

import jinja2
from jinja2 import nodes, pass_context
from jinja2.compiler import CodeGenerator, Frame
from jinja2.runtime import Context
from jinja2.sandbox import SecurityError

from engine.errors import TaskError, UserError
from engine.parsing import ansible_cfg, vault
from engine.parsing.yamlfile import MAX_YAML_BYTES
from engine.template import lookups_lists
from engine.template.loader import include_loader
from engine.template.overrides import HEADER
from engine.template.secrets import is_secret_name
from engine.template.taint import current, note_secret
from engine.template.templar import LazyVars, Templar

if TYPE_CHECKING:
    from engine.template.secrets import Secrets

LOOKUP_FUNCTIONS = frozenset({"lookup", "query", "q"})
READS_KEYWORD = "dfp_lookup_reads"  # added to each lookup call when it compiles: the variables its arguments read
ANY = "*"  # a read that cannot be followed (a computed lookup('vars', ...)): taken as a host's data
MAX_FILE_BYTES = MAX_YAML_BYTES  # a lookup reads no larger file than any other input file
MAX_TEMPLATE_DEPTH = 20  # lookup('template') inside a looked-up template, this deep at most
ERRORS = ("strict", "warn", "ignore")

_COMMAND = ("it would run a command on the control node",
            "run the command on a host (a `command` task with `register:`) and use the registered result")
REFUSED = {
    "pipe": _COMMAND,
    "lines": _COMMAND,
    "url": ("it would reach the network from the control node",
            "fetch it on a host (get_url, or a command with `register:`), or keep a copy in the playbook's files/ "
            "and read it with lookup('file', ...)"),
    "password": ("it would create and write files on the control node",
                 "keep the secret in the inventory or an Ansible Vault file (a secret-named variable is masked)"),
}
_depth = threading.local()


class LookupFailed(TaskError):
    """What a lookup could not do (no such file, a wrong option): `errors='ignore'` makes it None or []."""


class LookupRefused(LookupFailed):
    """What a lookup may not do (run a command, read outside the playbook for a host): never ignored."""


class PlayPlace(Protocol):
    """What a lookup needs of its play (a playbook's Play): the playbook file, whose folder it searches."""

    source: Path


class TaskPlace(Protocol):
    """What a lookup needs of its task (a playbook's Task): its name and place for messages, its role's folder."""

    name: str
    source: str
    role_dir: Path | None


@dataclass(frozen=True)
class Origin:
    """Where a view renders (set by engine/run/variables.py): the play and task (the folders a lookup searches, the task
    its errors name), the run's secrets."""

    play: PlayPlace
    task: TaskPlace | None
    secrets: Secrets


# -- names: the lookups we have, those refused ---------------------------------------------------------------------


def short_name(name: Any) -> Any:
    """`ansible.builtin.file` and `ansible.legacy.file` are `file`, as for modules."""
    if isinstance(name, str):
        for prefix in ("ansible.builtin.", "ansible.legacy."):
            if name.startswith(prefix):
                return name[len(prefix):]
    return name


def refusal(name: Any) -> str | None:
    """Why lookup(`name`) is refused, naming it and the fix; None for a lookup this module has."""
    if not isinstance(name, str):
        return f"lookup({name!r}): the first argument must be the lookup's name, a string such as 'file'"
    short = short_name(name)
    if short in PLUGINS:
        return None
    if short in REFUSED:
        why, fix = REFUSED[short]
        return f"lookup('{name}') is refused: {why}, and a lookup's result must be data; {fix}"
    return (f"lookup('{name}') is not a lookup dflash-provision has: lookup plugin '{name}' not found (it has "
            f"{', '.join(sorted(PLUGINS))}; none runs "
            "a command, reaches the network or writes a file on the control node); fix the name, or compute the "
            "value with a filter or a task")


# -- what a lookup's arguments read, noted when the template compiles ---------------------------------------------


def _is_lookup_call(node: nodes.Node) -> bool:
    return isinstance(node, nodes.Call) and isinstance(node.node, nodes.Name) and node.node.name in LOOKUP_FUNCTIONS


def _lookup_calls(root: nodes.Node) -> list[nodes.Call]:
    return [c for c in root.find_all(nodes.Call) if _is_lookup_call(c)]


def _self_and_below(node: nodes.Node, kind: type) -> list:
    return ([node] if isinstance(node, kind) else []) + list(node.find_all(kind))


def names_read_in(node: nodes.Node) -> frozenset[str]:
    """The variables an expression or template reads: its names, and those a nested lookup('vars', ...) names
    (ANY when that name is computed: whatever variable it reads, it may be a host's)."""
    found = {n.name for n in _self_and_below(node, nodes.Name) if n.ctx == "load"}
    for call in _self_and_below(node, nodes.Call):
        if not _is_lookup_call(call):
            continue
        kind = call.args[0] if call.args else None
        if not isinstance(kind, nodes.Const):
            found.add(ANY)
        elif short_name(kind.value) == "vars":
            found |= {a.value if isinstance(a, nodes.Const) and isinstance(a.value, str) else ANY for a in call.args[1:]}
            if call.dyn_args is not None:
                found.add(ANY)
    return frozenset(found)


def _argument_reads(call: nodes.Call) -> frozenset[str]:
    parts = [*call.args, *(k.value for k in call.kwargs if k.key != READS_KEYWORD), call.dyn_args, call.dyn_kwargs]
    return frozenset().union(*(names_read_in(p) for p in parts if p is not None))


def note_reads(root: nodes.Template, env: jinja2.Environment) -> None:
    """Give each lookup call of a parsed template the names its arguments read (READS_KEYWORD); a name the template
    sets itself ({% for %}, {% set %}, a macro's parameter) may hold anything the template reads, so then all."""
    local = {n.name for n in root.find_all(nodes.Name) if n.ctx in ("store", "param")}
    if local & LOOKUP_FUNCTIONS:  # the template defines its own `lookup`: its calls are not ours
        return
    everything: frozenset[str] | None = None
    for call in _lookup_calls(root):
        reads = _argument_reads(call)
        if reads & local:
            everything = names_read_in(root) if everything is None else everything
            reads |= everything
        note = nodes.Keyword(READS_KEYWORD, nodes.Const(tuple(sorted(reads))), lineno=call.lineno)
        note.set_environment(env)
        call.kwargs = [k for k in call.kwargs if k.key != READS_KEYWORD] + [note]


class LookupSites(CodeGenerator):
    """Jinja's code generator, which notes first on each lookup call what its arguments read (note_reads): at render,
    a path built from what a host returned is told from one the playbook wrote."""

    def visit_Template(self, node: nodes.Template, frame: Frame | None = None) -> None:
        note_reads(node, self.environment)
        super().visit_Template(node, frame)


def reads_host_data(view: LazyVars, reads: tuple) -> bool:
    """True when a name in `reads` carries what a host returned (engine/template/taint.py: a registered result, a fact, a
    set_fact value computed from one, an item of a loop over them, a variable whose value reads one); the engine's
    magic words and the items of a loop the playbook wrote carry none."""
    for name in reads:
        if name == ANY:
            return True
        if name not in view:
            continue  # a name the template sets itself: note_reads added everything the template reads
        try:
            if view.taint_of(name).hosts:
                return True
        except Exception:  # an unrenderable variable: taken as a host's (its own render reports the error)
            return True
    return False


# -- one call -----------------------------------------------------------------------------------------------------


def _flat_maps(mapping: Mapping) -> Iterator[Mapping]:
    for m in getattr(mapping, "maps", [mapping]):
        if isinstance(m, ChainMap):
            yield from _flat_maps(m)
        else:
            yield m


@dataclass
class LookupCall:
    """One lookup call as a plugin sees it: its terms and options, the variables it renders with, where it is."""

    name: str
    terms: list
    options: dict
    context: Context
    reads: tuple
    secrets_found: list = field(default_factory=list)

    @cached_property
    def view(self) -> LazyVars | None:
        return next((m for m in self._scope_maps() if isinstance(m, LazyVars)), None)

    @property
    def variables(self) -> Mapping:
        """The variables without the sandbox's globals (a plain mapping where no view renders)."""
        return self.view if self.view is not None else self._scope_maps()[0]

    def _scope_maps(self) -> list:
        """The context's variable maps, flat: an included template's context layers its includer's names over them."""
        return list(_flat_maps(self.context.parent))

    @property
    def origin(self) -> Origin | None:
        view = self.view
        return view.origin if view is not None else None

    @cached_property
    def from_host(self) -> bool:
        """Whether a host's answer may have built the arguments. Without the task's variables (a macro imported
        without context), or from a name the templates set themselves (a macro's parameter, given by a template
        that imports it), whatever the render read so far may have: a host's answer then."""
        view = self.view
        if view is not None and reads_host_data(view, self.reads):
            return True
        if view is None or any(name not in view for name in self.reads):
            frame = current()
            return frame is not None and bool(frame.hosts)
        return False

    def where(self) -> str:
        origin = self.origin
        if origin is not None and origin.task is not None:
            return f"{origin.task.source} ('{origin.task.name}')"
        return str(origin.play.source) if origin is not None else "a template"

    def failed(self, what: str) -> LookupFailed:
        return LookupFailed(f"{self.where()}: lookup('{self.name}'): {what}.")

    def refused(self, what: str) -> LookupRefused:
        return LookupRefused(f"{self.where()}: lookup('{self.name}'): {what}.")

    def strings(self) -> list[str]:
        for term in self.terms:
            if not (isinstance(term, str) and term):
                raise self.failed(f"each term must be a non-empty string (a name), not {term!r}; write "
                                  f"lookup('{self.name}', 'a', 'b') or query('{self.name}', *names)")
        return list(self.terms)

    def flag(self, key: str, default: bool, given: Any = None) -> bool:
        value = self.options.get(key, default) if given is None else given
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lower() in ("yes", "no", "true", "false", "on", "off", "1", "0"):
            return value.strip().lower() in ("yes", "true", "on", "1")
        raise self.failed(f"{key} must be true or false, not {value!r}")

    def secret(self, value: Any) -> None:
        self.secrets_found.append(value)


def _roots(call: LookupCall) -> list[Path]:
    """The folders a relative path is searched in, the role's first: the task's role, the folder of its file, its
    play's playbook."""
    origin = call.origin
    if origin is None:
        return [Path.cwd()]
    role = origin.task.role_dir if origin.task is not None else None
    # the folder of the file the task is written in, as Ansible's ansible_search_path (a role's tasks/ too)
    written = Path(origin.task.source.split(": task ", 1)[0]).parent if origin.task is not None else None
    found = ([role] if role is not None else []) + ([written] if written is not None and written.is_dir() else [])
    return list(dict.fromkeys([*found, origin.play.source.parent]))


def _keep_inside(call: LookupCall, term: str, found: Path) -> None:
    """A path from a host's data names a file inside the role's or the playbook's folder, symlinks followed."""
    roots = _roots(call)
    if not any(found.resolve().is_relative_to(r.resolve()) for r in roots):
        raise call.refused(f"the path {term!r} comes from what a host returned, and such a path must name a file "
                           f"inside {', '.join(map(str, roots))} (it leads to {found.resolve()}); write the path in "
                           "the playbook, or keep the file inside those folders")


def _locate(call: LookupCall, term: str, subs: tuple) -> tuple[Path | None, list[Path]]:
    """The file `term` names, absolute or searched in each of `subs` (a folder name, or None: the folder itself) of
    the role's and the playbook's folder, as Ansible searches; and every place it looked."""
    if term.startswith("~") or os.path.isabs(term):
        if call.from_host:
            raise call.refused(f"the path {term!r} comes from what a host returned, and such a path may not be absolute; "
                               f"it must name a file inside {', '.join(map(str, _roots(call)))}. Write the path in "
                               "the playbook")
        path = Path(os.path.expanduser(term))
        return (path if path.exists() else None), [path]
    looked = []
    for sub in subs:
        for root in _roots(call):
            if sub is not None and term.split("/")[0] != sub:
                looked.append(root / sub / term)
            looked.append(root / term)
    looked = list(dict.fromkeys(looked))
    for candidate in looked:
        if candidate.exists():
            if call.from_host:
                _keep_inside(call, term, candidate)
            return candidate, looked
    return None, looked


def _read_text(call: LookupCall, term: str, path: Path) -> tuple[str, bool]:
    """A control node's file as text: a regular file, at most MAX_FILE_BYTES, UTF-8; an Ansible Vault file decrypted
    (then True: what it gives is a secret)."""
    try:
        info = path.stat()
        if not stat.S_ISREG(info.st_mode):
            raise call.failed(f"{term!r} ({path}) is not a regular file; name a file")
        if info.st_size > MAX_FILE_BYTES:
            raise call.failed(f"{term!r} ({path}) has {info.st_size:,} bytes, more than a lookup reads "
                              f"({MAX_FILE_BYTES:,}); copy it to the host with `copy` instead")
        data = path.read_bytes()
    except OSError as exc:
        raise call.failed(f"{term!r} ({path}) cannot be read: {exc.strerror or exc}; fix its permissions") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise call.failed(f"{term!r} ({path}) is not UTF-8 text; a lookup reads text (copy a binary file to the host "
                          "with `copy`)") from None
    if vault.is_encrypted(text):  # as Ansible's loader does
        return vault.decrypt(text, f"{call.where()}: lookup('{call.name}', {term!r}) ({path})"), True
    return text, False


def _looked(paths: list[Path]) -> str:
    """The places looked, each on the message's one line (a name with a newline in it quoted)."""
    return ", ".join(str(p) if str(p).isprintable() else repr(str(p)) for p in paths)


# -- the lookups ----------------------------------------------------------------------------------------------------


def _found_file(call: LookupCall, term: str) -> Path:
    """A file lookup's term as a file of the role's or the playbook's files/ (or an absolute path), or the failure."""
    path, looked = _locate(call, term, ("files",))
    if path is None:
        raise call.failed(f"no file {term!r}; looked in {_looked(looked)}. Put it in the role's or the playbook's "
                          "files/ folder, or give its absolute path")
    return path


def file_lookup(call: LookupCall) -> list:
    """Each file's text, never rendered; trailing whitespace stripped unless rstrip=false, leading with lstrip=true."""
    lstrip, rstrip = call.flag("lstrip", False), call.flag("rstrip", True)
    out = []
    for term in call.strings():
        text, vaulted = _read_text(call, term, _found_file(call, term))
        text = text.lstrip() if lstrip else text
        text = text.rstrip() if rstrip else text
        if vaulted or is_secret_name(Path(term).name):
            call.secret(text)
        out.append(text)
    return out


def env_lookup(call: LookupCall) -> list:
    """The control node's environment variables ('' or `default` when unset); one named like a secret is a secret."""
    default = call.options.get("default", "")
    out = []
    for term in call.strings():
        name = term.split()[0] if term.split() else ""
        if not name:
            raise call.failed("an empty name; give the environment variable's name")
        if call.from_host:
            raise call.refused(f"the name {name!r} comes from what a host returned, and a host may not choose which of "
                               "the control node's environment variables are read; write the name in the playbook")
        value = os.environ.get(name)
        if value is not None and is_secret_name(name):
            call.secret(value)
        out.append(default if value is None else value)
    return out


def vars_lookup(call: LookupCall) -> list:
    """Variables by name, rendered as reading them does (data stays data); undefined without a `default`."""
    default, variables = call.options.get("default"), call.variables
    out = []
    for term in call.terms:
        if not isinstance(term, str):
            raise call.failed(f"a variable's name must be a string, not {type(term).__name__}")
        if term in variables:
            out.append(variables[term])
        elif default is not None:
            out.append(default)
        else:
            out.append(call.context.environment.undefined(
                hint=f"'{term}' is undefined (lookup('vars') found no such variable; define it or give default=)", name=term))
    return out


def template_lookup(call: LookupCall) -> list:
    """Each template file of the role or the playbook rendered with the task's variables (and `template_vars`, as
    data), under the same bounds as any template; one named by what a host returned is never rendered."""
    if call.from_host:
        raise call.refused("the template's name comes from what a host returned, and only a template the playbook "
                           "names is rendered (a host's data is never rendered); write the name in the playbook")
    extra = call.options.get("template_vars") or {}
    if not isinstance(extra, Mapping):
        raise call.failed(f"template_vars must be a mapping of names to values, not {type(extra).__name__}")
    out = []
    for term in call.strings():
        path, looked = _locate(call, term, ("templates",))
        if path is None:
            raise call.failed(f"no template {term!r}; looked in {_looked(looked)}. Put it in the role's or the "
                              "playbook's templates/ folder, or give its absolute path")
        out.append(_render_template(call, term, path, dict(extra)))
    return out


def _render_template(call: LookupCall, term: str, path: Path, extra: dict) -> Any:
    """A template file's text rendered (one expression keeps its type, as Ansible's lookup); its errors name it."""
    source, vaulted = _read_text(call, term, path)
    depth = getattr(_depth, "n", 0)
    if depth >= MAX_TEMPLATE_DEPTH:
        raise call.failed(f"templates looked up inside templates nest deeper than {MAX_TEMPLATE_DEPTH} at {term!r} "
                          "(does a template look itself up?); break the cycle")
    view = call.view
    templar = view.templar if view is not None else Templar(call.context.environment)
    variables = _template_variables(call, extra)
    _depth.n = depth + 1
    try:
        rendered = _render_looked_up(templar, source, variables, _include_loader(call, path))
        if vaulted:
            call.secret(rendered)
        return rendered
    except (TaskError, UserError, SecurityError):
        raise
    except Exception as exc:
        raise call.failed(f"{term!r} ({path}): {type(exc).__name__}: {exc}") from None
    finally:
        _depth.n = depth
        if view is not None and variables is not view and isinstance(variables, LazyVars):  # its reads count for the task
            view.touched |= variables.touched - set(extra)


def _render_looked_up(templar: Templar, source: str, variables: Mapping, loader: Any) -> Any:
    """A looked-up template's value as Ansible's lookup gives it: one `{{ expression }}` (a file's one trailing
    newline aside, which Jinja drops) keeps its value's type (`{{ v.foo }}` a number, `{{ d }}` a mapping), text
    gets its trailing newline back; a template with {% tags %} (an include, an import) or `#jinja2:` is text."""
    body = source[:-1] if source.endswith("\n") else source
    if "{%" in body or body.startswith(HEADER) or body.endswith("\n"):
        return templar.render_text(source, variables, None, loader)
    value = templar.render_string(body, variables)
    return value + source[len(body):] if isinstance(value, str) else value


def _include_loader(call: LookupCall, path: Path) -> Any:
    """Where the template's {% include %} and {% import %} look, as Ansible's template lookup: the template's own
    folder, then the task's search path (each folder with its templates/)."""
    return include_loader([str(r) for r in _roots(call)], first=[str(path.parent)])


def _template_variables(call: LookupCall, extra: dict) -> Mapping:
    """The task's variables with `template_vars` read first, as data (never rendered)."""
    view = call.view
    if view is None:
        return ChainMap(extra, call.variables)  # type: ignore[arg-type]  # read only: any Mapping works
    return view.with_overlay(extra) if extra else view


def first_found_lookup(call: LookupCall) -> list:
    """The first of the names that exists, as an absolute path ([] with skip=true when none does)."""
    terms = call.terms or [call.options.get("files", [])]
    names, skip = _first_found_names(call, terms, call.options.get("paths", []), call.flag("skip", False))
    for name in names:
        path, _ = _locate(call, name, (None, "files"))
        if path is not None:
            return [os.path.normpath(os.path.abspath(path))]
    if skip:
        return []
    roots = ", ".join(f"{r} (and its files/)" for r in _roots(call))
    raise call.failed(f"none of {names} exists (relative names are searched in {roots}); add one of them, or pass "
                      "skip=true to get an empty list")


def _split(call: LookupCall, value: Any, separators: str, what: str) -> list[str]:
    """Names from a string or a list of them, each split at `separators` as Ansible still splits them."""
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, (list, tuple)) or not all(isinstance(i, str) for i in items):
        raise call.failed(f"{what} must be a name or a list of names, not {value!r}")
    return [part for item in items for part in re.split(f"[{re.escape(separators)}]", item) if part]


def _first_found_names(call: LookupCall, terms: list, paths: Any, skip: bool) -> tuple[list[str], bool]:
    """The candidates in order: each name (a mapping's `files`) joined to each of its `paths`, lists flattened."""
    out: list[str] = []
    for term in terms:
        if isinstance(term, Mapping):
            unknown = sorted(set(term) - {"files", "paths", "skip"})
            if unknown:
                raise call.failed(f"a first_found mapping takes files, paths and skip, not {', '.join(unknown)}")
            files, where = _split(call, term.get("files", []), ",;", "files"), _split(call, term.get("paths", []), ",:;", "paths")
            skip = call.flag("skip", skip, term["skip"]) if "skip" in term else skip
        elif isinstance(term, str):
            files, where = _split(call, term, ",;", "a name"), _split(call, paths, ",:;", "paths")
        elif isinstance(term, (list, tuple)):
            more, skip = _first_found_names(call, list(term), paths, skip)
            out += more
            continue
        else:
            raise call.failed(f"a term must be a file name, a list of them or a mapping of files and paths, not {term!r}")
        out += [os.path.join(p, f) for p in where for f in files] if where else files
    return out, skip


def fileglob_lookup(call: LookupCall) -> list:
    """The regular files a pattern matches: in the folder its path names (searched as file's), else in the role's
    and the playbook's files/ and folder, the first that has a match; absolute paths, sorted."""
    out: list[str] = []
    for term in call.strings():
        folder, pattern = os.path.split(term)
        if folder:
            found, _ = _locate(call, folder, ("files",))
            places = [found] if found is not None and found.is_dir() else []
        else:
            places = [p for root in _roots(call) for p in (root / "files", root)]
        for place in places:
            hits = sorted(g for g in glob.glob(os.path.join(glob.escape(str(place)), pattern)) if os.path.isfile(g))
            if hits:
                for hit in hits if call.from_host else ():
                    _keep_inside(call, term, Path(hit))
                out += hits
                break
    return out


def unvault_lookup(call: LookupCall) -> list:
    """Each file's text as it is (not stripped), an Ansible Vault file decrypted (then a secret, as file's)."""
    out = []
    for term in call.strings():
        text, vaulted = _read_text(call, term, _found_file(call, term))
        if vaulted or is_secret_name(Path(term).name):
            call.secret(text)
        out.append(text)
    return out


def _roles_path() -> list[str]:
    configured = [str(p) for p in ansible_cfg.roles_path()]
    return configured or [os.path.expanduser("~/.ansible/roles"), "/usr/share/ansible/roles", "/etc/ansible/roles"]


def _force_handlers() -> bool:
    text = ansible_cfg.setting("force_handlers")
    return (text or "").strip().lower() in ("1", "true", "yes", "on")


# The configuration settings lookup('config') answers: those the engine reads (engine/parsing/ansible_cfg.py) and a
# few whose value is fixed here (this tool's behaviour, which Ansible's default describes).
CONFIG: dict[str, Callable[[], Any]] = {
    "DEFAULT_ROLES_PATH": _roles_path,
    "DEFAULT_FORCE_HANDLERS": _force_handlers,
    "DEFAULT_HASH_BEHAVIOUR": lambda: "replace",
    "DEFAULT_BECOME_METHOD": lambda: "sudo",
    "DEFAULT_JINJA2_NATIVE": lambda: False,
    "DEFAULT_UNDEFINED_VAR_BEHAVIOR": lambda: True,
    "ALLOW_BROKEN_CONDITIONALS": lambda: (ansible_cfg.setting("allow_broken_conditionals") or "").strip().lower()
    in ("y", "yes", "on", "1", "true", "t"),  # engine/run/conditionals.py
}
MISSING = ("error", "skip", "warn")


def config_lookup(call: LookupCall) -> list:
    """Configuration settings by name (a few: CONFIG); on_missing says what an unknown one gives."""
    missing = call.options.get("on_missing", "error")
    if missing not in MISSING:
        raise call.failed(f"on_missing must be one of {', '.join(MISSING)}, not {missing!r}")
    if call.options.get("plugin_type") or call.options.get("plugin_name"):
        raise call.failed("settings of plugins (plugin_type, plugin_name) are not read; use a setting's name such as "
                          "DEFAULT_ROLES_PATH")
    origin = call.flag("show_origin", False)
    out: list = []
    for term in call.terms:
        if not isinstance(term, str):
            raise call.failed(f"a setting's name is a string, not {type(term).__name__} {term!r}")
        if term not in CONFIG:
            if missing == "error":
                raise call.failed(f"no setting {term!r} (the settings it reads: {', '.join(sorted(CONFIG))})")
            continue
        value = CONFIG[term]()
        out.append([value, "default"] if origin else value)
    return out


PLUGINS: dict[str, tuple[Callable[[LookupCall], list], frozenset[str]]] = {
    **lookups_lists.PLUGINS,
    "fileglob": (fileglob_lookup, frozenset()),
    "unvault": (unvault_lookup, frozenset()),
    "config": (config_lookup, frozenset({"on_missing", "plugin_type", "plugin_name", "show_origin"})),
    "file": (file_lookup, frozenset({"lstrip", "rstrip"})),
    "env": (env_lookup, frozenset({"default"})),
    "vars": (vars_lookup, frozenset({"default"})),
    # convert_data and jinja2_native are ansible-core's deprecated no-ops: accepted, as there
    "template": (template_lookup, frozenset({"template_vars", "convert_data", "jinja2_native"})),
    "first_found": (first_found_lookup, frozenset({"files", "paths", "skip"})),
}


# -- lookup() and query() ---------------------------------------------------------------------------------------------


def run_lookup(context: Context, args: tuple, options: dict, wantlist: bool) -> Any:
    """One lookup() or query(): refused names first, then the plugin; its failures as `errors=` says, its result
    shaped as Ansible shapes it (one value, several strings joined by commas, else the list)."""
    reads = tuple(options.pop(READS_KEYWORD, (ANY,)))  # a call the compiler did not see: taken as a host's data
    errors = options.pop("errors", "strict")
    wantlist = bool(options.pop("wantlist", wantlist))
    name = args[0] if args else None
    call = LookupCall(str(name), list(args[1:]), options, context, reads)
    if not args:
        raise LookupRefused(f"{call.where()}: lookup() needs the lookup's name first, e.g. lookup('file', 'motd.txt').")
    why = refusal(name)
    if why:
        raise LookupRefused(f"{call.where()}: {why}.")
    if errors not in ERRORS:
        raise LookupRefused(f"{call.where()}: lookup('{name}'): errors must be one of {', '.join(ERRORS)}, not {errors!r}.")
    plugin, allowed = PLUGINS[short_name(name)]
    try:
        unknown = sorted(set(options) - allowed)
        if unknown:
            raise call.failed(f"it has no option {', '.join(unknown)} (its options: "
                              f"{', '.join(sorted(allowed | {'errors', 'wantlist'}))}); remove it")
        result = plugin(call)
    except LookupRefused:
        raise
    except LookupFailed:
        if errors == "strict":
            raise
        return [] if wantlist else None  # warn: as ignore (the engine's console is not reachable from a template)
    if _remember_secrets(call, result) and call.view is not None and call.view.masking is not None:
        result = [call.view.masking.whole(r) for r in result]  # a message rendered again for display
    return result if wantlist else _one_value(result)


def _remember_secrets(call: LookupCall, result: list) -> bool:
    """What a lookup found secret, and all it gave while a secret-named variable renders, join the run's secrets,
    and the render in progress is a secret's (engine/template/taint.py: whatever it gives is masked, however transformed)."""
    origin, view = call.origin, call.view
    found = call.secrets_found
    if view is not None and any(is_secret_name(n) for n in view.rendering):
        found = result
    if not found:
        return False
    note_secret()
    if origin is not None:
        origin.secrets.add(found)
    return True


def _one_value(result: list) -> Any:
    if len(result) == 1:
        return result[0]
    if len(result) > 1 and all(isinstance(r, str) for r in result):
        return ",".join(result)
    return result


@pass_context
def lookup(context: Context, *args: Any, **options: Any) -> Any:
    """Ansible's lookup(NAME, TERMS..., errors=, wantlist=, OPTIONS...)."""
    return run_lookup(context, args, options, wantlist=False)


@pass_context
def query(context: Context, *args: Any, **options: Any) -> Any:
    """Ansible's query(NAME, TERMS...) and q(): lookup with wantlist=true, always a list."""
    return run_lookup(context, args, options, wantlist=True)


def install(env: jinja2.Environment) -> None:
    """lookup, query and q for the templates of `env`, each call noting what its arguments read."""
    env.code_generator_class = LookupSites
    env.globals.update(lookup=lookup, query=query, q=query)
