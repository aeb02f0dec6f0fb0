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

import org.apache.spark.api.java.function.FlatMapFunction;

/**
 * Queries run by the zones themselves, one row back each: the consistency check's chunk
 * checksums (docs/consistency-check.md), where each zone computes its own COUNT and
 * BIT_XOR of row CRCs over a key range and only those numbers leave the database
 * (pushed down, like pt-table-checksum's).
 *
 * <p>An element is {@code "<tag>\t<zone index>\t<SQL>"}; the result of one is {@code
 * "<tag>\t<column 1>\t<column 2>…"} (NULL as {@code \N}). The SQL comes from the Python
 * job (zonesync.check.sql), which owns it; this class only runs it, with one connection
 * per zone per partition, each query in a read-only autocommit statement of its own.
 */
public final class ZoneQueries implements FlatMapFunction<Iterator<String>, String> {
  private static final long serialVersionUID = 1L;

  private final ChunkCopier.Endpoint[] zones;

  public ZoneQueries(ChunkCopier.Endpoint[] zones) {
    this.zones = zones;
  }

  @Override
  public Iterator<String> call(Iterator<String> elements) throws SQLException {
    List<String> out = new ArrayList<>();
    Map<Integer, Connection> open = new HashMap<>();
    try {
      while (elements.hasNext()) {
        String[] parts = elements.next().split("\t", 3);
        int zone = Integer.parseInt(parts[1]);
        Connection conn = open.get(zone);
        if (conn == null) {
          conn = zones[zone].open();
          conn.setAutoCommit(true);
          conn.setReadOnly(true);
          open.put(zone, conn);
        }
        out.add(parts[0] + "\t" + run(conn, parts[2]));
      }
    } finally {
      for (Connection conn : open.values()) {
        conn.close();
      }
    }
    return out.iterator();
  }

  private static String run(Connection conn, String sql) throws SQLException {
    try (Statement st = conn.createStatement(); ResultSet rs = st.executeQuery(sql)) {
      if (!rs.next()) {
        return "";
      }
      int n = rs.getMetaData().getColumnCount();
      StringBuilder row = new StringBuilder();
      for (int i = 1; i <= n; i++) {
        String v = rs.getString(i);
        if (i > 1) {
          row.append('\t');
        }
        row.append(v == null ? "\\N" : v);
      }
      return row.toString();
    }
  }
}
