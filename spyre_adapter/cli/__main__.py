import sys

from spyre_adapter.cli.main import main

sys.exit(main())
