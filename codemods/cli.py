"""``spyre-adapter upgrade`` and ``spyre-adapter migrate``.

Exit codes: 0 — nothing to change (or changes written / shown); 1 — ``--check`` found
files that need changes; 2 — a file could not be processed (unreadable, does not
parse, or its result would not compile: such files are never written).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from .advisories import ADVISORIES
from .driver import Job, run
from .redesigns import REDESIGNS
from .releases import KNOWN_RELEASES, known_release, parse_release
from .report import FileResult, RunReport, write_json
from .rule_table import RULES
from .rules import select_rules

__all__ = ["register", "main", "rules_markdown", "advisories_markdown", "redesigns_markdown", "EXIT_OK", "EXIT_CHANGES", "EXIT_ERROR"]

EXIT_OK, EXIT_CHANGES, EXIT_ERROR = 0, 1, 2


def _release(text: str) -> str:
    try:
        return str(known_release(text))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a torch release the codemods know (accepted: {KNOWN_RELEASES[0]} to "
            f"{KNOWN_RELEASES[-1]}, e.g. 2.9 or 2.9.1)") from None


def _argument_error(args: argparse.Namespace, argument: str, message: str) -> int:
    """One line naming the argument and what is accepted (as argparse's own errors)."""
    print(f"{args.prog}: error: argument {argument}: {message}", file=sys.stderr)
    return EXIT_ERROR


def _check_paths(args: argparse.Namespace) -> int | None:
    """Validate PATHS and --json before any work (``None`` when fine)."""
    if not args.paths:
        return _argument_error(args, "PATHS", "none given (accepted: Python files or directories)")
    if args.json:
        parent = Path(args.json).resolve().parent
        existing = next((p for p in (parent, *parent.parents) if p.exists()), None)
        if Path(args.json).is_dir() or existing is None or not existing.is_dir():
            return _argument_error(args, "--json", f"cannot write a report to {args.json!r} "
                                                   "(accepted: a file path whose folder exists or can be created)")
    return None


def _jobs(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of worker processes (accepted: an integer >= 1)")
    return value


def _one_line_errors(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Bad arguments: one line naming the argument and what is accepted, exit 2."""

    def error(message: str) -> NoReturn:
        parser.exit(EXIT_ERROR, f"{parser.prog}: error: {message}\n")

    parser.error = error  # type: ignore[method-assign]
    return parser


def _common_options(parser: argparse.ArgumentParser) -> None:
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_const", dest="mode", const="write",
                      help="rewrite files in place (atomically)")
    mode.add_argument("--check", action="store_const", dest="mode", const="check",
                      help="change nothing; exit 1 if any file needs changes")
    parser.set_defaults(mode="diff")
    parser.add_argument("-j", "--jobs", type=_jobs, default=1, metavar="N", help="worker processes (default 1)")
    parser.add_argument("--json", metavar="PATH", help="write a JSON report to PATH")
    parser.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                        help="progress bar on stderr (default: when stderr is a terminal)")
    parser.add_argument("paths", nargs="*", metavar="PATHS", help="files or directories (*.py under them)")


def register(subparsers: Any) -> None:
    """Add ``upgrade`` and ``migrate`` to an argparse ``add_subparsers()`` object."""
    upgrade = _one_line_errors(subparsers.add_parser(
        "upgrade", help="upgrade Inductor backend code across torch releases",
        description="Apply the release-keyed rules needed to move code from --from to --to, check that "
                    "every torch._inductor/_dynamo import resolves on --to, flag signature changes and "
                    "behaviour changes (advisories). Shows a unified diff unless --write or --check is given.",
    ))
    upgrade.add_argument("--from", dest="source", type=_release, required=True, metavar="X",
                         help="torch release the code is written for (e.g. 2.6)")
    upgrade.add_argument("--to", dest="target", type=_release, default=str(KNOWN_RELEASES[-1]), metavar="Y",
                         help=f"torch release to upgrade to (default {KNOWN_RELEASES[-1]})")
    upgrade.add_argument("--rule", dest="rule_ids", action="append", metavar="ID",
                         help="only this rule (repeatable); see --list-rules")
    upgrade.add_argument("--list-rules", action="store_true", help="print the selected rules and exit")
    upgrade.add_argument("--modernize", action="store_true",
                         help="also apply rules whose old spelling still works on --to (deprecated aliases, "
                              "re-exports); without it they are only listed")
    _common_options(upgrade)
    upgrade.set_defaults(func=run_upgrade, prog=upgrade.prog)

    migrate = _one_line_errors(subparsers.add_parser(
        "migrate", help="move torch._inductor/_dynamo usage onto the stable API (spyre_shims.compat)",
        description="Rewrite internal usage that has a stable equivalent; leave a TODO and a report "
                    "entry where there is none. Shows a unified diff unless --write or --check is given.",
    ))
    migrate.add_argument("--from", dest="source", type=_release, default=None, metavar="X",
                         help="torch release the code is written for (maps register_backend_for_device's "
                              "positional arguments)")
    migrate.add_argument("--to", dest="target", type=_release, default=str(KNOWN_RELEASES[-1]), metavar="Y",
                         help="torch release the migrated code must run on: only stable names that resolve there "
                              f"are used (default {KNOWN_RELEASES[-1]}; every stable name resolves on the whole window)")
    _common_options(migrate)
    migrate.set_defaults(func=run_migrate, prog=migrate.prog)


def rules_markdown(source: str | None = None, target: str | None = None) -> str:
    """The rules table as Markdown (all rules, or those selected by source/target)."""
    if source is None:
        rules = RULES
    else:
        selection = select_rules(RULES, source, target or str(KNOWN_RELEASES[-1]))
        rules = selection.rules + selection.deferred
    lines = ["| id | since | old spelling removed in | old | new | confirmed in |", "|---|---|---|---|---|---|"]
    for r in rules:
        until = "kept (still works)" if r.old_works_in(KNOWN_RELEASES[-1]) else \
            str(r.old_removed) if r.old_removed is not None else str(r.since)
        cells = [f"`{r.id}`", str(r.since), until, f"`{r.old_text}`", f"`{r.new_text}`", r.confirmed]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines) + "\n"


def advisories_markdown() -> str:
    """The advisory table as Markdown."""
    lines = ["| id | release | use sites | note | confirmed in |", "|---|---|---|---|---|"]
    for a in ADVISORIES:
        sites = [f"`{q}`" for q in a.qualnames] + [f"`{r or '<obj>'}.{m}`" for r, m in a.methods]
        if a.base is not None:
            sites.append(f"subclasses of `{a.base}`" + (f" overriding {', '.join(f'`{m}`' for m in a.base_methods)}"
                                                        if a.base_methods else ""))
        if a.config_default:
            sites.append(f"Inductor config assignments in a file not mentioning `{a.config_default}`")
        cells = [f"`{a.id}`", str(a.release), ", ".join(sites), a.note, a.confirmed]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines) + "\n"


def redesigns_markdown() -> str:
    """The redesign table as Markdown."""
    lines = ["| id | release | registry or protocol | what changed | what to do | confirmed in |",
             "|---|---|---|---|---|---|"]
    for r in REDESIGNS:
        cells = [f"`{r.id}`", str(r.release), r.registry, r.note, r.action, r.confirmed]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines) + "\n"


def run_upgrade(args: argparse.Namespace) -> int:
    """Entry point of ``upgrade`` (returns the exit code)."""
    if parse_release(args.target) < parse_release(args.source):
        return _argument_error(args, "--to", f"{args.target} is older than --from {args.source} "
                                             f"(accepted: {args.source} to {KNOWN_RELEASES[-1]})")
    known = {r.id for r in RULES}
    unknown = sorted(set(args.rule_ids or ()) - known)
    if unknown:
        return _argument_error(args, "--rule", f"unknown rule id(s) {', '.join(unknown)} "
                                               "(accepted: the ids --list-rules prints)")
    job = Job("upgrade", args.source, args.target, tuple(args.rule_ids) if args.rule_ids else None, args.mode,
              modernize=args.modernize)
    selection = job.selection()
    if args.list_rules:
        for r in selection.rules:
            print(f"{r.since!s:>5}  {r.id:34} {r.old_text}  ->  {r.new_text}")
        for r in selection.deferred:
            print(f"{r.since!s:>5}  {r.id:34} {r.old_text}  ->  {r.new_text}  (only with --modernize)")
        print(f"{len(selection.rules)} rule(s) for {args.source} -> {args.target}"
              + (f", {len(selection.deferred)} more with --modernize" if selection.deferred else ""), file=sys.stderr)
        return EXIT_OK
    return _execute(args, job)


def run_migrate(args: argparse.Namespace) -> int:
    """Entry point of ``migrate`` (returns the exit code)."""
    return _execute(args, Job("migrate", args.source, args.target, None, args.mode))


def _execute(args: argparse.Namespace, job: Job) -> int:
    problem = _check_paths(args)
    if problem is not None:
        return problem
    progress = sys.stderr.isatty() if args.progress is None else args.progress
    out = sys.stdout

    def show(result: FileResult) -> None:
        if result.status == "error":
            print(f"error: {result.path}: {result.error}", file=sys.stderr)
        elif result.status == "changed":
            if job.mode == "diff":
                out.write(result.diff)
            elif job.mode == "check":
                print(f"would change: {result.path}", file=out)
            else:
                print(f"rewrote: {result.path}", file=out)

    report = run(args.paths, job, jobs=max(1, args.jobs), progress=progress)
    for result in report.files:  # sorted by path: the output does not depend on -j
        show(result)
    if args.json:
        write_json(args.json, report.to_json())
    _summary(report)
    if report.errors:
        return EXIT_ERROR
    if job.mode == "check" and report.changed:
        return EXIT_CHANGES
    return EXIT_OK


def _summary(report: RunReport) -> None:
    s = report.summary()
    todos = s["findings"].get("todo", 0)
    skipped = s["findings"].get("skipped", 0)
    changed = "changed" if report.options.get("mode") == "write" else "to change"
    print(f"{report.command}: {s['files']} file(s), {s['changed']} {changed}, {s['errors']} error(s), "
          f"{todos} TODO(s), {skipped} match(es) left in compat blocks, {s['seconds']:.2f}s", file=sys.stderr)
    if s["noted_sites"]:
        print(f"notes: {s['notes']} TODO note(s) in the code for {s['noted_sites']} site(s) "
              f"(advisories: one note per function, class or module)", file=sys.stderr)
    sites = s.get("sites")
    if sites:
        print(f"internal-use sites: {sites['sites']}, rewritten onto stable names {sites['rewritten']} "
              f"({100 * sites['rewritten_share']:.1f} %), TODO {sites['todo']}, left in compat blocks "
              f"{sites['skipped']}", file=sys.stderr)
    redesigns = {r.id for r in REDESIGNS}
    for label, found in (("advisories (behaviour changed behind unchanged names; sites)",
                          {k: n for k, n in report.advisories().items() if k not in redesigns}),
                         ("redesigns (a registry or protocol changed meaning; sites)",
                          {k: n for k, n in report.advisories().items() if k in redesigns})):
        if found:
            print(f"{label}: {', '.join(f'{rule} x{count}' for rule, count in found.items())}", file=sys.stderr)
    optional = sorted({rule for f in report.files for rule in f.optional})
    if optional:
        print(f"not applied (the old spelling still works on {report.options.get('to')}; pass --modernize): "
              f"{', '.join(optional)}", file=sys.stderr)


def build_parser(prog: str = "spyre-adapter") -> argparse.ArgumentParser:
    """A standalone parser with just the codemod subcommands."""
    parser = argparse.ArgumentParser(prog=prog, description="spyre-adapter codemods")
    register(parser.add_subparsers(dest="command", required=True))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m spyre_codemods ...``"""
    args = build_parser().parse_args(argv)
    return int(args.func(args))
