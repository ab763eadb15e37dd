"""A serving certificate for the fault proxy, signed by the local cluster's CA.

The operator verifies the API server against the cluster CA from its
kubeconfig; a proxy that terminates TLS must therefore present a certificate
from that CA for 127.0.0.1, or the operator would (rightly) refuse it.
"""

from __future__ import annotations

import secrets
import subprocess
from pathlib import Path

from e2e.localcluster.pki import Pki

NAME = "chaos-proxy"
EXTENSIONS = (
    "basicConstraints=CA:FALSE",
    "keyUsage=critical,digitalSignature,keyEncipherment",
    "extendedKeyUsage=serverAuth",
    "subjectAltName=IP:127.0.0.1,DNS:localhost",
)


def _openssl(*args: str, cwd: Path) -> None:
    done = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"openssl {args[0]} failed: {done.stderr.strip()}")


def proxy_certificate(pki: Pki) -> tuple[Path, Path]:
    """(cert, key) for the proxy in the cluster's PKI directory; made once, then reused."""
    cert, key = pki.cert(NAME), pki.key(NAME)
    if cert.exists() and key.exists():
        return cert, key
    workdir = pki.dir
    _openssl(
        "genpkey",
        "-algorithm",
        "EC",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-out",
        str(key),
        cwd=workdir,
    )
    csr, ext = workdir / f"{NAME}.csr", workdir / f"{NAME}.ext"
    ext.write_text("\n".join(EXTENSIONS) + "\n")
    _openssl("req", "-new", "-key", str(key), "-subj", f"/CN={NAME}", "-out", str(csr), cwd=workdir)
    _openssl(
        "x509",
        "-req",
        "-in",
        str(csr),
        "-CA",
        str(pki.ca_cert),
        "-CAkey",
        str(pki.ca_key),
        "-set_serial",
        str(secrets.randbits(63)),
        "-days",
        "30",
        "-sha256",
        "-extfile",
        str(ext),
        "-out",
        str(cert),
        cwd=workdir,
    )
    csr.unlink()
    ext.unlink()
    return cert, key
