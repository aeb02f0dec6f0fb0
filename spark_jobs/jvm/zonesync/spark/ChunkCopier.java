package zonesync.spark;

import java.io.Serializable;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashSet;
import java.util.Iterator;
import java.util.List;
import java.util.Properties;
import java.util.Set;

import org.apache.spark.TaskContext;
import org.apache.spark.api.java.function.VoidFunction;

/**
 * The row copy of one wave of key-range chunks: partition p of an RDD of the numbers
 * 0..n-1 (one per partition) copies chunk p from the source zone straight into the
 * target's table (docs/copy.md, "The row copy"). The task reads the chunk with one keyed
 * SELECT (one consistent read) on a thread of its own (ChunkRows.Reader), and lands its
 * batches as they come, in one target transaction:
 *
 * <ol>
 *   <li>lock the chunk's row in copy_chunks; a chunk already done is skipped (a re-run
 *       after a kill lands only what did not commit);
 *   <li>lock the chunk's key range in the target (SELECT key … FOR UPDATE: its rows and
 *       the gaps between them), which tells which copied keys the target holds;
 *   <li>the rows whose keys it lacks as batched plain INSERTs (no row can appear in the
 *       locked range meanwhile), the others as batched, version-guarded upserts (INSERT …
 *       ON DUPLICATE KEY UPDATE every column only if the copied version is newer:
 *       S000-71..75). The server runs a batch of plain INSERTs twice as fast as one of
 *       upserts, and a copy into an emptied zone finds almost every key missing;
 *   <li>if the table has any tombstone, delete the chunk's rows that a tombstone at or
 *       above their version outranks (S000-76: a delete the stream applied first keeps
 *       the row away; versions only grow, a re-insert outranks its tombstone, so a live
 *       row at or below its tombstone is stale whoever wrote it);
 *   <li>mark the chunk done with its counts; commit.
 * </ol>
 *
 * <p>Values travel as the driver reads them (ChunkRows), never through Spark's rows or a
 * Python worker. The statements come from the Python job (zonesync.copy.merge), which
 * owns the SQL.
 *
 * <p>The target transaction runs in REPEATABLE READ: the tombstone probe of step 4 is a
 * consistent read taken after the inserts' row locks, so an applier's delete either
 * committed its tombstone before (seen) or waits for this transaction's lock on the row
 * and deletes it after (in copy mode the applier writes the tombstone before its
 * version-guarded delete). A deadlock or lock wait timeout with the appliers rolls the
 * chunk back whole; it is landed again from the rows the task holds (read again if the
 * failure came before the read was whole).
 *
 * <p>{@code gateSql} (tests only, else null) runs on the target after the read and before
 * the landing: a test holds a named lock there to act between the two.
 */
public final class ChunkCopier implements VoidFunction<Iterator<Number>> {
  private static final long serialVersionUID = 1L;
  private static final int ATTEMPTS = 10;

  /** One zone's connection: its JDBC URL and properties (user, password, session). */
  public static final class Endpoint implements Serializable {
    private static final long serialVersionUID = 1L;
    final String url;
    final Properties props;

    public Endpoint(String url, Properties props) {
      this.url = url;
      this.props = props;
    }

    Connection open() throws SQLException {
      return DriverManager.getConnection(url, props);
    }
  }

  private final Endpoint source;
  private final Endpoint target;
  private final String runId;
  private final String table;
  private final long[] chunks; // partition p copies chunk chunks[p]
  private final String[] selectSql; // per chunk: the source's rows of its range, columns in landing order
  private final String[] rangeSql; // per chunk: SELECT key … FOR UPDATE of its range in the target
  private final String[] cleanupSql; // per chunk: DELETE its rows a tombstone outranks
  private final int[] keyAt; // where the key's columns are in a row
  private final String insertSql;
  private final String upsertSql;
  private final String lockSql; // (run id, table, chunk): SELECT status … FOR UPDATE
  private final String probeSql; // (table): any tombstone of the table?
  private final String doneSql; // (rows read, rows landed, run id, table, chunk)
  private final int batchSize;
  private final String gateSql;

