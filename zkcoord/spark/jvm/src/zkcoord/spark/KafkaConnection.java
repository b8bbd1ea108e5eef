package zkcoord.spark;

import java.io.ByteArrayOutputStream;
import java.io.Closeable;
import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.IOException;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.util.HashMap;
import java.util.Map;
import javax.net.ssl.SSLParameters;
import javax.net.ssl.SSLSocket;

/**
 * One blocking connection to a Kafka broker for reading one partition:
 * Fetch v4, ListOffsets v1 and Metadata v1, checked with ApiVersions when it
 * connects (every broker since Kafka 0.11 serves them, and zkcoord's), after
 * SASL (SaslHandshake v1, SaslAuthenticate v1) when the task has a login.
 * The JVM twin of zkcoord/fetch/connection.py's reading half. One request at
 * a time; the last Fetch's records stay in a buffer reused by the next one.
 */
final class KafkaConnection implements Closeable {
  static final int FETCH = 1;
  static final int LIST_OFFSETS = 2;
  static final int METADATA = 3;
  static final int SASL_HANDSHAKE = 17;
  static final int API_VERSIONS = 18;
  static final int SASL_AUTHENTICATE = 36;
  // The SASL mechanisms this reader speaks, the strongest first.
  static final String[] MECHANISMS = {"SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN"};
  static final int MAX_FRAME = 1 << 30; // larger than any answer we ask for: a corrupt size prefix

  /** The broker cannot be reached, closed the connection or sent bytes we cannot read: retriable. */
  static final class BrokerException extends IOException {
    private static final long serialVersionUID = 1L;

    BrokerException(String message) {
      super(message);
    }
  }

  /** One partition of a Fetch answer; records are {@code frame[recordsAt, recordsAt + recordsLength)}. */
  static final class Fetched {
    int error;
    long highWatermark;
    long lastStableOffset; // -1: the broker did not say
    long[][] aborted; // read committed: the aborted transactions among the records, (producer id, first offset)
    byte[] frame;
    int recordsAt;
    int recordsLength;
  }

  final String address;
  private final String clientId;
  private final TlsFiles tls; // null: plaintext
  private final int timeoutMs;
  private Socket socket;
  private DataInputStream in;
  private OutputStream out;
  private Map<Integer, int[]> offered; // API key -> the versions the broker serves
  private int correlation;
  private byte[] frame = new byte[0];

  /** {@code sasl} null: no SASL; else log in with it, and a refusal is a SourceException (AuthenticationError). */
  KafkaConnection(String address, TlsFiles tls, SaslLogin sasl, String clientId, int timeoutMs) throws IOException {
    this.address = address;
    this.clientId = clientId;
    this.tls = tls;
    this.timeoutMs = timeoutMs;
    open();
    if (sasl != null) {
      try {
        authenticate(sasl);
      } catch (IOException | RuntimeException exc) {
        close();
        throw exc;
      }
    }
  }

  /** Connects (TLS if asked) and agrees on versions. */
  private void open() throws IOException {
    int colon = address.lastIndexOf(':');
    if (colon < 0) {
      throw new BrokerException("broker address " + address + " is not host:port");
    }
    String host = address.substring(0, colon);
    Socket plain = new Socket();
    try {
      plain.setTcpNoDelay(true);
      plain.setSoTimeout(timeoutMs);
      plain.connect(new InetSocketAddress(host, Integer.parseInt(address.substring(colon + 1))), timeoutMs);
    } catch (IOException | IllegalArgumentException exc) {
      plain.close();
      throw new BrokerException("cannot connect to broker " + address + ": " + exc.getMessage());
    }
    Socket connected = plain;
    if (tls != null) {
      try {
        SSLSocket secured = (SSLSocket) tls.context().getSocketFactory().createSocket(plain, host, plain.getPort(), true);
        SSLParameters parameters = secured.getSSLParameters();
        parameters.setEndpointIdentificationAlgorithm("HTTPS"); // the certificate must name this host
        secured.setSSLParameters(parameters);
        secured.startHandshake();
        connected = secured;
      } catch (IOException exc) {
        plain.close();
        throw tlsFailure(exc);
      }
    }
    this.socket = connected;
    this.in = new DataInputStream(new java.io.BufferedInputStream(socket.getInputStream(), 64 * 1024));
    this.out = socket.getOutputStream();
    try {
      checkVersions();
    } catch (IOException | RuntimeException exc) {
      close();
      throw exc;
    }
  }

