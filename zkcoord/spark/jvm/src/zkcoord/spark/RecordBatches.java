package zkcoord.spark;

import com.github.luben.zstd.ZstdInputStreamNoFinalizer;
import java.io.ByteArrayInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.math.BigInteger;
import java.util.Arrays;
import java.util.zip.CRC32C;
import java.util.zip.GZIPInputStream;
import net.jpountz.lz4.LZ4FrameInputStream;
import org.xerial.snappy.Snappy;
import org.xerial.snappy.SnappyInputStream;

/**
 * Walks the records of a run of v2 record batches (one Fetch response's
 * records) one at a time, keeping those with {@code start <= offset < end}.
 *
 * <p>The JVM twin of zkcoord/fetch/records.py's decoder, with the same
 * rules and the same error messages: control batches (transaction markers)
 * and compacted-away offsets leave gaps but count as read, LogAppendTime
 * gives every record the batch's time, a partial batch at the end is left
 * for the next fetch, and bad bytes raise a CorruptRecordsError. Read
 * committed ({@link #readCommitted}), the batches of aborted transactions
 * leave gaps too, by the rule of records.py's _AbortedTransactions. The header
 * layout's twin is zkcoord/broker/formats.py. Records are not copied: after
 * {@link #next()} the key and value are slices of {@link #keyBytes()} and
 * {@link #valueBytes()}, valid until the next call.
 */
final class RecordBatches {
  static final int LOG_OVERHEAD = 12; // base offset + batch length
  static final int HEADER_SIZE = 61;
  static final int CRC_START = 21; // the CRC covers attributes .. end of batch
  static final int MAGIC = 2;
  static final int COMPRESSION_MASK = 0x07;
  static final int LOG_APPEND_TIME_FLAG = 0x08;
  static final int TRANSACTIONAL_FLAG = 0x10;
  static final int CONTROL_FLAG = 0x20;
  static final int ABORT_MARKER = 0; // a control record's type, in its key
  static final String[] CODEC_NAMES = {"none", "gzip", "snappy", "lz4", "zstd"};
  // xerial's stream header: marker, "SNAPPY", a pad byte, version 1, compatible version 1.
  private static final byte[] XERIAL_HEADER = {(byte) 0x82, 'S', 'N', 'A', 'P', 'P', 'Y', 0, 0, 0, 0, 1, 0, 0, 0, 1};

  private final byte[] data;
  private final int limit;
  private final long start;
  private final long end; // -1: no end
  private final boolean checkCrc;
  private final CRC32C crc = new CRC32C();
  private byte[] inflated = new byte[0]; // a compressed batch's records, reused
  private int inflatedLength;

  // Read committed: the aborted transactions, (producer id, first offset) by first offset (null:
  // read uncommitted), the first not yet reached, and the producers whose aborted transaction is under way.
  private long[][] aborted;
  private int nextAborted;
  private final java.util.HashSet<Long> openAborted = new java.util.HashSet<>();

  private int pos; // the next batch's first byte
  private long nextOffset; // where the next fetch begins
  private boolean done;

  // The batch being walked.
  private byte[] records;
  private int recordPos;
  private int recordsEnd;
  private int remaining;
  private long baseOffset;
  private long firstTimestamp;
  private long maxTimestamp;
  private int timestampType;
  private long pendingNext; // the open batch's next offset, applied once it is walked

  // The current record.
  private long offset;
  private long timestamp;
  private int keyOffset;
  private int keyLength; // -1: null
  private int valueOffset;
  private int valueLength; // -1: null

  RecordBatches(byte[] data, int from, int limit, long start, long end, boolean checkCrc) {
    this.data = data;
    this.pos = from;
    this.limit = limit;
    this.start = start;
    this.end = end;
    this.checkCrc = checkCrc;
    this.nextOffset = start;
  }

  /** Leave out aborted transactions: a Fetch answer's (producer id, first offset) pairs, in any order. */
  void readCommitted(long[][] abortedTransactions) {
    aborted = abortedTransactions.clone();
    Arrays.sort(aborted, (a, b) -> Long.compare(a[1], b[1]));
  }

  /** Moves to the next record in range; false when none is left in these bytes. */
  boolean next() {
    while (!done) {
      while (remaining > 0) {
        if (nextRecordWanted()) {
          return true;
        }
        if (done) {
          return false;
        }
      }
      if (records != null) {
        finishBatch();
        records = null;
        if (done) {
          return false;
        }
      }
      if (!openBatch()) {
        done = true;
      }
    }
    return false;
  }

  /** The offset the next fetch starts at, once {@link #next()} returned false. */
  long nextOffset() {
    return nextOffset;
  }

  /** Bytes of whole batches walked, once {@link #next()} returned false. */
  int consumed() {
    return pos;
  }

