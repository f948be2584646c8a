package dev.snowmint.client;

import java.util.Comparator;
import java.util.Objects;
import java.util.UUID;

/**
 * The UUIDv7s snowmint mints ({@link SnowmintClient#nextUuid()},
 * {@link SnowmintClient#batchUuids(int)}), as {@link UUID}s: their strict text form, their 16
 * bytes and their order. {@link Layout#decodeUuid(UUID)} reads what one carries.
 *
 * <p>The text form is 36 ASCII characters: 32 hex digits in groups of 8-4-4-4-12, written in
 * lower case ({@link #formatUuid(UUID)}, the same as {@link UUID#toString()}) and read in
 * either case ({@link #parseUuid(String)}), with nothing else around them. It is what the
 * server writes and reads, so every client reads the same strings. Use
 * {@link #parseUuid(String)} rather than {@link UUID#fromString(String)}, which also takes
 * strings such as {@code "1-1-1-1-1"}.
 *
 * <p>A snowmint UUID's 128 bits, most significant first: 48 bits of Unix milliseconds (the
 * start of the tick of the ID it was made from), the version 7 in 4 bits, the top 12 bits of
 * the 42-bit minted field ({@code slot << 22 | sequence}), the variant {@code 0b10} in 2 bits,
 * the other 30 bits of the minted field, then 32 random bits. The UUIDs of one server strictly
 * increase as unsigned 128-bit numbers ({@link #ORDER}), which is also the order of their
 * bytes and of their text.
 */
public final class Uuids {

    /** The length of a UUID in bytes. */
    public static final int BYTES = 16;

    /** The length of the text form: 32 hex digits and 4 hyphens. */
    public static final int TEXT_LENGTH = 36;

    /**
     * The order of UUIDs as unsigned 128-bit numbers: the order of their bytes and of their
     * text, in which the UUIDs of one server strictly increase. {@link UUID#compareTo(UUID)}
     * compares the two halves as signed {@code long}s on Java 17, which is not that order for
     * every UUID.
     */
    public static final Comparator<UUID> ORDER = Uuids::compare;

    private static final char[] HEX = "0123456789abcdef".toCharArray();

    private Uuids() {}

    /**
     * Reads a UUID's text form: exactly 36 ASCII characters, hex digits of either case with
     * {@code '-'} at indexes 8, 13, 18 and 23, and nothing else (no braces, no
     * {@code urn:uuid:}, no spaces, not the 32 digits alone).
     *
     * @throws InvalidUuidException (an {@link IllegalArgumentException}) of kind
     *                             {@link InvalidUuidException.Kind#TEXT} for anything else
     */
    public static UUID parseUuid(String text) {
        Objects.requireNonNull(text, "text");
        if (text.length() != TEXT_LENGTH) {
            throw notText(text, "not 36 characters long");
        }
        long most = 0;
        long least = 0;
        int digits = 0;
        for (int i = 0; i < TEXT_LENGTH; i++) {
            char c = text.charAt(i);
            if (i == 8 || i == 13 || i == 18 || i == 23) {
                if (c != '-') {
                    throw notText(text, "no hyphen after a group");
                }
                continue;
            }
            int digit = hexDigit(c);
            if (digit < 0) {
                throw notText(text, "a character that is not a hex digit");
            }
            if (digits < 16) {
                most = most << 4 | digit;
            } else {
                least = least << 4 | digit;
            }
            digits++;
        }
        return new UUID(most, least);
    }

    /** The canonical text form: lower-case hex digits in groups of 8-4-4-4-12, as {@link UUID#toString()}. */
    public static String formatUuid(UUID uuid) {
        char[] text = new char[TEXT_LENGTH];
        int at = 0;
        for (int nibble = 0; nibble < 32; nibble++) {
            if (nibble == 8 || nibble == 12 || nibble == 16 || nibble == 20) {
                text[at++] = '-';
            }
            long half = nibble < 16 ? uuid.getMostSignificantBits() : uuid.getLeastSignificantBits();
            text[at++] = HEX[(int) (half >>> (60 - 4 * (nibble % 16))) & 0xf];
        }
        return new String(text);
    }

    /**
     * The UUID of 16 bytes, most significant first (as the API and RFC 9562 send it).
     *
     * @throws IllegalArgumentException for any other length
     */
    public static UUID fromBytes(byte[] bytes) {
        if (bytes.length != BYTES) {
            throw new IllegalArgumentException("a UUID is 16 bytes, got " + bytes.length);
        }
        long most = 0;
        long least = 0;
        for (int i = 0; i < 8; i++) {
            most = most << 8 | (bytes[i] & 0xff);
            least = least << 8 | (bytes[i + 8] & 0xff);
        }
        return new UUID(most, least);
    }

    /** The 16 bytes of a UUID, most significant first. */
    public static byte[] toBytes(UUID uuid) {
        byte[] bytes = new byte[BYTES];
        long most = uuid.getMostSignificantBits();
        long least = uuid.getLeastSignificantBits();
        for (int i = 7; i >= 0; i--) {
            bytes[i] = (byte) most;
            bytes[i + 8] = (byte) least;
            most >>>= 8;
            least >>>= 8;
        }
        return bytes;
    }

    /** Compares two UUIDs as unsigned 128-bit numbers ({@link #ORDER}). */
    public static int compare(UUID a, UUID b) {
        int most = Long.compareUnsigned(a.getMostSignificantBits(), b.getMostSignificantBits());
        return most != 0 ? most : Long.compareUnsigned(a.getLeastSignificantBits(), b.getLeastSignificantBits());
    }

    private static int hexDigit(char c) {
        if (c >= '0' && c <= '9') {
            return c - '0';
        }
        if (c >= 'a' && c <= 'f') {
            return c - 'a' + 10;
        }
        if (c >= 'A' && c <= 'F') {
            return c - 'A' + 10;
        }
        return -1;
    }

    private static InvalidUuidException notText(String text, String reason) {
        String shown = text.length() > 64 ? text.substring(0, 64) + "..." : text;
        return new InvalidUuidException(InvalidUuidException.Kind.TEXT, "\"" + shown
                + "\" is not a UUID's text form (36 characters: hex digits in groups of 8-4-4-4-12): " + reason);
    }
}
