package zonesync.spark;

import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.ResultSetMetaData;
import java.sql.SQLException;
import java.sql.Statement;
import java.sql.Types;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ArrayBlockingQueue;
import java.util.concurrent.BlockingQueue;

/**
 * A chunk's rows as ChunkCopier reads them from the source, and how each value travels to
 * the target: numbers as the driver's Java objects (exact, floats included), dates and
 * times as the server's text (no time zone on the way), binary columns as bytes, text as
 * strings. The read can run on a thread of its own (Reader), handing batches on while the
 * landing inserts the earlier ones.
 */
final class ChunkRows {
  final List<Object[]> rows = new ArrayList<>();
  int[] kinds; // per column: OBJECT, TEXT or BYTES

  static final int OBJECT = 0;
  static final int TEXT = 1;
  static final int BYTES = 2;

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
  interface Batches {
    void put(List<Object[]> batch) throws InterruptedException;
  }

  /** Read a chunk from the source (one keyed SELECT, streamed) into {@code chunk}, handing
   * every {@code batchSize} rows on as they come. */
  static void read(ChunkCopier.Endpoint source, String sql, int batchSize, ChunkRows chunk, Batches out)
      throws SQLException, InterruptedException {
    try (Connection conn = source.open(); Statement st = conn.createStatement()) {
      st.setFetchSize(batchSize);
      try (ResultSet rs = st.executeQuery(sql)) {
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
  static final class Reader extends Thread {
    final ChunkRows chunk = new ChunkRows();
    final BlockingQueue<List<Object[]>> batches = new ArrayBlockingQueue<>(4);
    private final ChunkCopier.Endpoint source;
    private final String sql;
    private final int batchSize;
    private volatile Throwable failed;
    private volatile boolean complete;

    Reader(ChunkCopier.Endpoint source, String sql, int batchSize, String name) {
      super(name);
      setDaemon(true);
      this.source = source;
      this.sql = sql;
      this.batchSize = batchSize;
    }

    @Override
    public void run() {
      try {
        read(source, sql, batchSize, chunk, batches::put);
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

  /** One row's values as the statement's parameters, added to its batch. */
  static void bind(PreparedStatement ps, Object[] row, int[] kinds) throws SQLException {
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
}
