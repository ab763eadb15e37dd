"""Fixtures of the client tests: real servers on 127.0.0.1 (``local_server``).

The TLS fixtures use the local cluster's PKI (``e2e.localcluster.pki``: a
CA, a serving certificate for 127.0.0.1, the admin's client certificate),
made once per module with openssl.
"""

from __future__ import annotations

import ssl
from collections.abc import Iterator

import pytest

from e2e.localcluster import pki
from tests.unit.runtime.kube.local_server import Server, serve


@pytest.fixture
def server() -> Iterator[Server]:
    """A plain-HTTP server."""
    yield from serve()


@pytest.fixture
def other_server() -> Iterator[Server]:
    """A second one, for "which server got the request?"."""
    yield from serve()


@pytest.fixture(scope="module")
def cluster_pki(tmp_path_factory: pytest.TempPathFactory) -> pki.Pki:
    return pki.create(tmp_path_factory.mktemp("pki"))


@pytest.fixture
def tls_server(cluster_pki: pki.Pki) -> Iterator[Server]:
    """HTTPS with the API server's certificate; a client certificate is asked for, not required."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cluster_pki.cert("apiserver"), cluster_pki.key("apiserver"))
    context.load_verify_locations(cluster_pki.ca_cert)
    context.verify_mode = ssl.CERT_OPTIONAL
    yield from serve(context)
