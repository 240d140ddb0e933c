"""The release catalog (``releases.toml``): which PyTorch releases exist for us and what each needs."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.specifiers import SpecifierSet
from packaging.version import Version

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef,import-not-found,unused-ignore]

#: Package data beside this module (read without the rest of the package: the
#: noxfile loads this module alone, in an interpreter without the project installed).
CATALOG_PATH = Path(__file__).resolve().with_name("releases.toml")

# Every supported release carries this tag; "quick" is opted into per release.
FULL_TAG = "full"
SESSION_NAME = "compat"
PYPI = "pypi"


@dataclass(frozen=True)
class Release:
    """One PyTorch release: the latest patch of a minor."""

    torch: str
    supported: bool
    python: str
    index: str
    requires: tuple[str, ...]
    tools: tuple[str, ...]
    tags: tuple[str, ...]
    device: str
    notes: str

    @property
    def version(self) -> Version:
        return Version(self.torch)

    @property
    def minor(self) -> str:
        return f"{self.version.major}.{self.version.minor}"

    @property
    def session_id(self) -> str:
        """The nox session name, exactly as ``nox --list --json`` prints it."""
        return f"{SESSION_NAME}(torch={self.torch!r})"

    @property
    def nox_tags(self) -> list[str]:
        return [FULL_TAG, *self.tags] if self.supported else []

    def pip_requirements(self) -> list[str]:
        """What a session installs beside the project: this torch plus the release's extras."""
        return [f"torch=={self.torch}", *self.requires]

    def index_args(self) -> list[str]:
        """Installer arguments selecting the wheel index (none for plain PyPI)."""
        # An extra index (not a replacement): torch's own dependencies stay on PyPI.
        return [] if self.index == PYPI else ["--extra-index-url", self.index]


@dataclass(frozen=True)
class Catalog:
    """All releases, oldest first."""

    releases: tuple[Release, ...]
    development: str  # the release day-to-day tests and CI run on
    #: torch releases the `hf` extra's transformers supports (a PEP 440 specifier; "": none)
    hf_torch: str = ""

    def __iter__(self) -> Iterator[Release]:
        return iter(self.releases)

    def __len__(self) -> int:
        return len(self.releases)

    @property
    def session_python(self) -> str:
        """The one interpreter every compat session uses (session ids carry no python)."""
        pythons = {r.python for r in self.supported}
        if len(pythons) != 1:
            raise ValueError(f"supported releases must share one python, got {sorted(pythons)}")
        return pythons.pop()

    @property
    def supported(self) -> tuple[Release, ...]:
        return tuple(r for r in self.releases if r.supported)

    def installs_hf(self, release: Release) -> bool:
        """Whether ``release``'s session installs the `hf` extra (transformers) and so runs the model tests."""
        return bool(self.hf_torch) and release.version in SpecifierSet(self.hf_torch)

    def hf_cell(self, release: Release, result: Mapping[str, Any] | None) -> str:
        """The compatibility table's model-test cell: how the release's result ran
        the transformers model tests, or why its session does not install them."""
        if not self.installs_hf(release):
            return f"not installed: the hf extra needs torch {self.hf_torch or '(none supported)'}"
        hf = (result or {}).get("hf")
        if not hf:
            return "not recorded" if result else "not run"
        if hf.get("transformers") is None:
            return "not installed in the session"
        t = hf.get("model_tests", {})
        return (f"{t.get('passed', 0)} passed, {t.get('failed', 0)} failed, {t.get('skipped', 0)} skipped "
                f"(transformers {hf['transformers']})")

    def tagged(self, tag: str) -> tuple[Release, ...]:
        return tuple(r for r in self.releases if tag in r.nox_tags)

    def get(self, torch: str) -> Release:
        wanted = Version(torch)
        for release in self.releases:
            if release.version == wanted:
                return release
        raise KeyError(f"torch {torch} is not in the release catalog")

    def previous(self, release: Release) -> Release | None:
        """The release before ``release`` in the catalog (the churn baseline)."""
        index = self.releases.index(release)
        return self.releases[index - 1] if index else None

    def pairs(self) -> Iterator[tuple[Release | None, Release]]:
        """(previous, release) for every release; previous is None for the oldest."""
        for release in self.releases:
            yield self.previous(release), release


def _release(entry: Mapping[str, Any], defaults: Mapping[str, Any]) -> Release:
    merged = {**defaults, **entry}
    # requires/tools extend the defaults (a release adds what it needs on top).
    for key in ("requires", "tools"):
        merged[key] = [*defaults.get(key, []), *entry.get(key, [])]
    return Release(
        torch=str(merged["torch"]),
        supported=bool(merged.get("supported", True)),
        python=str(merged["python"]),
        index=str(merged.get("index", PYPI)),
        requires=tuple(merged["requires"]),
        tools=tuple(merged["tools"]),
        tags=tuple(merged.get("tags", [])),
        device=str(merged.get("device", "")),
        notes=str(merged.get("notes", "")),
    )


def parse_catalog(data: Mapping[str, Any]) -> Catalog:
    """Build a catalog from the parsed TOML document; validates what sessions rely on."""
    defaults = data.get("defaults", {})
    releases = [_release(entry, defaults) for entry in data.get("release", [])]
    if not releases:
        raise ValueError("release catalog lists no [[release]]")
    versions = [r.version for r in releases]
    if versions != sorted(versions) or len(set(versions)) != len(versions):
        raise ValueError("catalog releases must be unique and listed oldest first")
    minors = [r.minor for r in releases]
    if len(set(minors)) != len(minors):
        raise ValueError("catalog lists one release (the latest patch) per minor")
    hf_torch = str(data.get("hf", {}).get("torch", ""))
    if hf_torch:
        SpecifierSet(hf_torch)  # raises on a malformed specifier
    catalog = Catalog(tuple(releases), development=str(data.get("development", releases[-1].torch)),
                      hf_torch=hf_torch)
    if not catalog.get(catalog.development).supported:
        raise ValueError(f"development release {catalog.development} must be a supported release")
    return catalog


def load_catalog(path: Path | None = None) -> Catalog:
    with open(path or CATALOG_PATH, "rb") as handle:
        return parse_catalog(tomllib.load(handle))


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def render_compat_table(
    catalog: Catalog, statuses: Mapping[str, str] | None = None, *, only_supported: bool = True,
    results: Mapping[str, Mapping[str, Any]] | None = None,
) -> str:
    """The docs compatibility table as Markdown.

    ``statuses`` maps a torch release to its matrix status ("pass"/"fail");
    releases without one show "not run". ``results`` (release -> result) fill
    the transformers model-test column.
    """
    statuses = statuses or {}
    results = results or {}
    rows = [
        "| torch | status | device route | nox session | transformers model tests | notes |",
        "|---|---|---|---|---|---|",
    ]
    releases: Iterable[Release] = catalog.supported if only_supported else catalog
    for r in releases:
        session = f"`{r.session_id}`" if r.supported else "static only"
        status = statuses.get(r.torch, "not run")
        models = _cell(catalog.hf_cell(r, results.get(r.torch))) if r.supported else "-"
        rows.append(f"| {r.torch} | {status} | {r.device} | {session} | {models} | {_cell(r.notes)} |")
    return "\n".join(rows) + "\n"
