package zkcoord.spark;

import java.util.EnumSet;
import java.util.Map;
import java.util.Set;
import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.read.streaming.MicroBatchStream;
import org.apache.spark.sql.sources.DataSourceRegister;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * {@code format("zkcoord")} on the JVM: Spark's DataSource V2 entry point.
 *
 * <p>Planning stays in Python: every plan is asked of the planner that
 * zkcoord.spark.register installed from the driver's Python process
 * (options, ZooKeeper, offsets, the group membership of a streaming query).
 * Executors read the planned ranges here, without a Python worker and
 * without an object per record (RangeReader).
 */
public final class ZkcoordSource implements TableProvider, DataSourceRegister {
  /** Spark's Kafka source's columns; the twin of SCHEMA_DDL in zkcoord/spark/reader.py. */
  static final StructType SCHEMA = new StructType()
      .add("key", DataTypes.BinaryType)
      .add("value", DataTypes.BinaryType)
      .add("topic", DataTypes.StringType)
      .add("partition", DataTypes.IntegerType)
      .add("offset", DataTypes.LongType)
      .add("timestamp", DataTypes.TimestampType)
      .add("timestampType", DataTypes.IntegerType);

  @Override
  public String shortName() {
    return "zkcoord";
  }

  @Override
  public StructType inferSchema(CaseInsensitiveStringMap options) {
    return SCHEMA;
  }

  @Override
  public Table getTable(StructType schema, Transform[] partitioning, Map<String, String> properties) {
    return new ZkcoordTable();
  }

  static final class ZkcoordTable implements SupportsRead {
    @Override
    public String name() {
      return "zkcoord";
    }

    @Override
    @SuppressWarnings("deprecation") // columns() replaces it, but Spark 4 still reads schema()
    public StructType schema() {
      return SCHEMA;
    }

    @Override
    public Set<TableCapability> capabilities() {
      return EnumSet.of(TableCapability.BATCH_READ, TableCapability.MICRO_BATCH_READ);
    }

    @Override
    public ScanBuilder newScanBuilder(CaseInsensitiveStringMap options) {
      Map<String, String> given = options.asCaseSensitiveMap();
      return () -> new ZkcoordScan(Planners.options(given));
    }
  }

  static final class ZkcoordScan implements Scan {
    private final String options; // as JSON

    ZkcoordScan(String options) {
      this.options = options;
    }

    @Override
    public StructType readSchema() {
      return SCHEMA;
    }

    @Override
    public String description() {
      return "zkcoord";
    }

    @Override
    public Batch toBatch() {
      return new ZkcoordBatch(options);
    }

    @Override
    public MicroBatchStream toMicroBatchStream(String checkpointLocation) {
      return new ZkcoordStream(options);
    }
  }

  static final class ZkcoordBatch implements Batch {
    private final String options;
    private InputPartition[] planned;

    ZkcoordBatch(String options) {
      this.options = options;
    }

    @Override
    public synchronized InputPartition[] planInputPartitions() {
      if (planned == null) {
        planned = RangePartition.of(Planners.result(Planners.planner().planBatch(options)));
      }
      return planned;
    }

    @Override
    public PartitionReaderFactory createReaderFactory() {
      return new RangeReader.Factory();
    }
  }
}