  /**
   * A TLS failure as the reader should see it: a refusal (a certificate, a
   * protocol) is a TlsError no retry helps; a connection that broke or timed
   * out mid-handshake is any broken connection, to retry (as
   * zkcoord/security/tls.py decides for the Python path).
   */
  private IOException tlsFailure(IOException exc) {
    boolean broken = exc instanceof java.net.SocketTimeoutException || exc instanceof java.net.SocketException
        || exc instanceof java.io.EOFException || exc.getCause() instanceof java.io.EOFException
        || !(exc instanceof javax.net.ssl.SSLException);
    if (broken) {
      return new BrokerException("TLS with broker " + address + " broke: " + exc);
    }
    throw new SourceException("TlsError", "TLS with broker " + address + " failed: " + exc.getMessage());
  }

  private void checkVersions() throws IOException {
    DataInputStream answer = request(API_VERSIONS, 0, new ByteArrayOutputStream());
    int error = answer.readShort();
    if (error != 0) {
      throw new BrokerException("broker " + address + " refused ApiVersions: error " + error);
    }
    offered = new HashMap<>();
    for (int i = answer.readInt(); i > 0; i--) {
      int key = answer.readShort();
      offered.put(key, new int[] {answer.readShort(), answer.readShort()});
    }
    require(FETCH, 4, "Fetch");
    require(LIST_OFFSETS, 1, "ListOffsets");
    require(METADATA, 1, "Metadata");
  }

  /**
   * SASL with the strongest mechanism the broker offers: SCRAM-SHA-512,
   * SCRAM-SHA-256, else PLAIN (over TLS, unless the login allows it without).
   */
  private void authenticate(SaslLogin login) throws IOException {
    if (!serves(SASL_HANDSHAKE, 1) || !serves(SASL_AUTHENTICATE, 1)) {
      throw refused(login, "broker " + address + " does not serve SaslHandshake v1 and SaslAuthenticate v1");
    }
    java.util.List<String> mechanisms = handshake(MECHANISMS[0]);
    String mechanism = null;
    for (String m : MECHANISMS) {
      if (mechanisms.contains(m)) {
        mechanism = m;
        break;
      }
    }
    if (mechanism == null) {
      throw refused(login, "broker " + address + " offers no SASL mechanism this reader speaks (it offers "
          + (mechanisms.isEmpty() ? "none" : String.join(", ", mechanisms)) + "; this reader "
          + String.join(", ", MECHANISMS) + ")");
    }
    if (mechanism.equals("PLAIN") && tls == null && !login.plainWithoutTls) {
      // PLAIN sends the password itself: anyone on the path reads it.
      throw new SourceException("AuthenticationError", "SASL authentication as user '" + login.user + "': broker "
          + address + " offers only SASL/PLAIN, which would send user '" + login.user + "''s password over a "
          + "connection without TLS: refused; the option ssl.ca.location gives TLS, sasl.plainWithoutTls=true "
          + "allows it");
    }
    if (!mechanism.equals(MECHANISMS[0])) {
      // A broker closes the connection after a refused handshake: start again, asking for one it offers.
      close();
      open();
      if (!handshake(mechanism).contains(mechanism)) {
        throw refused(login, "broker " + address + " refused SASL/" + mechanism);
      }
    }
    if (mechanism.equals("PLAIN")) {
      saslStep(login, ("\0" + login.user + "\0" + login.password).getBytes(StandardCharsets.UTF_8));
      return;
    }
    ScramClient scram = new ScramClient(mechanism, login.user, login.password);
    try {
      byte[] serverFirst = saslStep(login, scram.first());
      scram.verify(saslStep(login, scram.finalMessage(serverFirst)));
    } catch (java.security.GeneralSecurityException exc) {
      throw refused(login, "broker " + address + ": " + exc.getMessage());
    }
  }

  /** SaslHandshake v1 asking for {@code mechanism}: the mechanisms the broker offers (an error leaves it out). */
  private java.util.List<String> handshake(String mechanism) throws IOException {
    ByteArrayOutputStream body = new ByteArrayOutputStream(32);
    writeString(new DataOutputStream(body), mechanism);
    DataInputStream answer = request(SASL_HANDSHAKE, 1, body);
    int error = answer.readShort();
    java.util.List<String> mechanisms = new java.util.ArrayList<>();
    for (int n = answer.readInt(); n > 0; n--) {
      mechanisms.add(readString(answer, answer.readShort()));
    }
    if (error != 0) {
      mechanisms.remove(mechanism); // not accepted, whatever the list says
    }
    return mechanisms;
  }

