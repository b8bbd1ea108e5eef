package zkcoord.spark;

import java.nio.charset.StandardCharsets;
import java.security.GeneralSecurityException;
import java.security.MessageDigest;
import java.security.SecureRandom;
import java.util.Base64;
import java.util.HashMap;
import java.util.Map;
import javax.crypto.Mac;
import javax.crypto.SecretKeyFactory;
import javax.crypto.spec.PBEKeySpec;
import javax.crypto.spec.SecretKeySpec;

/**
 * One SCRAM exchange, client side (RFC 5802, RFC 7677), without channel
 * binding: {@link #first} is the client-first message, {@link #finalMessage}
 * answers the server-first message with the proof, {@link #verify} checks
 * the server's signature, so a server that does not know the credential is
 * not believed either. The JVM twin of ScramClient in
 * zkcoord/security/scram.py.
 */
public final class ScramClient {
  // Kafka's bounds: a server asking for more makes each login cost more than any broker's would.
  private static final int MIN_ITERATIONS = 4096;
  private static final int MAX_ITERATIONS = 16384;
  private static final SecureRandom RANDOM = new SecureRandom();

  private final String hmac;
  private final String pbkdf2;
  private final String digest;
  private final int bits;
  private final String password;
  private final String nonce;
  private final String clientFirstBare;
  private byte[] serverSignature;

  ScramClient(String mechanism, String user, String password) {
    this(mechanism, user, password, randomNonce());
  }

  private ScramClient(String mechanism, String user, String password, String nonce) {
    String hash;
    if (mechanism.equals("SCRAM-SHA-512")) {
      hash = "512";
    } else if (mechanism.equals("SCRAM-SHA-256")) {
      hash = "256";
    } else {
      throw new IllegalArgumentException("not a SCRAM mechanism: " + mechanism);
    }
    this.hmac = "HmacSHA" + hash;
    this.pbkdf2 = "PBKDF2WithHmacSHA" + hash;
    this.digest = "SHA-" + hash;
    this.bits = Integer.parseInt(hash);
    this.password = password;
    this.nonce = nonce;
    this.clientFirstBare = "n=" + user.replace("=", "=3D").replace(",", "=2C") + ",r=" + nonce;
  }

  /** Letters and digits only, as Kafka's: some clients garble base64's '+' and '/'. */
  private static String randomNonce() {
    byte[] random = new byte[24];
    RANDOM.nextBytes(random);
    StringBuilder hex = new StringBuilder(48);
    for (byte b : random) {
      hex.append(String.format("%02x", b));
    }
    return hex.toString();
  }

  byte[] first() {
    return ("n,," + clientFirstBare).getBytes(StandardCharsets.UTF_8);
  }

  byte[] finalMessage(byte[] serverFirstBytes) throws GeneralSecurityException {
    String serverFirst = new String(serverFirstBytes, StandardCharsets.UTF_8);
    Map<Character, String> attributes = attributes(serverFirst);
    String full = attributes.get('r');
    byte[] salt;
    int iterations;
    try {
      salt = Base64.getDecoder().decode(attributes.get('s'));
      iterations = Integer.parseInt(attributes.get('i'));
    } catch (IllegalArgumentException | NullPointerException exc) {
      throw new GeneralSecurityException("malformed SCRAM server-first message");
    }
    if (full == null || !full.startsWith(nonce) || full.equals(nonce)) {
      throw new GeneralSecurityException("SCRAM server nonce does not extend ours");
    }
    if (iterations < MIN_ITERATIONS || iterations > MAX_ITERATIONS) {
      throw new GeneralSecurityException("SCRAM server asks for " + iterations + " iterations, outside "
          + MIN_ITERATIONS + ".." + MAX_ITERATIONS);
    }
    PBEKeySpec spec = new PBEKeySpec(password.toCharArray(), salt, iterations, bits);
    byte[] salted = SecretKeyFactory.getInstance(pbkdf2).generateSecret(spec).getEncoded();
    spec.clearPassword();
    byte[] clientKey = hmac(salted, "Client Key");
    byte[] storedKey = MessageDigest.getInstance(digest).digest(clientKey);
    String withoutProof = "c=" + Base64.getEncoder().encodeToString("n,,".getBytes(StandardCharsets.UTF_8))
        + ",r=" + full;
    String authMessage = clientFirstBare + "," + serverFirst + "," + withoutProof;
    byte[] proof = hmac(storedKey, authMessage);
    for (int i = 0; i < proof.length; i++) {
      proof[i] ^= clientKey[i];
    }
    serverSignature = hmac(hmac(salted, "Server Key"), authMessage);
    return (withoutProof + ",p=" + Base64.getEncoder().encodeToString(proof)).getBytes(StandardCharsets.UTF_8);
  }

  /** Throws unless the server-final message proves the server knew our credential. */
  void verify(byte[] serverFinalBytes) throws GeneralSecurityException {
    String text = new String(serverFinalBytes, StandardCharsets.UTF_8);
    if (!text.startsWith("v=") || serverSignature == null) {
      throw new GeneralSecurityException("SCRAM server-final message refuses or is malformed: "
          + text.substring(0, Math.min(text.length(), 80)));
    }
    byte[] signature;
    try {
      signature = Base64.getDecoder().decode(text.substring(2));
    } catch (IllegalArgumentException exc) {
      throw new GeneralSecurityException("SCRAM server signature is not valid base64");
    }
    if (!MessageDigest.isEqual(signature, serverSignature)) {
      throw new GeneralSecurityException("SCRAM server signature does not match: the server does not know "
          + "this credential");
    }
  }

  private byte[] hmac(byte[] key, String message) throws GeneralSecurityException {
    Mac mac = Mac.getInstance(hmac);
    mac.init(new SecretKeySpec(key, hmac));
    return mac.doFinal(message.getBytes(StandardCharsets.UTF_8));
  }

  private static Map<Character, String> attributes(String text) throws GeneralSecurityException {
    Map<Character, String> found = new HashMap<>();
    for (String part : text.split(",")) {
      if (part.length() < 2 || part.charAt(1) != '=') {
        throw new GeneralSecurityException("malformed SCRAM server-first message");
      }
      found.put(part.charAt(0), part.substring(2));
    }
    return found;
  }

  /**
   * The client-final message for a fixed nonce and server-first message,
   * then whether {@code serverFinal} verifies, as "message\nverified": to
   * pin this client to RFC 7677's example and to the Python one.
   */
  public static String exchange(String mechanism, String user, String password, String nonce, String serverFirst,
      String serverFinal) throws GeneralSecurityException {
    ScramClient client = new ScramClient(mechanism, user, password, nonce);
    String message = new String(client.finalMessage(serverFirst.getBytes(StandardCharsets.UTF_8)),
        StandardCharsets.UTF_8);
    boolean verified = true;
    try {
      client.verify(serverFinal.getBytes(StandardCharsets.UTF_8));
    } catch (GeneralSecurityException exc) {
      verified = false;
    }
    return message + "\n" + verified;
  }
}
