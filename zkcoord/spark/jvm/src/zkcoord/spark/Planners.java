package zkcoord.spark;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.util.Map;
import java.util.TreeMap;

/**
 * The planner the driver's Python process installed (zkcoord.spark.register),
 * and the one way to call it: answers are unwrapped, errors become a
 * SourceException with the planner's error name.
 */
public final class Planners {
  static final ObjectMapper JSON = new ObjectMapper();
  private static volatile Planner installed;

  private Planners() {}

  /** Called from Python by zkcoord.spark.register(spark). */
  public static void install(Planner planner) {
    installed = planner;
  }

  public static boolean isInstalled() {
    return installed != null;
  }

  static Planner planner() {
    Planner planner = installed;
    if (planner == null) {
      throw new SourceException("SparkSourceError", "format(\"zkcoord\") needs its planner: call "
          + "zkcoord.spark.register(spark) in the driver's Python process before reading");
    }
    return planner;
  }

  /** The result of an answer, or the error it carries, thrown. */
  static JsonNode result(String answer) {
    JsonNode node;
    try {
      node = JSON.readTree(answer);
    } catch (Exception exc) {
      throw new SourceException("SparkSourceError", "the planner answered with something not JSON: " + exc);
    }
    if (node.has("error")) {
      throw new SourceException(node.get("error").asText(), node.path("message").asText());
    }
    return node.get("result");
  }

  static String options(Map<String, String> options) {
    try {
      return JSON.writeValueAsString(new TreeMap<>(options));
    } catch (Exception exc) {
      throw new IllegalStateException(exc);
    }
  }
}
