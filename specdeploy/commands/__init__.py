"""One module per ``specdeploy`` sub-command; each exposes ``register(subparsers)``.

Modules are imported only when their command runs, so ``specdeploy table``
does not pay for the simulator and ``specdeploy dev`` does not pay for numpy.
"""
