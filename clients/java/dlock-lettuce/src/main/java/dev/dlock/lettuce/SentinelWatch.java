package dev.dlock.lettuce;

import dev.dlock.DLockConnectionException;
import io.lettuce.core.ClientOptions;
import io.lettuce.core.RedisClient;
import io.lettuce.core.RedisURI;
import io.lettuce.core.codec.StringCodec;
import io.lettuce.core.protocol.ProtocolVersion;
import io.lettuce.core.pubsub.RedisPubSubAdapter;
import io.lettuce.core.pubsub.StatefulRedisPubSubConnection;
import io.lettuce.core.resource.ClientResources;
import java.net.InetSocketAddress;
import java.net.SocketAddress;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.atomic.AtomicReference;
import java.util.function.Consumer;

/**
 * Listens to every Sentinel of a {@link RedisURI} for {@code +switch-master} of its master, and
 * runs a callback when the master's address changes, so that the transport drops its connections
 * to the old master (which, after a {@code SENTINEL FAILOVER}, still answers as a master until the
 * Sentinel demotes it) and its next connections resolve the new one.
 *
 * <p>These subscriptions reconnect on their own (Lettuce's default): {@code SUBSCRIBE} and
 * {@code SENTINEL GET-MASTER-ADDR-BY-NAME} are safe to send again. Each (re)subscription asks
 * that Sentinel for the master's address, so a switch announced while a connection was down is
 * still noticed.
 */
final class SentinelWatch implements AutoCloseable {
    private static final String CHANNEL = "+switch-master";

    private final RedisClient client;
    private final String masterId;
    private final Consumer<String> onSwitch;
    private final List<StatefulRedisPubSubConnection<String, String>> subscriptions = new CopyOnWriteArrayList<>();
    /** The master's address as last announced or asked for ("host:port"), null before the first answer. */
    private final AtomicReference<String> master = new AtomicReference<>();

    private SentinelWatch(RedisClient client, String masterId, Consumer<String> onSwitch) {
        this.client = client;
        this.masterId = masterId;
        this.onSwitch = onSwitch;
    }

    /**
     * Subscribes to every Sentinel of {@code uri} that answers.
     *
     * @param resources the event loops to run on (the transport's)
     * @param uri a URI with Sentinels and a master id
     * @param onSwitch given the new master's address ("ip:port") when it changes (on an event
     *     loop: must not block)
     * @return the watch
     * @throws DLockConnectionException when no Sentinel answers
     */
    static SentinelWatch start(ClientResources resources, RedisURI uri, Consumer<String> onSwitch) {
        RedisClient client = RedisClient.create(resources);
        client.setOptions(ClientOptions.builder().protocolVersion(ProtocolVersion.RESP2).build());
        SentinelWatch watch = new SentinelWatch(client, uri.getSentinelMasterId(), onSwitch);
        RuntimeException failure = null;
        for (RedisURI sentinel : uri.getSentinels()) {
            try {
                StatefulRedisPubSubConnection<String, String> connection = client.connectPubSub(StringCodec.UTF8, sentinel);
                connection.addListener(watch.new Listener(sentinel));
                connection.sync().subscribe(CHANNEL);
                watch.subscriptions.add(connection);
            } catch (RuntimeException e) {
                failure = e;
            }
        }
        if (watch.subscriptions.isEmpty()) {
            client.shutdown(Duration.ZERO, Duration.ofSeconds(2));
            String reason = failure == null ? "none given" : failure.getMessage();
            throw new DLockConnectionException("no Sentinel of " + uri + " answers: " + reason, failure);
        }
        return watch;
    }

    private static String address(String host, Object port) {
        return host + ":" + port;
    }

    /**
     * @param socket a server's socket address
     * @return "ip:port" (the host name when it was not resolved), as Sentinel writes addresses
     */
    static String address(SocketAddress socket) {
        if (socket instanceof InetSocketAddress inet) {
            String host = inet.getAddress() != null ? inet.getAddress().getHostAddress() : inet.getHostString();
            return address(host, inet.getPort());
        }
        return String.valueOf(socket);
    }

    /** @return the master's address ("ip:port") as last announced or asked for; null before the first answer */
    String master() {
        return master.get();
    }

    /** A switch announced by a Sentinel: any address other than the one known is a change. */
    private void announced(String address) {
        String before = master.getAndSet(address);
        if (!address.equals(before)) {
            onSwitch.accept(address);
        }
    }

    /** An address asked for: a change only when another was known (the first answer is a baseline). */
    private void observed(String address) {
        String before = master.getAndSet(address);
        if (before != null && !before.equals(address)) {
            onSwitch.accept(address);
        }
    }

    private void ask(RedisURI sentinel) {
        client.connectSentinelAsync(StringCodec.UTF8, sentinel).thenCompose(connection -> connection.async()
                .getMasterAddrByName(masterId)
                .whenComplete((reply, error) -> connection.closeAsync()))
                .thenAccept(reply -> {
                    if (reply != null) {
                        observed(address(reply));
                    }
                })
                .exceptionally(error -> null); // the next (re)subscription asks again
    }

    private final class Listener extends RedisPubSubAdapter<String, String> {
        private final RedisURI sentinel;

        Listener(RedisURI sentinel) {
            this.sentinel = sentinel;
        }

        @Override
        public void message(String channel, String message) {
            // "<master name> <old ip> <old port> <new ip> <new port>"
            String[] parts = message.split(" ");
            if (CHANNEL.equals(channel) && parts.length >= 5 && parts[0].equals(masterId)) {
                announced(address(parts[3], parts[4]));
            }
        }

        @Override
        public void subscribed(String channel, long count) {
            ask(sentinel);
        }
    }

    @Override
    public void close() {
        for (StatefulRedisPubSubConnection<String, String> connection : subscriptions) {
            connection.close();
        }
        // The resources are the transport's: shutting this client down leaves them running.
        client.shutdown(Duration.ZERO, Duration.ofSeconds(2));
    }
}
