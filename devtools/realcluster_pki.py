"""The real control plane's credentials (devtools/realcluster.py): a CA and the serving certificate the
API server, Kueue's webhooks and its visibility server share, the service-account key pair, the front
proxy's CA and client certificate for the aggregation layer, and the kubeconfig files that use them."""

from __future__ import annotations

import datetime
import ipaddress
from pathlib import Path

import yaml

from devtools.realcluster_kueue import VISIBILITY_SERVICE

FRONT_PROXY_CLIENT = "front-proxy-client"
"""The name in the aggregator's client certificate, which extension API servers are told to trust."""


def make_pki(directory: Path) -> dict[str, Path]:
    """A CA, a serving certificate for 127.0.0.1/localhost (the API server and Kueue's webhooks share it)
    and the service-account signing key pair the API server requires."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import rsa
    from cryptography.x509.oid import NameOID

    directory.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)

    def key():
        return rsa.generate_private_key(public_exponent=65537, key_size=2048)

    def name(cn: str):
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])

    def certificate(subject: str, issuer, signing_key, public_key, extension, critical: bool):
        return (
            x509.CertificateBuilder().subject_name(name(subject)).issuer_name(issuer)
            .public_key(public_key).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1)).not_valid_after(now + datetime.timedelta(days=7))
            .add_extension(extension, critical=critical)
            .sign(signing_key, hashes.SHA256())
        )  # fmt: skip

    ca_key, server_key, sa_key, proxy_ca_key, proxy_key = key(), key(), key(), key(), key()
    is_ca = x509.BasicConstraints(ca=True, path_length=None)
    ca = certificate("realcluster-ca", name("realcluster-ca"), ca_key, ca_key.public_key(), is_ca, True)
    # The aggregator checks an APIService's server against the name <service>.<namespace>.svc.
    sans = [x509.DNSName("localhost"), x509.DNSName(f"{VISIBILITY_SERVICE}.kueue-system.svc"),
            x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]  # fmt: skip
    server = certificate(
        "realcluster", ca.subject, ca_key, server_key.public_key(), x509.SubjectAlternativeName(sans), False
    )
    # The front proxy: kube-apiserver's aggregator authenticates to extension API servers (Kueue's
    # visibility server) with this client certificate and passes the user in X-Remote-* headers; they
    # trust those headers only from a certificate of this CA (kubeadm's front-proxy-ca, a CA of its own).
    proxy_ca = certificate(
        "realcluster-front-proxy-ca", name("realcluster-front-proxy-ca"), proxy_ca_key,
        proxy_ca_key.public_key(), is_ca, True,
    )  # fmt: skip
    proxy_client = certificate(
        FRONT_PROXY_CLIENT, proxy_ca.subject, proxy_ca_key, proxy_key.public_key(),
        x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.CLIENT_AUTH]), False,
    )  # fmt: skip

    def pem_key(k) -> bytes:
        return k.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.TraditionalOpenSSL,
            serialization.NoEncryption(),
        )

    files = {
        "ca.crt": ca.public_bytes(serialization.Encoding.PEM),
        "server.crt": server.public_bytes(serialization.Encoding.PEM),
        "server.key": pem_key(server_key),
        "sa.key": pem_key(sa_key),
        "sa.pub": sa_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        ),
        "front-proxy-ca.crt": proxy_ca.public_bytes(serialization.Encoding.PEM),
        "front-proxy-client.crt": proxy_client.public_bytes(serialization.Encoding.PEM),
        "front-proxy-client.key": pem_key(proxy_key),
    }
    paths = {}
    for filename, data in files.items():
        (directory / filename).write_bytes(data)
        paths[filename] = directory / filename
    webhook = directory / "webhook"  # controller-runtime's certDir names
    webhook.mkdir(exist_ok=True)
    (webhook / "tls.crt").write_bytes(files["server.crt"])
    (webhook / "tls.key").write_bytes(files["server.key"])
    paths["webhook"] = webhook
    return paths


def write_kubeconfig(path: Path, url: str, token: str, ca: Path) -> None:
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "real", "cluster": {"server": url, "certificate-authority": str(ca)}}],
                "users": [{"name": "admin", "user": {"token": token}}],
                "contexts": [{"name": "real", "context": {"cluster": "real", "user": "admin"}}],
                "current-context": "real",
            }
        )
    )
