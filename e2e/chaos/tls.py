"""A serving certificate for the fault proxy, signed by the local cluster's CA.

The operator verifies the API server against the cluster CA from its
kubeconfig; a proxy that terminates TLS must therefore present a certificate
from that CA for 127.0.0.1, or the operator would (rightly) refuse it.
"""

from __future__ import annotations

from pathlib import Path

from e2e.localcluster import pki as cluster_pki
from e2e.localcluster.pki import Pki

NAME = "chaos-proxy"
EXTENSIONS = [
    "basicConstraints=CA:FALSE",
    "keyUsage=critical,digitalSignature,keyEncipherment",
    "extendedKeyUsage=serverAuth",
    "subjectAltName=IP:127.0.0.1,DNS:localhost",
]


def proxy_certificate(pki: Pki) -> tuple[Path, Path]:
    """(cert, key) for the proxy in the cluster's PKI directory; made once, then reused."""
    cert, key = pki.cert(NAME), pki.key(NAME)
    if not (cert.exists() and key.exists()):
        cluster_pki.sign(pki, NAME, f"/CN={NAME}", EXTENSIONS)
    return cert, key
