"""Running a codemod over files: pre-filter, one parse, transform, verify, write.

Per file: bytes are read once; a compiled regex over those bytes skips files no
rule could touch (most of a tree); the rest are parsed once with all rules
batched in one command. A file is only ever rewritten when the new bytes differ,
still compile (``compile()`` only: nothing is executed), and then atomically.
"""

from __future__ import annotations

import difflib
import multiprocessing
import re
import time
import traceback
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import libcst as cst
from libcst.codemod import CodemodContext
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

from .api_index import load_index
from .base import SOURCE_KEY, RewriteCommand
from .fileio import atomic_write, iter_python_files, module_names
from .migrate import MigrateCommand
from .names import INTERNAL_PREFIXES
from .redesigns import select_changes
from .report import FileResult, RunReport
from .rule_table import RULES
from .rules import Rule, RuleSelection, select_rules
from .signature_table import EXTERNAL
from .upgrade import UpgradeCommand

__all__ = ["Job", "process_file", "run"]

Mode = Literal["diff", "check", "write"]

# migrate: anything that can name an internal, plus the call patterns it rewrites
_MIGRATE_TRIGGERS = (
    *(p.rpartition(".")[2] for p in INTERNAL_PREFIXES),
    "sizevars", "get_unbacked_symbol_uses", "get_free_symbol_uses",
)


@dataclass(frozen=True)
class Job:
    """What to run on every file (picklable: it crosses into worker processes)."""

    command: Literal["upgrade", "migrate"]
    source: str | None = None
    target: str | None = None
    rule_ids: tuple[str, ...] | None = None
    mode: Mode = "diff"
    #: also apply rules whose old spelling still works on ``target``
    modernize: bool = False

    def rules(self) -> tuple[Rule, ...]:
        """The rule table, or the subset named by ``rule_ids``."""
        if self.rule_ids is None:
            return RULES
        wanted = set(self.rule_ids)
        return tuple(r for r in RULES if r.id in wanted)

    def selection(self) -> RuleSelection:
        """The rules this upgrade applies (and those it defers to ``--modernize``)."""
        assert self.source is not None and self.target is not None
        return select_rules(self.rules(), self.source, self.target, modernize=self.modernize)

    def make_command(self, context: CodemodContext) -> RewriteCommand:
        """A fresh command instance for one file."""
        if self.command == "upgrade":
            assert self.source is not None and self.target is not None
            return UpgradeCommand(context, self.source, self.target, self.rules(), modernize=self.modernize,
                                  index_checks=self.rule_ids is None)
        return MigrateCommand(context, self.source, self.target)

    def prefilter(self) -> Callable[[bytes, str | None], bool]:
        """A cheap test over raw bytes (and the file's package): ``False`` proves the
        job has nothing to do in the file."""
        if self.command == "migrate":
            any_word = re.compile(b"|".join(re.escape(w.encode()) for w in _MIGRATE_TRIGGERS))
            # inside torch itself (Inductor's own backends) internals are reached by relative imports
            return lambda data, package: any_word.search(data) is not None or (
                package is not None and package.startswith(INTERNAL_PREFIXES))
        selection = self.selection()
        rules_fire = _words_test(selection)
        if self.rule_ids is not None:  # named rules only: no index checks
            return lambda data, package: rules_fire(data)
        # The index checks (imports, signatures, advisories) concern code that reaches
        # torch internals: by name, or by relative import inside torch itself.
        internals = re.compile(rb"\b(?:_inductor|_dynamo)\b")
        words = {w for a in select_changes(selection.source, selection.target) for _, w in a.methods}
        words |= {e.method for e in EXTERNAL}
        methods = re.compile(rb"\b(?:" + b"|".join(re.escape(w.encode()) for w in sorted(words)) + rb")\b") \
            if words else None

        def test(data: bytes, package: str | None) -> bool:
            return rules_fire(data) or internals.search(data) is not None \
                or (package is not None and (package == "torch" or package.startswith("torch."))) \
                or (methods is not None and methods.search(data) is not None)

        return test

    def optional_hits(self) -> Callable[[bytes], list[str]]:
        """Ids of the rules left to ``--modernize`` that may match a file's bytes."""
        if self.command != "upgrade":
            return lambda data: []
        selection = self.selection()
        tests = [(r.id, _words_test(RuleSelection(selection.source, selection.target, (r,))))
                 for r in selection.deferred]
        return lambda data: [rule_id for rule_id, test in tests if test(data)]


def _words_test(selection: RuleSelection) -> Callable[[bytes], bool]:
    """Can any rule of ``selection`` fire in a file with these bytes?"""
    if not selection.rules:
        return lambda data: False
    words = sorted(selection.words, key=len, reverse=True)
    pattern = re.compile(rb"\b(?:" + b"|".join(re.escape(w.encode()) for w in words) + rb")\b")
    # Every group of some rule must be present (e.g. module `ir` AND symbol `LoopBody`).
    return lambda data: selection.may_fire({m.decode() for m in set(pattern.findall(data))}, data)


_PREFILTERS: dict[Job, tuple[Callable[[bytes, str | None], bool], Callable[[bytes], list[str]]]] = {}


def _prefilter(job: Job) -> tuple[Callable[[bytes, str | None], bool], Callable[[bytes], list[str]]]:
    """The job's pre-filter and optional-rule scan, built once per process."""
    if job not in _PREFILTERS:
        _PREFILTERS[job] = (job.prefilter(), job.optional_hits())
    return _PREFILTERS[job]


