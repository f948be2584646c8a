package dev.snowmint.client;

/**
 * An opaque public ID, as a server started with {@code --opaque-key-file} hands it out: the
 * ID put through the server's keyed permutation ({@link #value()}, from 0 to 2^63 - 1) and the
 * version of the key ({@link #keyVersion()}, 0 to 31). Only the server's key maps it back to
 * the ID; this class reads and writes its string form, which needs no key.
 *
 * <p>The string form ({@link #toString()}, {@link #parse(String)}) is 14 characters of
 * Crockford base32: the key version, then the value in 13 characters, most significant first.
 * Values are unique per key version; strings, which carry the version, stay unique across key
 * rotations.
 *
 * @param keyVersion the key version, 0 to 31
 * @param value      the opaque value, 0 to 2^63 - 1 (never negative as a {@code long})
 */
public record OpaqueId(int keyVersion, long value) {

    /** Crockford's base32: digits and capitals without I, L, O and U. */
    public static final String ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ";

    /** The length of the string form: a key version and 13 characters of value. */
    public static final int TEXT_LENGTH = 14;

    /** Why a string or a pair is not an opaque ID, as the shared test vectors name it. */
    public enum ErrorKind {
        /** A character outside Crockford base32 (after its aliases and hyphens). */
        CHARACTER,
        /** Not 14 characters without its hyphens. */
        LENGTH,
        /** A value of 2^63 or more. */
        RANGE,
        /** A key version outside 0 to 31. */
        VERSION
    }

    /** Not an opaque ID; {@link #kind()} says why. */
    public static final class FormatException extends IllegalArgumentException {
        private static final long serialVersionUID = 1L;
        private final ErrorKind kind;

        FormatException(ErrorKind kind, String message) {
            super(message);
            this.kind = kind;
        }

        /** Why. */
        public ErrorKind kind() {
            return kind;
        }
    }

    /**
     * Checks both fields.
     *
     * @throws FormatException with {@link ErrorKind#VERSION} or {@link ErrorKind#RANGE}
     */
    public OpaqueId {
        if (keyVersion < 0 || keyVersion > 31) {
            throw new FormatException(ErrorKind.VERSION, "key version " + keyVersion + " is not between 0 and 31");
        }
        if (value < 0) {
            throw new FormatException(ErrorKind.RANGE,
                    Long.toUnsignedString(value) + " is not a 63-bit value: opaque values are below 2^63");
        }
    }

    /**
     * Reads a string form. Lower case reads as upper case, O as 0, I and L as 1, and hyphens
     * anywhere are ignored; then, in this order, any other character, a length other than 14
     * without hyphens, and a value of 2^63 or more are refused.
     *
     * @throws FormatException with {@link ErrorKind#CHARACTER}, {@link ErrorKind#LENGTH} or
     *                         {@link ErrorKind#RANGE}
     */
    public static OpaqueId parse(String text) {
        int[] symbols = new int[TEXT_LENGTH];
        int n = 0;
        int at = 0;
        for (int i = 0; i < text.length(); i = text.offsetByCodePoints(i, 1)) {
            int c = text.codePointAt(i);
            at++;
            if (c == '-') {
                continue;
            }
            int symbol = symbol(c);
            if (symbol < 0) {
                throw new FormatException(ErrorKind.CHARACTER, "opaque ID \"" + text + "\": '"
                        + new String(Character.toChars(c)) + "' (character " + at + ") is not Crockford base32");
            }
            if (n < TEXT_LENGTH) {
                symbols[n] = symbol;
            }
            n++;
        }
        if (n != TEXT_LENGTH) {
            throw new FormatException(ErrorKind.LENGTH,
                    "opaque ID \"" + text + "\" has " + n + " characters without its hyphens, not 14");
        }
        if (symbols[1] >= 8) {
            throw new FormatException(ErrorKind.RANGE, "opaque ID \"" + text + "\" holds a value of 2^63 or more");
        }
        long value = 0;
        for (int i = 1; i < TEXT_LENGTH; i++) {
            value = value << 5 | symbols[i];
        }
        return new OpaqueId(symbols[0], value);
    }

    /** The value of one character, with its aliases (lower case, O for 0, I and L for 1), or -1. */
    private static int symbol(int c) {
        if (c > 127) {
            return -1;
        }
        char upper = Character.toUpperCase((char) c);
        return switch (upper) {
            case 'O' -> 0;
            case 'I', 'L' -> 1;
            default -> ALPHABET.indexOf(upper);
        };
    }

    /** The string form: 14 characters of Crockford base32. */
    @Override
    public String toString() {
        char[] text = new char[TEXT_LENGTH];
        text[0] = ALPHABET.charAt(keyVersion);
        for (int i = 1; i < TEXT_LENGTH; i++) {
            text[i] = ALPHABET.charAt((int) (value >>> (5 * (TEXT_LENGTH - 1 - i))) & 31);
        }
        return new String(text);
    }
}