  public ChunkCopier(Endpoint source, Endpoint target, String runId, String table, long[] chunks,
      String[] selectSql, String[] rangeSql, String[] cleanupSql, int[] keyAt, String insertSql,
      String upsertSql, String lockSql, String probeSql, String doneSql, int batchSize, String gateSql) {
    if (selectSql.length != chunks.length || rangeSql.length != chunks.length
        || cleanupSql.length != chunks.length) {
      throw new IllegalArgumentException("one select, range and cleanup statement per chunk");
    }
    this.source = source;
    this.target = target;
    this.runId = runId;
    this.table = table;
    this.chunks = chunks;
    this.selectSql = selectSql;
    this.rangeSql = rangeSql;
    this.cleanupSql = cleanupSql;
    this.keyAt = keyAt;
    this.insertSql = insertSql;
    this.upsertSql = upsertSql;
    this.lockSql = lockSql;
    this.probeSql = probeSql;
    this.doneSql = doneSql;
    this.batchSize = batchSize;
    this.gateSql = gateSql;
  }

  @Override
  public void call(Iterator<Number> partition) throws Exception {
    int p = TaskContext.getPartitionId();
    if (p >= chunks.length || !partition.hasNext() || partition.next().longValue() != p) {
      throw new IllegalStateException("partition " + p + " of a wave of " + chunks.length + " chunks");
    }
    try (Connection conn = target.open()) {
      ChunkRows held = null; // the chunk's rows, once read whole: what a retry lands
      if (gateSql != null) { // (tests) read, wait at the gate, then land
        held = new ChunkRows();
        ChunkRows.read(source, selectSql[p], batchSize, held, batch -> { });
        try (Statement st = conn.createStatement()) {
          st.executeQuery(gateSql).close();
        }
      }
      conn.setTransactionIsolation(Connection.TRANSACTION_REPEATABLE_READ);
      conn.setAutoCommit(false);
      for (int attempt = 1; ; attempt++) {
        ChunkRows.Reader reader = null;
        try {
          if (!claim(conn, p)) {
            conn.commit(); // done by an earlier attempt: nothing is read
            return;
          }
          Set<List<Long>> present = present(conn, p);
          long landed;
          if (held == null) { // first attempt: the source is read while the batches land
            reader = new ChunkRows.Reader(source, selectSql[p], batchSize, "zonesync-copy-read-" + p);
            reader.start();
            landed = landStream(conn, reader, present);
            held = reader.chunk;
          } else {
            landed = landRows(conn, held, present);
          }
          finish(conn, p, held.rows.size(), landed);
          conn.commit();
          return;
        } catch (SQLException e) {
          conn.rollback();
          if (reader != null && reader.halt()) {
            held = null; // read only in part: the next attempt reads it again
          }
          int code = e.getErrorCode();
          if ((code != 1213 && code != 1205) || attempt == ATTEMPTS) {
            throw e;
          }
          Thread.sleep((long) (10 + Math.random() * 40) * attempt);
        } finally {
          if (reader != null) {
            reader.halt();
          }
        }
      }
    }
  }

  /** Lock the chunk's row; false if it is done (an earlier attempt committed it). */
  private boolean claim(Connection conn, int p) throws SQLException {
    try (PreparedStatement lock = conn.prepareStatement(lockSql)) {
      lock.setString(1, runId);
      lock.setString(2, table);
      lock.setLong(3, chunks[p]);
      try (ResultSet rs = lock.executeQuery()) {
        return !(rs.next() && "done".equals(rs.getString(1)));
      }
    }
  }

