package zkcoord.spark;

/**
 * What the source asks of zkcoord's Python planner (zkcoord/spark/bridge.py),
 * which runs in the driver's Python process and answers through Py4J. Every
 * argument and answer is JSON text; an answer is {"result": ...} or
 * {"error": name, "message": text}. Options are the query's, as given.
 */
public interface Planner {
  /** The read tasks of a batch query. */
  String planBatch(String options);

  /** Opens a streaming query's reader; the answer's result is its id. */
  String openStream(String options);

  /** The stream's first offset. */
  String initialOffset(String stream);

  /** maxOffsetsPerTrigger, or -1 when every available record is read each trigger. */
  String defaultMaxRows(String stream);

  String prepareForTriggerAvailableNow(String stream);

  /** The end of the next micro-batch from {@code start}, at most {@code maxRows} records (-1: no limit). */
  String latestOffset(String stream, String start, long maxRows);

  /** The read tasks of the micro-batch from {@code start} to {@code end}. */
  String planMicroBatch(String stream, String start, String end);

  String commit(String stream, String end);

  String stop(String stream);
}
