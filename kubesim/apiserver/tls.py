"""A throwaway certificate authority and serving certificate, so kubesim can speak HTTPS like a real API
server.

kubectl (client-go) never sends a bearer token over plain HTTP: against an HTTP kubesim that requires a
token it only ever gets 401. A real API server is always HTTPS, its CA in the kubeconfig
(``certificate-authority-data``); with ``--tls`` kubesim is the same, so kubectl, the Python clients and
Airflow's connection all authenticate exactly as against a cluster.

The keys live only in memory for the life of the process; each start has a new CA.
"""

from __future__ import annotations

import datetime
import ipaddress
import ssl
import tempfile
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

VALIDITY = datetime.timedelta(days=30)


@dataclass(frozen=True)
class ServingCertificate:
    ca_pem: bytes
    """The CA that signed the serving certificate: what clients trust (the kubeconfig carries it)."""
    cert_pem: bytes
    key_pem: bytes

    def server_context(self) -> ssl.SSLContext:
        """The ``ssl.SSLContext`` an HTTPS server presents this certificate with."""
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        # load_cert_chain reads files only; they are deleted as soon as it has read them.
        with tempfile.TemporaryDirectory(prefix="kubesim-tls-") as directory:
            cert, key = Path(directory) / "tls.crt", Path(directory) / "tls.key"
            cert.write_bytes(self.cert_pem)
            key.write_bytes(self.key_pem)
            context.load_cert_chain(cert, key)
        return context


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def issue(host: str) -> ServingCertificate:
    """A new CA, and a certificate it signs for ``host`` (an IP address or a DNS name) and localhost."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(_name("kubesim-ca"))
        .issuer_name(_name("kubesim-ca"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    names: list[x509.GeneralName] = [
        x509.DNSName("localhost"),
        x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
    ]
    try:
        address = x509.IPAddress(ipaddress.ip_address(host))
        if address not in names:
            names.append(address)
    except ValueError:
        names.append(x509.DNSName(host))
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name("kubesim"))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + VALIDITY)
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    return ServingCertificate(
        ca_pem=ca_cert.public_bytes(serialization.Encoding.PEM),
        cert_pem=cert.public_bytes(serialization.Encoding.PEM),
        key_pem=key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        ),
    )
