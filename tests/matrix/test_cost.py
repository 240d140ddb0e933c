"""Maintenance-cost inputs from the repo: release-specific shim adapters and vendor lines."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from spyre_matrix.adapters import active_adapters, code_lines, load_adapters, read_adapter
from spyre_matrix.paths import VENDOR_DIRS
from spyre_matrix.vendor import scan_source, scan_vendor


def _adapter(directory: Path, name: str, body: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.py"
    path.write_text(textwrap.dedent(body).lstrip("\n"))
    return path


def test_code_lines_skip_blank_and_comment_lines() -> None:
    source = '# header\n\nimport torch  # trailing comment counts\n\n    # indented comment\nx = """a\n\nb"""\n'
    assert code_lines(source) == 1 + 3  # the import, and every line of the string


def test_adapters_are_read_without_importing(tmp_path: Path) -> None:
    directory = tmp_path / "adapters"
    _adapter(directory, "old_sizevars", '''
        """Before 2.11."""
        import torch._inductor.this_does_not_exist  # would fail if imported

        RELEASES = "<2.11"
        FEATURES = ["sizevars"]

        def hint(sizevars, expr):
            return sizevars.size_hint(expr)
    ''')
    _adapter(directory, "python_device", 'RELEASES = ">=2.10"\nFEATURES = ["device"]\n')
    _adapter(directory, "helpers", "def shared():\n    return 1\n")  # no RELEASES: not release-specific
    (directory / "__init__.py").write_text('RELEASES = ">=0"\n')
    adapters = load_adapters(directory)
    assert [a.name for a in adapters] == ["old_sizevars", "python_device"]
    old = adapters[0]
    assert old.features == ("sizevars",) and old.lines == 6
    assert [a.name for a in active_adapters(adapters, "2.9.1")] == ["old_sizevars"]
    assert [a.name for a in active_adapters(adapters, "2.10.0")] == ["old_sizevars", "python_device"]
    assert [a.name for a in active_adapters(adapters, "2.11.0")] == ["python_device"]


def test_version_ranges_compare_as_versions_not_strings(tmp_path: Path) -> None:
    adapter = read_adapter(_adapter(tmp_path, "a", 'RELEASES = ">=2.9,<2.10"\n'))
    assert adapter.active_for("2.9.1") and not adapter.active_for("2.10.0")  # "2.10" < "2.9" as strings


def test_invalid_specifier_is_reported_with_its_file(tmp_path: Path) -> None:
    path = _adapter(tmp_path, "bad", 'RELEASES = "2.9 or newer"\n')
    with pytest.raises(ValueError, match="bad.py"):
        read_adapter(path)


def test_missing_adapters_folder_means_none(tmp_path: Path) -> None:
    assert load_adapters(tmp_path / "absent") is None
    assert active_adapters(None, "2.9.1") == []


VENDOR = '''
import torch
import torch._dynamo
from torch._inductor import config
from torch import _functorch
from torch.utils import backend_registration

if torch.__version__ >= "2.9":
    pass
torch._inductor.config.debug = True
ok = torch.compile
'''


def test_vendor_scan_flags_every_release_specific_line() -> None:
    found = scan_source(VENDOR, "vendor.py")
    assert [line.line for line in found] == [3, 4, 5, 8, 10]
    assert found[3].reason == "compares torch.__version__"


def test_stable_api_code_has_no_release_specific_lines() -> None:
    assert scan_source("import torch\nfrom spyre_shims import api\nx = torch.ones(2)\n", "v.py") == []


def test_spyre_adapter_needs_no_change_per_release() -> None:
    # The product's claim: the reference backend is built on the stable API only.
    assert scan_vendor() == [], "spyre_adapter/ reaches into torch internals or branches on torch.__version__"
    assert (VENDOR_DIRS[0] / "backend" / "spyre.py").is_file()  # the scan saw the installed backend, not an empty folder
