"""Find environments by reading source files (AST), never by importing them.

A class counts as an environment if it derives from a root base class an environment framework claims
(``hermes_nb.frameworks``: ``hermes_nb.env.BaseEnv``, ``atroposlib.envs.base.BaseEnv``, ..., under any import
alias), directly or through another class found in any scanned file; its ``framework`` names the framework whose
root base it derives from, whose adapter reads, runs and tests it. Each file's parse is cached by
``(path, mtime_ns, size)``, so an unchanged tree costs one ``stat`` per file and a new or edited file is seen on
the next call. A file that does not parse is reported with its line and does not stop the scan.

Every environment records where it comes from (its package's folder, on the path or installed, else its file).
Two that give the same name are both listed, marked ``shared``: only the qualified name ``NAME@WHERE`` selects one.
A module that exports only a framework's entry function (verifiers' older ``load_environment``) is listed by its
name too, with why its adapter cannot run it (``Recognition.entry_refusal``).
"""

from __future__ import annotations

import ast
import os
import threading
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import BaseModel

from hermes_nb.config import EnvFramework
from hermes_nb.frameworks import registry
from hermes_nb.selection import installed, packages
from hermes_nb.system import home

DEFAULT_CONFIG_CLASS = "BaseEnvConfig"
ABSTRACT_MARKERS = frozenset({"ABC", "abc.ABC", "Protocol", "typing.Protocol"})
# A qualified name is NAME@WHERE, WHERE the package folder or the file the environment comes from: it selects one
# of several environments that share a name (a package's name is its metadata's, so two folders can give the same).
QUALIFIER = "@"


class EnvironmentInfo(BaseModel):
    name: str
    class_name: str
    file: str
    description: str
    config_class: str
    framework: EnvFramework = registry.DEFAULT_FRAMEWORK
    # Where it comes from: its package's folder (on the path, or installed into a framework's Python), else its file.
    origin: str = ""
    source: str = ""  # the same in words: "package FOLDER", "installed into PYTHON (FOLDER)", "file FILE"
    shared: bool = False  # another listed environment has the same name: only the qualified name selects it
    unsupported: str = ""  # why it cannot run here (its framework's adapter says); empty: it can

    @property
    def qualified_name(self) -> str:
        return f"{self.name}{QUALIFIER}{self.origin or self.file}"

    @property
    def selector(self) -> str:
        """What selects it: its name, or its qualified name where another environment shares the name."""
        return self.qualified_name if self.shared else self.name

    def comes_from(self, where: str) -> bool:
        """Whether ``where`` (a path as typed: relative, with ``~``) is the folder or file it comes from."""
        wanted = os.path.realpath(os.path.expanduser(where))
        return wanted in {self.origin, os.path.realpath(self.file)}


@dataclass(frozen=True)
class PackageOrigin:
    """The package a folder's modules belong to: the environment name its metadata gives, its folder, in words."""

    name: str
    root: str
    source: str


class DiscoveryProblem(BaseModel):
    file: str
    line: int | None = None
    message: str


@dataclass(frozen=True)
class ClassRecord:
    """One top-level class of a scanned file, with its bases resolved through the file's imports."""

    class_name: str
    bases: tuple[str, ...]  # qualified where an import says so, else the bare local name
    env_name: str | None
    config_class: str | None
    description: str
    abstract: bool
    line: int


@dataclass(frozen=True)
class FileScan:
    path: str
    stem: str
    classes: tuple[ClassRecord, ...] = ()
    # "_"-prefixed files (__init__.py, _common.py) are helpers, Python's mark of "not public": their classes can
    # be bases of environments but are not listed themselves.
    helper: bool = False
    module_doc: str = ""
    error: DiscoveryProblem | None = None
    # The names it binds at module level (a ``def``, an assignment, an import: where a framework's entry function,
    # ``load_environment``, may be), and the top-level packages it imports (which framework such a function is of).
    top_names: frozenset[str] = frozenset()
    imports: frozenset[str] = frozenset()


@dataclass
class _Cache:
    lock: threading.Lock = field(default_factory=threading.Lock)
    files: dict[str, tuple[tuple[int, int], FileScan]] = field(default_factory=dict)
    signature: tuple[tuple[str, int, int], ...] | None = None
    result: tuple[list[EnvironmentInfo], list[DiscoveryProblem]] | None = None


_CACHE = _Cache()


