package dev.dlock.lettuce;

import io.lettuce.core.codec.ByteArrayCodec;
import io.lettuce.core.output.CommandOutput;
import java.nio.ByteBuffer;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Deque;
import java.util.List;

/**
 * Decodes any reply into dlock's reply model: Long, byte[], List (nested), or null. Builds the
 * tree from the array headers' counts, so it does not depend on when the decoder signals that an
 * element completed.
 */
final class ReplyOutput extends CommandOutput<byte[], byte[], Object> {
    private static final class Level {
        final List<Object> items;
        final int expected;

        Level(int expected) {
            this.items = new ArrayList<>(expected);
            this.expected = expected;
        }
    }

    private final Deque<Level> stack = new ArrayDeque<>();

    ReplyOutput() {
        super(ByteArrayCodec.INSTANCE, null);
    }

    private void add(Object value) {
        Object item = value;
        while (true) {
            Level top = stack.peek();
            if (top == null) {
                output = item;
                return;
            }
            top.items.add(item);
            if (top.items.size() < top.expected) {
                return;
            }
            stack.pop();
            item = top.items;
        }
    }

    @Override
    public void set(ByteBuffer bytes) {
        add(bytes == null ? null : copy(bytes));
    }

    @Override
    public void setSingle(ByteBuffer bytes) {
        add(bytes == null ? null : copy(bytes));
    }

    @Override
    public void setBigNumber(ByteBuffer bytes) {
        add(bytes == null ? null : copy(bytes));
    }

    @Override
    public void set(long integer) {
        add(integer);
    }

    @Override
    public void set(double number) {
        add(number);
    }

    @Override
    public void set(boolean value) {
        add(value ? 1L : 0L);
    }

    @Override
    public void multi(int count) {
        if (count < 0) {
            add(null);
        } else if (count == 0) {
            add(new ArrayList<>(0));
        } else {
            stack.push(new Level(count));
        }
    }

    @Override
    public void multiMap(int count) {
        multi(count < 0 ? count : count * 2);
    }

    private static byte[] copy(ByteBuffer bytes) {
        byte[] out = new byte[bytes.remaining()];
        bytes.get(out);
        return out;
    }
}
