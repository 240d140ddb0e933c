"""libcst codemods for spyre-adapter.

* ``upgrade``: release-keyed rules (:mod:`spyre_codemods.rule_table`) that move vendor
  Inductor backend code from one torch release's spelling to another's, plus checks
  against a per-release API index (:mod:`spyre_codemods.api_index`: imports that must
  resolve, signature changes) and release advisories (:mod:`spyre_codemods.advisories`);
* ``migrate``: moves direct ``torch._inductor``/``torch._dynamo`` usage onto the stable
  API (``spyre_shims.compat``), leaving TODOs where there is no equivalent.

The codemods read and rewrite source text only: they never import torch internals
nor execute the code they process.
"""

from .migrate import MigrateCommand
from .releases import KNOWN_RELEASES, Release, parse_release
from .rule_table import RULES
from .upgrade import UpgradeCommand

__all__ = ["KNOWN_RELEASES", "MigrateCommand", "RULES", "Release", "UpgradeCommand", "parse_release"]