def scan(search_path: list[Path] | None = None) -> tuple[list[EnvironmentInfo], list[DiscoveryProblem]]:
    """The environments and parse errors under ``search_path`` (default: ``home.environment_search_path()``)."""
    dirs = search_path if search_path is not None else home.environment_search_path()
    with _CACHE.lock:
        folders = _folders(dirs)
        from_installs = _installed_folders()
        stats = _stat_tree([folder for folder, _ in folders] + [folder for folder, _ in from_installs])
        metadata = sorted({m for _, m in folders if m is not None})
        # The registered frameworks decide what counts as an environment: registering one re-resolves the tree;
        # a package's metadata names its environments: editing it, or installing one, renames or adds them.
        frameworks = tuple((name, 0, 0) for name in registry.names())
        names = tuple((f"{folder}={origin.name}", 0, 0) for folder, origin in from_installs)
        signature = frameworks + names + tuple((p, k[0], k[1]) for p, k in stats + _stat_files(metadata))
        if signature == _CACHE.signature and _CACHE.result is not None:
            return list(_CACHE.result[0]), list(_CACHE.result[1])
        scans = [_scan_cached(path, key) for path, key in stats]
        _CACHE.files = {path: _CACHE.files[path] for path, _ in stats}  # forget deleted files
        result = _resolve(scans, {**dict(from_installs), **_package_origins(folders)})
        _CACHE.signature, _CACHE.result = signature, result
        return list(result[0]), list(result[1])


def clear_cache() -> None:
    """Forget every file's parse (``installed`` keeps its answers: they follow their Python's state, not a tree)."""
    with _CACHE.lock:
        _CACHE.files.clear()
        _CACHE.signature = None
        _CACHE.result = None


def _folders(dirs: list[Path]) -> list[tuple[str, str | None]]:
    """Every folder whose modules are scanned, with the metadata file of the package it belongs to (``None``: a
    plain folder), in search-path order: an entry, then the package folders below it."""
    found: list[tuple[str, str | None]] = []
    for directory in map(str, dirs):
        package = packages.package_of(directory)
        if package is None:
            found.append((directory, None))
            try:
                entries = sorted(os.scandir(directory), key=lambda e: e.name)
            except OSError:
                continue  # a missing directory on the path is not an error: nothing there yet
            below = packages.sub_packages(directory, entries)
        else:
            below = [package]
        found += [(folder, p.metadata) for p in below for folder in packages.package_dirs(p)]
    return found


def _installed_folders() -> list[tuple[str, PackageOrigin]]:
    """``(folder, its package)`` of every folder of an environment package installed into a framework's Python."""
    # hermes-nb's own framework (no Python of its own) has no installed packages: its environments are files.
    pythons = {
        a.name: (python, a.recognition.packages) for a in registry.adapters() if (python := a.configured_python())
    }
    found: list[tuple[str, PackageOrigin]] = []
    for framework, listed in installed.installed_by_framework(pythons).items():
        for package in listed:
            for root in package.folders:
                folder = packages.package_of(root) or packages.PackageFolder(root=root, metadata="")
                where = f"installed into {pythons[framework][0]} ({folder.root})"
                origin = PackageOrigin(name=package.name, root=folder.root, source=where)
                found += [(inner, origin) for inner in packages.package_dirs(folder)]
    return found


def _package_origins(folders: list[tuple[str, str | None]]) -> dict[str, PackageOrigin]:
    """Folder -> the package it belongs to, for the folders of packages whose metadata gives a name."""
    names = {m: packages.package_name(m) for m in {m for _, m in folders if m is not None}}
    origins: dict[str, PackageOrigin] = {}
    for folder, metadata in folders:
        name = names[metadata] if metadata is not None else None
        if metadata is not None and name is not None:
            root = os.path.dirname(metadata)
            origins[folder] = PackageOrigin(name=name, root=root, source=f"package {root}")
    return origins


def _stat_files(paths: list[str]) -> list[tuple[str, tuple[int, int]]]:
    found: list[tuple[str, tuple[int, int]]] = []
    for path in paths:
        try:
            st = os.stat(path)
        except OSError:
            continue
        found.append((path, (st.st_mtime_ns, st.st_size)))
    return found