  /** Lock the chunk's key range in the target; the keys it holds there. */
  private Set<List<Long>> present(Connection conn, int p) throws SQLException {
    Set<List<Long>> present = new HashSet<>();
    try (Statement st = conn.createStatement(); ResultSet rs = st.executeQuery(rangeSql[p])) {
      while (rs.next()) {
        Long[] key = new Long[keyAt.length];
        for (int i = 0; i < keyAt.length; i++) {
          key[i] = rs.getLong(i + 1);
        }
        present.add(Arrays.asList(key));
      }
    }
    return present;
  }

  /** Land the rows as the reader hands them on: the keys the target lacks a batch at a
   * time, the others together at the end; the rows changed. */
  private long landStream(Connection conn, ChunkRows.Reader reader, Set<List<Long>> present)
      throws SQLException, InterruptedException {
    long landed = 0;
    List<Object[]> known = new ArrayList<>();
    try (PreparedStatement ps = conn.prepareStatement(insertSql)) {
      for (List<Object[]> batch = reader.next(); batch != null; batch = reader.next()) {
        int pending = 0;
        for (Object[] row : batch) {
          if (!present.isEmpty() && present.contains(keyOf(row))) {
            known.add(row);
          } else {
            ChunkRows.bind(ps, row, reader.chunk.kinds);
            pending++;
          }
        }
        if (pending > 0) {
          landed += counted(ps.executeBatch());
        }
      }
    }
    return landed + write(conn, upsertSql, known, reader.chunk.kinds);
  }

  /** Land rows read earlier (a retry, or the tests' gate); the rows changed. */
  private long landRows(Connection conn, ChunkRows chunk, Set<List<Long>> present) throws SQLException {
    List<Object[]> fresh = new ArrayList<>(chunk.rows.size());
    List<Object[]> known = new ArrayList<>();
    for (Object[] row : chunk.rows) {
      (present.isEmpty() || !present.contains(keyOf(row)) ? fresh : known).add(row);
    }
    return write(conn, insertSql, fresh, chunk.kinds) + write(conn, upsertSql, known, chunk.kinds);
  }

  /** Enforce the tombstones (if the table has any) and mark the chunk done. */
  private void finish(Connection conn, int p, long read, long landed) throws SQLException {
    boolean marked;
    try (PreparedStatement probe = conn.prepareStatement(probeSql)) {
      probe.setString(1, table);
      try (ResultSet rs = probe.executeQuery()) {
        marked = rs.next();
      }
    }
    if (marked) {
      try (Statement st = conn.createStatement()) {
        landed -= st.executeUpdate(cleanupSql[p]);
      }
    }
    try (PreparedStatement done = conn.prepareStatement(doneSql)) {
      done.setLong(1, read);
      done.setLong(2, Math.max(landed, 0));
      done.setString(3, runId);
      done.setString(4, table);
      done.setLong(5, chunks[p]);
      done.executeUpdate();
    }
  }

  private List<Long> keyOf(Object[] row) {
    Long[] key = new Long[keyAt.length];
    for (int i = 0; i < keyAt.length; i++) {
      key[i] = ((Number) row[keyAt[i]]).longValue();
    }
    return Arrays.asList(key);
  }

  /** Bind each row's values as they were read and run in batches; the rows changed. */
  private long write(Connection conn, String sql, List<Object[]> rows, int[] kinds) throws SQLException {
    if (rows.isEmpty()) {
      return 0;
    }
    long changed = 0;
    try (PreparedStatement ps = conn.prepareStatement(sql)) {
      int pending = 0;
      for (Object[] row : rows) {
        ChunkRows.bind(ps, row, kinds);
        if (++pending == batchSize) {
          changed += counted(ps.executeBatch());
          pending = 0;
        }
      }
      if (pending > 0) {
        changed += counted(ps.executeBatch());
      }
    }
    return changed;
  }

  /** Rows an executeBatch changed: its counts when the driver has them (1 inserted, 2
   * updated, 0 kept), else one per row. */
  private static long counted(int[] counts) {
    long n = 0;
    for (int c : counts) {
      n += c >= 0 ? c : 1;
    }
    return n;
  }
}
