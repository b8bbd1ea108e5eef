package zkcoord.kafka;

import java.io.BufferedReader;
import java.io.FileInputStream;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.OutputStreamWriter;
import java.io.PrintWriter;
import java.io.Reader;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collection;
import java.util.Comparator;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;

import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.WakeupException;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

/**
 * N members of consumer groups in one JVM: each a reference {@link KafkaConsumer}
 * on a thread of its own, subscribed to the same topics, committing
 * synchronously what it has processed after every poll (and what it has
 * processed of the partitions it loses, before it lets them go).
 *
 * <pre>
 * java -cp DRIVER_JAR:KAFKA_JARS zkcoord.kafka.MemberDriver --topics t1,t2 [--members N]
 *      [--properties FILE] [--instance-id-prefix P] [--records each|ranges] [--poll-ms MS]
 *      [--start now|go] [key=value ...]
 * </pre>
 *
 * Consumer properties come from FILE, then from the key=value arguments
 * (bootstrap.servers, group.id, group.protocol, partition.assignment.strategy,
 * session.timeout.ms, ...). The driver sets enable.auto.commit=false (it
 * commits itself), byte-array deserializers, and per member a client.id of
 * {@code <client.id or group.id>-<i>} and, with --instance-id-prefix, a
 * group.instance.id of {@code <prefix>-<i>} (static membership). With
 * {@code --start go}, each member, once created and subscribed, waits for
 * the {@code go} command before its first poll (so that members of several
 * JVMs, or created over seconds, join their group together); by default it
 * polls at once.
 *
 * <p>Stdout carries one JSON object per line, each with "event", "member" (the
 * index, from 0; absent for the driver's own) and "ts" (epoch milliseconds):
 * <ul>
 * <li>{@code started}: the consumer was created and subscribed;</li>
 * <li>{@code assigned}, {@code revoked}, {@code lost}: from the rebalance
 *     listener, "partitions": [[topic, partition], ...];</li>
 * <li>{@code record}: "topic", "partition", "offset" of each record consumed
 *     (--records each, the default), or {@code records}: "topic",
 *     "partition", "first", "last", "count" per partition per poll
 *     (--records ranges, for runs too large for a line per record);</li>
 * <li>{@code committed}: "offsets": [[topic, partition, next offset], ...];</li>
 * <li>{@code error}: "phase" (create, poll, commit, close), "class" (the
 *     exception's class), "message": every exception the consumer throws;
 *     after one from create the member is closed, after others it polls on;</li>
 * <li>{@code closed}: the member's consumer is closed (it left its group);</li>
 * <li>{@code ready} (no member): every member is started; {@code go} (no
 *     member): the go command released the members' first poll;
 *     {@code exit}: the driver ends.</li>
 * </ul>
 * Stdin takes one command a line: {@code go} (with --start go: the members
 * start polling), {@code close I} (member I leaves cleanly),
 * {@code quit} (every member leaves, then the driver exits). End of input
 * is a quit, so the driver never outlives whoever started it. The Kafka
 * client's own log goes to stderr.
 */
public final class MemberDriver {
    private static final Object OUT_LOCK = new Object();
    /** Released by the go command (at once without --start go, and at the end in any case). */
    private static final CountDownLatch GO = new CountDownLatch(1);
    private static final PrintWriter OUT =
            new PrintWriter(new OutputStreamWriter(System.out, StandardCharsets.UTF_8), false);

    private MemberDriver() {
    }

    public static void main(String[] args) throws Exception {
        Options options;
        try {
            options = Options.parse(args);
        } catch (IllegalArgumentException e) {
            System.err.println("member-driver: " + e.getMessage());
            System.exit(2);
            return;
        }
        if (!options.startOnGo) {
            GO.countDown();
        }
        List<Member> members = new ArrayList<>();
        for (int i = 0; i < options.members; i++) {
            members.add(new Member(i, options));
        }
        for (Member member : members) {
            member.thread.start();
        }
        for (Member member : members) {
            member.started.await();
        }
        emit(new Event("ready", -1).put("members", options.members));
        readCommands(members);
        GO.countDown();  // members still waiting for go close at once
        for (Member member : members) {
            member.requestClose();
        }
        for (Member member : members) {
            member.thread.join();
        }
        emit(new Event("exit", -1));
        System.exit(0);
    }