def _stat_tree(dirs: list[str]) -> list[tuple[str, tuple[int, int]]]:
    """``(path, (mtime_ns, size))`` of every candidate file, in search-path order then name order."""
    found: list[tuple[str, tuple[int, int]]] = []
    seen: set[str] = set()
    for directory in dirs:
        try:
            entries = sorted(os.scandir(directory), key=lambda e: e.name)
        except OSError:
            continue  # a missing directory on the path is not an error: nothing there yet
        for entry in entries:
            if not entry.name.endswith(".py") or entry.path in seen:
                continue
            try:
                st = entry.stat()
            except OSError:
                continue
            if not entry.is_file():
                continue
            seen.add(entry.path)
            found.append((entry.path, (st.st_mtime_ns, st.st_size)))
    return found


def _scan_cached(path: str, key: tuple[int, int]) -> FileScan:
    cached = _CACHE.files.get(path)
    if cached is not None and cached[0] == key:
        return cached[1]
    result = scan_file(path)
    _CACHE.files[path] = (key, result)
    return result


def scan_file(path: str) -> FileScan:
    """Parse one file into its top-level class records; a syntax error becomes a ``DiscoveryProblem``."""
    stem = Path(path).stem
    helper = stem.startswith("_")
    try:
        source = Path(path).read_bytes()
        tree = ast.parse(source, filename=path)
    except SyntaxError as exc:
        message = f"syntax error: {exc.msg}"
        error = DiscoveryProblem(file=path, line=exc.lineno, message=message)
        return FileScan(path, stem, helper=helper, error=error)
    except (OSError, ValueError) as exc:  # unreadable, or NUL bytes / bad encoding
        error = DiscoveryProblem(file=path, line=None, message=f"cannot read: {exc}")
        return FileScan(path, stem, helper=helper, error=error)
    aliases = _import_aliases(tree)
    classes = tuple(_class_record(node, aliases) for node in _top_level(tree) if isinstance(node, ast.ClassDef))
    doc = _first_line(ast.get_docstring(tree))
    imports = frozenset(q.split(".")[0] for q in aliases.values() if not q.startswith("."))
    names = frozenset(_bound_names(tree)) | frozenset(aliases)
    return FileScan(path, stem, classes=classes, module_doc=doc, helper=helper, top_names=names, imports=imports)


