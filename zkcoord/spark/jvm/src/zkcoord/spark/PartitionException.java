package zkcoord.spark;

/** A broker answered for a partition with a Kafka error code. */
final class PartitionException extends RuntimeException {
  private static final long serialVersionUID = 1L;
  final int code;

  PartitionException(String topic, int partition, int code) {
    super(topic + "-" + partition + ": Kafka error " + code);
    this.code = code;
  }
}
