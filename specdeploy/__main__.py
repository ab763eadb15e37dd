"""Allow ``python -m specdeploy``."""

from specdeploy.cli import main

raise SystemExit(main())