def _bound_names(tree: ast.Module) -> list[str]:
    """The names module-level ``def``s and assignments bind."""
    names: list[str] = []
    for node in _top_level(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            names.append(node.name)
        elif isinstance(node, ast.Assign):
            names += [t.id for t in node.targets if isinstance(t, ast.Name)]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.append(node.target.id)
    return names


def _top_level(tree: ast.Module) -> list[ast.stmt]:
    """Module statements, descending into ``if``/``try`` blocks (``if TYPE_CHECKING:``, optional imports)."""
    out: list[ast.stmt] = []
    pending: list[ast.stmt] = list(tree.body)
    while pending:
        node = pending.pop(0)
        out.append(node)
        if isinstance(node, ast.If):
            pending[:0] = node.body + node.orelse
        elif isinstance(node, ast.Try):
            pending[:0] = node.body + node.orelse + node.finalbody + [s for h in node.handlers for s in h.body]
    return out


def _import_aliases(tree: ast.Module) -> dict[str, str]:
    """Local name -> qualified name, from the file's import statements."""
    aliases: dict[str, str] = {}
    for node in _top_level(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    aliases[alias.asname] = alias.name
                else:
                    root = alias.name.split(".")[0]
                    aliases[root] = root
        elif isinstance(node, ast.ImportFrom):
            module = "." * node.level + (node.module or "")
            for alias in node.names:
                if alias.name != "*":
                    aliases[alias.asname or alias.name] = f"{module}.{alias.name}" if module else alias.name
    return aliases


def _dotted(node: ast.expr) -> str | None:
    """``a.b.C`` as a string; ``None`` for anything else (calls, subscripts like ``Generic[T]``)."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        head = _dotted(node.value)
        return f"{head}.{node.attr}" if head else None
    return None


def _unsubscripted(node: ast.expr) -> ast.expr:
    return node.value if isinstance(node, ast.Subscript) else node


def _resolve_name(dotted: str, aliases: dict[str, str]) -> str:
    head, _, rest = dotted.partition(".")
    qualified = aliases.get(head)
    if qualified is None:
        return dotted
    return f"{qualified}.{rest}" if rest else qualified


def _class_record(node: ast.ClassDef, aliases: dict[str, str]) -> ClassRecord:
    # A generic base counts as its class: verifiers' ``vf.Taskset[MyTask, MyConfig]`` is ``vf.Taskset``.
    bases = tuple(_resolve_name(d, aliases) for b in node.bases if (d := _dotted(_unsubscripted(b))))
    metaclass = next((_dotted(k.value) for k in node.keywords if k.arg == "metaclass"), None)
    abstract = (
        node.name.startswith("_")
        or bool(set(bases) & ABSTRACT_MARKERS)
        or bool(metaclass and metaclass.endswith("ABCMeta"))
    )
    env_name, config_class = _class_attributes(node)
    return ClassRecord(
        class_name=node.name,
        bases=bases,
        env_name=env_name,
        config_class=config_class,
        description=_first_line(ast.get_docstring(node)),
        abstract=abstract,
        line=node.lineno,
    )


def _class_attributes(node: ast.ClassDef) -> tuple[str | None, str | None]:
    """The literal ``name = "..."`` and the ``env_config_cls = SomeConfig`` of a class body."""
    env_name: str | None = None
    config_class: str | None = None
    for stmt in node.body:
        targets: list[ast.expr] = []
        if isinstance(stmt, ast.Assign):
            targets, value = stmt.targets, stmt.value
        elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
            targets, value = [stmt.target], stmt.value
        for target in targets:
            if not isinstance(target, ast.Name):
                continue
            if target.id == "name" and isinstance(value, ast.Constant) and isinstance(value.value, str):
                env_name = value.value
            elif target.id == "env_config_cls" and (dotted := _dotted(value)):
                config_class = dotted.rsplit(".", 1)[-1]
    return env_name, config_class


def _first_line(doc: str | None) -> str:
    if not doc:
        return ""
    return next((line.strip() for line in doc.splitlines() if line.strip()), "")


def _resolve(
    scans: list[FileScan], origins: dict[str, PackageOrigin]
) -> tuple[list[EnvironmentInfo], list[DiscoveryProblem]]:
    """Decide which classes are environments (across files) and build their entries; an environment of a package
    is named by the package (``origins``: folder -> its package). Environments that share a name are all listed,
    each with where it comes from; two of the same origin share a qualified name too: the first wins."""
    by_name: dict[str, list[tuple[FileScan, ClassRecord]]] = {}
    for file_scan in scans:
        for record in file_scan.classes:
            by_name.setdefault(record.class_name, []).append((file_scan, record))
    is_env = _EnvClassifier(by_name)
    environments: list[EnvironmentInfo] = []
    errors = [s.error for s in scans if s.error is not None]
    taken: dict[str, str] = {}
    for file_scan in scans:
        if file_scan.helper:
            continue
        origin = origins.get(os.path.dirname(file_scan.path))
        for record in file_scan.classes:
            if record.abstract or not is_env(file_scan, record):
                continue
            config_class, framework = is_env.config_class(file_scan, record), is_env.framework(file_scan, record)
            info = _info(file_scan, record, config_class, framework, origin)
            if info.qualified_name in taken:
                first = taken[info.qualified_name]
                message = f"environment name {info.name!r} ({record.class_name}) is already used by {first}"
                errors.append(DiscoveryProblem(file=file_scan.path, line=record.line, message=message))
                continue
            taken[info.qualified_name] = f"{info.class_name} in {info.file}"
            environments.append(info)
    environments += _entry_only(scans, origins, {e.origin for e in environments})
    return _mark_shared(environments), errors


def _origin_of(file_scan: FileScan, origin: PackageOrigin | None) -> tuple[str, str]:
    """The folder or file an environment of ``file_scan`` comes from (resolved: one folder reached by two paths is
    one origin), and the same in words."""
    if origin is not None:
        return os.path.realpath(origin.root), origin.source
    return os.path.realpath(file_scan.path), f"file {file_scan.path}"


def _info(
    file_scan: FileScan,
    record: ClassRecord,
    config_class: str | None,
    framework: EnvFramework,
    origin: PackageOrigin | None,
) -> EnvironmentInfo:
    description = record.description or file_scan.module_doc or f"Environment from {Path(file_scan.path).name}"
    root, source = _origin_of(file_scan, origin)
    return EnvironmentInfo(
        name=record.env_name or (origin.name if origin is not None else file_scan.stem),
        class_name=record.class_name,
        file=file_scan.path,
        description=description,
        config_class=config_class or DEFAULT_CONFIG_CLASS,
        framework=framework,
        origin=root,
        source=source,
    )


def _entry_only(scans: list[FileScan], origins: dict[str, PackageOrigin], served: set[str]) -> list[EnvironmentInfo]:
    """The modules (or packages) that export only a framework's entry function (``load_environment``), no class
    of it: listed by their name, with why their framework's adapter cannot run them."""
    found: dict[str, EnvironmentInfo] = {}
    for file_scan in scans:
        if file_scan.helper and file_scan.stem != "__init__":  # a package's __init__ is where it exports entries
            continue
        for adapter in registry.adapters():
            recognition = adapter.recognition
            entry = next((n for n in sorted(recognition.entry_functions) if n in file_scan.top_names), None)
            if entry is None or not file_scan.imports & set(recognition.packages):
                continue
            origin = origins.get(os.path.dirname(file_scan.path))
            root, source = _origin_of(file_scan, origin)
            if root in served or root in found:
                continue
            found[root] = EnvironmentInfo(
                name=origin.name if origin is not None else file_scan.stem,
                class_name=entry,
                file=file_scan.path,
                description=file_scan.module_doc or f"{entry}() in {Path(file_scan.path).name}",
                config_class=DEFAULT_CONFIG_CLASS,
                framework=adapter.name,
                origin=root,
                source=source,
                unsupported=recognition.entry_refusal,
            )
    return list(found.values())


def _mark_shared(environments: list[EnvironmentInfo]) -> list[EnvironmentInfo]:
    counts = Counter(e.name for e in environments)
    for info in environments:
        info.shared = counts[info.name] > 1
    return environments


class _EnvClassifier:
    """Answers "does this class derive from BaseEnv?" over the classes of all scanned files."""

    def __init__(self, by_name: dict[str, list[tuple[FileScan, ClassRecord]]]) -> None:
        self._by_name = by_name

    def __call__(self, file_scan: FileScan, record: ClassRecord) -> bool:
        return self._parent(file_scan, record, set()) is not None

    def config_class(self, file_scan: FileScan, record: ClassRecord) -> str | None:
        """The class's own ``env_config_cls``, else the nearest scanned ancestor's."""
        seen: set[tuple[str, str]] = set()
        current: tuple[FileScan, ClassRecord] | None = (file_scan, record)
        while current is not None and (current[0].path, current[1].class_name) not in seen:
            seen.add((current[0].path, current[1].class_name))
            if current[1].config_class:
                return current[1].config_class
            parent = self._parent(*current, set())
            current = parent[0] if parent is not None else None
        return None

    def framework(self, file_scan: FileScan, record: ClassRecord) -> EnvFramework:
        """The framework that claims the root base of the class's chain."""
        found = self._parent(file_scan, record, set())
        return (root_framework(found[1]) if found is not None else None) or registry.DEFAULT_FRAMEWORK

    def _parent(
        self, file_scan: FileScan, record: ClassRecord, visiting: set[tuple[str, str]]
    ) -> tuple[tuple[FileScan, ClassRecord] | None, str] | None:
        """How ``record`` is an environment: the scanned base it derives through (``None`` when it derives from a
        root base itself) and that root base's resolved name; ``None`` when it is not one."""
        key = (file_scan.path, record.class_name)
        if key in visiting:  # a cycle of names across files; not an environment through this path
            return None
        visiting.add(key)
        for base in record.bases:
            short = base.rsplit(".", 1)[-1]
            if root_framework(base) is not None:
                return None, base
            for candidate in self._candidates(file_scan, base, short):
                found = self._parent(*candidate, visiting)
                if found is not None:
                    return candidate, found[1]
        return None

    def _candidates(self, file_scan: FileScan, base: str, short: str) -> list[tuple[FileScan, ClassRecord]]:
        """Scanned classes ``base`` may refer to: same file first for a bare name, else any file."""
        found = self._by_name.get(short, [])
        if "." not in base:
            local = [c for c in found if c[0].path == file_scan.path]
            if local:
                return local
        module = base.rsplit(".", 1)[0].lstrip(".").rsplit(".", 1)[-1] if "." in base else ""
        preferred = [c for c in found if c[0].stem == module]
        return preferred or found


def root_framework(base: str) -> str | None:
    """The framework whose root base class the resolved name ``base`` is: the adapter that claims its package,
    else one that claims unqualified names (a star import, a relative import: the class name is all we have),
    else ``None`` (not a root base)."""
    recognitions = [(a.name, a.recognition) for a in registry.adapters()]
    by_package = next((name for name, r in recognitions if r.claims(base)), None)
    if by_package is not None:
        return by_package
    short = base.rsplit(".", 1)[-1]
    return next((name for name, r in recognitions if r.claims_unqualified and short in r.base_classes), None)
