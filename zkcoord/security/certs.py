"""A private certificate authority and the certificates it signs, as PEM files.

For tests, the demo and ``zkcoord zk up --tls``: servers get certificates
valid for 127.0.0.1 and localhost, clients certificates whose common name is
their principal's name (see :mod:`zkcoord.security.principal`). Production
deployments bring their own PKI; nothing here is needed to run with it.
"""

from __future__ import annotations

import dataclasses
import datetime
import ipaddress
from pathlib import Path
from typing import Sequence

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from zkcoord.security.secrets import write_private

VALID_DAYS = 365
DEFAULT_HOSTS = ("127.0.0.1", "localhost")


@dataclasses.dataclass(frozen=True)
class CertFiles:
    """One certificate and its private key (unencrypted PEM), and the CA that signed it."""

    cert: Path
    key: Path
    ca: Path


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _write_key(key: ec.EllipticCurvePrivateKey, path: Path) -> None:
    write_private(path, key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                          serialization.NoEncryption()))


def _builder(subject: x509.Name, issuer: x509.Name, public_key) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.timezone.utc)
    return (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer).public_key(public_key)
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=VALID_DAYS)))


def make_ca(directory: Path, common_name: str = "zkcoord CA") -> CertFiles:
    """A self-signed CA in ``directory`` (ca.pem, ca-key.pem)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (_builder(_name(common_name), _name(common_name), key.public_key())
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False,
                                         data_encipherment=False, key_agreement=False,
                                         encipher_only=False, decipher_only=False), critical=True)
            .sign(key, hashes.SHA256()))
    files = CertFiles(directory / "ca.pem", directory / "ca-key.pem", directory / "ca.pem")
    files.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    _write_key(key, files.key)
    return files


def issue(ca: CertFiles, directory: Path, common_name: str, *,
          hosts: Sequence[str] = DEFAULT_HOSTS) -> CertFiles:
    """A certificate for ``common_name`` signed by ``ca``, usable by a server
    (for ``hosts``) and as a client certificate, in ``directory``
    (<common_name>.pem, <common_name>-key.pem)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    ca_cert = x509.load_pem_x509_certificate(ca.cert.read_bytes())
    ca_key = serialization.load_pem_private_key(ca.key.read_bytes(), password=None)
    key = ec.generate_private_key(ec.SECP256R1())
    names = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    builder = (_builder(_name(common_name), ca_cert.subject, key.public_key())
               .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
               .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH,
                                                     ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False))
    if names:
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())
    files = CertFiles(directory / f"{common_name}.pem", directory / f"{common_name}-key.pem", ca.cert)
    files.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    _write_key(key, files.key)
    return files