  /** One SaslAuthenticate v1: the broker's answer, or its refusal thrown. */
  private byte[] saslStep(SaslLogin login, byte[] token) throws IOException {
    ByteArrayOutputStream body = new ByteArrayOutputStream(token.length + 4);
    DataOutputStream w = new DataOutputStream(body);
    w.writeInt(token.length);
    w.write(token);
    DataInputStream answer = request(SASL_AUTHENTICATE, 1, body);
    int error = answer.readShort();
    String message = readString(answer, answer.readShort());
    int length = answer.readInt();
    byte[] bytes = new byte[Math.max(length, 0)];
    answer.readFully(bytes);
    if (error != 0) {
      throw refused(login, "broker " + address + " refused user '" + login.user + "': "
          + (message == null ? "Kafka error " + error : message));
    }
    return bytes;
  }

  private static SourceException refused(SaslLogin login, String why) {
    return new SourceException("AuthenticationError", "SASL authentication as user '" + login.user + "' failed: "
        + why);
  }

  private boolean serves(int key, int version) {
    int[] range = offered.get(key);
    return range != null && range[0] <= version && version <= range[1];
  }

  private void require(int key, int version, String name) {
    if (!serves(key, version)) {
      throw new SourceException("SparkSourceError", "broker " + address + " does not serve " + name + " v"
          + version + ", which the JVM reader speaks; read with zkcoord.spark.register(spark, jvm=False)");
    }
  }

  /**
   * Records of one partition from {@code offset}; error holds a partition's Kafka error code. Read
   * committed (isolation level 1), the answer lists the aborted transactions among them.
   */
  Fetched fetch(String topic, int partition, long offset, int maxWaitMs, int maxBytes, boolean readCommitted)
      throws IOException {
    ByteArrayOutputStream body = new ByteArrayOutputStream(64);
    DataOutputStream w = new DataOutputStream(body);
    w.writeInt(-1); // replica id: a consumer
    w.writeInt(maxWaitMs);
    w.writeInt(1); // min bytes
    w.writeInt(maxBytes);
    w.writeByte(readCommitted ? 1 : 0); // isolation level
    w.writeInt(1);
    writeString(w, topic);
    w.writeInt(1);
    w.writeInt(partition);
    w.writeLong(offset);
    w.writeInt(maxBytes);
    DataInputStream answer = request(FETCH, 4, body);
    int at = 4; // the frame's position, kept alongside the stream to find the records
    answer.readInt(); // throttle
    at += 4;
    Fetched found = null;
    at += 4; // the topics' count
    for (int topics = answer.readInt(); topics > 0; topics--) {
      int nameLength = answer.readShort();
      String name = readString(answer, nameLength);
      at += 2 + nameLength;
      at += 4;
      for (int parts = answer.readInt(); parts > 0; parts--) {
        Fetched f = new Fetched();
        int index = answer.readInt();
        f.error = answer.readShort();
        f.highWatermark = answer.readLong();
        f.lastStableOffset = answer.readLong();
        at += 4 + 2 + 8 + 8;
        int aborted = Math.max(answer.readInt(), 0); // -1: none
        at += 4;
        f.aborted = new long[aborted][];
        for (int i = 0; i < aborted; i++) {
          f.aborted[i] = new long[] {answer.readLong(), answer.readLong()}; // producer id, first offset
        }
        at += aborted * 16;
        int length = answer.readInt();
        at += 4;
        f.frame = frame;
        f.recordsAt = at;
        f.recordsLength = Math.max(length, 0);
        if (length > 0) {
          if (answer.skipBytes(length) != length) {
            throw new BrokerException("broker " + address + " sent a fetch answer shorter than its records");
          }
          at += length;
        }
        if (name.equals(topic) && index == partition) {
          found = f;
        }
      }
    }
    if (found == null) {
      throw new BrokerException("broker " + address + " answered a fetch without " + topic + "-" + partition);
    }
    return found;
  }

