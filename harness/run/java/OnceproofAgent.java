// One client process of a run on the Java client (kafka-clients): the Java side of
// harness/run/host.py's protocol, as JSON lines on stdin and stdout.
//
// The roles follow harness/run/clients.py op for op (the same ops, values, outcomes and
// rules for when an op is `fail` rather than `info`); where the Java client differs, the
// difference is said beside the code. The harness hands over every setting, timeout and
// name already worked out (harness/run/jvm.py), so nothing here decides a default.
//
// Messages: JSON arrays, one a line, [kind, field, ...]. Their kinds and fields are
// harness/run/protocol.py's (docs/protocol.md), pasted below as constants.

import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.BufferedReader;
import java.io.BufferedWriter;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.OutputStreamWriter;
import java.io.PrintStream;
import java.io.PrintWriter;
import java.io.StringWriter;
import java.io.Writer;
import java.lang.reflect.Field;
import java.lang.reflect.Method;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.time.Duration;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Collection;
import java.util.Deque;
import java.util.HashMap;
import java.util.HashSet;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.Callable;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;
import java.util.concurrent.FutureTask;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.AuthorizationException;
import org.apache.kafka.common.errors.FencedInstanceIdException;
import org.apache.kafka.common.errors.InvalidTopicException;
import org.apache.kafka.common.errors.OutOfOrderSequenceException;
import org.apache.kafka.common.errors.ProducerFencedException;
import org.apache.kafka.common.errors.RecordBatchTooLargeException;
import org.apache.kafka.common.errors.RecordTooLargeException;
import org.apache.kafka.common.errors.SerializationException;
import org.apache.kafka.common.errors.UnsupportedVersionException;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler;
import org.apache.kafka.streams.kstream.KStream;
import org.apache.kafka.streams.processor.api.FixedKeyProcessor;
import org.apache.kafka.streams.processor.api.FixedKeyProcessorContext;
import org.apache.kafka.streams.processor.api.FixedKeyRecord;
import org.apache.kafka.streams.state.KeyValueStore;
import org.apache.kafka.streams.state.Stores;

public final class OnceproofAgent {
    static final ObjectMapper JSON = new ObjectMapper();
    // ---- the protocol: `python -m onceproof.run.protocol` writes this block, and
    // tests/test_protocol.py checks it and that the code below says nothing else -----------
    static final String START = "start", RUN = "run", CLOSE = "close", WRITTEN = "written", VALUES = "values", INVOKE = "invoke", COMPLETE = "complete", DONE = "done";
    static final String KAFKA = "kafka", STUCK = "stuck", BUG = "bug";
    static final int START_REQUEST = -1;
    static final int START_CID = 1, START_SPEC = 2, START_CONTEXT = 3, START_PROCESS = 4;
    static final int RUN_REQ = 1, RUN_OP = 2, RUN_LANE = 3;
    static final int CLOSE_REQ = 1;
    static final int WRITTEN_LOCAL = 1;
    static final int TO_CLIENT_VALUES_LOCAL = 1, TO_CLIENT_VALUES_FIRST = 2;
    static final int INVOKE_LOCAL = 1, INVOKE_PROCESS = 2, INVOKE_F = 3, INVOKE_VALUE = 4, INVOKE_TXN = 5, INVOKE_FINAL = 6;
    static final int COMPLETE_LOCAL = 1, COMPLETE_TYPE = 2, COMPLETE_VALUE = 3, COMPLETE_ERROR = 4;
    static final int TO_HARNESS_VALUES_LOCAL = 1, TO_HARNESS_VALUES_COUNT = 2;
    static final int DONE_REQ = 1, DONE_KIND = 2, DONE_DETAIL = 3;
    // ---- end of the protocol -------------------------------------------------------------
    static final int VALUE_BLOCK = 1000;  // values taken from the run's counter at a time
    // The calls this process gave up on (bounded): each left a thread blocked with its client.
    static final List<String> abandoned = new CopyOnWriteArrayList<>();
    static double opTimeout, fetchTimeout, hangGrace, startTimeout;
    static int commitAttempts;

    // ---- the wire -----------------------------------------------------------------------

    /** What a client records through: each op sent to the harness, where the history is
     * written. An invoke returns once the harness has written it (host.py says why). */
    static final class Wire {
        private final Writer out;
        private final AtomicLong ids = new AtomicLong();
        private final Map<Long, CompletableFuture<Object>> waiting = new ConcurrentHashMap<>();

        Wire(PrintStream stdout) {
            out = new BufferedWriter(new OutputStreamWriter(stdout, StandardCharsets.UTF_8));
        }

        synchronized void send(Object... message) {
            try {
                out.write(JSON.writeValueAsString(java.util.Arrays.asList(message)));
                out.write('\n');
                out.flush();
            } catch (IOException e) {
                Runtime.getRuntime().halt(0);  // the harness is gone, and so is every reason to run
            }
        }

        private Object ask(Object... message) {
            long local = (Long) message[1];
            CompletableFuture<Object> answer = new CompletableFuture<>();
            waiting.put(local, answer);
            send(message);
            return answer.join();
        }

        void answered(long local, Object answer) {
            CompletableFuture<Object> f = waiting.remove(local);
            if (f != null) f.complete(answer);
        }

        long invoke(String process, String f, Object value, String txn, boolean fin) {
            long local = ids.getAndIncrement();
            ask(INVOKE, local, process, f, value, txn, fin);
            return local;
        }

        long firstOf(int count) {
            return ((Number) ask(VALUES, ids.getAndIncrement(), count)).longValue();
        }

        void complete(long op, String type, Object value, String error) {
            send(COMPLETE, op, type, value, error);
        }

        void ok(long op, Object value) { complete(op, "ok", value, null); }
        void fail(long op, String error) { complete(op, "fail", null, error); }
        void info(long op, String error) { complete(op, "info", null, error); }
    }

    /** The run's names (its prefix) and the values the run's processes share. */
    static final class Ctx {
        final String prefix;
        final Map<String, Integer> partitions;
        final Map<String, String> connection;
        final Wire wire;
        final Values values;
        private long next, end;

        @SuppressWarnings("unchecked")
        Ctx(Map<String, Object> c, Wire wire) {
            this.prefix = (String) c.get("prefix");
            this.partitions = (Map<String, Integer>) c.get("partitions");
            this.connection = (Map<String, String>) c.get("connection");
            this.values = new Values((Map<String, Object>) c.get("values"));
            this.wire = wire;
        }

        String topic(String name) { return prefix + name; }
        String planTopic(String real) { return real.substring(prefix.length()); }

        synchronized long value() {
            if (next >= end) {
                next = wire.firstOf(VALUE_BLOCK);
                end = next + VALUE_BLOCK;
            }
            return next++;
        }
    }

    // ---- record values (harness/run/values.py, byte for byte) ----------------------------

    /** What a record's value holds: its identity in decimal alone, or with a size asked,
     * `<identity>:<c|r><size>:` and padding derived from the identity to that size
     * (run/values.py says why and how; the two make the same bytes). */
    static final class Values {
        static final int MIN = 32, MAX = 1 << 20;
        static final long NO_IDENTITY = -1;
        final int[] sizes;  // null: the identity alone
        final char content;  // 'c' compressible, 'r' random

