package zkcoord.spark;

import com.fasterxml.jackson.databind.JsonNode;
import java.util.ArrayList;
import java.util.List;
import org.apache.spark.sql.connector.read.InputPartition;

/**
 * One Spark task: records {@code [start, end)} of one partition, where to
 * read them and how long to wait; plain values, as the Python planner gives
 * them (zkcoord/spark/bridge.py, the JVM form of a ReadTask).
 */
final class RangePartition implements InputPartition {
  private static final long serialVersionUID = 1L;

  final String topic;
  final int partition;
  final long start;
  final long end;
  final String leader;
  final String[] brokers; // every broker the plan knew, to find a new leader through
  final int pollTimeoutMs;
  final boolean failOnDataLoss;
  final int fetchBytes;
  final int maxFetchBytes;
  final int fetchWaitMs;
  final int[] retriableErrors;
  final TlsFiles tls; // null: plaintext
  final SaslLogin sasl; // null: no SASL
  final boolean readCommitted; // isolation level read_committed: no aborted record, none past the stable offset

  private RangePartition(JsonNode task) {
    topic = task.get("topic").asText();
    partition = task.get("partition").asInt();
    start = task.get("start").asLong();
    end = task.get("end").asLong();
    leader = task.get("leader").asText();
    List<String> known = new ArrayList<>();
    task.get("brokers").forEach(b -> known.add(b.asText()));
    brokers = known.toArray(new String[0]);
    pollTimeoutMs = task.get("pollTimeoutMs").asInt();
    failOnDataLoss = task.get("failOnDataLoss").asBoolean();
    fetchBytes = task.get("fetchBytes").asInt();
    maxFetchBytes = task.get("maxFetchBytes").asInt();
    fetchWaitMs = task.get("fetchWaitMs").asInt();
    JsonNode codes = task.get("retriableErrors");
    retriableErrors = new int[codes.size()];
    for (int i = 0; i < retriableErrors.length; i++) {
      retriableErrors[i] = codes.get(i).asInt();
    }
    JsonNode t = task.get("tls");
    tls = t == null || t.isNull() ? null
        : new TlsFiles(t.get("ca").asText(), text(t.get("cert")), text(t.get("key")));
    JsonNode committed = task.get("readCommitted");
    readCommitted = committed != null && committed.asBoolean();
    JsonNode login = task.get("sasl");
    sasl = login == null || login.isNull() ? null
        : new SaslLogin(login.get("user").asText(), login.get("password").asText(),
            login.get("plainWithoutTls").asBoolean());
  }

  private static String text(JsonNode node) {
    return node == null || node.isNull() ? null : node.asText();
  }

  /** The planner's task list as Spark's partitions. */
  static InputPartition[] of(JsonNode tasks) {
    InputPartition[] partitions = new InputPartition[tasks.size()];
    for (int i = 0; i < partitions.length; i++) {
      partitions[i] = new RangePartition(tasks.get(i));
    }
    return partitions;
  }

  boolean retriable(int code) {
    for (int c : retriableErrors) {
      if (c == code) {
        return true;
      }
    }
    return false;
  }
}
