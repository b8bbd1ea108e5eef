package zkcoord.spark;

import java.io.IOException;
import java.io.InputStream;
import java.io.Serializable;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.security.GeneralSecurityException;
import java.security.KeyFactory;
import java.security.KeyStore;
import java.security.PrivateKey;
import java.security.cert.Certificate;
import java.security.cert.CertificateFactory;
import java.security.spec.PKCS8EncodedKeySpec;
import java.util.ArrayList;
import java.util.Base64;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import javax.net.ssl.KeyManagerFactory;
import javax.net.ssl.SSLContext;
import javax.net.ssl.TrustManagerFactory;

/**
 * The source's TLS options (PEM files, as librdkafka's ssl.*.location): the
 * CA the brokers' certificates must chain to and, optionally, this client's
 * certificate chain and unencrypted PKCS#8 key. The files are read where the
 * task runs; one SSLContext per set of files in each JVM.
 */
final class TlsFiles implements Serializable {
  private static final long serialVersionUID = 1L;
  private static final Map<String, SSLContext> CONTEXTS = new ConcurrentHashMap<>();

  final String ca;
  final String cert; // null: no client certificate
  final String key;

  TlsFiles(String ca, String cert, String key) {
    this.ca = ca;
    this.cert = cert;
    this.key = key;
  }

  SSLContext context() {
    String id = ca + "\\0" + cert + "\\0" + key;
    return CONTEXTS.computeIfAbsent(id, unused -> build());
  }

  private SSLContext build() {
    try {
      CertificateFactory x509 = CertificateFactory.getInstance("X.509");
      KeyStore trusted = KeyStore.getInstance(KeyStore.getDefaultType());
      trusted.load(null, null);
      int n = 0;
      for (Certificate certificate : certificates(x509, ca)) {
        trusted.setCertificateEntry("ca-" + n++, certificate);
      }
      TrustManagerFactory trust = TrustManagerFactory.getInstance(TrustManagerFactory.getDefaultAlgorithm());
      trust.init(trusted);
      KeyManagerFactory keys = null;
      if (cert != null) {
        KeyStore own = KeyStore.getInstance(KeyStore.getDefaultType());
        own.load(null, null);
        List<Certificate> chain = certificates(x509, cert);
        own.setKeyEntry("client", privateKey(key), new char[0], chain.toArray(new Certificate[0]));
        keys = KeyManagerFactory.getInstance(KeyManagerFactory.getDefaultAlgorithm());
        keys.init(own, new char[0]);
      }
      SSLContext context = SSLContext.getInstance("TLS");
      context.init(keys == null ? null : keys.getKeyManagers(), trust.getTrustManagers(), null);
      return context;
    } catch (IOException | GeneralSecurityException exc) {
      throw new SourceException("TlsError", "cannot load the TLS files (ssl.ca.location " + ca
          + ", ssl.certificate.location " + cert + ", ssl.key.location " + key + "): " + exc.getMessage());
    }
  }

  private static List<Certificate> certificates(CertificateFactory x509, String path)
      throws IOException, GeneralSecurityException {
    try (InputStream in = Files.newInputStream(Paths.get(path))) {
      List<Certificate> all = new ArrayList<>(x509.generateCertificates(in));
      if (all.isEmpty()) {
        throw new GeneralSecurityException(path + " holds no certificate");
      }
      return all;
    }
  }

  private static PrivateKey privateKey(String path) throws IOException, GeneralSecurityException {
    String pem = Files.readString(Paths.get(path));
    String begin = "-----BEGIN PRIVATE KEY-----";
    int from = pem.indexOf(begin);
    int to = pem.indexOf("-----END PRIVATE KEY-----");
    if (from < 0 || to < from) {
      throw new GeneralSecurityException(path + " holds no unencrypted PKCS#8 key (BEGIN PRIVATE KEY)");
    }
    byte[] der = Base64.getMimeDecoder().decode(pem.substring(from + begin.length(), to));
    PKCS8EncodedKeySpec spec = new PKCS8EncodedKeySpec(der);
    for (String algorithm : new String[] {"EC", "RSA", "Ed25519"}) {
      try {
        return KeyFactory.getInstance(algorithm).generatePrivate(spec);
      } catch (GeneralSecurityException wrongAlgorithm) {
        // try the next
      }
    }
    throw new GeneralSecurityException(path + ": a key of an algorithm other than EC, RSA or Ed25519");
  }
}