        @SuppressWarnings("unchecked")
        Values(Map<String, Object> shape) {
            List<Number> given = shape == null ? null : (List<Number>) shape.get("sizes");
            if (given == null || given.isEmpty()) {
                sizes = null;
            } else {
                sizes = new int[given.size()];
                for (int i = 0; i < sizes.length; i++) sizes[i] = given.get(i).intValue();
            }
            content = shape != null && "random".equals(shape.get("content")) ? 'r' : 'c';
        }

        /** The size of the value of `identity` (values.py Shape.size), or null. */
        Integer size(long identity) {
            if (sizes == null) return null;
            if (sizes.length == 1) return sizes[0];
            long drawn = (identity * 0x9E3779B97F4A7C15L) >>> 32;
            return sizes[(int) (drawn % sizes.length)];
        }

        byte[] encode(long identity, Integer size) { return make(identity, size, content); }

        static byte[] make(long identity, Integer size, char content) {
            if (size == null) return String.valueOf(identity).getBytes(StandardCharsets.US_ASCII);
            byte[] head = (identity + ":" + content + size + ":").getBytes(StandardCharsets.US_ASCII);
            byte[] out = new byte[size];
            System.arraycopy(head, 0, out, 0, head.length);
            byte[] pad = padding(identity, size - head.length, content);
            System.arraycopy(pad, 0, out, head.length, pad.length);
            return out;
        }

        static byte[] padding(long identity, int n, char content) {
            byte[] seed = ("onceproof:" + identity).getBytes(StandardCharsets.US_ASCII);
            byte[] out = new byte[Math.max(0, n)];
            try {
                if (content == 'c') {
                    byte[] digest = MessageDigest.getInstance("SHA-256").digest(seed);
                    StringBuilder hex = new StringBuilder();
                    for (byte b : digest) hex.append(String.format("%02x", b & 0xFF));
                    byte[] unit = (hex + " ").getBytes(StandardCharsets.US_ASCII);
                    for (int i = 0; i < out.length; i++) out[i] = unit[i % unit.length];
                    return out;
                }
                MessageDigest base = MessageDigest.getInstance("SHA-512");
                base.update(seed);
                for (int i = 0, at = 0; at < out.length; i++, at += 64) {
                    MessageDigest h = (MessageDigest) base.clone();
                    h.update(new byte[]{(byte) (i >>> 24), (byte) (i >>> 16), (byte) (i >>> 8), (byte) i});
                    byte[] block = h.digest();
                    System.arraycopy(block, 0, out, at, Math.min(64, out.length - at));
                }
                return out;
            } catch (NoSuchAlgorithmException | CloneNotSupportedException e) {
                throw new IllegalStateException(e);
            }
        }

        /** {identity, corrupt} of a value read back (values.py decode): corrupt is where
         * it first differs from the value its identity makes, -1 when it does not. */
        static long[] decode(byte[] data) {
            int colon = indexOf(data, (byte) ':', 0);
            if (colon < 0) {
                try {
                    return new long[]{Long.parseLong(new String(data, StandardCharsets.US_ASCII)), -1};
                } catch (NumberFormatException e) {
                    return new long[]{NO_IDENTITY, 0};
                }
            }
            long identity;
            try {
                identity = Long.parseLong(new String(data, 0, colon, StandardCharsets.US_ASCII));
            } catch (NumberFormatException e) {
                return new long[]{NO_IDENTITY, 0};
            }
            int second = indexOf(data, (byte) ':', colon + 1);
            int end = second < 0 ? data.length : second;
            char content = end > colon + 1 ? (char) data[colon + 1] : '?';
            int size = -1;
            try {
                if (end > colon + 2) size = Integer.parseInt(new String(data, colon + 2, end - colon - 2, StandardCharsets.US_ASCII));
            } catch (NumberFormatException e) {
                size = -1;
            }
            if ((content != 'c' && content != 'r') || size < MIN || size > MAX) return new long[]{identity, colon + 1};
            return new long[]{identity, firstDifference(data, make(identity, size, content))};
        }

        /** The size and content a sized value names ({size, content}), or null. */
        static int[] shapeOf(byte[] data) {
            int colon = indexOf(data, (byte) ':', 0);
            if (colon < 0) return null;
            int second = indexOf(data, (byte) ':', colon + 1);
            if (second < colon + 3) return null;
            try {
                return new int[]{Integer.parseInt(new String(data, colon + 2, second - colon - 2, StandardCharsets.US_ASCII)),
                        data[colon + 1]};
            } catch (NumberFormatException e) {
                return null;
            }
        }

        /** The identity a value names (NO_IDENTITY when none). */
        static long identity(byte[] data) { return decode(data)[0]; }

        static int indexOf(byte[] data, byte b, int from) {
            for (int i = from; i < data.length; i++) if (data[i] == b) return i;
            return -1;
        }

        static long firstDifference(byte[] got, byte[] want) {
            int n = Math.min(got.length, want.length);
            for (int i = 0; i < n; i++) if (got[i] != want[i]) return i;
            return got.length == want.length ? -1 : n;
        }
    }

    // ---- calls that may not return -------------------------------------------------------

    static final class Hung extends Exception {
        Hung(String message) { super(message); }
    }

    /** call() run in a thread of its own and given up on hangGrace seconds after its
     * timeout: the Java client bounds its blocking calls by max.block.ms, but a host must
     * not trust that any more than clients.py's bounded() trusts librdkafka. */
    static <T> T bounded(String name, Callable<T> call, double timeout) throws Exception {
        FutureTask<T> task = new FutureTask<>(call);
        Thread t = new Thread(task, "onceproof-bounded");
        t.setDaemon(true);
        t.start();
        try {
            return task.get((long) ((timeout + hangGrace) * 1000), TimeUnit.MILLISECONDS);
        } catch (java.util.concurrent.TimeoutException e) {
            String hung = String.format("%s did not return %.0f s after it was called with a %.0f s timeout",
                    name, timeout + hangGrace, timeout);
            abandoned.add(hung);
            throw new Hung(hung);
        } catch (ExecutionException e) {
            Throwable cause = e.getCause();
            if (cause instanceof Exception) throw (Exception) cause;
            throw new RuntimeException(cause);
        }
    }

    // ---- what an error says ----------------------------------------------------------------

    static String describe(Throwable e) {
        StringBuilder said = new StringBuilder(e.getClass().getSimpleName() + ": " + e.getMessage());
        // A wrapper says what failed ("Failed to construct kafka producer"), its cause why.
        for (Throwable t = e.getCause(); t != null && t != e; t = t.getCause()) {
            said.append(" (caused by ").append(t.getClass().getSimpleName()).append(": ")
                .append(t.getMessage()).append(")");
        }
        return said.toString();
    }

    static boolean causedBy(Throwable e, Class<?>... kinds) {
        for (Throwable t = e; t != null; t = t.getCause()) {
            for (Class<?> k : kinds) if (k.isInstance(t)) return true;
        }
        return false;
    }

    static boolean namedIn(Throwable e, String simpleName) {
        for (Throwable t = e; t != null; t = t.getCause()) {
            if (t.getClass().getSimpleName().equals(simpleName)) return true;
        }
        return false;
    }

    /** Errors after which a producer is of no more use (Kafka's javadoc for
     * KafkaProducer's transactional methods): the application closes it and makes another. */
    static boolean fatal(Throwable e) {
        return causedBy(e, ProducerFencedException.class, OutOfOrderSequenceException.class,
                AuthorizationException.class, UnsupportedVersionException.class,
                FencedInstanceIdException.class);
    }

