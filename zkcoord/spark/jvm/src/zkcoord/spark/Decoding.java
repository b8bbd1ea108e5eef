package zkcoord.spark;

import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.util.Arrays;
import java.util.Base64;

/**
 * What the JVM decoder makes of some bytes, as JSON: for the tests that pin
 * it to the Python decoder record for record, and for looking at a fetched
 * log by hand.
 */
public final class Decoding {
  private Decoding() {}

  /**
   * {"rows": [[offset, timestamp, timestampType, key, value], ...], "next": n, "consumed": c}
   * with keys and values in base64 (null when null), or {"error": message}.
   */
  public static String describe(byte[] data, long start, long end, boolean checkCrc) {
    return describe(data, start, end, checkCrc, null);
  }

  /**
   * {@link #describe(byte[], long, long, boolean)} read committed when {@code aborted} is a JSON
   * list of [producer id, first offset] pairs (null: read uncommitted).
   */
  public static String describe(byte[] data, long start, long end, boolean checkCrc, String aborted) {
    ObjectNode answer = Planners.JSON.createObjectNode();
    RecordBatches batches = new RecordBatches(data, 0, data.length, start, end, checkCrc);
    if (aborted != null) {
      try {
        batches.readCommitted(Planners.JSON.readValue(aborted, long[][].class));
      } catch (java.io.IOException exc) {
        throw new IllegalArgumentException("aborted transactions: " + exc.getMessage());
      }
    }
    ArrayNode rows = answer.putArray("rows");
    Base64.Encoder base64 = Base64.getEncoder();
    try {
      while (batches.next()) {
        ArrayNode row = rows.addArray();
        row.add(batches.offset()).add(batches.timestamp()).add(batches.timestampType());
        row.add(batches.keyLength() < 0 ? null : base64.encodeToString(Arrays.copyOfRange(
            batches.keyBytes(), batches.keyOffset(), batches.keyOffset() + batches.keyLength())));
        row.add(batches.valueLength() < 0 ? null : base64.encodeToString(Arrays.copyOfRange(
            batches.valueBytes(), batches.valueOffset(), batches.valueOffset() + batches.valueLength())));
      }
    } catch (SourceException exc) {
      ObjectNode error = Planners.JSON.createObjectNode();
      error.put("error", exc.getMessage().substring(exc.kind().length() + 2));
      return error.toString();
    }
    answer.put("next", batches.nextOffset());
    answer.put("consumed", batches.consumed());
    return answer.toString();
  }
}
