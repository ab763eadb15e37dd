"""The cluster's PKI, made with the openssl command line.

Real TLS and real client-certificate authentication, so that what a test
sees (401s, 403s, identities in RBAC) is what a cluster does: a CA, a serving
certificate for the API server whose SANs cover the in-cluster names, client
certificates whose CN/O become user and groups (``system:masters`` for the
admin, the well-known component users for controller-manager and scheduler),
and an RSA key pair that signs ServiceAccount tokens.
"""

from __future__ import annotations

import secrets
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

# SANs a client may use for the API server: loopback, the first address of
# --service-cluster-ip-range (the `kubernetes` Service), the in-cluster names.
APISERVER_SANS = (
    "IP:127.0.0.1",
    "IP:10.0.0.1",
    "DNS:localhost",
    "DNS:kubernetes",
    "DNS:kubernetes.default",
    "DNS:kubernetes.default.svc",
    "DNS:kubernetes.default.svc.cluster.local",
)
DAYS = "365"


@dataclass(frozen=True)
class Pki:
    """Paths of the files in ``<workdir>/pki``."""

    dir: Path

    @property
    def ca_cert(self) -> Path:
        return self.dir / "ca.crt"

    @property
    def ca_key(self) -> Path:
        return self.dir / "ca.key"

    @property
    def sa_key(self) -> Path:
        return self.dir / "sa.key"

    @property
    def sa_pub(self) -> Path:
        return self.dir / "sa.pub"

    def cert(self, name: str) -> Path:
        return self.dir / f"{name}.crt"

    def key(self, name: str) -> Path:
        return self.dir / f"{name}.key"


# Client identities: name -> (CN, O). CN is the user, O the group.
CLIENTS = {
    "admin": ("specdeploy-admin", "system:masters"),
    "controller-manager": ("system:kube-controller-manager", ""),
    "scheduler": ("system:kube-scheduler", ""),
}


def _openssl(*args: str, cwd: Path) -> None:
    done = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"openssl {args[0]} failed: {done.stderr.strip()}")


def _ec_key(path: Path) -> None:
    # ECDSA P-256: fast to generate on a busy 2-core machine, accepted by every component.
    _openssl(
        "genpkey",
        "-algorithm",
        "EC",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-out",
        str(path),
        cwd=path.parent,
    )


def sign(pki: Pki, name: str, subject: str, extensions: list[str]) -> None:
    """Key, CSR and CA-signed certificate for ``name`` (components, the chaos proxy)."""
    _ec_key(pki.key(name))
    csr = pki.dir / f"{name}.csr"
    ext = pki.dir / f"{name}.ext"
    ext.write_text("\n".join(extensions) + "\n")
    _openssl(
        "req", "-new", "-key", str(pki.key(name)), "-subj", subject, "-out", str(csr), cwd=pki.dir
    )
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
        DAYS,
        "-sha256",
        "-extfile",
        str(ext),
        "-out",
        str(pki.cert(name)),
        cwd=pki.dir,
    )
    csr.unlink()
    ext.unlink()


def require_openssl() -> None:
    if shutil.which("openssl") is None:
        raise RuntimeError(
            "openssl is required for the local cluster's PKI (apt-get install openssl)"
        )


def create(directory: Path) -> Pki:
    """Create a fresh PKI in ``directory`` (kept across restarts of the same work dir)."""
    require_openssl()
    pki = Pki(directory)
    if pki.ca_cert.exists() and pki.sa_pub.exists() and pki.cert("admin").exists():
        return pki
    directory.mkdir(parents=True, exist_ok=True)
    _ec_key(pki.ca_key)
    _openssl(
        "req",
        "-x509",
        "-new",
        "-key",
        str(pki.ca_key),
        "-subj",
        "/CN=specdeploy-local-ca",
        "-days",
        DAYS,
        "-sha256",
        "-out",
        str(pki.ca_cert),
        cwd=directory,
    )
    sign(
        pki,
        "apiserver",
        "/CN=kube-apiserver",
        [
            "basicConstraints=CA:FALSE",
            "keyUsage=critical,digitalSignature,keyEncipherment",
            "extendedKeyUsage=serverAuth",
            "subjectAltName=" + ",".join(APISERVER_SANS),
        ],
    )
    for name, (cn, group) in CLIENTS.items():
        subject = f"/CN={cn}" + (f"/O={group}" if group else "")
        sign(
            pki,
            name,
            subject,
            [
                "basicConstraints=CA:FALSE",
                "keyUsage=critical,digitalSignature,keyEncipherment",
                "extendedKeyUsage=clientAuth",
            ],
        )
    # RSA for ServiceAccount tokens (RS256): the most widely verifiable JWT algorithm.
    _openssl(
        "genpkey",
        "-algorithm",
        "RSA",
        "-pkeyopt",
        "rsa_keygen_bits:2048",
        "-out",
        str(pki.sa_key),
        cwd=directory,
    )
    _openssl("pkey", "-in", str(pki.sa_key), "-pubout", "-out", str(pki.sa_pub), cwd=directory)
    return pki
