package zkcoord.spark;

import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.streaming.MicroBatchStream;
import org.apache.spark.sql.connector.read.streaming.Offset;
import org.apache.spark.sql.connector.read.streaming.ReadAllAvailable;
import org.apache.spark.sql.connector.read.streaming.ReadLimit;
import org.apache.spark.sql.connector.read.streaming.ReadMaxRows;
import org.apache.spark.sql.connector.read.streaming.SupportsTriggerAvailableNow;

/**
 * A streaming query's micro-batches. Each decision (offsets, admission
 * control, the group's grants, commits) is the Python stream reader's
 * (zkcoord/spark/source.py's StreamReader, run by the planner in the
 * driver's Python process); offsets are its JSON text, so a checkpoint
 * reads the same on either path.
 */
final class ZkcoordStream implements MicroBatchStream, SupportsTriggerAvailableNow {
  private final String id;

  ZkcoordStream(String options) {
    this.id = Planners.result(Planners.planner().openStream(options)).asText();
  }

  /** Offsets as the planner writes them. */
  static final class JsonOffset extends Offset {
    private final String json;

    JsonOffset(String json) {
      this.json = json;
    }

    @Override
    public String json() {
      return json;
    }
  }

  private static String text(Offset offset) {
    return offset.json();
  }

  @Override
  public Offset initialOffset() {
    return new JsonOffset(Planners.result(Planners.planner().initialOffset(id)).asText());
  }

  @Override
  public Offset deserializeOffset(String json) {
    return new JsonOffset(json);
  }

  @Override
  public ReadLimit getDefaultReadLimit() {
    long maxRows = Planners.result(Planners.planner().defaultMaxRows(id)).asLong();
    return maxRows > 0 ? ReadLimit.maxRows(maxRows) : ReadLimit.allAvailable();
  }

  @Override
  public void prepareForTriggerAvailableNow() {
    Planners.result(Planners.planner().prepareForTriggerAvailableNow(id));
  }

  @Override
  public Offset latestOffset() {
    throw new UnsupportedOperationException("latestOffset(start, limit) is the one zkcoord serves");
  }

  @Override
  public Offset latestOffset(Offset start, ReadLimit limit) {
    long maxRows = -1;
    if (limit instanceof ReadMaxRows) {
      maxRows = ((ReadMaxRows) limit).maxRows();
    } else if (!(limit instanceof ReadAllAvailable)) {
      throw new SourceException("SparkSourceError", "read limit " + limit + " is not one zkcoord serves");
    }
    return new JsonOffset(Planners.result(Planners.planner().latestOffset(id, text(start), maxRows)).asText());
  }

  @Override
  public InputPartition[] planInputPartitions(Offset start, Offset end) {
    return RangePartition.of(Planners.result(Planners.planner().planMicroBatch(id, text(start), text(end))));
  }

  @Override
  public PartitionReaderFactory createReaderFactory() {
    return new RangeReader.Factory();
  }

  @Override
  public void commit(Offset end) {
    Planners.result(Planners.planner().commit(id, text(end)));
  }

  @Override
  public void stop() {
    Planners.result(Planners.planner().stop(id));
  }
}
