package zkcoord.spark;

/**
 * A failure of the zkcoord source, named after the Python error of the same
 * meaning (zkcoord/spark/errors.py, CorruptRecordsError), so a query fails
 * with the same words on the JVM path as on the Python one.
 */
public final class SourceException extends RuntimeException {
  private static final long serialVersionUID = 1L;
  private final String kind;

  public SourceException(String kind, String message) {
    super(kind + ": " + message);
    this.kind = kind;
  }

  /** The error's name: SparkSourceError, DataLossError, ReadTimeoutError, ... */
  public String kind() {
    return kind;
  }
}