  long offset() { return offset; }
  long timestamp() { return timestamp; }
  int timestampType() { return timestampType; }
  byte[] keyBytes() { return records; }
  int keyOffset() { return keyOffset; }
  int keyLength() { return keyLength; }
  byte[] valueBytes() { return records; }
  int valueOffset() { return valueOffset; }
  int valueLength() { return valueLength; }

  /** Reads the next batch's header; false at the end or before a partial batch. */
  private boolean openBatch() {
    while (limit - pos >= LOG_OVERHEAD + 5) {
      long base = getLong(data, pos);
      int batchLength = getInt(data, pos + 8);
      int magic = data[pos + 16];
      if (magic != MAGIC) {
        throw new SourceException("CorruptRecordsError",
            "record batch at offset " + base + " has magic " + magic + "; only magic 2 is read");
      }
      if (batchLength < HEADER_SIZE - LOG_OVERHEAD) {
        throw corrupt("its length is shorter than a batch header", base);
      }
      if ((long) limit - pos < (long) LOG_OVERHEAD + batchLength) {
        return false; // a partial batch at the end of a fetch: not an error
      }
      int batchEnd = pos + LOG_OVERHEAD + batchLength;
      long storedCrc = getInt(data, pos + 17) & 0xFFFFFFFFL;
      int attributes = getShort(data, pos + 21);
      int lastOffsetDelta = getInt(data, pos + 23);
      long first = getLong(data, pos + 27);
      long max = getLong(data, pos + 35);
      int count = getInt(data, pos + 57);
      if (checkCrc) {
        crc.reset();
        crc.update(data, pos + CRC_START, batchEnd - pos - CRC_START);
        if (crc.getValue() != storedCrc) {
          throw new SourceException("CorruptRecordsError", "record batch at offset " + base
              + " fails its CRC (stored " + storedCrc + ", computed " + crc.getValue() + ")");
        }
      }
      if (count < 0) {
        throw corrupt("a negative record count", base);
      }
      long batchNext;
      try {
        batchNext = Math.addExact(Math.addExact(base, lastOffsetDelta), 1);
      } catch (ArithmeticException overflow) {
        if (lastOffsetDelta >= 0) {
          throw corrupt("an offset or timestamp overflows", base);
        }
        batchNext = Long.MIN_VALUE; // below any start: a batch to skip, as the Python decoder does
      }
      int codec = attributes & COMPRESSION_MASK;
      int batchStart = pos;
      pos = batchEnd;
      boolean control = (attributes & CONTROL_FLAG) != 0;
      boolean abortedBatch = false;
      long producer = getLong(data, batchStart + 43);
      if (aborted != null && producer >= 0) {
        // The cleaner leaves empty control batches: no marker.
        boolean abortMarker = control && count > 0 && markerType(codec, batchStart, batchEnd, base) == ABORT_MARKER;
        abortedBatch = abortedSkips(producer, batchNext - 1, (attributes & TRANSACTIONAL_FLAG) != 0, abortMarker);
      }
      // Control batches (transaction markers) hold no application records,
      // and a batch wholly below `start` needs no decompressing.
      if (!control && !abortedBatch && batchNext > start) {
        baseOffset = base;
        firstTimestamp = first;
        maxTimestamp = max;
        timestampType = (attributes & LOG_APPEND_TIME_FLAG) != 0 ? 1 : 0;
        remaining = count;
        if (codec == 0) {
          records = data;
          recordPos = batchStart + HEADER_SIZE;
          recordsEnd = batchEnd;
        } else {
          records = decompress(codec, data, batchStart + HEADER_SIZE, batchEnd - batchStart - HEADER_SIZE);
          recordPos = 0;
          recordsEnd = inflatedLength;
        }
        pendingNext = batchNext;
        return true;
      }
      if (end >= 0 && batchNext >= end) {
        nextOffset = end;
        return false;
      }
      nextOffset = Math.max(nextOffset, batchNext);
    }
    return false;
  }

  /** Whether a batch of {@code producer} ending at {@code lastOffset} is of an aborted transaction. */
  private boolean abortedSkips(long producer, long lastOffset, boolean transactional, boolean abortMarker) {
    while (nextAborted < aborted.length && aborted[nextAborted][1] <= lastOffset) {
      openAborted.add(aborted[nextAborted++][0]);
    }
    if (abortMarker) {
      openAborted.remove(producer);
      return false;
    }
    return transactional && openAborted.contains(producer);
  }

