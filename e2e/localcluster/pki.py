"""The cluster's PKI, made with the openssl command line.

Real TLS and real client-certificate authentication, so that what a test
sees (401s, 403s, identities in RBAC) is what a cluster does: a CA, a serving
certificate for the API server whose SANs cover the in-cluster names, client
certificates whose CN/O become user and groups (``system:masters`` for the
admin, the well-known component users for controller-manager and scheduler),
and an RSA key pair that signs ServiceAccount tokens.

A second CA, the front proxy's, signs one client certificate,
``front-proxy-client``, with which the API server's aggregation layer calls
aggregated API servers (prometheus-adapter's ``custom.metrics.k8s.io``) and
passes the caller on in ``X-Remote-User``/``X-Remote-Group``. It is a CA of
its own, as kubeadm makes it, because an aggregated server trusts whatever
that CA signs to speak for any user: the cluster CA signs every component's
client certificate, none of which may do that.
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
    def front_proxy_ca_cert(self) -> Path:
        """``--requestheader-client-ca-file``: the CA aggregated servers trust for the proxy."""
        return self.dir / "front-proxy-ca.crt"

    @property
    def front_proxy_ca_key(self) -> Path:
        return self.dir / "front-proxy-ca.key"

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
FRONT_PROXY_CLIENT = "front-proxy-client"
"""The CN of the aggregation layer's client certificate (``--requestheader-allowed-names``)
and the name of its files (``cert(FRONT_PROXY_CLIENT)``)."""
CLIENT_EXTENSIONS = (
    "basicConstraints=CA:FALSE",
    "keyUsage=critical,digitalSignature,keyEncipherment",
    "extendedKeyUsage=clientAuth",
)


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


def sign(
    pki: Pki,
    name: str,
    subject: str,
    extensions: list[str],
    *,
    ca: tuple[Path, Path] | None = None,
) -> None:
    """Key, CSR and CA-signed certificate for ``name`` (components, the chaos proxy).

    ``ca``: (certificate, key) of the signing CA; the cluster CA when None.
    """
    ca_cert, ca_key = ca or (pki.ca_cert, pki.ca_key)
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
        str(ca_cert),
        "-CAkey",
        str(ca_key),
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


def _self_signed_ca(cert: Path, key: Path, common_name: str) -> None:
    _ec_key(key)
    _openssl(
        "req",
        "-x509",
        "-new",
        "-key",
        str(key),
        "-subj",
        f"/CN={common_name}",
        "-days",
        DAYS,
        "-sha256",
        "-out",
        str(cert),
        cwd=cert.parent,
    )


def create(directory: Path) -> Pki:
    """Create a fresh PKI in ``directory`` (kept across restarts of the same work dir).

    A kept PKI that predates the front proxy gets only the front proxy's files,
    so kubeconfigs handed out earlier keep their CA.
    """
    require_openssl()
    pki = Pki(directory)
    directory.mkdir(parents=True, exist_ok=True)
    if not (pki.ca_cert.exists() and pki.sa_pub.exists() and pki.cert("admin").exists()):
        _create_cluster_pki(pki)
    if not pki.cert(FRONT_PROXY_CLIENT).exists():
        _create_front_proxy_pki(pki)
    return pki


def _create_front_proxy_pki(pki: Pki) -> None:
    """The front proxy's CA and the aggregation layer's client certificate."""
    _self_signed_ca(pki.front_proxy_ca_cert, pki.front_proxy_ca_key, "specdeploy-front-proxy-ca")
    sign(
        pki,
        FRONT_PROXY_CLIENT,
        f"/CN={FRONT_PROXY_CLIENT}",
        list(CLIENT_EXTENSIONS),
        ca=(pki.front_proxy_ca_cert, pki.front_proxy_ca_key),
    )


def _create_cluster_pki(pki: Pki) -> None:
    """The cluster CA, the API server's serving cert, the clients' certs, the SA key pair."""
    directory = pki.dir
    _self_signed_ca(pki.ca_cert, pki.ca_key, "specdeploy-local-ca")
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
        sign(pki, name, subject, list(CLIENT_EXTENSIONS))
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
