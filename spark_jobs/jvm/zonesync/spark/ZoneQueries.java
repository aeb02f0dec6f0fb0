package zonesync.spark;

import java.sql.Connection;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;

import org.apache.spark.api.java.function.FlatMapFunction;

/**
 * Queries run by the zones themselves, a few rows back each: the consistency check's chunk
 * checksums (docs/consistency-check.md), where each zone computes its own COUNT and
 * BIT_XOR of row CRCs over a key range and only those numbers leave the database
 * (pushed down, like pt-table-checksum's), and a differing chunk's checksums per key
 * sub-range (GROUP BY, one row each).
 *
 * <p>An element is {@code "<tag>\t<zone index>\t<SQL>"}; each row of its result is {@code
 * "<tag>\t<column 1>\t<column 2>…"} (NULL as {@code \N}), an empty result {@code "<tag>\t"}. The SQL comes from the Python
 * job (zonesync.check.sql), which owns it; this class only runs it, with one connection
 * per zone per partition (each zone's queries on a thread of their own, so the zones
 * compute at once), each query in a read-only autocommit statement of its own.
 */
public final class ZoneQueries implements FlatMapFunction<Iterator<String>, String> {
  private static final long serialVersionUID = 1L;

  private final ChunkCopier.Endpoint[] zones;

  public ZoneQueries(ChunkCopier.Endpoint[] zones) {
    this.zones = zones;
  }

  @Override
  public Iterator<String> call(Iterator<String> elements) throws Exception {
    // each zone's queries on a thread of its own, one after another on one connection:
    // the zones compute at once (a task waiting on one zone would leave the others idle)
    Map<Integer, List<String[]>> byZone = new HashMap<>();
    while (elements.hasNext()) {
      String[] parts = elements.next().split("\t", 3);
      byZone.computeIfAbsent(Integer.parseInt(parts[1]), z -> new ArrayList<>()).add(parts);
    }
    ExecutorService pool = Executors.newFixedThreadPool(Math.max(1, byZone.size()));
    try {
      List<Future<List<String>>> running = new ArrayList<>();
      for (Map.Entry<Integer, List<String[]>> zone : byZone.entrySet()) {
        running.add(pool.submit(() -> runAll(zones[zone.getKey()], zone.getValue())));
      }
      List<String> out = new ArrayList<>();
      for (Future<List<String>> f : running) {
        try {
          out.addAll(f.get());
        } catch (ExecutionException e) {
          throw e.getCause() instanceof Exception ? (Exception) e.getCause() : e;
        }
      }
      return out.iterator();
    } finally {
      pool.shutdownNow();
    }
  }

  private static List<String> runAll(ChunkCopier.Endpoint zone, List<String[]> queries) throws SQLException {
    List<String> out = new ArrayList<>();
    try (Connection conn = zone.open()) {
      conn.setAutoCommit(true);
      conn.setReadOnly(true);
      for (String[] parts : queries) {
        for (String row : run(conn, parts[2])) {
          out.add(parts[0] + "\t" + row);
        }
      }
    }
    return out;
  }

  /** Every row of the query's result ({@code ""} alone when it has none). */
  private static List<String> run(Connection conn, String sql) throws SQLException {
    List<String> rows = new ArrayList<>();
    try (Statement st = conn.createStatement(); ResultSet rs = st.executeQuery(sql)) {
      int n = rs.getMetaData().getColumnCount();
      while (rs.next()) {
        StringBuilder row = new StringBuilder();
        for (int i = 1; i <= n; i++) {
          String v = rs.getString(i);
          if (i > 1) {
            row.append('\t');
          }
          row.append(v == null ? "\\N" : v);
        }
        rows.add(row.toString());
      }
    }
    if (rows.isEmpty()) {
      rows.add("");
    }
    return rows;
  }
}
