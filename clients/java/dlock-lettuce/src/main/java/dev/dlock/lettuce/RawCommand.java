package dev.dlock.lettuce;

import io.lettuce.core.protocol.ProtocolKeyword;
import java.nio.charset.StandardCharsets;

/** A command name for {@code dispatch}: dlock's module commands are unknown to Lettuce. */
final class RawCommand implements ProtocolKeyword {
    private final byte[] name;

    RawCommand(byte[] name) {
        this.name = name;
    }

    @Override
    public byte[] getBytes() {
        return name;
    }

    @Override
    public String toString() {
        return new String(name, StandardCharsets.UTF_8);
    }
}