  /** The offset for {@code timestamp} (-2 earliest, -1 latest); a partition error as a SourceException. */
  long listOffset(String topic, int partition, long timestamp) throws IOException {
    ByteArrayOutputStream body = new ByteArrayOutputStream(64);
    DataOutputStream w = new DataOutputStream(body);
    w.writeInt(-1);
    w.writeInt(1);
    writeString(w, topic);
    w.writeInt(1);
    w.writeInt(partition);
    w.writeLong(timestamp);
    DataInputStream answer = request(LIST_OFFSETS, 1, body);
    for (int topics = answer.readInt(); topics > 0; topics--) {
      String name = readString(answer, answer.readShort());
      for (int parts = answer.readInt(); parts > 0; parts--) {
        int index = answer.readInt();
        int error = answer.readShort();
        answer.readLong(); // timestamp
        long offset = answer.readLong();
        if (name.equals(topic) && index == partition) {
          if (error != 0) {
            throw new PartitionException(topic, partition, error);
          }
          return offset;
        }
      }
    }
    throw new BrokerException("broker " + address + " answered ListOffsets without " + topic + "-" + partition);
  }

  /** The partition's leader as this broker knows it, or null while it has none. */
  String leader(String topic, int partition) throws IOException {
    ByteArrayOutputStream body = new ByteArrayOutputStream(64);
    DataOutputStream w = new DataOutputStream(body);
    w.writeInt(1);
    writeString(w, topic);
    DataInputStream answer = request(METADATA, 1, body);
    Map<Integer, String> brokers = new HashMap<>();
    for (int n = answer.readInt(); n > 0; n--) {
      int node = answer.readInt();
      String host = readString(answer, answer.readShort());
      int port = answer.readInt();
      readString(answer, answer.readShort()); // rack
      brokers.put(node, host + ":" + port);
    }
    answer.readInt(); // controller
    String leader = null;
    for (int topics = answer.readInt(); topics > 0; topics--) {
      int topicError = answer.readShort();
      String name = readString(answer, answer.readShort());
      answer.readBoolean(); // internal
      for (int parts = answer.readInt(); parts > 0; parts--) {
        int error = answer.readShort();
        int index = answer.readInt();
        int node = answer.readInt();
        answer.skipBytes(4 * answer.readInt()); // replicas
        answer.skipBytes(4 * answer.readInt()); // in-sync replicas
        if (topicError == 0 && error == 0 && name.equals(topic) && index == partition) {
          leader = brokers.get(node);
        }
      }
    }
    return leader;
  }

  /** Sends one request and reads its whole answer into the frame buffer. */
  private DataInputStream request(int apiKey, int version, ByteArrayOutputStream body) throws IOException {
    correlation = (correlation + 1) & 0x7FFFFFFF;
    ByteArrayOutputStream message = new ByteArrayOutputStream(64 + body.size());
    DataOutputStream w = new DataOutputStream(message);
    byte[] id = clientId.getBytes(StandardCharsets.UTF_8);
    w.writeInt(2 + 2 + 4 + 2 + id.length + body.size());
    w.writeShort(apiKey);
    w.writeShort(version);
    w.writeInt(correlation);
    w.writeShort(id.length);
    w.write(id);
    body.writeTo(w);
    int size;
    try {
      out.write(message.toByteArray());
      out.flush();
      size = in.readInt();
      if (size < 4 || size > MAX_FRAME) {
        throw new BrokerException("broker " + address + " sent a frame of " + size + " bytes");
      }
      if (frame.length < size) {
        frame = new byte[Math.max(size, Math.min(frame.length * 2, MAX_FRAME))];
      }
      in.readFully(frame, 0, size);
    } catch (BrokerException exc) {
      close();
      throw exc;
    } catch (javax.net.ssl.SSLException exc) {
      close(); // TLS 1.3: a broker refusing our certificate says so at the first exchange
      throw tlsFailure(exc);
    } catch (IOException exc) {
      close();
      throw new BrokerException("broker " + address + ": " + exc);
    }
    int answered = RecordBatches.getInt(frame, 0);
    if (answered != correlation) {
      close();
      throw new BrokerException("broker " + address + " answered request " + answered + ", not " + correlation);
    }
    return new DataInputStream(new java.io.ByteArrayInputStream(frame, 4, size - 4));
  }

  private static void writeString(DataOutputStream w, String s) throws IOException {
    byte[] bytes = s.getBytes(StandardCharsets.UTF_8);
    w.writeShort(bytes.length);
    w.write(bytes);
  }

  private static String readString(DataInputStream in, int length) throws IOException {
    if (length < 0) {
      return null;
    }
    byte[] bytes = new byte[length];
    in.readFully(bytes);
    return new String(bytes, StandardCharsets.UTF_8);
  }

  @Override
  public void close() {
    try {
      socket.close();
    } catch (IOException ignored) {
      // closing: nothing left to do with it
    }
  }
}
