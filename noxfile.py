"""nox sessions for spyre-adapter.

    nox                                  tests on the development torch (offline here)
    nox -s "compat(torch='2.9.1')"       one release of the compatibility matrix
    nox -t quick      /  nox -t full     a small subset / every supported release
    nox -s report                        compat_matrix/REPORT.md + report.png from committed data
    nox -s surface                       re-extract per-release surface JSON (downloads wheels)
    nox -s api_index                     regenerate the codemods' per-release API index (downloads wheels)
    nox --list --json                    what CI turns into its job matrix

Environment: UV_CACHE_DIR (default ~/.cache/uv, shared by every compat venv: one
download per torch release), SPYRE_MATRIX_PRUNE=1 deletes each compat venv when
its session ends.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from pathlib import Path

import nox

ROOT = Path(__file__).resolve().parent


def _load_catalog():  # -> spyre_matrix.catalog.Catalog
    """The release catalog, read through this checkout's own spyre_matrix.

    nox's interpreter need not have the project installed (CI installs only nox),
    so the package is loaded from its folder (``compat_matrix/`` is ``spyre_matrix``).
    """
    if "spyre_matrix" not in sys.modules:
        package = ROOT / "compat_matrix"
        spec = importlib.util.spec_from_file_location(
            "spyre_matrix", package / "__init__.py", submodule_search_locations=[str(package)]
        )
        module = importlib.util.module_from_spec(spec)
        sys.modules["spyre_matrix"] = module
        spec.loader.exec_module(module)
    from spyre_matrix.catalog import load_catalog

    return load_catalog()


CATALOG = _load_catalog()
PYTHON = CATALOG.session_python
# One shared uv cache: a torch release (CUDA build, ~6.6 GB with its nvidia
# wheels) is downloaded once and hardlinked into each venv (~6 MB per venv).
os.environ.setdefault("UV_CACHE_DIR", str(Path.home() / ".cache" / "uv"))

nox.options.sessions = ["tests"]  # plain `nox` is the offline default
nox.options.error_on_missing_interpreters = True


def _install_project(session: nox.Session, *requirements: str, extras: str = "test") -> None:
    """The project (editable) plus pinned requirements, resolved together so nothing else moves torch."""
    session.install(*requirements, "-e", f".[{extras}]" if extras else ".")


# -- everyday --------------------------------------------------------------------------------


@nox.session(python=PYTHON, venv_backend="venv")
def tests(session: nox.Session) -> None:
    """Full test suite on the development torch release.

    pip (not uv) installs here: it reads this machine's local wheel directory and
    index, so the session works offline with the local CPU build.
    """
    _install_project(session, f"torch=={CATALOG.development}", extras="test,plot,hf")
    session.run("python", "-m", "pytest", *(session.posargs or ["-q"]))


# -- compatibility matrix --------------------------------------------------------------------


@nox.session(python=PYTHON, venv_backend="uv")
@nox.parametrize("torch", [nox.param(r.torch, tags=r.nox_tags) for r in CATALOG.supported])
def compat(session: nox.Session, torch: str) -> None:
    """One matrix cell: install that torch (and the `hf` extra where transformers supports
    it: the model tests run there too), run the whole suite and the probe, write
    compat_matrix/results/<release>.json (+ JUnit XML under results/junit/).

    The session fails when the release is not green, after the result is written.
    Extra arguments after `--` go to pytest.
    """
    release = CATALOG.get(torch)
    for tool in release.tools:
        if shutil.which(tool) is None:
            session.warn(f"{tool} not found: torch {torch} needs it ({release.device}); expect failures")
    # The transformers model tests run wherever the `hf` extra supports this torch.
    extras = "test,hf" if CATALOG.installs_hf(release) else "test"
    try:
        _install_project(session, *release.index_args(), *release.pip_requirements(), extras=extras)
        session.run("python", "-m", "spyre_matrix", "compat-run", "--torch", torch, "--", *session.posargs)
    finally:
        if os.environ.get("SPYRE_MATRIX_PRUNE") == "1":
            shutil.rmtree(session.virtualenv.location, ignore_errors=True)
            session.log(f"pruned {session.virtualenv.location}")


# -- reports ---------------------------------------------------------------------------------


@nox.session(python=PYTHON, venv_backend="uv|venv")
def report(session: nox.Session) -> None:
    """Render compat_matrix/REPORT.md and report.png from committed results and surface data.

    Needs no torch: the project is installed without dependencies. `-- --check`
    only verifies the committed report is current.
    """
    session.install("packaging", "matplotlib")
    session.install("--no-deps", "-e", ".")
    session.run("python", "-m", "spyre_matrix", "report", "--vendor", "examples", *session.posargs)


@nox.session(python=PYTHON, venv_backend="uv|venv")
def surface(session: nox.Session) -> None:
    """Re-extract compat_matrix/surface/<release>.json from release wheels (static, never imports torch).

    Downloads only releases missing from --src (default: torch-src in the user's cache folder, see
    spyre_matrix.paths). Pass
    releases or options after `--`, e.g. `nox -s surface -- 2.15.0 --src DIR`.
    """
    session.install("packaging", "pip")  # pip: `pip download` of the wheels
    session.install("--no-deps", "-e", ".")
    session.run("python", "-m", "spyre_matrix", "surface", "--fetch", *session.posargs)


@nox.session(python=PYTHON, venv_backend="uv|venv")
def api_index(session: nox.Session) -> None:
    """Regenerate codemods/data/api_index.json.gz, the per-release index of torch._inductor,
    torch._dynamo and torch._functorch (modules, names, class bases, signatures) the upgrade codemod
    and the stable API's table check against.

    For each supported release: the .py files of those packages are read from an extracted
    tree under --src when there is one (e.g. `-- --src ~/torch-src`), else from the release
    wheel, which is downloaded (~1 GB, CUDA build), read and deleted. Never imports torch.
    Pass releases after `--` to index only those (the committed file holds all supported ones).
    """
    session.install("packaging", "libcst>=1.1", "pip")  # pip: `pip download` of the wheels
    session.install("--no-deps", "-e", ".")
    session.run("python", "-m", "spyre_codemods.index_build", "--fetch", *session.posargs)


# -- documentation and typing ----------------------------------------------------------------

#: What `nox -s docs` installs besides the project (also the `docs` extra in pyproject.toml).
DOCS_REQUIREMENTS = ("mkdocs>=1.6,<2", "mkdocs-material>=9.5", "mkdocstrings[python]>=0.30", "griffe>=1.6", "ruff")
#: The project's own dependencies the docs hooks import (spyre_matrix, spyre_codemods); not torch.
DOCS_PROJECT_DEPENDENCIES = ("packaging>=23", "libcst>=1.1", "rich>=13")


@nox.session(python=PYTHON, venv_backend="uv|venv")
def docs(session: nox.Session) -> None:
    """Build the documentation site into site/ with `mkdocs build --strict` (a warning fails it).

    Needs no torch: the API reference is read from the stable API's sources, the
    compatibility table from compat_matrix/, the codemod examples by running the
    codemods (docs/hooks/site.py). `nox -s docs -- serve` previews instead.
    """
    session.install(*DOCS_REQUIREMENTS, *DOCS_PROJECT_DEPENDENCIES)
    session.install("--no-deps", "-e", ".")
    session.env["NO_MKDOCS_2_WARNING"] = "1"  # Material's banner about MkDocs 2 is not a build problem
    session.run("mkdocs", *(session.posargs or ["build", "--strict"]))


@nox.session(python=PYTHON, venv_backend="venv")
def typecheck(session: nox.Session) -> None:
    """mypy --strict on the stable API (shims/ without the private _torch package), and on
    the example backend as a vendor sees it: through the installed py.typed package.

    Imports are followed into spyre_shims._torch and torch without reporting their
    errors. pip (not uv), like `tests`, for the local development torch wheel.
    """
    _install_project(session, f"torch=={CATALOG.development}", "mypy>=1.11", extras="")
    session.run("python", "tools/typecheck.py")


# -- differential corpus -----------------------------------------------------------------------


@nox.session(python=PYTHON, venv_backend="venv")
def opinfo(session: nox.Session) -> None:
    """The full OpInfo sweep (every op_db op x fp32/fp16/bf16, ~1 h on 2 cores):
    writes results/opinfo/summary.json and SUMMARY.md; fails when any item fails.

    Options after `--` go to `spyre-adapter opinfo` (e.g. `--ops add mul`,
    `--workdir DIR` to resume an interrupted sweep).
    """
    _install_project(session, f"torch=={CATALOG.development}", "expecttest")  # op_db imports expecttest
    session.run("spyre-adapter", "opinfo", *session.posargs)


def _shared(relative: str) -> Path | None:
    """``shared/<relative>`` beside this checkout (the first one going up; a git
    worktree sits one level deeper). The checkout's tooling looks; the installed
    package never does."""
    for parent in ROOT.parents:
        folder = parent / "shared" / relative
        if folder.is_dir():
            return folder
    return None


@nox.session(python=PYTHON, venv_backend="venv")
def models(session: nox.Session) -> None:
    """The transformers family sweep (every causal-LM family of transformers' auto mapping,
    static and dynamic, on the device against CPU eager; hours on 2 cores): writes
    results/models/sweep.json and SWEEP.md; fails when a family crashes.

    Options after `--` go to `spyre-adapter models --sweep` (e.g. `--families gpt2 opt`,
    `--workdir DIR` to resume an interrupted sweep).
    """
    _install_project(session, f"torch=={CATALOG.development}", extras="test,hf")
    session.run("spyre-adapter", "models", "--sweep", *session.posargs)


def _shared_workload_files() -> list[str]:
    """The real-model workload files: ``shared/workloads`` beside this checkout."""
    folder = _shared("workloads")
    return sorted(str(p) for p in folder.glob("*.yaml") if p.name != "template.yaml") if folder is not None else []


@nox.session(python=PYTHON, venv_backend="venv")
def workloads(session: nox.Session) -> None:
    """Every case of the real-model workload files (shared/workloads beside the checkout by default,
    or the files given after `--`): one JSON per file in results/workloads/."""
    _install_project(session, f"torch=={CATALOG.development}")
    files = session.posargs or _shared_workload_files()
    for path in files:
        out = ROOT / "results" / "workloads" / f"{Path(path).stem}.json"
        session.run("spyre-adapter", "workloads", path, "--json", str(out))


# -- performance -------------------------------------------------------------------------------


@nox.session(python=PYTHON, venv_backend="venv")
def bench(session: nox.Session) -> None:
    """The scheduler/emulator benchmark (GEMMs, chains, workload cases, attention, decoder
    block, calibration): results/bench/bench.json. Options after `--` go to `spyre-adapter bench`
    (e.g. `--quick`, `--machine cores=8`)."""
    _install_project(session, f"torch=={CATALOG.development}")
    out = ROOT / "results" / "bench" / "bench.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    workloads = () if "--quick" in session.posargs or "--workloads" in session.posargs else (
        "--workloads", *_shared_workload_files())
    reference = _shared("reference/torch-spyre-cost-model")
    named = ("--reference", str(reference)) if reference is not None and "--reference" not in session.posargs else ()
    session.run("spyre-adapter", "bench", "--json", str(out), *workloads, *named, *session.posargs)
