package zonesync.spark;

import java.io.Serializable;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.ResultSetMetaData;
import java.sql.SQLException;
import java.sql.Statement;
import java.sql.Types;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashSet;
import java.util.Iterator;
import java.util.List;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.ArrayBlockingQueue;
import java.util.concurrent.BlockingQueue;

import org.apache.spark.TaskContext;
import org.apache.spark.api.java.function.VoidFunction;

/**
 * The row copy of one wave of key-range chunks: partition p of an RDD of the numbers 0..n-1
 * (one per partition) copies chunk p, from the source zone straight into the target's table (docs/copy.md, "The row copy"). The task
 * reads the chunk with one keyed SELECT (one consistent read), holds its rows, and lands
 * them in one target transaction (the read overlapping the landing, see below):
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
 * <p>Values travel as the driver reads them, never through Spark's rows or a Python
 * worker: numbers as their Java objects (exact, floats included), dates and times as the
 * server's text (no time zone on the way), binary columns as bytes, text as strings.
 * The statements come from the Python job (zonesync.copy.merge), which owns the SQL.
 *
 * <p>The target transaction runs in REPEATABLE READ: the tombstone probe of step 4 is a
 * consistent read taken after the inserts' row locks, so an applier's delete either
 * committed its tombstone before (seen) or waits for this transaction's lock on the row
 * and deletes it after (in copy mode the applier writes the tombstone before its
 * version-guarded delete). A deadlock or lock wait timeout with the appliers rolls the
 * chunk back whole; it is landed again from the rows the task holds.
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
      Chunk held = null; // the chunk's rows, once read whole: what a retry lands
      if (gateSql != null) { // (tests) read, wait at the gate, then land
        held = new Chunk();
        read(p, held, batch -> { });
        try (Statement st = conn.createStatement()) {
          st.executeQuery(gateSql).close();
        }
      }
      conn.setTransactionIsolation(Connection.TRANSACTION_REPEATABLE_READ);
      conn.setAutoCommit(false);
      for (int attempt = 1; ; attempt++) {
        Reader reader = null;
        try {
          if (!claim(conn, p)) {
            conn.commit(); // done by an earlier attempt: nothing is read
            return;
          }
          Set<List<Long>> present = present(conn, p);
          long landed;
          if (held == null) { // first attempt: the source is read while the batches land
            reader = new Reader(p);
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

  /** A chunk's rows as read, and how each column is carried. */
  private static final class Chunk {
    final List<Object[]> rows = new ArrayList<>();
    int[] kinds;
  }

  private static final int OBJECT = 0;
  private static final int TEXT = 1;
  private static final int BYTES = 2;

  private static int kindOf(int sqlType) {
    switch (sqlType) {
      case Types.BINARY:
      case Types.VARBINARY:
      case Types.LONGVARBINARY:
      case Types.BLOB:
      case Types.BIT:
        return BYTES;
      case Types.DATE:
      case Types.TIME:
      case Types.TIMESTAMP:
      case Types.TIME_WITH_TIMEZONE:
      case Types.TIMESTAMP_WITH_TIMEZONE:
      case Types.CHAR:
      case Types.VARCHAR:
      case Types.LONGVARCHAR:
      case Types.NCHAR:
      case Types.NVARCHAR:
      case Types.LONGNVARCHAR:
      case Types.CLOB:
      case Types.NCLOB:
        return TEXT;
      default:
        return OBJECT;
    }
  }

  /** What read() hands on, a batch of rows at a time. */
  private interface Batches {
    void put(List<Object[]> batch) throws InterruptedException;
  }

  /** Read chunk p from the source (one keyed SELECT, streamed) into {@code chunk}, handing
   * every {@code batchSize} rows on as they come. */
  private void read(int p, Chunk chunk, Batches out) throws SQLException, InterruptedException {
    try (Connection conn = source.open(); Statement st = conn.createStatement()) {
      st.setFetchSize(batchSize);
      try (ResultSet rs = st.executeQuery(selectSql[p])) {
        ResultSetMetaData md = rs.getMetaData();
        int width = md.getColumnCount();
        int[] kinds = new int[width];
        for (int i = 0; i < width; i++) {
          kinds[i] = kindOf(md.getColumnType(i + 1));
        }
        chunk.kinds = kinds;
        List<Object[]> batch = new ArrayList<>(batchSize);
        while (rs.next()) {
          Object[] row = new Object[width];
          for (int i = 0; i < width; i++) {
            switch (kinds[i]) {
              case TEXT:
                row[i] = rs.getString(i + 1);
                break;
              case BYTES:
                row[i] = rs.getBytes(i + 1);
                break;
              default:
                row[i] = rs.getObject(i + 1);
            }
          }
          chunk.rows.add(row);
          batch.add(row);
          if (batch.size() == batchSize) {
            out.put(batch);
            batch = new ArrayList<>(batchSize);
          }
        }
        if (!batch.isEmpty()) {
          out.put(batch);
        }
      }
    }
  }

  /** The source read on a thread of its own, its batches queued for the landing (a few
   * ahead at most): the source's sending and this JVM's reading overlap the target's
   * inserting. */
  private final class Reader extends Thread {
    final Chunk chunk = new Chunk();
    final BlockingQueue<List<Object[]>> batches = new ArrayBlockingQueue<>(4);
    private final int p;
    private volatile Throwable failed;
    private volatile boolean complete;

    Reader(int p) {
      super("zonesync-copy-read-" + p);
      setDaemon(true);
      this.p = p;
    }

    @Override
    public void run() {
      try {
        read(p, chunk, batches::put);
        complete = true;
      } catch (Throwable t) { // handed to the landing, which rethrows it
        failed = t;
      } finally {
        try {
          batches.put(END);
        } catch (InterruptedException e) {
          Thread.currentThread().interrupt();
        }
      }
    }

    /** The next batch, or null once the chunk is read whole; the read's failure, if any. */
    List<Object[]> next() throws SQLException, InterruptedException {
      List<Object[]> batch = batches.take();
      if (batch != END) {
        return batch;
      }
      batches.put(END); // for a second look
      if (failed instanceof SQLException) {
        throw (SQLException) failed;
      }
      if (failed != null) {
        throw new SQLException("reading the chunk from the source failed: " + failed, failed);
      }
      return null;
    }

    /** Stop reading (interrupted, joined); true if the chunk was not read whole. */
    boolean halt() throws InterruptedException {
      if (isAlive()) {
        interrupt();
        batches.clear();
        join();
      }
      return !complete;
    }
  }

  private static final List<Object[]> END = new ArrayList<>();

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
  private long landStream(Connection conn, Reader reader, Set<List<Long>> present)
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
            bind(ps, row, reader.chunk.kinds);
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
  private long landRows(Connection conn, Chunk chunk, Set<List<Long>> present) throws SQLException {
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
        bind(ps, row, kinds);
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

  /** One row's values as the statement's parameters, added to its batch. */
  private static void bind(PreparedStatement ps, Object[] row, int[] kinds) throws SQLException {
    for (int i = 0; i < row.length; i++) {
      Object v = row[i];
      if (v == null) {
        ps.setNull(i + 1, Types.NULL);
      } else if (kinds[i] == TEXT) {
        ps.setString(i + 1, (String) v);
      } else if (kinds[i] == BYTES) {
        ps.setBytes(i + 1, (byte[]) v);
      } else {
        ps.setObject(i + 1, v);
      }
    }
    ps.addBatch();
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