def _line_count(data: bytes) -> int:
    return data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)


def _diff(path: str, old: cst.Module, new: cst.Module, optional: Sequence[str] = (), target: str | None = None) -> str:
    # git-style a/ b/ prefixes for relative paths, so the output applies with `git apply`
    # (which skips the header lines before `---`)
    before, after = (path, path) if Path(path).is_absolute() else (f"a/{path}", f"b/{path}")
    header = (f"# {path}: not applied, the old spelling still works on {target} (pass --modernize): "
              f"{', '.join(optional)}\n") if optional else ""
    return header + "".join(
        difflib.unified_diff(
            old.code.splitlines(keepends=True), new.code.splitlines(keepends=True),
            fromfile=before, tofile=after,
        )
    )


def _compiles(data: bytes, path: str) -> str | None:
    """``None`` when ``data`` compiles, else the error (compile only, never exec)."""
    try:
        compile(data, path, "exec", dont_inherit=True)
    except (SyntaxError, ValueError) as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


def process_file(path: str | Path, job: Job) -> FileResult:
    """Run ``job`` on one file; write it only in ``write`` mode and only if it changed."""
    path = str(path)
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        return FileResult(path, "error", error=f"cannot read: {exc}")
    result = FileResult(path, "unchanged", lines=_line_count(data))
    full_module, package = module_names(Path(path))
    prefilter, optional_hits = _prefilter(job)
    result.optional = optional_hits(data)
    if not prefilter(data, package):
        result.prefiltered = True
        return result
    try:
        module = cst.parse_module(data)
    except Exception as exc:  # ParserSyntaxError, a bad coding cookie, grammar libcst lacks
        result.status, result.error = "error", f"does not parse: {exc}".splitlines()[0]
        return result
    context = CodemodContext(filename=path, full_module_name=full_module, full_package_name=package,
                             scratch={SOURCE_KEY: data})
    command = job.make_command(context)
    try:
        new_module = command.transform_module(module)
    except Exception as exc:  # a bug in a rule must not take the whole run down
        result.status = "error"
        result.error = f"transform failed: {type(exc).__name__}: {exc}\n{traceback.format_exc(limit=3)}"
        return result
    result.findings = sorted(command.findings, key=lambda f: f.line)
    result.notes = getattr(command, "notes", 0)
    if not result.findings:
        return result  # every edit is recorded: no finding, no change (and no code to generate)
    new_bytes = new_module.bytes
    if new_bytes == data:
        return result
    problem = _compiles(new_bytes, path)
    if problem is not None:
        result.status, result.error = "error", f"result would not compile, file left untouched: {problem}"
        return result
    result.status = "changed"
    if job.mode == "diff":
        result.diff = _diff(path, module, new_module, result.optional, job.target)
    elif job.mode == "write":
        atomic_write(path, new_bytes)
    return result


def _work(args: tuple[str, Job]) -> FileResult:
    return process_file(*args)


def run(
    paths: Sequence[str | Path],
    job: Job,
    jobs: int = 1,
    on_result: Callable[[FileResult], None] | None = None,
    progress: bool = False,
) -> RunReport:
    """Process every file under ``paths``; results come back sorted by path."""
    files = [str(p) for p in iter_python_files(paths)]
    report = RunReport(command=job.command, options={
        "from": job.source, "to": job.target, "mode": job.mode, "jobs": jobs,
        "rules": list(job.rule_ids) if job.rule_ids is not None else None,
    })
    start = time.perf_counter()
    if job.command == "upgrade":
        _warm_up(job)
    results = _iterate(files, job, jobs, progress)
    for result in results:
        report.files.append(result)
        if on_result is not None:
            on_result(result)
    report.seconds = time.perf_counter() - start
    report.files.sort(key=lambda r: r.path)
    return report


_WARM_UP_SOURCE = b"from torch._inductor.virtualized import V\nclass C(V):\n    def f(self):\n        pass\n"


def _warm_up(job: Job) -> None:
    """Build, once and before any worker is forked (they inherit it), what every file of
    an upgrade needs: the API index, its views of --from/--to, the changed signatures,
    the pre-filter."""
    load_index()
    _prefilter(job)
    context = CodemodContext(scratch={SOURCE_KEY: _WARM_UP_SOURCE})
    job.make_command(context).transform_module(cst.parse_module(_WARM_UP_SOURCE))


def _size(path: str) -> int:
    try:
        return Path(path).stat().st_size
    except OSError:
        return 0


def _iterate(files: list[str], job: Job, jobs: int, progress: bool) -> Iterable[FileResult]:
    bar = _progress_bar(len(files), job.command) if progress else None
    try:
        if jobs <= 1 or len(files) <= 1:
            for path in files:
                yield process_file(path, job)
                if bar is not None:
                    bar[0].advance(bar[1])
            return
        ctx = multiprocessing.get_context("fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn")
        # largest files first, one at a time: no worker is left with a big file at the end
        order = sorted(files, key=_size, reverse=True)
        with ctx.Pool(processes=jobs) as pool:
            for result in pool.imap_unordered(_work, [(p, job) for p in order], chunksize=1):
                yield result
                if bar is not None:
                    bar[0].advance(bar[1])
    finally:
        if bar is not None:
            bar[0].stop()


def _progress_bar(total: int, label: str) -> tuple[Progress, TaskID]:

    progress = Progress(
        TextColumn(f"[bold]{label}[/]"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
        console=Console(stderr=True), transient=True,
    )
    progress.start()
    return progress, progress.add_task(label, total=total)