  /** A control batch's marker type: the int16 after the version in its first record's key. */
  private int markerType(int codec, int batchStart, int batchEnd, long base) {
    records = codec == 0 ? data : decompress(codec, data, batchStart + HEADER_SIZE, batchEnd - batchStart - HEADER_SIZE);
    int limit = codec == 0 ? batchEnd : inflatedLength;
    cursor = codec == 0 ? batchStart + HEADER_SIZE : 0;
    long length = varint(limit);
    boolean ok = length != MALFORMED && length >= 0 && length <= limit - cursor;
    if (ok) {
      limit = cursor + (int) length;
      cursor++; // attributes
      varlong(limit);
      ok = !varlongMalformed && varint(limit) != MALFORMED;
    }
    long keyLength = ok ? field(limit) : MALFORMED;
    records = null;
    if (keyLength == MALFORMED || keyLength < 4) {
      throw corrupt("a transaction marker is malformed", base);
    }
    return getShort(codec == 0 ? data : inflated, cursor + 2);
  }

  /** Decodes the open batch's next record; true when it is in range. */
  private boolean nextRecordWanted() {
    remaining--;
    cursor = recordPos;
    long length = varint(recordsEnd);
    if (length == MALFORMED || length < 0 || length > recordsEnd - cursor) {
      throw corrupt("a record's length runs past the batch", baseOffset);
    }
    int recordEnd = cursor + (int) length;
    recordPos = recordEnd;
    if (cursor >= recordEnd) {
      throw corrupt("an empty record", baseOffset);
    }
    cursor++; // attributes: unused
    long timestampDelta = varlong(recordEnd);
    long offsetDelta = varlongMalformed ? MALFORMED : varint(recordEnd);
    if (offsetDelta == MALFORMED) {
      throw corrupt("a record's timestamp or offset delta is malformed", baseOffset);
    }
    long recordOffset;
    try {
      recordOffset = Math.addExact(baseOffset, offsetDelta);
    } catch (ArithmeticException overflow) {
      throw corrupt("an offset or timestamp overflows", baseOffset);
    }
    if (end >= 0 && recordOffset >= end) {
      remaining = 0;
      records = null;
      nextOffset = end;
      done = true;
      return false;
    }
    boolean wanted = recordOffset >= start;
    long kLength = field(recordEnd);
    int kOffset = cursor;
    long vLength = MALFORMED;
    int vOffset = 0;
    if (kLength != MALFORMED) {
      cursor += Math.max((int) kLength, 0);
      vLength = field(recordEnd);
      vOffset = cursor;
    }
    long headers = MALFORMED;
    if (vLength != MALFORMED) {
      cursor += Math.max((int) vLength, 0);
      headers = varint(recordEnd);
    }
    if (headers == MALFORMED || headers < 0) {
      throw corrupt("a record's key, value or header count is malformed", recordOffset);
    }
    for (long h = 0; h < headers; h++) {
      long hk = field(recordEnd);
      boolean ok = hk != MALFORMED && hk != -1;
      if (ok) {
        cursor += (int) hk;
        long hv = field(recordEnd);
        ok = hv != MALFORMED;
        if (ok) {
          cursor += Math.max((int) hv, 0);
        }
      }
      if (!ok) {
        throw corrupt("a record header is malformed", recordOffset);
      }
    }
    if (cursor != recordEnd) {
      throw corrupt("a record has bytes past its last header", recordOffset);
    }
    if (!wanted) {
      return false;
    }
    long recordTimestamp;
    if (timestampType == 1) {
      recordTimestamp = maxTimestamp;
    } else {
      try {
        if (varlongOverflowed) {
          recordTimestamp = BigInteger.valueOf(firstTimestamp).add(bigDelta).longValueExact();
        } else {
          recordTimestamp = Math.addExact(firstTimestamp, timestampDelta);
        }
      } catch (ArithmeticException overflow) {
        throw corrupt("an offset or timestamp overflows", recordOffset);
      }
    }
    offset = recordOffset;
    timestamp = recordTimestamp;
    keyOffset = kOffset;
    keyLength = (int) kLength;
    valueOffset = vOffset;
    valueLength = (int) vLength;
    return true;
  }

  /** The open batch's records are all decoded: check its end, note its next offset. */
  private void finishBatch() {
    if (recordPos != recordsEnd) {
      throw corrupt("a batch has bytes past its last record", baseOffset);
    }
    if (end >= 0 && pendingNext >= end) {
      nextOffset = end;
      done = true;
    } else {
      nextOffset = Math.max(nextOffset, pendingNext);
    }
  }

  private static final long MALFORMED = Long.MIN_VALUE; // never the value of a 5-byte varint
  private int cursor; // in `records`, while a record is decoded
  private boolean varlongOverflowed; // the last varlong does not fit 64 bits: see bigDelta
  private BigInteger bigDelta; // the last varlong's exact value when it does not fit
  private boolean varlongMalformed; // the last varlong ran out of bytes or past 10

  /** A length-prefixed field at the cursor: its length (-1: null), the cursor on its bytes; or MALFORMED. */
  private long field(int limit) {
    long n = varint(limit);
    if (n == MALFORMED || n < -1 || n > limit - cursor) {
      return MALFORMED;
    }
    return n;
  }

