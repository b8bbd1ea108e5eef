package zkcoord.spark;

import java.io.IOException;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.codegen.UnsafeRowWriter;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * The executor's side: reads one planned range straight from its
 * partition's leader and hands Spark one row per record, written in place
 * from the fetched bytes. The JVM twin of zkcoord/spark/reader.py, with the
 * same retries (a lost leader is looked for through every broker the plan
 * knew), the same failOnDataLoss rule and the same timeout. A refused SASL
 * login or a missing ACL fails the task at once: no retry helps.
 */
final class RangeReader implements PartitionReader<InternalRow> {
  static final String CLIENT_ID = "zkcoord-spark-reader";
  private static final int OFFSET_OUT_OF_RANGE = 1;
  private static final int TOPIC_AUTHORIZATION_FAILED = 29;
  private static final long EARLIEST_TIMESTAMP = -2;
  private static final long[] BACKOFF_MS = {50, 1000}; // first and longest pause between failed attempts

  /** Spark's factory of readers: one per task. */
  static final class Factory implements PartitionReaderFactory {
    private static final long serialVersionUID = 1L;

    @Override
    public PartitionReader<InternalRow> createReader(InputPartition partition) {
      return new RangeReader((RangePartition) partition);
    }
  }

  private final RangePartition task;
  private final UTF8String topic;
  private final UnsafeRowWriter row = new UnsafeRowWriter(7, 256);
  private String leader;
  private KafkaConnection connection;
  private RecordBatches batches; // the records of the last fetch, being handed out
  private KafkaConnection.Fetched fetched;
  private long position;
  private long deadline;
  private int fetchBytes;
  private long backoffMs = BACKOFF_MS[0];

  RangeReader(RangePartition task) {
    this.task = task;
    this.topic = UTF8String.fromString(task.topic);
    this.leader = task.leader;
    this.position = task.start;
    this.fetchBytes = task.fetchBytes;
    this.deadline = deadline();
  }

  @Override
  public boolean next() throws IOException {
    while (true) {
      if (batches != null) {
        if (batches.next()) {
          writeRow();
          return true;
        }
        afterFetch();
      }
      if (position >= task.end) {
        return false;
      }
      fetch();
    }
  }

  @Override
  public InternalRow get() {
    return row.getRow();
  }

  private void writeRow() {
    RecordBatches b = batches;
    row.reset();
    row.zeroOutNullBytes();
    if (b.keyLength() < 0) {
      row.setNullAt(0);
    } else {
      row.write(0, b.keyBytes(), b.keyOffset(), b.keyLength());
    }
    if (b.valueLength() < 0) {
      row.setNullAt(1);
    } else {
      row.write(1, b.valueBytes(), b.valueOffset(), b.valueLength());
    }
    row.write(2, topic);
    row.write(3, task.partition);
    row.write(4, b.offset());
    row.write(5, b.timestamp() * 1000L); // Spark's timestamps are microseconds
    row.write(6, b.timestampType());
  }

  /** One Fetch at the position, or the waiting, retrying and failing its answer calls for. */
  private void fetch() throws IOException {
    try {
      if (connection == null) {
        connection = new KafkaConnection(leader, task.tls, task.sasl, CLIENT_ID, 30_000);
      }
      fetched = connection.fetch(task.topic, task.partition, position, task.fetchWaitMs, fetchBytes,
          task.readCommitted);
    } catch (IOException exc) { // the broker broke, hung or sent bytes we cannot read: retriable
      lostLeader();
      pause(exc.getMessage());
      return;
    }
    if (fetched.error == OFFSET_OUT_OF_RANGE) {
      position = onDataLoss();
      deadline = deadline();
      return;
    }
    if (fetched.error == TOPIC_AUTHORIZATION_FAILED) {
      String who = task.sasl != null ? "User:" + task.sasl.user
          : "the source's principal (no sasl.username: its TLS certificate's, or User:ANONYMOUS)";
      throw new SourceException("TopicAuthorizationError", task.topic + "-" + task.partition + ": " + who
          + " is not authorized to Read topic '" + task.topic + "' (broker " + leader + " answered "
          + "TOPIC_AUTHORIZATION_FAILED, Kafka error " + fetched.error + "); an ACL must allow it");
    }
    if (fetched.error != 0) {
      String problem = task.topic + "-" + task.partition + ": Kafka error " + fetched.error;
      if (!task.retriable(fetched.error)) {
        throw new SourceException("SparkSourceError", "reading " + task.topic + "-" + task.partition
            + " from " + leader + ": " + problem);
      }
      lostLeader();
      pause(problem);
      return;
    }
    long end = task.end;
    if (task.readCommitted && fetched.lastStableOffset >= 0) {
      end = Math.min(end, fetched.lastStableOffset); // nothing of a transaction still open
    }
    batches = new RecordBatches(fetched.frame, fetched.recordsAt, fetched.recordsAt + fetched.recordsLength,
        position, end, true);
    if (task.readCommitted) {
      batches.readCommitted(fetched.aborted);
    }
  }