    /** Delivery errors after which the record is certainly not in the log (outcomes.py's
     * NOT_PERSISTED): the broker rejects such a record before appending it. */
    static boolean notPersisted(Throwable e) {
        return causedBy(e, RecordTooLargeException.class, RecordBatchTooLargeException.class,
                InvalidTopicException.class, SerializationException.class,
                AuthorizationException.class)
                || namedIn(e, "InvalidRecordException");  // its package moved between releases
    }

    static boolean timedOut(Throwable e) {
        return e instanceof org.apache.kafka.common.errors.TimeoutException;
    }

    static Map<String, Object> timed(Map<String, Object> value, double seconds) {
        Map<String, Object> out = new LinkedHashMap<>(value);
        out.put("timeout_ms", Math.round(seconds * 1000));
        return out;
    }

    static Map<String, Object> map(Object... kv) {
        Map<String, Object> out = new LinkedHashMap<>();
        for (int i = 0; i < kv.length; i += 2) out.put((String) kv[i], kv[i + 1]);
        return out;
    }

    static Properties props(Map<String, String> connection, Map<String, Object> config, Object... fixed) {
        Properties p = new Properties();
        config.forEach((k, v) -> p.setProperty(k, String.valueOf(v)));
        connection.forEach(p::setProperty);
        for (int i = 0; i < fixed.length; i += 2) p.setProperty((String) fixed[i], String.valueOf(fixed[i + 1]));
        return p;
    }

    static int integer(Map<String, Object> op, String key, int dflt) {
        Object v = op.get(key);
        return v == null ? dflt : ((Number) v).intValue();
    }

    static double number(Map<String, Object> op, String key, double dflt) {
        Object v = op.get(key);
        return v == null ? dflt : ((Number) v).doubleValue();
    }

    // ---- clients ---------------------------------------------------------------------------

    abstract static class Client {
        final String cid, process, topic;
        final Map<String, Object> spec, settings;
        final Ctx ctx;
        final Wire w;

        @SuppressWarnings("unchecked")
        Client(String cid, Map<String, Object> spec, Ctx ctx, String process) {
            this.cid = cid;
            this.spec = spec;
            this.ctx = ctx;
            this.process = process;
            this.w = ctx.wire;
            this.settings = (Map<String, Object>) spec.get("java");
            this.topic = (String) settings.get("topic");
        }

        @SuppressWarnings("unchecked")
        Map<String, Object> config(String which) {
            return (Map<String, Object>) settings.get(which);
        }

        abstract void run(Map<String, Object> op, int lane) throws Exception;

        void close() throws Exception {}

        List<Map<String, Object>> records(String topic, Map<String, Object> op, int nDefault) {
            int parts = ctx.partitions.get(topic);
            List<Map<String, Object>> out = new ArrayList<>();
            for (int i = 0; i < integer(op, "n", nDefault); i++) {
                long v = ctx.value();
                int p = op.containsKey("partition") ? integer(op, "partition", 0) % parts : (int) (v % parts);
                Map<String, Object> r = map("topic", topic, "partition", p, "key", cid, "value", v);
                Integer size = ctx.values.size(v);
                if (size != null) r.put("size", size);
                out.add(r);
            }
            return out;
        }
    }