  /** A zigzag varint of at most 5 bytes at the cursor, or MALFORMED. */
  private long varint(int limit) {
    long value = 0;
    int shift = 0;
    for (int i = 0; i < 5; i++) {
      if (cursor >= limit) {
        return MALFORMED;
      }
      int b = records[cursor++] & 0xFF;
      value |= (long) (b & 0x7F) << shift;
      if ((b & 0x80) == 0) {
        return (value >>> 1) ^ -(value & 1);
      }
      shift += 7;
    }
    return MALFORMED;
  }

  /** A zigzag varlong of at most 10 bytes at the cursor; sets varlongMalformed and varlongOverflowed. */
  private long varlong(int limit) {
    long value = 0;
    int shift = 0;
    varlongOverflowed = false;
    varlongMalformed = false;
    for (int i = 0; i < 10; i++) {
      if (cursor >= limit) {
        break;
      }
      int b = records[cursor++] & 0xFF;
      if (i == 9 && (b & 0x7F) > 1) {
        varlongOverflowed = true; // past 64 bits: only an error if the sum it is used in overflows
      }
      value |= (long) (b & 0x7F) << shift;
      if ((b & 0x80) == 0) {
        if (varlongOverflowed) {
          // The whole value, 70 bits at most, then zigzag: (v >> 1) ^ -(v & 1).
          BigInteger whole = new BigInteger(Long.toUnsignedString(value)).add(
              BigInteger.valueOf((b & 0x7F) >>> 1).shiftLeft(64));
          BigInteger half = whole.shiftRight(1);
          bigDelta = whole.testBit(0) ? half.not() : half;
        }
        return (value >>> 1) ^ -(value & 1);
      }
      shift += 7;
    }
    varlongMalformed = true;
    return 0;
  }

  private byte[] decompress(int codec, byte[] source, int from, int length) {
    if (codec > 4) {
      throw new SourceException("CorruptRecordsError", "unknown compression codec " + codec);
    }
    if (length == 0 && (codec == 1 || codec == 4)) {
      inflatedLength = 0; // gzip and zstd read nothing as no records, as kafka.codec does
      return inflated;
    }
    try (InputStream in = open(codec, source, from, length)) {
      int n = 0;
      byte[] out = inflated;
      if (out.length == 0) {
        out = new byte[Math.max(1024, length * 4)];
      }
      while (true) {
        if (n == out.length) {
          if (out.length >= Integer.MAX_VALUE - 8) {
            throw new IOException("the records exceed 2 GiB");
          }
          out = Arrays.copyOf(out, (int) Math.min((long) out.length * 2, Integer.MAX_VALUE - 8));
        }
        int got = in.read(out, n, out.length - n);
        if (got < 0) {
          break;
        }
        n += got;
      }
      inflated = out;
      inflatedLength = n;
      return out;
    } catch (IOException | RuntimeException | LinkageError exc) {
      if (exc instanceof SourceException) {
        throw (SourceException) exc;
      }
      throw new SourceException("CorruptRecordsError",
          "cannot decompress " + CODEC_NAMES[codec] + " records: " + exc);
    }
  }

  private static InputStream open(int codec, byte[] source, int from, int length) throws IOException {
    ByteArrayInputStream raw = new ByteArrayInputStream(source, from, length);
    switch (codec) {
      case 1:
        return new GZIPInputStream(raw, 64 * 1024);
      case 2:
        // Kafka's producers frame snappy as xerial's stream; others send a raw block.
        if (length > XERIAL_HEADER.length
            && Arrays.equals(source, from, from + XERIAL_HEADER.length, XERIAL_HEADER, 0, XERIAL_HEADER.length)) {
          return new SnappyInputStream(raw);
        }
        return new ByteArrayInputStream(Snappy.uncompress(Arrays.copyOfRange(source, from, from + length)));
      case 3:
        return new LZ4FrameInputStream(raw);
      default:
        return new ZstdInputStreamNoFinalizer(raw);
    }
  }

  private static SourceException corrupt(String what, long at) {
    return new SourceException("CorruptRecordsError", "corrupt record batch at offset " + at + ": " + what);
  }

  static long getLong(byte[] b, int at) {
    return ((long) getInt(b, at) << 32) | (getInt(b, at + 4) & 0xFFFFFFFFL);
  }

  static int getInt(byte[] b, int at) {
    return ((b[at] & 0xFF) << 24) | ((b[at + 1] & 0xFF) << 16) | ((b[at + 2] & 0xFF) << 8) | (b[at + 3] & 0xFF);
  }

  static short getShort(byte[] b, int at) {
    return (short) (((b[at] & 0xFF) << 8) | (b[at + 1] & 0xFF));
  }
}
