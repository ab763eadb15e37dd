"""``python -m e2e.emulated.vllm_serve <vllm serve's arguments>``: the EMULATED vLLM server.

What the kubelet stand-in runs instead of ``vllm serve`` for a serving pod on
a fake GPU node, with the container's arguments and environment unchanged
(ports rewritten to free host ports). Exit codes: 0 after a clean shutdown
(SIGTERM/SIGINT), 1 when it cannot start (the log says why), 2 for a command
line that does not parse.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Sequence

from e2e.emulated.args import ArgsError, parse_args
from e2e.emulated.server import serve
from specdeploy.runtime.vllm_addon.assembly import ensure_logging

log = logging.getLogger("specdeploy.emulated")


def main(argv: Sequence[str] | None = None) -> int:
    ensure_logging()
    try:
        args = parse_args(sys.argv[1:] if argv is None else argv)
    except ArgsError as err:
        log.error("EMULATED vLLM: %s", err)
        return 2
    return asyncio.run(serve(args))


if __name__ == "__main__":
    sys.exit(main())