  /** The last fetch's records are handed out: move on, ask for more, or wait. */
  private void afterFetch() {
    RecordBatches done = batches;
    batches = null;
    if (done.nextOffset() > position) {
      position = done.nextOffset();
      deadline = deadline();
      backoffMs = BACKOFF_MS[0];
      return;
    }
    if (fetched.recordsLength > 0 && done.consumed() == fetched.recordsAt) {
      // One batch is larger than the fetch size: ask for more.
      if (fetchBytes >= task.maxFetchBytes) {
        throw new SourceException("SparkSourceError", task.topic + "-" + task.partition
            + ": the record batch at offset " + position + " is larger than " + task.maxFetchBytes + " bytes");
      }
      fetchBytes = (int) Math.min((long) fetchBytes * 2, task.maxFetchBytes);
      return;
    }
    if (System.nanoTime() > deadline) {
      timeout(task.readCommitted ? "the last stable offset is " + fetched.lastStableOffset
          : "the log ends at " + fetched.highWatermark);
    }
  }

  private long deadline() {
    return System.nanoTime() + task.pollTimeoutMs * 1_000_000L;
  }

  private void timeout(String problem) {
    throw new SourceException("ReadTimeoutError", task.topic + "-" + task.partition + ": no record at offset "
        + position + " from " + leader + " within " + task.pollTimeoutMs + " ms (range " + task.start + ".."
        + task.end + "; " + problem + ")");
  }

  private void pause(String problem) {
    if (System.nanoTime() + backoffMs * 1_000_000L > deadline) {
      timeout(problem);
    }
    try {
      Thread.sleep(backoffMs);
    } catch (InterruptedException exc) {
      Thread.currentThread().interrupt();
      throw new SourceException("SparkSourceError", "reading " + task.topic + "-" + task.partition
          + " was interrupted");
    }
    backoffMs = Math.min(backoffMs * 2, BACKOFF_MS[1]);
  }

  /** The leader failed us: drop the connection and ask every broker the plan knew where the partition is led now. */
  private void lostLeader() {
    close();
    java.util.LinkedHashSet<String> addresses = new java.util.LinkedHashSet<>();
    addresses.add(leader);
    java.util.Collections.addAll(addresses, task.brokers);
    for (String address : addresses) {
      try (KafkaConnection probe = new KafkaConnection(address, task.tls, task.sasl, CLIENT_ID, 5_000)) {
        String found = probe.leader(task.topic, task.partition);
        if (found != null) {
          leader = found;
          return;
        }
      } catch (IOException exc) {
        // that broker is gone too: ask the next
      }
    }
  }

  private long onDataLoss() throws IOException {
    long low;
    try {
      if (connection == null) {
        connection = new KafkaConnection(leader, task.tls, task.sasl, CLIENT_ID, 30_000);
      }
      low = connection.listOffset(task.topic, task.partition, EARLIEST_TIMESTAMP);
    } catch (PartitionException exc) {
      throw new SourceException("SparkSourceError", "reading " + task.topic + "-" + task.partition + " from "
          + leader + ": " + exc.getMessage());
    }
    if (task.failOnDataLoss || low <= position) {
      throw new SourceException("DataLossError", task.topic + "-" + task.partition + ": offset " + position
          + " is gone (the log starts at " + low + "); set failOnDataLoss=false to skip lost records");
    }
    return low;
  }

  @Override
  public void close() {
    if (connection != null) {
      connection.close();
      connection = null;
    }
  }
}