    /** Wait an op's `pause_ms` (clients.py's Client.run), if it has one. */
    static void pause(Map<String, Object> op) {
        long ms = integer(op, "pause_ms", 0);
        if (ms <= 0) return;
        try {
            Thread.sleep(ms);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    static String laneProcess(String process, int lane) {
        return lane == 0 ? process : process + "~" + lane;
    }

    /** One send op (clients.py's _send): its outcome and the errors seen, one per record. */
    static final class Sent {
        String outcome;
        List<Throwable> errors = new ArrayList<>();
    }

    static Sent send(Wire w, KafkaProducer<String, byte[]> producer, String process,
                     List<Map<String, Object>> records, Ctx ctx, String txn, double timeout) {
        long op = w.invoke(process, "send", timed(map("records", records), timeout), txn, false);
        int n = records.size();
        List<Map<String, Object>> out = new ArrayList<>();
        List<Future<RecordMetadata>> futures = new ArrayList<>();
        Sent sent = new Sent();
        boolean[] delivered = new boolean[n];
        boolean[] lost = new boolean[n];  // certainly not persisted
        for (Map<String, Object> r : records) {
            Map<String, Object> o = new LinkedHashMap<>(r);
            o.put("offset", null);
            out.add(o);
            sent.errors.add(null);
            String key = (String) r.get("key");
            try {
                futures.add(producer.send(new ProducerRecord<>(ctx.topic((String) r.get("topic")),
                        (Integer) r.get("partition"), key == null ? "" : key,
                        ctx.values.encode(((Number) r.get("value")).longValue(), (Integer) r.get("size")))));
            } catch (KafkaException | IllegalStateException e) {
                // Refused before anything left the client (a producer in an error state).
                futures.add(null);
                sent.errors.set(out.size() - 1, e);
                lost[out.size() - 1] = true;
            }
        }
        // The Java client's flush() takes no timeout and would wait for other threads'
        // sends too: wait for this send's own records, up to its timeout.
        long deadline = System.nanoTime() + (long) (timeout * 1e9);
        for (int i = 0; i < n; i++) {
            Future<RecordMetadata> f = futures.get(i);
            if (f == null) continue;
            try {
                RecordMetadata md = f.get(Math.max(0, deadline - System.nanoTime()), TimeUnit.NANOSECONDS);
                delivered[i] = true;
                out.get(i).put("offset", md.offset());
            } catch (ExecutionException e) {
                sent.errors.set(i, e.getCause());
                lost[i] = notPersisted(e.getCause());
            } catch (java.util.concurrent.TimeoutException e) {
                // not confirmed in time: in the log or not
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }
        boolean all = true, none = true, allLost = true;
        for (int i = 0; i < n; i++) {
            all &= delivered[i];
            none &= !delivered[i];
            allLost &= lost[i];
        }
        sent.outcome = all ? "ok" : (none && allLost ? "fail" : "info");
        Throwable first = sent.errors.stream().filter(e -> e != null).findFirst().orElse(null);
        w.complete(op, sent.outcome, map("records", out),
                sent.outcome.equals("ok") ? null : first != null ? describe(first) : "delivery not confirmed in time");
        return sent;
    }

    static KafkaProducer<String, byte[]> producer(Properties p) {
        return new KafkaProducer<>(p, new StringSerializer(), new ByteArraySerializer());
    }

    /** Let go of a producer as an application restarting would, without waiting for it:
     * its transaction is left for the next producer with its id to fence and abort. */
    static void discard(KafkaProducer<String, byte[]> producer) {
        if (producer == null) return;
        Thread t = new Thread(() -> {
            try { producer.close(Duration.ZERO); } catch (RuntimeException ignored) { }
        }, "onceproof-discard");
        t.setDaemon(true);
        t.start();
    }

    /** Sends outside transactions (clients.py's PlainProducer); its lanes share it. */
    static final class PlainProducer extends Client {
        final KafkaProducer<String, byte[]> producer;

        PlainProducer(String cid, Map<String, Object> spec, Ctx ctx, String process) {
            super(cid, spec, ctx, process);
            producer = producer(props(ctx.connection, config("producer")));
        }

        void run(Map<String, Object> op, int lane) {
            send(w, producer, laneProcess(process, lane), records(topic, op, 1), ctx, null, opTimeout);
        }

        void close() { producer.close(Duration.ofSeconds(5)); }
    }

    /** A transactional producer (clients.py's TxnProducer), one transaction at a time. */
    static class TxnProducer extends Client {
        final String tid;
        KafkaProducer<String, byte[]> producer;
        String txn;
        boolean mustAbort;
        int count;
        long txnTimeoutMs;

        TxnProducer(String cid, Map<String, Object> spec, Ctx ctx, String process) {
            super(cid, spec, ctx, process);
            tid = (String) settings.get("tid");
        }

        boolean ensure() {
            if (producer != null) return true;
            Map<String, Object> config = config("producer");
            txnTimeoutMs = Long.parseLong(String.valueOf(config.get("transaction.timeout.ms")));
            KafkaProducer<String, byte[]> p = producer(props(ctx.connection, config, "transactional.id", tid));
            try {
                bounded("initTransactions", () -> { p.initTransactions(); return null; }, opTimeout);
            } catch (Hung e) {
                return false;  // its thread holds the producer; the harness replaces this process
            } catch (Exception e) {
                discard(p);
                return false;
            }
            producer = p;
            return true;
        }

        void dropProducer() {
            discard(producer);
            producer = null;
        }

        void onError(Throwable e) {
            if (e == null) return;
            if (fatal(e)) {
                dropProducer();
                txn = null;
            } else if (txn != null) {
                // The Java producer enters its abortable error state on any failed send of
                // a transaction: only an abort lets it go on.
                mustAbort = true;
            }
        }

        /** The transaction protocol this producer speaks, as the client itself says:
         * 2 when its transaction manager has KIP-890's transaction v2 on (the Java
         * client from 4.0, against brokers with transaction.version 2), else 1. */
        int protocol() {
            try {
                Field f = KafkaProducer.class.getDeclaredField("transactionManager");
                f.setAccessible(true);
                Object tm = f.get(producer);
                Method m = tm.getClass().getMethod("isTransactionV2Enabled");
                return Boolean.TRUE.equals(m.invoke(tm)) ? 2 : 1;
            } catch (NoSuchMethodException e) {
                return 1;  // a client from before KIP-890 part 2 has only the first
            } catch (ReflectiveOperationException | RuntimeException e) {
                return 0;  // unknown: the history says so rather than guess
            }
        }

        void run(Map<String, Object> op, int lane) throws Exception {
            // A transaction's pause (mix.txn_pause_ms), its transaction open.
            pause(op);
            switch ((String) op.get("f")) {
                case "begin" -> begin(op);
                case "send" -> sendOp(op);
                case "commit" -> commit(op);
                case "abort" -> abort(op);
                default -> throw new IllegalArgumentException("no op " + op.get("f") + " for role " + spec.get("role"));
            }
        }

        void begin(Map<String, Object> op) {
            if (txn != null || !ensure()) return;
            count++;
            String t = process + "/" + count;
            long h = w.invoke(process, "begin_txn", map("tid", tid, "txn_timeout_ms", txnTimeoutMs), t, false);
            try {
                producer.beginTransaction();
            } catch (KafkaException | IllegalStateException e) {
                w.fail(h, describe(e));  // begin is local: nothing happened
                onError(e);
                return;
            }
            w.ok(h, map("tid", tid, "txn_protocol", protocol()));
            txn = t;
            mustAbort = false;
        }

        void sendOp(Map<String, Object> op) {
            if (txn == null || mustAbort) return;
            Sent s = send(w, producer, process, records(topic, op, 1), ctx, txn, opTimeout);
            for (Throwable e : s.errors) onError(e);
        }

        /** Whether the transaction certainly committed (clients.py's op_commit).
         *
         * The Java client may be called again after a commit that timed out, and resumes
         * it; every other error is fatal (a new producer) or leaves the transaction to
         * be aborted. Only TransactionAbortableException (4.x) says the coordinator
         * refused the commit, so only it is `fail`; the rest is `info`, and the abort
         * that follows, when it lands, decides the transaction. */
        boolean commit(Map<String, Object> op) {
            if (txn == null) return false;
            if (mustAbort) {
                abort(op);
                return false;
            }
            Exception err = null;
            for (int i = 0; i < commitAttempts; i++) {
                long h = w.invoke(process, "commit_txn", timed(map(), opTimeout), txn, false);
                KafkaProducer<String, byte[]> p = producer;
                try {
                    bounded("commitTransaction", () -> { p.commitTransaction(); return null; }, opTimeout);
                    w.ok(h, null);
                    txn = null;
                    return true;
                } catch (Hung e) {
                    w.info(h, describe(e));
                    err = null;
                    break;
                } catch (Exception e) {
                    err = e;
                    boolean refused = namedIn(e, "TransactionAbortableException");
                    w.complete(h, refused ? "fail" : "info", map(), describe(e));
                    if (!timedOut(e)) break;
                    if ("abort".equals(mix().get("commit_timeout"))) {
                        abort(op);
                        return false;
                    }
                }
            }
            if (err != null && !fatal(err) && !timedOut(err)) {
                abort(op);
                return false;
            }
            if (err != null && fatal(err)) onError(err);
            else dropProducer();
            txn = null;
            return false;
        }

        @SuppressWarnings("unchecked")
        Map<String, Object> mix() {
            Object m = settings.get("mix");
            return m == null ? Map.of() : (Map<String, Object>) m;
        }

        void abort(Map<String, Object> op) {
            if (txn == null) return;
            long h = w.invoke(process, "abort_txn", timed(map(), opTimeout), txn, false);
            KafkaProducer<String, byte[]> p = producer;
            try {
                if (p == null) throw new IllegalStateException("no producer");
                bounded("abortTransaction", () -> { p.abortTransaction(); return null; }, opTimeout);
                w.ok(h, null);
            } catch (Exception e) {
                // An abort never commits; a new producer with this id finishes the job.
                w.info(h, describe(e));
                dropProducer();
            }
            txn = null;
            mustAbort = false;
        }

        /** `reader`'s group offsets sent to transaction `t` (clients.py's send_offsets):
         * `pipeline` false says, in the history, that the group's input does not each
         * become an output (an rw_txn's), so checkers/pipeline.py does not judge it. */
        void sendOffsets(Reader reader, String t, Map<TopicPartition, Long> positions, boolean pipeline) {
            List<Map<String, Object>> offsets = new ArrayList<>();
            Map<TopicPartition, OffsetAndMetadata> commit = new LinkedHashMap<>();
            positions.forEach((tp, o) -> {
                Map<String, Object> m = reader.tp(tp);
                m.put("offset", o);
                offsets.add(m);
                commit.put(tp, new OffsetAndMetadata(o));
            });
            Map<String, Object> value = map("group", reader.group, "offsets", offsets);
            if (!pipeline) value.put("pipeline", false);
            long h = w.invoke(process, "send_offsets", timed(value, opTimeout), t, false);
            KafkaProducer<String, byte[]> p = producer;
            try {
                bounded("sendOffsetsToTransaction", () -> {
                    p.sendOffsetsToTransaction(commit, reader.consumer.groupMetadata());
                    return null;
                }, opTimeout);
                w.ok(h, value);
            } catch (Hung e) {
                w.info(h, describe(e));
                producer = null;  // the hung call holds it
                txn = null;
            } catch (Exception e) {
                w.info(h, describe(e));
                onError(e);
                // The offsets may be missing from the transaction: it must not commit.
                mustAbort = true;
            }
        }

        void close() { dropProducer(); }
    }

    /** A consumer (clients.py's TopicConsumer): assigned its partitions, or subscribed.
     *
     * The Java client's poll hands over up to max.poll.records; an op asks for at most
     * `n`, so what a poll brought beyond that waits here for the next poll, as an
     * application works through a batch. Where the application stands (`positions`) is
     * after what it was given, never what the client fetched ahead. */
    static final class Reader extends Client implements ConsumerRebalanceListener {
        final KafkaConsumer<String, byte[]> consumer;
        final String group, isolation;
        final boolean subscribed;
        List<TopicPartition> tps = new ArrayList<>();
        final Map<Integer, Long> positions = new TreeMap<>();
        final Set<Integer> revoked = new HashSet<>();
        final Deque<ConsumerRecord<String, byte[]>> ahead = new ArrayDeque<>();
        // The poll op in progress (handle, txn, value), which a reassignment splits.
        Object[] polling;

        @SuppressWarnings("unchecked")
        Reader(String cid, Map<String, Object> spec, Ctx ctx, String process, String topic,
               Map<String, Object> config, boolean subscribe) {
            super(cid, spec, ctx, process);
            this.group = (String) settings.get("group");
            this.isolation = String.valueOf(config.get("isolation.level"));
            this.subscribed = subscribe;
            String t = topic == null ? this.topic : topic;
            consumer = new KafkaConsumer<>(props(ctx.connection, config, "group.id", group,
                    "enable.auto.commit", false, "auto.offset.reset", "earliest"),
                    new StringDeserializer(), new ByteArrayDeserializer());
            readTopic = t;
            if (subscribe) {
                consumer.subscribe(List.of(ctx.topic(t)), this);
                return;
            }
            List<Integer> parts = (List<Integer>) settings.get("partitions");
            for (int p : parts) tps.add(new TopicPartition(ctx.topic(t), p));
            List<Map<String, Object>> named = new ArrayList<>();
            for (TopicPartition tp : tps) named.add(tp(tp));
            long h = w.invoke(process, "assign", map("partitions", named), null, false);
            consumer.assign(tps);
            w.ok(h, map("partitions", named));
            // Say where reading starts, as the group's committed offsets (or the log's
            // beginning) put it; if that cannot be had in time, it stays unknown.
            Map<TopicPartition, Long> start = resolve("committed", 0, startTimeout);
            if (start != null) seekTo(start, null);
        }

        String readTopic;

        Map<String, Object> tp(TopicPartition tp) {
            return map("topic", ctx.planTopic(tp.topic()), "partition", tp.partition());
        }

        // Rebalance callbacks run inside poll (or close): record the whole new assignment.
        public void onPartitionsAssigned(Collection<TopicPartition> partitions) {
            reassigned(partitions, List.of());
        }

        public void onPartitionsRevoked(Collection<TopicPartition> partitions) {
            reassigned(List.of(), partitions);
        }

        public void onPartitionsLost(Collection<TopicPartition> partitions) {
            reassigned(List.of(), partitions);
        }

        void reassigned(Collection<TopicPartition> addedTps, Collection<TopicPartition> removedTps) {
            if (addedTps.isEmpty() && removedTps.isEmpty()) return;
            Set<Integer> added = new HashSet<>(), removed = new HashSet<>(), before = new HashSet<>();
            addedTps.forEach(tp -> added.add(tp.partition()));
            removedTps.forEach(tp -> removed.add(tp.partition()));
            tps.forEach(tp -> before.add(tp.partition()));
            Set<Integer> now = new java.util.TreeSet<>(before);
            now.removeAll(removed);
            now.addAll(added);
            // Partitions that stay keep their positions (cooperative and KIP-848
            // rebalances; an eager one revokes everything first, so nothing is kept).
            List<Map<String, Object>> kept = new ArrayList<>(), parts = new ArrayList<>();
            tps = new ArrayList<>();
            for (int p : now) {
                parts.add(map("topic", readTopic, "partition", p));
                if (before.contains(p) && !added.contains(p)) kept.add(map("topic", readTopic, "partition", p));
                tps.add(new TopicPartition(ctx.topic(readTopic), p));
            }
            revoked.addAll(removed);
            Set<Integer> moved = new HashSet<>(added);
            moved.addAll(removed);
            for (int p : moved) positions.remove(p);
            ahead.removeIf(r -> moved.contains(r.partition()));
            if (polling != null) w.ok((Long) polling[0], map("isolation", isolation, "records", List.of()));
            Map<String, Object> value = map("partitions", parts, "kept", kept);
            long h = w.invoke(process, "assign", value, null, false);
            w.ok(h, value);
            if (polling != null) {
                polling = new Object[]{w.invoke(process, "poll", polling[2], (String) polling[1], false),
                        polling[1], polling[2]};
            }
        }

        void run(Map<String, Object> op, int lane) throws Exception {
            switch ((String) op.get("f")) {
                case "poll" -> poll(op, null);
                case "seek" -> {
                    Map<TopicPartition, Long> offsets = resolve((String) op.get("to"), integer(op, "back", 1), fetchTimeout);
                    if (offsets != null) seekTo(offsets, null);
                }
                case "commit_offsets" -> commitPositions(op);
                case "fetch_offsets" -> fetchOffsets();
                default -> throw new IllegalArgumentException("no op " + op.get("f") + " for role " + spec.get("role"));
            }
        }

        List<Map<String, Object>> poll(Map<String, Object> op, String txn) {
            double timeout = number(op, "timeout", 1.0);
            int n = integer(op, "n", 10);
            Map<String, Object> value = timed(map("isolation", isolation, "group", group), timeout);
            polling = new Object[]{w.invoke(process, "poll", value, txn, false), txn, value};
            List<ConsumerRecord<String, byte[]>> got = new ArrayList<>();
            RuntimeException failure = null;
            try {
                if (ahead.isEmpty()) {
                    for (ConsumerRecord<String, byte[]> r : consumer.poll(Duration.ofMillis((long) (timeout * 1000)))) {
                        ahead.add(r);
                    }
                }
                while (got.size() < n && !ahead.isEmpty()) got.add(ahead.poll());
            } catch (KafkaException | IllegalStateException e) {
                failure = e;
            }
            long h = (Long) polling[0];
            polling = null;
            if (failure != null) {
                w.fail(h, describe(failure));
                return List.of();
            }
            List<Map<String, Object>> records = new ArrayList<>();
            for (ConsumerRecord<String, byte[]> r : got) {
                String key = r.key();
                long[] read = Values.decode(r.value() == null ? new byte[0] : r.value());
                Map<String, Object> record = map("topic", ctx.planTopic(r.topic()), "partition", r.partition(),
                        "offset", r.offset(), "key", key == null || key.isEmpty() ? null : key,
                        "value", read[0]);
                if (read[1] >= 0) record.put("corrupt", read[1]);
                records.add(record);
                positions.put(r.partition(), r.offset() + 1);
            }
            w.ok(h, map("isolation", isolation, "records", records));
            return records;
        }

        Map<TopicPartition, Long> knownPositions() {
            Map<TopicPartition, Long> out = new LinkedHashMap<>();
            positions.forEach((p, o) -> out.put(new TopicPartition(ctx.topic(readTopic), p), o));
            return out;
        }

        Map<TopicPartition, Long> low(double timeout) {
            Map<TopicPartition, Long> out = new LinkedHashMap<>();
            consumer.beginningOffsets(tps, Duration.ofMillis((long) (timeout * 1000))).forEach(out::put);
            return out;
        }

        /** Move positions; recorded as a seek with the offsets it moved to. */
        boolean seekTo(Map<TopicPartition, Long> offsets, String txn) {
            if (offsets.isEmpty()) return true;
            List<Map<String, Object>> named = new ArrayList<>();
            offsets.forEach((tp, o) -> {
                Map<String, Object> m = tp(tp);
                m.put("offset", o);
                named.add(m);
            });
            long h = w.invoke(process, "seek", map("positions", named), txn, false);
            int moved = 0;
            try {
                for (Map.Entry<TopicPartition, Long> e : offsets.entrySet()) {
                    consumer.seek(e.getKey(), e.getValue());
                    ahead.removeIf(r -> r.partition() == e.getKey().partition());
                    moved++;
                }
            } catch (KafkaException | IllegalStateException e) {
                if (moved > 0) {
                    w.info(h, describe(e));  // some moved: where this consumer stands is unknown
                    offsets.keySet().forEach(tp -> positions.remove(tp.partition()));
                } else {
                    w.fail(h, describe(e));
                }
                return false;
            }
            w.ok(h, map("positions", named));
            offsets.forEach((tp, o) -> positions.put(tp.partition(), o));
            return true;
        }

        Map<TopicPartition, Long> resolve(String to, int back, double timeout) {
            try {
                Map<TopicPartition, Long> out = new LinkedHashMap<>();
                if ("committed".equals(to)) {
                    Map<TopicPartition, OffsetAndMetadata> committed =
                            consumer.committed(new HashSet<>(tps), Duration.ofMillis((long) (Math.min(5.0, timeout) * 1000)));
                    Map<TopicPartition, Long> low = null;
                    for (TopicPartition tp : tps) {
                        OffsetAndMetadata c = committed.get(tp);
                        if (c == null && low == null) low = low(timeout);
                        out.put(tp, c != null ? c.offset() : low.get(tp));
                    }
                    return out;
                }
                if ("beginning".equals(to)) return low(timeout);
                return at(positions, back);
            } catch (KafkaException e) {
                return null;
            }
        }

        /** Offsets for every assigned partition: `back` before the position given, or
         * its low watermark when none is given (or that would be below it). */
        Map<TopicPartition, Long> at(Map<Integer, Long> from, int back) {
            Map<TopicPartition, Long> low = low(fetchTimeout), out = new LinkedHashMap<>();
            for (TopicPartition tp : tps) out.put(tp, Math.max(low.get(tp), from.getOrDefault(tp.partition(), 0L) - back));
            return out;
        }

        @SuppressWarnings("unchecked")
        void commitPositions(Map<String, Object> op) {
            Map<TopicPartition, Long> known = knownPositions();
            if (known.isEmpty()) return;
            List<Integer> sizes = op == null ? null : (List<Integer>) op.get("metadata");
            Map<TopicPartition, OffsetAndMetadata> commit = new LinkedHashMap<>();
            List<Map<String, Object>> offsets = new ArrayList<>();
            int i = 0;
            for (Map.Entry<TopicPartition, Long> e : known.entrySet()) {
                int size = sizes == null || sizes.isEmpty() ? 0 : sizes.get(i % sizes.size());
                commit.put(e.getKey(), new OffsetAndMetadata(e.getValue(), "m".repeat(size)));
                Map<String, Object> m = tp(e.getKey());
                m.put("offset", e.getValue());
                offsets.add(m);
                i++;
            }
            long h = w.invoke(process, "commit_offsets", map("group", group, "offsets", offsets), null, false);
            try {
                consumer.commitSync(commit, Duration.ofMillis((long) (opTimeout * 1000)));
                w.ok(h, map("group", group, "offsets", offsets));
            } catch (KafkaException | IllegalStateException e) {
                w.info(h, describe(e));
            }
        }

        void fetchOffsets() {
            List<Map<String, Object>> parts = new ArrayList<>();
            tps.forEach(tp -> parts.add(tp(tp)));
            long h = w.invoke(process, "fetch_offsets", timed(map("group", group, "partitions", parts), fetchTimeout), null, false);
            Map<TopicPartition, OffsetAndMetadata> committed;
            try {
                committed = consumer.committed(new HashSet<>(tps), Duration.ofMillis((long) (fetchTimeout * 1000)));
            } catch (KafkaException e) {
                w.fail(h, describe(e));
                return;
            }
            List<Map<String, Object>> offsets = new ArrayList<>();
            for (TopicPartition tp : tps) {
                Map<String, Object> m = tp(tp);
                OffsetAndMetadata c = committed.get(tp);
                m.put("offset", c == null ? null : c.offset());
                offsets.add(m);
            }
            w.ok(h, map("group", group, "offsets", offsets));
        }

        void close() { consumer.close(Duration.ofMillis((long) (opTimeout * 1000))); }
    }

    /** Consume-transform-produce (clients.py's Pipeline). */
    static final class Pipeline extends TxnProducer {
        final String input, output;
        final boolean offsetsInTxn, rewindOnAbort, subscribe;
        Reader reader;

        Pipeline(String cid, Map<String, Object> spec, Ctx ctx, String process) {
            super(cid, spec, ctx, process);
            @SuppressWarnings("unchecked")
            Map<String, Object> p = (Map<String, Object>) settings.get("pipeline");
            offsetsInTxn = (Boolean) p.get("offsets_in_txn");
            rewindOnAbort = (Boolean) p.get("rewind_on_abort");
            subscribe = (Boolean) p.get("subscribe");
            input = (String) spec.get("input");
            output = (String) spec.get("output");
            newReader();
        }

        void newReader() {
            reader = new Reader(cid, spec, ctx, process, input, config("reader"), subscribe);
        }

        void run(Map<String, Object> op, int lane) throws Exception {
            if ("process".equals(op.get("f"))) process(op);
            else super.run(op, lane);
        }

        /** One transaction (clients.py's Pipeline.op_process): `rounds` of poll,
         * transform and send, a pause before round `pause_before` (rounds + 1: before the
         * offsets and the commit), then its offsets and the commit. */
        void process(Map<String, Object> op) {
            begin(op);
            if (txn == null) return;
            String t = txn;
            reader.revoked.clear();
            int rounds = integer(op, "rounds", 1);
            for (int k = 1; k <= rounds; k++) {
                pauseBefore(op, k, rounds);
                List<Map<String, Object>> inputs = reader.poll(map("n", integer(op, "n", 5), "timeout", number(op, "timeout", 1.0)), t);
                for (Map<String, Object> r : inputs) if (reader.revoked.contains(r.get("partition"))) mustAbort = true;
                int outParts = ctx.partitions.get(output);
                List<Map<String, Object>> outputs = new ArrayList<>();
                for (Map<String, Object> r : inputs) {
                    long v = ctx.value();
                    Map<String, Object> o = map("topic", output, "partition", (Integer) r.get("partition") % outParts,
                            "key", r.get("key"), "value", v, "source", r.get("value"));
                    Integer size = ctx.values.size(v);
                    if (size != null) o.put("size", size);
                    outputs.add(o);
                }
                if (!outputs.isEmpty() && producer != null) {
                    Sent s = send(w, producer, process, outputs, ctx, t, opTimeout);
                    for (Throwable e : s.errors) onError(e);
                }
                if (producer == null || mustAbort) break;
            }
            pauseBefore(op, rounds + 1, rounds);
            Map<TopicPartition, Long> positions = reader.knownPositions();
            if (offsetsInTxn && !positions.isEmpty() && !mustAbort && producer != null) sendOffsets(reader, t, positions, true);
            if (Boolean.TRUE.equals(op.get("crash")) && offsetsInTxn) {
                crashAndReturn();
                return;
            }
            boolean committed;
            if (Boolean.TRUE.equals(op.get("abort")) || mustAbort || producer == null) {
                abort(op);
                committed = false;
            } else {
                committed = commit(op);
            }
            if (committed && !offsetsInTxn) {
                if (Boolean.TRUE.equals(op.get("crash"))) {
                    crashAndReturn();
                    return;
                }
                reader.commitPositions(null);
            }
            if (!committed && rewindOnAbort) rewind();
        }

        static void pauseBefore(Map<String, Object> op, int before, int rounds) {
            if (before > 1 && integer(op, "pause_before", rounds + 1) == before) pause(op);
        }

        /** Come back as a restarted process would, within this one: new clients (the
         * harness's own crashes kill the whole process instead). */
        void crashAndReturn() {
            Reader old = reader;
            Thread t = new Thread(() -> {
                try { old.consumer.close(Duration.ZERO); } catch (RuntimeException ignored) { }
            });
            t.setDaemon(true);
            t.start();
            dropProducer();
            txn = null;
            mustAbort = false;
            newReader();
        }

        void rewind() {
            long deadline = System.nanoTime() + (long) (opTimeout * 1e9);
            while (System.nanoTime() < deadline) {
                Map<TopicPartition, Long> offsets = reader.resolve("committed", 0, fetchTimeout);
                if (offsets != null && reader.seekTo(offsets, null)) return;
                try { Thread.sleep(200); } catch (InterruptedException e) { Thread.currentThread().interrupt(); return; }
            }
            reader.close();
            newReader();
        }

        void close() {
            reader.close();
            dropProducer();
        }
    }

    /** Transactions that poll and send on one topic (clients.py's ReadWriteTxn); with
     * `offsets_in_txn`, each that read sends its group's offsets before it commits. */
    static final class ReadWriteTxn extends TxnProducer {
        Reader reader;
        Map<Integer, Long> start;

        ReadWriteTxn(String cid, Map<String, Object> spec, Ctx ctx, String process) {
            super(cid, spec, ctx, process);
            newReader();
        }

        void newReader() {
            reader = new Reader(cid, spec, ctx, process, null, config("reader"), false);
        }

        void run(Map<String, Object> op, int lane) throws Exception {
            if ("poll".equals(op.get("f"))) {
                if (txn == null || mustAbort) return;
                if (start == null) start = new HashMap<>(reader.positions);
                reader.poll(op, txn);
            } else {
                super.run(op, lane);
            }
        }

        boolean commit(Map<String, Object> op) {
            if (Boolean.TRUE.equals(spec.get("offsets_in_txn")) && txn != null && start != null
                    && !mustAbort && producer != null) {
                Map<TopicPartition, Long> positions = reader.knownPositions();
                if (!positions.isEmpty()) sendOffsets(reader, txn, positions, false);
            }
            boolean committed = super.commit(op);
            if (committed) start = null;
            else rewind();
            return committed;
        }

        void abort(Map<String, Object> op) {
            boolean opened = txn != null;
            super.abort(op);
            if (opened) rewind();
        }

        void rewind() {
            if (start != null) {
                try {
                    reader.seekTo(reader.at(start, 0), null);
                } catch (KafkaException e) {
                    reader.close();
                    newReader();
                }
            }
            start = null;
        }

        void close() {
            reader.close();
            dropProducer();
        }
    }

    /** A Kafka Streams application instance (role `streams`): reads its input topic and
     * writes one output per input to its output topic, with the guarantee the plan names.
     *
     * Its own reads, writes and commits happen inside Streams, unseen: the history gets
     * only its `streams` ops (what it declares, its state and tasks), and the checks
     * judge it from its input and output topics (checkers/streams.py). So each output
     * names its input in its value: the input's value shifted left 32 bits, and, for
     * the `fold` topology, in the low 32 bits the count (high 16) and sum (low 16) of
     * the values of its input partition folded so far, both mod 2^16, kept in a state
     * store with a changelog (in memory: restored from the changelog on each start). */
    static final class StreamsApp extends Client {
        static final String STORE = "fold";
        final KafkaStreams streams;
        final Map<String, Object> declared;

        @SuppressWarnings("unchecked")
        StreamsApp(String cid, Map<String, Object> spec, Ctx ctx, String process) throws Exception {
            super(cid, spec, ctx, process);
            Map<String, Object> app = (Map<String, Object>) settings.get("streams");
            String input = (String) app.get("input"), output = (String) app.get("output");
            String topology = (String) app.get("topology");
            declared = map("group", settings.get("group"), "input", input, "output", output,
                    "topology", topology, "guarantee", app.get("guarantee"));
            StreamsBuilder builder = new StreamsBuilder();
            KStream<String, byte[]> in = builder.stream(ctx.topic(input));
            KStream<String, byte[]> out;
            if (topology.equals("fold")) {
                builder.addStateStore(Stores.keyValueStoreBuilder(Stores.inMemoryKeyValueStore(STORE),
                        Serdes.Integer(), Serdes.Long()));
                out = in.processValues(Fold::new, STORE);
            } else {
                out = in.mapValues(v -> sameShape(v, Values.identity(v) << 32));
            }
            out.to(ctx.topic(output));
            Properties p = props(ctx.connection, (Map<String, Object>) app.get("config"),
                    StreamsConfig.APPLICATION_ID_CONFIG, settings.get("group"),
                    StreamsConfig.STATE_DIR_CONFIG,
                    java.nio.file.Files.createTempDirectory("onceproof-streams-").toString(),
                    StreamsConfig.DEFAULT_KEY_SERDE_CLASS_CONFIG, Serdes.StringSerde.class.getName(),
                    StreamsConfig.DEFAULT_VALUE_SERDE_CLASS_CONFIG, Serdes.ByteArraySerde.class.getName());
            streams = new KafkaStreams(builder.build(), p);
            // A stream thread that dies of an error (a timeout under a fault) is replaced,
            // as a service would restart it, rather than ending the application.
            streams.setUncaughtExceptionHandler(e -> StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse.REPLACE_THREAD);
            streams.start();
        }

        /** An `observe` op: the application's state and the input partitions it holds. */
        void run(Map<String, Object> op, int lane) throws Exception {
            long h = w.invoke(process, "streams", declared, null, false);
            Thread.sleep((long) (number(op, "wait", 1.0) * 1000));
            List<Map<String, Object>> parts = new ArrayList<>();
            try {
                streams.metadataForLocalThreads().forEach(t -> t.activeTasks().forEach(task ->
                        task.topicPartitions().forEach(tp -> parts.add(
                                map("topic", ctx.planTopic(tp.topic()), "partition", tp.partition())))));
            } catch (IllegalStateException e) {  // not running: no tasks to name
            }
            w.ok(h, map("state", streams.state().toString(), "partitions", parts));
        }

        void close() { streams.close(Duration.ofSeconds((long) opTimeout)); }
    }

    /** An output value of the same size and content as its input (a sized input's
     * header names them), for the identity `identity`. */
    static byte[] sameShape(byte[] input, long identity) {
        int[] shape = Values.shapeOf(input);
        return shape == null ? Values.make(identity, null, 'c') : Values.make(identity, shape[0], (char) shape[1]);
    }

    /** The fold: per input partition, the count and sum of the values so far. */
    static final class Fold implements FixedKeyProcessor<String, byte[], byte[]> {
        private FixedKeyProcessorContext<String, byte[]> context;
        private KeyValueStore<Integer, Long> store;

        @Override
        public void init(FixedKeyProcessorContext<String, byte[]> context) {
            this.context = context;
            this.store = context.getStateStore(StreamsApp.STORE);
        }

        @Override
        public void process(FixedKeyRecord<String, byte[]> r) {
            int partition = context.recordMetadata().map(m -> m.partition()).orElse(-1);
            long value = Values.identity(r.value());
            Long before = store.get(partition);
            long was = before == null ? 0 : before;
            long count = ((was >>> 16) + 1) & 0xFFFF;
            long sum = ((was & 0xFFFF) + value) & 0xFFFF;
            long folded = count << 16 | sum;
            store.put(partition, folded);
            context.forward(r.withValue(sameShape(r.value(), value << 32 | folded)));
        }
    }

    static Client make(String cid, Map<String, Object> spec, Ctx ctx, String process) throws Exception {
        @SuppressWarnings("unchecked")
        Map<String, Object> settings = (Map<String, Object>) spec.get("java");
        return switch ((String) spec.get("role")) {
            case "producer" -> new PlainProducer(cid, spec, ctx, process);
            case "txn_producer" -> new TxnProducer(cid, spec, ctx, process);
            case "consumer" -> new Reader(cid, spec, ctx, process, null, settingsConfig(settings),
                    Boolean.TRUE.equals(settings.get("subscribe")));
            case "pipeline" -> new Pipeline(cid, spec, ctx, process);
            case "rw_txn" -> new ReadWriteTxn(cid, spec, ctx, process);
            case "streams" -> new StreamsApp(cid, spec, ctx, process);
            default -> throw new IllegalArgumentException("no role " + spec.get("role"));
        };
    }

    @SuppressWarnings("unchecked")
    static Map<String, Object> settingsConfig(Map<String, Object> settings) {
        return (Map<String, Object>) settings.get("consumer");
    }

    // ---- the process ------------------------------------------------------------------------

    static String trace(Throwable e) {
        StringWriter s = new StringWriter();
        e.printStackTrace(new PrintWriter(s));
        return s.toString();
    }

    /** What a request ended with: the kind host.py's HostedClient turns into an outcome. */
    static Object[] outcome(Throwable e) {
        if (e instanceof KafkaException || e instanceof IllegalStateException) return new Object[]{KAFKA, describe(e)};
        return new Object[]{BUG, trace(e)};
    }

    @SuppressWarnings("unchecked")
    public static void main(String[] args) throws Exception {
        if (args.length == 4 && args[0].equals("--value")) {
            // One value as the agent makes it (identity, size, content), then how it reads
            // it back: tests/test_values.py holds it to run/values.py byte for byte.
            Values shape = new Values(map("sizes", List.of(Integer.parseInt(args[2])), "content", args[3]));
            byte[] made = shape.encode(Long.parseLong(args[1]), Integer.parseInt(args[2]));
            System.out.println(java.util.HexFormat.of().formatHex(made) + " " + String.join(",",
                    java.util.Arrays.stream(Values.decode(made)).mapToObj(String::valueOf).toList()));
            return;
        }
        if (args.length > 0 && args[0].equals("--config-names")) {
            System.out.println(JSON.writeValueAsString(map(
                    "producer", new java.util.TreeSet<>(ProducerConfig.configNames()),
                    "consumer", new java.util.TreeSet<>(ConsumerConfig.configNames()),
                    "streams", new java.util.TreeSet<>(StreamsConfig.configDef().names()))));
            return;
        }
        // The wire is stdout; anything a library prints goes to stderr.
        PrintStream stdout = System.out;
        System.setOut(System.err);
        Wire wire = new Wire(stdout);
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line = in.readLine();
        if (line == null) return;
        List<Object> start = JSON.readValue(line, List.class);
        String cid = (String) start.get(START_CID);
        Map<String, Object> spec = (Map<String, Object>) start.get(START_SPEC);
        Map<String, Object> context = (Map<String, Object>) start.get(START_CONTEXT);
        String process = (String) start.get(START_PROCESS);
        Map<String, Object> t = (Map<String, Object>) context.get("timeouts");
        opTimeout = number(t, "op", 20);
        fetchTimeout = number(t, "fetch", 10);
        hangGrace = number(t, "hang_grace", 10);
        startTimeout = number(t, "start", 2);
        commitAttempts = integer(t, "commit_attempts", 3);
        Ctx ctx = new Ctx(context, wire);
        Client[] made = new Client[1];
        CompletableFuture<Void> ready = new CompletableFuture<>();
        // Making a client records ops (a consumer's assign), whose invokes wait for the
        // harness's answers, which the loop below reads: so it is made in a thread.
        Thread maker = new Thread(() -> {
            try {
                made[0] = make(cid, spec, ctx, process);
                // Ready before the harness hears so: it sends its first request at once.
                ready.complete(null);
                wire.send(DONE, START_REQUEST, null, null);
            } catch (Throwable e) {
                Object[] o = outcome(e);
                wire.send(DONE, START_REQUEST, o[0], o[1]);
            }
        }, "onceproof-make");
        maker.setDaemon(true);
        maker.start();
        Map<Object, LinkedBlockingQueue<List<Object>>> lanes = new HashMap<>();
        while ((line = in.readLine()) != null) {
            List<Object> message = JSON.readValue(line, List.class);
            String kind = (String) message.get(0);
            if (kind.equals(WRITTEN)) {
                wire.answered(((Number) message.get(WRITTEN_LOCAL)).longValue(), null);
            } else if (kind.equals(VALUES)) {
                wire.answered(((Number) message.get(TO_CLIENT_VALUES_LOCAL)).longValue(),
                              message.get(TO_CLIENT_VALUES_FIRST));
            } else if (ready.isDone()) {  // the harness asks for nothing before the client is made
                Object lane = kind.equals(RUN) ? message.get(RUN_LANE) : CLOSE;
                LinkedBlockingQueue<List<Object>> queue = lanes.computeIfAbsent(lane, k -> {
                    LinkedBlockingQueue<List<Object>> q = new LinkedBlockingQueue<>();
                    Thread l = new Thread(() -> serveLane(made[0], wire, q), "onceproof-lane-" + k);
                    l.setDaemon(true);
                    l.start();
                    return q;
                });
                queue.add(message);
            }
        }
        Runtime.getRuntime().halt(0);  // the harness is gone
    }

    @SuppressWarnings("unchecked")
    static void serveLane(Client client, Wire wire, LinkedBlockingQueue<List<Object>> requests) {
        while (true) {
            List<Object> message;
            try {
                message = requests.take();
            } catch (InterruptedException e) {
                return;
            }
            boolean run = message.get(0).equals(RUN);
            Object req = message.get(run ? RUN_REQ : CLOSE_REQ);
            try {
                if (run) {
                    client.run((Map<String, Object>) message.get(RUN_OP),
                               ((Number) message.get(RUN_LANE)).intValue());
                } else {
                    client.close();
                }
                Iterator<String> stuck = abandoned.iterator();
                if (stuck.hasNext()) wire.send(DONE, req, STUCK, stuck.next());
                else wire.send(DONE, req, null, null);
            } catch (Throwable e) {
                Object[] o = outcome(e);
                wire.send(DONE, req, o[0], o[1]);
            }
        }
    }
}