    private static void readCommands(List<Member> members) throws IOException {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            String[] words = line.trim().split("\\s+");
            if (words[0].equals("quit")) {
                return;
            }
            if (words[0].equals("go") && words.length == 1) {
                if (GO.getCount() > 0) {
                    emit(new Event("go", -1));  // before any member's first poll
                    GO.countDown();
                }
                continue;
            }
            if (words[0].equals("close") && words.length == 2) {
                try {
                    members.get(Integer.parseInt(words[1])).requestClose();
                    continue;
                } catch (NumberFormatException | IndexOutOfBoundsException e) {
                    // reported below
                }
            }
            if (!words[0].isEmpty()) {
                emit(new Event("error", -1).put("phase", "command").put("class", "IllegalArgumentException")
                        .put("message", "unknown command: " + line.trim()));
            }
        }
    }

    static void emit(Event event) {
        synchronized (OUT_LOCK) {
            OUT.println(event.json());
            OUT.flush();
        }
    }

    /** Records are many: written together, flushed once per poll. */
    static void emitAll(List<Event> events) {
        if (events.isEmpty()) {
            return;
        }
        synchronized (OUT_LOCK) {
            for (Event event : events) {
                OUT.println(event.json());
            }
            OUT.flush();
        }
    }

    /** The command line. */
    static final class Options {
        int members = 1;
        List<String> topics = new ArrayList<>();
        String instanceIdPrefix;
        boolean recordRanges;
        long pollMs = 100;
        boolean startOnGo;
        final Properties consumer = new Properties();

        static Options parse(String[] args) throws IOException {
            Options options = new Options();
            for (int i = 0; i < args.length; i++) {
                String arg = args[i];
                if (arg.startsWith("--")) {
                    if (i + 1 >= args.length) {
                        throw new IllegalArgumentException(arg + " needs a value");
                    }
                    String value = args[++i];
                    switch (arg) {
                        case "--members": options.members = positive(arg, value); break;
                        case "--topics": options.topics = Arrays.asList(value.split(",")); break;
                        case "--instance-id-prefix": options.instanceIdPrefix = value; break;
                        case "--poll-ms": options.pollMs = positive(arg, value); break;
                        case "--start":
                            if (!value.equals("now") && !value.equals("go")) {
                                throw new IllegalArgumentException("--start is now or go, not " + value);
                            }
                            options.startOnGo = value.equals("go");
                            break;
                        case "--records":
                            if (!value.equals("each") && !value.equals("ranges")) {
                                throw new IllegalArgumentException("--records is each or ranges, not " + value);
                            }
                            options.recordRanges = value.equals("ranges");
                            break;
                        case "--properties":
                            try (Reader reader = new InputStreamReader(new FileInputStream(value),
                                    StandardCharsets.UTF_8)) {
                                Properties file = new Properties();
                                file.load(reader);
                                file.forEach(options.consumer::putIfAbsent);
                            }
                            break;
                        default: throw new IllegalArgumentException("unknown option " + arg);
                    }
                } else if (arg.contains("=")) {
                    int at = arg.indexOf('=');
                    options.consumer.put(arg.substring(0, at), arg.substring(at + 1));
                } else {
                    throw new IllegalArgumentException("not an option nor key=value: " + arg);
                }
            }
            if (options.topics.isEmpty() || options.topics.contains("")) {
                throw new IllegalArgumentException("--topics names the topics to subscribe to");
            }
            return options;
        }

        private static int positive(String option, String value) {
            try {
                int n = Integer.parseInt(value);
                if (n > 0) {
                    return n;
                }
            } catch (NumberFormatException e) {
                // reported below
            }
            throw new IllegalArgumentException(option + " takes a positive integer, not " + value);
        }

        Properties forMember(int index) {
            Properties props = new Properties();
            props.putAll(consumer);
            props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
            props.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
            props.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
            String base = consumer.getProperty(ConsumerConfig.CLIENT_ID_CONFIG,
                    consumer.getProperty(ConsumerConfig.GROUP_ID_CONFIG, "member"));
            props.put(ConsumerConfig.CLIENT_ID_CONFIG, base + "-" + index);
            if (instanceIdPrefix != null) {
                props.put(ConsumerConfig.GROUP_INSTANCE_ID_CONFIG, instanceIdPrefix + "-" + index);
            }
            return props;
        }
    }

    /** One consumer and the thread that alone touches it (KafkaConsumer is not thread-safe). */
    static final class Member implements ConsumerRebalanceListener {
        final int index;
        final Options options;
        final Thread thread;
        final CountDownLatch started = new CountDownLatch(1);
        private volatile boolean closing;
        private volatile KafkaConsumer<byte[], byte[]> consumer;
        // Processed, not committed yet: committed after the poll, or before a revocation.
        private final Map<TopicPartition, OffsetAndMetadata> pending = new HashMap<>();

        Member(int index, Options options) {
            this.index = index;
            this.options = options;
            this.thread = new Thread(this::run, "member-" + index);
        }

        void requestClose() {
            closing = true;
            KafkaConsumer<byte[], byte[]> c = consumer;
            if (c != null) {
                c.wakeup();
            }
        }

        private void run() {
            try {
                consumer = new KafkaConsumer<>(options.forMember(index));
                consumer.subscribe(options.topics, this);
            } catch (RuntimeException e) {
                error("create", e);
                closeConsumer();
                started.countDown();
                return;
            }
            emit(new Event("started", index));
            started.countDown();
            try {
                GO.await();
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                closing = true;
            }
            Duration poll = Duration.ofMillis(options.pollMs);
            while (!closing) {
                try {
                    process(consumer.poll(poll));
                    commit(new HashMap<>(pending));
                } catch (WakeupException e) {
                    // closing, or a stray wakeup: the loop decides
                } catch (RuntimeException e) {
                    error("poll", e);
                    pause();
                }
            }
            closeConsumer();
        }

        private void process(ConsumerRecords<byte[], byte[]> records) {
            List<Event> events = new ArrayList<>();
            for (TopicPartition tp : records.partitions()) {
                List<ConsumerRecord<byte[], byte[]>> batch = records.records(tp);
                if (batch.isEmpty()) {
                    continue;
                }
                long last = batch.get(batch.size() - 1).offset();
                if (options.recordRanges) {
                    events.add(new Event("records", index).put("topic", tp.topic()).put("partition", tp.partition())
                            .put("first", batch.get(0).offset()).put("last", last).put("count", batch.size()));
                } else {
                    for (ConsumerRecord<byte[], byte[]> record : batch) {
                        events.add(new Event("record", index).put("topic", tp.topic())
                                .put("partition", tp.partition()).put("offset", record.offset()));
                    }
                }
                pending.put(tp, new OffsetAndMetadata(last + 1));
            }
            emitAll(events);
        }

        private void commit(Map<TopicPartition, OffsetAndMetadata> offsets) {
            if (offsets.isEmpty()) {
                return;
            }
            try {
                consumer.commitSync(offsets);
            } catch (WakeupException e) {
                throw e;
            } catch (RuntimeException e) {
                error("commit", e);
                return;
            }
            offsets.forEach(pending::remove);
            List<Object> committed = new ArrayList<>();
            for (TopicPartition tp : sorted(offsets.keySet())) {
                committed.add(Arrays.asList(tp.topic(), tp.partition(), offsets.get(tp).offset()));
            }
            emit(new Event("committed", index).put("offsets", committed));
        }

        private void closeConsumer() {
            KafkaConsumer<byte[], byte[]> c = consumer;
            if (c == null) {
                emit(new Event("closed", index));
                return;
            }
            try {
                c.close();
            } catch (RuntimeException e) {
                error("close", e);
            }
            emit(new Event("closed", index));
        }

        private void error(String phase, Throwable e) {
            emit(new Event("error", index).put("phase", phase).put("class", e.getClass().getName())
                    .put("message", String.valueOf(e.getMessage())));
        }

        /** After an error: the next poll would most likely meet the same one at once. */
        private void pause() {
            try {
                Thread.sleep(Math.min(options.pollMs, 200));
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }

        @Override
        public void onPartitionsRevoked(Collection<TopicPartition> partitions) {
            emit(partitionsEvent("revoked", partitions));
            // What was processed of them is committed before they go, so that nobody processes it again.
            Map<TopicPartition, OffsetAndMetadata> leaving = new HashMap<>();
            for (TopicPartition tp : partitions) {
                if (pending.containsKey(tp)) {
                    leaving.put(tp, pending.get(tp));
                }
            }
            commit(leaving);
            pending.keySet().removeAll(partitions);
        }

        @Override
        public void onPartitionsAssigned(Collection<TopicPartition> partitions) {
            emit(partitionsEvent("assigned", partitions));
        }

        @Override
        public void onPartitionsLost(Collection<TopicPartition> partitions) {
            emit(partitionsEvent("lost", partitions));
            pending.keySet().removeAll(partitions);  // no longer ours to commit
        }

        private Event partitionsEvent(String name, Collection<TopicPartition> partitions) {
            List<Object> named = new ArrayList<>();
            for (TopicPartition tp : sorted(partitions)) {
                named.add(Arrays.asList(tp.topic(), tp.partition()));
            }
            return new Event(name, index).put("partitions", named);
        }

        private static List<TopicPartition> sorted(Collection<TopicPartition> partitions) {
            List<TopicPartition> out = new ArrayList<>(partitions);
            out.sort(Comparator.comparing(TopicPartition::topic).thenComparingInt(TopicPartition::partition));
            return out;
        }
    }

    /** One line of output: a flat JSON object, built in insertion order. */
    static final class Event {
        private final StringBuilder json = new StringBuilder("{");

        Event(String name, int member) {
            put("event", name);
            if (member >= 0) {
                put("member", member);
            }
            put("ts", System.currentTimeMillis());
        }

        Event put(String key, Object value) {
            if (json.length() > 1) {
                json.append(',');
            }
            quote(key);
            json.append(':');
            value(value);
            return this;
        }

        private void value(Object value) {
            if (value == null) {
                json.append("null");
            } else if (value instanceof Number || value instanceof Boolean) {
                json.append(value);
            } else if (value instanceof List) {
                json.append('[');
                boolean first = true;
                for (Object item : (List<?>) value) {
                    if (!first) {
                        json.append(',');
                    }
                    first = false;
                    value(item);
                }
                json.append(']');
            } else {
                quote(value.toString());
            }
        }

        private void quote(String text) {
            json.append('"');
            for (int i = 0; i < text.length(); i++) {
                char c = text.charAt(i);
                switch (c) {
                    case '"': json.append("\\\""); break;
                    case '\\': json.append("\\\\"); break;
                    case '\n': json.append("\\n"); break;
                    case '\r': json.append("\\r"); break;
                    case '\t': json.append("\\t"); break;
                    default:
                        if (c < 0x20) {
                            json.append(String.format("\\u%04x", (int) c));
                        } else {
                            json.append(c);
                        }
                }
            }
            json.append('"');
        }

        String json() {
            return json + "}";
        }
    }
}
